/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl on a GPU: a communicator's GPU state (its sync slots' shared
 * memory and their registration with CUDA; libclient/gpu_comm.c) goes when
 * the communicator is destroyed, not at r2ccl_disconnect, and only once its
 * stream is past its operations (suite gpu: exits 77 without a GPU; run by
 * tests/gpu/run-on-device.sh suite). A real r2ccld; one client; rank 0 of
 * one-rank communicators on GPU 0, AllReduce in place on cuMem memory
 * r2ccld opens:
 *  1. 200 communicators, each running one stream-ordered AllReduce (checked)
 *     and destroyed after its stream: the process's and the daemon's
 *     descriptors (each communicator's slots are a memfd) do not grow;
 *  2. a stream held back behind a wait on a host flag: the communicator is
 *     destroyed while its operation is still queued; its memory stays (one
 *     descriptor more) until the stream has run past it, the stream then
 *     completes without a CUDA error (no access to freed memory), and the
 *     next GPU call frees it (the descriptor count is back).
 * The host logic has a test without a GPU: gpu-release (test_gpu_release.c).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "gpu_check.h"
#include "r2ccl.h"

#define N 4096
static int failures;

#define RK(call)                                                                       \
	do {                                                                           \
		int r_ = (call);                                                       \
		if (r_ != 0) {                                                         \
			fprintf(stderr, "line %d: %s: %s (%s)\n", __LINE__, #call,      \
				r2ccl_strerror(r_), r2ccl_last_error());               \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static int nfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* the stream, bounded: 60 s */
static cudaError_t sync_bounded(cudaStream_t st)
{
	cudaError_t e;

	for (int i = 0; i < 600000 && (e = cudaStreamQuery(st)) == cudaErrorNotReady; i++)
		usleep(100);
	return e;
}

static r2ccl_comm_t *comm_new(r2ccl_client_t *c)
{
	r2ccl_unique_id_t id;
	r2ccl_comm_t *comm;

	RK(r2ccl_get_unique_id(c, &id));
	RK(r2ccl_comm_init_rank(c, &comm, 1, &id, 0));
	return comm;
}

static float host[N];

/* one AllReduce of one rank in place: the buffer stays what it was */
static void one_op(r2ccl_client_t *c, float *buf, cudaStream_t st, int k)
{
	r2ccl_comm_t *comm = comm_new(c);
	int err = 0;

	for (int i = 0; i < N; i++)
		host[i] = (float)((i + k) % 13);
	CU(cudaMemcpyAsync(buf, host, sizeof(host), cudaMemcpyHostToDevice, st));
	RK(r2ccl_allreduce_stream(comm, buf, buf, N, R2CCL_FLOAT32, R2CCL_SUM, st));
	CU(cudaMemcpyAsync(host, buf, sizeof(host), cudaMemcpyDeviceToHost, st));
	CU(sync_bounded(st));
	RK(r2ccl_comm_get_async_error(comm, &err));
	EXPECT(err == 0, "communicator %d: async error %s", k, r2ccl_strerror(err));
	for (int i = 0; i < N; i++)
		if (host[i] != (float)((i + k) % 13)) {
			EXPECT(0, "communicator %d: element %d is %g", k, i, host[i]);
			break;
		}
	RK(r2ccl_comm_destroy(comm));
}

int main(void)
{
	struct th_daemon d;
	r2ccl_client_t *c;
	cudaStream_t st;
	float *buf;
	int ndev = 0, fd0, dfd0, dfd = -1;

	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
		printf("SKIP: no GPU\n");
		return 77;
	}
	CU(cudaSetDevice(0));
	if (th_daemon_start(&d, NULL) < 0)
		return 1;
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	buf = gpu_cumem(0, sizeof(host), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	RK(r2ccl_connect(NULL, &c));
	RK(r2ccl_mem_register_gpu(c, buf, sizeof(host)));
	one_op(c, buf, st, 0); /* what the first one sets up once */

	/* 1: 200 communicators */
	fd0 = nfds();
	dfd0 = th_daemon_nfds(&d);
	for (int k = 1; k <= 200; k++) {
		one_op(c, buf, st, k);
		if (k % 50 == 0)
			EXPECT(nfds() == fd0, "after %d communicators: %d descriptors, %d before", k,
			       nfds(), fd0);
	}
	for (int k = 0; k < 100 && (dfd = th_daemon_nfds(&d)) > dfd0; k++)
		usleep(100000); /* operations the daemon still ends */
	EXPECT(dfd <= dfd0, "r2ccld holds %d descriptors, %d before", dfd, dfd0);
	printf("%-64s %s\n", "200 communicators created and destroyed: nothing kept",
	       failures ? "FAIL" : "ok");

	/* 2: the stream behind */
	{
		CUresult (*wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) =
			gpu_drv("cuStreamWaitValue32");
		volatile uint32_t *flag;
		void *dflag;
		/* its own buffer: the daemon may still run that operation (in
		 * place, one rank) while the next one uses buf */
		float *buf2 = gpu_cumem(0, sizeof(host), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		r2ccl_comm_t *comm;
		int before = failures;
		cudaError_t e;

		CU(cudaHostAlloc((void **)&flag, 64, cudaHostAllocMapped));
		*flag = 0;
		CU(cudaHostGetDevicePointer(&dflag, (void *)flag, 0));
		RK(r2ccl_mem_register_gpu(c, buf2, sizeof(host)));
		comm = comm_new(c);
		EXPECT(wait32((CUstream)st, (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ) ==
			       CUDA_SUCCESS, "cuStreamWaitValue32 refused");
		RK(r2ccl_allreduce_stream(comm, buf2, buf2, N, R2CCL_FLOAT32, R2CCL_SUM, st));
		RK(r2ccl_comm_destroy(comm));
		EXPECT(nfds() == fd0 + 1, "destroyed, its stream behind: %d descriptors, %d "
		       "expected (its slots kept)", nfds(), fd0 + 1);
		*flag = 1;
		e = sync_bounded(st);
		EXPECT(e == cudaSuccess, "the stream after the destroy: %s", cudaGetErrorString(e));
		one_op(c, buf, st, 300); /* frees the destroyed one's state */
		EXPECT(nfds() == fd0, "after the stream ran: %d descriptors, %d before", nfds(), fd0);
		printf("%-64s %s\n", "destroyed while its stream was behind: kept, then freed",
		       failures != before ? "FAIL" : "ok");
		CU(cudaFreeHost((void *)flag));
	}
	RK(r2ccl_mem_deregister_gpu(c, buf));
	r2ccl_disconnect(c);
	CU(cudaStreamDestroy(st));
	th_daemon_stop(&d, 15, 20000);
	th_daemon_cleanup(&d);
	printf("gpu_release: %s\n", failures ? "FAIL" : "OK");
	return failures ? 1 : 0;
}
