/* SPDX-License-Identifier: MIT */
/*
 * Plan construction, part 2: the analytic cost of a candidate, step by
 * step (phases of identical steps, per-link load, the alpha-beta-depth model).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_bld.h"
#include "util.h"

/* ---- analytic cost: phases of identical steps ---------------------------- */



void pl_ld_clear(struct ctx *x)
{
	size_t N = (size_t)x->n * x->R;
	if (x->ld_full || x->ntouch > N / 8) {
		memset(x->tx, 0, N * sizeof(double));
		memset(x->rx, 0, N * sizeof(double));
		memset(x->mt, 0, N * sizeof(uint32_t));
		memset(x->mr, 0, N * sizeof(uint32_t));
		memset(x->mark, 0, N);
	} else {
		for (size_t k = 0; k < x->ntouch; k++) {
			uint32_t i = x->touch[k];
			x->tx[i] = x->rx[i] = 0;
			x->mt[i] = x->mr[i] = 0;
			x->mark[i] = 0;
		}
	}
	x->ntouch = 0;
	x->ld_full = false;
}

static inline void ld_add(struct ctx *x, size_t i, double *v, uint32_t *m, double bytes, int k)
{
	if (!x->mark[i]) {
		x->mark[i] = 1;
		x->touch[x->ntouch++] = (uint32_t)i;
	}
	v[i] += bytes;
	m[i] += (uint32_t)k;
}

void r2_ld_hop(struct ctx *x, uint32_t a, uint32_t bb, const struct r2_hop *h, double bytes,
	       double sign)
{
	uint32_t R = x->R;
	int m = sign > 0 ? 1 : -1;
	if (bytes <= 0)
		return;
	if (h->via == R2_NO_HOST) {
		ld_add(x, (size_t)a * R + h->rail, x->tx, x->mt, sign * bytes, m);
		ld_add(x, (size_t)bb * R + h->rail, x->rx, x->mr, sign * bytes, m);
	} else {
		uint32_t C = h->via;
		ld_add(x, (size_t)a * R + h->rail, x->tx, x->mt, sign * bytes, m);
		ld_add(x, (size_t)C * R + h->rail, x->rx, x->mr, sign * bytes, m);
		ld_add(x, (size_t)C * R + h->rail2, x->tx, x->mt, sign * bytes, m);
		ld_add(x, (size_t)bb * R + h->rail2, x->rx, x->mr, sign * bytes, m);
	}
}

static double nic_time(const struct ctx *x, size_t i)
{
	const struct r2_cluster *c = x->c;
	const struct r2_nic *ni = &c->nic[i];
	double a = c->cost.alpha + ni->lat, t = 0;
	if (x->mt[i])
		t = x->mt[i] * a + (ni->bw_tx > 0 ? x->tx[i] / ni->bw_tx : INFINITY);
	if (x->mr[i]) {
		double v = x->mr[i] * a + (ni->bw_rx > 0 ? x->rx[i] / ni->bw_rx : INFINITY);
		if (v > t)
			t = v;
	}
	return t;
}

static double ld_time(struct ctx *x)
{
	double t = 0;
	if (x->ld_full) {
		size_t N = (size_t)x->n * x->R;
		for (size_t i = 0; i < N; i++)
			t = fmax(t, nic_time(x, i));
	} else {
		for (size_t k = 0; k < x->ntouch; k++)
			t = fmax(t, nic_time(x, x->touch[k]));
	}
	return t;
}

uint64_t r2_ceil_chunk(uint64_t len, uint32_t elem, uint32_t K)
{
	uint64_t E = len / elem;
	return ((E + K - 1) / K) * elem;
}

static void hop_of(struct bld *b, const struct r2_view *v, uint32_t a, uint32_t bb, uint16_t l,
		   struct r2_hop *h)
{
	(void)v;
	int k = pl_rhash_find(b, a, bb, l);
	if (k >= 0) {
		const struct r2_route *r = &b->route[k];
		*h = (struct r2_hop){ r->rail, r->rail2, r->via };
	} else {
		*h = (struct r2_hop){ l, l, R2_NO_HOST };
	}
}


/* Sends of the member at position p (UINT32_MAX - 1 - i: extra i). */
static void hd_load_pos(struct ctx *x, const struct r2_view *v, const struct r2_comp *cp,
			const struct r2_hd_geo *g, uint32_t p, int64_t j)
{
	struct r2_hd_msg msg[2 * R2_HD_MAX_FAN + 2];
	uint64_t lens[R2_PLAN_MAX_RAILS];
	uint32_t a = p < g->m ? r2_hd_host(v, cp, g, p) : v->hosts[cp->leaf + (UINT32_MAX - 1 - p)];
	size_t nm = r2_hd_msgs_at(v, cp, g, a, p, j, msg, 2 * R2_HD_MAX_FAN + 2);
	for (size_t i = 0; i < nm; i++) {
		if (!msg[i].send ||
		    !r2_hd_rails(v, cp, a, msg[i].peer, msg[i].slot, msg[i].nslot, msg[i].len, lens))
			continue;
		for (uint32_t r = 0; r < v->R; r++) {
			struct r2_hop h = { (uint16_t)r, (uint16_t)r, R2_NO_HOST };
			r2_ld_hop(x, a, msg[i].peer, &h, (double)lens[r], 1);
		}
	}
}

/* Level k of step j (UINT32_MAX outside the exchange steps). */
static uint32_t hd_level(const struct r2_hd_geo *g, enum r2_plan_op op, int64_t j)
{
	int64_t t = j - g->s0;
	if (t < 0)
		return UINT32_MAX;
	if (g->rd)
		t = t < g->L ? t : (int64_t)(g->L + g->nh) - 1 - t; /* RS, RD, then AG */
	else if (op == R2_PLAN_ALLREDUCE)
		t = t < g->L ? t : 2 * (int64_t)g->L - 1 - t;
	else if (op == R2_PLAN_ALLGATHER)
		t = (int64_t)g->L - 1 - t;
	return t >= 0 && t < g->L ? (uint32_t)t : UINT32_MAX;
}

/* Group (base position) of member p at level k. */
static uint32_t hd_base(const struct r2_hd_geo *g, uint32_t k, uint32_t p)
{
	return p - ((p / g->stride[k]) % g->f[k]) * g->stride[k];
}

/*
 * Loads of one HD step. Every step is a set of disjoint groups (cliques of
 * f_k members, or fold pairs) whose loads come from their own sends only.
 * With few special hosts (a class other than 0, a failed link) in a large
 * cluster whose pieces are all non-empty, the groups without a special host
 * are alike: the groups of the special hosts and one plain group give the
 * step's maximum. Otherwise every member is loaded.
 */
static void hd_phase_load(struct bld *b, const struct r2_view *v, const struct r2_comp *cp,
			  int64_t j)
{
	struct ctx *x = b->x;
	struct r2_hd_geo g;
	r2_hd_geo(v, cp, &g);
	uint32_t e = cp->nleaf, nsp = x->nhcx + 2 * x->c->ndown;
	bool fold = e && (j == 0 || j == (int64_t)r2_hd_nsteps(v->op, cp) - 1);
	uint32_t lv = hd_level(&g, v->op, j);
	bool few = x->n > 64 && nsp <= 64 && v->size / v->elem >= g.m;
	if (!few) {
		for (uint32_t p = 0; p < g.m; p++)
			hd_load_pos(x, v, cp, &g, p, j);
		for (uint32_t i = 0; i < e; i++)
			hd_load_pos(x, v, cp, &g, UINT32_MAX - 1 - i, j);
		return;
	}
	/* special positions */
	uint32_t sp[2 * 64 + 1], ns = 0;
	for (uint32_t i = 0; i < nsp; i++)
		sp[ns++] = r2_hd_pos(v, cp, &g, pl_special_host(x, i));
	uint32_t grp[2 * 64 + 2], ng = 0; /* fold: pair index; else base position */
	for (uint32_t i = 0; i < ns; i++) {
		uint32_t q;
		if (sp[i] == UINT32_MAX)
			continue;
		if (fold)
			q = sp[i] >= g.m ? UINT32_MAX - 1 - sp[i] : sp[i];
		else if (sp[i] >= g.m || lv == UINT32_MAX)
			continue;
		else
			q = hd_base(&g, lv, sp[i]);
		if (fold && q >= e)
			continue;
		bool dup = false;
		for (uint32_t k = 0; k < ng; k++)
			dup |= grp[k] == q;
		if (!dup)
			grp[ng++] = q;
	}
	/* one plain group */
	uint32_t lim = fold ? e : g.m;
	for (uint32_t q = 0; q < lim; q++) {
		if (!fold && lv == UINT32_MAX)
			break;
		uint32_t base = fold ? q : hd_base(&g, lv, q);
		bool dup = false;
		for (uint32_t k = 0; k < ng; k++)
			dup |= grp[k] == base;
		if (!dup) {
			grp[ng++] = base;
			break;
		}
	}
	for (uint32_t i = 0; i < ng; i++) {
		if (fold) {
			hd_load_pos(x, v, cp, &g, grp[i], j);
			hd_load_pos(x, v, cp, &g, UINT32_MAX - 1 - grp[i], j);
			continue;
		}
		for (uint32_t d = 0; d < g.f[lv]; d++)
			hd_load_pos(x, v, cp, &g, grp[i] + d * g.stride[lv], j);
	}
}

/* Sends of host a in Bruck step j. */
static void bruck_load_host(struct ctx *x, const struct r2_view *v, const struct r2_comp *cp,
			    uint32_t a, int64_t j)
{
	struct r2_hd_msg msg[4 * R2_HD_MAX_FAN];
	uint64_t lens[R2_PLAN_MAX_RAILS];
	size_t nm = r2_bruck_msgs(v, cp, a, j, msg, R2_ARRAY_SIZE(msg));
	for (size_t i = 0; i < nm && i < R2_ARRAY_SIZE(msg); i++) {
		if (!msg[i].send || !r2_hd_rails(v, cp, a, msg[i].peer, msg[i].slot, msg[i].nslot,
						 msg[i].len + msg[i].len2, lens))
			continue;
		struct r2_hd_part pt[R2_PLAN_MAX_RAILS + 1];
		size_t np = r2_hd_parts(&msg[i], lens, v->R, v->elem, cp->lrail & 2, pt);
		for (size_t q = 0; q < np; q++) {
			struct r2_hop h = { pt[q].rail, pt[q].rail, R2_NO_HOST };
			r2_ld_hop(x, a, msg[i].peer, &h, (double)pt[q].len, 1);
		}
	}
}

static int u32_cmp(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	return a < b ? -1 : a > b;
}

/* Adds host h and the hosts it exchanges with in step j to set[*n]. */
static void bruck_with_peers(const struct r2_view *v, const struct r2_comp *cp, uint32_t h,
			     int64_t j, uint32_t *set, size_t *n)
{
	struct r2_hd_msg msg[4 * R2_HD_MAX_FAN];
	size_t nm = r2_bruck_msgs(v, cp, h, j, msg, R2_ARRAY_SIZE(msg));
	set[(*n)++] = h;
	for (size_t i = 0; i < nm && i < R2_ARRAY_SIZE(msg); i++)
		set[(*n)++] = msg[i].peer;
}

/*
 * Loads of one Bruck step. Every host's step has the same shape, so with
 * few special hosts (a class other than 0, a failed link) in a large
 * cluster whose pieces are all non-empty, only the special hosts, host
 * n - 1 (its blocks wrap) and the hosts they exchange with can differ from
 * a plain host: those and one plain host get their exact loads (their own
 * sends and their senders'), which give the step's maximum. Otherwise (and
 * with a wrapped block's ranges on disjoint rails, variant bit 1, which
 * loads each host by where its blocks wrap) every host is loaded.
 */
static void bruck_phase_load(struct bld *b, const struct r2_view *v, const struct r2_comp *cp,
			     int64_t j)
{
	struct ctx *x = b->x;
	uint32_t n = x->n, nsp = x->nhcx + 2 * x->c->ndown;
	size_t per = 1 + r2_bruck_max_msgs(v, cp), ny = 0, nz = 0;
	uint32_t *y = NULL, *z = NULL;
	if (n > 64 && nsp <= 64 && v->size / v->elem >= n && !(cp->lrail & 2)) {
		y = malloc(((nsp + 1) * per + 1) * sizeof(uint32_t));
		z = malloc(((nsp + 1) * per + 1) * per * sizeof(uint32_t));
	}
	if (!z) {
		free(y);
		for (uint32_t h = 0; h < n; h++)
			bruck_load_host(x, v, cp, h, j);
		return;
	}
	for (uint32_t i = 0; i < nsp; i++) {
		uint32_t h = pl_special_host(x, i);
		bruck_with_peers(v, cp, h, j, y, &ny);
	}
	/* host n - 1: its blocks wrap past the last piece (two messages
	 * each), as one block each of the hosts it sends them to */
	bruck_with_peers(v, cp, n - 1, j, y, &ny);
	qsort(y, ny, sizeof(uint32_t), u32_cmp);
	size_t nu = 0; /* each once */
	for (size_t i = 0; i < ny; i++)
		if (!nu || y[i] != y[nu - 1])
			y[nu++] = y[i];
	ny = nu;
	uint32_t plain = 0; /* the first host outside y */
	for (size_t i = 0; i < ny && y[i] <= plain; i++)
		if (y[i] == plain)
			plain++;
	if (plain < n)
		y[ny++] = plain;
	/* each of them with its peers: their sends load its NICs both ways */
	for (size_t i = 0; i < ny; i++)
		bruck_with_peers(v, cp, y[i], j, z, &nz);
	qsort(z, nz, sizeof(uint32_t), u32_cmp);
	for (size_t i = 0; i < nz; i++)
		if (!i || z[i] != z[i - 1])
			bruck_load_host(x, v, cp, z[i], j);
	free(y);
	free(z);
}

static void phase_load(struct bld *b, const struct r2_view *v, const struct phase *ph)
{
	struct ctx *x = b->x;
	const struct r2_comp *cp = &b->comp[ph->comp];
	uint32_t m = cp->nmem;
	struct r2_hop h;
	switch (ph->type) {
	case PH_RING: {
		double piece;
		if (v->op == R2_PLAN_ALLREDUCE)
			piece = (double)r2_ceil_chunk(cp->len, v->elem, m);
		else
			piece = (double)cp->len;
		for (uint32_t p = 0; p < m; p++) {
			uint32_t a = r2_comp_member(v, cp, p), nb = r2_comp_member(v, cp, (p + 1) % m);
			hop_of(b, v, a, nb, cp->lrail, &h);
			r2_ld_hop(x, a, nb, &h, piece, 1);
		}
		break;
	}
	case PH_INJECT:
	case PH_EXTRACT: {
		double piece = (double)r2_ceil_chunk(cp->len, v->elem, m);
		for (uint32_t l = 0; l < cp->nleaf; l++) {
			uint32_t lf = v->hosts[cp->leaf + l];
			for (uint32_t p = 0; p < m; p++) {
				uint32_t a = r2_comp_member(v, cp, p);
				if (ph->type == PH_INJECT) {
					hop_of(b, v, lf, a, cp->lrail, &h);
					r2_ld_hop(x, lf, a, &h, piece, 1);
				} else {
					hop_of(b, v, a, lf, cp->lrail, &h);
					r2_ld_hop(x, a, lf, &h, piece, 1);
				}
			}
		}
		break;
	}
	case PH_CHAIN_B:
	case PH_CHAIN_R: {
		double ch = (double)r2_ceil_chunk(cp->len, v->elem, cp->nchunks);
		for (uint32_t p = 0; p + 1 < m; p++) {
			uint32_t a = r2_comp_member(v, cp, p), nb = r2_comp_member(v, cp, p + 1);
			if (ph->type == PH_CHAIN_B) {
				hop_of(b, v, a, nb, cp->lrail, &h);
				r2_ld_hop(x, a, nb, &h, ch, 1);
			} else {
				hop_of(b, v, nb, a, cp->lrail, &h);
				r2_ld_hop(x, nb, a, &h, ch, 1);
			}
		}
		break;
	}
	case PH_TREE_B:
	case PH_TREE_R: {
		double ch = (double)r2_ceil_chunk(cp->len, v->elem, cp->nchunks);
		for (uint32_t i = 1; i < m; i++) {
			uint32_t par = r2_comp_member(v, cp, (i - 1) / 2), me = r2_comp_member(v, cp, i);
			if (ph->type == PH_TREE_B) {
				hop_of(b, v, par, me, cp->lrail, &h);
				r2_ld_hop(x, par, me, &h, ch, 1);
			} else {
				hop_of(b, v, me, par, cp->lrail, &h);
				r2_ld_hop(x, me, par, &h, ch, 1);
			}
		}
		break;
	}
	case PH_DIRECT: {
		uint32_t a = r2_comp_member(v, cp, 0), nb = r2_comp_member(v, cp, 1);
		hop_of(b, v, a, nb, cp->lrail, &h);
		r2_ld_hop(x, a, nb, &h, (double)cp->len, 1);
		break;
	}
	case PH_HD:
		if (cp->algo == R2_ALGO_BRUCK)
			bruck_phase_load(b, v, cp, (int64_t)ph->s0 - cp->step0);
		else
			hd_phase_load(b, v, cp, (int64_t)ph->s0 - cp->step0);
		break;
	default:
		r2_shard_phase_load(x, v, cp, ph->type - PH_SHARD_FIRST);
		break;
	}
}

static int add_phase(struct phase **ph, uint32_t *n, uint32_t *cap, uint32_t s0, uint32_t s1,
		     uint32_t comp, int type)
{
	if (s1 <= s0)
		return 0;
	struct phase *p = pl_grow(*ph, cap, *n + 1, sizeof(**ph));
	if (!p)
		return -ENOMEM;
	*ph = p;
	p[(*n)++] = (struct phase){ s0, s1, comp, (uint8_t)type };
	return 0;
}

static int u32cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Sets b->time and b->nsteps from the components. */
int pl_bld_cost(struct bld *b)
{
	struct ctx *x = b->x;
	struct r2_view v;
	pl_bld_view(b, &v);
	struct phase *ph = NULL;
	uint32_t nph = 0, cap = 0;
	int err = 0;
	b->nsteps = 0;
	for (uint32_t i = 0; i < b->ncomp && !err; i++) {
		struct r2_comp *cp = &b->comp[i];
		uint32_t m = cp->nmem, K = cp->nchunks, s = cp->step0;
		switch (cp->algo) {
		case R2_ALGO_RING: {
			uint32_t rs = m - 1;
			uint32_t ring = v.op == R2_PLAN_ALLREDUCE ? 2 * rs : rs;
			err = add_phase(&ph, &nph, &cap, s, s + ring, i, PH_RING);
			if (cp->nleaf) {
				err = err ? err : add_phase(&ph, &nph, &cap, s - 1, s, i, PH_INJECT);
				err = err ? err : add_phase(&ph, &nph, &cap, s + ring, s + ring + 1, i, PH_EXTRACT);
				cp->nsteps = ring + 2;
			} else {
				cp->nsteps = ring;
			}
			break;
		}
		case R2_ALGO_CHAIN:
			cp->nsteps = m > 1 ? K + m - 2 : 0;
			err = add_phase(&ph, &nph, &cap, s, s + cp->nsteps, i,
					v.op == R2_PLAN_REDUCE ? PH_CHAIN_R : PH_CHAIN_B);
			break;
		case R2_ALGO_TREE:
			cp->nsteps = m > 1 ? K + r2_tree_depth(m - 1) - 1 : 0;
			err = add_phase(&ph, &nph, &cap, s, s + cp->nsteps, i,
					v.op == R2_PLAN_REDUCE ? PH_TREE_R : PH_TREE_B);
			break;
		case R2_ALGO_DIRECT:
			cp->nsteps = 1;
			err = add_phase(&ph, &nph, &cap, s, s + 1, i, PH_DIRECT);
			break;
		case R2_ALGO_SHARD:
			cp->nsteps = K + 1;
			err = add_phase(&ph, &nph, &cap, s, s + 1, i, PH_SHARD_FIRST);
			err = err ? err : add_phase(&ph, &nph, &cap, s + 1, s + K, i, PH_SHARD_MID);
			err = err ? err : add_phase(&ph, &nph, &cap, s + K, s + K + 1, i, PH_SHARD_LAST);
			break;
		case R2_ALGO_HD:
		case R2_ALGO_RD:
		case R2_ALGO_BRUCK:
			cp->nsteps = cp->algo == R2_ALGO_BRUCK ? r2_bruck_nsteps(v.op, cp)
							      : r2_hd_nsteps(v.op, cp);
			for (uint32_t j = 0; j < cp->nsteps && !err; j++)
				err = add_phase(&ph, &nph, &cap, s + j, s + j + 1, i, PH_HD);
			break;
		default:
			break;
		}
		uint32_t end = cp->step0 + cp->nsteps -
			       (cp->algo == R2_ALGO_RING && cp->nleaf ? 1 : 0);
		if (cp->nsteps && end > b->nsteps)
			b->nsteps = end;
	}
	if (err) {
		free(ph);
		return err;
	}
	uint32_t *bd = malloc((2 * nph + 1) * sizeof(uint32_t));
	if (!bd) {
		free(ph);
		return -ENOMEM;
	}
	uint32_t nb = 0;
	for (uint32_t i = 0; i < nph; i++) {
		bd[nb++] = ph[i].s0;
		bd[nb++] = ph[i].s1;
	}
	qsort(bd, nb, sizeof(uint32_t), u32cmp);
	double t = 0, gam = x->c->cost.gamma * (b->depth + (b->nbridged ? 1 : 0));
	for (uint32_t i = 0; i + 1 < nb; i++) {
		uint32_t s0 = bd[i], s1 = bd[i + 1];
		if (s1 == s0)
			continue;
		pl_ld_clear(x);
		bool any = false;
		for (uint32_t k = 0; k < nph; k++)
			if (ph[k].s0 <= s0 && ph[k].s1 >= s1) {
				phase_load(b, &v, &ph[k]);
				any = true;
			}
		if (any)
			t += (s1 - s0) * (ld_time(x) + gam);
	}
	free(bd);
	free(ph);
	b->time = t;
	return 0;
}

