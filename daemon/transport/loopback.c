// SPDX-License-Identifier: MIT
/*
 * The loopback transport provider: in-memory connections between instances
 * of one process, with faults on command (loopback.h), for unit tests.
 *
 * An instance stands for one rail of one "host": it is found by the address
 * and port it "listens" on (cfg->addr, cfg->port; port 0 gets a free one), so
 * a test opens one instance per host and rail and connects them as the
 * daemon does. Everything is under one process-wide lock; completions go to
 * each instance's queue (tp_common.c) and its eventfd, as with tcp.
 *
 * Semantics, those of tcp.c (read its header comment) where the engine relies
 * on them:
 *  - connect() completes with R2_TPC_CONN on both ends, or R2_TPC_ERROR at
 *    the dialer (-ECONNREFUSED: nothing listens there or another daemon id
 *    answers; -ENETUNREACH: a link is down; what r2_lb_refuse set). The
 *    connection is set up at once, so two daemons never dial each other at
 *    the same time: the second gets -EISCONN, as tcp's connect() does for a
 *    connected peer.
 *  - post_send(): -ENOTCONN without a connection, -EMSGSIZE past either
 *    end's max_msg, -EAGAIN past max_queued while sends are held (one
 *    message is always accepted). The payload is read when the message is
 *    sent: at once, or when a hold is released; R2_TPC_SEND (status 0)
 *    follows, and only then may the caller reuse buf. Sending is not
 *    delivering: a dropped message has its SEND completion too.
 *  - R2_TPC_RECV carries the header and a buffer of the provider (NULL for a
 *    0-byte payload) to give back with release(). One connection delivers
 *    in order unless a reorder or duplicate rule says otherwise.
 *  - A failed connection (r2_lb_fail, link down, the peer's disconnect() or
 *    close()) reports R2_TPC_ERROR once on each end whose CONN was reported;
 *    its held sends complete with R2_TPC_SEND status < 0 and its messages in
 *    flight are lost. disconnect() reports no ERROR locally (held sends fail
 *    with -ECONNABORTED); the other end sees -ECONNRESET. close() drops
 *    everything without completions.
 *  - stream: messages take the connection's cfg->streams streams in turn
 *    (the index is reported; order is kept across them all).
 * Delays are served by one timer thread, started with the first delayed
 * message and joined when the last instance closes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "loopback_int.h"
#include "util.h"

struct lb_global lb_g = { .lock = PTHREAD_MUTEX_INITIALIZER };
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void g_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&lb_g.cond, &a);
	pthread_condattr_destroy(&a);
	lb_g.next_port = LB_FIRST_PORT;
}

bool lb_is(const struct r2_tp *tp)
{
	for (const struct r2_tp *t = lb_g.tps; t; t = t->next)
		if (t == tp)
			return true;
	return false;
}

/* ---- buffers ---- */

static void *buf_get(uint32_t len)
{
	uint8_t *p = malloc(LB_BUF_HDR + (size_t)len);

	if (!p)
		return NULL;
	*(uint32_t *)p = LB_BUF_MAGIC;
	return p + LB_BUF_HDR;
}

static void buf_put(void *buf)
{
	uint32_t *h;

	if (!buf)
		return;
	h = (uint32_t *)((uint8_t *)buf - LB_BUF_HDR);
	if (*h != LB_BUF_MAGIC) {
		log_err("loopback: release of a buffer that is not the transport's (%p)", buf);
		return;
	}
	*h = 0;
	free(h);
}

static void cq_release(void *arg, void *buf)
{
	(void)arg;
	buf_put(buf);
}

static void msg_free(struct lbmsg *m)
{
	buf_put(m->copy);
	free(m);
}

/* ---- rules ---- */

struct lbrule *lb_rule_of(struct r2_tp *tp, uint64_t peer)
{
	struct lbrule *any = NULL;

	for (int i = 0; i < LB_MAX_RULES; i++) {
		struct lbrule *r = &tp->rules[i];
		if (r->used && r->peer == peer)
			return r;
		if (r->used && r->peer == R2_LB_ANY_PEER)
			any = r;
	}
	return any;
}

struct lbrule *lb_rule_get(struct r2_tp *tp, uint64_t peer)
{
	struct lbrule *free_r = NULL;

	for (int i = 0; i < LB_MAX_RULES; i++) {
		struct lbrule *r = &tp->rules[i];
		if (r->used && r->peer == peer)
			return r;
		if (!r->used && !free_r)
			free_r = r;
	}
	if (free_r) {
		memset(free_r, 0, sizeof(*free_r));
		free_r->used = true;
		free_r->peer = peer;
	}
	return free_r;
}

static void count_down(uint32_t *n)
{
	if (*n != R2_LB_ALL)
		(*n)--;
}

/* ---- delivery ---- */

static void deliver_now(struct lbmsg *m)
{
	struct lbpeer *d = m->dst;
	struct r2_tp_cqe e = {
		.type = R2_TPC_RECV,
		.peer = d->h.id,
		.conn = (struct r2_tp_conn *)d,
		.hdr = m->hdr,
		.buf = m->copy,
		.stream = m->stream,
	};

	r2_tp_count(&d->tp->b.ctr.rx_bytes, R2_TP_HDR_SIZE + (uint64_t)m->hdr.len);
	r2_tp_cq_push(&d->tp->b.cmpl, &e);
	free(m);
}

static void *timer_main(void *arg)
{
	unsigned gen = (unsigned)(uintptr_t)arg;

	pthread_mutex_lock(&lb_g.lock);
	while (lb_g.timer_gen == gen) {
		struct lbmsg *m = lb_g.flight;
		struct lbsendc *c = lb_g.late;
		uint64_t now = r2_tp_now_ns(), due;

		if (m && m->due <= now) {
			lb_g.flight = m->next;
			lb_g.nflight--;
			m->dst->nflight--;
			deliver_now(m);
			continue;
		}
		if (c && c->due <= now) {
			lb_g.late = c->next;
			r2_tp_cq_push(&c->tp->b.cmpl, &c->e);
			free(c);
			continue;
		}
		if (!m && !c) {
			pthread_cond_wait(&lb_g.cond, &lb_g.lock);
			continue;
		}
		due = m && (!c || m->due < c->due) ? m->due : c->due;
		struct timespec ts = { .tv_sec = (time_t)(due / 1000000000ull),
				       .tv_nsec = (long)(due % 1000000000ull) };
		pthread_cond_timedwait(&lb_g.cond, &lb_g.lock, &ts);
	}
	pthread_mutex_unlock(&lb_g.lock);
	return NULL;
}

static int timer_start(void)
{
	if (!lb_g.timer_on) {
		if (r2_thread_create(&lb_g.timer, timer_main, (void *)(uintptr_t)lb_g.timer_gen))
			return -EAGAIN;
		pthread_setname_np(lb_g.timer, "r2-loopback");
		lb_g.timer_on = true;
	}
	return 0;
}

static int flight_add(struct lbmsg *m)
{
	struct lbmsg **pp = &lb_g.flight;

	if (timer_start() < 0)
		return -EAGAIN;
	while (*pp && (*pp)->due <= m->due)
		pp = &(*pp)->next;
	m->next = *pp;
	*pp = m;
	lb_g.nflight++;
	m->dst->nflight++;
	pthread_cond_broadcast(&lb_g.cond);
	return 0;
}

/* A message reaches the other end: now, or by the timer when it is delayed
 * or an earlier one to that end still is. */
static void route(struct lbmsg *m, uint32_t delay_us)
{
	struct lbpeer *d = m->dst;
	uint64_t now = r2_tp_now_ns();

	m->due = now + (uint64_t)delay_us * 1000u;
	if (m->due < d->last_due)
		m->due = d->last_due;
	d->last_due = m->due;
	if (m->due <= now && d->nflight == 0) {
		deliver_now(m);
		return;
	}
	if (flight_add(m) < 0) {
		log_err("loopback: no timer thread, message delivered at once");
		deliver_now(m);
	}
}

static struct lbmsg *msg_clone(const struct lbmsg *m)
{
	struct lbmsg *c = malloc(sizeof(*c));

	if (!c)
		return NULL;
	*c = *m;
	c->next = NULL;
	c->copy = NULL;
	if (m->hdr.len) {
		c->copy = buf_get(m->hdr.len);
		if (!c->copy) {
			free(c);
			return NULL;
		}
		memcpy(c->copy, m->copy, m->hdr.len);
	}
	return c;
}

/* Into the reorder window of p; the n-th one sends the window, newest
 * first. */
static void reorder_add(struct lbpeer *p, struct lbrule *r, struct lbmsg *m)
{
	m->next = p->ro;
	p->ro = m;
	lb_g.nflight++;
	count_down(&r->reorder);
	if (r->reorder)
		return;
	while (p->ro) {
		struct lbmsg *x = p->ro;
		p->ro = x->next;
		lb_g.nflight--;
		route(x, r->delay_us);
	}
}

static void forward(struct lbpeer *p, struct lbrule *r, struct lbmsg *m)
{
	if (r && r->reorder)
		reorder_add(p, r, m);
	else
		route(m, r ? r->delay_us : 0);
}

/* e to tp's completions: now, or late by the rule r (r2_lb_delay_sendc). */
static void sendc_push(struct r2_tp *tp, const struct lbrule *r, const struct r2_tp_cqe *e)
{
	struct lbsendc *c = NULL, **pp = &lb_g.late;

	if (r && r->sendc_delay_us && (c = calloc(1, sizeof(*c))) && timer_start() < 0) {
		free(c);
		c = NULL;
	}
	if (!c) { /* at once (no rule, or no memory or timer for it) */
		r2_tp_cq_push(&tp->b.cmpl, e);
		return;
	}
	c->due = r2_tp_now_ns() + (uint64_t)r->sendc_delay_us * 1000u;
	c->tp = tp;
	c->e = *e;
	c->e.conn = NULL; /* the connection may be gone by then */
	while (*pp && (*pp)->due <= c->due)
		pp = &(*pp)->next;
	c->next = *pp;
	*pp = c;
	pthread_cond_broadcast(&lb_g.cond);
}

/* The message leaves p's end: SEND completion, then the rules of the way. */
static void transmit(struct lbpeer *p, struct lbmsg *m)
{
	struct r2_tp *tp = p->tp;
	struct lbrule *r = lb_rule_of(tp, p->h.id);
	uint64_t sz = R2_TP_HDR_SIZE + (uint64_t)m->hdr.len;
	struct r2_tp_cqe e = {
		.type = R2_TPC_SEND,
		.peer = p->h.id,
		.conn = (struct r2_tp_conn *)p,
		.hdr = m->hdr,
		.buf = (void *)m->src,
		.ctx = m->ctx,
	};
	int status = 0;

	m->stream = (int)(p->rr++ % (unsigned)tp->cfg.streams);
	e.stream = m->stream;
	m->dst = p->remote;
	if (m->hdr.len) {
		m->copy = buf_get(m->hdr.len);
		if (m->copy)
			memcpy(m->copy, m->src, m->hdr.len);
		else
			status = -ENOMEM;
	}
	e.status = status;
	if (!status)
		r2_tp_count(&tp->b.ctr.tx_bytes, sz);
	sendc_push(tp, r, &e);
	bool ctrl = r && r->drop_match && m->hdr.kind == R2_MSG_CTRL &&
		    m->hdr.aux == r->drop_ctrl_type && m->copy &&
		    r->drop_match(m->copy, m->hdr.len, r->drop_arg);
	if (status || (r && r->drop) || ctrl) {
		if (!status && r->drop)
			count_down(&r->drop);
		msg_free(m);
		return;
	}
	struct lbmsg *twin = NULL;
	if (r && r->dup) {
		count_down(&r->dup);
		twin = msg_clone(m);
	}
	forward(p, r, m);
	if (twin)
		forward(p, r, twin);
}

void lb_flush_held(struct lbpeer *p)
{
	while (p->sq_head) {
		struct lbmsg *m = p->sq_head;
		p->sq_head = m->next;
		if (!p->sq_head)
			p->sq_tail = NULL;
		p->queued -= R2_TP_HDR_SIZE + (uint64_t)m->hdr.len;
		m->next = NULL;
		transmit(p, m);
	}
}

/* ---- connections (under lb_g.lock) ---- */

struct lbpeer *lb_peer_find(struct r2_tp *tp, uint64_t id)
{
	return (struct lbpeer *)r2_tp_peer_find(&tp->b.peers, id);
}

static struct lbpeer *peer_new(struct r2_tp *tp, uint64_t id)
{
	struct lbpeer *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->tp = tp;
	r2_tp_peer_insert(&tp->b.peers, &p->h, id);
	return p;
}

/* Drops what is in flight to p (it can no longer arrive). */
static void purge_to(struct lbpeer *p)
{
	for (struct lbmsg **pp = &lb_g.flight; *pp && p->nflight;) {
		struct lbmsg *m = *pp;
		if (m->dst != p) {
			pp = &m->next;
			continue;
		}
		*pp = m->next;
		lb_g.nflight--;
		p->nflight--;
		msg_free(m);
	}
}

/* One end of a failed connection: ERROR when report and its CONN was
 * reported; held sends complete with status (close: silently); what was in
 * flight to it or held for reordering from it is lost. */
static void end_fail(struct lbpeer *p, int status, bool report, bool silent)
{
	struct r2_tp *tp = p->tp;

	if (p->h.failed)
		return;
	p->h.failed = true;
	r2_tp_peer_unlink(&tp->b.peers, &p->h);
	if (report && !silent && p->conn_reported)
		r2_tp_cq_push_simple(&tp->b.cmpl, R2_TPC_ERROR, status, p->h.id,
				     (struct r2_tp_conn *)p);
	while (p->sq_head) {
		struct lbmsg *m = p->sq_head;
		p->sq_head = m->next;
		if (!silent) {
			struct r2_tp_cqe e = {
				.type = R2_TPC_SEND, .status = status, .peer = p->h.id,
				.conn = (struct r2_tp_conn *)p, .hdr = m->hdr,
				.buf = (void *)m->src, .ctx = m->ctx, .stream = -1,
			};
			r2_tp_cq_push(&tp->b.cmpl, &e);
		}
		msg_free(m);
	}
	while (p->ro) {
		struct lbmsg *m = p->ro;
		p->ro = m->next;
		lb_g.nflight--;
		msg_free(m);
	}
	purge_to(p);
}

/* The connection of p fails: p's end with status (ERROR when report), the
 * other end with remote_status (ERROR always). */
void lb_conn_fail(struct lbpeer *p, int status, bool report, int remote_status, bool silent)
{
	struct lbpeer *r = p->remote;

	p->remote = NULL;
	if (r) {
		r->remote = NULL;
		end_fail(r, remote_status, true, false);
	}
	end_fail(p, status, report, silent);
	if (r)
		free(r);
	free(p);
}

static void peer_fail_hook(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report)
{
	(void)tp;
	lb_conn_fail((struct lbpeer *)p, status, report, -ECONNRESET, false);
}

void lb_fail_all(struct r2_tp *tp, int status, bool report, int remote_status, bool silent)
{
	while (tp->b.peers.all)
		lb_conn_fail((struct lbpeer *)tp->b.peers.all, status, report, remote_status, silent);
}

/* ---- operations ---- */

static struct r2_tp *find_listener(struct in_addr addr, uint16_t port)
{
	for (struct r2_tp *t = lb_g.tps; t; t = t->next)
		if (t->cfg.addr.s_addr == addr.s_addr && t->b.port == port)
			return t;
	return NULL;
}

static int lb_open(const struct r2_tp_config *cfg, struct r2_tp **out)
{
	struct r2_tp *tp;
	int ret = r2_tp_alloc(cfg, out, sizeof(*tp), &tp);

	if (ret < 0)
		return ret;
	pthread_once(&g_once, g_init);
	tp->cfg = *cfg;
	tp->cfg.ifname[sizeof(tp->cfg.ifname) - 1] = 0;
	if (tp->cfg.streams <= 0)
		tp->cfg.streams = 1;
	if (!tp->cfg.max_msg)
		tp->cfg.max_msg = LB_DEFAULT_MAX_MSG;
	if (!tp->cfg.max_queued)
		tp->cfg.max_queued = LB_DEFAULT_MAX_QUEUED;
	ret = r2_tp_base_init(&tp->b, "loopback", cq_release, tp, peer_fail_hook);
	if (ret < 0)
		goto out;
	pthread_mutex_lock(&lb_g.lock);
	tp->b.port = cfg->port;
	while (!tp->b.port && find_listener(cfg->addr, lb_g.next_port))
		lb_g.next_port++;
	if (!tp->b.port)
		tp->b.port = lb_g.next_port++;
	if (find_listener(cfg->addr, tp->b.port))
		ret = -EADDRINUSE;
	else {
		tp->next = lb_g.tps;
		lb_g.tps = tp;
	}
	pthread_mutex_unlock(&lb_g.lock);
out:
	if (ret < 0) {
		r2_tp_base_fini(&tp->b);
		free(tp);
		tp = NULL;
	}
	*out = tp;
	return ret;
}

static void lb_close(struct r2_tp *tp)
{
	bool join = false;
	pthread_t timer;

	if (!tp)
		return;
	pthread_mutex_lock(&lb_g.lock);
	lb_fail_all(tp, -ECONNABORTED, false, -ECONNRESET, true);
	for (struct lbsendc **pp = &lb_g.late; *pp;) {
		struct lbsendc *c = *pp;
		if (c->tp != tp) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		free(c);
	}
	for (struct r2_tp **pp = &lb_g.tps; *pp; pp = &(*pp)->next)
		if (*pp == tp) {
			*pp = tp->next;
			break;
		}
	if (!lb_g.tps && lb_g.timer_on) {
		lb_g.timer_on = false;
		lb_g.timer_gen++;
		timer = lb_g.timer;
		join = true;
		pthread_cond_broadcast(&lb_g.cond);
	}
	pthread_mutex_unlock(&lb_g.lock);
	if (join)
		pthread_join(timer, NULL);
	r2_tp_base_fini(&tp->b);
	free(tp);
}

/* Why a connect from tp to addr:port (meaning daemon peer_id) fails; 0 if
 * it does not. */
static int dial_status(struct r2_tp *tp, struct r2_tp *t, uint64_t peer_id)
{
	if (tp->link_down || (t && t->link_down))
		return -ENETUNREACH;
	if (!t || t == tp || t->cfg.self_id != peer_id)
		return -ECONNREFUSED;
	return t->refuse;
}

static int lb_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port)
{
	struct lbpeer *a, *b;
	struct r2_tp *t;
	int st, ret = 0;

	pthread_mutex_lock(&lb_g.lock);
	a = lb_peer_find(tp, peer_id);
	if (a && !a->h.failed) {
		ret = -EISCONN;
		goto out;
	}
	t = find_listener(addr, port);
	st = dial_status(tp, t, peer_id);
	if (st) {
		r2_tp_cq_push_simple(&tp->b.cmpl, R2_TPC_ERROR, st, peer_id, NULL);
		goto out;
	}
	a = peer_new(tp, peer_id);
	b = a ? peer_new(t, tp->cfg.self_id) : NULL;
	if (!b) {
		if (a)
			end_fail(a, 0, false, true);
		free(a);
		ret = -ENOMEM;
		goto out;
	}
	a->remote = b;
	b->remote = a;
	a->max_msg = t->cfg.max_msg;
	b->max_msg = tp->cfg.max_msg;
	a->conn_reported = b->conn_reported = true;
	r2_tp_cq_push_simple(&t->b.cmpl, R2_TPC_CONN, 0, b->h.id, (struct r2_tp_conn *)b);
	r2_tp_cq_push_simple(&tp->b.cmpl, R2_TPC_CONN, 0, a->h.id, (struct r2_tp_conn *)a);
out:
	pthread_mutex_unlock(&lb_g.lock);
	return ret;
}

static int lb_disconnect(struct r2_tp *tp, uint64_t peer_id)
{
	struct lbpeer *p;
	int ret = 0;

	pthread_mutex_lock(&lb_g.lock);
	p = lb_peer_find(tp, peer_id);
	if (p && !p->h.failed)
		lb_conn_fail(p, -ECONNABORTED, false, -ECONNRESET, false);
	else
		ret = -ENOTCONN;
	pthread_mutex_unlock(&lb_g.lock);
	return ret;
}

static int lb_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle)
{
	(void)tp;
	(void)len;
	if (!handle)
		return -EINVAL;
	*handle = addr;
	return 0;
}

static int lb_dereg_mem(struct r2_tp *tp, void *handle)
{
	(void)tp;
	(void)handle;
	return 0;
}

/* Whether p's sends are held: its rule says so, or earlier ones still are
 * (order is kept). */
static bool held(struct lbpeer *p)
{
	struct lbrule *r = lb_rule_of(p->tp, p->h.id);

	return p->sq_head || (r && r->hold);
}

static int lb_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
			const void *buf, uint64_t ctx)
{
	struct lbmsg *m;
	struct lbpeer *p;
	uint64_t sz;
	int ret = 0;

	ret = r2_tp_send_check(hdr, buf, tp->cfg.max_msg);
	if (ret < 0)
		return ret;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->hdr = *hdr;
	m->hdr.magic = R2_CHUNK_MAGIC;
	m->src = buf;
	m->ctx = ctx;
	sz = R2_TP_HDR_SIZE + (uint64_t)hdr->len;
	pthread_mutex_lock(&lb_g.lock);
	p = lb_peer_find(tp, peer_id);
	if (!p || p->h.failed || !p->conn_reported || !p->remote)
		ret = -ENOTCONN;
	else if (hdr->len > p->max_msg)
		ret = -EMSGSIZE;
	else if (held(p) && p->queued > 0 && p->queued + sz > tp->cfg.max_queued)
		ret = -EAGAIN;
	if (ret < 0) {
		pthread_mutex_unlock(&lb_g.lock);
		free(m);
		return ret;
	}
	if (held(p)) {
		if (p->sq_tail)
			p->sq_tail->next = m;
		else
			p->sq_head = m;
		p->sq_tail = m;
		p->queued += sz;
	} else {
		transmit(p, m);
	}
	pthread_mutex_unlock(&lb_g.lock);
	return 0;
}

/* Whether a send still reads buf: held, or its SEND completion not given
 * yet (delayed): the caller may not reuse buf until then (r2_lb_misuse). */
static bool send_reads(const void *buf)
{
	for (struct r2_tp *t = lb_g.tps; t; t = t->next)
		for (struct r2_tp_peer *hp = t->b.peers.all; hp; hp = hp->anext)
			for (struct lbmsg *m = ((struct lbpeer *)hp)->sq_head; m; m = m->next)
				if (m->src == buf)
					return true;
	for (struct lbsendc *c = lb_g.late; c; c = c->next)
		if (c->e.buf == buf)
			return true;
	return false;
}

static void lb_release(struct r2_tp *tp, void *buf)
{
	(void)tp;
	if (buf) {
		pthread_mutex_lock(&lb_g.lock);
		if (send_reads(buf)) {
			lb_g.misuse++;
			log_err("loopback: release of a buffer a send still reads (%p)", buf);
		}
		pthread_mutex_unlock(&lb_g.lock);
	}
	buf_put(buf);
}

static int lb_link_state(struct r2_tp *tp)
{
	int up;

	pthread_mutex_lock(&lb_g.lock);
	up = tp->link_down ? 0 : 1;
	pthread_mutex_unlock(&lb_g.lock);
	return up;
}

const struct r2_tp_ops r2_tp_loopback_ops = {
	.name = "loopback",
	.caps = R2_TP_CAP_ZERO_COPY,
	.open = lb_open,
	.close = lb_close,
	.listen_port = r2_tp_base_listen_port,
	.connect = lb_connect,
	.disconnect = lb_disconnect,
	.reg_mem = lb_reg_mem,
	.dereg_mem = lb_dereg_mem,
	.post_send = lb_post_send,
	.release = lb_release,
	.poll = r2_tp_base_poll,
	.event_fd = r2_tp_base_event_fd,
	.link_state = lb_link_state,
	.stats = r2_tp_base_stats,
};

