/* SPDX-License-Identifier: MIT */
/*
 * Executing matched operations. exec_local.c is the local phase: the daemon
 * maps every local rank's buffer, so a collective among the ranks of one host
 * is a direct reduction/copy in shared memory, split over the helper pool.
 */
#ifndef R2CCL_EXEC_H
#define R2CCL_EXEC_H

#include <stddef.h>

#include "engine/comm.h"

struct r2_pool;

/* A pool of nthreads-1 helper threads; the caller of r2_pool_run is the
 * nthreads-th worker. */
int r2_pool_create(struct r2_pool **p, int nthreads);
void r2_pool_destroy(struct r2_pool *p); /* accepts NULL */
int r2_pool_threads(const struct r2_pool *p);
/* Runs fn(ctx, i) for i in [0, nparts) on the pool and the caller; returns
 * when all are done. If another caller holds the pool, runs them all itself
 * (so executors of several communicators never wait on each other). */
void r2_pool_run(struct r2_pool *p, size_t nparts, void (*fn)(void *ctx, size_t part),
		 void *ctx);

/* A work queue: nthreads threads run submitted jobs, each whole (the rail
 * phase applies received chunks on it, several at once, while its executor
 * goes on). Jobs of one owner start in submission order; owners (tenants:
 * docs/tenancy.md) take turns by deficit round robin over the jobs' cost
 * (bytes), each turn worth weight x 64 KiB, so one tenant's long backlog
 * does not hold another's jobs behind it and a tenant of weight 3 gets
 * three times the bytes of one of weight 1 while both wait. destroy runs
 * what is queued, then joins. */
struct r2_workq;
struct r2_work {
	struct r2_work *next;
	void (*fn)(struct r2_work *w);
	uint32_t owner;  /* its tenant (0: none); owners share 64 FIFOs by modulo */
	uint32_t weight; /* its owner's weight (0: 1), read from the FIFO's head */
	uint32_t cost;   /* bytes (0: one turn's worth, 64 KiB) */
};
int r2_workq_create(struct r2_workq **q, int nthreads, const char *name);
void r2_workq_destroy(struct r2_workq *q); /* accepts NULL */
int r2_workq_threads(const struct r2_workq *q); /* 0 for NULL */
void r2_workq_submit(struct r2_workq *q, struct r2_work *w);


/* Completes every rank's op of x with status and frees x (engine.c). */
void r2d_exec_complete(struct r2_exec *x, int status);

/* Transfers across hosts in flight (exec_rail_p2p.c, executor thread). */
bool r2_p2p_pending(struct r2_comm *c);
/* The transfers in flight on c: a failure, a peer gone or the deadline ends
 * them, a blocked send refills (its queue or proxy pool has room again).
 * By the pump, and by a collective's waits on the same executor: a send
 * blocked behind a collective whose peer waits for that send's data (its
 * stream orders the receive first) would otherwise wait to the timeout. */
void r2_p2p_advance(struct r2_comm *c);
/* Handles mailbox messages for up to timeout_ms; completes transfers. gen:
 * c->mbox_gen as the executor saw it, under d->lock, when it found no
 * operation queued (an operation queued since ends the wait; unused with
 * timeout_ms 0). */
void r2_p2p_pump(struct r2_comm *c, int timeout_ms, unsigned gen);
/* The executor between operations: busy-polls up to exec_spin_us until
 * c->mbox_gen moves from gen (exec_rail_mbox.c). */
void r2_exec_spin(struct r2_comm *c, unsigned gen);
/* For an operation of c that waits on the executor (a client stream to
 * reach it): the transfers in flight go on meanwhile (mailbox, completions),
 * as the executor's loop would run them; true if there were any. */
bool r2_p2p_progress(struct r2_comm *c);
void r2_p2p_fail_all(struct r2_comm *c, int status);

/* ACKs this host owes for eager messages (exec_rail_ack.c): when they are
 * due (us; 0: none owed), and writes them all. Executor thread. */
uint64_t r2_acks_due(struct r2_comm *c);
void r2_acks_flush(struct r2_comm *c);

/* Runs x: 0, R2_EXEC_PENDING, or a negative error. */
int r2_exec_run(struct r2_exec *x, struct r2_pool *pool);
/* One host: every rank of x is local (exec_local.c). */
int r2_exec_local(struct r2_exec *x, struct r2_pool *pool);
/* Several hosts: local phase, rail phase, local phase (exec_rail.c). */
int r2_exec_hier(struct r2_exec *x, struct r2_pool *pool);

/* Local-phase helpers for exec_rail*.c: out = reduce over the nin inputs
 * (AVG reduced as SUM), split over the pool; and a parallel copy. */
void r2_local_reduce(struct r2_pool *pool, void *out, void *const *in, int nin, size_t count,
		     r2ccl_dtype_t dtype, r2ccl_redop_t op);
void r2_local_copy(struct r2_pool *pool, void *dst, const void *src, size_t bytes);

struct r2_pool *r2d_engine_pool(struct r2d *d);
/* the engine's apply queue, NULL when chunks are applied inline */
struct r2_workq *r2d_engine_applyq(struct r2d *d);

#endif
