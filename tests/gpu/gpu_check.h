/* SPDX-License-Identifier: MIT */
/*
 * What the C tests on a GPU check with (gpu_release.c, tests/nccl's
 * nccl_gpu_test.c and nccl_gpu_ctx.c): a CUDA runtime call that must
 * succeed, else the test ends (CU); a condition that counts a failure in the
 * file's `failures` and goes on (EXPECT); a driver entry point by name
 * (gpu_drv); with nccl.h included first, an NCCL call that must succeed
 * (CK).
 */
#ifndef R2_TESTS_GPU_CHECK_H
#define R2_TESTS_GPU_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CU(call)                                                                       \
	do {                                                                           \
		cudaError_t e_ = (call);                                               \
		if (e_ != cudaSuccess) {                                               \
			fprintf(stderr, "line %d: %s: %s\n", __LINE__, #call,           \
				cudaGetErrorString(e_));                               \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

#define EXPECT(c, ...)                                                                 \
	do {                                                                           \
		if (!(c)) {                                                            \
			fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #c);            \
			fprintf(stderr, __VA_ARGS__);                                  \
			fputc('\n', stderr);                                           \
			failures++;                                                    \
		}                                                                      \
	} while (0)

#ifdef NCCL_MAJOR
#define CK(call)                                                                       \
	do {                                                                           \
		ncclResult_t r_ = (call);                                              \
		if (r_ != ncclSuccess) {                                               \
			fprintf(stderr, "line %d: %s: %s (%s)\n", __LINE__, #call,      \
				ncclGetErrorString(r_), ncclGetLastError(NULL));       \
			exit(1);                                                       \
		}                                                                      \
	} while (0)
#endif

/* The driver's entry point `name` (CUDA 12 ABI), without linking libcuda. */
static inline void *gpu_drv(const char *name)
{
	enum cudaDriverEntryPointQueryResult q;
	void *f = NULL;

	CU(cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q));
	return f;
}

#endif
