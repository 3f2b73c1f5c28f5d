/* SPDX-License-Identifier: MIT */
/*
 * copy_lat: how long one small host<->device copy takes, queued and waited
 * for the way r2ccld's staging does it (daemon/gpu/staging.c: pinned host
 * memory from cudaHostRegister, a non-blocking stream, cudaStreamSynchronize),
 * for each size, median and p99 of N copies, and the alternatives for the
 * copy back to the GPU:
 *   ce        cudaMemcpyAsync on the copy engines (staging.c today)
 *   kernel    a copy kernel reading the host memory through its device
 *             mapping (cudaHostRegisterMapped), one launch
 * and the whole sequence libr2ccl's client staging queues on a stream
 * (libclient/gpu.c): input to the host, "ready" written, a wait for "done"
 * (which a host thread writes WAIT_US after it sees "ready", standing in for
 * r2ccld), the output back; "seq" is its time less WAIT_US, "seq-noin"
 * and "seq-noout" the same without the first or the last copy; "seq-kernel"
 * the same sequence as one kernel launch on the mapped host memory (each
 * block copies its slice out, the last one writes "ready", every block
 * waits for "done" and copies its slice back): no copy engine, no stream
 * memory operation (libclient/stage_kernel.cu, included here). (A kernel
 * for the input and "ready" only, then the stream's wait and a copy back,
 * was no faster than the copies: docs/benchmarks.md, 2026-12-07.)
 * The device buffer is another process's cudaMalloc opened with
 * cudaIpcOpenMemHandle, as r2ccld sees a client's buffer (ipc), or this
 * process's own (own).
 * --busy: the other process (the buffer's owner) keeps a stream of its own
 * waiting on the GPU (a wait for a host value it sets only at the end), as
 * a client's stream waits for "done" while r2ccld copies, or as a second
 * rank's on a GPU the namespace hosts share.
 *   usage: copy_lat [-n N] [--busy] [SIZE...]     exits 77 without a GPU
 * Issue 21: a staged 4-16 KiB AllReduce took 147 us host->device, 32 KiB
 * and up 13-21 us (run-on-device.sh latprof).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* libr2ccl's kernel for the one-launch sequence, as shipped */
#include "../../libclient/stage_kernel.cu"

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

__global__ void copy_kernel(uint4 *dst, const uint4 *src, size_t n16)
{
	for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += gridDim.x * blockDim.x)
		dst[i] = src[i];
}

#define CK(x)                                                                                \
	do {                                                                                 \
		cudaError_t e_ = (x);                                                        \
		if (e_ != cudaSuccess) {                                                     \
			fprintf(stderr, "copy_lat: %s: %s\n", #x, cudaGetErrorString(e_));   \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

enum { H2D_CE, D2H_CE, H2D_KERNEL, NKIND };
static const char *kind_name[NKIND] = { "h2d ce", "d2h ce", "h2d kernel" };

/* median and p99 of n copies of sz bytes of one kind, in us */
static void measure(int kind, char *dev, char *host, char *hmap, size_t sz, int n,
		    cudaStream_t st, double *p50, double *p99)
{
	uint64_t *t = (uint64_t *)calloc((size_t)n, sizeof(*t));
	for (int i = -10; i < n; i++) {
		uint64_t t0 = now_ns();
		if (kind == H2D_CE)
			CK(cudaMemcpyAsync(dev, host, sz, cudaMemcpyDefault, st));
		else if (kind == D2H_CE)
			CK(cudaMemcpyAsync(host, dev, sz, cudaMemcpyDefault, st));
		else
			copy_kernel<<<(unsigned)((sz / 16 + 255) / 256 > 64 ? 64 : (sz / 16 + 255) / 256),
				      256, 0, st>>>((uint4 *)dev, (const uint4 *)hmap, sz / 16);
		CK(cudaStreamSynchronize(st));
		if (i >= 0)
			t[i] = now_ns() - t0;
	}
	qsort(t, (size_t)n, sizeof(*t), cmp_u64);
	*p50 = (double)t[n / 2] / 1e3;
	*p99 = (double)t[(n * 99) / 100] / 1e3;
	free(t);
}

/* the driver's stream memory operations (through cudart: no libcuda link) */
static CUresult (*writeValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static CUresult (*waitValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

/* the stand-in for r2ccld: done = ready, WAIT_US after ready changes */
#define WAIT_US 50
static volatile uint32_t *flags; /* [0] ready, [1] done */
static volatile int stop_daemon;

static void *fake_daemon(void *arg)
{
	uint32_t seen = 0;
	(void)arg;
	while (!stop_daemon) {
		uint32_t r = __atomic_load_n(&flags[0], __ATOMIC_ACQUIRE);
		if (r == seen)
			continue;
		uint64_t t = now_ns();
		while (now_ns() - t < WAIT_US * 1000ull)
			;
		seen = r;
		__atomic_store_n(&flags[1], r, __ATOMIC_RELEASE);
	}
	return NULL;
}

static unsigned stage_blocks(size_t sz) /* as libclient/stage_kernel.c */
{
	size_t b = (sz + 4095) / 4096;
	return (unsigned)(b > 32 ? 32 : b ? b : 1);
}

/* the client staging's sequence, n times: median and p99 less WAIT_US
 * (in < 0: as one kernel, r2c_stage, on the mapped area hmap) */
static void measure_seq(int in, int out, char *dev, char *host, char *hmap, size_t sz, int n,
			cudaStream_t st, CUdeviceptr dflags, unsigned *count, double *p50, double *p99)
{
	static uint32_t seq;
	uint64_t *t = (uint64_t *)calloc((size_t)n, sizeof(*t));
	for (int i = -10; i < n; i++) {
		uint64_t t0 = now_ns();
		seq++;
		if (in < 0) {
			r2c_stage<<<stage_blocks(sz), 256, 0, st>>>(dev, hmap, sz, hmap + (1 << 19),
								    dev, sz, (volatile uint32_t *)dflags,
								    seq, count);
			CK(cudaGetLastError());
			CK(cudaStreamSynchronize(st));
			if (i >= 0)
				t[i] = now_ns() - t0 - WAIT_US * 1000ull;
			continue;
		}
		if (in)
			CK(cudaMemcpyAsync(host, dev, sz, cudaMemcpyDefault, st));
		if (writeValue32((CUstream)st, dflags, seq, CU_STREAM_WRITE_VALUE_DEFAULT) ||
		    waitValue32((CUstream)st, dflags + 4, seq, CU_STREAM_WAIT_VALUE_GEQ)) {
			fprintf(stderr, "copy_lat: stream memory operations refused\n");
			exit(1);
		}
		if (out)
			CK(cudaMemcpyAsync(dev, host + (1 << 19), sz, cudaMemcpyDefault, st));
		CK(cudaStreamSynchronize(st));
		if (i >= 0)
			t[i] = now_ns() - t0 - WAIT_US * 1000ull;
	}
	qsort(t, (size_t)n, sizeof(*t), cmp_u64);
	*p50 = (double)t[n / 2] / 1e3;
	*p99 = (double)t[(n * 99) / 100] / 1e3;
	free(t);
}

int main(int argc, char **argv)
{
	int n = 1000, ndev = 0, busy = 0;
	size_t sizes[32], nsz = 0, maxsz = 0;
	int pfd[2], qfd[2];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--busy"))
			busy = 1;
		else if (nsz < 32)
			sizes[nsz++] = strtoull(argv[i], NULL, 0);
	}
	if (!nsz)
		for (size_t s = 4096; s <= (1u << 20); s *= 2)
			sizes[nsz++] = s;
	for (size_t i = 0; i < nsz; i++)
		maxsz = sizes[i] > maxsz ? sizes[i] : maxsz;
	/* the owner: a child that allocates and hands over an IPC handle
	 * (forked before this process touches CUDA) */
	if (pipe(pfd) || pipe(qfd))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		void *p;
		close(pfd[0]);
		close(qfd[1]);
		cudaIpcMemHandle_t h;
		char c;
		if (cudaMalloc(&p, maxsz) != cudaSuccess || cudaIpcGetMemHandle(&h, p) != cudaSuccess)
			_exit(77);
		if (write(pfd[1], &h, sizeof(h)) != (ssize_t)sizeof(h))
			_exit(1);
		uint32_t *bf = NULL;
		if (busy) { /* a stream of this process waits until the end */
			cudaStream_t bs;
			CUdeviceptr dbf;
			if (posix_memalign((void **)&bf, 4096, 4096))
				_exit(1);
			memset(bf, 0, 4096);
			CK(cudaHostRegister(bf, 4096, cudaHostRegisterPortable | cudaHostRegisterMapped));
			CK(cudaHostGetDevicePointer((void **)&dbf, bf, 0));
			CK(cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking));
			CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void **)&waitValue32,
							    12000, cudaEnableDefault, NULL));
			if (waitValue32((CUstream)bs, dbf, 1, CU_STREAM_WAIT_VALUE_GEQ))
				_exit(1);
		}
		(void)!read(qfd[0], &c, 1); /* until the parent is done */
		if (bf) {
			__atomic_store_n(bf, 1, __ATOMIC_RELEASE);
			cudaDeviceSynchronize();
		}
		_exit(0);
	}
	close(pfd[1]);
	close(qfd[0]);
	cudaIpcMemHandle_t h;
	if (read(pfd[0], &h, sizeof(h)) != (ssize_t)sizeof(h) || cudaGetDeviceCount(&ndev) != cudaSuccess ||
	    ndev < 1) {
		printf("copy_lat: no GPU\n");
		close(qfd[1]);
		waitpid(pid, NULL, 0);
		return 77;
	}
	char *ipc, *own, *host, *hmap;
	cudaStream_t st;
	CK(cudaSetDevice(0));
	CK(cudaIpcOpenMemHandle((void **)&ipc, h, cudaIpcMemLazyEnablePeerAccess));
	CK(cudaMalloc((void **)&own, maxsz));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	size_t hsz = maxsz < (1u << 20) ? (1u << 20) : maxsz;
	if (posix_memalign((void **)&host, 4096, hsz))
		return 1;
	memset(host, 1, hsz);
	CK(cudaHostRegister(host, hsz, cudaHostRegisterPortable | cudaHostRegisterMapped));
	CK(cudaHostGetDevicePointer((void **)&hmap, host, 0));
	if (busy)
		usleep(200000); /* the other process's wait is queued */
	printf("# copy_lat: %d copies each, queued then cudaStreamSynchronize (us)%s\n", n,
	       busy ? "; another process's stream waits on the GPU meanwhile" : "");
	printf("%10s", "size");
	for (int b = 0; b < 2; b++)
		for (int k = 0; k < NKIND; k++)
			printf(" %10s %-3s p50 p99", kind_name[k], b ? "own" : "ipc");
	printf("\n");
	for (size_t i = 0; i < nsz; i++) {
		printf("%10zu", sizes[i]);
		for (int b = 0; b < 2; b++)
			for (int k = 0; k < NKIND; k++) {
				double p50, p99;
				measure(k, b ? own : ipc, host, hmap, sizes[i], n, st, &p50, &p99);
				printf(" %14.1f %8.1f", p50, p99);
			}
		printf("\n");
	}
	/* the client staging's sequence on the device buffer of this process */
	uint32_t *fl;
	CUdeviceptr dfl;
	pthread_t th;
	if (posix_memalign((void **)&fl, 4096, 4096))
		return 1;
	memset(fl, 0, 4096);
	CK(cudaHostRegister(fl, 4096, cudaHostRegisterPortable | cudaHostRegisterMapped));
	CK(cudaHostGetDevicePointer((void **)&dfl, fl, 0));
	flags = fl;
	CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void **)&writeValue32, 12000,
					    cudaEnableDefault, NULL));
	CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void **)&waitValue32, 12000,
					    cudaEnableDefault, NULL));
	pthread_create(&th, NULL, fake_daemon, NULL);
	printf("# the client staging's sequence (us, less the %d us the stand-in daemon waits)\n",
	       WAIT_US);
	unsigned *count;
	CK(cudaMalloc((void **)&count, 2 * sizeof(*count)));
	CK(cudaMemset(count, 0, 2 * sizeof(*count)));
	printf("%10s %14s %8s %14s %8s %14s %8s %14s %8s\n", "size", "seq p50", "p99",
	       "seq-noin p50", "p99", "seq-noout p50", "p99", "seq-kernel p50", "p99");
	for (size_t i = 0; i < nsz && sizes[i] <= (1u << 19) && sizes[i] <= hsz / 2; i++) {
		double a, b, c, d, e, f, g, k;
		measure_seq(1, 1, own, host, hmap, sizes[i], n, st, dfl, count, &a, &b);
		measure_seq(0, 1, own, host, hmap, sizes[i], n, st, dfl, count, &c, &d);
		measure_seq(1, 0, own, host, hmap, sizes[i], n, st, dfl, count, &e, &f);
		measure_seq(-1, 1, own, host, hmap, sizes[i], n, st, dfl, count, &g, &k);
		printf("%10zu %14.1f %8.1f %14.1f %8.1f %14.1f %8.1f %14.1f %8.1f\n", sizes[i], a, b,
		       c, d, e, f, g, k);
	}
	CK(cudaFree(count));
	stop_daemon = 1;
	pthread_join(th, NULL);
	CK(cudaIpcCloseMemHandle(ipc));
	(void)!write(qfd[1], "x", 1);
	waitpid(pid, NULL, 0);
	return 0;
}
