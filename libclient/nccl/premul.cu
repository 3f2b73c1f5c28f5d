// SPDX-License-Identifier: MIT
/*
 * PreMulSum's scaling on the GPU (libclient/nccl/mem.c, premul_gpu): the
 * input times the operator's scalar, into the communicator's staging
 * buffer, on the caller's stream; the sum of those then runs as any
 * stream-ordered sum. Built to PTX and loaded by the driver when first used
 * (cuModuleLoadData, libclient/nccl/cuda.c): libnccl.so.2 has no link-time
 * CUDA dependency.
 *
 * The arithmetic is the host path's (premul_copy in mem.c), so both give
 * the same bits: half and bfloat16 go through float, the product is taken
 * in double and rounded to float, then to the type (round to nearest even);
 * integers are multiplied modulo their width (the low bits of a product do
 * not depend on the operands' sign extension, so one kernel serves a width
 * signed and unsigned). The scalar is the immediate s/is, or, with
 * scalar != NULL (ncclScalarDevice), read from device memory when the kernel
 * runs, as NCCL reads it.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define LOOP for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; \
		  i += (uint64_t)gridDim.x * blockDim.x)

extern "C" __global__ void r2c_premul_f16(const __half *src, __half *dst, uint64_t n,
					  const __half *scalar, double s)
{
	if (scalar)
		s = (double)__half2float(*scalar);
	LOOP dst[i] = __float2half_rn((float)((double)__half2float(src[i]) * s));
}

extern "C" __global__ void r2c_premul_bf16(const __nv_bfloat16 *src, __nv_bfloat16 *dst,
					   uint64_t n, const __nv_bfloat16 *scalar, double s)
{
	if (scalar)
		s = (double)__bfloat162float(*scalar);
	LOOP dst[i] = __float2bfloat16_rn((float)((double)__bfloat162float(src[i]) * s));
}

extern "C" __global__ void r2c_premul_f32(const float *src, float *dst, uint64_t n,
					  const float *scalar, double s)
{
	if (scalar)
		s = (double)*scalar;
	LOOP dst[i] = (float)((double)src[i] * s);
}

extern "C" __global__ void r2c_premul_f64(const double *src, double *dst, uint64_t n,
					  const double *scalar, double s)
{
	if (scalar)
		s = *scalar;
	LOOP dst[i] = src[i] * s;
}

extern "C" __global__ void r2c_premul_u8(const uint8_t *src, uint8_t *dst, uint64_t n,
					 const uint8_t *scalar, int64_t is)
{
	uint64_t k = scalar ? *scalar : (uint64_t)is;

	LOOP dst[i] = (uint8_t)(src[i] * k);
}

extern "C" __global__ void r2c_premul_u32(const uint32_t *src, uint32_t *dst, uint64_t n,
					  const uint32_t *scalar, int64_t is)
{
	uint64_t k = scalar ? *scalar : (uint64_t)is;

	LOOP dst[i] = (uint32_t)(src[i] * k);
}

extern "C" __global__ void r2c_premul_u64(const uint64_t *src, uint64_t *dst, uint64_t n,
					  const uint64_t *scalar, int64_t is)
{
	uint64_t k = scalar ? *scalar : (uint64_t)is;

	LOOP dst[i] = src[i] * k;
}
