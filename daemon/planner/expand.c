/* SPDX-License-Identifier: MIT */
/*
 * Expansion of a compact plan into the transfers of one host at one step,
 * and the step-by-step evaluation of the expanded plan (tests, r2ccl-sim).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner_int.h"
#include "util.h"

void r2_view_of_plan(const struct r2_plan *p, struct r2_view *v)
{
	memset(v, 0, sizeof(*v));
	v->n = p->nhosts;
	v->R = p->nrails;
	v->elem = p->elem;
	v->op = p->op;
	v->size = p->size;
	v->comp = p->comp;
	v->ncomp = p->ncomp;
	v->hosts = p->hosts;
	v->cls = p->cls;
	v->hcx = p->hcx;
	v->nhcx = p->nhcx;
	v->route = p->route;
	v->nroute = p->nroute;
	v->down = p->down;
	v->ndown = p->ndown;
	v->rem_host = p->rem_host;
	v->rem_bytes = p->rem_bytes;
}

uint32_t r2_view_class(const struct r2_view *v, uint32_t h)
{
	uint32_t lo = 0, hi = v->nhcx;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (v->hcx[mid].host < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < v->nhcx && v->hcx[lo].host == h ? v->hcx[lo].cls : 0;
}

uint32_t r2_plan_class(const struct r2_plan *p, uint32_t h)
{
	struct r2_view v;
	r2_view_of_plan(p, &v);
	return r2_view_class(&v, h);
}

static const struct r2_route *find_route(const struct r2_view *v, uint32_t a, uint32_t b,
					 uint16_t l)
{
	uint32_t lo = 0, hi = v->nroute;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		const struct r2_route *m = &v->route[mid];
		if (m->a < a || (m->a == a && (m->b < b || (m->b == b && m->lrail < l))))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < v->nroute && v->route[lo].a == a && v->route[lo].b == b && v->route[lo].lrail == l)
		return &v->route[lo];
	return NULL;
}

bool r2_view_route(const struct r2_view *v, uint32_t a, uint32_t b, uint16_t l,
		   struct r2_hop *hop)
{
	if (l == R2_LRAIL_PAIR) {
		bool sw = a > b;
		const struct r2_route *r = sw ? find_route(v, b, a, l) : find_route(v, a, b, l);
		if (!r)
			return false;
		*hop = sw ? (struct r2_hop){ r->rail2, r->rail, r->via }
			  : (struct r2_hop){ r->rail, r->rail2, r->via };
		return true;
	}
	const struct r2_route *r = find_route(v, a, b, l);
	if (r)
		*hop = (struct r2_hop){ r->rail, r->rail2, r->via };
	else
		*hop = (struct r2_hop){ l, l, R2_NO_HOST };
	return true;
}

uint32_t r2_comp_pos(const struct r2_view *v, const struct r2_comp *c, uint32_t h)
{
	if (c->mem == R2_ALL_HOSTS)
		return h < c->nmem ? h : UINT32_MAX;
	for (uint32_t i = 0; i < c->nmem; i++)
		if (v->hosts[c->mem + i] == h)
			return i;
	return UINT32_MAX;
}

uint32_t r2_comp_member(const struct r2_view *v, const struct r2_comp *c, uint32_t pos)
{
	return c->mem == R2_ALL_HOSTS ? pos : v->hosts[c->mem + pos];
}

void r2_ring_piece(const struct r2_view *v, const struct r2_comp *c, uint32_t t, uint64_t *off,
		   uint64_t *len)
{
	if (v->op == R2_PLAN_ALLREDUCE) {
		r2_sub_range(c->off, c->len, v->elem, t, c->nmem, off, len);
	} else {
		uint64_t seg = v->size / v->n;
		*off = (uint64_t)r2_comp_member(v, c, t) * seg + c->off;
		*len = c->len;
	}
}

uint32_t r2_tree_depth(uint32_t idx)
{
	uint32_t d = 0;
	idx += 1;
	while (idx > 1) {
		idx >>= 1;
		d++;
	}
	return d;
}

/* ---- emission ----------------------------------------------------------- */

struct out {
	struct r2_xfer *x;
	size_t max, n;
};

static void put(struct out *o, const struct r2_xfer *x)
{
	if (o->n < o->max)
		o->x[o->n] = *x;
	o->n++;
}

static void emit_send(struct out *o, const struct r2_view *v, uint32_t me, uint32_t to,
		      uint16_t l, uint8_t kind, uint64_t off, uint64_t len)
{
	if (!len)
		return;
	struct r2_hop h;
	r2_view_route(v, me, to, l, &h);
	struct r2_xfer x = { to, h.via, h.rail, h.via == R2_NO_HOST ? h.rail : h.rail2,
			     R2_XFER_SEND, kind, off, len };
	put(o, &x);
}

static void emit_recv(struct out *o, const struct r2_view *v, uint32_t me, uint32_t from,
		      uint16_t l, uint8_t kind, uint64_t off, uint64_t len)
{
	if (!len)
		return;
	struct r2_hop h;
	r2_view_route(v, from, me, l, &h);
	struct r2_xfer x = { from, h.via, h.via == R2_NO_HOST ? h.rail : h.rail2, h.rail,
			     R2_XFER_RECV, kind, off, len };
	put(o, &x);
}

static inline uint32_t md(int64_t a, uint32_t m)
{
	int64_t r = a % (int64_t)m;
	return (uint32_t)(r < 0 ? r + m : r);
}

static void expand_ring(struct out *o, const struct r2_view *v, const struct r2_comp *c,
			uint32_t h, int64_t j)
{
	uint32_t m = c->nmem;
	int64_t rs = m - 1;
	int64_t ring = v->op == R2_PLAN_ALLREDUCE ? 2 * rs : rs;
	uint32_t p = r2_comp_pos(v, c, h);
	uint64_t off, len;
	if (p == UINT32_MAX) {
		bool leaf = false;
		for (uint32_t i = 0; i < c->nleaf; i++)
			if (v->hosts[c->leaf + i] == h)
				leaf = true;
		if (!leaf)
			return;
		if (j == -1) {
			for (uint32_t t = 0; t < m; t++) {
				r2_ring_piece(v, c, t, &off, &len);
				emit_send(o, v, h, r2_comp_member(v, c, (t + 1) % m), c->lrail,
					  R2_XFER_REDUCE, off, len);
			}
		} else if (j == ring) {
			for (uint32_t t = 0; t < m; t++) {
				r2_ring_piece(v, c, t, &off, &len);
				emit_recv(o, v, h, r2_comp_member(v, c, t), c->lrail, R2_XFER_COPY,
					  off, len);
			}
		}
		return;
	}
	if (j == -1 && c->nleaf) {
		r2_ring_piece(v, c, md((int64_t)p - 1, m), &off, &len);
		for (uint32_t i = 0; i < c->nleaf; i++)
			emit_recv(o, v, h, v->hosts[c->leaf + i], c->lrail, R2_XFER_REDUCE, off, len);
		return;
	}
	if (j == ring && c->nleaf) {
		r2_ring_piece(v, c, p, &off, &len);
		for (uint32_t i = 0; i < c->nleaf; i++)
			emit_send(o, v, h, v->hosts[c->leaf + i], c->lrail, R2_XFER_COPY, off, len);
		return;
	}
	if (j < 0 || j >= ring || m < 2)
		return;
	uint32_t next = r2_comp_member(v, c, (p + 1) % m), prev = r2_comp_member(v, c, (p + m - 1) % m);
	bool rsphase = v->op == R2_PLAN_REDUCESCATTER || (v->op == R2_PLAN_ALLREDUCE && j < rs);
	if (rsphase) {
		r2_ring_piece(v, c, md((int64_t)p - j - 1, m), &off, &len);
		emit_send(o, v, h, next, c->lrail, R2_XFER_REDUCE, off, len);
		r2_ring_piece(v, c, md((int64_t)p - j - 2, m), &off, &len);
		emit_recv(o, v, h, prev, c->lrail, R2_XFER_REDUCE, off, len);
	} else {
		int64_t jj = v->op == R2_PLAN_ALLREDUCE ? j - rs : j;
		r2_ring_piece(v, c, md((int64_t)p - jj, m), &off, &len);
		emit_send(o, v, h, next, c->lrail, R2_XFER_COPY, off, len);
		r2_ring_piece(v, c, md((int64_t)p - jj - 1, m), &off, &len);
		emit_recv(o, v, h, prev, c->lrail, R2_XFER_COPY, off, len);
	}
}

static void chunk(const struct r2_view *v, const struct r2_comp *c, int64_t k, uint64_t *off,
		  uint64_t *len)
{
	r2_sub_range(c->off, c->len, v->elem, (uint64_t)k, c->nchunks, off, len);
}

static void expand_chain(struct out *o, const struct r2_view *v, const struct r2_comp *c,
			 uint32_t h, int64_t j)
{
	uint32_t m = c->nmem, p = r2_comp_pos(v, c, h);
	int64_t K = c->nchunks;
	uint64_t off, len;
	if (p == UINT32_MAX || m < 2)
		return;
	if (v->op == R2_PLAN_BROADCAST) {
		int64_t cs = j - p, cr = j - p + 1;
		if (p + 1 < m && cs >= 0 && cs < K) {
			chunk(v, c, cs, &off, &len);
			emit_send(o, v, h, r2_comp_member(v, c, p + 1), c->lrail, R2_XFER_COPY, off, len);
		}
		if (p >= 1 && cr >= 0 && cr < K) {
			chunk(v, c, cr, &off, &len);
			emit_recv(o, v, h, r2_comp_member(v, c, p - 1), c->lrail, R2_XFER_COPY, off, len);
		}
	} else {
		int64_t cs = j - (int64_t)(m - 1 - p), cr = j - (int64_t)(m - 2 - p);
		if (p >= 1 && cs >= 0 && cs < K) {
			chunk(v, c, cs, &off, &len);
			emit_send(o, v, h, r2_comp_member(v, c, p - 1), c->lrail, R2_XFER_REDUCE, off, len);
		}
		if (p + 2 <= m && cr >= 0 && cr < K) {
			chunk(v, c, cr, &off, &len);
			emit_recv(o, v, h, r2_comp_member(v, c, p + 1), c->lrail, R2_XFER_REDUCE, off, len);
		}
	}
}

static void expand_tree(struct out *o, const struct r2_view *v, const struct r2_comp *c,
			uint32_t h, int64_t j)
{
	uint32_t m = c->nmem, i = r2_comp_pos(v, c, h);
	int64_t K = c->nchunks;
	uint64_t off, len;
	if (i == UINT32_MAX || m < 2)
		return;
	int64_t d = r2_tree_depth(i), D = r2_tree_depth(m - 1);
	uint32_t kids[2] = { 2 * i + 1, 2 * i + 2 };
	if (v->op == R2_PLAN_BROADCAST) {
		int64_t cr = j - d + 1, cs = j - d;
		if (i >= 1 && cr >= 0 && cr < K) {
			chunk(v, c, cr, &off, &len);
			emit_recv(o, v, h, r2_comp_member(v, c, (i - 1) / 2), c->lrail, R2_XFER_COPY, off, len);
		}
		if (cs >= 0 && cs < K) {
			chunk(v, c, cs, &off, &len);
			for (int k = 0; k < 2; k++)
				if (kids[k] < m)
					emit_send(o, v, h, r2_comp_member(v, c, kids[k]), c->lrail,
						  R2_XFER_COPY, off, len);
		}
	} else {
		int64_t cs = j - (D - d), cr = j - (D - d - 1);
		if (i >= 1 && cs >= 0 && cs < K) {
			chunk(v, c, cs, &off, &len);
			emit_send(o, v, h, r2_comp_member(v, c, (i - 1) / 2), c->lrail, R2_XFER_REDUCE, off, len);
		}
		if (cr >= 0 && cr < K) {
			chunk(v, c, cr, &off, &len);
			for (int k = 0; k < 2; k++)
				if (kids[k] < m)
					emit_recv(o, v, h, r2_comp_member(v, c, kids[k]), c->lrail,
						  R2_XFER_REDUCE, off, len);
		}
	}
}

static void expand_direct(struct out *o, const struct r2_view *v, const struct r2_comp *c,
			  uint32_t h, int64_t j)
{
	uint32_t a = r2_comp_member(v, c, 0), b = r2_comp_member(v, c, 1);
	if (j != 0)
		return;
	if (h == a)
		emit_send(o, v, h, b, c->lrail, R2_XFER_COPY, c->off, c->len);
	else if (h == b)
		emit_recv(o, v, h, a, c->lrail, R2_XFER_COPY, c->off, c->len);
}

/* One pair transfer of the shard plan, split over rails (or bridged). */
static void shard_pair(struct out *o, const struct r2_view *v, uint32_t me, uint32_t peer,
		       bool send, uint8_t kind, uint64_t off, uint64_t len)
{
	if (!len)
		return;
	struct r2_hop h;
	uint32_t a = send ? me : peer, b = send ? peer : me;
	if (r2_view_route(v, a, b, R2_LRAIL_PAIR, &h)) {
		struct r2_xfer x = { peer, h.via, send ? h.rail : h.rail2, send ? h.rail2 : h.rail,
				     send ? R2_XFER_SEND : R2_XFER_RECV, kind, off, len };
		put(o, &x);
		return;
	}
	double frac[R2_PLAN_MAX_RAILS];
	uint64_t lens[R2_PLAN_MAX_RAILS];
	if (!r2_pair_split(v, a, b, frac))
		return; /* cannot happen: the builder bridged such pairs */
	r2_split_bytes(len, v->elem, v->R, frac, lens);
	uint64_t at = off;
	for (uint32_t r = 0; r < v->R; r++) {
		if (!lens[r])
			continue;
		struct r2_xfer x = { peer, R2_NO_HOST, (uint16_t)r, (uint16_t)r,
				     send ? R2_XFER_SEND : R2_XFER_RECV, kind, at, lens[r] };
		put(o, &x);
		at += lens[r];
	}
}

static void expand_shard(struct out *o, const struct r2_view *v, const struct r2_comp *c,
			 uint32_t h, int64_t j)
{
	int64_t K = c->nchunks;
	if (j < 0 || j > K)
		return;
	uint64_t own_off = 0, own_len = r2_shard_of(v, h);
	uint64_t at = c->off;
	for (uint32_t g = 0; g < h; g++)
		at += r2_shard_of(v, g);
	own_off = at;
	uint64_t o1 = 0, l1 = 0, o2 = 0, l2 = 0;
	if (j < K)
		r2_sub_range(own_off, own_len, v->elem, (uint64_t)j, K, &o1, &l1);
	if (j >= 1)
		r2_sub_range(own_off, own_len, v->elem, (uint64_t)(j - 1), K, &o2, &l2);
	uint64_t goff = c->off;
	for (uint32_t g = 0; g < v->n; g++) {
		uint64_t gs = r2_shard_of(v, g);
		if (g != h) {
			uint64_t so, sl;
			if (j < K) { /* reduce-scatter of chunk j */
				r2_sub_range(goff, gs, v->elem, (uint64_t)j, K, &so, &sl);
				shard_pair(o, v, h, g, true, R2_XFER_REDUCE, so, sl);
				shard_pair(o, v, h, g, false, R2_XFER_REDUCE, o1, l1);
			}
			if (j >= 1) { /* all-gather of chunk j-1 */
				shard_pair(o, v, h, g, true, R2_XFER_COPY, o2, l2);
				r2_sub_range(goff, gs, v->elem, (uint64_t)(j - 1), K, &so, &sl);
				shard_pair(o, v, h, g, false, R2_XFER_COPY, so, sl);
			}
		}
		goff += gs;
	}
}

/* HD, RD and Bruck: their messages, each split over its rails */
static void expand_hd(struct out *o, const struct r2_view *v, const struct r2_comp *c,
		      uint32_t h, int64_t j)
{
	struct r2_hd_geo g;
	struct r2_hd_msg msg[4 * R2_HD_MAX_FAN];
	uint64_t lens[R2_PLAN_MAX_RAILS];
	size_t nm;
	if (c->algo == R2_ALGO_BRUCK) {
		nm = r2_bruck_msgs(v, c, h, j, msg, R2_ARRAY_SIZE(msg));
	} else {
		r2_hd_geo(v, c, &g);
		nm = r2_hd_msgs(v, c, &g, h, j, msg, R2_ARRAY_SIZE(msg));
	}
	if (nm > R2_ARRAY_SIZE(msg))
		nm = R2_ARRAY_SIZE(msg); /* cannot happen: the builder caps the radix */
	for (size_t i = 0; i < nm; i++) {
		const struct r2_hd_msg *m = &msg[i];
		uint32_t a = m->send ? h : m->peer, b = m->send ? m->peer : h;
		if (!r2_hd_rails(v, c, a, b, m->slot, m->nslot, m->len + m->len2, lens))
			continue; /* cannot happen: the builder checked every pair */
		struct r2_hd_part pt[R2_PLAN_MAX_RAILS + 1];
		size_t np = r2_hd_parts(m, lens, v->R, v->elem, c->lrail & 2, pt);
		for (size_t q = 0; q < np; q++) {
			struct r2_xfer x = { m->peer, R2_NO_HOST, pt[q].rail, pt[q].rail,
					     m->send ? R2_XFER_SEND : R2_XFER_RECV, m->kind,
					     pt[q].off, pt[q].len };
			put(o, &x);
		}
	}
}

static void expand_plain(struct out *o, const struct r2_view *v, uint32_t h, uint32_t k)
{
	for (uint32_t i = 0; i < v->ncomp; i++) {
		const struct r2_comp *c = &v->comp[i];
		int64_t j = (int64_t)k - c->step0;
		switch (c->algo) {
		case R2_ALGO_RING:
			expand_ring(o, v, c, h, j);
			break;
		case R2_ALGO_CHAIN:
			expand_chain(o, v, c, h, j);
			break;
		case R2_ALGO_TREE:
			expand_tree(o, v, c, h, j);
			break;
		case R2_ALGO_DIRECT:
			expand_direct(o, v, c, h, j);
			break;
		case R2_ALGO_SHARD:
			expand_shard(o, v, c, h, j);
			break;
		case R2_ALGO_HD:
		case R2_ALGO_RD:
		case R2_ALGO_BRUCK:
			expand_hd(o, v, c, h, j);
			break;
		default:
			break;
		}
	}
}

/* Relay entries of bridge host h: the bridged sends of every source whose
 * route goes through h. */
static int expand_relays(struct out *o, const struct r2_view *v, uint32_t h, uint32_t k)
{
	uint32_t src[64];
	uint32_t ns = 0;
	for (uint32_t i = 0; i < v->nroute; i++) {
		const struct r2_route *r = &v->route[i];
		if (r->via != h)
			continue;
		uint32_t cand[2] = { r->a, r->b };
		int nc = r->lrail == R2_LRAIL_PAIR ? 2 : 1;
		for (int q = 0; q < nc; q++) {
			bool dup = false;
			for (uint32_t s = 0; s < ns; s++)
				dup |= src[s] == cand[q];
			if (!dup && ns < 64)
				src[ns++] = cand[q];
		}
	}
	if (!ns)
		return 0;
	size_t cap = 4096;
	struct r2_xfer *tmp = NULL;
	for (uint32_t s = 0; s < ns; s++) {
		struct out t;
		for (;;) {
			if (!tmp && !(tmp = malloc(cap * sizeof(*tmp))))
				return -ENOMEM;
			t = (struct out){ tmp, cap, 0 };
			expand_plain(&t, v, src[s], k);
			if (t.n <= cap)
				break;
			free(tmp);
			tmp = NULL;
			cap = t.n;
		}
		for (size_t i = 0; i < t.n; i++) {
			const struct r2_xfer *x = &tmp[i];
			if (x->dir != R2_XFER_SEND || x->via != h)
				continue;
			struct r2_xfer y = { src[s], x->peer, x->rail, x->rail2, R2_XFER_RELAY,
					     x->kind, x->off, x->len };
			put(o, &y);
		}
	}
	free(tmp);
	return 0;
}

int r2_plan_expand(const struct r2_plan *p, uint32_t h, uint32_t k, struct r2_xfer *out, size_t max)
{
	if (!p || h >= p->nhosts || k >= p->nsteps)
		return -EINVAL;
	struct r2_view v;
	r2_view_of_plan(p, &v);
	struct out o = { out, max, 0 };
	expand_plain(&o, &v, h, k);
	int e = expand_relays(&o, &v, h, k);
	if (e)
		return e;
	if (o.n > max)
		return -ENOSPC;
	return (int)o.n;
}

size_t r2_plan_max_xfers(const struct r2_plan *p)
{
	size_t t = 0;
	for (uint32_t i = 0; i < p->ncomp; i++) {
		const struct r2_comp *c = &p->comp[i];
		switch (c->algo) {
		case R2_ALGO_RING:
			t += 2 + (c->nleaf ? (size_t)c->nleaf + c->nmem : 0);
			break;
		case R2_ALGO_CHAIN:
			t += 2;
			break;
		case R2_ALGO_TREE:
			t += 3;
			break;
		case R2_ALGO_DIRECT:
			t += 1;
			break;
		case R2_ALGO_SHARD:
			t += 4 * (size_t)(p->nhosts - 1) * p->nrails;
			break;
		case R2_ALGO_HD:
		case R2_ALGO_RD:
		case R2_ALGO_BRUCK: {
			struct r2_view v;
			r2_view_of_plan(p, &v);
			/* a wrapped Bruck block: one more on a rail */
			t += c->algo == R2_ALGO_BRUCK ? r2_bruck_max_msgs(&v, c) * (p->nrails + 1)
						      : r2_hd_max_msgs(&v, c) * p->nrails;
			break;
		}
		}
	}
	/* relays: a bridge forwards at most what its sources send to it */
	size_t relay = 0;
	for (uint32_t i = 0; i < p->nroute; i++)
		if (p->route[i].via != R2_NO_HOST)
			relay += p->route[i].lrail == R2_LRAIL_PAIR ? 4 : 2;
	return t + relay;
}

/* ---- step-by-step evaluation ------------------------------------------- */

double r2_plan_eval(const struct r2_plan *p, const struct r2_cluster *c)
{
	uint32_t n = p->nhosts, R = p->nrails;
	size_t N = (size_t)n * R, max = r2_plan_max_xfers(p);
	double *tx = malloc(N * sizeof(double)), *rx = malloc(N * sizeof(double));
	uint32_t *mt = malloc(N * sizeof(uint32_t)), *mr = malloc(N * sizeof(uint32_t));
	struct r2_xfer *x = malloc((max ? max : 1) * sizeof(*x));
	double total = 0;
	if (!tx || !rx || !mt || !mr || !x) {
		total = NAN;
		goto out;
	}
	for (uint32_t k = 0; k < p->nsteps; k++) {
		memset(tx, 0, N * sizeof(double));
		memset(rx, 0, N * sizeof(double));
		memset(mt, 0, N * sizeof(uint32_t));
		memset(mr, 0, N * sizeof(uint32_t));
		bool any = false;
		for (uint32_t h = 0; h < n; h++) {
			int cnt = r2_plan_expand(p, h, k, x, max);
			if (cnt < 0) {
				total = NAN;
				goto out;
			}
			for (int i = 0; i < cnt; i++) {
				size_t a = (size_t)h * R + x[i].rail, b = (size_t)h * R + x[i].rail2;
				any = true;
				if (x[i].dir == R2_XFER_SEND) {
					tx[a] += (double)x[i].len;
					mt[a]++;
				} else if (x[i].dir == R2_XFER_RECV) {
					rx[a] += (double)x[i].len;
					mr[a]++;
				} else {
					rx[a] += (double)x[i].len;
					mr[a]++;
					tx[b] += (double)x[i].len;
					mt[b]++;
				}
			}
		}
		double t = 0;
		for (size_t i = 0; i < N; i++) {
			const struct r2_nic *ni = &c->nic[i];
			double al = c->cost.alpha + ni->lat;
			if (mt[i])
				t = fmax(t, mt[i] * al + (ni->bw_tx > 0 ? tx[i] / ni->bw_tx : INFINITY));
			if (mr[i])
				t = fmax(t, mr[i] * al + (ni->bw_rx > 0 ? rx[i] / ni->bw_rx : INFINITY));
		}
		if (any)
			total += t + c->cost.gamma * p->depth;
	}
out:
	free(tx); free(rx); free(mt); free(mr); free(x);
	return total;
}
