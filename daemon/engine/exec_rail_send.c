/* SPDX-License-Identifier: MIT */
/*
 * Sending chunks: their records and proxy buffers, posting on a rail,
 * re-posting after a failure, and their send completions.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/bufpool.h"
#include "net/detour.h"
#include "log.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* Chunks from this size are copied or reduced by the helper pool too, on
 * hosts with cores to spare (PAR_MIN_THREADS helpers or more): it takes work
 * off the executor thread there, and only costs where cores are few
 * (docs/architecture.md, Threads of r2ccld, has the figures). */
#define PAR_BYTES (512u << 10)
#define PAR_MIN_THREADS 4

struct r2_pool *rl_par_pool(struct r2d *d, uint64_t len)
{
	struct r2_pool *p = len >= PAR_BYTES ? r2d_engine_pool(d) : NULL;

	return p && r2_pool_threads(p) >= PAR_MIN_THREADS ? p : NULL;
}

void rl_sendrec_free(struct sendrec *s)
{
	if (s->proxy_t)
		r2d_tenants_proxy_give(s->proxy_d, s->proxy_t - 1, s->proxy_bytes);
	if (s->pool && !s->borrowed)
		r2_bufpool_put(s->pool, s->buf);
	else if (!s->borrowed)
		free(s->buf);
	free(s);
}

/* s->buf: a proxy buffer of s's rail (or the heap when the daemon has no
 * pool) holding a copy of [src, src+len): the sender keeps it until the
 * chunk is acknowledged, and a failover re-sends it from there. -ENOBUFS
 * when the pool is exhausted (its cap reached): try again after acks. */
int rl_chunk_buf(struct r2d *d, struct sendrec *s, const void *src, uint64_t len)
{
	struct r2_bufpool *bp = r2d_bufpool_for(d, s->rail);
	struct r2_pool *pool;
	int err;

	if (bp && len <= r2_bufpool_buf_size(bp)) {
		uint32_t bytes = (uint32_t)r2_bufpool_buf_size(bp);
		/* the tenant's max_proxy: at it, wait for its own buffers (acks) */
		if (!r2d_tenants_proxy_take(d, s->tenant, bytes))
			return -ENOBUFS;
		/* a buffer another tenant used: its tail cleared (bufpool.h) */
		s->buf = r2_bufpool_get_for(bp, 0, (uint16_t)(s->tenant + 1), len, &err);
		if (!s->buf) {
			r2d_tenants_proxy_give(d, s->tenant, bytes);
			return err;
		}
		s->pool = bp;
		s->proxy_t = s->tenant >= 0 ? s->tenant + 1 : 0;
		s->proxy_bytes = bytes;
		s->proxy_d = d;
	} else {
		s->buf = malloc(len ? len : 1);
		if (!s->buf)
			return -ENOMEM;
	}
	if ((pool = rl_par_pool(d, len)))
		r2_local_copy(pool, s->buf, src, len);
	else
		memcpy(s->buf, src, len);
	return 0;
}

/* A chunk sent from W gets its own copy (a proxy buffer, else the heap),
 * before W changes under it or before it goes on a rail that cannot send
 * from W. Only while no transport holds it (not posted, or its send
 * completed). */
int rl_unborrow(struct r2d *d, struct sendrec *s)
{
	void *src = s->buf;
	int r;

	if (!s->borrowed)
		return 0;
	s->borrowed = false;
	r = rl_chunk_buf(d, s, src, s->hdr.len);
	if (r == -ENOBUFS) { /* no proxy buffer free: the heap (no waiting here) */
		s->pool = NULL;
		s->buf = malloc(s->hdr.len ? s->hdr.len : 1);
		r = s->buf ? 0 : -ENOMEM;
		if (s->buf)
			memcpy(s->buf, src, s->hdr.len);
	}
	if (r < 0) {
		s->buf = src;
		s->borrowed = true;
		return r;
	}
	s->stable = false;
	return 0;
}
/* Posts s on its planned rail if health has nothing against it, else on
 * another healthy rail to the same peer (spread by offset), else on any
 * connected rail; through its tenant's queue of that rail (net/tenants.h:
 * the chunk waits there for its turn, "posted" for us). */
int rl_post_any(struct r2d *d, struct sendrec *s)
{
	struct r2_rails *rs = d->rails;
	uint32_t bad = r2d_rails_bad(d, s->peer);
	int n = rs ? rs->n : 0, r = -ENOTCONN;

	if (s->again_us && r2_now_us() < s->again_us)
		return -EAGAIN; /* refused busy a moment ago (rl_nack_defer) */
	if (s->rail >= 0 && s->rail < n && !(bad & (1u << s->rail))) {
		if (s->borrowed && !r2d_rails_zero_copy(d, s->rail) && rl_unborrow(d, s) < 0)
			return -ENOMEM;
		r = r2d_rails_send_tenant(d, s->rail, s->peer, &s->hdr, s->buf,
					  (uint64_t)(uintptr_t)s, s->tenant, &s->rail);
	}
	if (r == 0 || r == -EAGAIN) {
		if (r == 0) {
			s->posted = true;
			s->posts += s->posts < UINT8_MAX;
		}
		return r;
	}
	for (int pass = 0; pass < 2; pass++) {
		int first = n ? (int)((((s->hdr.off ^ ((uint64_t)s->hdr.step << 40)) *
					   0x9E3779B97F4A7C15ull) >> 33) % (uint64_t)n) : 0;
		for (int k = 0; k < n; k++) {
			int i = (first + k) % n;
			if (i == s->rail && pass == 0)
				continue;
			if (((bad >> i) & 1) != (uint32_t)pass)
				continue;
			if (s->borrowed && !r2d_rails_zero_copy(d, i) && rl_unborrow(d, s) < 0)
				return -ENOMEM;
			int was = s->rail;
			s->rail = i; /* before: the scheduler may move it on at once */
			int q = r2d_rails_send_tenant(d, i, s->peer, &s->hdr, s->buf,
						      (uint64_t)(uintptr_t)s, s->tenant, &s->rail);
			if (q == 0) {
				s->posted = true;
				s->posts += s->posts < UINT8_MAX;
				return 0;
			}
			s->rail = was;
			if (q != -ENOTCONN)
				r = q;
		}
	}
	return r;
}

int rl_tenant(struct railop *o)
{
	if (!o->tenant1) { /* looked up once per operation */
		struct r2_tenant_policy p;
		o->tenant1 = r2d_tenants_of(o->d, o->c->tenant) + 1;
		o->weight = r2d_tenants_policy_at(o->d, o->tenant1 - 1, &p) ? p.weight : 1;
	}
	return o->tenant1 - 1;
}

/* The chunk goes to its peer on any rail; with no connection to the peer
 * left, a direct chunk goes through a bridge (detour.h). Written inline
 * (tcp: a message of up to 64 KiB to an idle stream), its send completion
 * comes back on this thread (the executor, holding no lock), to this
 * communicator's mailbox: no wake-up of the rails thread. */
int rl_post(struct railop *o, struct sendrec *s)
{
	r2d_rails_own_sends(true);
	int r = rl_post_via(o->c, &o->det, s, o->opseq);
	r2d_rails_own_sends(false);
	return r;
}

int rl_post_via(struct r2_comm *c, struct rail_detours *det, struct sendrec *s, uint64_t opseq)
{
	int r;

	s->via = 0; /* direct when a rail is back */
	s->hdr.flags &= (uint16_t)~R2_CHUNK_DETOUR;
	if (s->posts) /* again: its receiver answers at once (exec_rail_ack.c) */
		s->hdr.flags &= (uint16_t)~R2_CHUNK_LAZY_ACK;
	r = rl_post_any(c->d, s);
	if (r != -ENOTCONN)
		return r;
	/* through a bridge: answered at once, there and if it goes direct
	 * later (its receiver may have the bridged copy) */
	s->hdr.flags &= (uint16_t)~R2_CHUNK_LAZY_ACK;
	return rl_detour_send(c, det, s, opseq);
}

/* Testing (inject_dup = N): a copy of every Nth chunk goes out as well; the
 * receiver must apply it once. Its completion frees it (orphan). */
void rl_inject_dup(struct r2d *d, const struct sendrec *s)
{
	static atomic_uint_fast64_t n;
	int64_t every = r2_param_int(&d->params, P_INJECT_DUP);
	struct sendrec *dup;

	if (!every || (atomic_fetch_add(&n, 1) + 1) % (uint64_t)every)
		return;
	dup = calloc(1, sizeof(*dup));
	if (!dup)
		return;
	dup->rail = s->rail;
	if (rl_chunk_buf(d, dup, s->buf, s->hdr.len) < 0) {
		free(dup);
		return; /* no buffer free: no duplicate this time */
	}
	dup->hdr = s->hdr;
	dup->peer = s->peer;
	dup->orphan = true;
	if (r2d_rails_send(d, dup->rail, dup->peer, &dup->hdr, dup->buf,
			   (uint64_t)(uintptr_t)dup) < 0)
		rl_sendrec_free(dup);
}

void rl_sends_add(struct rail_tx *tx, struct sendrec *s)
{
	s->next = NULL;
	*tx->sends_tail = s;
	tx->sends_tail = &s->next;
	tx->nsends++;
}

/* Unlinks *pp (a sendrec of tx->sends) and frees it. */
void rl_sends_free(struct rail_tx *tx, struct sendrec **pp)
{
	struct sendrec *s = *pp;

	*pp = s->next;
	if (!s->next)
		tx->sends_tail = pp;
	rl_sendrec_free(s);
	tx->nsends--;
}

/* The host a chunk of transfer x goes to first: the bridge when bridged
 * (the header names the destination, the bridge forwards: rl_relay()). */
static uint64_t next_hop(const struct r2_comm *c, const struct r2_xfer *x)
{
	return c->hosts[x->via != R2_NO_HOST && x->via < (uint32_t)c->nhosts ? x->via : x->peer].id;
}

/* Posts one chunk [off, off+len) of transfer x (a copy: the sender keeps it
 * until acknowledged). */
static int send_chunk(struct railop *o, const struct r2_xfer *x, uint64_t off, uint64_t len,
		      uint32_t step)
{
	struct r2_comm *c = o->c;
	struct sendrec *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->rail = x->rail;
	s->tenant = rl_tenant(o);
	/* lazy input: a region W does not hold yet is read from S */
	const char *src = o->W + off;
	int cov = rl_init_cov(&o->in, off, off + len);
	if (cov == 0) {
		src = o->in.S + off;
		s->stable = true;
	} else if (cov == 1 && (r = rl_init_fill(o, off, off + len)) < 0) {
		free(s);
		return r;
	}
	if ((r = rl_stage_wait(o, src, len)) < 0) {
		free(s);
		return r;
	}
	if (r2d_rails_zero_copy(o->d, s->rail)) {
		s->buf = (void *)src;
		s->borrowed = true;
		r = 0;
	} else {
		s->stable = false;
		r = rl_chunk_buf(o->d, s, src, len);
	}
	if (r < 0) {
		free(s);
		return r; /* -ENOBUFS: the caller waits for acknowledgements */
	}
	s->hdr.magic = R2_CHUNK_MAGIC;
	s->hdr.kind = R2_MSG_DATA;
	s->hdr.comm = c->key;
	s->hdr.opseq = o->opseq;
	s->hdr.step = step;
	s->hdr.src = (uint32_t)c->my_host;
	s->hdr.dst = x->peer;
	s->hdr.off = off;
	s->hdr.len = (uint32_t)len;
	/* a small AllReduce's last step, direct: the receiver's next
	 * collective acknowledges it (exec_rail_ack.c); it lingers past the
	 * operation (end_sends) */
	if (o->lazy_last && step + 1 == o->plan->nsteps && x->via == R2_NO_HOST)
		s->hdr.flags |= R2_CHUNK_LAZY_ACK;
	s->rail = x->rail;
	/* bridged: to the bridge host on the first hop's rail */
	s->peer = next_hop(c, x);
	s->post_us = r2_now_us();
	rl_sends_add(&o->tx, s);
	r = rl_post(o, s);
	if (r < 0 && r != -EAGAIN && r != -ENOTCONN)
		return r;
	/* the queue full, or no connection and no bridge this instant (every
	 * rail to the peer reconnecting): again shortly, as rl_repost does,
	 * not at the next step; peer_lost, the peer timeout and the deadline
	 * bound the wait */
	if (r == -EAGAIN || r == -ENOTCONN)
		o->tx.need_repost = true;
	if (r == 0)
		rl_inject_dup(o->d, s);
	return 0;
}

/* step_order. Rails to different peers share the NIC: in a log-step plan
 * a host that runs late posts step k + 1's chunks while step k's are on
 * the wire, and the peer of step k, waiting, would get them at half the
 * rate. o->tx.holds: the (rail, next hop) pairs of this operation's chunks
 * of steps before `step`, unacknowledged and posted less than their time at
 * cost_nic_bw (+ 100 us) ago, once each (rl_send_ready passes over the
 * sends at most once, at its first chunk ready, not once per chunk). */
int rl_order_scan(struct railop *o, uint32_t step, uint64_t now)
{
	struct rail_tx *tx = &o->tx;

	tx->nholds = 0;
	for (const struct sendrec *s = tx->sends; s; s = s->next) {
		if (s->acked || !s->posted || s->hdr.opseq != o->opseq || s->hdr.step >= step ||
		    s->owner)
			continue;
		double us = o->order_bw > 0 ? (double)s->hdr.len * 1e6 / o->order_bw : 0;
		if (now >= s->post_us + (uint64_t)us + 100)
			continue;
		int rail = s->rail;
		size_t i = 0;
		while (i < tx->nholds && (tx->holds[i].rail != rail || tx->holds[i].peer != s->peer))
			i++;
		if (i < tx->nholds)
			continue;
		if (R2_GROW(tx->holds, tx->capholds, tx->nholds, 8) < 0)
			return -ENOMEM;
		tx->holds[tx->nholds].rail = rail;
		tx->holds[tx->nholds].peer = s->peer;
		tx->nholds++;
	}
	return 0;
}

/* True while x's rail carries such a chunk to another host than x's next
 * hop (the same one: one connection, in order anyway). */
bool rl_order_held(const struct railop *o, const struct r2_xfer *x)
{
	uint64_t peer = next_hop(o->c, x);

	for (size_t i = 0; i < o->tx.nholds; i++)
		if (o->tx.holds[i].rail == x->rail && o->tx.holds[i].peer != peer)
			return true;
	return false;
}

/* Posts the next step's send chunks whose bytes this step no longer awaits.
 * Without a free proxy buffer it stops there (o->tx.pool_wait set): the
 * acknowledgements of what is in flight free buffers, and the caller calls
 * again. A chunk held by step_order (rl_order_held) waits (o->tx.order_wait
 * set): the caller calls again at acknowledgements and every millisecond. */
int rl_send_ready(struct railop *o, bool all)
{
	struct r2_bufpool *blocked = NULL;
	bool scanned = false; /* step_order's holds, listed at the first chunk ready */

	o->tx.order_wait = false;
	for (size_t i = 0; i < o->nnsend; i++) {
		struct pend *p = &o->nsend[i];
		bool ready = true;
		int r;
		if (p->posted)
			continue;
		/* a receive that is done stays done: the scan goes on where it
		 * stopped the last time (rescanned from the start after every
		 * applied chunk, the scans would cost O(sends x receives)) */
		for (size_t j = p->scan; !all && ready && j < o->nrcv; j++) {
			const struct rpend *q = &o->rcv[j];
			if (!q->done && p->off < q->off + q->len && q->off < p->off + p->len) {
				ready = false;
				p->scan = (uint32_t)j;
			}
		}
		if (!ready)
			continue;
		if (o->order && !scanned) {
			if ((r = rl_order_scan(o, o->step + 1, r2_now_us())) < 0)
				return r;
			scanned = true;
		}
		if (o->order && rl_order_held(o, &o->xfn[p->xi])) {
			o->tx.order_wait = true;
			atomic_fetch_add(&o->d->order_holds_total, 1);
			continue;
		}
		r = send_chunk(o, &o->xfn[p->xi], p->off, p->len, o->step + 1);
		if (r == -ENOBUFS) {
			blocked = r2d_bufpool_for(o->d, o->xfn[p->xi].rail);
			break;
		}
		if (r < 0)
			return r;
		p->posted = true;
	}
	if (blocked && !o->tx.pool_wait) {
		r2_bufpool_note_wait(blocked, false);
		o->tx.pool_wait_since = r2_now_us();
	}
	o->tx.pool_wait = blocked;
	return 0;
}

/* The operation's deadline passed while it waited for a proxy buffer. */
int rl_pool_timeout(struct railop *o)
{
	struct r2_bufpool_stats st;
	uint64_t cap, held = r2d_tenants_proxy_use(o->d, rl_tenant(o), &cap);

	r2_bufpool_note_wait(o->tx.pool_wait, true);
	r2_bufpool_stats(o->tx.pool_wait, &st);
	log_warn("communicator %u: operation %llu waited %llu ms for a proxy buffer of %s "
		 "(%llu of %llu MiB in use, proxy_pool_max; its tenant holds %llu KiB, "
		 "max_proxy %llu KiB): giving up",
		 o->c->id, (unsigned long long)o->opseq,
		 (unsigned long long)((r2_now_us() - o->tx.pool_wait_since) / 1000), st.name,
		 (unsigned long long)(st.in_use >> 20), (unsigned long long)(st.max_bytes >> 20),
		 (unsigned long long)(held >> 10), (unsigned long long)(cap >> 10));
	return -ENOBUFS;
}

static int max_retries(struct railop *o)
{
	return (int)r2_param_int(&o->d->params, P_MAX_RETRIES);
}

int rl_repost(struct railop *o)
{
	/* (rail, peer) queues found full this pass: the chunks behind wait */
	struct { int rail; uint64_t peer; } full[32];
	int nfull = 0;

	o->tx.need_repost = false;
	o->prof.reposts++;
	for (struct sendrec *s = o->tx.sends; s; s = s->next) {
		if (s->posted || s->acked)
			continue;
		bool skip = false;
		for (int i = 0; i < nfull && !skip; i++)
			skip = full[i].rail == s->rail && full[i].peer == s->peer;
		if (skip) {
			o->tx.need_repost = true; /* behind one that did not fit: later */
			continue;
		}
		o->prof.tries++;
		if (s->retries > max_retries(o)) {
			log_warn("communicator %u: a chunk (op %llu step %u to host %u) failed %d "
				 "times; giving up",
				 o->c->id, (unsigned long long)s->hdr.opseq, s->hdr.step, s->hdr.dst,
				 s->retries);
			return R2CCL_E_NO_PATH;
		}
		int r = rl_post(o, s);
		o->prof.eagain += r == -EAGAIN;
		if (r == -EAGAIN && nfull < 32) {
			full[nfull].rail = s->rail;
			full[nfull++].peer = s->peer;
		}
		if (r == -EAGAIN || r == -ENOTCONN) {
			/* queue full, or no connection this instant (the peer may be
			 * coming back on a rail): try again shortly; peer_lost and
			 * the peer timeout bound the wait */
			o->tx.need_repost = true;
			continue;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* A chunk the transport wrote on a rail whose connection to its peer failed
 * meanwhile: the ERROR came before this completion, so its re-post did not
 * take this chunk (not written yet then), and the chunk may be lost with the
 * connection: it must go again (the receiver applies it once). Without
 * this, an executor that sees the ERROR first would wait for an ACK that
 * never comes, until op_timeout_ms (docs/resilience.md, Failover paths 1). */
bool rl_sent_on_failed(const struct r2_comm *c, const struct sendrec *s)
{
	if (s->rail < 0 || s->rail >= 32)
		return false;
	for (int h = 0; h < c->nhosts; h++)
		if (c->hosts[h].id == rl_sent_to(s))
			return (c->hosts[h].failed_rails & (1u << s->rail)) != 0;
	return false;
}

void rl_sent(struct railop *o, struct sendrec *t, int status)
{
	for (struct sendrec **pp = &o->tx.sends; *pp; pp = &(*pp)->next) {
		struct sendrec *s = *pp;
		if (s != t)
			continue;
		if ((status < 0 || rl_sent_on_failed(o->c, s) || s->nack_wait) && !s->acked) {
			/* the connection failed under it, or a bridge refused it
			 * (counted then): send it again elsewhere */
			s->posted = false;
			s->retries += !s->nack_wait;
			s->nack_wait = 0;
			o->tx.need_repost = true;
			return;
		}
		s->nack_wait = 0;
		s->sent = true;
		if (s->acked)
			rl_sends_free(&o->tx, pp);
		return;
	}
	if (rl_is_orphan(t)) {
		rl_sendrec_free(t);
	}
}
