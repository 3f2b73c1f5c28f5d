/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver, loaded at run time (libcuda.so.1 with dlopen, each entry
 * point through cuGetProcAddress_v2), so libr2ccl and libnccl.so.2 have no
 * link-time CUDA dependency and serve host memory where there is no GPU.
 * Used by gpu.c (GPU registrations, stream ordering) and nccl/cuda.c.
 */
#ifndef R2CCL_CUDA_LOAD_H
#define R2CCL_CUDA_LOAD_H

#include <stddef.h>

/* One entry point: its driver name ("cuMemcpy") and where its address
 * goes. */
struct r2c_cu_sym {
	const char *name;
	void **fn;
};

/* Resolves every entry point of t[0..n) (CUDA 12.0's versions of them): 0,
 * -ENODEV when libcuda.so.1 cannot be loaded, -ENOSYS when the driver lacks
 * cuGetProcAddress_v2 or one of them. Call it once (pthread_once). */
int r2c_cu_resolve(const struct r2c_cu_sym *t, size_t n);

#endif
