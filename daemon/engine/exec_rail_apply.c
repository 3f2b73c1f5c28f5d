/* SPDX-License-Identifier: MIT */
/*
 * Applying received chunks into W: the seen set (each once), the apply
 * queue, relaying as a bridge, and acknowledgements of this host's sends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "net/tenants.h"
#include "reduce.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* chunks from this size are applied on the apply queue (when the daemon
 * has one): the executor goes on with the next while they are reduced or
 * copied */
#define APPLY_ASYNC_MIN (64u << 10)
/* but not those of an operation of up to R2_LAZY_OP_MAX (1 MiB): bound by
 * latency, it waits for each step's chunks, and the queue's two hand-offs
 * (an apply thread's wake-up, then the executor's for R2_RMSG_APPLIED) cost
 * more than applying them here. 2 namespace hosts of the 2-core VM, 1 MB
 * (512 KiB a rail), apply_threads 2, three rounds: p50 892/830/789 ->
 * 839/728/646 us, the machine's CPU per operation -13% to -21%
 * (docs/benchmarks.md, "Latency-bound operations apply inline") */
#define APPLY_INLINE_OP_MAX R2_LAZY_OP_MAX

bool rl_in_range(uint64_t off, uint64_t len, uint64_t base, uint64_t size)
{
	return off >= base && len <= size && off - base <= size - len;
}

static bool seen(const struct rail_dedup *dd, uint32_t src, uint64_t off)
{
	for (size_t i = 0; i < dd->nseen; i++)
		if (dd->seen[i].src == src && dd->seen[i].off == off)
			return true;
	return false;
}

static int mark_seen(struct rail_dedup *dd, uint32_t src, uint64_t off)
{
	if (R2_GROW(dd->seen, dd->capseen, dd->nseen, 256) < 0)
		return -ENOMEM;
	dd->seen[dd->nseen].src = src;
	dd->seen[dd->nseen].off = off;
	dd->nseen++;
	return 0;
}

/* W[off, off+len) gets the chunk b: reduced with what W holds (kind
 * REDUCE), or with a (the lazy input S) when a is set, or copied (kind
 * COPY). pool: split over the helper pool (NULL: this thread alone). */
static void apply_bytes(struct r2_pool *pool, int kind, void *dst, const void *a, const void *b,
			uint64_t len, r2ccl_dtype_t dt, r2ccl_redop_t op)
{
	size_t count = len / r2ccl_dtype_size(dt);
	r2ccl_redop_t op1 = op == R2CCL_AVG ? R2CCL_SUM : op;

	if (kind == R2_XFER_REDUCE) {
		void *in[2] = { (void *)(a ? a : dst), (void *)b };
		if (pool)
			r2_local_reduce(pool, dst, in, 2, count, dt, op);
		else if (a)
			r2_reduce(dst, (const void *const *)in, 2, count, dt, op1, 1);
		else
			r2_reduce_acc(dst, b, count, dt, op1);
	} else if (pool) {
		r2_local_copy(pool, dst, b, len);
	} else {
		memcpy(dst, b, len);
	}
}

/* A chunk of the apply queue: applied by one of its threads, then back in
 * the communicator's mailbox as R2_RMSG_APPLIED (the executor does the
 * bookkeeping, rl_applied()). After that push the job touches nothing: the
 * operation may have ended. */
struct apply_job {
	struct r2_work w;
	struct r2_comm *c;
	struct r2_rmsg *m;
	void *dst;
	const void *a;
	int kind;
	r2ccl_dtype_t dtype;
	r2ccl_redop_t redop;
	uint32_t delay_us; /* testing: inject_apply_delay_us */
};

static void apply_run(struct r2_work *w)
{
	struct apply_job *j = (struct apply_job *)w;
	struct r2_comm *c = j->c;
	struct r2_rmsg *m = j->m;

	const void *a = j->a;
	void *snap = NULL;

	if (j->delay_us && j->kind == R2_XFER_REDUCE &&
	    (snap = malloc(m->cqe.hdr.len ? m->cqe.hdr.len : 1))) {
		/* testing: W read, the wait, then written: a chunk of these
		 * bytes applied meanwhile (what the busy set must prevent) is
		 * lost, every time */
		memcpy(snap, a ? a : j->dst, m->cqe.hdr.len);
		a = snap;
	}
	if (j->delay_us)
		usleep(j->delay_us);
	apply_bytes(NULL, j->kind, j->dst, a, m->cqe.buf, m->cqe.hdr.len, j->dtype, j->redop);
	free(snap);
	free(j);
	m->cqe.type = R2_RMSG_APPLIED;
	rl_mbox_append(c, m, true);
}

/* Waits until the apply queue holds no chunk of this communicator (their
 * R2_RMSG_APPLIED messages may still be in the mailbox). */
void rl_apply_drain(struct railop *o)
{
	struct r2_comm *c = o->c;

	pthread_mutex_lock(&c->mbox_lock);
	while (c->apply_inflight > 0)
		pthread_cond_wait(&c->mbox_cond, &c->mbox_lock);
	pthread_mutex_unlock(&c->mbox_lock);
	o->aq.nbusy = 0;
}

bool rl_busy_overlaps(const struct rail_applyq *aq, uint64_t off, uint64_t len)
{
	for (size_t i = 0; i < aq->nbusy; i++)
		if (aq->busy[i].off < off + len && off < aq->busy[i].off + aq->busy[i].len)
			return true;
	return false;
}

int rl_busy_add(struct rail_applyq *aq, uint64_t off, uint64_t len, const void *key)
{
	if (R2_GROW(aq->busy, aq->capbusy, aq->nbusy, 64) < 0)
		return -ENOMEM;
	aq->busy[aq->nbusy].off = off;
	aq->busy[aq->nbusy].len = len;
	aq->busy[aq->nbusy].key = key;
	aq->nbusy++;
	return 0;
}

/* By key, not by (off, len): after a drain (nbusy 0) a later job of the
 * same bytes from another peer is queued while the first one's message is
 * still in the mailbox; matched by its bytes, that message ended the later
 * job's entry, and a third chunk of those bytes then ran beside it on the
 * queue's other thread: a lost sum (8 hosts, one NIC down, 2026-12-05) */
void rl_busy_done(struct rail_applyq *aq, const void *key)
{
	for (size_t i = 0; i < aq->nbusy; i++) {
		if (aq->busy[i].key == key) {
			aq->busy[i] = aq->busy[--aq->nbusy];
			return;
		}
	}
}

/* The chunk h is in W: what waited for it may go (the next step's sends
 * from there, its copy back to the GPU). */
static void applied_mark(struct railop *o, const struct r2_chunk_hdr *h)
{
	for (size_t i = 0; i < o->nrcv; i++) {
		struct rpend *q = &o->rcv[i];
		if (q->src != h->src || q->off >= h->off + h->len || h->off >= q->off + q->len)
			continue;
		/* the sender's chunks of a transfer are disjoint, each applied
		 * once: their overlaps with q add up to q's length */
		q->got += R2_MIN(q->off + q->len, h->off + h->len) - R2_MAX(q->off, h->off);
		q->done = q->got >= q->len;
	}
	o->applied_since = true;
	rl_stage_final(o, h->src, h->step, h->off, h->len);
}

/* An R2_RMSG_APPLIED message: the queue applied the chunk. One of an
 * operation that failed before is only freed. */
void rl_applied(struct railop *o, const struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;

	if (h->opseq != o->opseq)
		return;
	rl_busy_done(&o->aq, m);
	applied_mark(o, h);
	if (h->step == o->step)
		o->aq.async_got += h->len;
}

/* Queues the chunk m for [off, off+len) of W: true when queued (m is the
 * job's now), false to apply it here. */
static bool apply_queue(struct railop *o, struct r2_rmsg *m, int kind, const void *a)
{
	struct r2_workq *q = r2d_engine_applyq(o->d);
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	struct apply_job *j;

	if (!q || h->len < APPLY_ASYNC_MIN || o->size <= APPLY_INLINE_OP_MAX)
		return false;
	if (!(j = calloc(1, sizeof(*j))))
		return false;
	if (rl_busy_add(&o->aq, h->off, h->len, m) < 0) {
		free(j);
		return false;
	}
	/* first: rl_tenant sets o->weight, read in the initializer below */
	uint32_t owner = (uint32_t)rl_tenant(o) + 1;
	*j = (struct apply_job){ .w.fn = apply_run, .w.owner = owner, .w.weight = o->weight,
				 .w.cost = h->len, .c = o->c,
				 .m = m, .dst = o->W + h->off, .a = a, .kind = kind,
				 .dtype = o->dtype, .redop = o->redop,
				 .delay_us = (uint32_t)r2_param_int(&o->d->params,
								    P_INJECT_APPLY_DELAY_US) };
	pthread_mutex_lock(&o->c->mbox_lock);
	o->c->apply_inflight++;
	pthread_mutex_unlock(&o->c->mbox_lock);
	o->prof.queued++;
	atomic_fetch_add(&o->d->chunks_applyq_total, 1);
	r2_workq_submit(q, &j->w);
	return true;
}

/* Applies one chunk of the current step (m, a received message); returns
 * bytes rl_applied (0: a duplicate, or queued: *taken then says m belongs to
 * the apply queue, and rl_applied() counts its bytes when it is back). */
uint64_t rl_apply(struct railop *o, struct r2_rmsg *m, int nx, bool *taken)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	const void *buf = m->cqe.buf;
	const struct r2_xfer *x = NULL;

	*taken = false;
	if (seen(&o->dedup, h->src, h->off)) {
		atomic_fetch_add(&o->d->chunks_dup_dropped, 1);
		log_debug("communicator %u: chunk (op %llu step %u from host %u offset %llu) "
			  "delivered twice: applied once",
			  o->c->id, (unsigned long long)h->opseq, h->step, h->src,
			  (unsigned long long)h->off);
		return 0; /* delivered twice: applied once */
	}
	/* lazy: paid by my next collective's descriptor to its sender (a
	 * second copy is a test's duplicate, or went again unflagged) */
	rl_ack_owe(o->c, m);
	for (int i = 0; i < nx; i++) {
		const struct r2_xfer *y = &o->xf[i];
		if (y->dir == R2_XFER_RECV && y->peer == h->src &&
		    rl_in_range(h->off, h->len, y->off, y->len)) {
			x = y;
			break;
		}
	}
	if (!x || !rl_in_range(h->off, h->len, 0, o->size) || h->len % o->elem) {
		log_warn("communicator %u: unexpected chunk (op %llu step %u from host %u, "
			 "offset %llu, %u bytes); dropped",
			 o->c->id, (unsigned long long)h->opseq, h->step, h->src,
			 (unsigned long long)h->off, h->len);
		return 0;
	}
	if (mark_seen(&o->dedup, h->src, h->off) < 0)
		return 0;
	int r = rl_before_write(o, h->off, h->len);
	if (r == 0)
		r = rl_stage_wait(o, o->W + h->off, h->len);
	if (r == 0 && o->in.S)
		r = rl_stage_wait(o, o->in.S + h->off, h->len);
	int cov = rl_init_cov(&o->in, h->off, h->off + h->len);
	if (r == 0 && x->kind == R2_XFER_REDUCE && cov == 1)
		r = rl_init_fill(o, h->off, h->off + h->len);
	if (r == 0)
		r = rl_init_mark(&o->in, h->off, h->off + h->len);
	if (r < 0) {
		o->err = r;
		return 0;
	}
	/* lazy input: the first reduction into a region reads S */
	const void *a = x->kind == R2_XFER_REDUCE && cov == 0 ? o->in.S + h->off : NULL;
	/* two chunks into one region (a plan where several peers reduce into
	 * it in one step, chunks cut unequally by the fault-aware shares): the
	 * second waits until the queue has applied the first, queued or not;
	 * else both read W[off] and one sum is lost */
	if (rl_busy_overlaps(&o->aq, h->off, h->len))
		rl_apply_drain(o);
	if (apply_queue(o, m, x->kind, a)) {
		*taken = true;
		return 0;
	}
	uint64_t t_apply = r2_now_us();
	apply_bytes(rl_par_pool(o->d, h->len), x->kind, o->W + h->off, a, buf, h->len, o->dtype,
		    o->redop);
	o->prof.apply_us += r2_now_us() - t_apply;
	applied_mark(o, h);
	return h->len;
}

/* A bridge host: a chunk of the current step from h->src for h->dst (the
 * planner's R2_XFER_RELAY entry) goes on to its destination, on the entry's
 * outgoing rail (or any, post_any), from a copy the bridge keeps until the
 * destination acknowledges it (the source already had the bridge's ACK), so
 * a failure of the second hop re-sends it too. Each chunk is forwarded
 * once; returns the bytes forwarded (0: a duplicate or not expected). */
uint64_t rl_relay(struct railop *o, const struct r2_chunk_hdr *h, const void *buf, int nx)
{
	struct r2_comm *c = o->c;
	const struct r2_xfer *x = NULL;
	struct sendrec *s;
	int r;

	for (size_t i = 0; i < o->dedup.nrseen; i++)
		if (o->dedup.rseen[i].src == h->src && o->dedup.rseen[i].dst == h->dst &&
		    o->dedup.rseen[i].off == h->off)
			return 0; /* delivered twice: forwarded once */
	for (int i = 0; i < nx; i++) {
		const struct r2_xfer *y = &o->xf[i];
		if (y->dir == R2_XFER_RELAY && y->peer == h->src && y->via == h->dst &&
		    rl_in_range(h->off, h->len, y->off, y->len)) {
			x = y;
			break;
		}
	}
	if (!x || h->dst >= (uint32_t)c->nhosts) {
		log_warn("communicator %u: unexpected chunk to rl_relay (op %llu step %u, host %u to "
			 "%u, offset %llu); dropped",
			 c->id, (unsigned long long)h->opseq, h->step, h->src, h->dst,
			 (unsigned long long)h->off);
		return 0;
	}
	if (R2_GROW(o->dedup.rseen, o->dedup.caprseen, o->dedup.nrseen, 64) < 0)
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->buf = malloc(h->len ? h->len : 1))) {
		free(s);
		return 0; /* the source re-sends nothing (acknowledged): fails by timeout */
	}
	o->dedup.rseen[o->dedup.nrseen].src = h->src;
	o->dedup.rseen[o->dedup.nrseen].dst = h->dst;
	o->dedup.rseen[o->dedup.nrseen].off = h->off;
	o->dedup.nrseen++;
	memcpy(s->buf, buf, h->len);
	s->hdr = *h;
	s->hdr.kind = R2_MSG_DATA;
	s->rail = x->rail2;
	s->peer = c->hosts[h->dst].id;
	rl_sends_add(&o->tx, s);
	r = rl_post(o, s);
	if (r < 0 && !s->posted)
		o->tx.need_repost = true; /* queue full or no connection this instant: rl_repost() retries */
	{
		static atomic_uint_fast64_t relayed;
		uint64_t n = atomic_fetch_add(&relayed, 1) + 1;
		if (n == 1 || n % 10000 == 0)
			log_info("communicator %u: bridge for host %u -> %u: %llu chunks relayed "
				 "so far", c->id, h->src, h->dst, (unsigned long long)n);
	}
	return h->len;
}

/* *pp (a send of o) is acknowledged */
static void acked(struct railop *o, struct sendrec **pp)
{
	struct sendrec *s = *pp;

	s->acked = true;
	/* written (its completion came), or not in any transport: reset to
	 * go again after its connection failed, its copy having arrived after
	 * all (no completion will come for it, and wait_acks would wait for
	 * it to the timeout) */
	if (s->sent || !s->posted)
		rl_sends_free(&o->tx, pp);
}

void rl_ack(struct railop *o, const struct r2_chunk_hdr *h)
{
	for (struct sendrec **pp = &o->tx.sends; *pp; pp = &(*pp)->next) {
		struct sendrec *s = *pp;
		if (s->hdr.opseq == h->opseq && s->hdr.step == h->step && s->hdr.off == h->off &&
		    s->hdr.dst == h->dst && s->hdr.src == h->src && !s->acked) {
			acked(o, pp);
			return;
		}
	}
}

void rl_ack_implied_op(struct railop *o, uint32_t host)
{
	for (struct sendrec **pp = &o->tx.sends; *pp;) {
		struct sendrec *s = *pp;
		if (!rl_lazy_unanswered(s) || s->hdr.dst != host) {
			pp = &s->next;
			continue;
		}
		atomic_fetch_add(&o->d->acks_implied_total, 1);
		acked(o, pp);
		if (*pp == s) /* kept for its send completion */
			pp = &s->next;
	}
}
