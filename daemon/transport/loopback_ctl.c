// SPDX-License-Identifier: MIT
/*
 * The loopback provider's fault controls (loopback.h): rules on the
 * messages an instance sends to a peer (drop, delay, reorder, duplicate,
 * hold, late send completions), and failures of its connections and link.
 * The provider itself, and what each rule does to a message, is in
 * loopback.c.
 */
#include <errno.h>
#include <pthread.h>

#include "loopback_int.h"

/* Runs set on the rule of (tp, peer) under the lock. */
static int with_rule(struct r2_tp *tp, uint64_t peer, void (*set)(struct lbrule *, uint64_t),
		     uint64_t v)
{
	struct lbrule *r;
	int ret = 0;

	pthread_mutex_lock(&lb_g.lock);
	if (!lb_is(tp))
		ret = -EINVAL;
	else if (!(r = lb_rule_get(tp, peer)))
		ret = -ENOSPC;
	else
		set(r, v);
	pthread_mutex_unlock(&lb_g.lock);
	return ret;
}

static void set_drop(struct lbrule *r, uint64_t v) { r->drop = (uint32_t)v; }
static void set_delay(struct lbrule *r, uint64_t v) { r->delay_us = (uint32_t)v; }
static void set_reorder(struct lbrule *r, uint64_t v) { r->reorder = (uint32_t)v; }
static void set_dup(struct lbrule *r, uint64_t v) { r->dup = (uint32_t)v; }
static void set_sendc(struct lbrule *r, uint64_t v) { r->sendc_delay_us = (uint32_t)v; }

int r2_lb_drop(struct r2_tp *tp, uint64_t peer, uint32_t n)
{
	return with_rule(tp, peer, set_drop, n);
}

struct drop_ctrl {
	uint32_t type;
	r2_lb_match_fn match;
	void *arg;
};

/* v: a struct drop_ctrl's address */
static void set_drop_ctrl(struct lbrule *r, uint64_t v)
{
	const struct drop_ctrl *x = (const struct drop_ctrl *)(uintptr_t)v;

	r->drop_ctrl_type = x->type;
	r->drop_match = x->match;
	r->drop_arg = x->arg;
}

int r2_lb_drop_ctrl(struct r2_tp *tp, uint64_t peer, uint32_t type, r2_lb_match_fn match,
		    void *arg)
{
	struct drop_ctrl x = { type, match, arg };

	return with_rule(tp, peer, set_drop_ctrl, (uint64_t)(uintptr_t)&x);
}

int r2_lb_delay(struct r2_tp *tp, uint64_t peer, uint32_t delay_us)
{
	return with_rule(tp, peer, set_delay, delay_us);
}

int r2_lb_delay_sendc(struct r2_tp *tp, uint64_t peer, uint32_t delay_us)
{
	return with_rule(tp, peer, set_sendc, delay_us);
}

int r2_lb_reorder(struct r2_tp *tp, uint64_t peer, uint32_t n)
{
	return with_rule(tp, peer, set_reorder, n);
}

int r2_lb_duplicate(struct r2_tp *tp, uint64_t peer, uint32_t n)
{
	return with_rule(tp, peer, set_dup, n);
}

int r2_lb_hold(struct r2_tp *tp, uint64_t peer, bool hold)
{
	struct lbrule *r;
	int ret = 0;

	pthread_mutex_lock(&lb_g.lock);
	if (!lb_is(tp)) {
		ret = -EINVAL;
	} else if (!(r = lb_rule_get(tp, peer))) {
		ret = -ENOSPC;
	} else {
		r->hold = hold;
		for (struct r2_tp_peer *q = tp->b.peers.all; q && !hold; q = q->anext)
			if (peer == R2_LB_ANY_PEER || q->id == peer)
				if (!lb_rule_of(tp, q->id)->hold)
					lb_flush_held((struct lbpeer *)q);
	}
	pthread_mutex_unlock(&lb_g.lock);
	return ret;
}

int64_t r2_lb_held(struct r2_tp *tp, uint64_t peer)
{
	struct lbpeer *p;
	int64_t n;

	pthread_mutex_lock(&lb_g.lock);
	p = lb_is(tp) ? lb_peer_find(tp, peer) : NULL;
	n = !lb_is(tp) ? -EINVAL : !p ? -ENOTCONN : (int64_t)p->queued;
	pthread_mutex_unlock(&lb_g.lock);
	return n;
}

int r2_lb_fail(struct r2_tp *tp, uint64_t peer, int status)
{
	struct lbpeer *p;
	int ret = 0;

	pthread_mutex_lock(&lb_g.lock);
	p = lb_is(tp) ? lb_peer_find(tp, peer) : NULL;
	if (!lb_is(tp))
		ret = -EINVAL;
	else if (!p || p->h.failed)
		ret = -ENOTCONN;
	else
		lb_conn_fail(p, status, true, status, false);
	pthread_mutex_unlock(&lb_g.lock);
	return ret;
}

int r2_lb_link(struct r2_tp *tp, bool up)
{
	int ret = 0;

	pthread_mutex_lock(&lb_g.lock);
	if (!lb_is(tp)) {
		ret = -EINVAL;
	} else {
		tp->link_down = !up;
		if (!up)
			lb_fail_all(tp, -ENETDOWN, true, -ENETDOWN, false);
	}
	pthread_mutex_unlock(&lb_g.lock);
	return ret;
}

int r2_lb_refuse(struct r2_tp *tp, int status)
{
	int ret = 0;

	pthread_mutex_lock(&lb_g.lock);
	if (lb_is(tp))
		tp->refuse = status;
	else
		ret = -EINVAL;
	pthread_mutex_unlock(&lb_g.lock);
	return ret;
}

unsigned r2_lb_misuse(void)
{
	unsigned n;

	pthread_mutex_lock(&lb_g.lock);
	n = lb_g.misuse;
	pthread_mutex_unlock(&lb_g.lock);
	return n;
}

int r2_lb_in_flight(void)
{
	int n;

	pthread_mutex_lock(&lb_g.lock);
	n = lb_g.nflight;
	pthread_mutex_unlock(&lb_g.lock);
	return n;
}
