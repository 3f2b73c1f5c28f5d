// SPDX-License-Identifier: MIT
/*
 * Client staging in one launch (libclient/gpu.c, "Client staging";
 * R2CCL_GPU_STAGE_KERNEL=1): the kernel that libr2ccl queues on the
 * caller's stream for a small GPU operation across hosts, in place of a
 * device->host copy, a "ready" write, a wait for "done" and a host->device
 * copy (two copy-engine transfers and two stream memory operations: 27-32
 * us for 4-256 KB on the H100 machine, against 15-29 us this way,
 * tests/gpu/copy_lat.cu). Built to PTX and loaded by the
 * driver at run time (cuModuleLoadData): libr2ccl has no link-time CUDA
 * dependency.
 *
 * Every block copies its slice of the input to the staging area (pinned,
 * mapped host memory the daemon reads); the last block to finish writes
 * "ready" = seq into the operation's slot and waits for "done" >= seq (the
 * daemon writes it after the output, or the client after the daemon's
 * death), then tells the other blocks through device memory; every block
 * copies its slice of the output back. One block polls the host memory:
 * with every block polling, the H100 machine took about 2.7 us more per
 * block (copy_lat). sync: two words of device memory, the sync slot's:
 * [0] the blocks done with the input (0 between launches: the last block
 * resets it before "ready"), [1] the last seq whose "done" was seen. Blocks
 * must be resident together: the grid is at most 32 blocks
 * (stage_kernel.c).
 */
#include <stdint.h>

__device__ static void copy_out(char *dst, const char *src, uint64_t len, uint64_t i0,
				uint64_t step)
{
	if ((((uintptr_t)dst | (uintptr_t)src | len) & 15) == 0) {
		for (uint64_t i = i0; i < len / 16; i += step)
			((uint4 *)dst)[i] = ((const uint4 *)src)[i];
	} else {
		for (uint64_t i = i0; i < len; i += step)
			dst[i] = src[i];
	}
}

/* the output back: loads that bypass the caches (the host wrote it) */
__device__ static void copy_in(char *dst, const char *src, uint64_t len, uint64_t i0,
			       uint64_t step)
{
	if ((((uintptr_t)dst | (uintptr_t)src | len) & 15) == 0) {
		for (uint64_t i = i0; i < len / 16; i += step)
			((uint4 *)dst)[i] = __ldcv((const uint4 *)src + i);
	} else {
		for (uint64_t i = i0; i < len; i += step)
			dst[i] = __ldcv(src + i);
	}
}

extern "C" __global__ void r2c_stage(const char *src, char *hin, uint64_t slen, const char *hout,
				     char *dst, uint64_t rlen, volatile uint32_t *slot, uint32_t seq,
				     unsigned *sync)
{
	uint64_t i0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t step = (uint64_t)gridDim.x * blockDim.x;
	volatile unsigned *seen = sync + 1;

	copy_out(hin, src, slen, i0, step);
	__threadfence_system(); /* the slice in host memory before "ready" */
	__syncthreads();
	if (threadIdx.x == 0) {
		if (atomicAdd(sync, 1) == gridDim.x - 1) {
			sync[0] = 0;
			__threadfence_system();
			slot[0] = seq; /* ready (struct r2_gpu_slot) */
			while ((int32_t)(slot[1] - seq) < 0) /* done */
				;
			__threadfence_system();
			*seen = seq;
		} else {
			while (*seen != seq)
				;
		}
		__threadfence_system();
	}
	__syncthreads();
	copy_in(dst, hout, rlen, i0, step);
}
