/* SPDX-License-Identifier: MIT */
/*
 * Send/recv across hosts: transfers run asynchronously on the executor,
 * with their own sequence numbers per (source, destination).
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
		/* reset (or closed) by the peer, or a dial refused: its daemon,
		 * not a link, is gone (health's gone_mask, the same rule) */
		if (m->cqe.status == -ECONNRESET || m->cqe.status == -ECONNREFUSED)
			c->hosts[h].reset_rails |= 1u << m->rail;
		else
			c->hosts[h].reset_rails &= ~(1u << m->rail);
		return (c->hosts[h].failed_rails & all) == all;
	}
	return false;
}

/* ---- send/recv sequence numbers: one counter per (source, destination) ---- */

#define P2P_CTR_MASK R2_P2P_CTR_MASK

static uint64_t p2p_key(uint32_t src, uint32_t dst)
{
	return ((uint64_t)src << 32) | dst;
}

/* The pair's counter slot (executor thread only). */
uint64_t *rl_p2p_slot(struct r2_comm *c, uint32_t src, uint32_t dst)
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

uint64_t rl_p2p_seq(uint32_t src, uint32_t dst, uint64_t ctr)
{
	return P2P_BIT | ((uint64_t)src << 42) | ((uint64_t)dst << 21) | (ctr & P2P_CTR_MASK);
}

/* A transfer chunk of a pair whose counter has moved past it: a duplicate.
 * Wrap-aware: compared as plain numbers, the first chunk of the pair's
 * 2^21-th transfer (counter 0 again) was taken for an old one while the
 * receiver was a transfer or two behind, and dropped after its ACK. */
static bool p2p_old(struct r2_comm *c, uint64_t seq)
{
	uint32_t src = (uint32_t)((seq >> 42) & 0x1fffff), dst = (uint32_t)((seq >> 21) & 0x1fffff);
	uint64_t *slot = rl_p2p_slot(c, src, dst);

	return slot && r2_p2p_ctr_before(seq & P2P_CTR_MASK, *slot & P2P_CTR_MASK);
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
	/* a collective's lingering messages (rl_p2p_linger; peer_host
	 * LINGER): they go again as they went, through a bridge with no rail
	 * left to their host, and a bridge's NACK picks another */
	struct rail_detours det;
};

#define LINGER UINT32_MAX

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
			/* last: the rails thread may free s as soon as it sees it */
			s->owner = NULL;
			rl_orphan(s);
			continue;
		}
		rl_sendrec_free(s);
	}
	free(p->seen);
	free(p->det.nacked);
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
	if (status < 0 && !p->x)
		log_warn("communicator %u: acknowledgements of operation %llu: %s (%d missing)",
			 c->id, (unsigned long long)p->seq, r2ccl_strerror(status), p->nsends);
	else if (status < 0)
		log_warn("communicator %u: transfer %s host %u failed: %s", c->id,
			 p->is_send ? "to" : "from", p->peer_host, r2ccl_strerror(status));
	if (p->x)
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


/* s goes on a rail to its host, or with none left through a bridge (a
 * third host of the communicator, detour.h), as a collective's chunks go. */
static int p2p_post(struct r2_comm *c, struct p2pop *p, struct sendrec *s)
{
	if (p->peer_host != LINGER) /* (a lingering one's was set by the collective) */
		s->tenant = r2d_tenants_of(c->d, c->tenant); /* its queue on the rails */
	return rl_post_via(c, &p->det, s, p->seq);
}

/* s goes again (lost with a connection, or refused by a bridge): posted,
 * or waiting for queue room (r2_p2p_pump); <0: no path to its host. */
static int p2p_again(struct r2_comm *c, struct p2pop *p, struct sendrec *s)
{
	int r;

	s->posted = false;
	s->sent = false;
	r = p2p_post(c, p, s);
	if (r == -EAGAIN) {
		p->blocked = true;
		return 0;
	}
	return r < 0 && !s->posted ? r : 0;
}

/* A connection to a peer failed on a rail: a transfer's chunk written on
 * that rail (to its host, or to the bridge it went through) but not
 * acknowledged may be lost with it, so it goes again; with no rail left to
 * the peer and no bridge to it either, its transfers fail. */
static void p2p_conn_error(struct r2_comm *c, const struct r2_rmsg *m)
{
	for (struct p2pop *p = c->p2p_ops; p; p = p->next) {
		for (struct sendrec *s = p->sends; s; s = s->next) {
			if (rl_sent_to(s) == m->cqe.peer && s->rail == m->rail &&
			    s->sent && !s->acked && p2p_again(c, p, s) < 0)
				s->sent = true; /* no rail now: keep waiting */
		}
	}
	if (peer_lost(c, m)) {
		for (struct p2pop *p = c->p2p_ops, *next; p; p = next) {
			next = p->next;
			if (p->peer_host < (uint32_t)c->nhosts &&
			    c->hosts[p->peer_host].id == m->cqe.peer &&
			    !rl_detour_possible_for(c, &p->det, m->cqe.peer))
				p2p_finish(c, p, R2CCL_E_PEER_GONE);
		}
	}
}

/* Every chunk of a send is written (or acknowledged): the operation
 * completes now, since its chunks are copies (proxy buffers) that the
 * transfer keeps until their ACKs, re-sending one lost with a failed
 * connection; its record stays (x NULL) until then. A send ends a wire
 * latency earlier than at its last ACK (issue 21). */
static void send_written(struct r2_comm *c, struct p2pop *p)
{
	if (!p->x || !p->is_send || p->blocked)
		return;
	for (struct sendrec *s = p->sends; s; s = s->next)
		if (!s->sent && !s->acked)
			return;
	r2d_exec_complete(p->x, 0);
	p->x = NULL;
	(void)c;
}

/* A transfer's chunk was rl_sent (or failed: then it goes again, up to
 * max_retries); sent and acknowledged, it is done. Frees m. */
static void p2p_sent(struct r2_comm *c, struct r2_rmsg *m)
{
	struct sendrec *s = (struct sendrec *)(uintptr_t)m->cqe.ctx;
	struct p2pop *p = s->owner;
	uint8_t nack = s->acked ? 0 : s->nack_wait;

	s->nack_wait = 0;
	if (nack == NACK_BUSY) { /* refused by a busy bridge: again from the pump */
		s->posted = false;
		s->sent = false;
		p->blocked = true;
	} else if (nack == NACK_AGAIN) { /* refused by a bridge (p2p_refused) */
		int r = p2p_again(c, p, s);
		if (r < 0)
			p2p_finish(c, p, r == -ENOTCONN ? R2CCL_E_PEER_GONE : r);
	} else if ((m->cqe.status < 0 || rl_sent_on_failed(c, s)) && !s->acked) {
		if (++s->retries > (int)r2_param_int(&c->d->params, P_MAX_RETRIES)) {
			s->posted = false; /* that was its last completion: freed now */
			p2p_finish(c, p, R2CCL_E_NO_PATH);
		} else if (p2p_again(c, p, s) < 0) {
			p2p_finish(c, p, R2CCL_E_NO_PATH);
		}
	} else {
		s->sent = true;
		send_written(c, p);
		if (s->acked) {
			for (struct sendrec **pp = &p->sends; *pp; pp = &(*pp)->next) {
				if (*pp == s) {
					*pp = s->next;
					break;
				}
			}
			rl_sendrec_free(s);
			p->nsends--;
			p2p_check(c, p);
		}
	}
	free(m);
}

/* A bridge refused s (a lingering message it was to pass on, with no rail
 * to its host either, or its queues full), or its receiver did (busy: it
 * cannot keep it yet): s goes again, through another bridge, or with none
 * left the transfer fails. */
static void p2p_refused(struct r2_comm *c, struct p2pop *p, struct sendrec *s,
			const struct r2_chunk_hdr *h, uint64_t from)
{
	int r = rl_detour_refused(c, &p->det, h, from);

	if (r == 0 && rl_nack_defer(s, (h->flags & R2_CHUNK_BUSY) != 0))
		return; /* again at its completion (p2p_sent) */
	if (r == 0 && (h->flags & R2_CHUNK_BUSY)) { /* again from the pump */
		s->posted = false;
		s->sent = false;
		p->blocked = true;
		return;
	}
	if (r < 0 || (r = p2p_again(c, p, s)) < 0)
		p2p_finish(c, p, r == -ENOTCONN ? R2CCL_E_PEER_GONE : r);
}

/* *pp of p is acknowledged: freed now if written, or waiting to go again
 * (no completion is coming: its copy arrived after all), else at its send
 * completion (p2p_sent). Whether it left p's list. */
static bool send_answered(struct p2pop *p, struct sendrec **pp)
{
	struct sendrec *s = *pp;

	s->acked = true;
	if (!s->sent && s->posted)
		return false;
	*pp = s->next;
	rl_sendrec_free(s);
	p->nsends--;
	return true;
}

/* A transfer's chunk was acknowledged; acknowledged and sent, it is done.
 * Frees m. */
static void p2p_acked(struct r2_comm *c, struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	struct p2pop *p = p2p_find(c, h->opseq, true);

	for (struct sendrec **pp = p ? &p->sends : NULL; pp && *pp; pp = &(*pp)->next) {
		struct sendrec *s = *pp;
		/* (an eager message's pieces share off, the count: chunk
		 * tells them apart) */
		if (s->hdr.off != h->off || s->hdr.chunk != h->chunk || s->hdr.dst != h->dst ||
		    s->hdr.step != h->step || s->hdr.src != h->src || s->acked)
			continue;
		if (h->flags & R2_CHUNK_NACK) { /* not an acknowledgement */
			if (rl_sent_to(s) == m->cqe.peer)
				p2p_refused(c, p, s, h, m->cqe.peer);
			break;
		}
		if (send_answered(p, pp))
			p2p_check(c, p);
		break;
	}
	rl_rmsg_free(c->d, m);
}

void rl_p2p_implied(struct r2_comm *c, uint32_t host, uint64_t opseq)
{
	for (struct p2pop *p = c->p2p_ops, *next; p; p = next) {
		next = p->next;
		if (p->peer_host != LINGER || p->seq >= opseq)
			continue;
		for (struct sendrec **pp = &p->sends; *pp;) {
			struct sendrec *s = *pp;
			if (!rl_lazy_unanswered(s) || s->hdr.dst != host) {
				pp = &s->next;
				continue;
			}
			/* (not in the throughput monitor: rails.c) */
			atomic_fetch_add(&c->d->acks_implied_total, 1);
			if (!send_answered(p, pp))
				pp = &s->next;
		}
		p2p_check(c, p);
	}
}

/* A transfer's data chunk: applied to its receive, or stashed until the
 * receive is posted, or dropped as an old duplicate. Takes m. */
static void p2p_data(struct r2_comm *c, struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	struct p2pop *p = p2p_find(c, h->opseq, false);

	if (p) {
		p2p_apply(c->d, p, h, m->cqe.buf);
		rl_rmsg_free(c->d, m);
		p2p_check(c, p);
	} else if (!p2p_old(c, h->opseq)) {
		m->next = c->p2p_stash; /* its receive is not posted yet */
		c->p2p_stash = m;
	} else {
		rl_rmsg_free(c->d, m);
	}
}

/* Handles a transfer's message; true if it was one (and m is consumed). */
bool rl_p2p_handle(struct r2_comm *c, struct r2_rmsg *m)
{
	if (m->cqe.type == R2_TPC_CONN) {
		peer_lost(c, m);
		return false;
	}
	if (m->cqe.type == R2_TPC_ERROR) {
		p2p_conn_error(c, m);
		return false; /* a collective in flight must hear of it too */
	}
	if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_ACK &&
	    !(m->cqe.hdr.opseq & P2P_BIT) && p2p_find(c, m->cqe.hdr.opseq, true)) {
		p2p_acked(c, m); /* a collective's lingering message (rl_p2p_linger) */
		return true;
	}
	if (!p2p_is(m))
		return false;
	if (m->cqe.type == R2_TPC_SEND)
		p2p_sent(c, m);
	else if (m->cqe.hdr.kind == R2_MSG_ACK)
		p2p_acked(c, m);
	else
		p2p_data(c, m);
	return true;
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
			r = rl_chunk_buf(c->d, s, p->buf + s->hdr.off, s->hdr.len);
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
		r = p2p_post(c, p, s);
		if (r == -EAGAIN) {
			p->blocked = true; /* the queue is full: later */
			return 0;
		}
		if (r < 0 && !s->posted)
			return R2CCL_E_NO_PATH;
		rl_inject_dup(c->d, s);
	}
	p->pool_since = 0;
	return 0;
}

int rl_p2p_start(struct r2_comm *c, struct r2_exec *x, uint64_t seq, uint32_t peer_host,
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
		int tenant = r2d_tenants_of(c->d, c->tenant); /* its proxy buffers' quota */
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
			s->tenant = tenant;
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
			rl_rmsg_free(c->d, m);
			continue;
		}
		pp = &m->next;
	}
	p2p_check(c, p);
	return R2_EXEC_PENDING;
}

/* The transfer's other rank left the communicator (destroy, abort: comm.c
 * r2d_comm_member_left). Asked only once some member left. A transfer whose
 * operation already completed (x NULL: a send whose chunks are all written,
 * an eager collective's copies waiting for their ACKs) has no caller to
 * tell: it ends at its ACKs or its deadline. */
static bool p2p_peer_left(struct r2_comm *c, const struct p2pop *p)
{
	int other;
	bool left;

	if (!p->x)
		return false;
	other = p->x->ops[0]->sqe.root;

	pthread_mutex_lock(&c->d->lock);
	left = other >= 0 && other < c->nranks && c->m[other].left &&
	       /* a receive of what it sent before it left: the data comes */
	       !(!p->is_send && r2d_comm_sent_before_left(c, other, p->x->ops[0]->rank,
							  p->seq & P2P_CTR_MASK));
	pthread_mutex_unlock(&c->d->lock);
	return left;
}

/* A collective's messages that are posted but not acknowledged yet, kept
 * after the operation ended (exec_rail_eager.c): a transfer of no
 * operation (x NULL) whose ACKs, send completions and connection errors
 * the executor handles as a send's, pumping the mailbox while idle
 * (r2_p2p_pending); one lost with a failed connection goes again on another
 * rail, or through a bridge as the collective sent it. Takes the n records
 * of s (heap copies of their bytes) and det's refusals. */
int rl_p2p_linger(struct r2_comm *c, uint64_t seq, struct sendrec **s, int n,
		  struct rail_detours *det)
{
	struct p2pop *p = calloc(1, sizeof(*p));
	struct sendrec **tail;

	if (!p)
		return -ENOMEM;
	p->seq = seq;
	p->is_send = true;
	p->peer_host = LINGER;
	p->det = *det; /* the bridges that refused: taken */
	*det = (struct rail_detours){0};
	p->deadline = r2_now_us() + (uint64_t)r2_param_int(&c->d->params, P_OP_TIMEOUT_MS) * 1000;
	tail = &p->sends;
	for (int i = 0; i < n; i++) {
		s[i]->owner = p;
		s[i]->next = NULL;
		*tail = s[i];
		tail = &s[i]->next;
		p->nsends++;
	}
	p->next = c->p2p_ops;
	c->p2p_ops = p;
	return 0;
}

int rl_linger_look_ms = 5;

/* Only collectives' lingering messages in flight: no operation waits. */
static bool only_lingering(const struct r2_comm *c)
{
	for (const struct p2pop *p = c->p2p_ops; p; p = p->next)
		if (p->x)
			return false;
	return true;
}

void r2_p2p_pump(struct r2_comm *c, int timeout_ms, unsigned gen)
{
	/* Acknowledgements of a small operation come a round trip after it,
	 * or with the peer's next collective (exec_rail_ack.c). When nothing
	 * but lingering messages waits for them, their arrival does not wake
	 * this thread (on a small host it takes the CPU the next operation's
	 * threads need): they are taken at the next operation's start
	 * (queue_exec wakes it) or after rl_linger_look_ms; an error on a
	 * connection wakes it at once. */
	bool quiet = timeout_ms > 0 && only_lingering(c);
	struct r2_rmsg *m;

	if (quiet) {
		rl_mbox_quiet(c, true);
		timeout_ms = R2_MIN(timeout_ms, rl_linger_look_ms);
	}
	m = rl_mbox_take_since(c, timeout_ms, rl_exec_spin_us(c->d), gen);
	if (quiet)
		rl_mbox_quiet(c, false);

	/* at most R2_P2P_PUMP_MAX messages a pump: the last one handled is
	 * the last one taken (the rest stay in the mailbox) */
	for (int i = 0; m; i++) {
		if (!rl_p2p_handle(c, m)) {
			if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA &&
			    m->cqe.hdr.opseq > c->coll_seq) {
				m->next = c->deferred; /* for a later collective */
				c->deferred = m;
			} else {
				if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA &&
				    !(m->cqe.hdr.opseq & P2P_BIT))
					/* an ended collective's: delivered twice */
					atomic_fetch_add(&c->d->chunks_dup_dropped, 1);
				if (m->cqe.type == R2_TPC_SEND) {
					struct sendrec *s = (struct sendrec *)(uintptr_t)m->cqe.ctx;
					if (s && rl_is_orphan(s)) {
						rl_sendrec_free(s);
					}
				}
				rl_rmsg_free(c->d, m);
			}
		}
		m = i + 1 < R2_P2P_PUMP_MAX ? rl_mbox_take(c, 0) : NULL;
	}
	r2_p2p_advance(c);
}

void r2_p2p_advance(struct r2_comm *c)
{
	uint64_t now = r2_now_us();
	bool any_left = c->gone_after != UINT64_MAX;
	for (struct p2pop *p = c->p2p_ops, *next; p; p = next) {
		int r = 0;
		next = p->next;
		if (c->abort_err) {
			p2p_finish(c, p, c->abort_err);
		} else if (any_left && p2p_peer_left(c, p)) {
			p2p_finish(c, p, R2CCL_E_PEER_GONE); /* it will not come */
		} else if (now > p->deadline) {
			if (p->pool_since) {
				uint64_t cap, held = r2d_tenants_proxy_use(
					c->d, r2d_tenants_of(c->d, c->tenant), &cap);
				r2_bufpool_note_wait(p->pool_wait, true);
				log_warn("communicator %u: transfer to host %u waited %llu ms for a "
					 "proxy buffer (proxy_pool_max; its tenant holds %llu KiB, "
					 "max_proxy %llu KiB): giving up",
					 c->id, p->peer_host,
					 (unsigned long long)((now - p->pool_since) / 1000),
					 (unsigned long long)(held >> 10),
					 (unsigned long long)(cap >> 10));
				r = -ENOBUFS;
			}
			p2p_finish(c, p, r ? r : -ETIMEDOUT);
		} else if (p->blocked && (r = p2p_fill(c, p)) < 0) {
			p2p_finish(c, p, r);
		}
	}
}

bool r2_p2p_progress(struct r2_comm *c)
{
	if (!r2_p2p_pending(c))
		return false;
	r2_p2p_pump(c, 0, 0);
	return true;
}

void r2_p2p_fail_all(struct r2_comm *c, int status)
{
	while (c->p2p_ops)
		p2p_finish(c, c->p2p_ops, status);
	while (c->p2p_stash) {
		struct r2_rmsg *m = c->p2p_stash;
		c->p2p_stash = m->next;
		rl_rmsg_free(c->d, m);
	}
	while (c->deferred) {
		struct r2_rmsg *m = c->deferred;
		c->deferred = m->next;
		rl_rmsg_free(c->d, m);
	}
	r2_acks_flush(c); /* the peers' lingering messages wait for them */
	rl_acks_free(c);
}
