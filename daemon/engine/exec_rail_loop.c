/* SPDX-License-Identifier: MIT */
/*
 * The rail phase loop: the planner's steps run one after the other, each
 * waiting for its chunks while the mailbox's messages are handled.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/bufpool.h"
#include "net/detour.h"
#include "net/health.h"
#include "log.h"
#include "net/rails.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* mbox_take for the operation, counting the time it waited. ACKs owed
 * past rl_ack_owed_us go meanwhile: a peer may wait for them (an operation
 * that could not let its chunks linger, end_sends) while this host is in
 * an operation that sends it nothing. */
static struct r2_rmsg *op_take(struct railop *o, int timeout_ms)
{
	uint64_t t = r2_now_us(), due = r2_acks_due(o->c);

	if (due && due <= t)
		r2_acks_flush(o->c);
	else if (due)
		timeout_ms = (int)R2_MIN((uint64_t)timeout_ms, R2_DIV_UP(due - t, 1000));
	struct r2_rmsg *m = rl_mbox_take(o->c, timeout_ms);

	o->prof.idle_us += r2_now_us() - t;
	return m;
}

/* The messages handled, for the operation's debug line. */
static void prof_count(struct railop *o, const struct r2_rmsg *m)
{
	if (m->cqe.type == R2_TPC_SEND)
		o->prof.sendc++;
	else if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_ACK)
		o->prof.acks++;
	else if (m->cqe.type == R2_TPC_RECV) {
		o->prof.data++;
		if (!o->prof.first_rx)
			o->prof.first_rx = m->when_us;
		o->prof.last_rx = m->when_us;
	}
}

/* A connection to m's peer failed on m's rail (p2p_handle already marked
 * the rail failed). Chunks written on that rail but not acknowledged may be
 * lost with it (and the acknowledgement of one that arrived comes back by
 * the same rail): they are posted again; the receiver applies each once.
 * R2CCL_E_PEER_GONE when no rail and no detour is left to the peer. */
static int conn_error(struct railop *o, const struct r2_rmsg *m)
{
	struct r2_rails *rs = o->d->rails;
	uint32_t all = rs ? (1u << rs->n) - 1 : 0;
	bool lost = false;
	uint32_t again = 0;

	for (struct sendrec *s = o->tx.sends; s; s = s->next) {
		if (rl_sent_to(s) == m->cqe.peer && s->rail == m->rail && s->sent &&
		    !s->acked) {
			s->sent = false;
			s->posted = false;
			o->tx.need_repost = true;
			again++;
		}
	}
	r2d_rails_note_resend(o->d, m->rail, m->cqe.peer, again);
	for (int hi = 0; hi < o->c->nhosts; hi++)
		if (o->c->hosts[hi].id == m->cqe.peer)
			lost = (o->c->hosts[hi].failed_rails & all) == all;
	if (lost && !rl_detour_possible(o, m->cqe.peer)) {
		log_warn("communicator %u: no rail left to peer %016llx", o->c->id,
			 (unsigned long long)m->cqe.peer);
		return R2CCL_E_PEER_GONE;
	}
	return 0;
}

/* Handles one message; returns bytes of the current step applied, or <0. */
int64_t rl_handle(struct railop *o, struct r2_rmsg *m, uint32_t step, int nx)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	uint64_t n = 0;
	bool taken = false;

	if (m->cqe.type == R2_RMSG_APPLIED) {
		rl_applied(o, m); /* its bytes count in o->aq.async_got */
		rl_rmsg_free(o->d, m);
		return 0;
	}
	if (rl_p2p_handle(o->c, m))
		return 0; /* a transfer's message, handled */
	/* its sender ended this collective: my lazy sends to it are in */
	if (m->cqe.type == R2_TPC_RECV && h->kind == R2_MSG_DATA && !(h->opseq & P2P_BIT) &&
	    h->opseq > o->opseq && h->src < (uint32_t)o->c->nhosts)
		rl_ack_implied_op(o, h->src);
	if (m->cqe.type == R2_TPC_RECV && h->kind == R2_MSG_DATA && (h->flags & R2_CHUNK_EAGER) &&
	    h->opseq == o->opseq && h->src < (uint32_t)o->c->nhosts) {
		/* the peer took the eager path for this collective: it posted
		 * another count (or more): a mismatch, with its reason */
		struct op_desc theirs;
		int r;

		rl_desc_from_hdr(&theirs, h);
		r = rl_desc_check(o->c, o->opseq, &o->desc.mine, &theirs, h->src);
		if (r == 0) /* the same call: the hosts chose differently */
			r = rl_path_mismatch(o->c, o->opseq, h->src, false);
		rl_rmsg_free(o->d, m);
		return r;
	}
	if (m->cqe.type == R2_TPC_RECV && h->kind == R2_MSG_DATA && (h->flags & R2_CHUNK_DESC)) {
		int r = rl_desc_in(o, m);
		if (r == 1 && h->opseq > o->c->coll_seq) {
			m->next = o->stash; /* a later collective's */
			o->stash = m;
			return 0;
		}
		rl_rmsg_free(o->d, m);
		return r < 0 ? r : 0;
	}
	prof_count(o, m);
	switch (m->cqe.type) {
	case R2_TPC_SEND:
		rl_sent(o, (struct sendrec *)(uintptr_t)m->cqe.ctx, m->cqe.status);
		break;
	case R2_TPC_ERROR: {
		int e = conn_error(o, m);
		if (e < 0) {
			rl_rmsg_free(o->d, m);
			return e;
		}
		break;
	}
	case R2_TPC_RECV:
		if (h->kind == R2_MSG_ACK) {
			if (h->opseq == o->opseq && (h->flags & R2_CHUNK_NACK)) {
				int e = rl_nack(o, h, m->cqe.peer);
				if (e < 0) {
					rl_rmsg_free(o->d, m);
					return e;
				}
			} else if (h->opseq == o->opseq) {
				rl_ack(o, h);
			}
			break;
		}
		if (h->opseq == o->opseq && h->step == step) {
			n = h->dst != (uint32_t)o->c->my_host ? rl_relay(o, h, m->cqe.buf, nx)
							      : rl_apply(o, m, nx, &taken);
			if (n) {
				o->last_rx_us = m->when_us;
				o->last_rx_src = h->src;
				o->last_rx_rail = m->rail;
			}
			break;
		}
		/* later: a later step of this op or a later collective */
		if ((h->opseq == o->opseq && h->step > step) ||
		    (!(h->opseq & P2P_BIT) && h->opseq > o->c->coll_seq)) {
			m->next = o->stash; /* for a later step or operation */
			o->stash = m;
			return 0;
		}
		break; /* an old duplicate: already applied and acknowledged */
	}
	if (!taken)
		rl_rmsg_free(o->d, m);
	return (int64_t)n;
}

static int broken(struct r2_comm *c);
static int member_gone(const struct railop *o);
static int wait_step_in(struct railop *o, uint32_t step, int nx, uint64_t expect);

/* While messages keep coming (a transfer of the same communicator, ACKs of
 * lingering chunks, a flapping rail's events) the waits never find the
 * mailbox empty, where they look at the stop, an abort and the deadline:
 * those are looked at after each message too. 0 or why to stop. */
static int busy_stop(struct railop *o)
{
	if (o->c->stop)
		return R2CCL_E_SHUTDOWN;
	if (o->c->abort_err)
		return o->c->abort_err;
	if (r2_now_us() > o->deadline)
		return o->tx.pool_wait ? rl_pool_timeout(o) : -ETIMEDOUT;
	return 0;
}

/* The mailbox was found empty: point-to-point transfers go on meanwhile;
 * 0 or why to stop (a member gone, busy_stop's reasons, a communicator
 * broken elsewhere). */
static int idle_stop(struct railop *o)
{
	int r;

	if (o->c->p2p_ops)
		r2_p2p_advance(o->c);
	if ((r = member_gone(o)) || (r = busy_stop(o)))
		return r;
	return broken(o->c);
}

/* Why an operation did not finish (a timeout, a broken communicator): what
 * the step still waited for and which chunks were not acknowledged. */
static void stuck(const struct railop *o, uint32_t step, uint64_t got, uint64_t expect, int r)
{
	unsigned n = 0, shown = 0;
	char what[256] = "";

	for (const struct sendrec *s = o->tx.sends; s; s = s->next) {
		if (s->acked)
			continue;
		if (n++ < 4) {
			size_t l = strlen(what);
			snprintf(what + l, sizeof(what) - l, "%s to host %u%s on rail %d%s",
				 shown++ ? "," : "", s->hdr.dst, s->via ? " (detour)" : "", s->rail,
				 s->posted ? s->sent ? " sent" : " queued" : " not posted");
		}
	}
	log_warn("communicator %u: op %llu step %u: %s with %llu of %llu bytes received; %u "
		 "chunks unacknowledged%s%s",
		 o->c->id, (unsigned long long)o->opseq, step, r2ccl_strerror(r),
		 (unsigned long long)got, (unsigned long long)expect, n, n ? ":" : "", what);
}

static int wait_step(struct railop *o, uint32_t step, int nx, uint64_t expect)
{
	int r = wait_step_in(o, step, nx, expect);

	if (r < 0 && r != R2CCL_E_SHUTDOWN)
		stuck(o, step, o->step_got, expect, r);
	return r;
}

static int wait_step_in(struct railop *o, uint32_t step, int nx, uint64_t expect)
{
	uint64_t got = 0;
	struct r2_rmsg **pp = &o->stash;

	/* first what arrived early */
	while (*pp) {
		struct r2_rmsg *m = *pp;
		if (m->cqe.hdr.opseq == o->opseq && m->cqe.hdr.step == step) {
			bool taken = false;
			*pp = m->next;
			got += m->cqe.hdr.dst != (uint32_t)o->c->my_host
				       ? rl_relay(o, &m->cqe.hdr, m->cqe.buf, nx)
				       : rl_apply(o, m, nx, &taken);
			if (!taken)
				rl_rmsg_free(o->d, m);
			if (o->err)
				return o->err;
			continue;
		}
		pp = &m->next;
	}
	while (got + o->aq.async_got < expect) {
		struct r2_rmsg *m;
		int64_t n;

		if (o->tx.need_repost) {
			int r = rl_repost(o);
			if (r < 0)
				return r;
		}
		m = op_take(o, o->tx.pool_wait || o->tx.order_wait ? 1
			       : o->tx.need_repost || o->c->p2p_ops ? 10 : 100);

		if (!m) {
			int why = idle_stop(o);
			if (why < 0)
				return why;
			if (o->tx.pool_wait || o->tx.order_wait) {
				int r = rl_send_ready(o, false);
				if (r < 0)
					return r;
			}
			continue;
		}
		n = rl_handle(o, m, step, nx);
		if (n < 0)
			return (int)n;
		if (o->err)
			return o->err;
		got += (uint64_t)n;
		int why = got + o->aq.async_got < expect ? busy_stop(o) : 0;
		if (why < 0) /* messages keep coming, the step does not end */
			return why;
		o->step_got = got + o->aq.async_got;
		if (o->applied_since || o->tx.pool_wait || o->tx.order_wait) {
			int r = rl_send_ready(o, false);
			if (r < 0)
				return r;
			o->applied_since = false;
		}
	}
	return 0;
}

/* A member left (destroy or abort, comm.c) before its host matched this
 * collective: it cannot finish. */
static int member_gone(const struct railop *o)
{
	return o->opseq > o->c->gone_after ? R2CCL_E_PEER_GONE : 0;
}

/* The communicator was broken meanwhile (peer timeout, abort): stop. */
static int broken(struct r2_comm *c)
{
	if (c->state == R2_COMM_BROKEN || c->state == R2_COMM_DEAD)
		return c->broken_err ? c->broken_err : R2CCL_E_COMM_BROKEN;
	return 0;
}

/* Posts every listed send chunk (rl_send_ready(all)), waiting for proxy
 * buffers if the pool is exhausted. Meanwhile data of this operation's
 * coming steps waits in the stash; acknowledgements free buffers. */
static int send_all(struct railop *o)
{
	int r = rl_send_ready(o, true);

	while (r == 0 && (o->tx.pool_wait || o->tx.order_wait)) {
		struct r2_rmsg *m = op_take(o, 1);
		bool took = m != NULL;
		int e;
		if (!m) {
			/* (the wait may be step_order's hold, with no pool wait:
			 * busy_stop's timeout tells them apart) */
			if ((e = idle_stop(o)))
				return e;
		} else if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA &&
			   !(m->cqe.hdr.flags & R2_CHUNK_DESC) && m->cqe.hdr.opseq == o->opseq &&
			   (o->step == UINT32_MAX || m->cqe.hdr.step > o->step)) {
			m->next = o->stash; /* a coming step's */
			o->stash = m;
		} else {
			int64_t n = rl_handle(o, m, o->step, 0);
			if (n < 0)
				return (int)n;
		}
		if (took && (e = busy_stop(o))) /* messages that keep coming */
			return e;
		if (o->tx.need_repost) {
			r = rl_repost(o);
			if (r < 0)
				return r;
		}
		r = rl_send_ready(o, true);
	}
	return r;
}

/* A message flagged lazy (exec_rail_ack.c), written and not acknowledged:
 * its receiver answers it with its next collective, or after
 * rl_ack_owed_us when it waits in an operation or idles; one held in
 * between (a view's agreement, a GPU stream) does neither. An operation
 * that must await its ACKs sends such messages again, unflagged, once: the
 * receiver answers a second copy at once (and drops it). */
static void lazy_again(struct railop *o)
{
	for (struct sendrec *s = o->tx.sends; s; s = s->next) {
		if (!rl_lazy_unanswered(s) || !s->posted || !s->sent)
			continue;
		s->posted = false; /* (posted before: it goes unflagged) */
		s->sent = false;
		o->tx.need_repost = true;
	}
}

/* Until every peer's descriptor came and (descs_only false) every chunk is
 * acknowledged. */
static int wait_acks(struct railop *o, bool descs_only)
{
	/* lazy messages unanswered after 2 x rl_ack_owed_us go again */
	uint64_t again_at = descs_only || !o->lazy ? 0 : r2_now_us() + 2 * rl_ack_owed_us;

	while ((!descs_only && o->tx.nsends > 0) || !rl_desc_done(o)) {
		struct r2_rmsg *m;
		int r, tmo = o->c->p2p_ops ? 10 : 100;
		if (again_at && r2_now_us() >= again_at) {
			lazy_again(o);
			again_at = 0;
		}
		if ((r = rl_repost(o)) < 0)
			return r;
		if (again_at)
			tmo = R2_MIN(tmo, (int)R2_DIV_UP(2 * rl_ack_owed_us, 1000));
		m = op_take(o, tmo);
		if (!m) {
			if ((r = idle_stop(o)) < 0)
				return r;
			continue;
		}
		int64_t n = rl_handle(o, m, UINT32_MAX, 0);
		if (n < 0)
			return (int)n;
		if ((r = busy_stop(o)) < 0)
			return r;
	}
	return 0;
}

#define LINGER_COPY_MAX R2_LAZY_OP_MAX

/* A chunk must go again or waits to be posted, or a second copy of an
 * acknowledged one may still be read from W by a transport (it was posted
 * more than once, or through a bridge): end_sends then awaits the ACKs.
 * (Posted once and acknowledged, a chunk was written whole: its send
 * completion may still be on its way, the transport reads W no more.) */
static bool linger_blocked(const struct railop *o)
{
	if (o->tx.need_repost || o->tx.pool_wait)
		return true;
	for (const struct sendrec *s = o->tx.sends; s; s = s->next)
		if ((!s->acked && !s->posted && !s->sent) ||
		    (s->acked && s->borrowed && s->posted && !s->sent && (s->posts > 1 || s->via)))
			return true;
	return false;
}

/* The operation's end. Every peer's descriptor must have come (a call that
 * differs is found here, not later). With ack_linger, the chunks still
 * unacknowledged then (the last steps', normally) get their own copies
 * once no transport reads W or S for them, and wait for their ACKs past
 * the operation (rl_p2p_linger: sent again if their connection fails,
 * through a bridge if need be, as the eager path's messages): the caller
 * does not wait the ACKs' way back. Otherwise, while a chunk still waits
 * to be posted (a full queue, no proxy buffer), or when more than
 * LINGER_COPY_MAX bytes sent from W or S would need copies, the ACKs are
 * awaited here. */
static int end_sends(struct railop *o)
{
	struct sendrec **keep, **pp;
	uint64_t copy = 0;
	int n = 0, r = wait_acks(o, true);

	if (r < 0 || o->tx.nsends == 0)
		return r;
	if (!r2_param_bool(&o->d->params, P_ACK_LINGER) || linger_blocked(o))
		return wait_acks(o, false);
	/* ACKs already in: their chunks need no copy (a few: a steady
	 * flow of other messages must not keep the operation from ending) */
	for (int i = 0; i < 64; i++) {
		struct r2_rmsg *m = rl_mbox_take(o->c, 0);
		if (!m)
			break;
		int64_t h = rl_handle(o, m, UINT32_MAX, 0);
		if (h < 0)
			return (int)h;
	}
	if (o->tx.nsends == 0)
		return 0;
	if (linger_blocked(o))
		return wait_acks(o, false);
	for (struct sendrec *s = o->tx.sends; s; s = s->next)
		if (!s->acked && s->borrowed)
			copy += s->hdr.len;
	/* the copies cost more than the ACKs' way back saves past a few
	 * chunks (a large operation's last step still in flight) */
	if (copy > LINGER_COPY_MAX)
		return wait_acks(o, false);
	if ((r = rl_settle_copy_all(o)) < 0)
		return r == -ENOMEM ? wait_acks(o, false) : r;
	/* the settle handled completions and errors meanwhile */
	if (linger_blocked(o))
		return wait_acks(o, false);
	keep = malloc((size_t)o->tx.nsends * sizeof(*keep));
	if (!keep)
		return wait_acks(o, false);
	for (pp = &o->tx.sends; *pp;) {
		struct sendrec *s = *pp;
		if (s->acked) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		o->tx.nsends--;
		keep[n++] = s;
	}
	o->tx.sends_tail = pp;
	if (n && rl_p2p_linger(o->c, o->opseq, keep, n, &o->det) < 0) {
		/* no memory: back in the list, awaited here */
		for (int i = 0; i < n; i++)
			rl_sends_add(&o->tx, keep[i]);
		free(keep);
		return wait_acks(o, false);
	}
	free(keep);
	/* a host ahead whose next collective's chunk came meanwhile has them */
	if (n)
		rl_acks_seen_apply(o->c);
	/* what is left is acknowledged, its send completion still to come:
	 * op_end leaves it to that (orphan) */
	return 0;
}

/* Before step 0: the chunk size, the chunks that came while no collective
 * ran, a peer known gone (fail at once), the deadline, the plan, and step
 * 0's transfers (listed as "the next step's" of a step -1). */
static int op_begin(struct railop *o, enum r2_plan_op op, uint32_t root, uint32_t peer)
{
	struct r2_comm *c = o->c;
	struct r2_rails *rs = c->d->rails;
	uint32_t all = rs ? (1u << rs->n) - 1 : 0;
	uint64_t cs = (uint64_t)r2_param_int(&c->d->params, P_CHUNK_SIZE);
	struct r2_bufpool *bp = r2d_bufpool_for(c->d, 0);
	int r;

	if (bp && cs > r2_bufpool_buf_size(bp))
		cs = r2_bufpool_buf_size(bp); /* chunk_size raised since start-up */
	o->chunk = (uint32_t)R2_MAX(o->elem, cs / o->elem * o->elem);
	o->spread = (uint32_t)(c->d->rails ? R2_MAX(1, c->d->rails->tcp_streams) : 1);
	o->stash = c->deferred; /* chunks that came while no collective ran */
	c->deferred = NULL;
	if (member_gone(o))
		return member_gone(o); /* a member left: fail at once */
	for (int h = 0; h < c->nhosts; h++) {
		if (h != c->my_host && (c->hosts[h].failed_rails & all) == all &&
		    !rl_detour_possible(o, c->hosts[h].id))
			return R2CCL_E_PEER_GONE; /* known gone: fail at once */
	}
	o->prof.t0 = r2_now_us();
	o->deadline = o->prof.t0 + (uint64_t)r2_param_int(&c->d->params, P_OP_TIMEOUT_MS) * 1000;
	/* small: its descriptors and (AllReduce) last step's chunks are
	 * acknowledged by the peers' next collectives (exec_rail_ack.c) */
	o->lazy = r2_param_bool(&c->d->params, P_ACK_LINGER) && o->size <= R2_LAZY_OP_MAX;
	o->lazy_last = o->lazy && op == R2_PLAN_ALLREDUCE;
	r = rl_desc_begin(o); /* every peer hears what this host's ranks called */
	if (r < 0 || o->size == 0)
		return r;
	r = rl_build_plan(o, op, root, peer);
	if (r < 0) {
		log_warn("communicator %u: no plan for %u bytes (op %d, root %u, peer %u, %d hosts)",
			 c->id, (unsigned)o->size, (int)op, root, peer, c->nhosts);
		return r;
	}
	int64_t order_min = r2_param_int(&c->d->params, P_STEP_ORDER);
	o->order = order_min > 0 && o->plan->nsteps >= order_min &&
		   (o->plan->algo == R2_ALGO_HD || o->plan->algo == R2_ALGO_RD);
	o->order_bw = (double)r2_param_int(&c->d->params, P_COST_NIC_BW);
	r = rl_stage_plan(o);
	if (r < 0)
		return r;
	/* step 0's sends are "the next step's" of a step -1 that awaits nothing */
	o->nxn = r2_plan_expand(o->plan, (uint32_t)c->my_host, 0, o->xfn, o->maxx);
	o->step = UINT32_MAX; /* so that step + 1 == 0 */
	if (o->nxn < 0)
		return o->nxn;
	rl_stage_first_sends(o);
	return 0;
}

/* Step k: its sends (listed, and partly posted, during step k - 1) all go,
 * step k + 1's are listed and posted as soon as their bytes are final, and
 * the step waits for what it receives or relays. */
static int run_step(struct railop *o, uint32_t k)
{
	struct r2_comm *c = o->c;
	struct r2_xfer *t;
	uint64_t expect = 0, w0, s0 = r2_now_us(), s1;
	int nx, r;

	/* this step's sends: the list was made (and partly posted early)
	 * during the previous step; step 0's is made here */
	r = k == 0 ? rl_list_chunks(o, o->xfn, o->nxn, R2_XFER_SEND, true) : 0;
	if (r == 0) {
		o->nrcv = 0;
		r = send_all(o); /* whatever is left of them */
	}
	if (r < 0)
		return r;
	s1 = r2_now_us();
	t = o->xf;
	o->xf = o->xfn;
	o->xfn = t;
	nx = o->nxn;
	o->step = k;
	o->dedup.nseen = 0;
	o->step_got = 0;
	o->aq.async_got = 0;
	o->dedup.nrseen = 0;
	for (int i = 0; i < nx; i++) {
		const struct r2_xfer *xr = &o->xf[i];
		/* a bridge waits for what it relays as for what it receives */
		if (xr->dir == R2_XFER_RECV || xr->dir == R2_XFER_RELAY)
			expect += xr->len;
	}
	r = rl_list_chunks(o, o->xf, nx, R2_XFER_RECV, false);
	if (r < 0)
		return r;
	/* the next step's sends, posted as soon as their bytes are final */
	o->nnsend = 0;
	o->nxn = 0;
	if (k + 1 < o->plan->nsteps) {
		o->nxn = r2_plan_expand(o->plan, (uint32_t)c->my_host, k + 1, o->xfn, o->maxx);
		if (o->nxn < 0)
			return o->nxn;
		r = rl_list_chunks(o, o->xfn, o->nxn, R2_XFER_SEND, true);
		if (r < 0)
			return r;
		/* chunks that read nothing this step awaits go at once */
		r = rl_send_ready(o, false);
		if (r < 0)
			return r;
	}
	r = rl_repost(o);
	if (r < 0)
		return r;
	w0 = r2_now_us();
	o->last_rx_us = 0;
	r = wait_step(o, k, nx, expect);
	if (r < 0)
		return r;
	/* where a slow collective waits (--log-level debug) */
	log_debug("communicator %u: op %llu step %u of %u: waited %.1f ms for %llu "
		  "bytes (last chunk from host %u on rail %d, in the mailbox at "
		  "%+.1f ms), from %.1f ms into the operation (its sends %.2f ms, "
		  "the next step's %.2f ms before; monotonic clock %llu us)", c->id,
		  (unsigned long long)o->opseq, k, o->plan->nsteps,
		  (double)(r2_now_us() - w0) / 1000.0, (unsigned long long)expect,
		  o->last_rx_src, o->last_rx_us ? o->last_rx_rail : -1,
		  o->last_rx_us ? ((double)o->last_rx_us - (double)w0) / 1000.0 : 0.0,
		  (double)(w0 - o->prof.t0) / 1000.0, (double)(s1 - s0) / 1000.0,
		  (double)(w0 - s1) / 1000.0, (unsigned long long)w0);
	return 0;
}

/* Where the operation's time went (--log-level debug). */
static void log_profile(const struct railop *o)
{
	log_debug("communicator %u: op %llu, %llu bytes: %.1f ms (chunks in %.1f..%.1f ms); "
		  "plan %s, %u steps, predicted %.1f ms; idle %.1f ms, applying %.1f ms, "
		  "settle %.1f ms, staging %.1f ms; "
		  "%llu data (%llu queued), %llu acks, %llu send completions; %llu reposts, "
		  "%llu tries, %llu full", o->c->id, (unsigned long long)o->opseq,
		  (unsigned long long)o->size,
		  (double)(r2_now_us() - o->prof.t0) / 1e3,
		  o->prof.first_rx ? ((double)o->prof.first_rx - (double)o->prof.t0) / 1e3 : 0.0,
		  o->prof.last_rx ? ((double)o->prof.last_rx - (double)o->prof.t0) / 1e3 : 0.0,
		  o->plan ? r2_algo_name(o->plan->algo) : "eager", o->plan ? o->plan->nsteps : 1,
		  o->plan ? o->plan->time * 1e3 : 0.0, (double)o->prof.idle_us / 1e3,
		  (double)o->prof.apply_us / 1e3,
		  (double)o->prof.settle_us / 1e3, (double)o->prof.stage_us / 1e3,
		  (unsigned long long)o->prof.data, (unsigned long long)o->prof.queued,
		  (unsigned long long)o->prof.acks,
		  (unsigned long long)o->prof.sendc, (unsigned long long)o->prof.reposts,
		  (unsigned long long)o->prof.tries, (unsigned long long)o->prof.eagain);
}

/* The operation ends (r: its result): no thread or transport may touch W
 * afterwards; what is unacknowledged is freed or left to its completion,
 * chunks of later collectives wait for them. */
static void op_end(struct railop *o, int r)
{
	struct r2_comm *c = o->c;

	rl_apply_drain(o); /* no thread may write W after this returns */
	if (r < 0)
		log_warn("communicator %u: rail phase of operation %llu failed: %s", c->id,
			 (unsigned long long)o->opseq, r2ccl_strerror(r));
	if (r < 0)
		rl_settle_end(o);
	/* what is still unacknowledged: the rails thread frees it on completion
	 * if posted; otherwise free it now */
	while (o->tx.sends) {
		struct sendrec *s = o->tx.sends;
		o->tx.sends = s->next;
		if (s->posted && !s->sent) {
			rl_orphan(s); /* freed at its send completion */
			continue;
		}
		rl_sendrec_free(s);
	}
	/* chunks for later collectives wait for them */
	while (o->stash) {
		struct r2_rmsg *m = o->stash;
		o->stash = m->next;
		if (m->cqe.hdr.opseq > c->coll_seq) {
			m->next = c->deferred;
			c->deferred = m;
		} else {
			rl_rmsg_free(c->d, m);
		}
	}
	free(o->dedup.seen);
	free(o->dedup.rseen);
	free(o->det.nacked);
	free(o->in.init);
	free(o->xf);
	free(o->xfn);
	free(o->nsend);
	free(o->rcv);
	free(o->stage.wr);
	free(o->aq.busy);
	free(o->tx.holds);
	rl_desc_end(o);
	r2_plan_free(o->plan);
}

/* S: NULL, or the input W starts as (lazy input, read where W does not
 * hold it yet; W holds all of it afterwards). */
int rail_phase(struct r2_exec *x, void *W, const void *S, uint64_t size, r2ccl_dtype_t dtype,
	       r2ccl_redop_t redop, enum r2_plan_op op, uint32_t root, uint32_t peer,
	       uint64_t opseq, struct r2_view *view)
{
	struct railop o = {
		.stage.x = x,
		.c = x->c,
		.d = x->c->d,
		.W = W,
		.in.S = S != W ? S : NULL,
		.size = size,
		.elem = (uint32_t)r2ccl_dtype_size(dtype),
		.dtype = dtype,
		.redop = redop,
		.opseq = opseq,
		.view = view,
	};
	int r;

	o.tx.sends_tail = &o.tx.sends;
	/* (size 0: no plan, only the descriptors: a peer's count may differ) */
	r = op_begin(&o, op, root, peer);
	for (uint32_t k = 0; r == 0 && o.plan && k < o.plan->nsteps; k++)
		r = run_step(&o, k);
	if (r == 0)
		r = end_sends(&o);
	if (r == 0 && size)
		r = rl_init_fill(&o, 0, size);
	if (r == 0)
		log_profile(&o);
	op_end(&o, r);
	return r;
}
