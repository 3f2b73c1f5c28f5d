/* SPDX-License-Identifier: MIT */
/*
 * Executing matched operations. exec_local.c is the local phase: the daemon
 * maps every local rank's buffer, so a collective among the ranks of one host
 * is a direct reduction/copy in shared memory, split over the helper pool.
 */
#ifndef R2CCL_EXEC_H
#define R2CCL_EXEC_H

#include <stddef.h>

#include "comm.h"

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

/* Runs x (all its ranks are local); 0 or a negative error. */
int r2_exec_run(struct r2_exec *x, struct r2_pool *pool);

const char *r2_opcode_name(uint32_t opcode);
struct r2_pool *r2d_engine_pool(struct r2d *d);

#endif
