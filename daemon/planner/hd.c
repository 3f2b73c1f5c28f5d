/* SPDX-License-Identifier: MIT */
/*
 * Log-step schedule: mixed-radix reduce-scatter / all-gather (Rabenseifner's
 * recursive halving and doubling generalized to radices f_0 .. f_{L-1}),
 * shared by the builder (cost, plan_cost.c) and the expansion (expand.c).
 *
 * Members m = prod f_k, at positions p with digits d_k = (p / stride_k) % f_k.
 * Position p owns, after reduce-scatter step k, range R_{k+1} = piece d_k of
 * f_k of R_k (R_0 = the component's range). RS step k: p sends piece t != d_k
 * of R_k to the member with digit t (REDUCE) and receives its own piece from
 * them (REDUCE: several receives on the same bytes, applied in the order
 * listed). AG runs the steps backwards with COPY. Hosts beyond m ("extras",
 * the slowest hosts) fold: extra i REDUCEs its whole range into member i one
 * step before and receives the result (COPY) one step after.
 */
#include <stdlib.h>

#include "planner_int.h"

void r2_hd_geo(const struct r2_view *v, const struct r2_comp *c, struct r2_hd_geo *g)
{
	g->L = c->level;
	g->m = c->nmem;
	uint32_t s = 1;
	for (uint32_t k = 0; k < g->L; k++) {
		g->f[k] = v->hosts[c->fac + k];
		g->stride[k] = s;
		s *= g->f[k];
	}
	uint32_t w = 1;
	for (uint32_t k = g->L; k-- > 0;) {
		g->w[k] = w;
		w *= g->f[k];
	}
	g->s0 = c->nleaf ? 1 : 0;
	g->rd = c->algo == R2_ALGO_RD;
	g->nh = g->rd ? c->nhalf : g->L;
}

uint32_t r2_hd_host(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		    uint32_t p)
{
	if (c->mem != R2_ALL_HOSTS)
		return v->hosts[c->mem + p];
	/* implicit order: the member at p is the host whose segment p's final
	 * range is (what reducescatter/allgather need) */
	uint32_t h = 0;
	for (uint32_t k = 0; k < g->L; k++)
		h += ((p / g->stride[k]) % g->f[k]) * g->w[k];
	return h;
}

/* Position of h among the members, or UINT32_MAX - 1 - i for extra i, or
 * UINT32_MAX for a host outside the component. */
uint32_t r2_hd_pos(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		       uint32_t h)
{
	if (c->mem == R2_ALL_HOSTS) {
		if (h >= g->m)
			return UINT32_MAX;
		uint32_t p = 0;
		for (uint32_t k = 0; k < g->L; k++)
			p += ((h / g->w[k]) % g->f[k]) * g->stride[k];
		return p;
	}
	for (uint32_t i = 0; i < g->m; i++)
		if (v->hosts[c->mem + i] == h)
			return i;
	for (uint32_t i = 0; i < c->nleaf; i++)
		if (v->hosts[c->leaf + i] == h)
			return UINT32_MAX - 1 - i;
	return UINT32_MAX;
}

static void put(struct r2_hd_msg *out, size_t max, size_t *n, uint32_t peer, bool send,
		uint8_t kind, uint64_t off, uint64_t len, uint16_t slot, uint16_t nslot)
{
	if (!len)
		return;
	if (*n < max)
		out[*n] = (struct r2_hd_msg){ peer, send, kind, slot, nslot, off, len };
	(*n)++;
}

size_t r2_hd_msgs(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		  uint32_t h, int64_t j, struct r2_hd_msg *out, size_t max)
{
	return r2_hd_msgs_at(v, c, g, h, r2_hd_pos(v, c, g, h), j, out, max);
}

size_t r2_hd_msgs_at(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		     uint32_t h, uint32_t p, int64_t j, struct r2_hd_msg *out, size_t max)
{
	size_t n = 0;
	uint32_t L = g->L, e = c->nleaf;
	int64_t last = (int64_t)g->s0 + 2 * L; /* fold-back step (if extras) */
	bool rs = v->op != R2_PLAN_ALLGATHER;
	if (v->op != R2_PLAN_ALLREDUCE)
		last = (int64_t)g->s0 + L; /* one pass (RS or AG) */
	else if (g->rd)
		last = (int64_t)g->s0 + L + g->nh; /* RS nh, RD L - nh, AG nh */
	if (p == UINT32_MAX || j < 0)
		return 0;
	if (p >= g->m) { /* extra i */
		uint32_t i = UINT32_MAX - 1 - p, to = r2_hd_host(v, c, g, i);
		if (j == 0)
			put(out, max, &n, to, true, R2_XFER_REDUCE, c->off, c->len, 0xffff, 0);
		else if (j == last)
			put(out, max, &n, to, false, R2_XFER_COPY, c->off, c->len, 0xffff, 0);
		return n;
	}
	if (e && p < e) {
		uint32_t x = v->hosts[c->leaf + p];
		if (j == 0)
			put(out, max, &n, x, false, R2_XFER_REDUCE, c->off, c->len, 0xffff, 0);
		else if (j == last)
			put(out, max, &n, x, true, R2_XFER_COPY, c->off, c->len, 0xffff, 0);
	}
	int64_t q = j - g->s0;
	if (q < 0 || q >= last - (int64_t)g->s0)
		return n;
	if (g->rd && q >= g->nh && q < L) {
		/* doubling level q: the owned range R_nh to and from the f - 1
		 * others (REDUCE) */
		uint64_t off = c->off, len = c->len;
		for (uint32_t i = 0; i < g->nh; i++)
			r2_sub_range(off, len, v->elem, (p / g->stride[i]) % g->f[i], g->f[i], &off, &len);
		uint32_t f = g->f[q], d = (p / g->stride[q]) % f;
		for (uint32_t t = 0; t < f; t++) {
			if (t == d)
				continue;
			uint32_t peer = r2_hd_host(v, c, g, p + (t - d) * g->stride[q]);
			uint16_t so = (uint16_t)((t + f - d) % f - 1), ro = (uint16_t)((d + f - t) % f - 1);
			put(out, max, &n, peer, true, R2_XFER_REDUCE, off, len, so, f - 1);
			put(out, max, &n, peer, false, R2_XFER_REDUCE, off, len, ro, f - 1);
		}
		return n;
	}
	/* halving level k: RS steps 0 .. nh-1, AG steps back from nh-1 */
	uint32_t nh = g->nh, span = g->rd ? L + nh : 2 * L;
	bool rsphase = rs && q < nh;
	uint32_t k = rsphase ? (uint32_t)q : (uint32_t)(rs ? span - 1 - q : L - 1 - q);
	/* R_k of p */
	uint64_t off = c->off, len = c->len;
	for (uint32_t i = 0; i < k; i++)
		r2_sub_range(off, len, v->elem, (p / g->stride[i]) % g->f[i], g->f[i], &off, &len);
	uint32_t f = g->f[k], d = (p / g->stride[k]) % f;
	uint64_t mo, ml;
	r2_sub_range(off, len, v->elem, d, f, &mo, &ml);
	for (uint32_t t = 0; t < f; t++) {
		if (t == d)
			continue;
		uint32_t peer = r2_hd_host(v, c, g, p + (t - d) * g->stride[k]);
		uint64_t to, tl;
		r2_sub_range(off, len, v->elem, t, f, &to, &tl);
		uint16_t so = (uint16_t)((t + f - d) % f - 1), ro = (uint16_t)((d + f - t) % f - 1);
		if (rsphase) {
			put(out, max, &n, peer, true, R2_XFER_REDUCE, to, tl, so, f - 1);
			put(out, max, &n, peer, false, R2_XFER_REDUCE, mo, ml, ro, f - 1);
		} else {
			put(out, max, &n, peer, true, R2_XFER_COPY, mo, ml, so, f - 1);
			put(out, max, &n, peer, false, R2_XFER_COPY, to, tl, ro, f - 1);
		}
	}
	return n;
}

bool r2_hd_rails(const struct r2_view *v, const struct r2_comp *c, uint32_t a, uint32_t b,
		 uint16_t slot, uint16_t msg_nslot, uint64_t len, uint64_t lens[])
{
	const struct r2_hclass *ca = &v->cls[r2_view_class(v, a)];
	const struct r2_hclass *cb = &v->cls[r2_view_class(v, b)];
	uint16_t m = ca->mask & cb->mask & (uint16_t)~r2_pair_down_mask(v->down, v->ndown, a, b);
	double frac[R2_PLAN_MAX_RAILS];
	for (uint32_t r = 0; r < v->R; r++)
		lens[r] = 0;
	if (!m)
		return false;
	/* variant 1: the rails are dealt to the f-1 sender offsets (slot =
	 * offset - 1): slot i gets rails r with r % (f-1) == i when f-1 <= R
	 * (one message per NIC), rail i % R otherwise; the rails of its group
	 * the pair cannot use are left out, an empty group falls back to all */
	uint16_t grp = 0;
	if ((c->lrail & 1) && slot != 0xffff && msg_nslot) {
		for (uint32_t r = 0; r < v->R; r++)
			if (msg_nslot <= v->R ? r % msg_nslot == slot : r == slot % v->R)
				grp |= (uint16_t)(1u << r);
		if (grp & m)
			m &= grp;
	}
	double sum = 0;
	for (uint32_t r = 0; r < v->R; r++) {
		frac[r] = (m >> r) & 1u ? (ca->bw[r] < cb->bw[r] ? ca->bw[r] : cb->bw[r]) : 0;
		sum += frac[r];
	}
	for (uint32_t r = 0; r < v->R; r++)
		frac[r] = sum > 0 ? frac[r] / sum : ((m >> r) & 1u);
	r2_split_bytes(len, v->elem, v->R, frac, lens);
	return true;
}

/* len bytes at off over the rails u[0 .. nu), in proportion to lens */
static size_t lay(uint64_t off, uint64_t len, const uint32_t *u, uint32_t nu,
		  const uint64_t lens[], uint32_t elem, struct r2_hd_part out[])
{
	double frac[R2_PLAN_MAX_RAILS] = { 0 }, sum = 0;
	uint64_t part[R2_PLAN_MAX_RAILS];
	size_t n = 0;
	for (uint32_t i = 0; i < nu; i++)
		sum += (double)lens[u[i]];
	for (uint32_t i = 0; i < nu; i++)
		frac[i] = (double)lens[u[i]] / sum;
	r2_split_bytes(len, elem, nu, frac, part);
	for (uint32_t i = 0; i < nu; i++) {
		if (part[i])
			out[n++] = (struct r2_hd_part){ (uint16_t)u[i], off, part[i] };
		off += part[i];
	}
	return n;
}

size_t r2_hd_parts(const struct r2_hd_msg *m, const uint64_t lens[], uint32_t R, uint32_t elem,
		   bool aligned, struct r2_hd_part out[])
{
	size_t n = 0;
	if (aligned && m->len2) {
		/* one range on the first rails, the other on the rest: one
		 * transfer a rail, the bytes split by whole rails */
		uint32_t u[R2_PLAN_MAX_RAILS], nu = 0;
		for (uint32_t r = 0; r < R; r++)
			if (lens[r])
				u[nu++] = r;
		if (nu >= 2) {
			uint32_t a = (uint32_t)((double)nu * (double)m->len /
						(double)(m->len + m->len2) + 0.5);
			a = a < 1 ? 1 : a > nu - 1 ? nu - 1 : a;
			n = lay(m->off, m->len, u, a, lens, elem, out);
			return n + lay(m->off2, m->len2, u + a, nu - a, lens, elem, out + n);
		}
	}
	uint64_t at = 0; /* bytes of the message before this rail's */
	for (uint32_t r = 0; r < R; r++) {
		uint64_t a = at, e = at + lens[r];
		at = e;
		if (a < m->len && a < e)
			out[n++] = (struct r2_hd_part){ (uint16_t)r, m->off + a,
							(e < m->len ? e : m->len) - a };
		if (e > m->len && e > a) {
			uint64_t b = a > m->len ? a : m->len;
			out[n++] = (struct r2_hd_part){ (uint16_t)r, m->off2 + (b - m->len), e - b };
		}
	}
	return n;
}

uint32_t r2_hd_nsteps(enum r2_plan_op op, const struct r2_comp *c)
{
	uint32_t L = c->level;
	if (op != R2_PLAN_ALLREDUCE)
		return L;
	return (c->algo == R2_ALGO_RD ? L + c->nhalf : 2 * L) + (c->nleaf ? 2 : 0);
}

size_t r2_hd_max_msgs(const struct r2_view *v, const struct r2_comp *c)
{
	uint32_t fmax = 1;
	for (uint32_t k = 0; k < c->level; k++)
		if (v->hosts[c->fac + k] > fmax)
			fmax = v->hosts[c->fac + k];
	return 2 * (size_t)(fmax - 1) + 2;
}
