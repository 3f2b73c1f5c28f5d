/* SPDX-License-Identifier: MIT */
/*
 * Hierarchical collectives across hosts (docs/architecture.md, Across hosts):
 *   local phase (reduce or gather the local ranks' buffers into one working
 *   buffer W), rail phase (the planner's schedule between the daemons, run
 *   here step by step over the rails), local phase (W back to every local
 *   rank).
 *
 * The rail phase itself is in exec_rail_loop.c and the files beside it
 * (exec_rail_int.h lists them).
 */
#include <errno.h>
#include <stdlib.h>

#include "net/health.h"
#include "log.h"
#include "reduce.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* ---- the hierarchical collectives ---- */

static int exec_hier(struct r2_exec *x, struct r2_pool *pool);

int r2_exec_hier(struct r2_exec *x, struct r2_pool *pool)
{
	int r = exec_hier(x, pool);

	/* (a collective after a member left fails alone: comm.c
	 * r2d_comm_member_left; the others go on without it) */
	if ((r == R2CCL_E_PEER_GONE || r == R2CCL_E_NO_PATH) &&
	    !(x->opcode != R2_OP_SEND && x->opcode != R2_OP_RECV &&
	      x->c->coll_seq > x->c->gone_after)) {
		/* the communicator cannot go on: every waiting rank learns it now */
		pthread_mutex_lock(&x->c->d->lock);
		r2d_comm_break(x->c, R2CCL_E_PEER_GONE, "a peer daemon is unreachable on every rail");
		pthread_mutex_unlock(&x->c->d->lock);
	}
	return r;
}

/* A send or a receive across hosts (blk bytes): the pair's next sequence
 * number, then the transfer runs on (exec_rail_p2p.c). */
static int exec_p2p(struct r2_exec *x, size_t blk)
{
	struct r2_comm *c = x->c;
	const struct r2_sqe *q = &x->ops[0]->sqe;
	int self = x->ops[0]->rank, other = (int)q->root;
	int src = x->opcode == R2_OP_SEND ? self : other;
	int dst = x->opcode == R2_OP_SEND ? other : self;
	uint64_t *slot = rl_p2p_slot(c, (uint32_t)src, (uint32_t)dst);
	uint64_t seq;
	char *W;

	if (!slot)
		return -ENOMEM;
	seq = rl_p2p_seq((uint32_t)src, (uint32_t)dst, (*slot)++);
	if (x->opcode == R2_OP_SEND) {
		/* counted for PEER_LEAVE (bootstrap.c): the receiver takes it
		 * even when this rank has left by then */
		struct r2_comm_member *m = &c->m[self];
		if (!m->sent) {
			pthread_mutex_lock(&c->d->lock);
			if (!m->sent)
				m->sent = calloc((size_t)c->nranks, sizeof(*m->sent));
			pthread_mutex_unlock(&c->d->lock);
		}
		if (m->sent)
			__atomic_store_n(&m->sent[other], *slot, __ATOMIC_RELAXED);
	}
	W = x->opcode == R2_OP_SEND ? x->ops[0]->sendbuf : x->ops[0]->recvbuf;
	return rl_p2p_start(c, x, seq, (uint32_t)c->rank_host[other], x->opcode == R2_OP_SEND, W,
			 blk);
}

static int exec_hier(struct r2_exec *x, struct r2_pool *pool)
{
	struct r2_comm *c = x->c;
	const struct r2_sqe *q = &x->ops[0]->sqe;
	r2ccl_dtype_t dt = (r2ccl_dtype_t)q->dtype;
	r2ccl_redop_t op = (r2ccl_redop_t)q->redop;
	size_t es = r2ccl_dtype_size(dt), count = q->count, blk = count * es;
	struct r2_host *me = &c->hosts[c->my_host];
	void *in[256];
	int K = x->nops, r = 0, np;
	uint64_t seq;
	char *W = NULL, *scratch = NULL;
	struct r2_view *view = NULL;

	if (K > 256)
		return -E2BIG;
	/* the ACKs owed go now for a transfer; a collective's eager messages
	 * or descriptors (to every peer) pay them (exec_rail_ack.c) */
	if (x->opcode == R2_OP_SEND || x->opcode == R2_OP_RECV) {
		r2_acks_flush(c);
		return exec_p2p(x, blk);
	}
	/* the view to plan with: agreed by every daemon for this seq */
	seq = c->coll_seq + 1;
	view = r2d_health_op_begin(c, seq);
	c->coll_seq = seq;
	for (int i = 0; i < K; i++)
		in[i] = x->ops[i]->sendbuf;

	switch (x->opcode) {
	case R2_OP_ALLREDUCE:
		W = x->ops[0]->recvbuf;
		/* one local rank: W starts as its input, read in place until
		 * written (lazy input: no up-front copy) */
		if (K > 1)
			r2_local_reduce(pool, W, in, K, count, dt, op);
		if (!x->stage_wait && (np = rl_eager_pieces(c, blk, es, view)) > 0) {
			r = rl_eager_allreduce(x, W, K > 1 ? NULL : in[0], blk, dt, op, seq, np);
		} else {
			r = rail_phase(x, W, K > 1 ? NULL : in[0], blk, dt, op, R2_PLAN_ALLREDUCE,
				       0, 0, seq, view);
		}
		if (r == 0 && op == R2CCL_AVG)
			r2_reduce_finish_avg(W, count, dt, op, c->nranks);
		for (int i = 1; r == 0 && i < K; i++)
			r2_local_copy(pool, x->ops[i]->recvbuf, W, blk);
		break;
	case R2_OP_ALLGATHER:
		W = x->ops[0]->recvbuf;
		/* in place, ops[0]'s input already sits in its slot */
		for (int i = K - 1; i >= 0; i--)
			r2_local_copy(pool, W + (size_t)(me->first_rank + (uint32_t)i) * blk,
				      x->ops[i]->sendbuf, blk);
		r = rail_phase(x, W, NULL, blk * (size_t)c->nranks, dt, op, R2_PLAN_ALLGATHER, 0, 0, seq, view);
		for (int i = 1; r == 0 && i < K; i++)
			r2_local_copy(pool, x->ops[i]->recvbuf, W, blk * (size_t)c->nranks);
		break;
	case R2_OP_REDUCESCATTER:
		scratch = malloc(blk * (size_t)c->nranks);
		if (!scratch) {
			r2d_view_free(view);
			return -ENOMEM;
		}
		r2_local_reduce(pool, scratch, in, K, count * (size_t)c->nranks, dt, op);
		r = rail_phase(x, scratch, NULL, blk * (size_t)c->nranks, dt, op, R2_PLAN_REDUCESCATTER,
			       0, 0, seq, view);
		for (int i = 0; r == 0 && i < K; i++) {
			char *seg = scratch + (size_t)(me->first_rank + (uint32_t)i) * blk;
			if (op == R2CCL_AVG)
				r2_reduce_finish_avg(seg, count, dt, op, c->nranks);
			r2_local_copy(pool, x->ops[i]->recvbuf, seg, blk);
		}
		break;
	case R2_OP_BROADCAST: {
		int root = q->root, rh = c->rank_host[root];
		if (rh == c->my_host) {
			int li = root - (int)me->first_rank;
			W = x->ops[li]->recvbuf;
			r2_local_copy(pool, W, x->ops[li]->sendbuf, blk);
		} else {
			W = x->ops[0]->recvbuf;
		}
		r = rail_phase(x, W, NULL, blk, dt, op, R2_PLAN_BROADCAST, (uint32_t)rh, 0, seq, view);
		for (int i = 0; r == 0 && i < K; i++)
			r2_local_copy(pool, x->ops[i]->recvbuf, W, blk);
		break;
	}
	case R2_OP_REDUCE: {
		int root = q->root, rh = c->rank_host[root];
		if (rh == c->my_host) {
			W = x->ops[root - (int)me->first_rank]->recvbuf;
		} else {
			W = scratch = malloc(blk ? blk : 1);
			if (!scratch) {
				r2d_view_free(view);
				return -ENOMEM;
			}
		}
		r2_local_reduce(pool, W, in, K, count, dt, op);
		r = rail_phase(x, W, NULL, blk, dt, op, R2_PLAN_REDUCE, (uint32_t)rh, 0, seq, view);
		if (r == 0 && rh == c->my_host && op == R2CCL_AVG)
			r2_reduce_finish_avg(W, count, dt, op, c->nranks);
		break;
	}
	default:
		r = -EINVAL;
	}
	free(scratch);
	r2d_view_free(view);
	return r;
}
