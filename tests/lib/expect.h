/* SPDX-License-Identifier: MIT */
/*
 * expect: the checked collectives shared by tests/integration/test_collectives.c
 * and tests/cluster/cluster_client.c.
 *
 * One operation (ex_coll, ex_sendrecv_ring) fills this rank's inputs, runs the
 * r2ccl call and checks every element of the result (and of an out-of-place
 * send buffer, and GUARD bytes around each buffer) against an expectation
 * computed here, independently of the daemon's reduction code:
 *  - integers: random bits over the whole type (sums and products wrap
 *    modulo the width; computed in uint64 and truncated). avg divides the
 *    wrapped sum by n with C division (signed types truncate toward zero), as
 *    common/reduce.h documents;
 *  - floats: small integers (sum/avg: -8..8, prod: +-1, +-2, min/max:
 *    -100..100), so every partial result is exact even in bfloat16; the exact
 *    result is rounded once (float32: (float)sum / (float)n for avg; float64
 *    in double; half types: float32 result, then r2_float_to_half/bf16, which
 *    round to nearest even);
 *  - copies (allgather, broadcast, send/recv): random bit patterns (NaN
 *    payloads included: copies must be bit exact).
 * Large operations (from EX_FAST_MIN elements: float32 and int32 sums, 4-byte
 * copies) use closed-form patterns so that checking 64 MB per rank stays cheap.
 *
 * Every rank must run the same sequence of operations: the inputs of an
 * operation derive from its position in that sequence (ex_rank.seq).
 */
#ifndef R2CCL_TESTS_EXPECT_H
#define R2CCL_TESTS_EXPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "r2ccl.h"

#define GUARD 64          /* bytes checked before and after every buffer */
#define SENTINEL 0xA5     /* fills receive buffers before an operation */
#define GUARD_BYTE 0x5A
#define EX_FAST_MIN ((size_t)1 << 16) /* closed-form patterns from this count on */

enum kind { K_ALLREDUCE, K_ALLGATHER, K_REDUCESCATTER, K_BROADCAST, K_REDUCE, K_SENDRECV };

/* One rank's checking state; embed it in the test's own rank structure. */
struct ex_rank {
	int n;           /* ranks in the communicator(s) */
	r2ccl_client_t *cl;
	uint64_t seq;    /* operations so far: every rank runs the same sequence */
	uint64_t elems;  /* elements checked */
	bool broken;     /* a call failed: stop, later calls would only cascade */
	/* A wrong element, a guard byte, a failed call: msg says what (one line). */
	void (*fail)(struct ex_rank *x, const char *msg);
	/* Optional: a failed r2ccl call's code, before its fail(). */
	void (*err)(struct ex_rank *x, int code);
};

/* Formats a failure and passes it to x->fail (for the test's own failures too). */
void ex_failf(struct ex_rank *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The failures of all ranks of a test, in memory shared by its processes. */
struct ex_failures {
	int nfail;    /* failures reported by all ranks (atomic) */
	int claimed;  /* the first one writes first[] (atomic) */
	char first[1536];
};

/* Counts one failure of rank `rank` of n; the first one is kept in f->first. */
void ex_record(struct ex_failures *f, int n, int rank, const char *msg);

/* Shared memory from r2ccl_mem_alloc, with GUARD bytes on either side. */
struct buf {
	unsigned char *p; /* base + GUARD */
	size_t cap;       /* usable bytes */
};

/* Allocates cap usable bytes (+ guards); returns 0 or the r2ccl error
 * (b->p NULL), reporting nothing. */
int ex_balloc(struct ex_rank *x, struct buf *b, size_t cap);
/* Frees b (if allocated); a failure goes to fail(). */
void ex_bfree(struct ex_rank *x, struct buf *b);

/* A collective (not send/recv) on comm, where this process is rank `rank` of
 * x->n. sb/rb: buffers large enough for the op (in place uses the larger one
 * only); root: broadcast/reduce. Does nothing once x->broken. */
void ex_coll(struct ex_rank *x, r2ccl_comm_t *comm, int rank, enum kind kind,
	     r2ccl_dtype_t dt, r2ccl_redop_t op, size_t count, bool inplace, int root,
	     struct buf *sb, struct buf *rb);

/* Ring send/recv: rank sends to rank+1 and receives from rank-1; even ranks
 * send first, odd ranks receive first. */
void ex_sendrecv_ring(struct ex_rank *x, r2ccl_comm_t *comm, int rank, r2ccl_dtype_t dt,
		      size_t count, struct buf *sb, struct buf *rb);

#endif
