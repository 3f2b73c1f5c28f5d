/* SPDX-License-Identifier: MIT */
/*
 * Grouped ncclSend + ncclRecv of GPU buffers between ranks on different
 * hosts, both directions at once: the pattern that failed across namespace
 * hosts (issue 19: a MISMATCH, then ncclRemoteError; docs/nccl.md). One rank
 * per host, started on each host (run-on-device.sh p2p):
 *   nccl_gpu_p2p RANK NRANKS UID_FILE [GPU]
 * Rank 0 writes the unique id to UID_FILE (a fresh path), the others wait
 * for it. Each rank sends to rank+1 and receives from rank-1 (a ring), in
 * both call orders, 1 to 16M int32 elements, 8 rounds; every element of
 * every receive checked, and ncclCommGetAsyncError. Exit 0: all right.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define MAXN ((size_t)16 << 20)

#define CK(call)                                                                       \
	do {                                                                           \
		ncclResult_t r_ = (call);                                              \
		if (r_ != ncclSuccess) {                                               \
			fprintf(stderr, "rank %d line %d: %s: %s (%s)\n", rank, __LINE__, \
				#call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
			return 2;                                                      \
		}                                                                      \
	} while (0)
#define CU(call)                                                                       \
	do {                                                                           \
		cudaError_t e_ = (call);                                               \
		if (e_ != cudaSuccess) {                                               \
			fprintf(stderr, "rank %d line %d: %s: %s\n", rank, __LINE__, #call, \
				cudaGetErrorString(e_));                               \
			return 2;                                                      \
		}                                                                      \
	} while (0)

static int32_t value(int from, int round, size_t i)
{
	return (int32_t)((uint32_t)from * 1000003u + (uint32_t)i * 7u + (uint32_t)round);
}

static int read_uid(const char *path, ncclUniqueId *id)
{
	for (int i = 0; i < 1200; i++) { /* 120 s */
		FILE *f = fopen(path, "r");
		if (f) {
			size_t n = fread(id, sizeof(*id), 1, f);
			fclose(f);
			if (n == 1)
				return 0;
		}
		usleep(100000);
	}
	return -1;
}

int main(int argc, char **argv)
{
	static const size_t counts[] = { 1, 1000, ((size_t)1 << 20) + 3, MAXN };
	int rank = argc > 1 ? atoi(argv[1]) : -1, nranks = argc > 2 ? atoi(argv[2]) : 0;
	int gpu = argc > 4 ? atoi(argv[4]) : 0, next, prev, wrong = 0;
	ncclUniqueId id;
	ncclComm_t comm;
	cudaStream_t st;
	int32_t *s, *r, *h;
	ncclResult_t aerr;

	if (argc < 4 || rank < 0 || nranks < 2 || rank >= nranks) {
		fprintf(stderr, "usage: nccl_gpu_p2p RANK NRANKS UID_FILE [GPU]\n");
		return 2;
	}
	next = (rank + 1) % nranks;
	prev = (rank + nranks - 1) % nranks;
	CU(cudaSetDevice(gpu));
	if (rank == 0) {
		char tmp[4096];
		FILE *f;
		CK(ncclGetUniqueId(&id));
		snprintf(tmp, sizeof(tmp), "%s.tmp", argv[3]);
		if (!(f = fopen(tmp, "w")) || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) ||
		    rename(tmp, argv[3]))
			return 2;
	} else if (read_uid(argv[3], &id) < 0) {
		fprintf(stderr, "rank %d: no unique id in %s\n", rank, argv[3]);
		return 2;
	}
	CK(ncclCommInitRank(&comm, nranks, id, rank));
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CU(cudaMalloc((void **)&s, MAXN * 4));
	CU(cudaMalloc((void **)&r, MAXN * 4));
	if (!(h = malloc(MAXN * 4)))
		return 2;
	for (int round = 0; round < 8; round++) {
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
			size_t n = counts[c], bad = 0;
			for (size_t i = 0; i < n; i++)
				h[i] = value(rank, round, i);
			CU(cudaMemcpyAsync(s, h, n * 4, cudaMemcpyHostToDevice, st));
			CU(cudaMemsetAsync(r, 0xff, n * 4, st));
			CK(ncclGroupStart());
			if ((round + rank) & 1) { /* both call orders, differing by rank */
				CK(ncclRecv(r, n, ncclInt32, prev, comm, st));
				CK(ncclSend(s, n, ncclInt32, next, comm, st));
			} else {
				CK(ncclSend(s, n, ncclInt32, next, comm, st));
				CK(ncclRecv(r, n, ncclInt32, prev, comm, st));
			}
			CK(ncclGroupEnd());
			CU(cudaMemcpyAsync(h, r, n * 4, cudaMemcpyDeviceToHost, st));
			CU(cudaStreamSynchronize(st));
			CK(ncclCommGetAsyncError(comm, &aerr));
			if (aerr != ncclSuccess) {
				fprintf(stderr, "rank %d round %d count %zu: async error %s (%s)\n", rank,
					round, n, ncclGetErrorString(aerr), ncclGetLastError(comm));
				return 1;
			}
			for (size_t i = 0; i < n; i++)
				if (h[i] != value(prev, round, i) && bad++ < 3)
					fprintf(stderr, "rank %d round %d count %zu: [%zu] = %d, not %d\n",
						rank, round, n, i, h[i], value(prev, round, i));
			wrong += bad != 0;
		}
	}
	CK(ncclCommDestroy(comm));
	printf("nccl_gpu_p2p rank %d of %d: %s (%d of %zu transfers wrong)\n", rank, nranks,
	       wrong ? "FAIL" : "OK", wrong, 8 * sizeof(counts) / sizeof(counts[0]));
	return wrong ? 1 : 0;
}
