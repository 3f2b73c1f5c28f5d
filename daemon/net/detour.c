/* SPDX-License-Identifier: MIT */
/*
 * The bridge's side of a detour (detour.h), in the rails thread. A DATA
 * chunk flagged R2_CHUNK_DETOUR whose destination is another host of the
 * communicator is posted on to it at once, on any rail connected to it,
 * straight from the receive buffer, and acknowledged to its source; the
 * bridge then holds it (buffer and header) until the destination
 * acknowledges it, and sends it again on another rail if its connection
 * fails meanwhile. With no connection to the destination either, the source
 * gets a NACK and the buffer goes back. The destination applies the chunk
 * once whatever way it came (its (source, offset) is marked seen), and
 * acknowledges it to the bridge, flagged, so the bridge knows it is done.
 *
 * The bridge's executor never sees these chunks: a detour runs outside the
 * bridge's steps, so the source's and destination's collective does not
 * wait for the bridge's to reach the same step.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/comm_record.h"
#include "base/daemon.h"
#include "net/detour.h"
#include "net/net.h"
#include "log.h"
#include "net/rails.h"
#include "util.h"

struct detour {
	struct detour *next;
	struct r2d *d;           /* the bridge (several daemons share a test process) */
	struct r2_chunk_hdr hdr; /* as it came, DETOUR flag set */
	void *buf;               /* the receive buffer of in_rail */
	int in_rail, rail;       /* where it came by, where it went */
	uint64_t src, dst;       /* source and destination daemons */
	bool sent, acked;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct detour *list;
static atomic_uint_fast64_t forwarded;

/* Posts x to its destination on a connected rail (healthy ones first), not
 * on skip; under lock. Only rails that send from any memory (tcp): the
 * receive buffer it sits in is not registered with a verbs rail.
 * -EAGAIN: a rail to it is connected, its queue full. */
static int forward_on(struct r2d *d, struct detour *x, int skip, int passes)
{
	struct r2_rails *rs = d->rails;
	uint32_t bad = r2d_rails_bad(d, x->dst);
	int r = -ENOTCONN;

	for (int pass = 0; pass < passes; pass++)
		for (int i = 0; rs && i < rs->n; i++) {
			if (i == skip || ((bad >> i) & 1) != (uint32_t)pass ||
			    !r2d_rails_zero_copy(d, i))
				continue;
			int q = r2d_rails_send(d, i, x->dst, &x->hdr, x->buf,
					       (uint64_t)(uintptr_t)x | R2_DETOUR_TAG);
			if (q == 0) {
				x->rail = i;
				x->sent = false;
				return 0;
			}
			if (q == -EAGAIN)
				r = q;
		}
	return r;
}

/* x goes (again) to its destination on a rail other than skip: a good one,
 * else a bad one that is connected. */
static int forward(struct r2d *d, struct detour *x, int skip)
{
	return forward_on(d, x, skip, 2);
}

static void answer(struct r2d *d, int rail, uint64_t to, const struct r2_chunk_hdr *h,
		   uint16_t flags)
{
	struct r2_rails *rs = d->rails;
	struct r2_chunk_hdr a = *h;

	a.kind = R2_MSG_ACK;
	a.len = 0;
	/* the source's throughput monitor counts the bridge's ACK (or NACK),
	 * not the destination's passed on */
	a.aux = flags & R2_CHUNK_DELIVERED ? 0 : h->len;
	a.flags = flags;
	if (r2d_rails_send(d, rail, to, &a, NULL, 0) < 0)
		for (int i = 0; rs && i < rs->n; i++)
			if (i != rail && r2d_rails_send(d, i, to, &a, NULL, 0) == 0)
				break;
}

static void drop(struct r2d *d, struct detour *x)
{
	r2d_rails_release(d, x->in_rail, x->buf);
	free(x);
}

/* x cannot reach its destination any more (no rail left to it): the source,
 * which had its ACK, hears NACK, so that it finds the destination gone at
 * once rather than at the peer timeout. */
static void lost(struct r2d *d, struct detour *x)
{
	log_warn("detour: chunk (op %llu step %u, host %u to %u) lost with the connection to "
		 "%016llx, no other rail to it",
		 (unsigned long long)x->hdr.opseq, x->hdr.step, x->hdr.src, x->hdr.dst,
		 (unsigned long long)x->dst);
	answer(d, x->in_rail, x->src, &x->hdr, R2_CHUNK_DETOUR | R2_CHUNK_NACK);
}

/* Unlinks x; under lock. */
static void unlink_one(struct detour *x)
{
	for (struct detour **pp = &list; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			return;
		}
}

/* Unlinks and returns the record of a forwarded chunk; under lock. */
static struct detour *take(struct r2d *d, const struct r2_chunk_hdr *h)
{
	for (struct detour **pp = &list; *pp; pp = &(*pp)->next) {
		struct detour *x = *pp;
		/* (an acknowledged one waits only for its send completion: a
		 * second copy's ACK is not for it) */
		/* (chunk: the pieces of one eager message share step and off) */
		if (x->d == d && !x->acked && x->hdr.comm == h->comm && x->hdr.opseq == h->opseq &&
		    x->hdr.step == h->step && x->hdr.src == h->src && x->hdr.dst == h->dst &&
		    x->hdr.off == h->off && x->hdr.chunk == h->chunk) {
			*pp = x->next;
			return x;
		}
	}
	return NULL;
}

/* Host index k of communicator c (under d->lock) is alive, though maybe out
 * of reach: its data or its ACK came through a bridge. */
static void mark_alive(struct r2d *d, const struct r2_comm *c, uint32_t k)
{
	struct r2_peer *p = r2d_rails_peer_find(d, c->hosts[k].id);

	if (p)
		atomic_store(&p->detour_rx_us, r2_now_us());
}

/* A DATA chunk to forward: true when this host is its bridge. */
static bool data_in(struct r2d *d, int rail, const struct r2_tp_cqe *cqe)
{
	const struct r2_chunk_hdr *h = &cqe->hdr;
	uint64_t dst = 0;
	struct r2_comm *c;
	struct detour *x;
	int me = -1;
	bool joining = false;

	pthread_mutex_lock(&d->lock);
	c = d->net_ev->comm_by_key(d, h->comm);
	if (c && c->state == R2_COMM_READY && c->hosts && h->dst < (uint32_t)c->nhosts &&
	    h->src < (uint32_t)c->nhosts) {
		if (h->dst != (uint32_t)c->my_host) {
			dst = c->hosts[h->dst].id;
		} else {
			mark_alive(d, c, h->src); /* for this host */
		}
	} else if (!c || c->state != R2_COMM_READY) {
		me = d->net_ev->my_host_by_key(d, h->comm);
		joining = c && c->state == R2_COMM_JOINING;
	}
	pthread_mutex_unlock(&d->lock);
	if (!dst && me >= 0 && h->dst != (uint32_t)me) {
		/* for another host, of a communicator that is not ready here
		 * or ended here (its last collective done here, it was
		 * destroyed while the others still finish theirs): no bridge
		 * for it. A plain ACK (taken for this host's, an orphan) let
		 * the source forget a chunk nobody forwarded, and the
		 * destination waited for op_timeout_ms; a NACK makes the
		 * source try another bridge. Not ready yet (joining): busy,
		 * this bridge is tried again later. */
		static struct r2_ratelimit rl = R2_RATELIMIT_INIT(5000, 5);
		unsigned sup;
		if (r2_ratelimit_ok(&rl, &sup))
			log_warn("detour: chunk (op %llu, host %u to %u) of a communicator not here "
				 "(not ready, or ended): refused",
				 (unsigned long long)h->opseq, h->src, h->dst);
		answer(d, rail, cqe->peer, h,
		       R2_CHUNK_DETOUR | R2_CHUNK_NACK | (joining ? R2_CHUNK_BUSY : 0));
		r2d_rails_release(d, rail, cqe->buf);
		return true;
	}
	if (!dst)
		return false; /* for this host (or a communicator we cannot tell) */
	x = calloc(1, sizeof(*x));
	if (!x) {
		answer(d, rail, cqe->peer, h, R2_CHUNK_DETOUR | R2_CHUNK_NACK);
		r2d_rails_release(d, rail, cqe->buf);
		return true;
	}
	x->d = d;
	x->hdr = *h;
	x->buf = cqe->buf;
	x->in_rail = rail;
	x->src = cqe->peer;
	x->dst = dst;
	pthread_mutex_lock(&lock);
	int r = forward(d, x, -1);
	if (r < 0) {
		pthread_mutex_unlock(&lock);
		if (r != -EAGAIN)
			log_warn("detour: no connection to %016llx either: chunk (op %llu step %u, "
				 "host %u to %u) refused",
				 (unsigned long long)dst, (unsigned long long)h->opseq, h->step,
				 h->src, h->dst);
		answer(d, rail, cqe->peer, h,
		       R2_CHUNK_DETOUR | R2_CHUNK_NACK | (r == -EAGAIN ? R2_CHUNK_BUSY : 0));
		drop(d, x);
		return true;
	}
	x->next = list;
	list = x;
	pthread_mutex_unlock(&lock);
	/* held here now: the source may forget it */
	answer(d, rail, cqe->peer, h, R2_CHUNK_DETOUR);
	uint64_t n = atomic_fetch_add(&forwarded, 1) + 1;
	if (n == 1 || n % 10000 == 0)
		log_info("detour: host %u -> %u through this host: %llu chunks forwarded so far",
			 h->src, h->dst, (unsigned long long)n);
	return true;
}

bool r2d_detour_in(struct r2d *d, int rail, const struct r2_tp_cqe *cqe)
{
	const struct r2_chunk_hdr *h = &cqe->hdr;
	struct detour *x;

	if (cqe->type == R2_TPC_SEND) {
		if ((cqe->ctx & 7u) != R2_DETOUR_TAG)
			return false;
		x = (struct detour *)(uintptr_t)(cqe->ctx & ~(uint64_t)7u);
		pthread_mutex_lock(&lock);
		/* its connection failed under it: again, elsewhere, or the
		 * source learns it is lost. A success on a path that is bad
		 * by now (the connection's error may have come first, when
		 * r2d_detour_failed passed it over, not sent yet) says only
		 * that the bytes were written: they may be lost with the
		 * connection, so it goes again where another good rail takes it
		 * (the destination applies a second copy once; only a good one:
		 * copies must not bounce between bad rails); where none does,
		 * it counts as delivered, as before */
		bool failed = cqe->status < 0;
		bool suspect = !failed && ((r2d_rails_bad(d, x->dst) >> x->rail) & 1);
		if ((failed || suspect) && !x->acked) {
			if (forward_on(d, x, x->rail, failed ? 2 : 1) == 0) {
				pthread_mutex_unlock(&lock);
				return true;
			}
			if (failed) {
				lost(d, x);
				x->acked = true; /* nothing more to wait for */
			}
		}
		x->sent = true;
		if (x->acked) {
			unlink_one(x);
			drop(d, x);
		}
		pthread_mutex_unlock(&lock);
		return true;
	}
	if (cqe->type != R2_TPC_RECV || !(h->flags & R2_CHUNK_DETOUR))
		return false;
	if (h->kind == R2_MSG_DATA)
		return data_in(d, rail, cqe);
	if (h->kind != R2_MSG_ACK || (h->flags & R2_CHUNK_NACK))
		return false;
	if (h->flags & R2_CHUNK_DELIVERED) {
		/* this host is the source: the destination is alive */
		struct r2_comm *c;
		pthread_mutex_lock(&d->lock);
		c = d->net_ev->comm_by_key(d, h->comm);
		if (c && c->hosts && h->dst < (uint32_t)c->nhosts)
			mark_alive(d, c, h->dst);
		pthread_mutex_unlock(&d->lock);
		r2d_rails_release(d, rail, cqe->buf);
		return true;
	}
	/* the destination's ACK of a chunk this host forwarded (the source's
	 * own comes from the bridge: not in the list, its executor takes it) */
	struct r2_chunk_hdr fh;
	uint64_t src = 0;
	int in_rail = 0;
	pthread_mutex_lock(&lock);
	x = take(d, h);
	if (x) {
		fh = x->hdr;
		src = x->src;
		in_rail = x->in_rail;
	}
	if (x && !x->sent) {
		x->acked = true; /* freed at its send completion */
		x->next = list;
		list = x;
		x = NULL;
	}
	pthread_mutex_unlock(&lock);
	if (!src)
		return false; /* this host is the source: its executor's */
	answer(d, in_rail, src, &fh, R2_CHUNK_DETOUR | R2_CHUNK_DELIVERED);
	if (x)
		drop(d, x);
	r2d_rails_release(d, rail, cqe->buf);
	return true;
}

void r2d_detour_failed(struct r2d *d, int rail, uint64_t peer)
{
	pthread_mutex_lock(&lock);
	for (struct detour **pp = &list; *pp;) {
		struct detour *x = *pp;
		if (x->d == d && x->dst == peer && x->rail == rail && x->sent && !x->acked &&
		    forward(d, x, rail) < 0) {
			lost(d, x);
			*pp = x->next;
			drop(d, x);
			continue;
		}
		pp = &x->next;
	}
	pthread_mutex_unlock(&lock);
}

int r2d_detours_unsent(struct r2d *d, bool cut)
{
	int n = 0;

	pthread_mutex_lock(&lock);
	for (struct detour *x = list; x; x = x->next) {
		if (x->d != d || x->sent)
			continue;
		n++;
		if (cut && d->rails && x->rail >= 0 && x->rail < d->rails->n)
			d->rails->rail[x->rail].ops->disconnect(d->rails->rail[x->rail].tp, x->dst);
	}
	pthread_mutex_unlock(&lock);
	return n;
}

bool r2d_detour_sendc_at_stop(struct r2d *d, const struct r2_tp_cqe *cqe)
{
	if (cqe->type != R2_TPC_SEND || (cqe->ctx & 7u) != R2_DETOUR_TAG ||
	    !(cqe->ctx & ~(uint64_t)7u))
		return false;
	struct detour *x = (struct detour *)(uintptr_t)(cqe->ctx & ~(uint64_t)7u);
	pthread_mutex_lock(&lock);
	if (x->d == d)
		x->sent = true; /* the transport is done with its buffer */
	pthread_mutex_unlock(&lock);
	return true;
}

void r2d_detours_free(struct r2d *d)
{
	pthread_mutex_lock(&lock);
	for (struct detour **pp = &list; *pp;) {
		struct detour *x = *pp;
		if (x->d != d) {
			pp = &x->next;
			continue;
		}
		*pp = x->next;
		if (x->sent) {
			drop(d, x);
			continue;
		}
		/* a send may still read it: the buffer is not handed to the
		 * next receive (the transport's close drops it) */
		log_warn("detour: chunk (op %llu step %u, host %u to %u) still being sent at the "
			 "stop: its receive buffer is not given back",
			 (unsigned long long)x->hdr.opseq, x->hdr.step, x->hdr.src, x->hdr.dst);
		free(x);
	}
	pthread_mutex_unlock(&lock);
}
