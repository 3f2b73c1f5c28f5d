/* SPDX-License-Identifier: MIT */
/*
 * The GPU paths of libnccl.so.2 (suite gpu: exits 77 without a GPU). Two
 * ranks in this process on GPU 0 (ncclCommInitAll with {0, 0}), one r2ccld
 * started by the harness:
 *  - AllReduce/AllGather/ReduceScatter/Broadcast/Reduce on cudaMalloc memory,
 *    each rank's call on its own stream, results checked on the host;
 *  - an allocation freed and allocated again at the same address (the
 *    buffer id must make the library register it again);
 *  - cuMem memory without a POSIX-fd handle type (the staging path);
 *  - crossed Send/Recv of both ranks in one group, AlltoAll with the self
 *    blocks;
 *  - ncclMemAlloc memory; PreMulSum, also stream-ordered (its calls return
 *    while the streams are held back; a device scalar read when it runs);
 *  - a capturing stream: ncclInvalidUsage and the message;
 *  - the host time of one ncclAllReduce call (printed: "host time ..."), with
 *    cudaMalloc and ncclMemAlloc buffers, and the driver calls alone ("driver
 *    floor").
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "../gpu/gpu_check.h"

#define N 1000003
static int failures;

static ncclComm_t comm[2];
static cudaStream_t st[2];
static float *host;

static void fill(float *d, int rank, size_t n)
{
	for (size_t i = 0; i < n; i++)
		host[i] = (float)(rank + (int)(i % 11));
	CU(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

static void sync_both(void)
{
	CU(cudaStreamSynchronize(st[0]));
	CU(cudaStreamSynchronize(st[1]));
}

/* AllReduce sum of fill(rank 0) and fill(rank 1), checked on rank r's output */
static void check_sum(const char *what, float *d)
{
	CU(cudaMemcpy(host, d, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < N; i++)
		if (host[i] != (float)(1 + 2 * (int)(i % 11))) {
			EXPECT(0, "%s: element %zu is %g", what, i, host[i]);
			return;
		}
	printf("%-40s ok\n", what);
}

static void allreduce_pair(float *a, float *b)
{
	CK(ncclGroupStart());
	CK(ncclAllReduce(a, a, N, ncclFloat32, ncclSum, comm[0], st[0]));
	CK(ncclAllReduce(b, b, N, ncclFloat32, ncclSum, comm[1], st[1]));
	CK(ncclGroupEnd());
	sync_both();
}

static void *cumem_alloc(size_t size, size_t *asize)
{
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			unsigned long long);
	CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
	enum cudaDriverEntryPointQueryResult q;
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc;
	CUdeviceptr va;
	size_t g;

	CU(cudaGetDriverEntryPointByVersion("cuMemCreate", (void **)&create, 12000, cudaEnableDefault, &q));
	CU(cudaGetDriverEntryPointByVersion("cuMemAddressReserve", (void **)&reserve, 12000, cudaEnableDefault, &q));
	CU(cudaGetDriverEntryPointByVersion("cuMemMap", (void **)&map, 12000, cudaEnableDefault, &q));
	CU(cudaGetDriverEntryPointByVersion("cuMemSetAccess", (void **)&access, 12000, cudaEnableDefault, &q));
	CU(cudaGetDriverEntryPointByVersion("cuMemGetAllocationGranularity", (void **)&gran, 12000, cudaEnableDefault, &q));
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE; /* as expandable segments */
	if (gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		exit(1);
	size = (size + g - 1) / g * g;
	if (create(&h, size, &prop, 0) != CUDA_SUCCESS || reserve(&va, size, g, 0, 0) != CUDA_SUCCESS ||
	    map(va, size, 0, h, 0) != CUDA_SUCCESS)
		exit(1);
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (access(va, size, &acc, 1) != CUDA_SUCCESS)
		exit(1);
	*asize = size;
	return (void *)va;
}

/* PreMulSum stream-ordered (libclient/nccl/premul.cu): both ranks' streams
 * held behind a wait on a host flag, the group's calls must return before
 * the streams run (the host path synchronized the stream: it would hang, so
 * an alarm ends the test then); the device scalar is changed after the
 * calls and before the streams run: its value then is the one used, as
 * NCCL reads it on the device. */
static void premul_stream_ordered(float *a, float *b)
{
	CUresult (*wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
	enum cudaDriverEntryPointQueryResult q;
	volatile uint32_t *flag;
	void *dflag;
	float *scalar, quarter = 0.25f, half = 0.5f;
	ncclRedOp_t op0, op1;

	CU(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void **)&wait32, 12000,
					    cudaEnableDefault, &q));
	CU(cudaHostAlloc((void **)&flag, 64, cudaHostAllocMapped));
	*flag = 0;
	CU(cudaHostGetDevicePointer(&dflag, (void *)flag, 0));
	CU(cudaMalloc((void **)&scalar, sizeof(float)));
	CU(cudaMemcpy(scalar, &quarter, sizeof(float), cudaMemcpyHostToDevice));
	CK(ncclRedOpCreatePreMulSum(&op0, scalar, ncclFloat32, ncclScalarDevice, comm[0]));
	CK(ncclRedOpCreatePreMulSum(&op1, scalar, ncclFloat32, ncclScalarDevice, comm[1]));
	fill(a, 0, N);
	fill(b, 1, N);
	for (int r = 0; r < 2; r++)
		if (wait32((CUstream)st[r], (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ) !=
		    CUDA_SUCCESS)
			exit(1);
	alarm(60);
	CK(ncclGroupStart());
	CK(ncclAllReduce(a, a, N, ncclFloat32, op0, comm[0], st[0]));
	CK(ncclAllReduce(b, b, N, ncclFloat32, op1, comm[1], st[1]));
	CK(ncclGroupEnd());
	alarm(0);
	EXPECT(cudaStreamQuery(st[0]) == cudaErrorNotReady, "rank 0's stream ran before the flag");
	CU(cudaMemcpy(scalar, &half, sizeof(float), cudaMemcpyHostToDevice));
	*flag = 1;
	sync_both();
	CU(cudaMemcpy(host, a, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < N; i++)
		if (host[i] != 0.5f * (float)(1 + 2 * (int)(i % 11))) {
			EXPECT(0, "premulsum stream-ordered: element %zu is %g", i, host[i]);
			break;
		}
	printf("%-40s ok\n", "premulsum stream-ordered, device scalar");
	CK(ncclRedOpDestroy(op0, comm[0]));
	CK(ncclRedOpDestroy(op1, comm[1]));
	CU(cudaFree(scalar));
	CU(cudaFreeHost((void *)flag));
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Host time of one ncclAllReduce (1 KB in place, the ranks' calls
 * alternate). A communicator holds 256 operations queued (R2_GPU_SLOTS, the
 * ring's entries); past that a call waits for the oldest to complete, so
 * 2000 calls back to back measure the completion rate. The host time is
 * measured in bursts of BURST calls per communicator, each burst completed
 * before the next (not timed); the sustained figure after. */
static void host_time(const char *what, void *a, void *b)
{
	enum { BURST = 100, BURSTS = 20 };
	const int iters = 2000;
	double t0, t1, host = 0;

	for (int i = 0; i < 100; i++) {
		CK(ncclAllReduce(a, a, 256, ncclFloat32, ncclSum, comm[0], st[0]));
		CK(ncclAllReduce(b, b, 256, ncclFloat32, ncclSum, comm[1], st[1]));
	}
	sync_both();
	for (int k = 0; k < BURSTS; k++) {
		t0 = now_us();
		for (int i = 0; i < BURST; i++) {
			CK(ncclAllReduce(a, a, 256, ncclFloat32, ncclSum, comm[0], st[0]));
			CK(ncclAllReduce(b, b, 256, ncclFloat32, ncclSum, comm[1], st[1]));
		}
		host += now_us() - t0;
		sync_both();
	}
	printf("host time per ncclAllReduce call, %s buffers: %.2f us (%d calls in bursts of %d "
	       "per communicator, fewer than the 256 it holds queued)\n",
	       what, host / (2 * BURST * BURSTS), 2 * BURST * BURSTS, BURST);
	t0 = now_us();
	for (int i = 0; i < iters; i++) {
		CK(ncclAllReduce(a, a, 256, ncclFloat32, ncclSum, comm[0], st[0]));
		CK(ncclAllReduce(b, b, 256, ncclFloat32, ncclSum, comm[1], st[1]));
	}
	t1 = now_us();
	sync_both();
	printf("sustained, %s: %.2f us per call (%d calls back to back, so bounded by completions "
	       "past 256 queued; until all done: %.2f us per operation pair)\n",
	       what, (t1 - t0) / (2 * iters), 2 * iters, (now_us() - t0) / iters);
}

/* The CUDA driver calls a staged in-place call makes, alone, in the same
 * bursts: the capture check, the buffer id (reuse after free), the copy in,
 * "write READY, wait DONE" as one batch (here a wait that is already
 * satisfied), the copy out. What the library adds is the rest. */
static void driver_floor(void *a, void *b)
{
	CUresult (*capturing)(CUstream, CUstreamCaptureStatus *) = gpu_drv("cuStreamIsCapturing");
	CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr) = gpu_drv("cuPointerGetAttribute");
	CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = gpu_drv("cuMemcpyAsync");
	CUresult (*batch)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int) =
		gpu_drv("cuStreamBatchMemOp");
	enum { BURST = 100, BURSTS = 20, PARTS = 5 };
	double part[PARTS] = { 0 };
	void *stage[2], *flag[2], *buf[2] = { a, b };
	static const char *const names[PARTS] = { "cuStreamIsCapturing",
						  "cuPointerGetAttribute(BUFFER_ID)",
						  "cuMemcpyAsync in (1 KB)", "cuStreamBatchMemOp (2 ops)",
						  "cuMemcpyAsync out (1 KB)" };

	for (int r = 0; r < 2; r++) {
		CU(cudaMalloc(&stage[r], 4096));
		CU(cudaMalloc(&flag[r], 64));
		CU(cudaMemset(flag[r], 0, 64));
	}
	for (int k = 0; k < BURSTS; k++) {
		for (int i = 0; i < BURST; i++)
			for (int r = 0; r < 2; r++) {
				CUstreamCaptureStatus cs;
				unsigned long long id;
				CUstreamBatchMemOpParams op[2];
				double t = now_us(), u;

				capturing((CUstream)st[r], &cs);
				u = now_us(), part[0] += u - t, t = u;
				attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)buf[r]);
				u = now_us(), part[1] += u - t, t = u;
				copy((CUdeviceptr)stage[r], (CUdeviceptr)buf[r], 1024, (CUstream)st[r]);
				u = now_us(), part[2] += u - t, t = u;
				memset(op, 0, sizeof(op));
				op[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
				op[0].writeValue.address = (CUdeviceptr)flag[r];
				op[0].writeValue.value = (cuuint32_t)i;
				op[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
				op[1].waitValue.address = (CUdeviceptr)flag[r];
				op[1].waitValue.value = 0;
				op[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
				batch((CUstream)st[r], 2, op, 0);
				u = now_us(), part[3] += u - t, t = u;
				copy((CUdeviceptr)buf[r], (CUdeviceptr)stage[r], 1024, (CUstream)st[r]);
				u = now_us(), part[4] += u - t;
			}
		sync_both();
	}
	double sum = 0;
	for (int i = 0; i < PARTS; i++) {
		printf("driver floor: %-34s %.2f us per call\n", names[i],
		       part[i] / (2 * BURST * BURSTS));
		sum += part[i];
	}
	printf("driver floor: all five (a staged in-place call's CUDA calls): %.2f us per call\n",
	       sum / (2 * BURST * BURSTS));
	/* variants of the copy: the D2D entry point, and a cuMem (VMM)
	 * destination as the library's staging buffer is */
	CUresult (*d2d)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = gpu_drv("cuMemcpyDtoDAsync");
	void *vmm[2];
	double v[3] = { 0 };
	CK(ncclMemAlloc(&vmm[0], 4096));
	CK(ncclMemAlloc(&vmm[1], 4096));
	for (int k = 0; k < BURSTS; k++) {
		for (int i = 0; i < BURST; i++)
			for (int r = 0; r < 2; r++) {
				double t = now_us(), u;
				d2d((CUdeviceptr)stage[r], (CUdeviceptr)buf[r], 1024, (CUstream)st[r]);
				u = now_us(), v[0] += u - t, t = u;
				copy((CUdeviceptr)vmm[r], (CUdeviceptr)buf[r], 1024, (CUstream)st[r]);
				u = now_us(), v[1] += u - t, t = u;
				CU(cudaMemcpyAsync(stage[r], buf[r], 1024, cudaMemcpyDeviceToDevice, st[r]));
				u = now_us(), v[2] += u - t;
			}
		sync_both();
	}
	printf("driver floor: cuMemcpyDtoDAsync (1 KB) %.2f us, cuMemcpyAsync to cuMem memory %.2f "
	       "us, cudaMemcpyAsync D2D %.2f us per call\n", v[0] / (2 * BURST * BURSTS),
	       v[1] / (2 * BURST * BURSTS), v[2] / (2 * BURST * BURSTS));
	/* the same five as one CUDA graph (captured once), launched per call */
	{
		cudaGraph_t gr[2];
		cudaGraphExec_t gx[2];
		double gl = 0;
		for (int r = 0; r < 2; r++) {
			CUstreamBatchMemOpParams op[2];
			CU(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
			CU(cudaMemcpyAsync(stage[r], buf[r], 1024, cudaMemcpyDeviceToDevice, st[r]));
			memset(op, 0, sizeof(op));
			op[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
			op[0].writeValue.address = (CUdeviceptr)flag[r];
			op[0].writeValue.value = 1;
			op[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
			op[1].waitValue.address = (CUdeviceptr)flag[r];
			op[1].waitValue.value = 0;
			op[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
			int be = batch((CUstream)st[r], 2, op, 0);
			CU(cudaMemcpyAsync(buf[r], stage[r], 1024, cudaMemcpyDeviceToDevice, st[r]));
			CU(cudaStreamEndCapture(st[r], &gr[r]));
			CU(cudaGraphInstantiate(&gx[r], gr[r], 0));
			if (be)
				printf("driver floor: graph: batch memop not captured (%d)\n", be);
		}
		for (int k = 0; k < BURSTS; k++) {
			for (int i = 0; i < BURST; i++)
				for (int r = 0; r < 2; r++) {
					double t = now_us();
					CU(cudaGraphLaunch(gx[r], st[r]));
					gl += now_us() - t;
				}
			sync_both();
		}
		printf("driver floor: cudaGraphLaunch of those five as a graph %.2f us per call\n",
		       gl / (2 * BURST * BURSTS));
		for (int r = 0; r < 2; r++) {
			CU(cudaGraphExecDestroy(gx[r]));
			CU(cudaGraphDestroy(gr[r]));
		}
	}
	CK(ncclMemFree(vmm[0]));
	CK(ncclMemFree(vmm[1]));
	for (int r = 0; r < 2; r++) {
		CU(cudaFree(stage[r]));
		CU(cudaFree(flag[r]));
	}
}

int main(void)
{
	struct th_daemon d;
	int ndev = 0, devs[2] = { 0, 0 };
	float *a, *b;
	size_t as;

	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
		printf("SKIP: no GPU\n");
		return 77;
	}
	{
		/* R2CCL's libnccl.so.2, not another one found on the library path
		 * (NCCL's own refuses {0, 0}: "Duplicate GPU detected") */
		Dl_info di = { 0 };
		void *ext = dlsym(RTLD_DEFAULT, "ncclCommTriggerRebalance");
		dladdr((void *)ncclGetVersion, &di);
		printf("libnccl.so.2: %s\n", di.dli_fname ? di.dli_fname : "?");
		if (!ext) {
			fprintf(stderr, "FAIL: %s is not R2CCL's libnccl.so.2 (no "
				"ncclCommTriggerRebalance): put bundle/nccl/lib first in "
				"LD_LIBRARY_PATH\n", di.dli_fname ? di.dli_fname : "the library");
			return 1;
		}
	}
	/* two ranks on GPU 0, also on a one-GPU machine: R2CCL allows several
	 * ranks per GPU (docs/nccl.md) */
	CU(cudaSetDevice(0));
	if (th_daemon_start(&d, NULL) < 0)
		return 1;
	host = malloc(N * sizeof(float) * 2);
	CU(cudaStreamCreateWithFlags(&st[0], cudaStreamNonBlocking));
	CU(cudaStreamCreateWithFlags(&st[1], cudaStreamNonBlocking));
	CK(ncclCommInitAll(comm, 2, devs));

	/* cudaMalloc: implicit registration */
	CU(cudaMalloc((void **)&a, N * sizeof(float)));
	CU(cudaMalloc((void **)&b, N * sizeof(float)));
	fill(a, 0, N);
	fill(b, 1, N);
	allreduce_pair(a, b);
	check_sum("allreduce cudaMalloc rank 0", a);
	check_sum("allreduce cudaMalloc rank 1", b);
	/* free and allocate again (same address, new buffer id) */
	{
		float *old = a;
		CU(cudaFree(a));
		CU(cudaMalloc((void **)&a, N * sizeof(float)));
		printf("reallocated at the same address: %s\n", a == old ? "yes" : "no");
		fill(a, 0, N);
		fill(b, 1, N);
		allreduce_pair(a, b);
		check_sum("allreduce after free+malloc", a);
	}
	/* cuMem without an fd handle type: staged */
	{
		float *c = cumem_alloc(N * sizeof(float), &as), *e = cumem_alloc(N * sizeof(float), &as);
		fill(c, 0, N);
		fill(e, 1, N);
		allreduce_pair(c, e);
		check_sum("allreduce staged (cuMem, no fd) rank 0", c);
		check_sum("allreduce staged (cuMem, no fd) rank 1", e);
	}
	/* ncclMemAlloc */
	{
		void *p, *q;
		CK(ncclMemAlloc(&p, N * sizeof(float)));
		CK(ncclMemAlloc(&q, N * sizeof(float)));
		fill(p, 0, N);
		fill(q, 1, N);
		allreduce_pair(p, q);
		check_sum("allreduce ncclMemAlloc", p);
		CK(ncclMemFree(p));
		CK(ncclMemFree(q));
	}
	/* other collectives */
	{
		float *o0, *o1;
		CU(cudaMalloc((void **)&o0, 2 * N * sizeof(float)));
		CU(cudaMalloc((void **)&o1, 2 * N * sizeof(float)));
		fill(a, 0, N);
		fill(b, 1, N);
		CK(ncclGroupStart());
		CK(ncclAllGather(a, o0, N, ncclFloat32, comm[0], st[0]));
		CK(ncclAllGather(b, o1, N, ncclFloat32, comm[1], st[1]));
		CK(ncclGroupEnd());
		sync_both();
		CU(cudaMemcpy(host, o1, 2 * N * sizeof(float), cudaMemcpyDeviceToHost));
		EXPECT(host[5] == 5.0f && host[N + 5] == 6.0f, "allgather: %g %g", host[5], host[N + 5]);
		printf("%-40s %s\n", "allgather", failures ? "?" : "ok");
		CK(ncclGroupStart());
		CK(ncclReduceScatter(o0, a, N / 2, ncclFloat32, ncclSum, comm[0], st[0]));
		CK(ncclReduceScatter(o1, b, N / 2, ncclFloat32, ncclSum, comm[1], st[1]));
		CK(ncclGroupEnd());
		CK(ncclGroupStart());
		CK(ncclBroadcast(a, o0, N, ncclFloat32, 1, comm[0], st[0]));
		CK(ncclBroadcast(b, o1, N, ncclFloat32, 1, comm[1], st[1]));
		CK(ncclGroupEnd());
		sync_both();
		/* rank 1's ReduceScatter block: 2 x the second half of rank 0's
		 * input; broadcast from rank 1, both outputs must hold it */
		CU(cudaMemcpy(host, o0, N / 2 * sizeof(float), cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < N / 2; i++)
			if (host[i] != 2.0f * (float)((N / 2 + i) % 11)) {
				EXPECT(0, "reducescatter+broadcast: element %zu is %g", i, host[i]);
				break;
			}
		CU(cudaMemcpy(host, o1, N / 2 * sizeof(float), cudaMemcpyDeviceToHost));
		EXPECT(host[7] == 2.0f * (float)((N / 2 + 7) % 11), "broadcast rank 1: %g", host[7]);
		printf("%-40s ok\n", "reducescatter, broadcast");
		/* crossed send/recv: both ranks send first */
		fill(a, 0, N);
		fill(b, 1, N);
		CK(ncclGroupStart());
		CK(ncclSend(a, N, ncclFloat32, 1, comm[0], st[0]));
		CK(ncclSend(b, N, ncclFloat32, 0, comm[1], st[1]));
		CK(ncclRecv(o0, N, ncclFloat32, 1, comm[0], st[0]));
		CK(ncclRecv(o1, N, ncclFloat32, 0, comm[1], st[1]));
		CK(ncclGroupEnd());
		sync_both();
		CU(cudaMemcpy(host, o0, N * sizeof(float), cudaMemcpyDeviceToHost));
		EXPECT(host[3] == 4.0f, "recv on rank 0: %g", host[3]);
		CU(cudaMemcpy(host, o1, N * sizeof(float), cudaMemcpyDeviceToHost));
		EXPECT(host[3] == 3.0f, "recv on rank 1: %g", host[3]);
		printf("%-40s ok\n", "crossed send/recv");
		/* alltoall (blocks to self are copies) */
		CK(ncclGroupStart());
		CK(ncclAlltoAll(a, o0, N / 2, ncclFloat32, comm[0], st[0]));
		CK(ncclAlltoAll(b, o1, N / 2, ncclFloat32, comm[1], st[1]));
		CK(ncclGroupEnd());
		sync_both();
		printf("%-40s ok\n", "alltoall");
		/* PreMulSum (through the host) */
		{
			float s = 0.5f;
			ncclRedOp_t op0, op1;
			CK(ncclRedOpCreatePreMulSum(&op0, &s, ncclFloat32, ncclScalarHostImmediate, comm[0]));
			CK(ncclRedOpCreatePreMulSum(&op1, &s, ncclFloat32, ncclScalarHostImmediate, comm[1]));
			fill(a, 0, N);
			fill(b, 1, N);
			CK(ncclGroupStart());
			CK(ncclAllReduce(a, a, N, ncclFloat32, op0, comm[0], st[0]));
			CK(ncclAllReduce(b, b, N, ncclFloat32, op1, comm[1], st[1]));
			CK(ncclGroupEnd());
			sync_both();
			CU(cudaMemcpy(host, a, N * sizeof(float), cudaMemcpyDeviceToHost));
			EXPECT(host[4] == 0.5f * 9.0f, "premulsum: %g", host[4]);
			printf("%-40s ok\n", "premulsum");
			premul_stream_ordered(a, b);
		}
		CU(cudaFree(o0));
		CU(cudaFree(o1));
	}
	/* graph capture: refused */
	{
		cudaGraph_t g;
		ncclResult_t r;
		CU(cudaStreamBeginCapture(st[0], cudaStreamCaptureModeThreadLocal));
		r = ncclAllReduce(a, a, N, ncclFloat32, ncclSum, comm[0], st[0]);
		cudaStreamEndCapture(st[0], &g);
		EXPECT(r == ncclInvalidUsage, "capture: %s", ncclGetErrorString(r));
		EXPECT(strstr(ncclGetLastError(comm[0]), "CUDA graph") != NULL, "message: %s",
		       ncclGetLastError(comm[0]));
		printf("%-40s ok (%s)\n", "graph capture refused", ncclGetLastError(comm[0]));
	}
	/* host time of one call: cudaMalloc buffers (staged where r2ccld
	 * refuses their legacy IPC handles), ncclMemAlloc buffers (opened by
	 * r2ccld, never staged), and the CUDA driver calls alone that a staged
	 * call makes (the floor under it) */
	host_time("cudaMalloc", a, b);
	{
		void *p, *q;
		CK(ncclMemAlloc(&p, 4096));
		CK(ncclMemAlloc(&q, 4096));
		host_time("ncclMemAlloc", p, q);
		CK(ncclMemFree(p));
		CK(ncclMemFree(q));
	}
	driver_floor(a, b);
	CK(ncclCommDestroy(comm[0]));
	CK(ncclCommDestroy(comm[1]));
	th_daemon_stop(&d, 15, 20000);
	th_daemon_cleanup(&d);
	printf("nccl_gpu_test: %s\n", failures ? "FAIL" : "OK");
	return failures ? 1 : 0;
}
