/* SPDX-License-Identifier: MIT */
/*
 * Hierarchical collectives across hosts (BRIEF.md decision 4):
 *   local phase (reduce or gather the local ranks' buffers into one working
 *   buffer W), rail phase (the planner's schedule between the daemons, run
 *   here step by step over the rails), local phase (W back to every local
 *   rank).
 *
 * The chunk protocol (BRIEF.md decision 6): every chunk carries
 * (communicator, operation sequence, step, source, offset); the receiving
 * daemon acknowledges it as soon as it holds it (rails thread), and applies
 * it exactly once: a chunk whose (step, source, offset) was already applied
 * or staged is dropped (and acknowledged again). The sender keeps each chunk
 * until its acknowledgement, so a chunk lost with a failed connection is sent
 * again on another rail. Chunks for later steps or operations wait in a stash
 * until the executor gets there.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/bufpool.h"
#include "engine/comm.h"
#include "config.h"
#include "net/detour.h"
#include "engine/exec.h"
#include "net/health.h"
#include "log.h"
#include "planner/planner.h"
#include "net/rails.h"
#include "reduce.h"
#include "util.h"

struct r2_rmsg {
	struct r2_rmsg *next;
	int rail;
	uint64_t when_us;
	struct r2_tp_cqe cqe;
};

/* cqe.type of a received chunk the apply queue has applied, back in the
 * mailbox (no transport reports it) */
#define R2_RMSG_APPLIED 0xa0
/* chunks from this size are applied on the apply queue (when the daemon
 * has one): the executor goes on with the next while they are reduced or
 * copied */
#define APPLY_ASYNC_MIN (64u << 10)

struct sendrec {
	struct sendrec *next;
	struct r2_chunk_hdr hdr;
	void *buf;
	int rail;
	uint64_t peer;
	uint64_t via; /* 0, or the bridge it went to (detour.h): no rail to peer */
	bool posted, sent, acked;
	bool orphan; /* its operation ended first: freed at its send completion */
	void *owner; /* a transfer (struct p2pop), NULL for a collective's chunk */
	int retries;
	struct r2_bufpool *pool; /* where buf comes from (NULL: the heap) */
	/* buf points into the working buffer W (tcp_zero_copy): nothing to
	 * free; copied out (unborrow) before W changes under it */
	bool borrowed;
	/* borrowed from the caller's input S (lazy input), which does not
	 * change during the operation: never copied out */
	bool stable;
};

/* Chunks from this size are copied or reduced by the helper pool too, on
 * hosts with cores to spare: on a 32-core host the executor thread went from
 * 85% to 50% of a core; on 2 cores it only slowed the uncapped benchmark. */
#define PAR_BYTES (512u << 10)
/* Transfers from 2 x streams x this size are cut over every stream even
 * when one chunk would hold them. */
#define R2_MIN_SPLIT (64u << 10)
#define PAR_MIN_THREADS 4

static struct r2_pool *par_pool(struct r2d *d, uint64_t len)
{
	struct r2_pool *p = len >= PAR_BYTES ? r2d_engine_pool(d) : NULL;

	return p && r2_pool_threads(p) >= PAR_MIN_THREADS ? p : NULL;
}

static void sendrec_free(struct sendrec *s)
{
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
static int chunk_buf(struct r2d *d, struct sendrec *s, const void *src, uint64_t len)
{
	struct r2_bufpool *bp = r2d_bufpool_for(d, s->rail);
	struct r2_pool *pool;
	int err;

	if (bp && len <= r2_bufpool_buf_size(bp)) {
		s->buf = r2_bufpool_get(bp, 0, &err);
		if (!s->buf)
			return err;
		s->pool = bp;
	} else {
		s->buf = malloc(len ? len : 1);
		if (!s->buf)
			return -ENOMEM;
	}
	if ((pool = par_pool(d, len)))
		r2_local_copy(pool, s->buf, src, len);
	else
		memcpy(s->buf, src, len);
	return 0;
}

/* A chunk sent from W gets its own copy (a proxy buffer, else the heap),
 * before W changes under it or before it goes on a rail that cannot send
 * from W. Only while no transport holds it (not posted, or its send
 * completed). */
static int unborrow(struct r2d *d, struct sendrec *s)
{
	void *src = s->buf;
	int r;

	if (!s->borrowed)
		return 0;
	s->borrowed = false;
	r = chunk_buf(d, s, src, s->hdr.len);
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

#define P2P_BIT (1ull << 63)

/* ---- delivery (rails thread) ---- */

/* Appends m to c's mailbox; applied: m comes back from the apply queue
 * (one chunk fewer on it, counted under the same lock) */
static void mbox_append(struct r2_comm *c, struct r2_rmsg *m, bool applied)
{
	m->next = NULL;
	pthread_mutex_lock(&c->mbox_lock);
	if (c->mbox_tail)
		c->mbox_tail->next = m;
	else
		c->mbox_head = m;
	c->mbox_tail = m;
	if (applied)
		c->apply_inflight--;
	pthread_cond_signal(&c->mbox_cond);
	pthread_mutex_unlock(&c->mbox_lock);
}

static void mbox_push(struct r2_comm *c, struct r2_rmsg *m)
{
	mbox_append(c, m, false);
}

static void rmsg_free(struct r2d *d, struct r2_rmsg *m)
{
	if (m->cqe.type == R2_TPC_RECV || m->cqe.type == R2_RMSG_APPLIED)
		r2d_rails_release(d, m->rail, m->cqe.buf);
	free(m);
}

void r2d_comm_mbox_flush(struct r2_comm *c)
{
	struct r2_rmsg *m, *next;

	pthread_mutex_lock(&c->mbox_lock);
	m = c->mbox_head;
	c->mbox_head = c->mbox_tail = NULL;
	pthread_mutex_unlock(&c->mbox_lock);
	for (; m; m = next) {
		next = m->next;
		if (m->cqe.type == R2_TPC_SEND && m->cqe.ctx > 1) {
			struct sendrec *s = (struct sendrec *)(uintptr_t)m->cqe.ctx;
			if (s->orphan) {
				sendrec_free(s);
			}
		}
		rmsg_free(c->d, m);
	}
}

static bool comm_has_host(const struct r2_comm *c, uint64_t id)
{
	for (int h = 0; h < c->nhosts && c->hosts; h++)
		if (c->hosts[h].id == id)
			return true;
	return false;
}

void r2d_comm_deliver(struct r2d *d, int rail, const struct r2_tp_cqe *cqe)
{
	struct r2_rmsg *m;
	struct r2_comm *c;

	if (cqe->type == R2_TPC_SEND && cqe->ctx == 0)
		return; /* acknowledgements and heartbeats carry no record */
	if (r2d_detour_in(d, rail, cqe))
		return; /* a chunk this host forwards as a bridge, or its ACK */
	if (cqe->type == R2_TPC_ERROR)
		r2d_detour_failed(d, rail, cqe->peer);
	if (cqe->type == R2_TPC_RECV && cqe->hdr.kind == R2_MSG_DATA) {
		struct r2_chunk_hdr ack = cqe->hdr;
		struct r2_rails *rs = d->rails;
		ack.kind = R2_MSG_ACK;
		ack.len = 0;
		ack.aux = cqe->hdr.len; /* the sender's throughput monitor counts it */
		/* on the rail it came by; if that one just went, any other */
		if (r2d_rails_send(d, rail, cqe->peer, &ack, NULL, 0) < 0)
			for (int i = 0; rs && i < rs->n; i++)
				if (i != rail && r2d_rails_send(d, i, cqe->peer, &ack, NULL, 0) == 0)
					break;
	}
	if (cqe->type == R2_TPC_RECV && cqe->hdr.kind != R2_MSG_DATA &&
	    cqe->hdr.kind != R2_MSG_ACK) {
		r2d_rails_release(d, rail, cqe->buf);
		return;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		if (cqe->type == R2_TPC_RECV)
			r2d_rails_release(d, rail, cqe->buf);
		return;
	}
	m->rail = rail;
	m->cqe = *cqe;
	m->when_us = r2_now_us();
	pthread_mutex_lock(&d->lock);
	if (cqe->type == R2_TPC_ERROR || cqe->type == R2_TPC_CONN) {
		/* every communicator that spans this peer hears of it */
		for (c = d->comms; c; c = c->next) {
			if (c->state != R2_COMM_READY || !comm_has_host(c, cqe->peer))
				continue;
			struct r2_rmsg *copy = malloc(sizeof(*copy));
			if (!copy)
				continue;
			*copy = *m;
			copy->next = NULL;
			mbox_push(c, copy);
		}
		pthread_mutex_unlock(&d->lock);
		free(m);
		return;
	}
	if (cqe->type == R2_TPC_SEND) {
		struct sendrec *s = (struct sendrec *)(uintptr_t)cqe->ctx;
		c = r2d_comm_by_key(d, s->hdr.comm);
	} else {
		c = r2d_comm_by_key(d, cqe->hdr.comm);
	}
	if (c && c->state == R2_COMM_READY) {
		mbox_push(c, m);
	} else if (cqe->type == R2_TPC_RECV && cqe->hdr.kind == R2_MSG_DATA &&
		   d->norphans < 65536) {
		/* the communicator is not ready here yet: keep it for later */
		m->next = d->orphans;
		d->orphans = m;
		d->norphans++;
	} else {
		if (cqe->type == R2_TPC_SEND) {
			struct sendrec *s = (struct sendrec *)(uintptr_t)cqe->ctx;
			if (c && !s->orphan) {
				/* the communicator broke while its executor still
				 * lists this chunk (it frees or orphans it on the way
				 * out; the mailbox flush frees orphans): freeing it
				 * here crashed the executor (use after free, seen
				 * after a client was killed) */
				mbox_push(c, m);
				pthread_mutex_unlock(&d->lock);
				return;
			}
			sendrec_free(s);
		}
		rmsg_free(d, m);
	}
	pthread_mutex_unlock(&d->lock);
}

/* Moves early data for c into its mailbox (under d->lock). */
void r2d_comm_adopt_orphans(struct r2_comm *c)
{
	struct r2d *d = c->d;
	struct r2_rmsg **pp = (struct r2_rmsg **)&d->orphans;

	while (*pp) {
		struct r2_rmsg *m = *pp;
		if (m->cqe.hdr.comm == c->key) {
			*pp = m->next;
			m->next = NULL;
			d->norphans--;
			mbox_push(c, m);
			continue;
		}
		pp = &m->next;
	}
}

void r2d_orphans_free(struct r2d *d)
{
	struct r2_rmsg *m = d->orphans, *next;

	for (; m; m = next) {
		next = m->next;
		rmsg_free(d, m);
	}
	d->orphans = NULL;
	d->norphans = 0;
}

/* A connection to a peer failed on a rail: true if none is left to it.
 * (A CONN, the rail connected again, clears the rail.) */
static bool peer_lost(struct r2_comm *c, const struct r2_rmsg *m)
{
	struct r2_rails *rs = c->d->rails;
	uint32_t all = rs ? (1u << rs->n) - 1 : 0;

	for (int h = 0; h < c->nhosts; h++) {
		if (c->hosts[h].id != m->cqe.peer)
			continue;
		if (m->cqe.type == R2_TPC_CONN) {
			c->hosts[h].failed_rails &= ~(1u << m->rail);
			c->hosts[h].reset_rails &= ~(1u << m->rail);
			return false;
		}
		c->hosts[h].failed_rails |= 1u << m->rail;
		/* reset (or closed) by the peer: its daemon, not a link, is gone */
		if (m->cqe.status == -ECONNRESET)
			c->hosts[h].reset_rails |= 1u << m->rail;
		else
			c->hosts[h].reset_rails &= ~(1u << m->rail);
		return (c->hosts[h].failed_rails & all) == all;
	}
	return false;
}

/* ---- send/recv sequence numbers: one counter per (source, destination) ---- */

#define P2P_CTR_MASK 0x1fffffull

static uint64_t p2p_key(uint32_t src, uint32_t dst)
{
	return ((uint64_t)src << 32) | dst;
}

/* The pair's counter slot (executor thread only). */
static uint64_t *p2p_slot(struct r2_comm *c, uint32_t src, uint32_t dst)
{
	uint64_t key = p2p_key(src, dst);

	for (uint32_t i = 0; i < c->np2p; i++)
		if (c->p2p[i].key == key)
			return &c->p2p[i].next;
	if (c->np2p == c->capp2p) {
		uint32_t cap = c->capp2p ? c->capp2p * 2 : 16;
		void *n = realloc(c->p2p, cap * sizeof(*c->p2p));
		if (!n)
			return NULL;
		c->p2p = n;
		c->capp2p = cap;
	}
	c->p2p[c->np2p].key = key;
	c->p2p[c->np2p].next = 0;
	return &c->p2p[c->np2p++].next;
}

static uint64_t p2p_seq(uint32_t src, uint32_t dst, uint64_t ctr)
{
	return P2P_BIT | ((uint64_t)src << 42) | ((uint64_t)dst << 21) | (ctr & P2P_CTR_MASK);
}

/* A transfer chunk of a pair whose counter has moved past it: a duplicate. */
static bool p2p_old(struct r2_comm *c, uint64_t seq)
{
	uint32_t src = (uint32_t)((seq >> 42) & 0x1fffff), dst = (uint32_t)((seq >> 21) & 0x1fffff);
	uint64_t *slot = p2p_slot(c, src, dst);

	return slot && (seq & P2P_CTR_MASK) < (*slot & P2P_CTR_MASK);
}

/* ---- transfers across hosts: asynchronous, so that independent transfers
 * never wait on each other (a ring of sends and receives over several hosts
 * would deadlock if each host ran its transfers one after the other) ---- */

struct p2pop {
	struct p2pop *next;
	struct r2_exec *x;
	uint64_t seq;
	bool is_send;
	char *buf;
	uint64_t len, got;
	uint32_t peer_host;
	struct sendrec *sends;
	int nsends;
	uint64_t *seen;
	size_t nseen, capseen;
	uint64_t deadline;
	bool blocked;           /* sends wait for a proxy buffer or queue room */
	uint64_t pool_since;    /* waiting for a proxy buffer since (0: not) */
	struct r2_bufpool *pool_wait;
};

static bool p2p_is(const struct r2_rmsg *m)
{
	if (m->cqe.type == R2_TPC_SEND) {
		const struct sendrec *s = (const struct sendrec *)(uintptr_t)m->cqe.ctx;
		return s && s->owner;
	}
	return m->cqe.type == R2_TPC_RECV && (m->cqe.hdr.opseq & P2P_BIT);
}

bool r2_p2p_pending(struct r2_comm *c)
{
	return c->p2p_ops != NULL;
}

static void p2p_free(struct r2d *d, struct p2pop *p)
{
	while (p->sends) {
		struct sendrec *s = p->sends;
		p->sends = s->next;
		if (s->posted && !s->sent) {
			s->orphan = true;
			s->owner = NULL;
			continue;
		}
		sendrec_free(s);
	}
	free(p->seen);
	free(p);
}

static void p2p_finish(struct r2_comm *c, struct p2pop *p, int status)
{
	struct p2pop **pp = (struct p2pop **)&c->p2p_ops;

	for (; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	if (status < 0)
		log_warn("communicator %u: transfer %s host %u failed: %s", c->id,
			 p->is_send ? "to" : "from", p->peer_host, r2ccl_strerror(status));
	r2d_exec_complete(p->x, status);
	p2p_free(c->d, p);
}

static void p2p_check(struct r2_comm *c, struct p2pop *p)
{
	if (p->is_send ? p->nsends == 0 : p->got >= p->len)
		p2p_finish(c, p, 0);
}

static struct p2pop *p2p_find(struct r2_comm *c, uint64_t seq, bool is_send)
{
	for (struct p2pop *p = c->p2p_ops; p; p = p->next)
		if (p->seq == seq && p->is_send == is_send)
			return p;
	return NULL;
}

/* Applies a data chunk to its receive; false if it is not this one's. */
static void p2p_apply(struct r2d *d, struct p2pop *p, const struct r2_chunk_hdr *h,
		      const void *buf)
{
	for (size_t i = 0; i < p->nseen; i++) {
		if (p->seen[i] == h->off) {
			atomic_fetch_add(&d->chunks_dup_dropped, 1);
			log_debug("transfer chunk (offset %llu) delivered twice: applied once",
				  (unsigned long long)h->off);
			return; /* delivered twice: applied once */
		}
	}
	if (h->off > p->len || h->len > p->len - h->off)
		return;
	if (R2_GROW(p->seen, p->capseen, p->nseen, 64) < 0)
		return;
	p->seen[p->nseen++] = h->off;
	memcpy(p->buf + h->off, buf, h->len);
	p->got += h->len;
}

static int p2p_post(struct r2_comm *c, struct sendrec *s);
static bool sent_on_failed(const struct r2_comm *c, const struct sendrec *s);
static struct r2_rmsg *mbox_take(struct r2_comm *c, int timeout_ms);
static void inject_dup(struct r2d *d, const struct sendrec *s);

/* Handles a transfer's message; true if it was one (and m is consumed). */
static bool p2p_handle(struct r2_comm *c, struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;

	if (m->cqe.type == R2_TPC_CONN) {
		peer_lost(c, m);
		return false;
	}
	if (m->cqe.type == R2_TPC_ERROR) {
		/* a transfer's chunk that was written on that rail but not
		 * acknowledged may be lost with it: send it again */
		for (struct p2pop *p = c->p2p_ops; p; p = p->next) {
			for (struct sendrec *s = p->sends; s; s = s->next) {
				if (s->peer == m->cqe.peer && s->rail == m->rail && s->sent &&
				    !s->acked) {
					s->sent = false;
					s->posted = false;
					if (p2p_post(c, s) < 0 && !s->posted)
						s->sent = true; /* no rail now: keep waiting */
				}
			}
		}
		if (peer_lost(c, m)) {
			for (struct p2pop *p = c->p2p_ops, *next; p; p = next) {
				next = p->next;
				if (c->hosts[p->peer_host].id == m->cqe.peer)
					p2p_finish(c, p, R2CCL_E_PEER_GONE);
			}
		}
		return false; /* a collective in flight must hear of it too */
	}
	if (!p2p_is(m))
		return false;
	if (m->cqe.type == R2_TPC_SEND) {
		struct sendrec *s = (struct sendrec *)(uintptr_t)m->cqe.ctx;
		struct p2pop *p = s->owner;
		if ((m->cqe.status < 0 || sent_on_failed(c, s)) && !s->acked) {
			s->posted = false;
			if (++s->retries > (int)r2_param_int(&c->d->params, P_MAX_RETRIES) ||
			    (p2p_post(c, s) < 0 && !s->posted))
				p2p_finish(c, p, R2CCL_E_NO_PATH);
		} else {
			s->sent = true;
			if (s->acked) {
				for (struct sendrec **pp = &p->sends; *pp; pp = &(*pp)->next) {
					if (*pp == s) {
						*pp = s->next;
						break;
					}
				}
				sendrec_free(s);
				p->nsends--;
				p2p_check(c, p);
			}
		}
		free(m);
		return true;
	}
	if (h->kind == R2_MSG_ACK) {
		struct p2pop *p = p2p_find(c, h->opseq, true);
		for (struct sendrec **pp = p ? &p->sends : NULL; pp && *pp; pp = &(*pp)->next) {
			struct sendrec *s = *pp;
			if (s->hdr.off != h->off || s->acked)
				continue;
			s->acked = true;
			if (s->sent) {
				*pp = s->next;
				sendrec_free(s);
				p->nsends--;
				p2p_check(c, p);
			}
			break;
		}
		rmsg_free(c->d, m);
		return true;
	}
	/* data */
	{
		struct p2pop *p = p2p_find(c, h->opseq, false);
		if (p) {
			p2p_apply(c->d, p, h, m->cqe.buf);
			rmsg_free(c->d, m);
			p2p_check(c, p);
		} else if (!p2p_old(c, h->opseq)) {
			m->next = c->p2p_stash; /* its receive is not posted yet */
			c->p2p_stash = m;
		} else {
			rmsg_free(c->d, m);
		}
	}
	return true;
}

static int post_any(struct r2d *d, struct sendrec *s);

static int p2p_post(struct r2_comm *c, struct sendrec *s)
{
	return post_any(c->d, s);
}

/* Posts a transfer's chunks not posted yet, in order, each from a proxy
 * buffer; stops (p->blocked) when the pool is exhausted or the send queue
 * is full: r2_p2p_pump calls again. */
static int p2p_fill(struct r2_comm *c, struct p2pop *p)
{
	p->blocked = false;
	for (struct sendrec *s = p->sends; s; s = s->next) {
		int r;
		if (s->posted || s->sent || s->acked)
			continue;
		if (!s->buf) {
			r = chunk_buf(c->d, s, p->buf + s->hdr.off, s->hdr.len);
			if (r == -ENOBUFS) {
				if (!p->pool_since) {
					p->pool_since = r2_now_us();
					p->pool_wait = r2d_bufpool_for(c->d, s->rail);
					r2_bufpool_note_wait(p->pool_wait, false);
				}
				p->blocked = true;
				return 0;
			}
			if (r < 0)
				return r;
		}
		r = p2p_post(c, s);
		if (r == -EAGAIN) {
			p->blocked = true; /* the queue is full: later */
			return 0;
		}
		if (r < 0 && !s->posted)
			return R2CCL_E_NO_PATH;
		inject_dup(c->d, s);
	}
	p->pool_since = 0;
	return 0;
}

static int p2p_start(struct r2_comm *c, struct r2_exec *x, uint64_t seq, uint32_t peer_host,
		     bool is_send, char *buf, uint64_t len)
{
	struct r2_rails *rs = c->d->rails;
	uint64_t cs = (uint64_t)r2_param_int(&c->d->params, P_CHUNK_SIZE);
	struct p2pop *p;
	int i = 0, r;

	if (len == 0)
		return 0;
	if (!rs || rs->n == 0)
		return R2CCL_E_NO_PATH;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->x = x;
	p->seq = seq;
	p->is_send = is_send;
	p->buf = buf;
	p->len = len;
	p->peer_host = peer_host;
	p->deadline = r2_now_us() + (uint64_t)r2_param_int(&c->d->params, P_OP_TIMEOUT_MS) * 1000;
	p->next = c->p2p_ops;
	c->p2p_ops = p;
	if (is_send) {
		struct sendrec **tail = &p->sends;
		struct r2_bufpool *bp = r2d_bufpool_for(c->d, 0);
		if (bp && cs > r2_bufpool_buf_size(bp))
			cs = r2_bufpool_buf_size(bp);
		for (uint64_t off = 0; off < len; off += cs, i++) {
			struct sendrec *s = calloc(1, sizeof(*s));
			uint64_t n = R2_MIN(cs, len - off);
			if (!s) {
				p2p_finish(c, p, -ENOMEM);
				return R2_EXEC_PENDING;
			}
			s->hdr.magic = R2_CHUNK_MAGIC;
			s->hdr.kind = R2_MSG_DATA;
			s->hdr.comm = c->key;
			s->hdr.opseq = seq;
			s->hdr.src = (uint32_t)c->my_host;
			s->hdr.dst = peer_host;
			s->hdr.off = off;
			s->hdr.len = (uint32_t)n;
			s->rail = i % rs->n; /* spread over every rail */
			s->peer = c->hosts[peer_host].id;
			s->owner = p;
			*tail = s; /* in order: buffers are taken and posted so */
			tail = &s->next;
			p->nsends++;
		}
		r = p2p_fill(c, p);
		if (r < 0)
			p2p_finish(c, p, r);
		return R2_EXEC_PENDING;
	}
	/* a receive: what already came */
	for (struct r2_rmsg **pp = &c->p2p_stash; *pp;) {
		struct r2_rmsg *m = *pp;
		if (m->cqe.hdr.opseq == seq) {
			*pp = m->next;
			p2p_apply(c->d, p, &m->cqe.hdr, m->cqe.buf);
			rmsg_free(c->d, m);
			continue;
		}
		pp = &m->next;
	}
	p2p_check(c, p);
	return R2_EXEC_PENDING;
}

void r2_p2p_pump(struct r2_comm *c, int timeout_ms)
{
	struct r2_rmsg *m = mbox_take(c, timeout_ms);
	uint64_t now;

	for (int i = 0; m && i < 1024; i++) {
		if (!p2p_handle(c, m)) {
			if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA &&
			    m->cqe.hdr.opseq > c->coll_seq) {
				m->next = c->deferred; /* for a later collective */
				c->deferred = m;
			} else {
				if (m->cqe.type == R2_TPC_SEND) {
					struct sendrec *s = (struct sendrec *)(uintptr_t)m->cqe.ctx;
					if (s && s->orphan) {
						sendrec_free(s);
					}
				}
				rmsg_free(c->d, m);
			}
		}
		m = mbox_take(c, 0);
	}
	now = r2_now_us();
	for (struct p2pop *p = c->p2p_ops, *next; p; p = next) {
		int r = 0;
		next = p->next;
		if (c->abort_err) {
			p2p_finish(c, p, c->abort_err);
		} else if (now > p->deadline) {
			if (p->pool_since) {
				r2_bufpool_note_wait(p->pool_wait, true);
				log_warn("communicator %u: transfer to host %u waited %llu ms for a "
					 "proxy buffer (proxy_pool_max): giving up",
					 c->id, p->peer_host,
					 (unsigned long long)((now - p->pool_since) / 1000));
				r = -ENOBUFS;
			}
			p2p_finish(c, p, r ? r : -ETIMEDOUT);
		} else if (p->blocked && (r = p2p_fill(c, p)) < 0) {
			p2p_finish(c, p, r);
		}
	}
}

void r2_p2p_fail_all(struct r2_comm *c, int status)
{
	while (c->p2p_ops)
		p2p_finish(c, c->p2p_ops, status);
	while (c->p2p_stash) {
		struct r2_rmsg *m = c->p2p_stash;
		c->p2p_stash = m->next;
		rmsg_free(c->d, m);
	}
	while (c->deferred) {
		struct r2_rmsg *m = c->deferred;
		c->deferred = m->next;
		rmsg_free(c->d, m);
	}
}

/* ---- the rail phase (executor thread) ---- */

struct railop {
	struct r2_comm *c;
	struct r2d *d;
	char *W;
	uint64_t size;
	uint32_t elem;
	r2ccl_dtype_t dtype;
	r2ccl_redop_t redop;
	uint64_t opseq;
	uint32_t chunk;
	uint32_t spread; /* a transfer's chunk count is a multiple of this */
	struct r2_plan *plan;
	struct r2_xfer *xf, *xfn; /* this step's transfers and the next step's */
	size_t maxx;
	int nxn;
	uint32_t step;
	bool applied_since; /* a chunk was applied: try the next step's sends */
	/* the next step's send chunks: posted early once the bytes they read
	 * are no longer awaited in this step (chunk-level pipelining) */
	struct pend {
		uint64_t off, len;
		uint32_t xi;
		bool posted;
		uint32_t scan; /* rcv[] before this index no longer holds it back */
	} *nsend;
	size_t nnsend, capnsend;
	/* this step's expected receive chunks */
	struct rpend { uint32_t src; uint64_t off, len; bool done; } *rcv;
	size_t nrcv, caprcv;
	/* unacknowledged (or unsent), oldest first: acknowledgements come
	 * mostly in that order, and repost() posts in it */
	struct sendrec *sends, **sends_tail; /* sends_tail: the last one's next */
	int nsends;
	struct r2_rmsg *stash;
	/* applied chunks of the current step: (src, off) */
	struct { uint32_t src; uint64_t off; } *seen;
	size_t nseen, capseen;
	uint64_t deadline;
	int err;
	bool need_repost; /* a send failed or its rail went: post it again */
	/* the proxy buffer pool is exhausted: sends wait for acknowledgements */
	struct r2_bufpool *pool_wait;
	uint64_t pool_wait_since;
	struct r2_view *view; /* the agreed view this operation plans with */
	/* chunks of the current step relayed for other hosts (bridge):
	 * (src, dst, off) */
	struct { uint32_t src, dst; uint64_t off; } *rseen;
	size_t nrseen, caprseen;
	/* bridges that refused a detour (NACK): no rail to dst either */
	struct { uint32_t dst, via; } *nacked;
	size_t nnacked, capnacked;
	unsigned detoured; /* chunks sent through a bridge (logged once) */
	uint64_t step_got; /* bytes of the current step received (stuck()) */
	/* lazy input (out-of-place, one local rank): W starts as a copy of S,
	 * made piecewise only where needed; until a region of W is written,
	 * its sends read S and its first reduction reads S and writes W.
	 * init: the regions of W that hold their data, sorted, disjoint. */
	const char *S;
	struct { uint64_t a, b; } *init;
	size_t ninit, capinit;
	/* GPU buffers staged piecewise (x->stage_wait/stage_out set): every
	 * write into W of the plan, to tell when a region is final */
	struct r2_exec *x;
	/* the step's last chunk: when it reached the mailbox, from whom, on
	 * which rail (the per-step debug line) */
	uint64_t last_rx_us;
	uint32_t last_rx_src;
	int last_rx_rail;
	struct wr { uint32_t step, peer; uint64_t off, len; } *wr;
	size_t nwr, capwr;
	/* where the operation's time went (the --log-level debug line at its
	 * end): microseconds blocked on an empty mailbox, in reductions and
	 * copies of received chunks, waiting for transports to let go of W
	 * (settle), for GPU staging; messages handled; post attempts */
	struct {
		uint64_t t0, idle_us, apply_us, settle_us, stage_us;
		uint64_t data, acks, sendc, reposts, tries, eagain, queued;
		uint64_t first_rx, last_rx;
	} prof;
	/* chunks on the apply queue since the last drain: [off, off+len) of W
	 * each writes (one that overlaps waits for the queue to drain) */
	struct { uint64_t off, len; } *busy;
	size_t nbusy, capbusy;
	uint64_t async_got; /* bytes of the current step the queue applied */
};

/* ---- GPU staging (gpu/gpu.c stages the buffers piecewise) ---- */

/* Waits until host bytes [p, p+n) have come from the GPU (no-op when not
 * staged piecewise). */
static int stage_wait(struct railop *o, const void *p, uint64_t n)
{
	uint64_t t;
	int r;

	if (!o->x || !o->x->stage_wait || !p || !n)
		return 0;
	t = r2_now_us();
	r = o->x->stage_wait(o->x, p, n);
	o->prof.stage_us += r2_now_us() - t;
	return r;
}

/* Every write into W this plan makes, for stage_final (only when the
 * output goes back to the GPU piecewise). */
static int stage_plan(struct railop *o)
{
	if (!o->x || !o->x->stage_out)
		return 0;
	for (uint32_t k = 0; k < o->plan->nsteps; k++) {
		int nx = r2_plan_expand(o->plan, (uint32_t)o->c->my_host, k, o->xfn, o->maxx);
		if (nx < 0)
			return nx;
		for (int i = 0; i < nx; i++) {
			const struct r2_xfer *x = &o->xfn[i];
			if (x->dir != R2_XFER_RECV || !x->len)
				continue;
			if (R2_GROW(o->wr, o->capwr, o->nwr, 16) < 0)
				return -ENOMEM;
			o->wr[o->nwr++] = (struct wr){ k, x->peer, x->off, x->len };
		}
	}
	return 0;
}

/* A chunk from src applied at step into [off, off+len): if no later write
 * of the plan (and no other peer's in this step) touches it, it is final
 * and goes back to the GPU now, while the rail phase goes on. */
static void stage_final(struct railop *o, uint32_t src, uint32_t step, uint64_t off,
			uint64_t len)
{
	if (!o->x || !o->x->stage_out || o->redop == R2CCL_AVG)
		return; /* AVG divides W after the rail phase */
	for (size_t i = 0; i < o->nwr; i++) {
		const struct wr *w = &o->wr[i];
		if ((w->step > step || (w->step == step && w->peer != src)) && w->off < off + len &&
		    off < w->off + w->len)
			return;
	}
	o->x->stage_out(o->x, o->W + off, len);
}

/* ---- lazy input ---- */

/* How much of [a, b) W holds: 0 none, 1 part, 2 all (always 2 without S). */
static int init_cov(const struct railop *o, uint64_t a, uint64_t b)
{
	uint64_t got = 0;

	if (!o->S)
		return 2;
	for (size_t i = 0; i < o->ninit && o->init[i].a < b; i++)
		if (o->init[i].b > a)
			got += R2_MIN(o->init[i].b, b) - R2_MAX(o->init[i].a, a);
	return !got ? 0 : got < b - a ? 1 : 2;
}

/* Records that W holds [a, b) (merged into the sorted list). */
static int init_mark(struct railop *o, uint64_t a, uint64_t b)
{
	size_t i = 0, j;

	if (!o->S || a >= b)
		return 0;
	while (i < o->ninit && o->init[i].b < a)
		i++;
	j = i;
	while (j < o->ninit && o->init[j].a <= b) {
		a = R2_MIN(a, o->init[j].a);
		b = R2_MAX(b, o->init[j].b);
		j++;
	}
	if (i == j) { /* no overlap or contact: insert at i */
		if (R2_GROW(o->init, o->capinit, o->ninit, 16) < 0)
			return -ENOMEM;
		memmove(&o->init[i + 1], &o->init[i], (o->ninit - i) * sizeof(*o->init));
		o->ninit++;
	} else if (j > i + 1) { /* [i, j) merge into i */
		memmove(&o->init[i + 1], &o->init[j], (o->ninit - j) * sizeof(*o->init));
		o->ninit -= j - i - 1;
	}
	o->init[i].a = a;
	o->init[i].b = b;
	return 0;
}

/* Copies the parts of [a, b) W does not hold yet from S. */
static int init_fill(struct railop *o, uint64_t a, uint64_t b)
{
	uint64_t cur = a;
	int r;

	if (!o->S || init_cov(o, a, b) == 2)
		return 0;
	if ((r = stage_wait(o, o->S + a, b - a)) < 0 || (r = stage_wait(o, o->W + a, b - a)) < 0)
		return r;
	for (size_t i = 0; i < o->ninit && o->init[i].a < b && cur < b; i++) {
		if (o->init[i].b <= cur)
			continue;
		if (o->init[i].a > cur)
			memcpy(o->W + cur, o->S + cur, o->init[i].a - cur);
		cur = R2_MAX(cur, o->init[i].b);
	}
	if (cur < b)
		memcpy(o->W + cur, o->S + cur, b - cur);
	return init_mark(o, a, b);
}

static int build_plan(struct railop *o, enum r2_plan_op op, uint32_t root, uint32_t peer)
{
	struct r2_comm *c = o->c;
	int nrails = o->d->rails ? o->d->rails->n : 0;
	struct r2_cluster cl = { 0 };
	struct r2_opdesc od = { 0 };
	struct r2_plan_params prm;
	struct r2_nic *nics;
	int r;

	const struct r2_view *v = o->view;
	bool use_view = v && v->nhosts == (uint32_t)c->nhosts && v->nrails == (uint32_t)nrails;

	if (nrails < 1)
		return R2CCL_E_NO_PATH;
	nics = calloc((size_t)c->nhosts * (size_t)nrails, sizeof(*nics));
	if (!nics)
		return -ENOMEM;
again:
	for (int i = 0; i < c->nhosts * nrails; i++) {
		nics[i].state = R2_NIC_UP;
		nics[i].bw_tx = nics[i].bw_rx = 125e6;
		nics[i].lat = 20e-6;
		if (!use_view)
			continue;
		/* the view every daemon of the communicator agreed on for this
		 * operation (health.c): failed NICs DOWN, slow ones DEGRADED */
		if (v->down[i]) {
			nics[i].state = R2_NIC_DOWN;
			nics[i].bw_tx = nics[i].bw_rx = 0;
		} else if (v->bw[i] && (double)v->bw[i] < 125e6) {
			nics[i].state = R2_NIC_DEGRADED;
			nics[i].bw_tx = nics[i].bw_rx = (double)v->bw[i];
		}
	}
	cl.nhosts = (uint32_t)c->nhosts;
	cl.nrails = (uint32_t)nrails;
	cl.nic = nics;
	/* alpha: the per-message cost of the live rails (R2CCL_COST_ALPHA_US,
	 * fitted with r2_cost_fit; docs/planner.md) */
	cl.cost.alpha = (double)r2_param_int(&o->d->params, P_COST_ALPHA_US) * 1e-6;
	od.op = op;
	od.size = o->size;
	od.elem = o->elem;
	od.root = root;
	od.peer = peer;
	/* the communicator's mode (R2CCL_MODE or the ranks' r2ccl_comm_config_t):
	 * balance -> failure-optimized shares, hotrepair -> backup NIC */
	od.policy = c->mode == R2_MODE_HOTREPAIR ? R2_POL_HOTREPAIR : R2_POL_OURS;
	r2_plan_params_default(&prm);
	prm.recursion_thresh = r2_param_double(&o->d->params, P_RECURSION_THRESH);
	prm.routing_algo = (int)r2_param_int(&o->d->params, P_ROUTING_ALGO);
	r = r2_plan_build(&cl, &od, &prm, &o->plan);
	if (use_view && r < 0) {
		/* no plan for this view: every daemon falls back alike to the
		 * all-up plan, whose chunks on failed rails go by another rail
		 * (post_any). (Plans with bridges run: relay() below.) */
		log_debug("communicator %u: view %llu needs an impossible plan; planning with "
			  "every NIC up", c->id, (unsigned long long)v->epoch);
		if (r == 0)
			r2_plan_free(o->plan);
		o->plan = NULL;
		use_view = false;
		goto again;
	}
	free(nics);
	if (r < 0)
		return r;
	o->maxx = r2_plan_max_xfers(o->plan);
	o->xf = calloc(o->maxx ? o->maxx : 1, sizeof(*o->xf));
	o->xfn = calloc(o->maxx ? o->maxx : 1, sizeof(*o->xfn));
	return o->xf && o->xfn ? 0 : -ENOMEM;
}

/* Posts s on its planned rail if health has nothing against it, else on
 * another healthy rail to the same peer (spread by offset), else on any
 * connected rail. */
/* ---- detours (detour.h): the sender's side ---- */

static bool nacked(const struct railop *o, uint32_t dst, uint32_t via)
{
	for (size_t i = 0; i < o->nnacked; i++)
		if (o->nacked[i].dst == dst && o->nacked[i].via == via)
			return true;
	return false;
}

static int host_of(const struct r2_comm *c, uint64_t id)
{
	for (int h = 0; c->hosts && h < c->nhosts; h++)
		if (c->hosts[h].id == id)
			return h;
	return -1;
}

/* A host of the communicator (not this one, not dst, not one that refused)
 * with a connection from this host: the bridges to dst, in turn from dst + 1;
 * -1 if none. */
static int bridge_after(const struct railop *o, uint32_t dst, int k0)
{
	const struct r2_comm *c = o->c;

	for (int k = k0; k < c->nhosts; k++) {
		int h = (int)((dst + (uint32_t)k) % (uint32_t)c->nhosts);
		struct r2_peer *p;
		if (h == c->my_host || h == (int)dst || nacked(o, dst, (uint32_t)h))
			continue;
		p = r2d_rails_peer_find(o->d, c->hosts[h].id);
		if (p && p->conn_mask)
			return k;
	}
	return -1;
}

/* No rail left to peer: go on through a bridge? Not when the peer reset
 * every connection (its daemon died or restarted: nobody reaches it). */
static bool detour_possible(const struct railop *o, uint64_t peer)
{
	int dst = host_of(o->c, peer);
	struct r2_rails *rs = o->d->rails;
	uint32_t all = rs ? (1u << rs->n) - 1 : 0;

	return dst >= 0 && (o->c->hosts[dst].reset_rails & all) != all &&
	       bridge_after(o, (uint32_t)dst, 1) >= 0;
}

static int detour_post(struct railop *o, struct sendrec *s)
{
	struct r2_comm *c = o->c;
	struct r2d *d = o->d;
	uint32_t dst = s->hdr.dst;
	int n = d->rails ? d->rails->n : 0;

	/* only a chunk for its peer itself (not a planned relay's first hop) */
	if (!c->hosts || dst >= (uint32_t)c->nhosts || c->hosts[dst].id != s->peer ||
	    s->hdr.kind != R2_MSG_DATA)
		return -ENOTCONN;
	for (int k = bridge_after(o, dst, 1); k >= 0; k = bridge_after(o, dst, k + 1)) {
		uint64_t id = c->hosts[(dst + (uint32_t)k) % (uint32_t)c->nhosts].id;
		uint32_t bad = r2d_rails_bad(d, id);
		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i < n; i++) {
				if (((bad >> i) & 1) != (uint32_t)pass)
					continue;
				if (s->borrowed && !r2d_rails_zero_copy(d, i) && unborrow(d, s) < 0)
					return -ENOMEM;
				s->hdr.flags |= R2_CHUNK_DETOUR;
				if (r2d_rails_send(d, i, id, &s->hdr, s->buf,
						   (uint64_t)(uintptr_t)s) == 0) {
					s->via = id;
					s->rail = i;
					s->posted = true;
					if (!o->detoured++)
						log_warn("communicator %u: no rail left to host %u: op "
							 "%llu goes on through host %u",
							 c->id, dst, (unsigned long long)o->opseq,
							 host_of(c, id));
					return 0;
				}
				s->hdr.flags &= (uint16_t)~R2_CHUNK_DETOUR;
			}
	}
	return -ENOTCONN;
}

/* A bridge refused a chunk (no rail to its destination either): another
 * bridge, or, with none left, the destination is gone. */
static int nack(struct railop *o, const struct r2_chunk_hdr *h, uint64_t from)
{
	int via = host_of(o->c, from);
	bool busy = (h->flags & R2_CHUNK_BUSY) != 0; /* its queues full: again later */

	if (!busy && via >= 0 && !nacked(o, h->dst, (uint32_t)via) &&
	    R2_GROW(o->nacked, o->capnacked, o->nnacked, 8) == 0) {
		o->nacked[o->nnacked].dst = h->dst;
		o->nacked[o->nnacked].via = (uint32_t)via;
		o->nnacked++;
	}
	for (struct sendrec *s = o->sends; s; s = s->next)
		if (s->hdr.opseq == h->opseq && s->hdr.step == h->step && s->hdr.off == h->off &&
		    s->hdr.dst == h->dst && s->hdr.src == h->src && !s->acked && s->via == from) {
			s->posted = false;
			s->sent = false;
			s->retries += !busy;
			o->need_repost = true;
		}
	struct r2_peer *p = h->dst < (uint32_t)o->c->nhosts
				    ? r2d_rails_peer_find(o->d, o->c->hosts[h->dst].id)
				    : NULL;
	if (h->dst < (uint32_t)o->c->nhosts && bridge_after(o, h->dst, 1) < 0 &&
	    !(p && p->conn_mask)) {
		log_warn("communicator %u: host %u unreachable, directly or through any other "
			 "host", o->c->id, h->dst);
		return R2CCL_E_PEER_GONE;
	}
	return 0;
}

static int post_any(struct r2d *d, struct sendrec *s)
{
	struct r2_rails *rs = d->rails;
	uint32_t bad = r2d_rails_bad(d, s->peer);
	int n = rs ? rs->n : 0, r = -ENOTCONN;

	if (s->rail >= 0 && s->rail < n && !(bad & (1u << s->rail))) {
		if (s->borrowed && !r2d_rails_zero_copy(d, s->rail) && unborrow(d, s) < 0)
			return -ENOMEM;
		r = r2d_rails_send(d, s->rail, s->peer, &s->hdr, s->buf, (uint64_t)(uintptr_t)s);
	}
	if (r == 0 || r == -EAGAIN) {
		if (r == 0)
			s->posted = true;
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
			if (s->borrowed && !r2d_rails_zero_copy(d, i) && unborrow(d, s) < 0)
				return -ENOMEM;
			int q = r2d_rails_send(d, i, s->peer, &s->hdr, s->buf,
					       (uint64_t)(uintptr_t)s);
			if (q == 0) {
				s->rail = i;
				s->posted = true;
				return 0;
			}
			if (q != -ENOTCONN)
				r = q;
		}
	}
	return r;
}

/* The chunk goes to its peer on any rail; with no connection to the peer
 * left, a direct chunk goes through a bridge (detour.h). */
static int post(struct railop *o, struct sendrec *s)
{
	int r;

	s->via = 0;
	s->hdr.flags &= (uint16_t)~R2_CHUNK_DETOUR;
	r = post_any(o->d, s);
	if (r != -ENOTCONN)
		return r;
	return detour_post(o, s);
}

/* Testing (inject_dup = N): a copy of every Nth chunk goes out as well; the
 * receiver must apply it once. Its completion frees it (orphan). */
static void inject_dup(struct r2d *d, const struct sendrec *s)
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
	if (chunk_buf(d, dup, s->buf, s->hdr.len) < 0) {
		free(dup);
		return; /* no buffer free: no duplicate this time */
	}
	dup->hdr = s->hdr;
	dup->peer = s->peer;
	dup->orphan = true;
	if (r2d_rails_send(d, dup->rail, dup->peer, &dup->hdr, dup->buf,
			   (uint64_t)(uintptr_t)dup) < 0)
		sendrec_free(dup);
}

static void sends_add(struct railop *o, struct sendrec *s)
{
	s->next = NULL;
	*o->sends_tail = s;
	o->sends_tail = &s->next;
	o->nsends++;
}

/* Unlinks *pp (a sendrec of o->sends) and frees it. */
static void sends_free(struct railop *o, struct sendrec **pp)
{
	struct sendrec *s = *pp;

	*pp = s->next;
	if (!s->next)
		o->sends_tail = pp;
	sendrec_free(s);
	o->nsends--;
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
	/* lazy input: a region W does not hold yet is read from S */
	const char *src = o->W + off;
	int cov = init_cov(o, off, off + len);
	if (cov == 0) {
		src = o->S + off;
		s->stable = true;
	} else if (cov == 1 && (r = init_fill(o, off, off + len)) < 0) {
		free(s);
		return r;
	}
	if ((r = stage_wait(o, src, len)) < 0) {
		free(s);
		return r;
	}
	if (r2d_rails_zero_copy(o->d, s->rail)) {
		s->buf = (void *)src;
		s->borrowed = true;
		r = 0;
	} else {
		s->stable = false;
		r = chunk_buf(o->d, s, src, len);
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
	s->rail = x->rail;
	/* bridged: to the bridge host on the first hop's rail; the header
	 * names the destination, the bridge forwards (relay()) */
	s->peer = c->hosts[x->via != R2_NO_HOST && x->via < (uint32_t)c->nhosts ? x->via : x->peer].id;
	sends_add(o, s);
	r = post(o, s);
	if (r < 0 && r != -EAGAIN)
		return r == -ENOTCONN ? R2CCL_E_NO_PATH : r;
	if (r == 0)
		inject_dup(o->d, s);
	return 0;
}

/* Chunks of the step's transfers in direction dir, in send order (reversed
 * when testing with inject_dup, so receivers see them out of order).
 * A transfer is cut into equal chunks of at most o->chunk bytes, their
 * number a multiple of o->spread (the streams of a connection), so every
 * stream carries the same share of it: with unequal shares the streams that
 * finish first start on the next step's chunks while the others still carry
 * this step's, and this step ends later (one NIC down on 4 x 2: 658 ms an
 * AllReduce of 64 MB with a 1 MB chunk and its remainder on two streams,
 * 611 ms with one stream). Sender and receiver cut alike. */
static int list_chunks(struct railop *o, const struct r2_xfer *xf, int nx, int dir,
		       bool sends)
{
	bool reverse = sends && r2_param_int(&o->d->params, P_INJECT_DUP) > 0;

	if (sends)
		o->nnsend = 0;
	else
		o->nrcv = 0;
	for (int i = 0; i < nx; i++) {
		const struct r2_xfer *x = &xf[i];
		uint64_t n, E = x->len / o->elem;
		if (x->dir != dir || !x->len)
			continue;
		n = R2_DIV_UP(x->len, (uint64_t)o->chunk);
		if (n > 1 || x->len >= 2 * (uint64_t)o->spread * R2_MIN_SPLIT)
			n = R2_DIV_UP(n, o->spread) * o->spread;
		n = R2_MAX(1, R2_MIN(n, E));
		for (uint64_t j = 0; j < n; j++) {
			uint64_t jj = reverse ? n - 1 - j : j;
			uint64_t a = E * jj / n, b = E * (jj + 1) / n;
			uint64_t off = x->off + a * o->elem;
			uint64_t len = (b - a) * o->elem;
			if (sends) {
				if (R2_GROW(o->nsend, o->capnsend, o->nnsend, 64) < 0)
					return -ENOMEM;
				o->nsend[o->nnsend++] = (struct pend){ off, len, (uint32_t)i, false, 0 };
			} else {
				if (R2_GROW(o->rcv, o->caprcv, o->nrcv, 64) < 0)
					return -ENOMEM;
				o->rcv[o->nrcv++] = (struct rpend){ x->peer, off, len, false };
			}
		}
	}
	return 0;
}

/* Posts the next step's send chunks whose bytes this step no longer awaits.
 * Without a free proxy buffer it stops there (o->pool_wait set): the
 * acknowledgements of what is in flight free buffers, and the caller calls
 * again. */
static int send_ready(struct railop *o, bool all)
{
	struct r2_bufpool *blocked = NULL;

	for (size_t i = 0; i < o->nnsend; i++) {
		struct pend *p = &o->nsend[i];
		bool ready = true;
		int r;
		if (p->posted)
			continue;
		/* a receive that is done stays done: the scan goes on where it
		 * stopped the last time (from the start, every call after every
		 * applied chunk cost O(sends x receives)) */
		for (size_t j = p->scan; !all && ready && j < o->nrcv; j++) {
			const struct rpend *q = &o->rcv[j];
			if (!q->done && p->off < q->off + q->len && q->off < p->off + p->len) {
				ready = false;
				p->scan = (uint32_t)j;
			}
		}
		if (!ready)
			continue;
		r = send_chunk(o, &o->xfn[p->xi], p->off, p->len, o->step + 1);
		if (r == -ENOBUFS) {
			blocked = r2d_bufpool_for(o->d, o->xfn[p->xi].rail);
			break;
		}
		if (r < 0)
			return r;
		p->posted = true;
	}
	if (blocked && !o->pool_wait) {
		r2_bufpool_note_wait(blocked, false);
		o->pool_wait_since = r2_now_us();
	}
	o->pool_wait = blocked;
	return 0;
}

/* The operation's deadline passed while it waited for a proxy buffer. */
static int pool_timeout(struct railop *o)
{
	struct r2_bufpool_stats st;

	r2_bufpool_note_wait(o->pool_wait, true);
	r2_bufpool_stats(o->pool_wait, &st);
	log_warn("communicator %u: operation %llu waited %llu ms for a proxy buffer of %s "
		 "(%llu of %llu MiB in use, proxy_pool_max): giving up",
		 o->c->id, (unsigned long long)o->opseq,
		 (unsigned long long)((r2_now_us() - o->pool_wait_since) / 1000), st.name,
		 (unsigned long long)(st.in_use >> 20), (unsigned long long)(st.max_bytes >> 20));
	return -ENOBUFS;
}

/* ---- chunks sent from W (tcp_zero_copy) ---- */

/* Puts messages back at the head of the mailbox, in their order. */
static void mbox_unget(struct r2_comm *c, struct r2_rmsg *head, struct r2_rmsg *tail)
{
	pthread_mutex_lock(&c->mbox_lock);
	tail->next = c->mbox_head;
	c->mbox_head = head;
	if (!c->mbox_tail)
		c->mbox_tail = tail;
	pthread_mutex_unlock(&c->mbox_lock);
}

/* s's bytes overlap W[off, off+len). */
static bool overlaps(const struct sendrec *s, uint64_t off, uint64_t len)
{
	return s->hdr.off < off + len && off < s->hdr.off + s->hdr.len;
}

/* A transport may still read s->buf. */
static bool tp_holds(const struct sendrec *s)
{
	return s->posted && !s->sent && !s->acked;
}

/* A borrowed chunk overlapping [off, off+len) (len 0: any) that a transport
 * may still read. */
static struct sendrec *held_borrowed(struct railop *o, uint64_t off, uint64_t len)
{
	for (struct sendrec *s = o->sends; s; s = s->next)
		if (s->borrowed && tp_holds(s) && (!len || (!s->stable && overlaps(s, off, len))))
			return s;
	return NULL;
}

static int64_t handle(struct railop *o, struct r2_rmsg *m, uint32_t step, int nx);

/* Waits until no transport reads a borrowed chunk overlapping [off,
 * off+len) (len 0: any), or deadline_us. Meanwhile it handles send
 * completions, acknowledgements and errors; data messages wait in the
 * mailbox, in their order (the caller is in the middle of applying one).
 * any_error: stop at a failure handle() reports (else the caller is ending
 * a failed operation and only waits for the transports). */
static int settle(struct railop *o, uint64_t off, uint64_t len, uint64_t deadline_us,
		  bool any_error)
{
	struct r2_rmsg *kh = NULL, *kt = NULL;
	int r = 0;

	while (held_borrowed(o, off, len)) {
		struct r2_rmsg *m;
		if (r2_now_us() > deadline_us) {
			r = -ETIMEDOUT;
			break;
		}
		m = mbox_take(o->c, 10);
		if (!m)
			continue;
		if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA) {
			if (kt)
				kt->next = m;
			else
				kh = m;
			kt = m;
			continue;
		}
		int64_t n = handle(o, m, UINT32_MAX, 0);
		if (n < 0 && any_error) {
			r = (int)n;
			break;
		}
	}
	if (kh)
		mbox_unget(o->c, kh, kt);
	return r;
}

/* A failed operation ends: no transport may still read W afterwards (the
 * client may reuse or unmap it). Normally the failed connections complete
 * their sends at once; a stalled one is dropped after a second (its sends
 * then complete with an error): bounded. */
static void settle_end(struct railop *o)
{
	struct sendrec *s;

	if (!held_borrowed(o, 0, 0) || !settle(o, 0, 0, r2_now_us() + 1000000, false))
		return;
	for (s = o->sends; s; s = s->next) {
		if (!s->borrowed || !tp_holds(s))
			continue;
		log_warn("communicator %u: a chunk (op %llu step %u to host %u) is still queued on "
			 "rail %d: dropping that connection",
			 o->c->id, (unsigned long long)s->hdr.opseq, s->hdr.step, s->hdr.dst,
			 s->rail);
		r2d_rails_drop(o->d, s->rail, s->peer);
	}
	if (settle(o, 0, 0, r2_now_us() + 2000000, false))
		log_err("communicator %u: a transport still holds chunks of operation %llu",
			  o->c->id, (unsigned long long)o->opseq);
}

/* W[off, off+len) is about to change: every unacknowledged chunk sent from
 * there gets its own copy first (after its transport has let go of it).
 * In a ring this never waits (a region is written only after what was sent
 * from it was applied downstream); plans that send and receive one region
 * in one step do. */
static int before_write(struct railop *o, uint64_t off, uint64_t len)
{
	bool any = false;
	int r;

	for (struct sendrec *s = o->sends; s && !any; s = s->next)
		any = s->borrowed && !s->stable && !s->acked && overlaps(s, off, len);
	if (!any)
		return 0;
	if (held_borrowed(o, off, len)) {
		uint64_t t = r2_now_us();
		r = settle(o, off, len, o->deadline, true);
		o->prof.settle_us += r2_now_us() - t;
		if (r < 0)
			return r;
	}
	for (struct sendrec *s = o->sends; s; s = s->next)
		if (s->borrowed && !s->stable && !s->acked && overlaps(s, off, len) &&
		    (r = unborrow(o->d, s)) < 0)
			return r;
	return 0;
}

static bool seen(struct railop *o, uint32_t src, uint64_t off)
{
	for (size_t i = 0; i < o->nseen; i++)
		if (o->seen[i].src == src && o->seen[i].off == off)
			return true;
	return false;
}

static int mark_seen(struct railop *o, uint32_t src, uint64_t off)
{
	if (R2_GROW(o->seen, o->capseen, o->nseen, 256) < 0)
		return -ENOMEM;
	o->seen[o->nseen].src = src;
	o->seen[o->nseen].off = off;
	o->nseen++;
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
 * bookkeeping, applied()). After that push the job touches nothing: the
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
};

static void apply_run(struct r2_work *w)
{
	struct apply_job *j = (struct apply_job *)w;
	struct r2_comm *c = j->c;
	struct r2_rmsg *m = j->m;

	apply_bytes(NULL, j->kind, j->dst, j->a, m->cqe.buf, m->cqe.hdr.len, j->dtype, j->redop);
	free(j);
	m->cqe.type = R2_RMSG_APPLIED;
	mbox_append(c, m, true);
}

/* Waits until the apply queue holds no chunk of this communicator (their
 * R2_RMSG_APPLIED messages may still be in the mailbox). */
static void apply_drain(struct railop *o)
{
	struct r2_comm *c = o->c;

	pthread_mutex_lock(&c->mbox_lock);
	while (c->apply_inflight > 0)
		pthread_cond_wait(&c->mbox_cond, &c->mbox_lock);
	pthread_mutex_unlock(&c->mbox_lock);
	o->nbusy = 0;
}

static bool busy_overlaps(const struct railop *o, uint64_t off, uint64_t len)
{
	for (size_t i = 0; i < o->nbusy; i++)
		if (o->busy[i].off < off + len && off < o->busy[i].off + o->busy[i].len)
			return true;
	return false;
}

/* The chunk h is in W: what waited for it may go (the next step's sends
 * from there, its copy back to the GPU). */
static void applied_mark(struct railop *o, const struct r2_chunk_hdr *h)
{
	for (size_t i = 0; i < o->nrcv; i++) {
		if (o->rcv[i].src == h->src && o->rcv[i].off == h->off) {
			o->rcv[i].done = true;
			break;
		}
	}
	o->applied_since = true;
	stage_final(o, h->src, h->step, h->off, h->len);
}

/* An R2_RMSG_APPLIED message: the queue applied the chunk. One of an
 * operation that failed before is only freed. */
static void applied(struct railop *o, const struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;

	if (h->opseq != o->opseq)
		return;
	for (size_t i = 0; i < o->nbusy; i++) {
		if (o->busy[i].off == h->off && o->busy[i].len == h->len) {
			o->busy[i] = o->busy[--o->nbusy];
			break;
		}
	}
	applied_mark(o, h);
	if (h->step == o->step)
		o->async_got += h->len;
}

/* Queues the chunk m for [off, off+len) of W: true when queued (m is the
 * job's now), false to apply it here. */
static bool apply_queue(struct railop *o, struct r2_rmsg *m, int kind, const void *a)
{
	struct r2_workq *q = r2d_engine_applyq(o->d);
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	struct apply_job *j;

	if (!q || h->len < APPLY_ASYNC_MIN)
		return false;
	if (busy_overlaps(o, h->off, h->len))
		apply_drain(o); /* two chunks into one region: one after the other */
	if (R2_GROW(o->busy, o->capbusy, o->nbusy, 64) < 0 || !(j = calloc(1, sizeof(*j))))
		return false;
	o->busy[o->nbusy].off = h->off;
	o->busy[o->nbusy].len = h->len;
	o->nbusy++;
	*j = (struct apply_job){ .w.fn = apply_run, .c = o->c, .m = m, .dst = o->W + h->off,
				 .a = a, .kind = kind, .dtype = o->dtype, .redop = o->redop };
	pthread_mutex_lock(&o->c->mbox_lock);
	o->c->apply_inflight++;
	pthread_mutex_unlock(&o->c->mbox_lock);
	o->prof.queued++;
	r2_workq_submit(q, &j->w);
	return true;
}

/* Applies one chunk of the current step (m, a received message); returns
 * bytes applied (0: a duplicate, or queued: *taken then says m belongs to
 * the apply queue, and applied() counts its bytes when it is back). */
static uint64_t apply(struct railop *o, struct r2_rmsg *m, int nx, bool *taken)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	const void *buf = m->cqe.buf;
	const struct r2_xfer *x = NULL;

	*taken = false;
	if (seen(o, h->src, h->off)) {
		atomic_fetch_add(&o->d->chunks_dup_dropped, 1);
		log_debug("communicator %u: chunk (op %llu step %u from host %u offset %llu) "
			  "delivered twice: applied once",
			  o->c->id, (unsigned long long)h->opseq, h->step, h->src,
			  (unsigned long long)h->off);
		return 0; /* delivered twice: applied once */
	}
	for (int i = 0; i < nx; i++) {
		const struct r2_xfer *y = &o->xf[i];
		if (y->dir == R2_XFER_RECV && y->peer == h->src && h->off >= y->off &&
		    h->off + h->len <= y->off + y->len) {
			x = y;
			break;
		}
	}
	if (!x || h->off + h->len > o->size || h->len % o->elem) {
		log_warn("communicator %u: unexpected chunk (op %llu step %u from host %u, "
			 "offset %llu, %u bytes); dropped",
			 o->c->id, (unsigned long long)h->opseq, h->step, h->src,
			 (unsigned long long)h->off, h->len);
		return 0;
	}
	if (mark_seen(o, h->src, h->off) < 0)
		return 0;
	int r = before_write(o, h->off, h->len);
	if (r == 0)
		r = stage_wait(o, o->W + h->off, h->len);
	if (r == 0 && o->S)
		r = stage_wait(o, o->S + h->off, h->len);
	int cov = init_cov(o, h->off, h->off + h->len);
	if (r == 0 && x->kind == R2_XFER_REDUCE && cov == 1)
		r = init_fill(o, h->off, h->off + h->len);
	if (r == 0)
		r = init_mark(o, h->off, h->off + h->len);
	if (r < 0) {
		o->err = r;
		return 0;
	}
	/* lazy input: the first reduction into a region reads S */
	const void *a = x->kind == R2_XFER_REDUCE && cov == 0 ? o->S + h->off : NULL;
	if (apply_queue(o, m, x->kind, a)) {
		*taken = true;
		return 0;
	}
	uint64_t t_apply = r2_now_us();
	apply_bytes(par_pool(o->d, h->len), x->kind, o->W + h->off, a, buf, h->len, o->dtype,
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
static uint64_t relay(struct railop *o, const struct r2_chunk_hdr *h, const void *buf, int nx)
{
	struct r2_comm *c = o->c;
	const struct r2_xfer *x = NULL;
	struct sendrec *s;
	int r;

	for (size_t i = 0; i < o->nrseen; i++)
		if (o->rseen[i].src == h->src && o->rseen[i].dst == h->dst &&
		    o->rseen[i].off == h->off)
			return 0; /* delivered twice: forwarded once */
	for (int i = 0; i < nx; i++) {
		const struct r2_xfer *y = &o->xf[i];
		if (y->dir == R2_XFER_RELAY && y->peer == h->src && y->via == h->dst &&
		    h->off >= y->off && h->off + h->len <= y->off + y->len) {
			x = y;
			break;
		}
	}
	if (!x || h->dst >= (uint32_t)c->nhosts) {
		log_warn("communicator %u: unexpected chunk to relay (op %llu step %u, host %u to "
			 "%u, offset %llu); dropped",
			 c->id, (unsigned long long)h->opseq, h->step, h->src, h->dst,
			 (unsigned long long)h->off);
		return 0;
	}
	if (R2_GROW(o->rseen, o->caprseen, o->nrseen, 64) < 0)
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->buf = malloc(h->len ? h->len : 1))) {
		free(s);
		return 0; /* the source re-sends nothing (acknowledged): fails by timeout */
	}
	o->rseen[o->nrseen].src = h->src;
	o->rseen[o->nrseen].dst = h->dst;
	o->rseen[o->nrseen].off = h->off;
	o->nrseen++;
	memcpy(s->buf, buf, h->len);
	s->hdr = *h;
	s->hdr.kind = R2_MSG_DATA;
	s->rail = x->rail2;
	s->peer = c->hosts[h->dst].id;
	sends_add(o, s);
	r = post(o, s);
	if (r < 0 && r != -EAGAIN && !s->posted)
		o->need_repost = true; /* no connection this instant: repost() retries */
	{
		static atomic_uint_fast64_t relayed;
		uint64_t n = atomic_fetch_add(&relayed, 1) + 1;
		if (n == 1 || n % 10000 == 0)
			log_info("communicator %u: bridge for host %u -> %u: %llu chunks relayed "
				 "so far", c->id, h->src, h->dst, (unsigned long long)n);
	}
	return h->len;
}

static void ack(struct railop *o, const struct r2_chunk_hdr *h)
{
	for (struct sendrec **pp = &o->sends; *pp; pp = &(*pp)->next) {
		struct sendrec *s = *pp;
		if (s->hdr.opseq == h->opseq && s->hdr.step == h->step && s->hdr.off == h->off &&
		    s->hdr.dst == h->dst && s->hdr.src == h->src && !s->acked) {
			s->acked = true;
			if (s->sent)
				sends_free(o, pp);
			return;
		}
	}
}

/* A chunk the transport wrote on a rail whose connection to its peer failed
 * meanwhile: the ERROR came before this completion, so its re-post did not
 * take this chunk (not written yet then), and the chunk may be lost with the
 * connection: it must go again (the receiver applies it once). Without
 * this, a loaded executor that sees the ERROR first waited for an ACK that
 * never came until op_timeout_ms (docs/resilience.md, Known problems). */
static bool sent_on_failed(const struct r2_comm *c, const struct sendrec *s)
{
	if (s->rail < 0 || s->rail >= 32)
		return false;
	for (int h = 0; h < c->nhosts; h++)
		if (c->hosts[h].id == (s->via ? s->via : s->peer))
			return (c->hosts[h].failed_rails & (1u << s->rail)) != 0;
	return false;
}

static void sent(struct railop *o, struct sendrec *t, int status)
{
	for (struct sendrec **pp = &o->sends; *pp; pp = &(*pp)->next) {
		struct sendrec *s = *pp;
		if (s != t)
			continue;
		if ((status < 0 || sent_on_failed(o->c, s)) && !s->acked) {
			/* the connection failed under it: send it again elsewhere */
			s->posted = false;
			s->retries++;
			o->need_repost = true;
			return;
		}
		s->sent = true;
		if (s->acked)
			sends_free(o, pp);
		return;
	}
	if (t->orphan) {
		sendrec_free(t);
	}
}

static struct r2_rmsg *mbox_take(struct r2_comm *c, int timeout_ms)
{
	struct r2_rmsg *m;
	struct timespec ts;

	pthread_mutex_lock(&c->mbox_lock);
	if (!c->mbox_head && timeout_ms > 0) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)timeout_ms * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&c->mbox_cond, &c->mbox_lock, &ts);
	}
	m = c->mbox_head;
	if (m) {
		c->mbox_head = m->next;
		if (!c->mbox_head)
			c->mbox_tail = NULL;
		m->next = NULL;
	}
	pthread_mutex_unlock(&c->mbox_lock);
	return m;
}

/* mbox_take for the operation, counting the time it waited */
static struct r2_rmsg *op_take(struct railop *o, int timeout_ms)
{
	uint64_t t = r2_now_us();
	struct r2_rmsg *m = mbox_take(o->c, timeout_ms);

	o->prof.idle_us += r2_now_us() - t;
	return m;
}

static int max_retries(struct railop *o)
{
	return (int)r2_param_int(&o->d->params, P_MAX_RETRIES);
}

/* Handles one message; returns bytes of the current step applied, or <0. */
static int64_t handle(struct railop *o, struct r2_rmsg *m, uint32_t step, int nx)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	uint64_t n = 0;
	bool taken = false;

	if (m->cqe.type == R2_RMSG_APPLIED) {
		applied(o, m); /* its bytes count in o->async_got */
		rmsg_free(o->d, m);
		return 0;
	}
	if (p2p_handle(o->c, m))
		return 0; /* a transfer's message, handled */
	if (m->cqe.type == R2_TPC_SEND)
		o->prof.sendc++;
	else if (m->cqe.type == R2_TPC_RECV && h->kind == R2_MSG_ACK)
		o->prof.acks++;
	else if (m->cqe.type == R2_TPC_RECV) {
		o->prof.data++;
		if (!o->prof.first_rx)
			o->prof.first_rx = m->when_us;
		o->prof.last_rx = m->when_us;
	}
	switch (m->cqe.type) {
	case R2_TPC_SEND:
		sent(o, (struct sendrec *)(uintptr_t)m->cqe.ctx, m->cqe.status);
		break;
	case R2_TPC_ERROR: {
		/* p2p_handle above already marked the rail failed. Chunks written
		 * on that rail but not acknowledged may be lost with it (and the
		 * acknowledgement of one that arrived comes back by the same
		 * rail): post them again; the receiver applies each once. */
		struct r2_rails *rs = o->d->rails;
		for (struct sendrec *s = o->sends; s; s = s->next) {
			if ((s->via ? s->via : s->peer) == m->cqe.peer && s->rail == m->rail &&
			    s->sent && !s->acked) {
				s->sent = false;
				s->posted = false;
				o->need_repost = true;
			}
		}
		uint32_t all = rs ? (1u << rs->n) - 1 : 0;
		bool lost = false;
		for (int hi = 0; hi < o->c->nhosts; hi++)
			if (o->c->hosts[hi].id == m->cqe.peer)
				lost = (o->c->hosts[hi].failed_rails & all) == all;
		if (lost && !detour_possible(o, m->cqe.peer)) {
			log_warn("communicator %u: no rail left to peer %016llx", o->c->id,
				 (unsigned long long)m->cqe.peer);
			rmsg_free(o->d, m);
			return R2CCL_E_PEER_GONE;
		}
		break;
	}
	case R2_TPC_RECV:
		if (h->kind == R2_MSG_ACK) {
			if (h->opseq == o->opseq && (h->flags & R2_CHUNK_NACK)) {
				int e = nack(o, h, m->cqe.peer);
				if (e < 0) {
					rmsg_free(o->d, m);
					return e;
				}
			} else if (h->opseq == o->opseq) {
				ack(o, h);
			}
			break;
		}
		if (h->opseq == o->opseq && h->step == step) {
			n = h->dst != (uint32_t)o->c->my_host ? relay(o, h, m->cqe.buf, nx)
							      : apply(o, m, nx, &taken);
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
		rmsg_free(o->d, m);
	return (int64_t)n;
}

static int repost(struct railop *o);
static int broken(struct r2_comm *c);
static int wait_step_in(struct railop *o, uint32_t step, int nx, uint64_t expect);

/* Why an operation did not finish (a timeout, a broken communicator): what
 * the step still waited for and which chunks were not acknowledged. */
static void stuck(const struct railop *o, uint32_t step, uint64_t got, uint64_t expect, int r)
{
	unsigned n = 0, shown = 0;
	char what[256] = "";

	for (const struct sendrec *s = o->sends; s; s = s->next) {
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
				       ? relay(o, &m->cqe.hdr, m->cqe.buf, nx)
				       : apply(o, m, nx, &taken);
			if (!taken)
				rmsg_free(o->d, m);
			if (o->err)
				return o->err;
			continue;
		}
		pp = &m->next;
	}
	while (got + o->async_got < expect) {
		struct r2_rmsg *m;
		int64_t n;

		if (o->need_repost) {
			int r = repost(o);
			if (r < 0)
				return r;
		}
		m = op_take(o, o->pool_wait ? 1 : o->need_repost ? 10 : 100);

		if (!m) {
			if (o->c->stop)
				return R2CCL_E_SHUTDOWN;
			if (o->c->abort_err)
				return o->c->abort_err; /* broken elsewhere: stop waiting */
			if (r2_now_us() > o->deadline)
				return o->pool_wait ? pool_timeout(o) : -ETIMEDOUT;
			if (broken(o->c))
				return broken(o->c);
			if (o->pool_wait) {
				int r = send_ready(o, false);
				if (r < 0)
					return r;
			}
			continue;
		}
		n = handle(o, m, step, nx);
		if (n < 0)
			return (int)n;
		if (o->err)
			return o->err;
		got += (uint64_t)n;
		o->step_got = got + o->async_got;
		if (o->applied_since || o->pool_wait) {
			int r = send_ready(o, false);
			if (r < 0)
				return r;
			o->applied_since = false;
		}
	}
	return 0;
}

static int repost(struct railop *o)
{
	/* (rail, peer) queues found full this pass: the chunks behind wait */
	struct { int rail; uint64_t peer; } full[32];
	int nfull = 0;

	o->need_repost = false;
	o->prof.reposts++;
	for (struct sendrec *s = o->sends; s; s = s->next) {
		if (s->posted || s->acked)
			continue;
		bool skip = false;
		for (int i = 0; i < nfull && !skip; i++)
			skip = full[i].rail == s->rail && full[i].peer == s->peer;
		if (skip) {
			o->need_repost = true; /* behind one that did not fit: later */
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
		int r = post(o, s);
		o->prof.eagain += r == -EAGAIN;
		if (r == -EAGAIN && nfull < 32) {
			full[nfull].rail = s->rail;
			full[nfull++].peer = s->peer;
		}
		if (r == -EAGAIN || r == -ENOTCONN) {
			/* queue full, or no connection this instant (the peer may be
			 * coming back on a rail): try again shortly; peer_lost and
			 * the peer timeout bound the wait */
			o->need_repost = true;
			continue;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* The communicator was broken meanwhile (peer timeout, abort): stop. */
static int broken(struct r2_comm *c)
{
	if (c->state == R2_COMM_BROKEN || c->state == R2_COMM_DEAD)
		return c->broken_err ? c->broken_err : R2CCL_E_COMM_BROKEN;
	return 0;
}

/* Posts every listed send chunk (send_ready(all)), waiting for proxy
 * buffers if the pool is exhausted. Meanwhile data of this operation's
 * coming steps waits in the stash; acknowledgements free buffers. */
static int send_all(struct railop *o)
{
	int r = send_ready(o, true);

	while (r == 0 && o->pool_wait) {
		struct r2_rmsg *m = op_take(o, 1);
		if (!m) {
			if (o->c->stop)
				return R2CCL_E_SHUTDOWN;
			if (o->c->abort_err)
				return o->c->abort_err;
			if (r2_now_us() > o->deadline)
				return pool_timeout(o);
			if (broken(o->c))
				return broken(o->c);
		} else if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA &&
			   m->cqe.hdr.opseq == o->opseq &&
			   (o->step == UINT32_MAX || m->cqe.hdr.step > o->step)) {
			m->next = o->stash; /* a coming step's */
			o->stash = m;
		} else {
			int64_t n = handle(o, m, o->step, 0);
			if (n < 0)
				return (int)n;
		}
		if (o->need_repost) {
			r = repost(o);
			if (r < 0)
				return r;
		}
		r = send_ready(o, true);
	}
	return r;
}

static int wait_acks(struct railop *o)
{
	while (o->nsends > 0) {
		struct r2_rmsg *m;
		int r = repost(o);
		if (r < 0)
			return r;
		m = op_take(o, 100);
		if (!m) {
			if (o->c->stop)
				return R2CCL_E_SHUTDOWN;
			if (o->c->abort_err)
				return o->c->abort_err; /* broken elsewhere: stop waiting */
			if (r2_now_us() > o->deadline)
				return -ETIMEDOUT;
			if (broken(o->c))
				return broken(o->c);
			continue;
		}
		int64_t n = handle(o, m, UINT32_MAX, 0);
		if (n < 0)
			return (int)n;
	}
	return 0;
}

/* S: NULL, or the input W starts as (lazy input, read where W does not
 * hold it yet; W holds all of it afterwards). */
static int rail_phase(struct r2_exec *x, void *W, const void *S, uint64_t size,
		      r2ccl_dtype_t dtype,
		      r2ccl_redop_t redop, enum r2_plan_op op, uint32_t root, uint32_t peer,
		      uint64_t opseq, struct r2_view *view)
{
	struct r2_comm *c = x->c;
	struct railop o = {
		.x = x,
		.c = c,
		.d = c->d,
		.W = W,
		.S = S != W ? S : NULL,
		.size = size,
		.elem = (uint32_t)r2ccl_dtype_size(dtype),
		.dtype = dtype,
		.redop = redop,
		.opseq = opseq,
		.view = view,
	};
	uint64_t cs = (uint64_t)r2_param_int(&c->d->params, P_CHUNK_SIZE);
	int r;

	o.sends_tail = &o.sends;
	if (size == 0)
		return 0;
	{
		struct r2_bufpool *bp = r2d_bufpool_for(c->d, 0);
		if (bp && cs > r2_bufpool_buf_size(bp))
			cs = r2_bufpool_buf_size(bp); /* chunk_size raised since start-up */
	}
	o.chunk = (uint32_t)R2_MAX(o.elem, cs / o.elem * o.elem);
	o.spread = (uint32_t)(c->d->rails ? R2_MAX(1, c->d->rails->tcp_streams) : 1);
	o.stash = c->deferred; /* chunks that came while no collective ran */
	c->deferred = NULL;
	{
		struct r2_rails *rs = c->d->rails;
		uint32_t all = rs ? (1u << rs->n) - 1 : 0;
		for (int h = 0; h < c->nhosts; h++) {
			if (h != c->my_host && (c->hosts[h].failed_rails & all) == all &&
			    !detour_possible(&o, c->hosts[h].id)) {
				r = R2CCL_E_PEER_GONE; /* known gone: fail at once */
				goto out;
			}
		}
	}
	o.prof.t0 = r2_now_us();
	o.deadline = o.prof.t0 + (uint64_t)r2_param_int(&c->d->params, P_OP_TIMEOUT_MS) * 1000;
	r = build_plan(&o, op, root, peer);
	if (r < 0) {
		log_warn("communicator %u: no plan for %u bytes (op %d, root %u, peer %u, %d hosts)",
			 c->id, (unsigned)size, (int)op, root, peer, c->nhosts);
		goto out;
	}
	r = stage_plan(&o);
	if (r < 0)
		goto out;
	/* step 0's sends are "the next step's" of a step -1 that awaits nothing */
	o.nxn = r2_plan_expand(o.plan, (uint32_t)c->my_host, 0, o.xfn, o.maxx);
	o.step = UINT32_MAX; /* so that step + 1 == 0 */
	if (o.nxn < 0) {
		r = o.nxn;
		goto out;
	}
	if (x->stage_first) { /* GPU input: what step 0 sends comes first */
		const char *p[R2_STAGE_FIRST_MAX];
		uint64_t n[R2_STAGE_FIRST_MAX];
		int k = 0;
		for (int i = 0; i < o.nxn && k < R2_STAGE_FIRST_MAX; i++) {
			if (o.xfn[i].dir != R2_XFER_SEND || !o.xfn[i].len)
				continue;
			p[k] = (o.S ? o.S : (const char *)o.W) + o.xfn[i].off;
			n[k++] = o.xfn[i].len;
		}
		x->stage_first(x, p, n, k);
	}
	for (uint32_t k = 0; k < o.plan->nsteps; k++) {
		struct r2_xfer *t;
		uint64_t expect = 0;
		int nx;

		/* this step's sends: the list was made (and partly posted early)
		 * during the previous step; step 0's is made here */
		r = k == 0 ? list_chunks(&o, o.xfn, o.nxn, R2_XFER_SEND, true) : 0;
		if (r == 0) {
			o.nrcv = 0;
			r = send_all(&o); /* whatever is left of them */
		}
		if (r < 0)
			goto out;
		t = o.xf;
		o.xf = o.xfn;
		o.xfn = t;
		nx = o.nxn;
		o.step = k;
		o.nseen = 0;
		o.step_got = 0;
		o.async_got = 0;
		o.nrseen = 0;
		for (int i = 0; i < nx; i++) {
			const struct r2_xfer *xr = &o.xf[i];
			/* a bridge waits for what it relays as for what it receives */
			if (xr->dir == R2_XFER_RECV || xr->dir == R2_XFER_RELAY)
				expect += xr->len;
		}
		r = list_chunks(&o, o.xf, nx, R2_XFER_RECV, false);
		if (r < 0)
			goto out;
		/* the next step's sends, posted as soon as their bytes are final */
		o.nnsend = 0;
		o.nxn = 0;
		if (k + 1 < o.plan->nsteps) {
			o.nxn = r2_plan_expand(o.plan, (uint32_t)c->my_host, k + 1, o.xfn, o.maxx);
			if (o.nxn < 0) {
				r = o.nxn;
				goto out;
			}
			r = list_chunks(&o, o.xfn, o.nxn, R2_XFER_SEND, true);
			if (r < 0)
				goto out;
			/* chunks that read nothing this step awaits go at once */
			r = send_ready(&o, false);
			if (r < 0)
				goto out;
		}
		r = repost(&o);
		if (r < 0)
			goto out;
		{
			uint64_t w0 = r2_now_us();
			o.last_rx_us = 0;
			r = wait_step(&o, k, nx, expect);
			if (r < 0)
				goto out;
			/* where a slow collective waits (--log-level debug) */
			log_debug("communicator %u: op %llu step %u of %u: waited %.1f ms for %llu "
				  "bytes (last chunk from host %u on rail %d, in the mailbox at "
				  "%+.1f ms)", c->id, (unsigned long long)opseq, k, o.plan->nsteps,
				  (double)(r2_now_us() - w0) / 1000.0, (unsigned long long)expect,
				  o.last_rx_src, o.last_rx_us ? o.last_rx_rail : -1,
				  o.last_rx_us ? ((double)o.last_rx_us - (double)w0) / 1000.0 : 0.0);
		}
	}
	r = wait_acks(&o);
	if (r == 0)
		r = init_fill(&o, 0, size);
	if (r == 0)
		log_debug("communicator %u: op %llu, %llu bytes: %.1f ms (chunks in %.1f..%.1f ms); "
			  "idle %.1f ms, applying %.1f ms, settle %.1f ms, staging %.1f ms; "
			  "%llu data (%llu queued), %llu acks, %llu send completions; %llu reposts, "
			  "%llu tries, %llu full", c->id, (unsigned long long)opseq, (unsigned long long)size,
			  (double)(r2_now_us() - o.prof.t0) / 1e3,
			  o.prof.first_rx ? ((double)o.prof.first_rx - (double)o.prof.t0) / 1e3 : 0.0,
			  o.prof.last_rx ? ((double)o.prof.last_rx - (double)o.prof.t0) / 1e3 : 0.0,
			  (double)o.prof.idle_us / 1e3, (double)o.prof.apply_us / 1e3,
			  (double)o.prof.settle_us / 1e3, (double)o.prof.stage_us / 1e3,
			  (unsigned long long)o.prof.data, (unsigned long long)o.prof.queued,
			  (unsigned long long)o.prof.acks,
			  (unsigned long long)o.prof.sendc, (unsigned long long)o.prof.reposts,
			  (unsigned long long)o.prof.tries, (unsigned long long)o.prof.eagain);
out:
	apply_drain(&o); /* no thread may write W after this returns */
	if (r < 0)
		log_warn("communicator %u: rail phase of operation %llu failed: %s", c->id,
			 (unsigned long long)opseq, r2ccl_strerror(r));
	if (r < 0)
		settle_end(&o);
	/* what is still unacknowledged: the rails thread frees it on completion
	 * if posted; otherwise free it now */
	while (o.sends) {
		struct sendrec *s = o.sends;
		o.sends = s->next;
		if (s->posted && !s->sent) {
			s->orphan = true; /* freed at its send completion */
			continue;
		}
		sendrec_free(s);
	}
	/* chunks for later collectives wait for them */
	while (o.stash) {
		struct r2_rmsg *m = o.stash;
		o.stash = m->next;
		if (m->cqe.hdr.opseq > c->coll_seq) {
			m->next = c->deferred;
			c->deferred = m;
		} else {
			rmsg_free(c->d, m);
		}
	}
	free(o.seen);
	free(o.rseen);
	free(o.nacked);
	free(o.init);
	free(o.xf);
	free(o.xfn);
	free(o.nsend);
	free(o.rcv);
	free(o.wr);
	free(o.busy);
	r2_plan_free(o.plan);
	return r;
}

/* ---- the hierarchical collectives ---- */

static int exec_hier(struct r2_exec *x, struct r2_pool *pool);

int r2_exec_hier(struct r2_exec *x, struct r2_pool *pool)
{
	int r = exec_hier(x, pool);

	if (r == R2CCL_E_PEER_GONE || r == R2CCL_E_NO_PATH) {
		/* the communicator cannot go on: every waiting rank learns it now */
		pthread_mutex_lock(&x->c->d->lock);
		r2d_comm_break(x->c, R2CCL_E_PEER_GONE, "a peer daemon is unreachable on every rail");
		pthread_mutex_unlock(&x->c->d->lock);
	}
	return r;
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
	int K = x->nops, r = 0;
	uint64_t seq;
	char *W = NULL, *scratch = NULL;
	struct r2_view *view = NULL;

	if (K > 256)
		return -E2BIG;
	if (x->opcode == R2_OP_SEND || x->opcode == R2_OP_RECV) {
		int self = x->ops[0]->rank, other = (int)q->root;
		int src = x->opcode == R2_OP_SEND ? self : other;
		int dst = x->opcode == R2_OP_SEND ? other : self;
		uint64_t *slot = p2p_slot(c, (uint32_t)src, (uint32_t)dst);
		if (!slot)
			return -ENOMEM;
		seq = p2p_seq((uint32_t)src, (uint32_t)dst, (*slot)++);
		W = x->opcode == R2_OP_SEND ? x->ops[0]->sendbuf : x->ops[0]->recvbuf;
		return p2p_start(c, x, seq, (uint32_t)c->rank_host[other], x->opcode == R2_OP_SEND,
				 W, blk);
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
		r = rail_phase(x, W, K > 1 ? NULL : in[0], blk, dt, op, R2_PLAN_ALLREDUCE, 0, 0,
			       seq, view);
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
