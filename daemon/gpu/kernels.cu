// SPDX-License-Identifier: MIT
//
// Daemon-side CUDA kernels: one reduction kernel per (type, op) that reads K
// inputs and writes M outputs in one pass (peer pointers over NVLink/PCIe
// after IPC open), and a one-to-many copy. Semantics match common/reduce.c:
// integers wrap (computed unsigned), AVG divides the sum once (integers
// truncate toward zero), float16/bfloat16 accumulate in float32 and round to
// nearest even once per element (as NCCL does), min/max propagate NaN.
// Inputs are folded in order ((in0 op in1) op in2) ..., like the CPU path, so
// results are bitwise the same as the host reduction.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cuda/std/type_traits>

#include "kernels.h"

namespace {

enum { SUM = 0, PROD = 1, MIN = 2, MAX = 3, AVG = 4 };
constexpr int THREADS = 512;
constexpr int UNROLL = 4;

template <typename T> struct Tr {
	typedef T A;
	__device__ static A ld(T x) { return x; }
	__device__ static T st(A a) { return a; }
};
template <> struct Tr<__half> {
	typedef float A;
	__device__ static A ld(__half x) { return __half2float(x); }
	__device__ static __half st(A a) { return __float2half_rn(a); }
};
template <> struct Tr<__nv_bfloat16> {
	typedef float A;
	__device__ static A ld(__nv_bfloat16 x) { return __bfloat162float(x); }
	__device__ static __nv_bfloat16 st(A a) { return __float2bfloat16_rn(a); }
};

template <typename A, int OP> __device__ __forceinline__ A apply(A a, A b)
{
	if constexpr (OP == SUM || OP == AVG) {
		if constexpr (cuda::std::is_integral<A>::value) {
			typedef typename cuda::std::make_unsigned<A>::type U;
			return (A)(U)((U)a + (U)b);
		} else {
			return a + b;
		}
	} else if constexpr (OP == PROD) {
		if constexpr (cuda::std::is_integral<A>::value) {
			typedef typename cuda::std::make_unsigned<A>::type U;
			return (A)(U)((U)a * (U)b);
		} else {
			return a * b;
		}
	} else if constexpr (OP == MIN) {
		return ((b < a) | (b != b)) ? b : a;
	} else {
		return ((b > a) | (b != b)) ? b : a;
	}
}

template <typename T, int OP>
__global__ void __launch_bounds__(THREADS) k_reduce(const r2k_reduce_args a)
{
	typedef typename Tr<T>::A A;
	constexpr int V = 16 / sizeof(T);
	const uint64_t tid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	const uint64_t nvec = a.vec ? a.n / V : 0;

	for (uint64_t base = tid; base < nvec; base += stride * UNROLL) {
		A acc[UNROLL][V];
		uint4 v[UNROLL];
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			uint64_t i = base + u * stride;
			if (i < nvec)
				v[u] = ((const uint4 *)a.in[0])[i];
		}
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const T *t = (const T *)&v[u];
#pragma unroll
			for (int j = 0; j < V; j++)
				acc[u][j] = Tr<T>::ld(t[j]);
		}
		for (int k = 1; k < a.nin; k++) {
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				uint64_t i = base + u * stride;
				if (i < nvec)
					v[u] = ((const uint4 *)a.in[k])[i];
			}
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				const T *t = (const T *)&v[u];
#pragma unroll
				for (int j = 0; j < V; j++)
					acc[u][j] = apply<A, OP>(acc[u][j], Tr<T>::ld(t[j]));
			}
		}
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			T *t = (T *)&v[u];
#pragma unroll
			for (int j = 0; j < V; j++) {
				A r = acc[u][j];
				if (OP == AVG && a.div > 1)
					r = (A)(r / (A)a.div);
				t[j] = Tr<T>::st(r);
			}
		}
		for (int o = 0; o < a.nout; o++) {
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				uint64_t i = base + u * stride;
				if (i < nvec)
					((uint4 *)a.out[o])[i] = v[u];
			}
		}
	}
	// the tail (and everything when a pointer is not 16-byte aligned)
	for (uint64_t i = nvec * V + tid; i < a.n; i += stride) {
		A r = Tr<T>::ld(((const T *)a.in[0])[i]);
		for (int k = 1; k < a.nin; k++)
			r = apply<A, OP>(r, Tr<T>::ld(((const T *)a.in[k])[i]));
		if (OP == AVG && a.div > 1)
			r = (A)(r / (A)a.div);
		T t = Tr<T>::st(r);
		for (int o = 0; o < a.nout; o++)
			((T *)a.out[o])[i] = t;
	}
}

__global__ void __launch_bounds__(THREADS) k_copy(const r2k_copy_args a)
{
	const uint64_t tid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	const uint64_t nvec = a.vec ? a.bytes / 16 : 0;

	for (uint64_t base = tid; base < nvec; base += stride * UNROLL) {
		uint4 v[UNROLL];
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			uint64_t i = base + u * stride;
			if (i < nvec)
				v[u] = ((const uint4 *)a.in)[i];
		}
		for (int o = 0; o < a.nout; o++) {
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				uint64_t i = base + u * stride;
				if (i < nvec)
					((uint4 *)a.out[o])[i] = v[u];
			}
		}
	}
	for (uint64_t i = nvec * 16 + tid; i < a.bytes; i += stride) {
		uint8_t b = ((const uint8_t *)a.in)[i];
		for (int o = 0; o < a.nout; o++)
			((uint8_t *)a.out[o])[i] = b;
	}
}

typedef void (*kfn)(const r2k_reduce_args);

#define OPS(T) { k_reduce<T, SUM>, k_reduce<T, PROD>, k_reduce<T, MIN>, k_reduce<T, MAX>, k_reduce<T, AVG> }
// r2ccl_dtype_t order: int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64
const kfn table[10][5] = {
	OPS(int8_t),   OPS(uint8_t),       OPS(int32_t), OPS(uint32_t), OPS(int64_t),
	OPS(uint64_t), OPS(__half), OPS(__nv_bfloat16), OPS(float),    OPS(double),
};
const int esize[10] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };

int blocks_for(uint64_t units, int max_blocks)
{
	uint64_t b = (units + (uint64_t)THREADS * UNROLL - 1) / ((uint64_t)THREADS * UNROLL);
	if (b < 1)
		b = 1;
	if (max_blocks > 0 && b > (uint64_t)max_blocks)
		b = (uint64_t)max_blocks;
	return (int)b;
}

} // namespace

extern "C" int r2k_reduce(void *stream, int dtype, int op, const r2k_reduce_args *a, int max_blocks)
{
	if (dtype < 0 || dtype >= 10 || op < 0 || op >= 5 || a->nin < 1 || a->nin > R2K_MAX_PTRS ||
	    a->nout < 1 || a->nout > R2K_MAX_PTRS)
		return (int)cudaErrorInvalidValue;
	if (a->n == 0)
		return 0;
	uint64_t units = a->vec ? a->n / (16 / esize[dtype]) + 1 : a->n;
	(void)cudaGetLastError(); // only this launch's error below
	table[dtype][op]<<<blocks_for(units, max_blocks), THREADS, 0, (cudaStream_t)stream>>>(*a);
	return (int)cudaGetLastError();
}

extern "C" int r2k_copy(void *stream, const r2k_copy_args *a, int max_blocks)
{
	if (a->nout < 1 || a->nout > R2K_MAX_PTRS)
		return (int)cudaErrorInvalidValue;
	if (a->bytes == 0)
		return 0;
	uint64_t units = a->vec ? a->bytes / 16 + 1 : a->bytes;
	(void)cudaGetLastError();
	k_copy<<<blocks_for(units, max_blocks), THREADS, 0, (cudaStream_t)stream>>>(*a);
	return (int)cudaGetLastError();
}
