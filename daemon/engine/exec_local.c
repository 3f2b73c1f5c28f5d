/* SPDX-License-Identifier: MIT */
/*
 * The local phase: collectives among the ranks of one host, done directly in
 * the clients' shared buffers (zero copy).
 *
 * Large operations are cut into parts of PART_BYTES that the pool's threads
 * take in turn; inside a part, blocks of BLOCK_BYTES are reduced from every
 * input into the first output and then copied to the other outputs while
 * still in cache (one pass over memory instead of K).
 */
#include <errno.h>
#include <string.h>

#include "engine/exec.h"
#include "gpu/gpu.h"
#include "reduce.h"
#include "util.h"

#define PART_BYTES (256u << 10)
#define BLOCK_BYTES (32u << 10)
#define MAX_LOCAL 256


struct job {
	struct r2_exec *x;
	size_t es;         /* element size */
	size_t count;      /* elements per rank block */
	size_t part_elems; /* elements per part */
	size_t nparts_per; /* parts per block (reducescatter/allgather: per rank) */
	int n;
	r2ccl_dtype_t dtype;
	r2ccl_redop_t op;
	int err;
};

static inline char *sbuf(const struct job *j, int r)
{
	return j->x->ops[r]->sendbuf;
}

static inline char *rbuf(const struct job *j, int r)
{
	return j->x->ops[r]->recvbuf;
}

static void copy_if(void *dst, const void *src, size_t len)
{
	if (dst != src && len)
		memmove(dst, src, len);
}

/* Reduces n inputs (each at in[r] + off) into out0 + off, then copies to outs. */
static void reduce_range(const struct job *j, char *const *in, char *const *out, int nout,
			 size_t first, size_t nelem)
{
	const void *src[MAX_LOCAL];
	size_t blk = BLOCK_BYTES / j->es;

	for (size_t e = first; e < first + nelem; e += blk) {
		size_t ne = R2_MIN(blk, first + nelem - e);
		size_t off = e * j->es;

		for (int r = 0; r < j->n; r++)
			src[r] = in[r] + off;
		r2_reduce(out[0] + off, src, j->n, ne, j->dtype, j->op, j->n);
		for (int o = 1; o < nout; o++)
			copy_if(out[o] + off, out[0] + off, ne * j->es);
	}
}

static void part_allreduce(void *ctx, size_t part)
{
	struct job *j = ctx;
	char *in[MAX_LOCAL], *out[MAX_LOCAL];
	size_t first = part * j->part_elems;
	size_t ne = R2_MIN(j->part_elems, j->count - first);

	for (int r = 0; r < j->n; r++) {
		in[r] = sbuf(j, r);
		out[r] = rbuf(j, r);
	}
	reduce_range(j, in, out, j->n, first, ne);
}

static void part_reduce(void *ctx, size_t part)
{
	struct job *j = ctx;
	char *in[MAX_LOCAL], *out[1];
	size_t first = part * j->part_elems;
	size_t ne = R2_MIN(j->part_elems, j->count - first);
	int root = j->x->ops[0]->sqe.root;

	for (int r = 0; r < j->n; r++)
		in[r] = sbuf(j, r);
	out[0] = rbuf(j, root);
	reduce_range(j, in, out, 1, first, ne);
}

/* part = dest rank * nparts_per + piece */
static void part_reducescatter(void *ctx, size_t part)
{
	struct job *j = ctx;
	int dst = (int)(part / j->nparts_per);
	size_t piece = part % j->nparts_per;
	size_t first = piece * j->part_elems;
	size_t ne = R2_MIN(j->part_elems, j->count - first);
	char *in[MAX_LOCAL], *out[1];
	size_t blockoff = (size_t)dst * j->count * j->es;

	for (int r = 0; r < j->n; r++)
		in[r] = sbuf(j, r) + blockoff;
	/* out is indexed like the inputs: shift it back so off lines up */
	out[0] = rbuf(j, dst);
	reduce_range(j, in, out, 1, first, ne);
}

/* part = source rank * nparts_per + piece: copy source's piece to everyone */
static void part_allgather(void *ctx, size_t part)
{
	struct job *j = ctx;
	int src = (int)(part / j->nparts_per);
	size_t piece = part % j->nparts_per;
	size_t first = piece * j->part_elems;
	size_t ne = R2_MIN(j->part_elems, j->count - first);
	size_t off = first * j->es, len = ne * j->es;
	const char *from = sbuf(j, src) + off;

	for (int r = 0; r < j->n; r++)
		copy_if(rbuf(j, r) + (size_t)src * j->count * j->es + off, from, len);
}

static void part_broadcast(void *ctx, size_t part)
{
	struct job *j = ctx;
	size_t first = part * j->part_elems;
	size_t ne = R2_MIN(j->part_elems, j->count - first);
	size_t off = first * j->es, len = ne * j->es;
	int root = j->x->ops[0]->sqe.root;
	const char *from = sbuf(j, root) + off;

	/* the root's own output last: in-place roots read and write the same bytes */
	for (int r = 0; r < j->n; r++)
		if (r != root)
			copy_if(rbuf(j, r) + off, from, len);
	copy_if(rbuf(j, root) + off, from, len);
}

static void part_sendrecv(void *ctx, size_t part)
{
	struct job *j = ctx;
	size_t first = part * j->part_elems;
	size_t ne = R2_MIN(j->part_elems, j->count - first);
	size_t off = first * j->es;

	copy_if(j->x->ops[1]->recvbuf + off, (char *)j->x->ops[0]->sendbuf + off, ne * j->es);
}

int r2_exec_run(struct r2_exec *x, struct r2_pool *pool)
{
	if (r2_gpu_exec_is_gpu(x)) {
		/* GPU buffers: the GPU worker runs it (daemon/gpu/gpu.c); across
		 * hosts, staged through pinned host memory for the rails */
		if (x->c->nhosts > 1)
			return r2_gpu_exec_rail(x, pool);
		return r2_gpu_exec(x);
	}
	/* a transfer between two ranks of this host stays here */
	if (x->c->nhosts > 1 && !(x->opcode == R2_OP_SEND && x->nops == 2))
		return r2_exec_hier(x, pool);
	return r2_exec_local(x, pool);
}

int r2_exec_local(struct r2_exec *x, struct r2_pool *pool)
{
	const struct r2_sqe *q = &x->ops[0]->sqe;
	struct job j = {
		.x = x,
		.es = r2ccl_dtype_size((r2ccl_dtype_t)q->dtype),
		.count = q->count,
		.n = x->nops,
		.dtype = (r2ccl_dtype_t)q->dtype,
		.op = (r2ccl_redop_t)q->redop,
	};
	void (*fn)(void *, size_t) = NULL;
	size_t nparts;

	if (j.count == 0)
		return 0;
	if (j.n > MAX_LOCAL)
		return -E2BIG;
	j.part_elems = R2_MAX((size_t)1, PART_BYTES / j.es);
	j.nparts_per = R2_DIV_UP(j.count, j.part_elems);
	nparts = j.nparts_per;
	switch (x->opcode) {
	case R2_OP_ALLREDUCE:
		fn = part_allreduce;
		break;
	case R2_OP_REDUCE:
		fn = part_reduce;
		break;
	case R2_OP_REDUCESCATTER:
		fn = part_reducescatter;
		nparts *= (size_t)j.n;
		break;
	case R2_OP_ALLGATHER:
		fn = part_allgather;
		nparts *= (size_t)j.n;
		break;
	case R2_OP_BROADCAST:
		fn = part_broadcast;
		break;
	case R2_OP_SEND:
		fn = part_sendrecv;
		break;
	default:
		return -EINVAL;
	}
	r2_pool_run(pool, nparts, fn, &j);
	return j.err;
}

/* ---- helpers for the hierarchical path (exec_rail.c) ---- */

struct lred {
	void *out;
	void *const *in;
	int nin;
	size_t count, es, part;
	r2ccl_dtype_t dtype;
	r2ccl_redop_t op;
};

static void part_lred(void *ctx, size_t part)
{
	struct lred *l = ctx;
	const void *src[MAX_LOCAL];
	size_t first = part * l->part, ne = R2_MIN(l->part, l->count - first);
	size_t blk = BLOCK_BYTES / l->es;

	for (size_t e = first; e < first + ne; e += blk) {
		size_t n = R2_MIN(blk, first + ne - e);
		for (int r = 0; r < l->nin; r++)
			src[r] = (const char *)l->in[r] + e * l->es;
		r2_reduce((char *)l->out + e * l->es, src, l->nin, n, l->dtype, l->op, 1);
	}
}

void r2_local_reduce(struct r2_pool *pool, void *out, void *const *in, int nin, size_t count,
		     r2ccl_dtype_t dtype, r2ccl_redop_t op)
{
	struct lred l = { out, in, nin, count, r2ccl_dtype_size(dtype), 0, dtype,
			  op == R2CCL_AVG ? R2CCL_SUM : op };

	if (!count || nin > MAX_LOCAL)
		return;
	l.part = R2_MAX((size_t)1, PART_BYTES / l.es);
	r2_pool_run(pool, R2_DIV_UP(count, l.part), part_lred, &l);
}

struct lcopy {
	char *dst;
	const char *src;
	size_t bytes;
};

static void part_lcopy(void *ctx, size_t part)
{
	struct lcopy *l = ctx;
	size_t off = part * PART_BYTES;

	copy_if(l->dst + off, l->src + off, R2_MIN((size_t)PART_BYTES, l->bytes - off));
}

void r2_local_copy(struct r2_pool *pool, void *dst, const void *src, size_t bytes)
{
	struct lcopy l = { dst, src, bytes };

	if (!bytes || dst == src)
		return;
	r2_pool_run(pool, R2_DIV_UP(bytes, PART_BYTES), part_lcopy, &l);
}
