/* SPDX-License-Identifier: MIT */
/*
 * The shard plan ("ours" for allreduce): direct reduce-scatter + all-gather
 * with unequal shard ownership, pipelined over K chunks.
 *
 * Host i owns s_i bytes. Over both phases it sends and receives
 * S + (n-2) s_i bytes. With host bandwidth b_i (sum of its usable NICs), the
 * water-filling s_i = max(0, (T b_i - S) / (n-2)), sum s_i = S, gives
 * T = max(2(n-1)S / sum b, S / min b): the lower bound (docs/planner.md).
 * Each pair's traffic is split over the rails the two hosts share, in
 * proportion lambda_ir * lambda_jr; lambda is found by a symmetric Sinkhorn
 * scaling so that every NIC's load is proportional to its bandwidth.
 * Everything is computed per host class (hosts with identical NICs), so the
 * cost is O(classes^2 * rails) and not O(n^2).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner_int.h"

static double class_bw(const struct r2_hclass *c, uint32_t R)
{
	double s = 0;
	for (uint32_t r = 0; r < R; r++)
		s += c->bw[r];
	return s;
}

static int by_bw_desc(const void *pa, const void *pb, void *arg)
{
	const double *B = arg;
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	if (B[a] != B[b])
		return B[a] > B[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* Rail split of a class pair from lambda (mask: usable common rails). */
static double pair_frac(const struct r2_hclass *ci, const struct r2_hclass *cj, uint16_t mask,
			uint32_t R, double frac[])
{
	double s = 0;
	for (uint32_t r = 0; r < R; r++) {
		frac[r] = (mask >> r) & 1u ? ci->lambda[r] * cj->lambda[r] : 0;
		s += frac[r];
	}
	if (s <= 0) {
		/* lambda vanished on the remaining rails: equal split */
		for (uint32_t r = 0; r < R; r++) {
			frac[r] = (mask >> r) & 1u ? 1 : 0;
			s += frac[r];
		}
	}
	if (s > 0)
		for (uint32_t r = 0; r < R; r++)
			frac[r] /= s;
	return s;
}

int r2_shard_solve(struct r2_hclass *cls, uint32_t C, uint32_t n, uint32_t R, uint64_t S,
		   uint32_t elem, uint32_t *rem_cls, uint64_t *rem)
{
	double *B = malloc(C * sizeof(double));
	double *s = malloc(C * sizeof(double));
	uint32_t *ord = malloc(C * sizeof(uint32_t));
	double *U = malloc(C * sizeof(double));
	double *load = malloc((size_t)C * R * sizeof(double));
	if (!B || !s || !ord || !U || !load) {
		free(B); free(s); free(ord); free(U); free(load);
		return -ENOMEM;
	}
	double Sd = (double)S;
	for (uint32_t c = 0; c < C; c++) {
		B[c] = class_bw(&cls[c], R);
		ord[c] = c;
		s[c] = 0;
	}
	qsort_r(ord, C, sizeof(uint32_t), by_bw_desc, B);
	if (n == 1) {
		s[0] = Sd;
	} else if (n == 2) {
		double tot = 0;
		for (uint32_t c = 0; c < C; c++)
			tot += cls[c].count * B[c];
		for (uint32_t c = 0; c < C; c++)
			s[c] = tot > 0 ? Sd * B[c] / tot : Sd / 2;
	} else {
		/* water-filling: the top k classes own shards */
		double N = 0, W = 0, T = 0;
		for (uint32_t k = 0; k < C; k++) {
			uint32_t c = ord[k];
			N += cls[c].count;
			W += cls[c].count * B[c];
			T = Sd * ((double)(n - 2) + N) / W;
			bool last = k + 1 == C;
			if (T * B[c] >= Sd * (1 - 1e-12) && (last || T * B[ord[k + 1]] <= Sd))
				break;
		}
		for (uint32_t c = 0; c < C; c++)
			s[c] = fmax(0.0, (T * B[c] - Sd) / (double)(n - 2));
	}
	/* element alignment; the remainder goes to one host of the best class */
	uint64_t used = 0;
	for (uint32_t c = 0; c < C; c++) {
		uint64_t v = (uint64_t)(s[c] / elem) * elem;
		if (v > S)
			v = S;
		cls[c].shard = v;
		used += v * cls[c].count;
	}
	while (used > S) { /* rounding can only overshoot through huge counts */
		for (uint32_t c = 0; c < C && used > S; c++)
			if (cls[c].shard >= elem) {
				cls[c].shard -= elem;
				used -= (uint64_t)elem * cls[c].count;
			}
	}
	*rem_cls = ord[0];
	*rem = S - used;

	/* symmetric Sinkhorn scaling of lambda per class and rail */
	for (uint32_t c = 0; c < C; c++)
		for (uint32_t r = 0; r < R; r++)
			cls[c].lambda[r] = cls[c].bw[r] > 0 ? 1.0 : 0.0;
	for (uint32_t c = 0; c < C; c++) {
		U[c] = 0;
		for (uint32_t d = 0; d < C; d++) {
			double cnt = cls[d].count - (d == c);
			if (cnt > 0 && (cls[c].mask & cls[d].mask))
				U[c] += cnt * (double)(cls[c].shard + cls[d].shard);
		}
	}
	double frac[R2_PLAN_MAX_RAILS];
	for (int it = 0; it < 60 && n > 1 && C <= 128; it++) {
		memset(load, 0, (size_t)C * R * sizeof(double));
		for (uint32_t c = 0; c < C; c++)
			for (uint32_t d = 0; d < C; d++) {
				double cnt = cls[d].count - (d == c);
				uint16_t m = cls[c].mask & cls[d].mask;
				if (cnt <= 0 || !m)
					continue;
				pair_frac(&cls[c], &cls[d], m, R, frac);
				double u = cnt * (double)(cls[c].shard + cls[d].shard);
				for (uint32_t r = 0; r < R; r++)
					load[c * R + r] += u * frac[r];
			}
		double worst = 0;
		for (uint32_t c = 0; c < C; c++)
			for (uint32_t r = 0; r < R; r++) {
				double tgt = B[c] > 0 ? U[c] * cls[c].bw[r] / B[c] : 0;
				double l = load[c * R + r];
				if (tgt <= 0 || l <= 0)
					continue;
				double q = tgt / l;
				worst = fmax(worst, fabs(q - 1));
				cls[c].lambda[r] *= sqrt(q);
			}
		if (worst < 1e-6)
			break;
	}
	/* normalize lambda for readability (max 1 per class) */
	for (uint32_t c = 0; c < C; c++) {
		double mx = 0;
		for (uint32_t r = 0; r < R; r++)
			mx = fmax(mx, cls[c].lambda[r]);
		if (mx > 0)
			for (uint32_t r = 0; r < R; r++)
				cls[c].lambda[r] /= mx;
	}
	free(B); free(s); free(ord); free(U); free(load);
	return 0;
}

bool r2_pair_split(const struct r2_view *v, uint32_t i, uint32_t j, double frac[])
{
	const struct r2_hclass *ci = &v->cls[r2_view_class(v, i)];
	const struct r2_hclass *cj = &v->cls[r2_view_class(v, j)];
	uint16_t m = ci->mask & cj->mask & (uint16_t)~r2_pair_down_mask(v->down, v->ndown, i, j);
	if (!m)
		return false;
	pair_frac(ci, cj, m, v->R, frac);
	return true;
}

void r2_split_bytes(uint64_t len, uint32_t elem, uint32_t R, const double frac[], uint64_t lens[])
{
	uint64_t E = len / elem, used = 0;
	double acc = 0;
	int last = -1;
	for (uint32_t r = 0; r < R; r++)
		if (frac[r] > 0)
			last = (int)r;
	for (uint32_t r = 0; r < R; r++) {
		lens[r] = 0;
		if (frac[r] <= 0)
			continue;
		acc += frac[r];
		uint64_t hi = (int)r == last ? E : (uint64_t)(acc * (double)E + 0.5);
		if (hi > E)
			hi = E;
		if (hi < used)
			hi = used;
		lens[r] = (hi - used) * elem;
		used = hi;
	}
}

uint64_t r2_shard_of(const struct r2_view *v, uint32_t j)
{
	uint64_t s = v->cls[r2_view_class(v, j)].shard;
	if (j == v->rem_host)
		s += v->rem_bytes;
	return s;
}

/* Adds (sign +1) or removes (-1) the step loads of pair (a, b) owning sa
 * and sb bytes, with the given split (or bridge hop when frac == NULL). */
static void pair_load(struct ctx *x, uint32_t elem, uint32_t R, uint32_t a, uint32_t b,
		      uint64_t sa, uint64_t sb, const double *frac, const struct r2_hop *hop,
		      uint32_t K, int part, double sign)
{
	double cha = (double)r2_ceil_chunk(sa, elem, K);
	double chb = (double)r2_ceil_chunk(sb, elem, K);
	/* a -> b: RS carries b's shard chunk, AG carries a's shard chunk */
	double ab[2] = { part != 2 ? chb : 0, part != 0 ? cha : 0 };
	double ba[2] = { part != 2 ? cha : 0, part != 0 ? chb : 0 };
	for (int k = 0; k < 2; k++) {
		if (!frac) {
			struct r2_hop rev = { hop->rail2, hop->rail, hop->via };
			r2_ld_hop(x, a, b, hop, ab[k], sign);
			r2_ld_hop(x, b, a, &rev, ba[k], sign);
			continue;
		}
		for (uint32_t r = 0; r < R; r++) {
			if (frac[r] <= 0)
				continue;
			struct r2_hop h = { (uint16_t)r, (uint16_t)r, R2_NO_HOST };
			r2_ld_hop(x, a, b, &h, ab[k] * frac[r], sign);
			r2_ld_hop(x, b, a, &h, ba[k] * frac[r], sign);
		}
	}
}

void r2_shard_phase_load(struct ctx *x, const struct r2_view *v, const struct r2_comp *cp,
			 int part)
{
	uint32_t C = x->ncls, R = x->R, K = cp->nchunks;
	/* extended classes: the remainder host is a class of its own */
	uint32_t rh = v->rem_bytes ? v->rem_host : R2_NO_HOST;
	uint32_t EC = C + (rh != R2_NO_HOST);
	struct r2_hclass *cls = malloc(EC * sizeof(*cls));
	double *acc = calloc((size_t)EC * R * 2, sizeof(double));
	uint32_t *cm = calloc((size_t)EC * R * 2, sizeof(uint32_t));
	double *ch = calloc(EC, sizeof(double));
	if (!cls || !acc || !cm || !ch) {
		free(cls); free(acc); free(cm); free(ch);
		return;
	}
	memcpy(cls, v->cls, C * sizeof(*cls));
	if (rh != R2_NO_HOST) {
		uint32_t rc = x->hcls[rh];
		cls[C] = cls[rc];
		cls[C].count = 1;
		cls[C].shard += v->rem_bytes;
		cls[rc].count--;
	}
#define ECLS(h) ((h) == rh ? C : x->hcls[h])
	for (uint32_t c = 0; c < EC; c++)
		ch[c] = (double)r2_ceil_chunk(cls[c].shard, v->elem, K);
	double frac[R2_PLAN_MAX_RAILS];
	for (uint32_t c = 0; c < EC; c++)
		for (uint32_t d = 0; d < EC; d++) {
			double cnt = (double)cls[d].count - (d == c);
			uint16_t m = cls[c].mask & cls[d].mask;
			if (cnt <= 0 || !m)
				continue;
			pair_frac(&cls[c], &cls[d], m, R, frac);
			for (uint32_t r = 0; r < R; r++) {
				if (frac[r] <= 0)
					continue;
				double *t = &acc[(c * R + r) * 2];
				uint32_t *tm = &cm[(c * R + r) * 2];
				if (part != 2) { /* RS: send d's chunk, receive own chunk */
					t[0] += cnt * ch[d] * frac[r];
					t[1] += cnt * ch[c] * frac[r];
					if (ch[d] > 0)
						tm[0] += (uint32_t)cnt;
					if (ch[c] > 0)
						tm[1] += (uint32_t)cnt;
				}
				if (part != 0) { /* AG: send own chunk, receive d's */
					t[0] += cnt * ch[c] * frac[r];
					t[1] += cnt * ch[d] * frac[r];
					if (ch[c] > 0)
						tm[0] += (uint32_t)cnt;
					if (ch[d] > 0)
						tm[1] += (uint32_t)cnt;
				}
			}
		}
	x->ld_full = true; /* every NIC written below */
	for (uint32_t h = 0; h < x->n; h++) {
		uint32_t c = ECLS(h);
		for (uint32_t r = 0; r < R; r++) {
			size_t i = (size_t)h * R + r;
			x->tx[i] += acc[(c * R + r) * 2 + 0];
			x->rx[i] += acc[(c * R + r) * 2 + 1];
			x->mt[i] += cm[(c * R + r) * 2 + 0];
			x->mr[i] += cm[(c * R + r) * 2 + 1];
		}
	}
	/* corrections: pairs with failed links and bridged pairs (each once):
	 * the class sums above used the class split for them */
	const struct r2_link *d = v->down;
	for (uint32_t i = 0; i < v->ndown + v->nroute; i++) {
		uint32_t a, b;
		if (i < v->ndown) {
			if (i && d[i].a == d[i - 1].a && d[i].b == d[i - 1].b)
				continue;
			a = d[i].a;
			b = d[i].b;
		} else {
			const struct r2_route *rt = &v->route[i - v->ndown];
			if (rt->lrail != R2_LRAIL_PAIR || r2_pair_down_mask(v->down, v->ndown, rt->a, rt->b))
				continue;
			a = rt->a;
			b = rt->b;
		}
		const struct r2_hclass *ca = &cls[ECLS(a)], *cb = &cls[ECLS(b)];
		uint16_t m = ca->mask & cb->mask;
		if (m) {
			pair_frac(ca, cb, m, R, frac);
			pair_load(x, v->elem, R, a, b, ca->shard, cb->shard, frac, NULL, K, part, -1);
		}
		struct r2_hop h;
		if (r2_view_route(v, a, b, R2_LRAIL_PAIR, &h))
			pair_load(x, v->elem, R, a, b, ca->shard, cb->shard, NULL, &h, K, part, +1);
		else if (r2_pair_split(v, a, b, frac))
			pair_load(x, v->elem, R, a, b, ca->shard, cb->shard, frac, NULL, K, part, +1);
	}
#undef ECLS
	free(cls); free(acc); free(cm); free(ch);
}
