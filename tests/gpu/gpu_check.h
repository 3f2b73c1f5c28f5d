/* SPDX-License-Identifier: MIT */
/*
 * What the C tests on a GPU check with (gpu_release.c, tests/nccl's
 * nccl_gpu_test.c and nccl_gpu_ctx.c): a CUDA runtime call that must
 * succeed, else the test ends (CU); a condition that counts a failure in the
 * file's `failures` and goes on (EXPECT); a driver entry point by name
 * (gpu_drv); cuMem memory on a device (gpu_cumem); with nccl.h included
 * first, an NCCL call that must succeed (CK).
 */
#ifndef R2_TESTS_GPU_CHECK_H
#define R2_TESTS_GPU_CHECK_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* cuMem memory of size bytes (rounded up to the granularity) on device dev,
 * mapped read-write there, with the shareable handle type `type`: a POSIX
 * fd lets r2ccld open it; none (as PyTorch's expandable segments) makes the
 * library stage it through a buffer of the communicator's. */
static inline float *gpu_cumem(int dev, size_t size, CUmemAllocationHandleType type)
{
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long) = gpu_drv("cuMemCreate");
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
		gpu_drv("cuMemAddressReserve");
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			unsigned long long) = gpu_drv("cuMemMap");
	CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) =
		gpu_drv("cuMemSetAccess");
	CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags) =
		gpu_drv("cuMemGetAllocationGranularity");
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc;
	CUdeviceptr va;
	size_t g;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	prop.requestedHandleTypes = type;
	if (gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		exit(1);
	size = (size + g - 1) / g * g;
	if (create(&h, size, &prop, 0) != CUDA_SUCCESS ||
	    reserve(&va, size, g, 0, 0) != CUDA_SUCCESS || map(va, size, 0, h, 0) != CUDA_SUCCESS)
		exit(1);
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (access(va, size, &acc, 1) != CUDA_SUCCESS)
		exit(1);
	return (float *)va;
}

#endif
