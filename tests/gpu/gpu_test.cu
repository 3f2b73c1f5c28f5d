// SPDX-License-Identifier: MIT
//
// The gpu suite: a real r2ccld (started by the integration harness, or the
// one at $R2CCL_SOCKET with R2CCL_GPU_TEST_EXTERNAL=1) and clients through
// libr2ccl with GPU buffers. One process drives every rank (one r2ccl client
// per rank, rank r on GPU r % ngpus): the stream-ordered API never blocks the
// CPU, so one thread can queue every rank's part of a collective.
//
//   gpu_test                 every test (exit 77 without a usable GPU)
//   gpu_test --bench [opts]  nccl-tests-like table, every size checked (#wrong;
//                            exit 1 if any element is wrong; 77 without a GPU)
//   gpu_test --victim ...    (internal) the client killed mid-operation
//   gpu_test --exporter DEV  (internal) another process's cudaMalloc memory,
//                            its IPC handle on stdout (test_ipc_owner)
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "r2ccl.h"
extern "C" {
#include "harness.h"
#include "reduce.h"
}
#include "ipc_raw.h"

#define CK(x)                                                                               \
	do {                                                                                \
		cudaError_t e_ = (x);                                                       \
		if (e_ != cudaSuccess) {                                                    \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,          \
				cudaGetErrorString(e_));                                    \
			exit(1);                                                            \
		}                                                                           \
	} while (0)
#define RK(x)                                                                               \
	do {                                                                                \
		int r_ = (x);                                                               \
		if (r_ != 0) {                                                              \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,          \
				r2ccl_strerror(r_));                                        \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

static int failures;
#define EXPECT(cond, ...)                                                                   \
	do {                                                                                \
		if (!(cond)) {                                                              \
			if (failures < 60) {                                                \
				fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
				fprintf(stderr, __VA_ARGS__);                               \
				fprintf(stderr, "\n");                                      \
			}                                                                   \
			failures++;                                                         \
		}                                                                           \
	} while (0)

static double now_s()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__global__ void k_spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles)
		;
}

__global__ void k_fill_f32(float *p, size_t n, float base)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = base + (float)(i % 13);
}

// Counts the elements of p[0..n) that differ from base + scale * ((off + i) % 13)
// into *wrong (the benchmark's check, on the GPU: no host copy of 4 GB).
__global__ void k_count_wrong(const float *p, size_t n, size_t off, float base, float scale,
			      unsigned long long *wrong)
{
	unsigned long long w = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		if (p[i] != base + scale * (float)((off + i) % 13))
			w++;
	if (w)
		atomicAdd(wrong, w);
}

static long long cycles_per_ms(int dev)
{
	int khz = 0;
	cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
	return (long long)(khz > 0 ? khz : 1500000);
}

struct Rank {
	int dev;
	r2ccl_client_t *cl;
	r2ccl_comm_t *comm;
	cudaStream_t st;
	char *a, *b; // two registered buffers of cap bytes
	size_t cap;
};

// cuMem memory with a POSIX fd handle type (below)
static void cumem_init();
static char *cumem_alloc(int dev, size_t size);
static void cumem_free(void *p, size_t size);

static int nranks, ngpus;
static Rank R[8];
static r2ccl_unique_id_t uid;

struct InitArg {
	int r;
	int rc;
};

static void *init_thread(void *p)
{
	InitArg *ia = (InitArg *)p;
	ia->rc = r2ccl_comm_init_rank(R[ia->r].cl, &R[ia->r].comm, nranks, &uid, ia->r);
	return NULL;
}

static void setup(int n, size_t cap)
{
	pthread_t th[8];
	InitArg ia[8];

	nranks = n;
	for (int r = 0; r < n; r++) {
		Rank *k = &R[r];
		k->dev = r % ngpus;
		k->cap = cap;
		CK(cudaSetDevice(k->dev));
		CK(cudaStreamCreateWithFlags(&k->st, cudaStreamNonBlocking));
		k->a = cumem_alloc(k->dev, cap);
		k->b = cumem_alloc(k->dev, cap);
		EXPECT(k->a && k->b, "cuMem allocation of %zu bytes failed", cap);
		if (!k->a || !k->b)
			exit(1);
		RK(r2ccl_connect(NULL, &k->cl));
		RK(r2ccl_mem_register_gpu(k->cl, k->a, cap));
		RK(r2ccl_mem_register_gpu(k->cl, k->b, cap));
	}
	RK(r2ccl_get_unique_id(R[0].cl, &uid));
	for (int r = 0; r < n; r++) {
		ia[r].r = r;
		pthread_create(&th[r], NULL, init_thread, &ia[r]);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
		RK(ia[r].rc);
	}
}

static void teardown()
{
	for (int r = 0; r < nranks; r++) {
		Rank *k = &R[r];
		CK(cudaSetDevice(k->dev));
		CK(cudaStreamSynchronize(k->st));
		RK(r2ccl_comm_destroy(k->comm));
		RK(r2ccl_mem_deregister_gpu(k->cl, k->a));
		RK(r2ccl_mem_deregister_gpu(k->cl, k->b));
		r2ccl_disconnect(k->cl);
		cumem_free(k->a, k->cap);
		cumem_free(k->b, k->cap);
		cudaStreamDestroy(k->st);
	}
}

// Each rank's stream, bounded: a stream the daemon never releases is a
// failure of the suite, not a hang (60 s; the largest case takes < 1 s).
static void sync_all(const char *what)
{
	for (int r = 0; r < nranks; r++) {
		int err = 0;
		double t0 = now_s();
		cudaError_t e;
		CK(cudaSetDevice(R[r].dev));
		while ((e = cudaStreamQuery(R[r].st)) == cudaErrorNotReady) {
			if (now_s() - t0 > 60) {
				printf("FAIL %s: rank %d: its stream did not complete in 60 s\n", what, r);
				exit(1);
			}
			usleep(100);
		}
		CK(e);
		r2ccl_comm_get_async_error(R[r].comm, &err);
		EXPECT(err == 0, "%s: rank %d async error %s", what, r, r2ccl_strerror(err));
	}
}

// ---- correctness matrix ----

enum Coll { AR, RED, RS, AG, BC, SR, NCOLL };
static const char *coll_name[] = { "allreduce", "reduce",    "reducescatter",
				   "allgather", "broadcast", "sendrecv" };

static void pattern(void *dst, int dtype, size_t n, int r, size_t salt)
{
	for (size_t i = 0; i < n; i++) {
		int v = (int)((i * 7 + (size_t)r * 13 + salt * 5 + 3) % 11) - 5;
		switch (dtype) {
		case R2CCL_INT8: ((int8_t *)dst)[i] = (int8_t)v; break;
		case R2CCL_UINT8: ((uint8_t *)dst)[i] = (uint8_t)(v + 5); break;
		case R2CCL_INT32: ((int32_t *)dst)[i] = v; break;
		case R2CCL_UINT32: ((uint32_t *)dst)[i] = (uint32_t)(v + 5); break;
		case R2CCL_INT64: ((int64_t *)dst)[i] = v; break;
		case R2CCL_UINT64: ((uint64_t *)dst)[i] = (uint64_t)(v + 5); break;
		case R2CCL_FLOAT16: ((uint16_t *)dst)[i] = r2_float_to_half((float)v); break;
		case R2CCL_BFLOAT16: ((uint16_t *)dst)[i] = r2_float_to_bf16((float)v); break;
		case R2CCL_FLOAT32: ((float *)dst)[i] = (float)v; break;
		case R2CCL_FLOAT64: ((double *)dst)[i] = (double)v; break;
		}
	}
}

// One case: inputs written on each rank's stream before the op, outputs read
// back on the same stream after it; nothing synchronizes in between.
static void run_case(int c, int dtype, int op, size_t count, bool inplace, int root)
{
	size_t es = r2ccl_dtype_size((r2ccl_dtype_t)dtype);
	size_t blk = count * es, n = (size_t)nranks;
	size_t sbytes = (c == RS) ? n * blk : blk, rbytes = (c == AG) ? n * blk : blk;
	char *hin[8], *hout[8], *exp[8];
	char *sp[8], *rp[8];
	const void *ins[8];
	int slot_root = root;
	char label[160];

	snprintf(label, sizeof(label), "%s %s %s count %zu %s root %d", coll_name[c],
		 r2ccl_dtype_name((r2ccl_dtype_t)dtype),
		 (c == AR || c == RED || c == RS) ? r2ccl_redop_name((r2ccl_redop_t)op) : "-", count,
		 inplace ? "in-place" : "out-of-place", root);
	for (int r = 0; r < nranks; r++) {
		CK(cudaMallocHost(&hin[r], sbytes ? sbytes : 1));
		CK(cudaMallocHost(&hout[r], rbytes ? rbytes : 1));
		exp[r] = (char *)malloc(rbytes ? rbytes : 1);
		pattern(hin[r], dtype, sbytes / es, r, (size_t)c + (size_t)op);
		// buffers: out-of-place send in a, recv in b; in place: as NCCL
		rp[r] = R[r].b;
		sp[r] = R[r].a;
		if (inplace) {
			if (c == AG)
				sp[r] = R[r].b + (size_t)r * blk;
			else if (c == RS) {
				sp[r] = R[r].b;
				rp[r] = R[r].b + (size_t)r * blk;
			} else
				sp[r] = R[r].b;
		}
	}
	// expected results
	for (int r = 0; r < nranks; r++)
		ins[r] = hin[r];
	for (int r = 0; r < nranks; r++) {
		switch (c) {
		case AR:
			r2_reduce(exp[r], ins, nranks, count, (r2ccl_dtype_t)dtype, (r2ccl_redop_t)op,
				  nranks);
			break;
		case RED:
			if (r == slot_root)
				r2_reduce(exp[r], ins, nranks, count, (r2ccl_dtype_t)dtype,
					  (r2ccl_redop_t)op, nranks);
			break;
		case RS: {
			const void *in2[8];
			for (int k = 0; k < nranks; k++)
				in2[k] = hin[k] + (size_t)r * blk;
			r2_reduce(exp[r], in2, nranks, count, (r2ccl_dtype_t)dtype, (r2ccl_redop_t)op,
				  nranks);
			break;
		}
		case AG:
			for (int k = 0; k < nranks; k++)
				memcpy(exp[r] + (size_t)k * blk, hin[k], blk);
			break;
		case BC:
			memcpy(exp[r], hin[root], blk);
			break;
		case SR:
			if (r == 1)
				memcpy(exp[r], hin[0], blk);
			break;
		}
	}
	// queue: input H2D, the op, output D2H; all on the rank's stream
	for (int r = 0; r < nranks; r++) {
		Rank *k = &R[r];
		int rc = 0;
		CK(cudaSetDevice(k->dev));
		CK(cudaMemsetAsync(k->b, 0xEE, (c == RS && inplace) ? n * blk : rbytes, k->st));
		CK(cudaMemcpyAsync(sp[r], hin[r], sbytes, cudaMemcpyHostToDevice, k->st));
		switch (c) {
		case AR:
			rc = r2ccl_allreduce_stream(k->comm, sp[r], rp[r], count, (r2ccl_dtype_t)dtype,
						    (r2ccl_redop_t)op, k->st);
			break;
		case RED:
			rc = r2ccl_reduce_stream(k->comm, sp[r], rp[r], count, (r2ccl_dtype_t)dtype,
						 (r2ccl_redop_t)op, root, k->st);
			break;
		case RS:
			rc = r2ccl_reducescatter_stream(k->comm, sp[r], rp[r], count,
							(r2ccl_dtype_t)dtype, (r2ccl_redop_t)op,
							k->st);
			break;
		case AG:
			rc = r2ccl_allgather_stream(k->comm, sp[r], rp[r], count, (r2ccl_dtype_t)dtype,
						    k->st);
			break;
		case BC:
			rc = r2ccl_broadcast_stream(k->comm, sp[r], rp[r], count, (r2ccl_dtype_t)dtype,
						    root, k->st);
			break;
		case SR:
			if (r == 0)
				rc = r2ccl_send_stream(k->comm, sp[r], count, (r2ccl_dtype_t)dtype, 1,
						       k->st);
			else if (r == 1)
				rc = r2ccl_recv_stream(k->comm, rp[r], count, (r2ccl_dtype_t)dtype, 0,
						       k->st);
			break;
		}
		EXPECT(rc == 0, "%s: rank %d submit: %s", label, r, r2ccl_strerror(rc));
		CK(cudaMemcpyAsync(hout[r], rp[r], rbytes, cudaMemcpyDeviceToHost, k->st));
	}
	sync_all(label);
	for (int r = 0; r < nranks; r++) {
		bool check = !((c == RED && r != root) || (c == SR && r != 1));
		if (check && memcmp(hout[r], exp[r], rbytes)) {
			size_t i = 0;
			while (i < rbytes && hout[r][i] == exp[r][i])
				i++;
			EXPECT(false, "%s: rank %d differs at byte %zu (got %02x want %02x)", label, r,
			       i, (unsigned char)hout[r][i], (unsigned char)exp[r][i]);
		}
		cudaFreeHost(hin[r]);
		cudaFreeHost(hout[r]);
		free(exp[r]);
	}
}

static void test_matrix()
{
	const size_t counts[] = { 5, 1000003 };
	int ncase = 0, f0 = failures;
	double t0 = now_s();

	for (size_t ci = 0; ci < 2; ci++)
		for (int dt = 0; dt < R2CCL_NUM_DTYPES; dt++)
			for (int c = 0; c < NCOLL; c++)
				for (int ip = 0; ip < 2; ip++) {
					if (c == SR && ip)
						continue;
					if (c == AR || c == RED || c == RS) {
						for (int op = 0; op < R2CCL_NUM_OPS; op++) {
							run_case(c, dt, op, counts[ci], ip,
								 c == RED ? nranks - 1 : 0);
							ncase++;
						}
					} else {
						run_case(c, dt, 0, counts[ci], ip,
							 c == BC ? nranks - 1 : 0);
						ncase++;
					}
				}
	printf("matrix: %d ranks on %d GPUs: %d cases, %d failed, %.1f s\n", nranks, ngpus, ncase,
	       failures - f0, now_s() - t0);
}

// count 0 (an AllGather of 4 B on 2 ranks in nccl-tests): nothing to move,
// but the stream must still pass the operation
static void test_count0()
{
	int ncase = 0, f0 = failures;

	for (int c = 0; c < NCOLL; c++)
		for (int ip = 0; ip < 2; ip++) {
			if (c == SR && ip)
				continue;
			run_case(c, R2CCL_FLOAT32, 0, 0, ip, 0);
			ncase++;
		}
	printf("count 0: %d cases, %d failed\n", ncase, failures - f0);
}

// ---- stream ordering ----

static void test_order_same_stream()
{
	size_t n = 4 << 20;
	float *hout = NULL;
	double t0, enq;
	int f0 = failures;

	CK(cudaMallocHost(&hout, n * 4));
	t0 = now_s();
	for (int r = 0; r < nranks; r++) {
		Rank *k = &R[r];
		CK(cudaSetDevice(k->dev));
		// slow earlier work: 200 ms of spinning, then the input
		k_spin<<<1, 1, 0, k->st>>>(200 * cycles_per_ms(k->dev));
		k_fill_f32<<<256, 256, 0, k->st>>>((float *)k->a, n, (float)r);
		RK(r2ccl_allreduce_stream(k->comm, k->a, k->b, n, R2CCL_FLOAT32, R2CCL_SUM, k->st));
		// later work reads the result
		k_spin<<<1, 1, 0, k->st>>>(10 * cycles_per_ms(k->dev));
		CK(cudaMemcpyAsync(k->a, k->b, n * 4, cudaMemcpyDeviceToDevice, k->st));
	}
	enq = now_s() - t0;
	EXPECT(enq < 0.1, "enqueueing blocked the CPU for %.3f s", enq);
	sync_all("order-same-stream");
	for (int r = 0; r < nranks; r++) {
		CK(cudaSetDevice(R[r].dev));
		CK(cudaMemcpy(hout, R[r].a, n * 4, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < n; i++) {
			float want = 0;
			for (int k = 0; k < nranks; k++)
				want += (float)k + (float)(i % 13);
			if (hout[i] != want) {
				EXPECT(false, "order-same-stream: rank %d [%zu] = %g, want %g", r, i,
				       hout[i], want);
				break;
			}
		}
	}
	printf("order, same stream: enqueue %.2f ms (GPU work 210 ms), %s\n", enq * 1e3,
	       failures == f0 ? "ok" : "FAILED");
	cudaFreeHost(hout);
}

static void test_order_events()
{
	size_t n = 1 << 20;
	cudaStream_t prod[8], cons[8];
	cudaEvent_t e1[8], e2[8];
	float *hout;
	int f0 = failures;

	CK(cudaMallocHost(&hout, n * 4));
	for (int r = 0; r < nranks; r++) {
		Rank *k = &R[r];
		CK(cudaSetDevice(k->dev));
		CK(cudaStreamCreateWithFlags(&prod[r], cudaStreamNonBlocking));
		CK(cudaStreamCreateWithFlags(&cons[r], cudaStreamNonBlocking));
		CK(cudaEventCreateWithFlags(&e1[r], cudaEventDisableTiming));
		CK(cudaEventCreateWithFlags(&e2[r], cudaEventDisableTiming));
		// producer stream writes the input late; the op's stream waits on its event
		k_spin<<<1, 1, 0, prod[r]>>>(100 * cycles_per_ms(k->dev));
		k_fill_f32<<<256, 256, 0, prod[r]>>>((float *)k->a, n, 10.0f * (float)r);
		CK(cudaEventRecord(e1[r], prod[r]));
		CK(cudaStreamWaitEvent(k->st, e1[r], 0));
		RK(r2ccl_allreduce_stream(k->comm, k->a, k->b, n, R2CCL_FLOAT32, R2CCL_MAX, k->st));
		CK(cudaEventRecord(e2[r], k->st));
		// a consumer stream reads the output after the op's event
		CK(cudaStreamWaitEvent(cons[r], e2[r], 0));
		CK(cudaMemcpyAsync(k->a, k->b, n * 4, cudaMemcpyDeviceToDevice, cons[r]));
	}
	sync_all("order-events");
	for (int r = 0; r < nranks; r++) {
		CK(cudaSetDevice(R[r].dev));
		CK(cudaStreamSynchronize(cons[r]));
		CK(cudaMemcpy(hout, R[r].a, n * 4, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < n; i++) {
			float want = 10.0f * (float)(nranks - 1) + (float)(i % 13);
			if (hout[i] != want) {
				EXPECT(false, "order-events: rank %d [%zu] = %g, want %g", r, i,
				       hout[i], want);
				break;
			}
		}
		cudaStreamDestroy(prod[r]);
		cudaStreamDestroy(cons[r]);
		cudaEventDestroy(e1[r]);
		cudaEventDestroy(e2[r]);
	}
	printf("order, other streams with events: %s\n", failures == f0 ? "ok" : "FAILED");
	cudaFreeHost(hout);
}

// ---- cuMem buffers, sub-ranges ----

static CUresult (*p_cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
				 unsigned long long);
static CUresult (*p_cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
					 unsigned long long);
static CUresult (*p_cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			      unsigned long long);
static CUresult (*p_cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

template <typename F> static void drv(const char *name, F *fn)
{
	cudaDriverEntryPointQueryResult q;
	void *p = NULL;
	CK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q));
	*fn = (F)p;
}

static CUresult (*p_cuMemUnmap)(CUdeviceptr, size_t);
static CUresult (*p_cuMemAddressFree)(CUdeviceptr, size_t);
static CUresult (*p_cuMemRelease)(CUmemGenericAllocationHandle);
static CUresult (*p_cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);

// The driver entry points of cuMem memory: the suite's buffers are cuMem
// memory with a POSIX fd handle type, which r2ccld opens under every
// gpu_legacy_ipc (cudaMalloc memory may be refused: test_ipc_owner).
static void cumem_init()
{
	drv("cuMemCreate", &p_cuMemCreate);
	drv("cuMemAddressReserve", &p_cuMemAddressReserve);
	drv("cuMemMap", &p_cuMemMap);
	drv("cuMemSetAccess", &p_cuMemSetAccess);
	drv("cuMemUnmap", &p_cuMemUnmap);
	drv("cuMemAddressFree", &p_cuMemAddressFree);
	drv("cuMemRelease", &p_cuMemRelease);
	drv("cuMemRetainAllocationHandle", &p_cuMemRetainAllocationHandle);
}

static size_t cumem_round(size_t size)
{
	return (size + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
}

// size: as given to cumem_alloc
static void cumem_free(void *p, size_t size)
{
	CUmemGenericAllocationHandle h;

	if (!p)
		return;
	size = cumem_round(size);
	if (p_cuMemRetainAllocationHandle(&h, p) == CUDA_SUCCESS) {
		p_cuMemRelease(h); // the reference just taken
		p_cuMemUnmap((CUdeviceptr)p, size);
		p_cuMemRelease(h); // the allocation's
	}
	p_cuMemAddressFree((CUdeviceptr)p, size);
}

static char *cumem_alloc(int dev, size_t size)
{
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc;
	CUdeviceptr va;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	size = cumem_round(size);
	if (p_cuMemCreate(&h, size, &prop, 0) != CUDA_SUCCESS ||
	    p_cuMemAddressReserve(&va, size, 2u << 20, 0, 0) != CUDA_SUCCESS ||
	    p_cuMemMap(va, size, 0, h, 0) != CUDA_SUCCESS)
		return NULL;
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = dev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (p_cuMemSetAccess(va, size, &acc, 1) != CUDA_SUCCESS)
		return NULL;
	return (char *)va;
}

static void test_cumem()
{
	size_t n = 3 << 20, bytes = n * 4, asz = 2 * bytes + (8u << 20);
	char *buf[8];
	float *h;
	int f0 = failures;

	CK(cudaMallocHost(&h, bytes));
	for (int r = 0; r < nranks; r++) {
		Rank *k = &R[r];
		CK(cudaSetDevice(k->dev));
		buf[r] = cumem_alloc(k->dev, asz);
		EXPECT(buf[r], "cuMem allocation failed");
		if (!buf[r])
			return;
		// two sub-ranges of one allocation: the daemon opens it once
		RK(r2ccl_mem_register_gpu(k->cl, buf[r] + 4096, bytes));
		RK(r2ccl_mem_register_gpu(k->cl, buf[r] + bytes + (4u << 20), bytes));
		k_fill_f32<<<256, 256, 0, k->st>>>((float *)(buf[r] + 4096), n, (float)r);
		RK(r2ccl_allreduce_stream(k->comm, buf[r] + 4096, buf[r] + bytes + (4u << 20), n,
					  R2CCL_FLOAT32, R2CCL_SUM, k->st));
	}
	sync_all("cumem");
	for (int r = 0; r < nranks; r++) {
		CK(cudaSetDevice(R[r].dev));
		CK(cudaMemcpy(h, buf[r] + bytes + (4u << 20), bytes, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < n; i++) {
			float want = 0;
			for (int k = 0; k < nranks; k++)
				want += (float)k + (float)(i % 13);
			if (h[i] != want) {
				EXPECT(false, "cumem: rank %d [%zu] = %g want %g", r, i, h[i], want);
				break;
			}
		}
		RK(r2ccl_mem_deregister_gpu(R[r].cl, buf[r] + 4096));
		RK(r2ccl_mem_deregister_gpu(R[r].cl, buf[r] + bytes + (4u << 20)));
	}
	printf("cuMem buffers (sub-ranges, one allocation registered twice): %s\n",
	       failures == f0 ? "ok" : "FAILED");
	cudaFreeHost(h);
}

// ---- a client killed while its GPU operation is in flight ----

static int victim(int dev, const char *uidhex)
{
	r2ccl_client_t *cl;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	cudaStream_t st;
	char *a, *b;
	size_t n = 1 << 20;

	for (int i = 0; i < R2CCL_UNIQUE_ID_BYTES; i++)
		sscanf(uidhex + 2 * i, "%2hhx", (unsigned char *)&id.internal[i]);
	CK(cudaSetDevice(dev));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	cumem_init();
	a = cumem_alloc(dev, n * 4);
	b = cumem_alloc(dev, n * 4);
	if (!a || !b)
		return 1;
	RK(r2ccl_connect(NULL, &cl));
	RK(r2ccl_mem_register_gpu(cl, a, n * 4));
	RK(r2ccl_mem_register_gpu(cl, b, n * 4));
	RK(r2ccl_comm_init_rank(cl, &comm, 2, &id, 1));
	k_spin<<<1, 1, 0, st>>>(30000 * cycles_per_ms(dev)); // "ready" comes in 30 s
	RK(r2ccl_allreduce_stream(comm, a, b, n, R2CCL_FLOAT32, R2CCL_SUM, st));
	if (write(1, "Q", 1) != 1)
		return 1;
	pause();
	return 0;
}

static void test_kill(const char *self, struct th_daemon *d)
{
	r2ccl_client_t *cl;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	cudaStream_t st;
	char *a, *b, hex[2 * R2CCL_UNIQUE_ID_BYTES + 1], c;
	int pfd[2], err = 0, before, dev = ngpus - 1;
	size_t n = 1 << 20;
	pid_t pid;
	double t0;
	bool done = false;

	CK(cudaSetDevice(0));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	a = cumem_alloc(0, n * 4);
	b = cumem_alloc(0, n * 4);
	EXPECT(a && b, "kill: cuMem allocation failed");
	if (!a || !b)
		return;
	RK(r2ccl_connect(NULL, &cl));
	RK(r2ccl_mem_register_gpu(cl, a, n * 4));
	RK(r2ccl_mem_register_gpu(cl, b, n * 4));
	RK(r2ccl_get_unique_id(cl, &id));
	for (int i = 0; i < R2CCL_UNIQUE_ID_BYTES; i++)
		sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
	before = d ? th_log_count(d, "released cuMem allocation") : 0;
	if (pipe(pfd) < 0)
		exit(1);
	pid = fork();
	if (pid == 0) {
		char devs[16];
		dup2(pfd[1], 1);
		snprintf(devs, sizeof(devs), "%d", dev);
		execl(self, self, "--victim", devs, hex, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	RK(r2ccl_comm_init_rank(cl, &comm, 2, &id, 0));
	RK(r2ccl_allreduce_stream(comm, a, b, n, R2CCL_FLOAT32, R2CCL_SUM, st));
	EXPECT(read(pfd[0], &c, 1) == 1, "victim did not submit");
	usleep(300000);
	EXPECT(cudaStreamQuery(st) == cudaErrorNotReady, "kill: the op finished without its peer");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t0 = now_s();
	while (now_s() - t0 < 20) {
		r2ccl_comm_get_async_error(comm, &err);
		if (cudaStreamQuery(st) == cudaSuccess) {
			done = true;
			break;
		}
		usleep(1000);
	}
	r2ccl_comm_get_async_error(comm, &err);
	EXPECT(done, "kill: the survivor's stream is still blocked after 20 s");
	EXPECT(err == R2CCL_E_PEER_GONE || err == R2CCL_E_COMM_BROKEN,
	       "kill: survivor's async error %d (%s), want peer gone", err, r2ccl_strerror(err));
	if (d) {
		int got = th_wait_log(d, "released cuMem allocation", before + 2, 10000);
		EXPECT(got >= before + 2, "kill: the daemon did not release the victim's memory");
	}
	printf("client killed mid-operation: survivor released in %.2f s with \"%s\"\n",
	       now_s() - t0, r2ccl_strerror(err));
	r2ccl_comm_abort(comm);
	r2ccl_disconnect(cl);
	cumem_free(a, n * 4);
	cumem_free(b, n * 4);
	close(pfd[0]);
}

// ---- legacy IPC handles: only the exporter's own (gpu_legacy_ipc=same-pid) ----

struct exported {
	cudaIpcMemHandle_t h;
	unsigned char uuid[16];
	uint64_t size, base;
};

// (internal) another process: 2 MiB of cudaMalloc memory on dev, filled with
// 0x5a, its IPC handle on stdout; keeps it until stdin closes
static int exporter(int dev)
{
	struct exported e;
	cudaDeviceProp prop;
	void *p;
	char c;

	memset(&e, 0, sizeof(e));
	e.size = 2u << 20;
	CK(cudaSetDevice(dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	memcpy(e.uuid, prop.uuid.bytes, 16);
	CK(cudaMalloc(&p, e.size));
	CK(cudaMemset(p, 0x5a, e.size));
	CK(cudaDeviceSynchronize());
	CK(cudaIpcGetMemHandle(&e.h, p));
	e.base = (uint64_t)(uintptr_t)p;
	if (write(1, &e, sizeof(e)) != (ssize_t)sizeof(e))
		return 1;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}

// where this driver writes the exporter's pid: the one aligned offset holding
// ours in two handles of our own (as r2ccld learns it), -1 if none or several
static int pid_offset(int dev)
{
	cudaIpcMemHandle_t h[2];
	void *p[2];
	int off = -1;

	CK(cudaSetDevice(dev));
	for (int i = 0; i < 2; i++) {
		CK(cudaMalloc(&p[i], 2u << 20));
		CK(cudaIpcGetMemHandle(&h[i], p[i]));
	}
	for (int i = 0; i + 4 <= 64; i += 4) {
		uint32_t a, b;
		memcpy(&a, h[0].reserved + i, 4);
		memcpy(&b, h[1].reserved + i, 4);
		if (a != (uint32_t)getpid() || b != (uint32_t)getpid())
			continue;
		off = off == -1 ? i : -2;
	}
	for (int i = 0; i < 2; i++)
		CK(cudaFree(p[i]));
	return off < 0 ? -1 : off;
}

// The confused deputy of issue 23, on the daemon's default (same-pid):
//  (b) a client sends another process's legacy IPC handle (the other process
//      allocated and passed it through a pipe): refused, the check named;
//      with our pid written over the exporter's in it: refused;
//  (c) our own legacy handle, on the same raw path: accepted where the
//      driver refuses a handle whose pid was changed; where it opens one
//      (r2ccld checks that with a handle of its own, memory.c), the pid binds
//      nothing, and (c) must be refused too, saying so (seen on the H200
//      machine's driver, 2026-12-03: its handle with our pid written in was
//      opened).
// (a), a client's own cuMem fd memory with exact data, is test_cumem.
static void test_ipc_owner(const char *self)
{
	const char *sock = getenv("R2CCL_SOCKET");
	struct exported e, t;
	cudaIpcMemHandle_t own;
	cudaDeviceProp prop;
	r2ccl_client_t *cl;
	char err[512], devs[16];
	int in[2], out[2], f0 = failures, dev = 0, off, st;
	size_t got = 0;
	void *p, *q = NULL;
	pid_t pid;

	EXPECT(sock, "ipc owner: no R2CCL_SOCKET");
	if (!sock)
		return;
	off = pid_offset(dev);
	EXPECT(off >= 0, "ipc owner: this driver's IPC handles hold our pid at no single place "
			 "(same-pid then refuses every legacy handle)");
	printf("legacy IPC handle: the exporter's pid at byte %d\n", off);

	// (c) our own handle, raw
	CK(cudaSetDevice(dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	CK(cudaMalloc(&p, 2u << 20));
	CK(cudaIpcGetMemHandle(&own, p));
	st = ipc_raw_register(sock, (const uint8_t *)own.reserved, (const uint8_t *)prop.uuid.bytes,
			      (uint64_t)(uintptr_t)p, 2u << 20, -1, err, sizeof(err));
	bool unbound = st == -EPERM && strstr(err, "pid was rewritten");
	EXPECT(st == 0 || unbound, "ipc owner (c): our own handle refused: %d %s", st, err);
	printf("our own legacy handle: %s%s%s\n", st ? r2ccl_strerror(st) : "accepted",
	       st ? " " : "", st ? err : "");

	// (b) another process's
	if (pipe(in) < 0 || pipe(out) < 0)
		exit(1);
	pid = fork();
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		snprintf(devs, sizeof(devs), "%d", dev);
		execl(self, self, "--exporter", devs, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	while (got < sizeof(e)) {
		ssize_t n = read(out[0], (char *)&e + got, sizeof(e) - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	EXPECT(got == sizeof(e), "ipc owner: the exporter sent no handle");
	if (got == sizeof(e)) {
		st = ipc_raw_register(sock, (const uint8_t *)e.h.reserved, e.uuid, e.base, e.size,
				      -1, err, sizeof(err));
		EXPECT(st == -EPERM && strstr(err, "same-pid"),
		       "ipc owner (b): another process's handle, no device file: %d (%s), want "
		       "-EPERM naming same-pid", st, err);
		printf("another process's handle: %s (%s)\n", r2ccl_strerror(st), err);
		if (off >= 0) {
			uint32_t me = (uint32_t)getpid();
			t = e;
			memcpy(t.h.reserved + off, &me, 4);
			st = ipc_raw_register(sock, (const uint8_t *)t.h.reserved, t.uuid, t.base,
					      t.size, -1, err, sizeof(err));
			EXPECT(st < 0, "ipc owner (b): a handle with our pid written over the "
				       "exporter's was opened: same-pid proves nothing on this "
				       "driver, and r2ccld's own check did not see it");
			printf("the same with our pid written in: %s (%s)\n", r2ccl_strerror(st),
			       err);
		}
		// (d) gpu-access (the default): the same handle with this process's
		// device file of the GPU, the proof that it could open the handle
		// itself (it does so below): accepted. /dev/null in its place, or no
		// file (above): refused, naming the policy.
		char bus[32];
		CK(cudaDeviceGetPCIBusId(bus, sizeof(bus), dev));
		int dfd = ipc_raw_dev_file(bus);
		EXPECT(dfd >= 0, "ipc owner (d): no device file of GPU %s: %d", bus, dfd);
		if (dfd >= 0) {
			st = ipc_raw_register(sock, (const uint8_t *)e.h.reserved, e.uuid, e.base,
					      e.size, dfd, err, sizeof(err));
			// NVML lists only what r2ccld's pid namespace sees, so
			// gpu-access holds only in the host's (r2ccld runs in ours)
			struct stat ns;
			bool host_ns = stat("/proc/self/ns/pid", &ns) == 0 &&
				       ns.st_ino == 0xEFFFFFFCu;
			if (host_ns)
				EXPECT(st == 0, "ipc owner (d): another process's handle with our "
						"device file: %d (%s), want accepted (gpu-access)",
				       st, err);
			else
				EXPECT(st == -EPERM && strstr(err, "pid namespace"),
				       "ipc owner (d): not in the host's pid namespace, want -EPERM "
				       "naming it: %d (%s)", st, err);
			printf("another process's handle with our device file: %s%s%s\n",
			       st ? r2ccl_strerror(st) : "accepted", st ? " " : "", st ? err : "");
			close(dfd);
		}
		int nfd = open("/dev/null", O_RDWR | O_CLOEXEC);
		st = ipc_raw_register(sock, (const uint8_t *)e.h.reserved, e.uuid, e.base, e.size,
				      nfd, err, sizeof(err));
		close(nfd);
		EXPECT(st == -EPERM && strstr(err, "gpu-access"),
		       "ipc owner (d): /dev/null for the device file: %d (%s), want -EPERM "
		       "naming gpu-access", st, err);
		printf("the same with /dev/null for the device file: %s (%s)\n", r2ccl_strerror(st),
		       err);
		// through the library: the handle opened here, that pointer registered.
		// Not a pass/fail check: a process that opened the memory itself
		// already has it, so whatever the answer the daemon gives it nothing
		// more; printed to show what a driver does with a re-export.
		RK(r2ccl_connect(NULL, &cl));
		if (cudaIpcOpenMemHandle(&q, e.h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) {
			st = r2ccl_mem_register_gpu(cl, q, e.size);
			printf("its memory opened here, registered through libr2ccl: %s (%s)\n",
			       r2ccl_strerror(st), st ? r2ccl_last_error() : "");
			if (st == 0)
				RK(r2ccl_mem_deregister_gpu(cl, q));
			CK(cudaIpcCloseMemHandle(q));
		} else {
			EXPECT(false, "ipc owner: could not open the exporter's handle here: %s",
			       cudaGetErrorString(cudaGetLastError()));
		}
		r2ccl_disconnect(cl);
	}
	close(in[1]); // the exporter exits
	waitpid(pid, NULL, 0);
	close(out[0]);
	CK(cudaFree(p));
	printf("legacy IPC handles, only the exporter's own: %s\n", failures == f0 ? "ok" : "FAILED");
}

// ---- benchmark (nccl-tests columns) ----

static double busbw_factor(int c, int n)
{
	switch (c) {
	case AR: return 2.0 * (n - 1) / n;
	case AG:
	case RS: return (double)(n - 1) / n;
	default: return 1.0;
	}
}

// Rank r's part of one benchmark operation (in place: as nccl-tests does).
static void bench_submit(int c, int r, size_t count, bool inplace)
{
	Rank *k = &R[r];
	size_t blk = count * 4;
	char *s = k->a, *d = k->b;
	int rc = 0;

	if (inplace)
		s = (c == AG) ? d + r * blk : d;
	if (c == AR)
		rc = r2ccl_allreduce_stream(k->comm, s, d, count, R2CCL_FLOAT32, R2CCL_SUM, k->st);
	else if (c == AG)
		rc = r2ccl_allgather_stream(k->comm, s, d, count, R2CCL_FLOAT32, k->st);
	else if (c == RS)
		rc = r2ccl_reducescatter_stream(k->comm, inplace ? d : s, inplace ? d + r * blk : d,
						count, R2CCL_FLOAT32, R2CCL_SUM, k->st);
	else if (c == BC)
		rc = r2ccl_broadcast_stream(k->comm, s, d, count, R2CCL_FLOAT32, 0, k->st);
	if (rc) {
		fprintf(stderr, "bench: %s\n", r2ccl_strerror(rc));
		exit(1);
	}
}

static double time_op(int c, size_t count, bool inplace, int iters)
{
	double t0;

	for (int it = -3; it < iters; it++) {
		if (it == 0) {
			for (int r = 0; r < nranks; r++) {
				CK(cudaSetDevice(R[r].dev));
				CK(cudaStreamSynchronize(R[r].st));
			}
			t0 = now_s();
		}
		for (int r = 0; r < nranks; r++) {
			CK(cudaSetDevice(R[r].dev));
			bench_submit(c, r, count, inplace);
		}
	}
	for (int r = 0; r < nranks; r++) {
		CK(cudaSetDevice(R[r].dev));
		CK(cudaStreamSynchronize(R[r].st));
	}
	return (now_s() - t0) / iters;
}

static unsigned long long *bench_wrong[8]; // a counter on each rank's GPU

// One checked operation of the benchmark's shape: the outputs poisoned
// (NaN), rank r's input (r + 1) + i % 13, the operation, then the elements
// of every output that differ from the exact result are counted on the GPU.
// Returns how many, all ranks together.
static unsigned long long bench_check(int c, size_t count, bool inplace)
{
	size_t blk = count * 4, n = (size_t)nranks;
	float tri = (float)(n * (n + 1) / 2), fn = (float)n;
	unsigned long long total = 0;

	for (int r = 0; r < nranks; r++) {
		Rank *k = &R[r];
		char *d = k->b, *s = inplace ? ((c == AG) ? d + r * blk : d) : k->a;
		size_t in_n = (c == RS) ? n * count : count;
		float *out = (float *)((c == RS && inplace) ? d + r * blk : d);

		CK(cudaSetDevice(k->dev));
		if (!bench_wrong[r])
			CK(cudaMalloc(&bench_wrong[r], sizeof(unsigned long long)));
		CK(cudaMemsetAsync(bench_wrong[r], 0, sizeof(unsigned long long), k->st));
		CK(cudaMemsetAsync(d, 0xFF, (c == AG || c == RS) ? n * blk : blk, k->st));
		k_fill_f32<<<256, 256, 0, k->st>>>((float *)s, in_n, (float)(r + 1));
		bench_submit(c, r, count, inplace);
		if (c == AR)
			k_count_wrong<<<256, 256, 0, k->st>>>(out, count, 0, tri, fn, bench_wrong[r]);
		else if (c == RS)
			k_count_wrong<<<256, 256, 0, k->st>>>(out, count, (size_t)r * count, tri, fn,
							      bench_wrong[r]);
		else if (c == BC)
			k_count_wrong<<<256, 256, 0, k->st>>>(out, count, 0, 1.0f, 1.0f,
							      bench_wrong[r]);
		else
			for (int q = 0; q < nranks; q++)
				k_count_wrong<<<256, 256, 0, k->st>>>(out + (size_t)q * count, count, 0,
								      (float)(q + 1), 1.0f,
								      bench_wrong[r]);
		CK(cudaGetLastError());
	}
	sync_all("bench check");
	for (int r = 0; r < nranks; r++) {
		unsigned long long w = 0;
		CK(cudaSetDevice(R[r].dev));
		CK(cudaMemcpy(&w, bench_wrong[r], sizeof(w), cudaMemcpyDeviceToHost));
		total += w;
	}
	return total;
}

static int bench(int argc, char **argv)
{
	int c = AR, g = ngpus, nsizes = 0;
	unsigned long long nwrong = 0;
	size_t maxb = (size_t)4 << 30;
	const size_t sizes[] = { 8, 32, 128, 512, 2048, 8192, 32768, 131072, 1 << 20, 4 << 20,
				 16 << 20, 64 << 20, 256 << 20, (size_t)1 << 30, (size_t)4 << 30 };

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "-g") && i + 1 < argc)
			g = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-e") && i + 1 < argc)
			maxb = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "-c") && i + 1 < argc) {
			const char *n = argv[++i];
			c = !strcmp(n, "allgather") ? AG
			    : !strcmp(n, "reducescatter") ? RS
			    : !strcmp(n, "broadcast") ? BC
						       : AR;
		}
	}
	if (g > ngpus)
		g = ngpus;
	// nranks = g, one per GPU; buffers: the largest size (allgather/reducescatter: x g)
	setup(g, (c == AG || c == RS) ? maxb : maxb);
	printf("# r2ccl %s, %d rank(s) on %d GPU(s), float32 sum, stream-ordered (R2CCL_GPU_COPY=%s)\n",
	       coll_name[c], g, g, getenv("R2CCL_GPU_COPY") ? getenv("R2CCL_GPU_COPY") : "ce");
	printf("#%11s %12s %8s %6s %6s  %9s %7s %7s %6s  %9s %7s %7s %6s\n", "size", "count", "type",
	       "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
	       "#wrong");
	printf("#%11s %12s %8s %6s %6s  %9s %7s %7s %6s  %9s %7s %7s %6s\n", "(B)", "(elements)", "",
	       "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		size_t size = sizes[si];
		size_t per = (c == AG || c == RS) ? size / (size_t)g : size; // per-rank block
		size_t count = per / 4;
		double t[2];
		unsigned long long wrong[2];
		int iters;

		if (size > maxb || count == 0)
			continue;
		iters = size <= (1 << 20) ? 200 : (int)(((size_t)2 << 30) / size);
		if (iters < 5)
			iters = 5;
		if (iters > 200)
			iters = 200;
		for (int ip = 0; ip < 2; ip++) {
			wrong[ip] = bench_check(c, count, ip);
			nwrong += wrong[ip];
			t[ip] = time_op(c, count, ip, iters);
		}
		printf("%12zu %12zu %8s %6s %6d", count * 4 * ((c == AG || c == RS) ? g : 1), count,
		       "float", (c == AR || c == RS) ? "sum" : "none", c == BC ? 0 : -1);
		for (int ip = 0; ip < 2; ip++) {
			double alg = (double)(count * 4 * ((c == AG || c == RS) ? g : 1)) / t[ip] / 1e9;
			printf("  %9.2f %7.2f %7.2f %6llu", t[ip] * 1e6, alg, alg * busbw_factor(c, g),
			       wrong[ip]);
		}
		printf("\n");
		fflush(stdout);
		nsizes++;
	}
	teardown();
	for (int r = 0; r < 8; r++)
		if (bench_wrong[r]) {
			cudaFree(bench_wrong[r]);
			bench_wrong[r] = NULL;
		}
	// every size checked, out of place and in place (nccl-tests' #wrong)
	printf("# %s: %d sizes, %llu wrong element(s), %d other failure(s)\n",
	       nwrong || failures || !nsizes ? "FAILED" : "PASSED", nsizes, nwrong, failures);
	return nwrong || failures || !nsizes ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct th_daemon d;
	bool external = getenv("R2CCL_GPU_TEST_EXTERNAL") != NULL;
	int rc;

	if (argc >= 4 && !strcmp(argv[1], "--victim"))
		return victim(atoi(argv[2]), argv[3]);
	if (argc >= 3 && !strcmp(argv[1], "--exporter"))
		return exporter(atoi(argv[2]));
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus < 1) {
		printf("no usable GPU: skipping\n");
		return 77;
	}
	if (ngpus > 8)
		ngpus = 8;
	cumem_init();
	if (!external) {
		const char *args[] = { "--log-level", "info", NULL };
		memset(&d, 0, sizeof(d));
		if (th_daemon_start(&d, args) < 0)
			return 1;
	}
	if (argc >= 2 && !strcmp(argv[1], "--bench")) {
		rc = bench(argc, argv);
	} else {
		int n = ngpus >= 2 ? ngpus : 2;
		setup(n, (size_t)64 << 20);
		test_matrix();
		test_count0();
		test_order_same_stream();
		test_order_events();
		test_cumem();
		teardown();
		if (ngpus >= 2) {
			// 4 ranks on 2 GPUs (two per GPU)
			setup(4, (size_t)64 << 20);
			test_matrix();
			teardown();
		}
		test_kill(argv[0], external ? NULL : &d);
		test_ipc_owner(argv[0]);
		EXPECT(external || th_daemon_alive(&d), "r2ccld died");
		printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
		rc = failures ? 1 : 0;
	}
	if (!external) {
		int st = th_daemon_stop(&d, SIGTERM, 20000);
		const char *keep = getenv("R2CCL_GPU_TEST_LOG");
		if (keep) {
			char cmd[1024];
			snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", d.log, keep);
			if (system(cmd) != 0)
				printf("could not keep the daemon log\n");
		}
		if (st != 0)
			printf("r2ccld exited with %d (log: %s)\n", st, d.log);
		if (rc == 0 && st == 0)
			th_daemon_cleanup(&d);
	}
	return rc;
}
