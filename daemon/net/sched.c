/* SPDX-License-Identifier: MIT */
/*
 * The tenants' scheduler (sched.h): tenant table, per-rail queues, fair
 * queueing across the rails, token buckets, the latency class's bounded priority.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "util.h"

#include "net/sched.h"

/* ---- policies ---- */

const char *r2_tclass_name(enum r2_tclass c)
{
	return c == R2_TCLASS_LATENCY ? "latency" : "bulk";
}

void r2_tenant_policy_default(struct r2_tenant_policy *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name ? name : "");
	p->weight = 1;
	p->cls = R2_TCLASS_BULK;
}

/* "300M" -> 300000000 (decimal: network rates); "0" -> 0. */
static int parse_rate(const char *v, uint64_t *out)
{
	char *end;
	double x;
	static const char units[] = "KMGT";
	const char *u;

	errno = 0;
	x = strtod(v, &end);
	if (end == v || errno || x < 0)
		return -EINVAL;
	if (*end && (u = strchr(units, toupper((unsigned char)*end))) != NULL) {
		for (long k = u - units + 1; k > 0; k--)
			x *= 1000.0;
		end++;
	}
	if (*end && strcasecmp(end, "bit") && strcasecmp(end, "bps") && strcasecmp(end, "bit/s"))
		return -EINVAL;
	if (x > 1e15)
		return -ERANGE;
	*out = (uint64_t)(x + 0.5);
	return 0;
}

static int parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (end == v || *end || errno || x < lo || x > hi || v[0] == '-')
		return -EINVAL;
	*out = (uint32_t)x;
	return 0;
}

/* A byte count (K, M, G, T binary); *out kept on error. */
static int parse_bytes(const char *v, uint64_t *out)
{
	int64_t b;
	int r = r2_parse_size(v, &b);

	if (r < 0 || b < 0)
		return -EINVAL;
	*out = (uint64_t)b;
	return 0;
}

int r2_tenant_policy_parse(struct r2_tenant_policy *p, const char *spec, char *err,
			   size_t errlen)
{
	char buf[512], *save = NULL, *tok;

	if (strlen(spec) >= sizeof(buf)) {
		snprintf(err, errlen, "tenant policy too long");
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", spec);
	for (tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(tok, '=');
		const char *k = tok, *v;
		int r = 0;

		if (!eq) {
			snprintf(err, errlen, "\"%.64s\": expected key=value", tok);
			return -EINVAL;
		}
		*eq = 0;
		v = eq + 1;
		if (!strcmp(k, "weight")) {
			r = parse_u32(v, 1, 10000, &p->weight);
		} else if (!strcmp(k, "rate")) {
			r = parse_rate(v, &p->rate_bps);
		} else if (!strcmp(k, "burst")) {
			r = parse_bytes(v, &p->burst_bytes);
		} else if (!strcmp(k, "class")) {
			if (!strcmp(v, "bulk"))
				p->cls = R2_TCLASS_BULK;
			else if (!strcmp(v, "latency"))
				p->cls = R2_TCLASS_LATENCY;
			else
				r = -EINVAL;
		} else if (!strcmp(k, "cgroup")) {
			if (v[0] != '/' || strlen(v) >= sizeof(p->cgroup))
				r = -EINVAL;
			else
				snprintf(p->cgroup, sizeof(p->cgroup), "%s", v);
		} else if (!strcmp(k, "max_sessions")) {
			r = parse_u32(v, 0, 1u << 24, &p->max_sessions);
		} else if (!strcmp(k, "max_comms")) {
			r = parse_u32(v, 0, 1u << 24, &p->max_comms);
		} else if (!strcmp(k, "max_regs")) {
			r = parse_u32(v, 0, 1u << 24, &p->max_regs);
		} else if (!strcmp(k, "max_mem")) {
			r = parse_bytes(v, &p->max_mem);
		} else if (!strcmp(k, "max_req_rate")) {
			uint32_t x = 0;
			r = parse_u32(v, 0, 1u << 24, &x);
			if (r == 0 && x > 0 && x < 10)
				r = -EINVAL; /* 100 ms windows: 0 (none) or at least 10/s */
			p->max_req_rate = r == 0 ? x : p->max_req_rate;
		} else if (!strcmp(k, "max_pending_ops")) {
			r = parse_u32(v, 0, 1u << 24, &p->max_pending_ops);
		} else if (!strcmp(k, "max_proxy")) {
			r = parse_bytes(v, &p->max_proxy);
		} else {
			snprintf(err, errlen,
				 "unknown tenant key \"%.32s\" (weight, rate, burst, class, cgroup, "
				 "max_sessions, max_comms, max_regs, max_mem, max_req_rate, "
				 "max_pending_ops, max_proxy)",
				 k);
			return -EINVAL;
		}
		if (r < 0) {
			snprintf(err, errlen, "%s: bad value \"%.64s\"", k, v);
			return -EINVAL;
		}
	}
	return 0;
}

int r2_tenant_policy_format(const struct r2_tenant_policy *p, char *buf, size_t len)
{
	return snprintf(buf, len,
			"%s = cgroup=%s weight=%" PRIu32 " rate=%" PRIu64 " class=%s burst=%" PRIu64
			" max_sessions=%" PRIu32 " max_comms=%" PRIu32 " max_regs=%" PRIu32
			" max_mem=%" PRIu64 " max_req_rate=%" PRIu32 " max_pending_ops=%" PRIu32
			" max_proxy=%" PRIu64,
			p->name, p->cgroup[0] ? p->cgroup : "-", p->weight, p->rate_bps,
			r2_tclass_name(p->cls), p->burst_bytes, p->max_sessions, p->max_comms,
			p->max_regs, p->max_mem, p->max_req_rate, p->max_pending_ops, p->max_proxy);
}

/* ---- the table ---- */

static void reclass(struct r2_sched *s, int t, enum r2_tclass from, enum r2_tclass to);

void r2_sched_init(struct r2_sched *s, uint32_t quantum, uint64_t prio_run)
{
	memset(s, 0, sizeof(*s));
	s->enabled = true;
	s->quantum = quantum ? quantum : 64 << 10;
	s->prio_run = prio_run ? prio_run : 4 << 20;
	for (int r = 0; r < R2_SCHED_MAX_RAILS; r++) {
		for (int t = 0; t < R2_SCHED_MAX_TENANTS; t++)
			s->rail[r].q[t].tail = &s->rail[r].q[t].head;
		s->fifo_tail[r] = &s->fifo_head[r];
	}
	r2_tenant_policy_default(&s->t[0].pol, "default");
	s->t[0].used = true;
	s->ntenants = 1;
}

uint64_t r2_sched_rate(const struct r2_sched *s, int t)
{
	const struct r2_sched_tenant *x = &s->t[t];
	uint64_t r = x->pol.rate_bps;

	if (x->limit_bps && (!r || x->limit_bps < r))
		r = x->limit_bps;
	return r;
}

static uint64_t burst_of(uint64_t rate_bps, uint64_t set)
{
	if (set)
		return set;
	return R2_MAX(rate_bps / 8 / 50, 1); /* 2% of one second's bytes */
}

uint64_t r2_sched_burst(const struct r2_sched *s, int t)
{
	return burst_of(r2_sched_rate(s, t), s->t[t].pol.burst_bytes);
}

/* Buckets start full; a change keeps what they hold, within the new cap. */
static void buckets_reset(struct r2_sched_tenant *x, uint64_t burst, uint64_t rburst,
			  uint64_t now_us)
{
	if (!x->tb_us) {
		x->tokens = (double)burst;
		x->rtokens = (double)rburst;
	}
	x->tokens = R2_MIN(x->tokens, (double)burst);
	x->rtokens = R2_MIN(x->rtokens, (double)rburst);
	x->tb_us = now_us ? now_us : 1;
}

int r2_sched_find(const struct r2_sched *s, const char *name)
{
	for (int i = 0; i < R2_SCHED_MAX_TENANTS; i++)
		if (s->t[i].used && !strcmp(s->t[i].pol.name, name))
			return i;
	return -ENOENT;
}

static void reclamp_all(struct r2_sched *s, uint64_t now_us);

static void refresh(struct r2_sched *s, int t, uint64_t now_us)
{
	struct r2_sched_tenant *x = &s->t[t];

	buckets_reset(x, r2_sched_burst(s, t), burst_of(x->reserve_bps, 0), now_us);
}

int r2_sched_policy_set(struct r2_sched *s, const struct r2_tenant_policy *p, uint64_t now_us)
{
	int i = r2_sched_find(s, p->name);

	if (i < 0) {
		if (s->ntenants >= R2_SCHED_MAX_TENANTS - 1)
			return -ENOSPC;
		i = s->ntenants++;
		s->t[i].used = true;
	}
	enum r2_tclass was = s->t[i].pol.cls;
	s->t[i].pol = *p;
	s->t[i].dynamic = false;
	reclass(s, i, was, p->cls);
	if (s->t[i].limit_bps || s->t[i].reserve_asked)
		r2_sched_set_limit(s, i, s->t[i].limit_bps, s->t[i].reserve_asked, 0, now_us);
	refresh(s, i, now_us);
	reclamp_all(s, now_us); /* its weight: the others' shares */
	if (i == 0) {
		/* the default policy: also of the tenants made for unmatched cgroups */
		s->t[0].pol.cgroup[0] = 0;
		for (int k = 1; k < R2_SCHED_MAX_TENANTS; k++) {
			struct r2_tenant_policy *d = &s->t[k].pol;
			if (!s->t[k].used || !s->t[k].dynamic)
				continue;
			d->weight = p->weight;
			d->rate_bps = p->rate_bps;
			d->burst_bytes = p->burst_bytes;
			reclass(s, k, d->cls, p->cls);
			d->cls = p->cls;
			d->max_sessions = p->max_sessions;
			d->max_comms = p->max_comms;
			d->max_regs = p->max_regs;
			d->max_mem = p->max_mem;
			d->max_req_rate = p->max_req_rate;
			d->max_pending_ops = p->max_pending_ops;
			d->max_proxy = p->max_proxy;
			refresh(s, k, now_us);
		}
	}
	return i;
}

static size_t prefix_match(const char *prefix, const char *path)
{
	size_t n = strlen(prefix);

	if (!n)
		return 0;
	if (!strcmp(prefix, "/"))
		return 1;
	if (strncmp(prefix, path, n) || (path[n] && path[n] != '/'))
		return 0;
	return n;
}

/* The tenant of cgroup: a dynamic tenant's cgroup exactly, else the
 * configured tenant with the longest prefix of it; -1 if none. */
static int match(const struct r2_sched *s, const char *cgroup)
{
	size_t best = 0;
	int bi = -1;

	for (int i = 1; i < R2_SCHED_MAX_TENANTS; i++) {
		size_t m;
		if (!s->t[i].used || !s->t[i].pol.cgroup[0])
			continue;
		if (s->t[i].dynamic) {
			if (!strcmp(s->t[i].pol.cgroup, cgroup))
				return i;
			continue;
		}
		m = prefix_match(s->t[i].pol.cgroup, cgroup);
		if (m > best) {
			best = m;
			bi = i;
		}
	}
	return bi;
}

int r2_sched_tenant_find(const struct r2_sched *s, const char *cgroup)
{
	int i = match(s, cgroup);

	return i < 0 ? -ENOENT : i;
}

int r2_sched_tenant_of(struct r2_sched *s, const char *cgroup, uint64_t now_us)
{
	int bi = match(s, cgroup);

	if (bi >= 0)
		return bi;
	if (s->ntenants >= R2_SCHED_MAX_TENANTS - 1) {
		int o = R2_SCHED_MAX_TENANTS - 1;
		if (!s->t[o].used) {
			s->t[o].pol = s->t[0].pol;
			snprintf(s->t[o].pol.name, sizeof(s->t[o].pol.name), "_other");
			s->t[o].pol.cgroup[0] = 0;
			s->t[o].used = true;
			s->t[o].dynamic = true;
			refresh(s, o, now_us);
		}
		return o;
	}
	int i = s->ntenants++;
	struct r2_sched_tenant *x = &s->t[i];
	x->pol = s->t[0].pol;
	snprintf(x->pol.cgroup, sizeof(x->pol.cgroup), "%s", cgroup);
	snprintf(x->pol.name, sizeof(x->pol.name), "%s", cgroup);
	x->used = true;
	x->dynamic = true;
	refresh(s, i, now_us);
	reclamp_all(s, now_us); /* one more weight: the reservations' shares */
	return i;
}

/* Tenant t's reservation: what it asked, cut to its cap and to its weight
 * share of the rails' capacity (the weights of the table's tenants). */
static void clamp_reserve(struct r2_sched *s, int t, uint64_t now_us)
{
	struct r2_sched_tenant *x = &s->t[t];
	uint64_t cap = r2_sched_rate(s, t), wsum = 0, r = x->reserve_asked;

	if (cap && r > cap)
		r = cap;
	for (int k = 1; s->capacity_bps && k < R2_SCHED_MAX_TENANTS; k++)
		wsum += s->t[k].used ? s->t[k].pol.weight : 0;
	if (s->capacity_bps && wsum) {
		uint64_t share = (uint64_t)((double)s->capacity_bps * x->pol.weight / (double)wsum);
		if (r > share)
			r = share;
	}
	if (r != x->reserve_bps) {
		x->reserve_bps = r;
		refresh(s, t, now_us);
	}
}

/* The table's weights changed (a tenant came, a policy was set): every
 * reservation is cut to its share again. */
static void reclamp_all(struct r2_sched *s, uint64_t now_us)
{
	for (int k = 1; k < R2_SCHED_MAX_TENANTS; k++)
		if (s->t[k].used && s->t[k].reserve_asked)
			clamp_reserve(s, k, now_us);
}

void r2_sched_set_limit(struct r2_sched *s, int t, uint64_t limit_bps, uint64_t reserve_bps,
			uint64_t capacity_bps, uint64_t now_us)
{
	struct r2_sched_tenant *x = &s->t[t];

	/* a tenant lowers its cap below its policy, never raises it above */
	if (limit_bps && x->pol.rate_bps && limit_bps > x->pol.rate_bps)
		limit_bps = x->pol.rate_bps;
	x->limit_bps = limit_bps;
	x->reserve_asked = reserve_bps;
	clamp_reserve(s, t, now_us);
	refresh(s, t, now_us);
	if (capacity_bps && capacity_bps != s->capacity_bps) {
		s->capacity_bps = capacity_bps; /* every share changes with it */
		reclamp_all(s, now_us);
	}
}

/* ---- buckets ---- */

static void fill(struct r2_sched *s, int t, uint64_t now_us)
{
	struct r2_sched_tenant *x = &s->t[t];
	uint64_t rate = r2_sched_rate(s, t);

	if (now_us <= x->tb_us)
		return;
	double dt = (double)(now_us - x->tb_us) / 1e6;
	if (rate)
		x->tokens += dt * (double)rate / 8.0;
	if (x->reserve_bps)
		x->rtokens += dt * (double)x->reserve_bps / 8.0;
	x->tb_us = now_us;
}

/* The bucket's cap for a chunk of len bytes: max(burst, len), so that a
 * chunk larger than the burst still goes (the bound is rate*T + chunk). */
static bool cap_ok(struct r2_sched *s, int t, uint32_t len, uint64_t now_us)
{
	struct r2_sched_tenant *x = &s->t[t];
	uint64_t rate = r2_sched_rate(s, t);
	double cap;

	if (!rate)
		return true;
	fill(s, t, now_us);
	cap = (double)R2_MAX(r2_sched_burst(s, t), (uint64_t)len);
	if (x->tokens > cap)
		x->tokens = cap;
	if (x->tokens + 1e-6 >= (double)len) {
		if (x->throttled_since) {
			x->throttled_us += now_us - x->throttled_since;
			x->throttled_since = 0;
		}
		return true;
	}
	if (!x->throttled_since)
		x->throttled_since = now_us;
	return false;
}

static bool reserve_ok(struct r2_sched *s, int t, uint32_t len, uint64_t now_us)
{
	struct r2_sched_tenant *x = &s->t[t];
	double cap;

	if (!x->reserve_bps)
		return false;
	fill(s, t, now_us);
	cap = (double)R2_MAX(burst_of(x->reserve_bps, 0), (uint64_t)len);
	if (x->rtokens > cap)
		x->rtokens = cap;
	return x->rtokens + 1e-6 >= (double)len;
}

static void charge(struct r2_sched *s, struct r2_sched_item *it)
{
	struct r2_sched_tenant *x = &s->t[it->tenant];

	if (r2_sched_rate(s, it->tenant))
		x->tokens -= it->len;
	if (x->reserve_bps)
		x->rtokens = R2_MAX(x->rtokens - it->len, 0.0);
	x->bytes += it->len;
	x->chunks++;
	x->queued--;
	x->queued_bytes -= it->len;
}

/* ---- queues ---- */

static void ring_add(struct r2_sched_rail *rl, int cls, uint16_t t)
{
	if (!rl->nring[cls])
		rl->cur[cls] = 0;
	rl->ring[cls][rl->nring[cls]++] = t;
	rl->q[t].active = true;
}

static void ring_del(struct r2_sched_rail *rl, int cls, int pos)
{
	uint16_t t = rl->ring[cls][pos];

	memmove(&rl->ring[cls][pos], &rl->ring[cls][pos + 1],
		(size_t)(rl->nring[cls] - pos - 1) * sizeof(rl->ring[cls][0]));
	rl->nring[cls]--;
	rl->q[t].active = false;
	if (pos < rl->cur[cls])
		rl->cur[cls]--;
	else if (pos == rl->cur[cls] && rl->cur[cls] >= rl->nring[cls])
		rl->cur[cls] = 0;
}

/* Tenant t out of the rail's ring of class cls (where it is). */
static void ring_remove(struct r2_sched_rail *rl, int cls, uint16_t t)
{
	for (int pos = 0; pos < rl->nring[cls]; pos++)
		if (rl->ring[cls][pos] == t) {
			ring_del(rl, cls, pos);
			return;
		}
}

/* A tenant whose class changed: its waiting queues move to the other
 * class's rings now (its next chunk is served as its new class). */
static void reclass(struct r2_sched *s, int t, enum r2_tclass from, enum r2_tclass to)
{
	if (from == to)
		return;
	for (int r = 0; r < R2_SCHED_MAX_RAILS; r++) {
		struct r2_sched_rail *rl = &s->rail[r];
		if (!rl->q[t].active)
			continue;
		ring_remove(rl, from, (uint16_t)t);
		ring_add(rl, to, (uint16_t)t);
	}
}

/* How far (virtual time: bytes per unit of weight) a tenant may be behind
 * and still catch up: 16 quanta. */
static double catch_up(const struct r2_sched *s)
{
	return 16.0 * (double)s->quantum;
}

/* A tenant with nothing queued on any rail gets chunks again: it starts at
 * most the catch-up bound (16 quanta per unit of weight) behind the least
 * advanced tenant of its class that has chunks queued, never behind where
 * it was. A tenant whose queues ran dry for a moment (its next step's
 * chunks not yet final) keeps what it was owed, within that bound; a long
 * idle time earns no more than the bound. */
static void level(struct r2_sched *s, int t)
{
	struct r2_sched_tenant *x = &s->t[t];
	double least = -1.0;

	for (int k = 0; k < R2_SCHED_MAX_TENANTS; k++) {
		const struct r2_sched_tenant *y = &s->t[k];
		if (k == t || !y->used || !y->queued || y->pol.cls != x->pol.cls)
			continue;
		if (least < 0 || y->vtime < least)
			least = y->vtime;
	}
	if (least < 0)
		least = s->vlast[x->pol.cls == R2_TCLASS_LATENCY];
	least -= catch_up(s);
	if (x->vtime < least)
		x->vtime = least;
}

static struct r2_sched_item *q_pop(struct r2_sched_q *q)
{
	struct r2_sched_item *it = q->head;

	q->head = it->next;
	if (!q->head)
		q->tail = &q->head;
	it->next = NULL;
	return it;
}

void r2_sched_enqueue(struct r2_sched *s, int rail, struct r2_sched_item *it, uint64_t now_us)
{
	struct r2_sched_rail *rl = &s->rail[rail];
	struct r2_sched_tenant *x = &s->t[it->tenant];

	it->next = NULL;
	it->enq_us = now_us;
	if (!x->queued)
		level(s, it->tenant);
	x->queued++;
	x->queued_bytes += it->len;
	rl->queued++;
	if (!s->enabled) {
		*s->fifo_tail[rail] = it;
		s->fifo_tail[rail] = &it->next;
		return;
	}
	struct r2_sched_q *q = &rl->q[it->tenant];
	*q->tail = it;
	q->tail = &it->next;
	if (!q->active)
		ring_add(rl, x->pol.cls == R2_TCLASS_LATENCY, it->tenant);
}

static struct r2_sched_item *dequeued(struct r2_sched *s, struct r2_sched_rail *rl,
				      struct r2_sched_item *it, uint64_t now_us)
{
	struct r2_sched_tenant *x = &s->t[it->tenant];

	charge(s, it);
	x->vtime += (double)it->len / (double)x->pol.weight;
	rl->queued--;
	if (now_us > it->enq_us && now_us - it->enq_us > x->max_wait_us)
		x->max_wait_us = now_us - it->enq_us;
	return it;
}

static bool may_send(const struct r2_sched *s, const struct r2_sched_item *it)
{
	return !s->may_send || s->may_send(it, s->may_send_arg);
}

/* The head chunk of tenant t on another rail than `rail` that may go on
 * `rail` instead (may_move, and its bucket), or NULL; *from: its rail. */
static struct r2_sched_item *movable(struct r2_sched *s, int rail, int t, int *from,
				     uint64_t now_us)
{
	for (int r = 0; r < R2_SCHED_MAX_RAILS; r++) {
		struct r2_sched_item *h = s->rail[r].q[t].head;
		if (r == rail || !h || !s->may_move(h, rail, s->may_send_arg))
			continue;
		if (!cap_ok(s, t, h->len, now_us))
			return NULL;
		*from = r;
		return h;
	}
	return NULL;
}

/* A chunk owed more than this rail's best (virtual time below `below`, or
 * any when the rail has none) but queued on another rail only: the tenant
 * of the class furthest behind with a head chunk that may move here. Taken
 * from that rail's queue; NULL when none. */
static struct r2_sched_item *steal(struct r2_sched *s, int rail, int cls, bool any, double below,
				   uint64_t now_us)
{
	int bt = -1, bfrom = -1;

	if (!s->may_move)
		return NULL;
	for (int t = 0; t < R2_SCHED_MAX_TENANTS; t++) {
		const struct r2_sched_tenant *x = &s->t[t];
		int from;
		if (!x->used || !x->queued || (x->pol.cls == R2_TCLASS_LATENCY) != cls ||
		    (!any && x->vtime >= below) || (bt >= 0 && x->vtime >= s->t[bt].vtime))
			continue;
		if (s->rail[rail].q[t].head && may_send(s, s->rail[rail].q[t].head))
			continue; /* it has a chunk here: fair() weighed it */
		if (movable(s, rail, t, &from, now_us)) {
			bt = t;
			bfrom = from;
		}
	}
	if (bt < 0)
		return NULL;
	struct r2_sched_rail *src = &s->rail[bfrom];
	struct r2_sched_q *q = &src->q[bt];
	struct r2_sched_item *it = q_pop(q);
	if (!q->head)
		ring_remove(src, cls, (uint16_t)bt);
	s->vlast[cls] = s->t[bt].vtime;
	return dequeued(s, src, it, now_us);
}

/* Fair queueing over the class's tenants queued on this rail: the chunk of
 * the tenant with the least virtual time (bytes sent on every rail / weight)
 * among those that may send now; ties go in ring order from the cursor. A
 * tenant over its rate, or whose head chunk may not go (its peer's window
 * is full: may_send), is passed over; a tenant more than 16 quanta per unit
 * of weight behind the most advanced one here catches up from there. NULL
 * when none may send. */
static struct r2_sched_item *fair(struct r2_sched *s, struct r2_sched_rail *rl, int cls,
				  uint64_t now_us)
{
	int n, best = -1, rail = (int)(rl - s->rail);
	double most = 0.0;

	for (int pos = 0; pos < rl->nring[cls];) {
		if (!rl->q[rl->ring[cls][pos]].head) {
			ring_del(rl, cls, pos); /* removed items (r2_sched_remove) */
			continue;
		}
		pos++;
	}
	n = rl->nring[cls];
	for (int i = 0; i < n; i++) {
		int pos = (rl->cur[cls] + i) % n;
		uint16_t t = rl->ring[cls][pos];
		struct r2_sched_q *q = &rl->q[t];

		if (s->t[t].vtime > most)
			most = s->t[t].vtime;
		if (!may_send(s, q->head) || !cap_ok(s, t, q->head->len, now_us))
			continue;
		if (best < 0 || s->t[t].vtime < s->t[rl->ring[cls][best]].vtime)
			best = pos;
	}
	if (best < 0)
		return steal(s, rail, cls, true, 0.0, now_us);
	uint16_t t = rl->ring[cls][best];
	struct r2_sched_tenant *x = &s->t[t];
	struct r2_sched_q *q = &rl->q[t];
	struct r2_sched_item *moved = steal(s, rail, cls, false, x->vtime, now_us);

	if (moved)
		return moved;

	if (x->vtime < most - catch_up(s))
		x->vtime = most - catch_up(s);
	s->vlast[cls] = x->vtime;
	struct r2_sched_item *it = q_pop(q);
	rl->cur[cls] = (best + 1) % n; /* the next in turn (ring_del keeps it) */
	if (!q->head)
		ring_del(rl, cls, best);
	return dequeued(s, rl, it, now_us);
}

/* A reserved tenant's chunk within its reservation goes first. */
static struct r2_sched_item *reserved(struct r2_sched *s, struct r2_sched_rail *rl,
				      uint64_t now_us)
{
	for (int cls = 1; cls >= 0; cls--) {
		for (int pos = 0; pos < rl->nring[cls]; pos++) {
			uint16_t t = rl->ring[cls][pos];
			struct r2_sched_q *q = &rl->q[t];
			if (!q->head || !s->t[t].reserve_bps || !may_send(s, q->head))
				continue;
			if (!reserve_ok(s, t, q->head->len, now_us) ||
			    !cap_ok(s, t, q->head->len, now_us))
				continue;
			struct r2_sched_item *it = q_pop(q);
			if (!q->head)
				ring_del(rl, cls, pos);
			return dequeued(s, rl, it, now_us);
		}
	}
	return NULL;
}

struct r2_sched_item *r2_sched_next(struct r2_sched *s, int rail, uint64_t now_us)
{
	struct r2_sched_rail *rl = &s->rail[rail];
	struct r2_sched_item *it;

	if (!rl->queued && (!s->may_move || !s->enabled))
		return NULL;
	if (!s->enabled) {
		it = s->fifo_head[rail];
		if (!it || !may_send(s, it))
			return NULL;
		s->fifo_head[rail] = it->next;
		if (!it->next)
			s->fifo_tail[rail] = &s->fifo_head[rail];
		it->next = NULL;
		return dequeued(s, rl, it, now_us);
	}
	if ((it = reserved(s, rl, now_us)))
		return it;
	bool bulk_waits = rl->nring[R2_TCLASS_BULK] > 0;
	if (bulk_waits && rl->lat_run >= s->prio_run) {
		if ((it = fair(s, rl, R2_TCLASS_BULK, now_us))) {
			rl->lat_run = 0;
			return it;
		}
	}
	if ((it = fair(s, rl, R2_TCLASS_LATENCY, now_us))) {
		if (bulk_waits)
			rl->lat_run += it->len;
		return it;
	}
	if ((it = fair(s, rl, R2_TCLASS_BULK, now_us)))
		rl->lat_run = 0;
	return it;
}

void r2_sched_requeue(struct r2_sched *s, int rail, struct r2_sched_item *it)
{
	struct r2_sched_rail *rl = &s->rail[rail];
	struct r2_sched_tenant *x = &s->t[it->tenant];

	/* undo the charge */
	if (r2_sched_rate(s, it->tenant))
		x->tokens += it->len;
	x->bytes -= it->len;
	x->chunks--;
	x->queued++;
	x->queued_bytes += it->len;
	rl->queued++;
	if (!s->enabled) {
		it->next = s->fifo_head[rail];
		s->fifo_head[rail] = it;
		if (!it->next)
			s->fifo_tail[rail] = &it->next;
		return;
	}
	struct r2_sched_q *q = &rl->q[it->tenant];
	it->next = q->head;
	q->head = it;
	if (!it->next)
		q->tail = &it->next;
	int cls = x->pol.cls == R2_TCLASS_LATENCY;
	if (!q->active)
		ring_add(rl, cls, it->tenant);
	x->vtime -= (double)it->len / (double)x->pol.weight;
	/* its turn again: the cursor on it, for ties */
	for (int pos = 0; pos < rl->nring[cls]; pos++)
		if (rl->ring[cls][pos] == it->tenant)
			rl->cur[cls] = pos;
}

static int remove_list(struct r2_sched *s, struct r2_sched_rail *rl, struct r2_sched_item **pp,
		       struct r2_sched_item ***tailp,
		       bool (*drop)(struct r2_sched_item *, void *), void *arg)
{
	int n = 0;

	while (*pp) {
		struct r2_sched_item *it = *pp, *next = it->next;
		uint16_t t = it->tenant;
		uint32_t len = it->len;
		if (!drop(it, arg)) { /* drop may free it when it says true */
			pp = &it->next;
			continue;
		}
		*pp = next;
		if (!next)
			*tailp = pp;
		s->t[t].queued--;
		s->t[t].queued_bytes -= len;
		rl->queued--;
		n++;
	}
	return n;
}

int r2_sched_remove(struct r2_sched *s, int rail,
		    bool (*drop)(struct r2_sched_item *it, void *arg), void *arg)
{
	struct r2_sched_rail *rl = &s->rail[rail];
	int n = remove_list(s, rl, &s->fifo_head[rail], &s->fifo_tail[rail], drop, arg);

	for (int t = 0; t < R2_SCHED_MAX_TENANTS; t++)
		n += remove_list(s, rl, &rl->q[t].head, &rl->q[t].tail, drop, arg);
	/* empty queues leave the rings when the round robin meets them */
	return n;
}

uint64_t r2_sched_next_wake(struct r2_sched *s, uint64_t now_us)
{
	uint64_t wake = UINT64_MAX;

	for (int t = 0; t < R2_SCHED_MAX_TENANTS; t++) {
		struct r2_sched_tenant *x = &s->t[t];
		uint64_t rate = r2_sched_rate(s, t);
		uint32_t need = 0;

		if (!x->used || !x->queued || !rate || !s->enabled)
			continue;
		for (int r = 0; r < R2_SCHED_MAX_RAILS; r++)
			if (s->rail[r].q[t].head)
				need = need ? R2_MIN(need, s->rail[r].q[t].head->len)
					    : s->rail[r].q[t].head->len;
		if (!need)
			continue;
		fill(s, t, now_us);
		if (x->tokens >= need)
			return now_us;
		uint64_t w = now_us + (uint64_t)(((double)need - x->tokens) * 8e6 / (double)rate) + 1;
		wake = R2_MIN(wake, w);
	}
	return wake;
}

uint32_t r2_sched_queued(const struct r2_sched *s, int rail)
{
	return s->rail[rail].queued;
}
