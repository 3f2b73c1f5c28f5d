/* SPDX-License-Identifier: MIT */
/*
 * libnccl.so.2 and CUDA contexts (suite gpu: exits 77 without a GPU; run by
 * tests/nccl/run-on-device.sh ctest). Each communicator works in the context
 * of its device, taken at creation (docs/nccl.md, "CUDA contexts"), whatever
 * the calling thread has current:
 *  1. one GPU: a rank driven from a thread with no current CUDA context (a
 *     fresh thread, as a watchdog's): its operation on staged memory (cuMem
 *     without a POSIX fd), ncclCommGetAsyncError and ncclCommDestroy work;
 *     the result is checked;
 *  2. two GPUs (skipped with a line on a one-GPU machine): one thread
 *     creates ranks on devices 0 and 1 (ncclCommInitAll) and, with device 1
 *     current, runs a group over both, then each rank alone: each rank's
 *     staging buffer lies on its own device (cuPointerGetAttribute), the
 *     caller's current device is the same after every call, and the sums are
 *     right.
 * Reads the communicator's fields (nccl_int.h): a test of this library only.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nccl.h"
#include "../gpu/gpu_check.h"
#include "nccl_int.h"

#define N (1 << 16)
static int failures;

static float host[N];

static void fill(float *d, float base)
{
	for (int i = 0; i < N; i++)
		host[i] = base + (float)(i % 7);
	CU(cudaMemcpy(d, host, sizeof(host), cudaMemcpyHostToDevice));
}

/* d holds sum * (i % 7) + add at every i */
static void check(const char *what, const float *d, float mult, float add)
{
	CU(cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		if (host[i] != mult * (float)(i % 7) + add) {
			EXPECT(0, "%s: element %d is %g, not %g", what, i, host[i],
			       mult * (float)(i % 7) + add);
			return;
		}
	printf("%-60s ok\n", what);
}

static int ordinal(const void *p)
{
	CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr) = gpu_drv("cuPointerGetAttribute");
	int ord = -1;

	if (attr(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)p) != CUDA_SUCCESS)
		return -1;
	return ord;
}

/* ---- 1: a thread with no current context ---- */

struct bare {
	ncclComm_t comm;
	float *buf;
	cudaStream_t st;
	CUcontext had;
	ncclResult_t op, err, async;
};

/* resolved before the thread starts: a runtime call there could make the
 * device's context current on it */
static CUresult (*ctx_current)(CUcontext *);

static void *bare_thread(void *p)
{
	struct bare *b = p;

	ctx_current(&b->had); /* a fresh thread: none */
	b->op = ncclAllReduce(b->buf, b->buf, N, ncclFloat32, ncclSum, b->comm, b->st);
	b->err = ncclCommGetAsyncError(b->comm, &b->async);
	return NULL;
}

static void *destroy_thread(void *p)
{
	struct bare *b = p;

	b->op = ncclCommDestroy(b->comm);
	return NULL;
}

static void test_bare_thread(void)
{
	struct bare b = { 0 };
	int devs[1] = { 0 };
	pthread_t t;

	*(void **)&ctx_current = gpu_drv("cuCtxGetCurrent");
	CU(cudaSetDevice(0));
	CK(ncclCommInitAll(&b.comm, 1, devs));
	CU(cudaStreamCreateWithFlags(&b.st, cudaStreamNonBlocking));
	b.buf = gpu_cumem(0, sizeof(host), CU_MEM_HANDLE_TYPE_NONE);
	fill(b.buf, 1.0f);
	pthread_create(&t, NULL, bare_thread, &b);
	pthread_join(t, NULL);
	EXPECT(b.had == NULL, "a fresh thread had a CUDA context current (%p)", (void *)b.had);
	EXPECT(b.op == ncclSuccess, "ncclAllReduce from a thread with no context: %s (%s)",
	       ncclGetErrorString(b.op), ncclGetLastError(b.comm));
	EXPECT(b.err == ncclSuccess && (b.async == ncclSuccess || b.async == ncclInProgress),
	       "ncclCommGetAsyncError: %d, %d", b.err, b.async);
	CU(cudaStreamSynchronize(b.st));
	if (b.op == ncclSuccess)
		check("one rank, called from a thread with no CUDA context", b.buf, 1.0f, 1.0f);
	EXPECT(b.comm->gstage && ordinal((void *)b.comm->gstage) == 0,
	       "its staging buffer is on device %d",
	       b.comm->gstage ? ordinal((void *)b.comm->gstage) : -1);
	pthread_create(&t, NULL, destroy_thread, &b);
	pthread_join(t, NULL);
	EXPECT(b.op == ncclSuccess, "ncclCommDestroy from a thread with no context: %s",
	       ncclGetErrorString(b.op));
	CU(cudaStreamDestroy(b.st));
}

/* ---- 2: one thread, ranks on devices 0 and 1 ---- */

static void expect_device(int want, const char *after)
{
	int d = -1;

	CU(cudaGetDevice(&d));
	EXPECT(d == want, "after %s the current device is %d, not %d", after, d, want);
}

static void test_two_devices(int ndev)
{
	ncclComm_t comm[2];
	cudaStream_t st[2];
	float *buf[2];
	int devs[2] = { 0, 1 };

	if (ndev < 2) {
		printf("SKIP two-device part: %d GPU (one thread driving ranks on devices 0 and 1 "
		       "needs two)\n", ndev);
		return;
	}
	CU(cudaSetDevice(0));
	CK(ncclCommInitAll(comm, 2, devs));
	for (int r = 0; r < 2; r++) {
		CU(cudaSetDevice(r));
		CU(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
		buf[r] = gpu_cumem(r, sizeof(host), CU_MEM_HANDLE_TYPE_NONE);
		fill(buf[r], (float)r);
		EXPECT(comm[r]->cudev == r, "rank %d's device is %d", r, comm[r]->cudev);
	}
	/* device 1 current (the last set), a group over both ranks */
	CK(ncclGroupStart());
	CK(ncclAllReduce(buf[0], buf[0], N, ncclFloat32, ncclSum, comm[0], st[0]));
	CK(ncclAllReduce(buf[1], buf[1], N, ncclFloat32, ncclSum, comm[1], st[1]));
	CK(ncclGroupEnd());
	expect_device(1, "ncclGroupEnd");
	for (int r = 0; r < 2; r++) {
		CU(cudaSetDevice(r));
		CU(cudaStreamSynchronize(st[r]));
		EXPECT(comm[r]->gstage && ordinal((void *)comm[r]->gstage) == r,
		       "rank %d's staging buffer is on device %d", r,
		       comm[r]->gstage ? ordinal((void *)comm[r]->gstage) : -1);
	}
	check("group with device 1 current: rank 0 (device 0)", buf[0], 2.0f, 1.0f);
	check("group with device 1 current: rank 1 (device 1)", buf[1], 2.0f, 1.0f);
	/* each rank's call alone from one thread, the other device current
	 * (stream-ordered: the first returns before the second is called) */
	for (int r = 0; r < 2; r++) {
		CU(cudaSetDevice(r));
		fill(buf[r], (float)r);
	}
	CU(cudaSetDevice(1));
	CK(ncclAllReduce(buf[0], buf[0], N, ncclFloat32, ncclSum, comm[0], st[0]));
	expect_device(1, "ncclAllReduce on rank 0");
	CU(cudaSetDevice(0));
	CK(ncclAllReduce(buf[1], buf[1], N, ncclFloat32, ncclSum, comm[1], st[1]));
	expect_device(0, "ncclAllReduce on rank 1");
	for (int r = 0; r < 2; r++) {
		CU(cudaSetDevice(r));
		CU(cudaStreamSynchronize(st[r]));
	}
	check("calls alone, the other device current: rank 0", buf[0], 2.0f, 1.0f);
	check("calls alone, the other device current: rank 1", buf[1], 2.0f, 1.0f);
	CU(cudaSetDevice(1));
	CK(ncclCommDestroy(comm[0]));
	CK(ncclCommDestroy(comm[1]));
	expect_device(1, "ncclCommDestroy");
	for (int r = 0; r < 2; r++)
		CU(cudaStreamDestroy(st[r]));
}

int main(void)
{
	struct th_daemon d;
	int ndev = 0;

	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
		printf("SKIP: no GPU\n");
		return 77;
	}
	CU(cudaSetDevice(0));
	if (th_daemon_start(&d, NULL) < 0)
		return 1;
	test_bare_thread();
	test_two_devices(ndev);
	th_daemon_stop(&d, 15, 20000);
	th_daemon_cleanup(&d);
	printf("nccl_gpu_ctx: %s\n", failures ? "FAIL" : "OK");
	return failures ? 1 : 0;
}
