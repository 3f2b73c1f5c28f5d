/* SPDX-License-Identifier: MIT */
/*
 * Eager small AllReduce across hosts: one message each way per pair of
 * hosts instead of the planner's schedule.
 *
 * A ring (or any reduce-scatter + all-gather) takes 2(n-1) exchanges, each
 * a wire latency plus the thread hand-offs of both daemons; for a few bytes
 * that is all there is. Here every host sends its whole working buffer W,
 * with the chunk header, to every other host in one step (a direct
 * exchange: for 2 hosts, one message each way), keeps what comes, and when
 * all n contributions are there reduces them in host order with one
 * r2_reduce: every host computes the same expression, so every host gets
 * the same bits. Chosen per operation from facts every daemon shares (the
 * size, the host count, the agreed view, the cost model's configuration),
 * so all hosts of a communicator take the same path for the same sequence
 * number.
 *
 * Above R2_EAGER_MAX (64 KiB) and up to eager_max (512 KiB by default), on 2 hosts
 * (where it sends the same bytes as recursive doubling, in the same one
 * step), the message goes in pieces, one per rail: the rails share the
 * bytes as the planner's plan would, and the operation still waits for no
 * acknowledgement.
 *
 * The guarantees of the chunk protocol stay: each message is acknowledged
 * by the receiving rails thread, the sender keeps its copy until then (past
 * the operation's end: rl_p2p_linger), and one lost with a failed
 * connection goes again on another rail; a receiver keeps one copy per
 * source (a duplicate is dropped).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/detour.h"
#include "net/health.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "log.h"
#include "reduce.h"
#include "util.h"

#include "engine/exec_rail_int.h"

struct eager {
	struct r2_comm *c;
	uint64_t opseq, size;
	size_t es;               /* element size: pieces are whole elements */
	int np;                  /* pieces per message (hdr.chunk: np << 16 | piece) */
	struct sendrec **send;   /* [host * np + piece]: mine to it (NULL: me) */
	struct r2_rmsg **got;    /* [host * np + piece]: its to me */
	int nsend, nacked, ngot;
	bool repost;             /* a send waits for a rail or queue room */
	uint64_t t_in, t_take;   /* the last message: in the mailbox, taken (us) */
	struct op_desc mine;     /* what this host's ranks called (in each header) */
	struct rail_detours det; /* messages sent through a bridge (detour.h) */
};

/* Both hosts have a NIC up on some rail whose link between them is not
 * known failed: the direct message needs no bridge. */
static bool pair_ok(const struct r2_view *v, uint32_t a, uint32_t b)
{
	for (uint32_t r = 0; r < v->nrails; r++) {
		bool link_down = false;
		if (v->down[a * v->nrails + r] || v->down[b * v->nrails + r])
			continue;
		for (uint32_t i = 0; i < v->nlinks; i++) {
			const uint32_t *t = &v->links[3 * i];
			if (t[2] == r && ((t[0] == a && t[1] == b) || (t[0] == b && t[1] == a)))
				link_down = true;
		}
		if (!link_down)
			return true;
	}
	return false;
}

/* Piece k of np of a buffer of size bytes (whole elements of es bytes). */
static void piece(uint64_t size, size_t es, int np, int k, uint64_t *off, uint64_t *len)
{
	uint64_t n = size / es, a = n * (uint64_t)k / (uint64_t)np,
		 b = n * (uint64_t)(k + 1) / (uint64_t)np;

	*off = a * es;
	*len = (b - a) * es;
}

/* More than 2 hosts above R2_EAGER_MAX (eager_hosts): whether the cost
 * model puts eager's one step, (n - 1) x size out of and into every host,
 * under the log-step plans: recursive doubling (ceil(log2 n) steps of the
 * whole buffer) or halving/doubling (2 ceil(log2 n) steps, 2 (n - 1) / n x
 * size in all). alpha is a step's cost; a host's bandwidth is its nrails
 * NICs at cost_nic_bw. */
static bool eager_beats_logstep(const struct r2_comm *c, uint64_t size, uint32_t nrails)
{
	const struct r2_params *p = &c->d->params;
	double alpha = (double)r2_param_int(p, P_COST_ALPHA_US) * 1e-6;
	double t = (double)size / ((double)r2_param_int(p, P_COST_NIC_BW) * (double)nrails);
	double n = (double)c->nhosts, L = 0;

	while ((1 << (int)L) < c->nhosts)
		L++;
	double eager = alpha + (n - 1) * t;
	double rd = L * (alpha + t);
	double hd = 2 * L * alpha + 2 * (n - 1) / n * t;
	return eager < rd && eager < hd;
}

int rl_eager_pieces(const struct r2_comm *c, uint64_t size, size_t es, const struct r2_view *v)
{
	const struct r2_rails *rs = c->d->rails;
	uint32_t nrails = v && v->down ? v->nrails : rs ? (uint32_t)rs->n : 0;
	int np = 1;

	if (size == 0 || c->nhosts < 2 || c->nhosts > R2_EAGER_MAX_HOSTS || nrails == 0 || !es ||
	    size > (uint64_t)r2_param_int(&c->d->params, P_EAGER_MAX))
		return 0;
	if (v && v->down && v->nhosts != (uint32_t)c->nhosts)
		return 0;
	if (size > R2_EAGER_MAX) {
		/* larger: on 2 hosts, where it sends what recursive doubling
		 * sends, in the same one step, without waiting for an
		 * acknowledgement (with more hosts eager sends (n - 1) x size
		 * where the plans send 2 (n - 1) / n x: on 3 hosts at 1 Gbit/s
		 * it took 1.08 ms at 128 KB where the planner's plan took 0.70,
		 * and the alpha-beta model, alpha 200 us a step, put it the
		 * other way round); up to eager_max, on healthy NICs (a degraded
		 * one wants the planner's shares), a piece on every rail (with
		 * more rails than R2_EAGER_MAX_PIECES the plans' use of them
		 * all wins), each one message of at most a chunk */
		np = (int)R2_MIN(nrails, (uint32_t)R2_EAGER_MAX_PIECES);
		if (c->nhosts > r2_param_int(&c->d->params, P_EAGER_HOSTS) ||
		    (c->nhosts > 2 && !eager_beats_logstep(c, size, nrails)) || (uint32_t)np < nrails ||
		    size / es < (uint64_t)np ||
		    size / (uint64_t)np + es > (uint64_t)r2_param_int(&c->d->params, P_CHUNK_SIZE))
			return 0;
		for (uint32_t i = 0; v && v->bw && v->down && i < v->nhosts * v->nrails; i++)
			if (v->bw[i] && v->bw[i] < R2_PLAN_NOMINAL_BPS)
				return 0;
	}
	if (!v || !v->down)
		return np;
	for (uint32_t a = 0; a < v->nhosts; a++)
		for (uint32_t b = a + 1; b < v->nhosts; b++)
			if (!pair_ok(v, a, b))
				return 0;
	return np;
}

/* On a rail to its host, or, with none left (two NICs on different rails
 * failed, and the view that plans around it not agreed yet), through a
 * bridge as the rail phase's chunks go. */
static int post(struct eager *e, struct sendrec *s)
{
	/* written inline, its send completion comes back on this thread, to
	 * this mailbox: no wake-up of the rails thread, none of this one */
	r2d_rails_own_sends(true);
	int r = rl_post_via(e->c, &e->det, s, e->opseq);
	r2d_rails_own_sends(false);

	if (r == 0) {
		rl_inject_dup(e->c->d, s);
		return 0;
	}
	if (r == -EAGAIN) {
		e->repost = true; /* the queue is full: after the next message */
		return 0;
	}
	return r == -ENOTCONN ? R2CCL_E_PEER_GONE : r;
}

static int repost(struct eager *e)
{
	e->repost = false;
	for (int i = 0; i < e->c->nhosts * e->np; i++) {
		struct sendrec *s = e->send[i];
		if (s && !s->posted && !s->acked) {
			int r = post(e, s);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static struct sendrec *mine(struct eager *e, uint64_t ctx)
{
	for (int i = 0; i < e->c->nhosts * e->np; i++)
		if (e->send[i] && (uint64_t)(uintptr_t)e->send[i] == ctx)
			return e->send[i];
	return NULL;
}

/* My piece that an acknowledgement names (its header is the piece's). */
static struct sendrec *acked_piece(struct eager *e, const struct r2_chunk_hdr *h)
{
	uint32_t k = h->chunk & 0xffffu;

	/* mine only: a bridge may find in its mailbox the destination's ACK
	 * of a message it forwarded for another host (one whose record it no
	 * longer holds) */
	if (h->src != (uint32_t)e->c->my_host || h->dst >= (uint32_t)e->c->nhosts ||
	    k >= (uint32_t)e->np)
		return NULL;
	return e->send[(int)h->dst * e->np + (int)k];
}

/* A connection failed (rl_p2p_handle marked its rail in failed_rails): my
 * message written on it and not acknowledged goes again on another rail. */
static int conn_error(struct eager *e, const struct r2_rmsg *m)
{
	struct r2_rails *rs = e->c->d->rails;
	uint32_t all = rs ? (1u << rs->n) - 1 : 0;

	for (int i = 0; i < e->c->nhosts * e->np; i++) {
		struct sendrec *s = e->send[i];
		if (!s || rl_sent_to(s) != m->cqe.peer || s->rail != m->rail ||
		    !s->sent || s->acked)
			continue;
		s->sent = false;
		s->posted = false;
		r2d_rails_note_resend(e->c->d, m->rail, m->cqe.peer, 1);
		if ((e->c->hosts[i / e->np].failed_rails & all) == all &&
		    !rl_detour_possible_for(e->c, &e->det, s->peer))
			return R2CCL_E_PEER_GONE;
		e->repost = true;
	}
	return 0;
}

static void sent(struct eager *e, struct sendrec *s, int status)
{
	if ((status < 0 || rl_sent_on_failed(e->c, s) || s->nack_wait) && !s->acked) {
		s->posted = false; /* lost with its connection, or refused: again */
		s->sent = false;
		s->nack_wait = 0;
		e->repost = true;
		return;
	}
	s->nack_wait = 0;
	s->sent = true;
}

/* What host h->src called, compared with this host's call: an eager
 * message's header carries it; a descriptor message (R2_CHUNK_DESC) means
 * the peer took the planner's path for this collective, so it called
 * another count, or more differs. <0: the mismatch (the communicator is
 * broken with its reason). */
static int desc_in(struct eager *e, const struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	struct op_desc theirs;

	if (h->flags & R2_CHUNK_DESC) {
		if (h->len != sizeof(theirs))
			return 0; /* malformed: dropped below */
		memcpy(&theirs, m->cqe.buf, sizeof(theirs));
		int r = rl_desc_check(e->c, e->opseq, &e->mine, &theirs, h->src);
		return r < 0 ? r : rl_path_mismatch(e->c, e->opseq, h->src, true);
	} else if (h->flags & R2_CHUNK_EAGER) {
		rl_desc_from_hdr(&theirs, h);
	} else {
		return 0;
	}
	return rl_desc_check(e->c, e->opseq, &e->mine, &theirs, h->src);
}

int rl_eager_slot(const struct r2_chunk_hdr *h, uint32_t nhosts, uint32_t me, int np,
		  uint64_t size, size_t es)
{
	uint32_t k = h->chunk & 0xffffu, hnp = h->chunk >> 16;
	uint64_t off = 0, len = 0;

	if (np < 1 || h->src >= nhosts || h->src == me || h->dst != me ||
	    !(h->flags & R2_CHUNK_EAGER))
		return -1;
	if (hnp == (uint32_t)np && k < hnp)
		piece(size, es, np, (int)k, &off, &len);
	else if (hnp == 0 && k == 0 && np == 1) /* a daemon from before the pieces */
		len = size;
	if (h->len != len || len == 0)
		return -1;
	return (int)h->src * np + (int)k;
}

/* A data message: mine if it is this operation's, to this host, a piece
 * of the split this host makes; <0: the hosts disagree on the collective
 * (R2CCL_E_MISMATCH). */
static int data_in(struct eager *e, struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	int r, i;

	if (h->src < (uint32_t)e->c->nhosts && h->src != (uint32_t)e->c->my_host &&
	    (r = desc_in(e, m)) < 0) {
		rl_rmsg_free(e->c->d, m);
		return r;
	}
	i = rl_eager_slot(h, (uint32_t)e->c->nhosts, (uint32_t)e->c->my_host, e->np, e->size,
			  e->es);
	if (i < 0) {
		log_warn("communicator %u: op %llu: eager message from host %u of %u bytes, piece "
			 "%u of %u, dropped (expected %llu bytes in %d pieces)", e->c->id,
			 (unsigned long long)e->opseq, h->src, h->len, h->chunk & 0xffffu,
			 h->chunk >> 16, (unsigned long long)e->size, e->np);
		rl_rmsg_free(e->c->d, m);
		return 0;
	}
	if (e->got[i]) { /* delivered twice: kept once */
		atomic_fetch_add(&e->c->d->chunks_dup_dropped, 1);
		rl_rmsg_free(e->c->d, m);
		return 0;
	}
	/* paid by my next collective's message (one through a bridge was
	 * answered to the bridge at once: mbox.c) */
	if ((h->flags & (R2_CHUNK_LAZY_ACK | R2_CHUNK_DETOUR)) == R2_CHUNK_LAZY_ACK)
		rl_ack_owe(e->c, m);
	e->got[i] = m;
	e->ngot++;
	e->t_in = R2_MAX(e->t_in, m->when_us);
	e->t_take = r2_now_us();
	return 0;
}

/* One message of the mailbox; <0: the operation fails. */
static int handle(struct eager *e, struct r2_rmsg *m)
{
	struct r2_comm *c = e->c;
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	struct sendrec *s;

	if (rl_p2p_handle(c, m))
		return 0; /* a transfer's */
	switch (m->cqe.type) {
	case R2_TPC_SEND:
		s = (struct sendrec *)(uintptr_t)m->cqe.ctx;
		if (s && mine(e, m->cqe.ctx))
			sent(e, s, m->cqe.status);
		else if (s && rl_is_orphan(s))
			rl_sendrec_free(s); /* an ended operation's */
		break;
	case R2_TPC_ERROR: {
		int r = conn_error(e, m);
		if (r < 0) {
			rl_rmsg_free(c->d, m);
			return r;
		}
		break;
	}
	case R2_TPC_RECV:
		if (h->kind == R2_MSG_ACK && h->opseq == e->opseq && (h->flags & R2_CHUNK_NACK) &&
		    h->src == (uint32_t)c->my_host) {
			/* the bridge has no rail to its host either (or is busy;
			 * or the host itself cannot keep it yet, busy):
			 * my piece through it goes again (another bridge); and, as
			 * rl_nack does, even for one it had acknowledged (it
			 * lost it since), the bridge is noted as refusing that
			 * host, so that one with no other way is found gone now,
			 * not at the timeout */
			int r = rl_detour_refused(c, &e->det, h, m->cqe.peer);
			s = acked_piece(e, h);
			if (s && !s->acked && rl_sent_to(s) == m->cqe.peer &&
			    !rl_nack_defer(s, (h->flags & R2_CHUNK_BUSY) != 0)) {
				s->posted = false;
				s->sent = false;
				e->repost = true;
			}
			if (r < 0) {
				rl_rmsg_free(c->d, m);
				return r;
			}
		} else if (h->kind == R2_MSG_ACK && h->opseq == e->opseq &&
			   (s = acked_piece(e, h)) && !s->acked) {
			s->acked = true;
			e->nacked++;
		} else if (h->kind == R2_MSG_DATA && h->opseq == e->opseq) {
			return data_in(e, m);
		} else if (h->kind == R2_MSG_DATA && !(h->opseq & P2P_BIT) && h->opseq > e->opseq) {
			m->next = c->deferred; /* a later collective's */
			c->deferred = m;
			return 0;
		} else if (h->kind == R2_MSG_DATA && !(h->opseq & P2P_BIT)) {
			atomic_fetch_add(&c->d->chunks_dup_dropped, 1); /* an old duplicate */
		}
		break; /* or an ended operation's ACK */
	default:
		break;
	}
	rl_rmsg_free(c->d, m);
	return 0;
}

static int broken(const struct r2_comm *c)
{
	if (c->state == R2_COMM_BROKEN || c->state == R2_COMM_DEAD)
		return c->broken_err ? c->broken_err : R2CCL_E_COMM_BROKEN;
	return 0;
}

static bool all_posted(const struct eager *e)
{
	for (int i = 0; i < e->c->nhosts * e->np; i++)
		if (e->send[i] && !e->send[i]->acked && !e->send[i]->posted)
			return false;
	return true;
}

/* Until every message came and every one of mine is on its way (posted);
 * their acknowledgements are awaited after the operation (rl_p2p_linger). */
static int run(struct eager *e, uint64_t deadline)
{
	struct r2_comm *c = e->c;
	uint64_t spin_us = rl_exec_spin_us(c->d); /* the peers' messages are microseconds away */

	while (e->ngot < (c->nhosts - 1) * e->np || !all_posted(e)) {
		struct r2_rmsg *m;
		int r;

		/* a member left (destroy or abort, comm.c) before its host
		 * matched this collective: it cannot finish */
		if (e->opseq > c->gone_after)
			return R2CCL_E_PEER_GONE;
		if (e->repost && (r = repost(e)) < 0)
			return r;
		m = rl_mbox_take_spin(c, e->repost ? 1 : c->p2p_ops ? 10 : 100, spin_us);
		if (!m) {
			if (c->p2p_ops)
				r2_p2p_advance(c); /* transfers go on meanwhile */
			if (c->stop)
				return R2CCL_E_SHUTDOWN;
			if (c->abort_err)
				return c->abort_err;
			if ((r = broken(c)))
				return r;
			if (r2_now_us() > deadline)
				return -ETIMEDOUT;
			continue;
		}
		if ((r = handle(e, m)) < 0)
			return r;
		/* a steady flow of other messages must not hide the stop, an
		 * abort or the deadline */
		if (e->ngot >= (c->nhosts - 1) * e->np && all_posted(e))
			break;
		if (c->stop)
			return R2CCL_E_SHUTDOWN;
		if (c->abort_err)
			return c->abort_err;
		if (r2_now_us() > deadline)
			return -ETIMEDOUT;
	}
	return 0;
}

/* The messages not acknowledged yet outlive the operation: the executor
 * takes their ACKs (and re-sends one lost with its connection) afterwards,
 * so an operation ends when its data is in, not a round trip later. */
static void linger(struct eager *e)
{
	struct sendrec *keep[R2_EAGER_MAX_HOSTS * R2_EAGER_MAX_PIECES];
	int n = 0;

	for (int i = 0; i < e->c->nhosts * e->np; i++)
		if (e->send[i] && !e->send[i]->acked)
			keep[n++] = e->send[i];
	if (n == 0 || rl_p2p_linger(e->c, e->opseq, keep, n, &e->det) < 0)
		return; /* none, or no memory: freed or orphaned by the caller */
	for (int i = 0; i < e->c->nhosts * e->np; i++)
		if (e->send[i] && !e->send[i]->acked)
			e->send[i] = NULL; /* the linger's now */
	/* a host ahead whose next collective's chunk came meanwhile has them */
	rl_acks_seen_apply(e->c);
}

int rl_eager_allreduce(struct r2_exec *x, void *W, const void *S, uint64_t size,
		       r2ccl_dtype_t dtype, r2ccl_redop_t redop, uint64_t opseq, int np)
{
	struct r2_comm *c = x->c;
	struct r2_rails *rs = c->d->rails;
	int nh = c->nhosts, me = c->my_host, r = 0;
	const void *mybuf = S ? S : W;
	const void *in[R2_EAGER_MAX_HOSTS];
	uint64_t t0 = r2_now_us(), t_posted = t0;
	struct eager e = {
		.c = c,
		.opseq = opseq,
		.size = size,
		.es = r2ccl_dtype_size(dtype),
		.np = np,
		.send = calloc((size_t)(nh * np), sizeof(*e.send)),
		.got = calloc((size_t)(nh * np), sizeof(*e.got)),
	};

	if (!e.send || !e.got || !rs || rs->n == 0) {
		r = !rs || rs->n == 0 ? R2CCL_E_NO_PATH : -ENOMEM;
		goto out;
	}
	rl_desc_fill(&e.mine, x);
	/* messages of this operation that came while none ran (or during the
	 * previous one); one that shows the hosts called different
	 * collectives fails it, after mine are posted: they show it to the
	 * hosts that wait for them (they have no other way to learn it) */
	int mismatch = 0;
	for (struct r2_rmsg **pp = (struct r2_rmsg **)&c->deferred; *pp && !mismatch;) {
		struct r2_rmsg *m = *pp;
		if (m->cqe.hdr.opseq == opseq) {
			*pp = m->next;
			m->next = NULL;
			mismatch = data_in(&e, m);
			continue;
		}
		pp = &m->next;
	}
	/* the tenant's queue on the rails: looked up once (a lock and a
	 * lookup), not per message */
	int tenant = r2d_tenants_of(c->d, c->tenant);
	for (int i = 0; i < nh * np; i++) {
		int h = i / np, k = i % np;
		uint64_t off, len;
		struct sendrec *s;
		if (h == me)
			continue;
		piece(size, e.es, np, k, &off, &len);
		s = calloc(1, sizeof(*s));
		if (!s) {
			r = -ENOMEM;
			goto out;
		}
		/* a host's messages spread over the rails, and so do the
		 * messages to a host: the j-th host after me (j = h - me - 1
		 * mod n) on rail j, a message's pieces on the rails after it
		 * ((me + h) mod R put both of host 1's messages of 3 hosts on
		 * rail 1: 64 KB took 1.08 ms at 1 Gbit/s, twice the wire time) */
		s->rail = ((h - me - 1 + nh) % nh + k) % rs->n;
		s->tenant = tenant;
		/* a copy: W receives the result while the transport may still
		 * read, and a re-send after a failure needs the bytes; in a
		 * proxy buffer (registered on every rail: verbs sends it
		 * without another copy), the heap when the pool is full */
		if (rl_chunk_buf(c->d, s, (const char *)mybuf + off, len) == -ENOBUFS &&
		    (s->buf = malloc(len)))
			memcpy(s->buf, (const char *)mybuf + off, len);
		if (!s->buf) {
			free(s);
			r = -ENOMEM;
			goto out;
		}
		s->hdr.magic = R2_CHUNK_MAGIC;
		s->hdr.kind = R2_MSG_DATA;
		s->hdr.comm = c->key;
		s->hdr.opseq = opseq;
		s->hdr.src = (uint32_t)me;
		s->hdr.dst = (uint32_t)h;
		s->hdr.len = (uint32_t)len;
		rl_desc_to_hdr(&e.mine, &s->hdr); /* flags, step, off */
		/* its receiver's next message to me acknowledges it
		 * (exec_rail_ack.c) */
		s->hdr.flags |= R2_CHUNK_LAZY_ACK;
		/* latency-bound: the next operation's message is likely
		 * microseconds away; the transport polls for it
		 * (transport.h) */
		s->hdr.flags |= R2_CHUNK_POLL;
		/* which piece: 0 of 0 from a daemon before the pieces */
		s->hdr.chunk = np > 1 ? (uint32_t)np << 16 | (uint32_t)k : 0;
		s->peer = c->hosts[h].id;
		e.send[i] = s;
		e.nsend++;
		if ((r = post(&e, s)) < 0)
			goto out;
		if (k == 0 && s->posted) /* what I owed h for earlier collectives is paid */
			rl_acks_implied(c, (uint32_t)h, opseq);
	}
	t_posted = r2_now_us();
	if (mismatch < 0) {
		r = mismatch;
		goto out;
	}
	r = run(&e, t0 + (uint64_t)r2_param_int(&c->d->params, P_OP_TIMEOUT_MS) * 1000);
	for (int k = 0; r == 0 && k < np; k++) {
		uint64_t off, len;
		piece(size, e.es, np, k, &off, &len);
		for (int h = 0; h < nh; h++)
			in[h] = h == me ? (const char *)mybuf + off : e.got[h * np + k]->cqe.buf;
		/* AVG sums here; exec_hier divides once, as after the rail
		 * phase. A large piece on the engine's threads where the host
		 * has them (element by element in host order either way) */
		struct r2_pool *pool = rl_par_pool(c->d, len);
		if (pool)
			r2_local_reduce(pool, (char *)W + off, (void *const *)in, nh, len / e.es,
					dtype, redop);
		else
			r = r2_reduce((char *)W + off, in, nh, len / e.es, dtype,
				      redop == R2CCL_AVG ? R2CCL_SUM : redop, 1);
	}
	if (r == 0)
		atomic_fetch_add(&c->d->eager_ops_total, 1);
	if (r == 0)
		linger(&e);
	/* where a small operation's time goes (--log-level debug): from the
	 * dispatcher's queueing to this executor, posting (copy, and the write
	 * when the transport does it inline), the last message in the mailbox
	 * (the rails thread) and taken from it, the end */
	log_debug("communicator %u: op %llu, %llu bytes eager to %d hosts (%d pieces each): "
		  "queued->start %lld us, "
		  "posted +%lld, last in +%lld, taken +%lld, end +%lld us (start at %llu)", c->id,
		  (unsigned long long)opseq, (unsigned long long)size, nh - 1, np,
		  (long long)(t0 - x->ops[0]->submitted_us), (long long)(t_posted - t0),
		  e.t_in ? (long long)(e.t_in - t0) : -1LL,
		  e.t_take ? (long long)(e.t_take - t0) : -1LL, (long long)(r2_now_us() - t0),
		  (unsigned long long)t0);
out:
	if (r < 0 && r != R2CCL_E_SHUTDOWN)
		log_warn("communicator %u: eager operation %llu failed: %s (%d of %d messages in, "
			 "%d of %d acknowledged)", c->id, (unsigned long long)opseq,
			 r2ccl_strerror(r), e.ngot, (nh - 1) * np, e.nacked, e.nsend);
	for (int i = 0; e.send && i < nh * np; i++) {
		struct sendrec *s = e.send[i];
		if (!s)
			continue;
		if (s->posted && !s->sent)
			rl_orphan(s); /* freed at its send completion */
		else
			rl_sendrec_free(s);
	}
	for (int i = 0; e.got && i < nh * np; i++)
		if (e.got[i])
			rl_rmsg_free(c->d, e.got[i]);
	free(e.send);
	free(e.got);
	free(e.det.nacked);
	return r;
}
