/* SPDX-License-Identifier: MIT */
/* Daemon-side CUDA kernels (kernels.cu): C interface. */
#ifndef R2CCL_GPU_KERNELS_H
#define R2CCL_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define R2K_MAX_PTRS 16

/* out[o][i] = op over in[k][i] (k < nin) for i < n, for every o < nout;
 * AVG: the sum divided by div. Outputs may alias inputs exactly. */
struct r2k_reduce_args {
	const void *in[R2K_MAX_PTRS];
	void *out[R2K_MAX_PTRS];
	int nin, nout;
	uint64_t n;
	int div;
	int vec; /* 1: every pointer is 16-byte aligned */
};

/* out[o][0..bytes) = in[0..bytes) for every o < nout. */
struct r2k_copy_args {
	const void *in;
	void *out[R2K_MAX_PTRS];
	int nout;
	uint64_t bytes;
	int vec;
};

/* stream: a cudaStream_t of the current device. 0 or a cudaError_t. */
int r2k_reduce(void *stream, int dtype, int op, const struct r2k_reduce_args *a, int max_blocks);
int r2k_copy(void *stream, const struct r2k_copy_args *a, int max_blocks);

#ifdef __cplusplus
}
#endif
#endif
