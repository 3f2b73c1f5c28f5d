/* SPDX-License-Identifier: MIT */
/*
 * Client staging in one kernel launch (stage_kernel.cu): the PTX built with
 * libr2ccl, loaded in the stream's CUDA context when first used, and its
 * launch. gpu.c, "Client staging", decides when.
 */
#ifndef R2CCL_STAGE_KERNEL_H
#define R2CCL_STAGE_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

/* One communicator's: the module in the context of its streams (a new
 * context loads it again), and the grids' two sync words (stage_kernel.cu)
 * in that context's device memory, a pair per sync slot (operations on
 * several streams may run at once; a slot is reused only after its
 * operation's "done"). */
struct r2c_stage_kernel {
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUdeviceptr sync;
	bool failed; /* not here: the copy-engine sequence instead */
};

/* R2CCL_GPU_STAGE_KERNEL=1 (the client's environment): stage small
 * operations with the kernel; otherwise (the default) with the copy engines
 * and the stream memory operations. The kernel waits for "done" on the GPU,
 * so where processes share a GPU without MPS each waits for the other's
 * time slice: 2.5 ms an operation with two clients on the H100 machine,
 * against 40-300 us the default way. Alone on its GPU it saves 3-5 us an
 * operation (docs/benchmarks.md, 2026-12-07). */
bool r2c_stage_kernel_enabled(void);

/* Queues the staging of one operation on st: slen bytes from the device
 * src to the mapped host area hin, "ready" = seq in the slot (device
 * address; idx its index), the wait for its "done" >= seq, then rlen bytes
 * from the mapped area hout to dst. 0, or -errno (nothing queued; k->failed is set
 * and the caller stages the copy-engine way from then on). */
int r2c_stage_kernel_launch(struct r2c_stage_kernel *k, CUstream st, CUdeviceptr src,
			    CUdeviceptr hin, uint64_t slen, CUdeviceptr hout, CUdeviceptr dst,
			    uint64_t rlen, CUdeviceptr slot, uint32_t idx, uint32_t seq);

/* Releases what k holds (its context must still exist, or nothing is
 * done). */
void r2c_stage_kernel_free(struct r2c_stage_kernel *k);

#endif
