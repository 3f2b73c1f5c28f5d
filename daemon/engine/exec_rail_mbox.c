/* SPDX-License-Identifier: MIT */
/*
 * The communicator mailbox and orphans: the rails thread hands each
 * completion to its communicator's executor here (rails thread in,
 * executor out); chunks of a communicator not ready yet wait as orphans.
 */
#include <errno.h>
#include <stdlib.h>

#include "net/detour.h"
#include "log.h"
#include "net/rails.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* ---- delivery (rails thread) ---- */

/* What an executor waiting only for its lingering messages' acknowledgements
 * takes at its next look, without a wake-up: an ACK (not a bridge's NACK),
 * and a data chunk (of a later operation: one in flight would have the
 * executor awake, not quiet). Errors, connection events and send
 * completions wake it. */
static bool quiet_ok(const struct r2_rmsg *m)
{
	return m->cqe.type == R2_TPC_RECV &&
	       ((m->cqe.hdr.kind == R2_MSG_ACK && !(m->cqe.hdr.flags & R2_CHUNK_NACK)) ||
		m->cqe.hdr.kind == R2_MSG_DATA);
}

/* Appends m to c's mailbox; applied: m comes back from the apply queue
 * (one chunk fewer on it, counted under the same lock). A delivery (not
 * applied) runs under d->lock, which c outlives (r2d_comm_put destroys its
 * mailbox under it): the executor is signalled after the mailbox's lock is
 * dropped, so that it does not wake into a lock still held (2-core VM,
 * small-cost.sh: 0.5-1 system call and switch fewer per operation and
 * host). An apply thread holds no lock that c outlives: it signals under
 * the mailbox's, since the executor may free c once apply_inflight is 0. */
void rl_mbox_append(struct r2_comm *c, struct r2_rmsg *m, bool applied)
{
	bool wake;

	m->next = NULL;
	pthread_mutex_lock(&c->mbox_lock);
	if (c->mbox_tail)
		c->mbox_tail->next = m;
	else
		c->mbox_head = m;
	c->mbox_tail = m;
	if (applied)
		c->apply_inflight--;
	atomic_fetch_add_explicit(&c->mbox_gen, 1, memory_order_release);
	wake = !c->mbox_quiet || !quiet_ok(m);
	if (wake && applied)
		pthread_cond_signal(&c->mbox_cond);
	pthread_mutex_unlock(&c->mbox_lock);
	if (wake && !applied)
		pthread_cond_signal(&c->mbox_cond);
}

static void mbox_push(struct r2_comm *c, struct r2_rmsg *m)
{
	rl_mbox_append(c, m, false);
}

void rl_rmsg_free(struct r2d *d, struct r2_rmsg *m)
{
	if (m->cqe.type == R2_TPC_RECV || m->cqe.type == R2_RMSG_APPLIED)
		r2d_rails_release(d, m->rail, m->cqe.buf);
	free(m);
}

void r2d_comm_mbox_wake(struct r2_comm *c)
{
	pthread_mutex_lock(&c->mbox_lock);
	atomic_fetch_add_explicit(&c->mbox_gen, 1, memory_order_release); /* rl_mbox_spin */
	pthread_mutex_unlock(&c->mbox_lock);
	pthread_cond_signal(&c->mbox_cond);
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
			if (rl_is_orphan(s))
				rl_sendrec_free(s);
		}
		rl_rmsg_free(c->d, m);
	}
}

static bool comm_has_host(const struct r2_comm *c, uint64_t id)
{
	for (int h = 0; h < c->nhosts && c->hosts; h++)
		if (c->hosts[h].id == id)
			return true;
	return false;
}

/* A received chunk is acknowledged on the rail it came by; if that one
 * just went, on any other. */
void rl_ack_send(struct r2d *d, int rail, uint64_t peer, const struct r2_chunk_hdr *hdr)
{
	struct r2_chunk_hdr ack = *hdr;
	struct r2_rails *rs = d->rails;

	ack.kind = R2_MSG_ACK;
	ack.len = 0;
	/* the sender's throughput monitor counts it (not a lazy one's: its
	 * post was not counted, rails.c) */
	ack.aux = hdr->flags & R2_CHUNK_LAZY_ACK ? 0 : hdr->len;
	if (r2d_rails_send(d, rail, peer, &ack, NULL, 0) < 0)
		for (int i = 0; rs && i < rs->n; i++)
			if (i != rail && r2d_rails_send(d, i, peer, &ack, NULL, 0) == 0)
				break;
}

/* A connection event (ERROR, CONN): every communicator that spans its peer
 * hears of it, each from its own copy of m (under d->lock). */
static void deliver_to_all(struct r2d *d, const struct r2_rmsg *m)
{
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		if (c->state != R2_COMM_READY || !comm_has_host(c, m->cqe.peer))
			continue;
		struct r2_rmsg *copy = malloc(sizeof(*copy));
		if (!copy)
			continue;
		*copy = *m;
		copy->next = NULL;
		mbox_push(c, copy);
	}
}

/* Orphans: chunks of a communicator that is not ready here yet. At most
 * 65536 of them and proxy_pool_max bytes (what the pools of the peers that
 * are ahead can have in flight), and none older than bootstrap_timeout_ms
 * (r2d_orphans_expire, from the control tick): a communicator not ready by
 * then has failed, so an older orphan belongs to a communicator that failed
 * (or never was: a peer's junk) and would otherwise be held until the
 * daemon exits (found by tests/fuzz/fuzz_peer). */
#define ORPHANS_MAX 65536

/* Keeps m, a data chunk of a communicator that is not ready here yet, as an
 * orphan while the caps allow; false if they do not (under d->lock). */
static bool orphan_keep(struct r2d *d, struct r2_rmsg *m)
{
	const struct r2_tp_cqe *cqe = &m->cqe;

	if (cqe->type != R2_TPC_RECV || cqe->hdr.kind != R2_MSG_DATA ||
	    d->norphans >= ORPHANS_MAX ||
	    d->orphan_bytes + cqe->hdr.len > (uint64_t)r2_param_int(&d->params, P_PROXY_POOL_MAX))
		return false;
	m->next = d->orphans;
	d->orphans = m;
	d->norphans++;
	d->orphan_bytes += cqe->hdr.len;
	return true;
}

/* A chunk or a send completion: to its communicator's mailbox, kept as an
 * orphan while the communicator is not ready here yet, or freed (under
 * d->lock). m is not touched after it is pushed. */
static void deliver_one(struct r2d *d, struct r2_rmsg *m)
{
	const struct r2_tp_cqe *cqe = &m->cqe;
	struct r2_comm *c;

	if (cqe->type == R2_TPC_SEND) {
		struct sendrec *s = (struct sendrec *)(uintptr_t)cqe->ctx;
		/* a dead one too: its executor may still list s (r2d_comm_put) */
		c = r2d_comm_by_key_any(d, s->hdr.comm);
	} else {
		c = r2d_comm_by_key(d, cqe->hdr.comm);
	}
	if (c && c->state == R2_COMM_READY) {
		mbox_push(c, m);
	} else if (!orphan_keep(d, m)) {
		if (cqe->type == R2_TPC_SEND) {
			struct sendrec *s = (struct sendrec *)(uintptr_t)cqe->ctx;
			if (c && !rl_is_orphan(s)) {
				/* the communicator broke while its executor still
				 * lists this chunk (it frees or orphans it on the way
				 * out; the mailbox flush frees orphans): freeing it
				 * here would free it under the executor */
				mbox_push(c, m);
				return;
			}
			rl_sendrec_free(s);
		}
		rl_rmsg_free(d, m);
	}
}

/* A data chunk this host cannot keep (its communicator is not ready here
 * and the orphans are full, or no memory for its record): refused (NACK,
 * busy) instead of acknowledged, so that its sender keeps its copy and
 * sends it again a little later; an ACK let the sender forget a chunk
 * dropped here, and the collective waited for it until op_timeout_ms. */
static void refuse(struct r2d *d, int rail, const struct r2_tp_cqe *cqe)
{
	static struct r2_ratelimit rl = R2_RATELIMIT_INIT(5000, 5);
	struct r2_chunk_hdr h = cqe->hdr;
	unsigned sup;

	atomic_fetch_add(&d->chunks_refused, 1);
	if (r2_ratelimit_ok(&rl, &sup))
		log_warn("a chunk (op %llu, from host %u) of a communicator not ready here: "
			 "refused, its sender sends it again (the early chunks kept here are "
			 "at their cap, proxy_pool_max or 65536, or no memory)",
			 (unsigned long long)h.opseq, h.src);
	h.flags |= R2_CHUNK_NACK | R2_CHUNK_BUSY;
	rl_ack_send(d, rail, cqe->peer, &h);
	r2d_rails_release(d, rail, cqe->buf);
}

/* Testing (inject_refuse = N): every Nth data chunk is refused as if it
 * could not be kept. */
static bool inject_refuse(struct r2d *d)
{
	static atomic_uint_fast64_t n;
	int64_t every = r2_param_int(&d->params, P_INJECT_REFUSE);

	return every && (atomic_fetch_add(&n, 1) + 1) % (uint64_t)every == 0;
}

void r2d_comm_deliver(struct r2d *d, int rail, const struct r2_tp_cqe *cqe)
{
	const struct r2_chunk_hdr *h = &cqe->hdr;
	bool data = cqe->type == R2_TPC_RECV && h->kind == R2_MSG_DATA;
	/* answered here, at once (lazy ones by their executor, exec_rail_ack.c) */
	bool ack = data && (h->flags & (R2_CHUNK_LAZY_ACK | R2_CHUNK_DETOUR)) != R2_CHUNK_LAZY_ACK;
	/* refused when it cannot be kept; not one that came through a bridge,
	 * which holds it until this host's ACK (docs/resilience.md) */
	bool refusable = data && !(h->flags & R2_CHUNK_DETOUR);
	struct r2_rmsg *m;

	if (cqe->type == R2_TPC_SEND && cqe->ctx == 0)
		return; /* acknowledgements and heartbeats carry no record */
	if (r2d_detour_in(d, rail, cqe))
		return; /* a chunk this host forwards as a bridge, or its ACK */
	if (cqe->type == R2_TPC_ERROR)
		r2d_detour_failed(d, rail, cqe->peer);
	if (cqe->type == R2_TPC_RECV && !data && h->kind != R2_MSG_ACK) {
		r2d_rails_release(d, rail, cqe->buf);
		return;
	}
	m = refusable && inject_refuse(d) ? NULL : calloc(1, sizeof(*m));
	if (!m) {
		if (refusable) {
			refuse(d, rail, cqe);
			return;
		}
		if (ack) /* (through a bridge: see below) */
			rl_ack_send(d, rail, cqe->peer, h);
		if (cqe->type == R2_TPC_RECV)
			r2d_rails_release(d, rail, cqe->buf);
		return;
	}
	m->rail = rail;
	m->cqe = *cqe;
	m->when_us = r2_now_us();
	pthread_mutex_lock(&d->lock);
	if (cqe->type == R2_TPC_ERROR || cqe->type == R2_TPC_CONN) {
		deliver_to_all(d, m);
		pthread_mutex_unlock(&d->lock);
		free(m);
		return;
	}
	if (data) {
		struct r2_comm *c = r2d_comm_by_key(d, h->comm);
		if (!c || c->state != R2_COMM_READY) {
			/* not ready here yet: kept for it, or refused */
			bool kept = orphan_keep(d, m);
			pthread_mutex_unlock(&d->lock);
			if (!kept && refusable) {
				refuse(d, rail, cqe);
				free(m);
				return;
			}
			/* (one through a bridge is acknowledged even when it is
			 * dropped: the bridge would hold it for ever) */
			if (ack)
				rl_ack_send(d, rail, cqe->peer, h);
			if (!kept)
				rl_rmsg_free(d, m);
			return;
		}
		if (ack) {
			/* Acknowledged before it goes to the mailbox. (After it,
			 * to keep the ACK's write off the executor's path, was
			 * tried on 2026-12-04 and reverted when 8-host
			 * AllReduces with apply threads came out wrong; the cause
			 * was elsewhere, an inline chunk that did not wait for an
			 * overlapping queued one (docs/resilience.md, Known
			 * problems), and is fixed; the order after the mailbox
			 * has not been measured again.) */
			pthread_mutex_unlock(&d->lock);
			rl_ack_send(d, rail, cqe->peer, h);
			pthread_mutex_lock(&d->lock);
		}
	}
	deliver_one(d, m);
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
			d->orphan_bytes -= m->cqe.hdr.len;
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
		rl_rmsg_free(d, m);
	}
	d->orphans = NULL;
	d->norphans = 0;
	d->orphan_bytes = 0;
}

void r2d_orphans_expire(struct r2d *d, uint64_t older_than_us)
{
	struct r2_rmsg **pp = (struct r2_rmsg **)&d->orphans;

	while (*pp) {
		struct r2_rmsg *m = *pp;
		if (m->when_us < older_than_us) {
			*pp = m->next;
			d->norphans--;
			d->orphan_bytes -= m->cqe.hdr.len;
			rl_rmsg_free(d, m);
			continue;
		}
		pp = &m->next;
	}
}

/* Puts messages back at the head of the mailbox, in their order. */
void rl_mbox_unget(struct r2_comm *c, struct r2_rmsg *head, struct r2_rmsg *tail)
{
	pthread_mutex_lock(&c->mbox_lock);
	tail->next = c->mbox_head;
	c->mbox_head = head;
	if (!c->mbox_tail)
		c->mbox_tail = tail;
	atomic_fetch_add_explicit(&c->mbox_gen, 1, memory_order_release);
	pthread_mutex_unlock(&c->mbox_lock);
}

uint64_t rl_exec_spin_us(struct r2d *d)
{
	/* auto is 0 on a small host: tried on 2 cores, a busy-polling executor
	 * was no faster (docs/benchmarks.md 3c) */
	return r2_spin_budget_us(r2_param_int(&d->params, P_EXEC_SPIN_US));
}

void r2_exec_spin(struct r2_comm *c, unsigned gen)
{
	rl_mbox_spin(c, gen, rl_exec_spin_us(c->d));
}

void rl_mbox_spin(struct r2_comm *c, unsigned gen, uint64_t spin_us)
{
	uint64_t until;

	if (!spin_us)
		return;
	until = r2_now_us() + spin_us;
	while (atomic_load_explicit(&c->mbox_gen, memory_order_acquire) == gen &&
	       !__atomic_load_n(&c->stop, __ATOMIC_RELAXED) && r2_now_us() < until)
		r2_cpu_relax();
}

void rl_mbox_quiet(struct r2_comm *c, bool on)
{
	pthread_mutex_lock(&c->mbox_lock);
	c->mbox_quiet = on;
	pthread_mutex_unlock(&c->mbox_lock);
}

/* The oldest message, waiting up to timeout_ms for one; with gen, only
 * while c->mbox_gen is still *gen (checked under the lock that queue_exec
 * and rl_mbox_append move it under: no wake-up is lost in between) */
static struct r2_rmsg *mbox_take(struct r2_comm *c, int timeout_ms, const unsigned *gen)
{
	struct r2_rmsg *m;

	pthread_mutex_lock(&c->mbox_lock);
	if (!c->mbox_head && timeout_ms > 0 &&
	    (!gen || atomic_load_explicit(&c->mbox_gen, memory_order_relaxed) == *gen)) {
		struct timespec ts = r2_deadline_in_us((uint64_t)timeout_ms * 1000);
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
	/* a host's chunk of a later collective acknowledges my lingering
	 * messages to it (exec_rail_ack.c) */
	if (m && m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA &&
	    !(m->cqe.hdr.opseq & P2P_BIT))
		rl_ack_seen(c, m->cqe.hdr.src, m->cqe.hdr.opseq);
	return m;
}

struct r2_rmsg *rl_mbox_take(struct r2_comm *c, int timeout_ms)
{
	return mbox_take(c, timeout_ms, NULL);
}

struct r2_rmsg *rl_mbox_take_since(struct r2_comm *c, int timeout_ms, uint64_t spin_us,
				   unsigned gen)
{
	struct r2_rmsg *m;

	if (spin_us && timeout_ms > 0) {
		if ((m = mbox_take(c, 0, NULL)))
			return m;
		rl_mbox_spin(c, gen, spin_us);
	}
	return mbox_take(c, timeout_ms, &gen);
}

struct r2_rmsg *rl_mbox_take_spin(struct r2_comm *c, int timeout_ms, uint64_t spin_us)
{
	return rl_mbox_take_since(c, timeout_ms, spin_us,
				  atomic_load_explicit(&c->mbox_gen, memory_order_acquire));
}
