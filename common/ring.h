/* SPDX-License-Identifier: MIT */
/*
 * The per-session shared-memory submission/completion ring (BRIEF.md
 * decision 2). The daemon creates a memfd holding one struct r2_ring_shm and
 * two eventfds, and passes them to the client in the handshake reply:
 *   - sq_efd: the client's doorbell (client writes 1 after publishing SQEs);
 *   - cq_efd: the daemon's completion signal (daemon writes 1 after CQEs).
 * Both rings are single-producer single-consumer: the client produces SQEs
 * and consumes CQEs; the daemon does the reverse. Head/tail are free-running
 * 32-bit counters; index = counter & (R2_RING_ENTRIES - 1).
 *
 * The daemon treats every SQE as untrusted: it copies it out of shared memory
 * before validating it, and a client that corrupts the counters only hurts its
 * own session (the daemon bounds every read by the ring size).
 */
#ifndef R2CCL_RING_H
#define R2CCL_RING_H

#include <stdatomic.h>
#include <stdint.h>

#define R2_RING_ENTRIES 256u
#define R2_RING_MAGIC 0x52325247u /* "GR2R" */

enum r2_opcode {
	R2_OP_NOP = 0,
	R2_OP_ALLREDUCE = 1,
	R2_OP_ALLGATHER = 2,
	R2_OP_REDUCESCATTER = 3,
	R2_OP_BROADCAST = 4,
	R2_OP_REDUCE = 5,
	R2_OP_SEND = 6,
	R2_OP_RECV = 7,
	R2_OP_MAX
};

struct r2_sqe {
	uint64_t tag;      /* echoed in the CQE */
	uint32_t opcode;   /* enum r2_opcode */
	uint32_t comm_id;  /* daemon handle of the communicator */
	uint64_t count;    /* elements (allgather: send count; reducescatter: recv count) */
	uint32_t dtype;    /* r2ccl_dtype_t */
	uint32_t redop;    /* r2ccl_redop_t */
	int32_t root;      /* root (bcast/reduce) or peer (send/recv) */
	uint32_t rank;     /* the submitting rank (a process may hold several) */
	uint32_t send_mem; /* registered memory id, 0 = none */
	uint32_t recv_mem;
	uint64_t send_off; /* byte offset inside that registration */
	uint64_t recv_off;
	/* GPU stream ordering (common/gpu_abi.h); all 0 for host-only ops */
	uint32_t gflags;   /* R2_SQE_STREAM: wait ready, signal done in the sync slot */
	uint32_t sync_mem; /* registered host memory holding the sync slot */
	uint64_t sync_off; /* byte offset of the slot (16-byte aligned) */
	uint32_t sync_seq; /* the value the client's stream writes / waits for */
	uint32_t sync_reserved;
};

struct r2_cqe {
	uint64_t tag;
	int32_t status; /* 0 or negative error (r2ccl.h) */
	uint32_t reserved;
};

struct r2_ring_shm {
	uint32_t magic;
	uint32_t entries;
	/* each counter on its own cache line */
	_Alignas(64) _Atomic uint32_t sq_head; /* daemon consumes */
	_Alignas(64) _Atomic uint32_t sq_tail; /* client produces */
	_Alignas(64) _Atomic uint32_t cq_head; /* client consumes */
	_Alignas(64) _Atomic uint32_t cq_tail; /* daemon produces */
	_Alignas(64) _Atomic uint32_t client_waiting; /* client sleeps on cq_efd */
	/* The dispatcher busy-polls this ring: the client may skip the sq
	 * doorbell. Both flags follow the same pattern (Dekker): publish, then
	 * read the other side's flag, all sequentially consistent; the side
	 * that goes to sleep clears/sets its flag and then checks once more. */
	_Alignas(64) _Atomic uint32_t daemon_spinning;
	_Alignas(64) struct r2_sqe sq[R2_RING_ENTRIES];
	_Alignas(64) struct r2_cqe cq[R2_RING_ENTRIES];
};

#endif
