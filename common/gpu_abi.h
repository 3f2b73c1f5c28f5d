/* SPDX-License-Identifier: MIT */
/*
 * What libr2ccl and r2ccld agree on for GPU operations (the GPU wire ABI;
 * daemon/gpu/README.md explains the mechanism).
 *
 * Stream ordering: each stream-ordered operation has a sync slot in host
 * memory the client shares with the daemon (a registered memfd, which the
 * client also registers with CUDA: cuMemHostRegister). The client's stream
 *   1. writes slot.ready = seq (cuStreamWriteValue32, after its earlier work),
 *   2. waits slot.done >= seq (cuStreamWaitValue32, GEQ: cyclic compare).
 * The daemon waits (polls) slot.ready == seq, runs the operation on its own
 * streams, writes slot.status and then slot.done = seq.
 * A slot belongs to one operation at a time, so a failed operation releases
 * only its own waiter; slots are reused round robin (the client waits for
 * the slot's previous operation before reusing it).
 */
#ifndef R2CCL_GPU_ABI_H
#define R2CCL_GPU_ABI_H

#include <stdint.h>

/* r2_sqe.gflags */
#define R2_SQE_STREAM 1u

struct r2_gpu_slot {
	uint32_t ready;  /* client stream: seq once the inputs are ready */
	uint32_t done;   /* daemon: seq once the outputs are written (or failed) */
	int32_t status;  /* daemon: 0 or the error, written before done */
	uint32_t seq;    /* client: the seq this slot was last given (bookkeeping) */
};

#define R2_GPU_SLOTS 256u /* per communicator handle */

/* MemRegisterGpu.kind */
enum { R2_GPU_MEM_IPC = 1, R2_GPU_MEM_CUMEM_FD = 2 };

#define R2_GPU_IPC_HANDLE_BYTES 64
#define R2_GPU_UUID_BYTES 16

#endif
