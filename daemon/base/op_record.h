/* SPDX-License-Identifier: MIT */
/*
 * The records of operations: a client's op as submitted (struct r2_op) and a
 * matched operation being executed (struct r2_exec), shared by the engine
 * that runs them and the GPU path that runs their GPU parts; and the pure
 * facts about an op (base/op.c).
 */
#ifndef R2CCL_OP_RECORD_H
#define R2CCL_OP_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/daemon.h"

struct r2_comm;

/* r2_exec_run's (and r2_gpu_exec's) answer for an operation that completes
 * later */
#define R2_EXEC_PENDING 1

struct r2_op {
	struct r2_op *next;
	struct r2_session *s;
	int rank;
	struct r2_sqe sqe;
	void *sendbuf, *recvbuf; /* resolved at submission */
	struct r2_memreg *sendref, *recvref;
	uint64_t submitted_us;
	int tenant1; /* the tenant it is counted against (max_pending_ops) + 1, 0: none */
};

/* One matched operation: an op per participating rank. */
struct r2_exec {
	struct r2_exec *next;
	struct r2_comm *c;
	uint32_t opcode;
	int nops;
	void *gpu_stage; /* GPU buffers staged through host memory (gpu/gpu.c) */
	/* Set by gpu/gpu.c when it stages piecewise (NULL otherwise): the rail
	 * phase calls stage_wait before it touches host bytes [p, p+n) that may
	 * still be on their way from the GPU (a negative error stops it), and
	 * stage_out once host bytes [p, p+n) of the output are final (their
	 * copy back to the GPU starts then). */
	int (*stage_wait)(struct r2_exec *x, const void *p, uint64_t n);
	void (*stage_out)(struct r2_exec *x, const void *p, uint64_t n);
	/* Before its first stage_wait the rail phase names the input ranges
	 * [p[i], p[i]+n[i]) its first step sends, so that they come from the
	 * GPU first (interleaved: each rail's first chunks early); the rest
	 * follows at the first stage_wait. */
	void (*stage_first)(struct r2_exec *x, const char *const *p, const uint64_t *n, int k);
#define R2_STAGE_FIRST_MAX 64 /* ranges stage_first takes at most */
	struct r2_op *ops[]; /* indexed by rank for collectives; [0]=send,[1]=recv for p2p */
};

/* Bytes each buffer of an op must span (0: none); false if they overflow. */
bool r2d_op_extents(const struct r2_sqe *q, int nranks, int rank, uint64_t *send_len,
		    uint64_t *recv_len);
/* "allreduce", "send", ... ("unknown" out of range) */
const char *r2_opcode_name(uint32_t opcode);

#endif
