/* SPDX-License-Identifier: MIT */
/*
 * Plan construction, part 3: the schedules: rings over rails, the recursive
 * dual-ring (seed 2.2), chains and trees for broadcast/reduce, direct, and
 * the shard plan.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_bld.h"
#include "util.h"

/* ---- rings over rails --------------------------------------------------- */


/* Per-rail shares for rings (or chains) over members (NULL: all hosts). */
static int ring_shares(struct bld *b, const uint32_t *mem, uint32_t m, enum share_rule rule,
		       double share[])
{
	struct ctx *x = b->x;
	uint32_t R = x->R;
	for (uint32_t r = 0; r < R; r++)
		share[r] = 1.0 / R;
	if (rule == SHARE_EQUAL || m < 2)
		return 0;
	pl_ld_clear(x);
	struct r2_hop h;
	for (uint32_t r = 0; r < R; r++)
		for (uint32_t p = 0; p < m; p++) {
			uint32_t a = mem ? mem[p] : p, nb = mem ? mem[(p + 1) % m] : (p + 1) % m;
			int e = pl_edge_route(b, a, nb, (uint16_t)r, &h, false);
			if (e)
				return e;
			r2_ld_hop(x, a, nb, &h, 1, 1);
		}
	double sum = 0;
	for (uint32_t r = 0; r < R; r++) {
		double bn = INFINITY;
		for (uint32_t p = 0; p < m; p++) {
			uint32_t a = mem ? mem[p] : p, nb = mem ? mem[(p + 1) % m] : (p + 1) % m;
			pl_edge_route(b, a, nb, (uint16_t)r, &h, false);
			uint32_t hops[2][2] = { { a, h.rail }, { h.via == R2_NO_HOST ? nb : h.via, h.rail } };
			for (int k = 0; k < 2; k++) {
				size_t i = (size_t)hops[k][0] * R + hops[k][1];
				const struct r2_nic *ni = &x->c->nic[i];
				double v = k == 0 ? ni->bw_tx / x->tx[i] : ni->bw_rx / x->rx[i];
				if (v < bn)
					bn = v;
			}
			if (h.via != R2_NO_HOST) {
				size_t i1 = (size_t)h.via * R + h.rail2, i2 = (size_t)nb * R + h.rail2;
				bn = fmin(bn, x->c->nic[i1].bw_tx / x->tx[i1]);
				bn = fmin(bn, x->c->nic[i2].bw_rx / x->rx[i2]);
			}
		}
		share[r] = bn;
		sum += bn;
	}
	for (uint32_t r = 0; r < R; r++)
		share[r] = sum > 0 ? share[r] / sum : 1.0 / R;
	return 0;
}

/* Element-aligned split of total into R parts by share (sums exactly). */
static void split_by_share(uint64_t total, uint32_t elem, uint32_t R, const double share[],
			   uint64_t out[])
{
	uint64_t E = total / elem, used = 0;
	double acc = 0;
	for (uint32_t r = 0; r < R; r++) {
		acc += share[r];
		uint64_t hi = r + 1 == R ? E : (uint64_t)llround(acc * (double)E);
		if (hi > E)
			hi = E;
		if (hi < used)
			hi = used;
		out[r] = (hi - used) * elem;
		used = hi;
	}
}

/* Ring components (one per rail) over [off, off+len) (allreduce) or a
 * sub-range of each segment (AG/RS). */
static int add_rings(struct bld *b, const uint32_t *mem, uint32_t m, const uint32_t *leaves,
		     uint32_t nleaf, uint64_t off, uint64_t len, enum share_rule rule, uint8_t level)
{
	struct ctx *x = b->x;
	uint32_t R = x->R;
	double share[R2_PLAN_MAX_RAILS];
	uint64_t parts[R2_PLAN_MAX_RAILS];
	int e = ring_shares(b, mem, m, rule, share);
	if (e)
		return e;
	split_by_share(len, x->elem, R, share, parts);
	uint32_t memi = mem ? pl_add_hosts(b, mem, m) : R2_ALL_HOSTS;
	uint32_t leafi = nleaf ? pl_add_hosts(b, leaves, nleaf) : 0;
	if (b->err)
		return b->err;
	uint64_t o = off;
	for (uint32_t r = 0; r < R; r++) {
		if (!parts[r]) {
			continue;
		}
		struct r2_comp *c = pl_add_comp(b);
		if (!c)
			return b->err;
		c->algo = R2_ALGO_RING;
		c->level = level;
		c->lrail = (uint16_t)r;
		c->nmem = m;
		c->mem = memi;
		c->nleaf = nleaf;
		c->leaf = leafi;
		c->off = o;
		c->len = parts[r];
		c->step0 = nleaf ? 1 : 0;
		o += parts[r];
		struct r2_hop h;
		for (uint32_t p = 0; m > 1 && p < m; p++) {
			uint32_t a = mem ? mem[p] : p, nb = mem ? mem[(p + 1) % m] : (p + 1) % m;
			if ((e = pl_edge_route(b, a, nb, (uint16_t)r, &h, true)))
				return e;
		}
		for (uint32_t l = 0; l < nleaf; l++)
			for (uint32_t p = 0; p < m; p++) {
				uint32_t a = mem ? mem[p] : p;
				if ((e = pl_edge_route(b, leaves[l], a, (uint16_t)r, &h, false)) ||
				    (e = pl_edge_route(b, a, leaves[l], (uint16_t)r, &h, false)))
					return e;
			}
	}
	return 0;
}

int pl_build_rings(struct bld *b, enum share_rule rule)
{
	struct ctx *x = b->x;
	const struct r2_opdesc *op = x->op;
	uint64_t len = op->op == R2_PLAN_ALLREDUCE ? op->size : op->size / x->n;
	return add_rings(b, NULL, x->n, NULL, 0, 0, len, rule, 0);
}

/* ---- recursive dual-ring (seed 2.2) ------------------------------------ */

static int by_bw(const void *pa, const void *pb, void *arg)
{
	const double *bw = arg;
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	if (bw[a] != bw[b])
		return bw[a] < bw[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

static double cv_of(const struct ctx *x, const uint32_t *s, uint32_t k)
{
	if (k < 2)
		return 0;
	double m = 0, q = 0;
	for (uint32_t i = 0; i < k; i++)
		m += x->hbw[s[i]];
	m /= k;
	for (uint32_t i = 0; i < k; i++)
		q += (x->hbw[s[i]] - m) * (x->hbw[s[i]] - m);
	return m > 0 ? sqrt(q / k) / m : 0;
}

int pl_build_recursive(struct bld *b)
{
	struct ctx *x = b->x;
	uint32_t n = x->n;
	uint32_t *s = malloc(n * sizeof(uint32_t));
	uint32_t *mem = malloc(n * sizeof(uint32_t));
	uint32_t *lv = malloc(n * sizeof(uint32_t));
	uint8_t *in = malloc(n);
	if (!s || !mem || !lv || !in) {
		free(s); free(mem); free(lv); free(in);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		s[i] = i;
	qsort_r(s, n, sizeof(uint32_t), by_bw, x->hbw);
	/* level l has members s[start[l] .. n) and rate = bw of s[start[l]] */
	uint32_t start[MAX_LEVELS + 1];
	uint32_t L = 0;
	start[L++] = 0;
	while (L < MAX_LEVELS && start[L - 1] + 1 < n) {
		uint32_t st = start[L - 1] + 1;
		start[L++] = st;
		if (cv_of(x, s + st, n - st) <= x->prm.recursion_thresh)
			break;
	}
	double top = x->hbw[s[start[L - 1]]];
	double prev = 0;
	uint64_t E = x->op->size / x->elem, usedE = 0;
	double acc = 0;
	int e = 0;
	uint32_t nlev = 0;
	for (uint32_t l = 0; l < L && !e; l++) {
		double rate = x->hbw[s[start[l]]];
		double sh = top > 0 ? (rate - prev) / top : (l == 0 ? 1 : 0);
		prev = rate;
		acc += sh;
		uint64_t hiE = l + 1 == L ? E : (uint64_t)llround(acc * (double)E);
		if (hiE > E)
			hiE = E;
		if (hiE <= usedE)
			continue;
		uint64_t off = usedE * x->elem, len = (hiE - usedE) * x->elem;
		usedE = hiE;
		memset(in, 0, n);
		for (uint32_t i = start[l]; i < n; i++)
			in[s[i]] = 1;
		uint32_t m = 0, nl = 0;
		for (uint32_t h = 0; h < n; h++) {
			if (in[h])
				mem[m++] = h;
			else
				lv[nl++] = h;
		}
		e = add_rings(b, l == 0 ? NULL : mem, m, lv, nl, off, len, SHARE_BOTTLENECK,
			      (uint8_t)nlev);
		nlev++;
	}
	b->depth = (uint16_t)(nlev ? nlev - 1 : 0);
	free(s); free(mem); free(lv); free(in);
	return e;
}

/* ---- broadcast / reduce: chains and trees ------------------------------- */

int pl_build_pipe(struct bld *b, enum r2_algo algo, bool steiner, uint32_t K,
		      enum share_rule rule)
{
	struct ctx *x = b->x;
	uint32_t n = x->n, R = x->R, root = x->op->root;
	uint32_t *mem = malloc(n * sizeof(uint32_t));
	if (!mem)
		return -ENOMEM;
	mem[0] = root;
	uint32_t m = 1;
	for (uint32_t d = 1; d < n; d++)
		mem[m++] = (root + d) % n;
	if (steiner) {
		/* interior = best connected hosts: heap order by bandwidth */
		qsort_r(mem + 1, m - 1, sizeof(uint32_t), by_bw, x->hbw);
		for (uint32_t i = 1, j = m - 1; i < j; i++, j--) {
			uint32_t t = mem[i];
			mem[i] = mem[j];
			mem[j] = t;
		}
	}
	double share[R2_PLAN_MAX_RAILS];
	uint64_t parts[R2_PLAN_MAX_RAILS];
	int e = ring_shares(b, mem, m, rule, share);
	if (e) {
		free(mem);
		return e;
	}
	split_by_share(x->op->size, x->elem, R, share, parts);
	uint32_t memi = pl_add_hosts(b, mem, m);
	uint64_t o = 0;
	for (uint32_t r = 0; r < R && !e && !b->err; r++) {
		if (!parts[r])
			continue;
		struct r2_comp *c = pl_add_comp(b);
		if (!c)
			break;
		c->algo = (uint8_t)algo;
		c->lrail = (uint16_t)r;
		c->nmem = m;
		c->mem = memi;
		c->off = o;
		c->len = parts[r];
		uint64_t E = parts[r] / x->elem;
		c->nchunks = (uint16_t)(E < K ? (E ? E : 1) : K);
		o += parts[r];
		struct r2_hop h;
		for (uint32_t i = 1; i < m && !e; i++) {
			uint32_t par = algo == R2_ALGO_TREE ? mem[(i - 1) / 2] : mem[i - 1];
			e = pl_edge_route(b, par, mem[i], (uint16_t)r, &h, true);
			if (!e)
				e = pl_edge_route(b, mem[i], par, (uint16_t)r, &h, false);
		}
	}
	free(mem);
	b->nchunks = (uint16_t)K;
	return e ? e : b->err;
}

int pl_build_direct(struct bld *b)
{
	struct ctx *x = b->x;
	uint32_t a = x->op->root, d = x->op->peer, R = x->R;
	double share[R2_PLAN_MAX_RAILS], sum = 0;
	uint64_t parts[R2_PLAN_MAX_RAILS];
	for (uint32_t r = 0; r < R; r++) {
		share[r] = 0;
		if (pl_pair_ok(x, a, d, r)) {
			const struct r2_nic *na = &x->c->nic[(size_t)a * R + r];
			const struct r2_nic *nd = &x->c->nic[(size_t)d * R + r];
			share[r] = fmin(na->bw_tx, nd->bw_rx);
		}
		sum += share[r];
	}
	if (sum <= 0) {
		share[0] = 1;
		sum = 1;
	}
	for (uint32_t r = 0; r < R; r++)
		share[r] /= sum;
	split_by_share(x->op->size, x->elem, R, share, parts);
	uint32_t pair[2] = { a, d };
	uint32_t memi = pl_add_hosts(b, pair, 2);
	uint64_t o = 0;
	for (uint32_t r = 0; r < R; r++) {
		if (!parts[r])
			continue;
		struct r2_comp *c = pl_add_comp(b);
		if (!c)
			return b->err;
		c->algo = R2_ALGO_DIRECT;
		c->lrail = (uint16_t)r;
		c->nmem = 2;
		c->mem = memi;
		c->off = o;
		c->len = parts[r];
		o += parts[r];
		struct r2_hop h;
		int e = pl_edge_route(b, a, d, (uint16_t)r, &h, true);
		if (e)
			return e;
	}
	return b->err;
}

/* ---- the shard plan (ours, allreduce) ------------------------------------ */


int pl_build_shard(struct bld *b, uint32_t K)
{
	struct ctx *x = b->x;
	if (!x->shard_cls) {
		x->shard_cls = malloc(x->ncls * sizeof(*x->shard_cls));
		if (!x->shard_cls)
			return -ENOMEM;
		memcpy(x->shard_cls, x->cls, x->ncls * sizeof(*x->cls));
		int e = r2_shard_solve(x->shard_cls, x->ncls, x->n, x->R, x->op->size, x->elem,
				       &x->shard_rem_cls, &x->shard_rem);
		if (e) {
			free(x->shard_cls);
			x->shard_cls = NULL;
			return e;
		}
	}
	memcpy(b->cls, x->shard_cls, x->ncls * sizeof(*b->cls));
	uint32_t rc = x->shard_rem_cls;
	uint64_t rem = x->shard_rem;
	/* remainder to the first host of class rc */
	b->rem_bytes = rem;
	b->rem_host = R2_NO_HOST;
	for (uint32_t h = 0; h < x->n; h++)
		if (x->hcls[h] == rc) {
			b->rem_host = h;
			break;
		}
	struct r2_comp *c = pl_add_comp(b);
	if (!c)
		return b->err;
	c->algo = R2_ALGO_SHARD;
	c->lrail = R2_LRAIL_PAIR;
	c->nmem = x->n;
	c->off = 0;
	c->len = x->op->size;
	c->nchunks = (uint16_t)K;
	/* bridges for pairs without a common rail: only pairs with a host
	 * lacking some rail, or with a failed link, can need one */
	struct r2_view v;
	pl_bld_view(b, &v);
	double frac[R2_PLAN_MAX_RAILS];
	uint16_t full = (uint16_t)((1u << x->R) - 1);
	for (uint32_t q = 0; q < x->n + x->c->ndown; q++) {
		uint32_t i, jlo, jhi;
		if (q < x->n) {
			i = q;
			if (x->cls[x->hcls[i]].mask == full)
				continue;
			jlo = 0;
			jhi = x->n;
		} else {
			const struct r2_link *d = &x->c->down[q - x->n];
			i = d->a;
			jlo = d->b;
			jhi = d->b + 1;
		}
		for (uint32_t j = jlo; j < jhi; j++) {
			if (j == i)
				continue;
			uint32_t a = i < j ? i : j, bb = i < j ? j : i;
			if (r2_pair_split(&v, a, bb, frac) || pl_rhash_find(b, a, bb, R2_LRAIL_PAIR) >= 0)
				continue;
			struct r2_hop h;
			uint32_t pa = 0, pb = 0;
			for (uint32_t r = 0; r < x->R; r++) {
				if (hbw_rail(x, a, r) > hbw_rail(x, a, pa))
					pa = r;
				if (hbw_rail(x, bb, r) > hbw_rail(x, bb, pb))
					pb = r;
			}
			if (!pl_find_bridge(b, a, bb, pa, pb, &h))
				return -ENETUNREACH;
			struct r2_route rt = { a, bb, R2_LRAIL_PAIR, h.rail, h.rail2, h.via };
			if (pl_add_route(b, &rt))
				return -ENOMEM;
			b->nbridged++;
			pl_bld_view(b, &v); /* route array may have moved */
		}
	}
	b->nchunks = (uint16_t)K;
	return 0;
}


/* ---- log-step: mixed-radix halving/doubling (hd.c) ------------------------ */

static int by_hbw_desc(const void *pa, const void *pb, void *arg)
{
	const double *bw = arg;
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	if (bw[a] != bw[b])
		return bw[a] > bw[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

static int u32_asc(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	return a < b ? -1 : a > b;
}

/* Members: m hosts (radices fac[0..L), prod = m); the n - m slowest hosts
 * fold into members 0 .. n-m-1 (allreduce only). variant: 0 split every
 * message over the pair's rails by bandwidth, 1 one rail per peer; |
 * R2_HD_RD: recursive doubling (allreduce). */
int pl_build_hd(struct bld *b, const uint32_t *fac, uint32_t L, uint32_t m, int variant)
{
	struct ctx *x = b->x;
	uint32_t n = x->n;
	uint64_t prod = 1;
	if (!L || L > R2_HD_MAX_LEVELS)
		return -EINVAL;
	for (uint32_t k = 0; k < L; k++) {
		if (fac[k] < 2 || fac[k] > R2_HD_MAX_FAN)
			return -EINVAL;
		prod *= fac[k];
	}
	if (prod != m || m > n || n - m > m || (x->op->op != R2_PLAN_ALLREDUCE && m != n))
		return -EINVAL;
	struct r2_comp *c = pl_add_comp(b);
	if (!c)
		return b->err;
	c->algo = variant & R2_HD_RD ? R2_ALGO_RD : R2_ALGO_HD;
	c->lrail = (uint16_t)(variant & 1);
	c->nhalf = (uint8_t)(variant & R2_HD_RD ? (uint32_t)variant >> 8 : 0);
	c->level = (uint8_t)L;
	c->nmem = m;
	c->off = 0;
	c->len = x->op->size;
	c->fac = pl_add_hosts(b, fac, L);
	if (m < n) {
		uint32_t *ord = malloc(n * sizeof(uint32_t));
		if (!ord)
			return -ENOMEM;
		for (uint32_t h = 0; h < n; h++)
			ord[h] = h;
		qsort_r(ord, n, sizeof(uint32_t), by_hbw_desc, x->hbw);
		qsort(ord, m, sizeof(uint32_t), u32_asc);
		qsort(ord + m, n - m, sizeof(uint32_t), u32_asc);
		c = &b->comp[b->ncomp - 1];
		c->mem = pl_add_hosts(b, ord, m);
		c->leaf = pl_add_hosts(b, ord + m, n - m);
		c->nleaf = n - m;
		free(ord);
	}
	if (b->err)
		return b->err;
	b->nchunks = 1;
	/* every pair that exchanges must share a rail (no bridges here) */
	bool check = x->c->ndown > 0;
	uint16_t full = (uint16_t)((1u << x->R) - 1);
	for (uint32_t k = 0; k < x->ncls; k++)
		check |= x->cls[k].mask != full;
	if (!check)
		return 0;
	struct r2_view v;
	pl_bld_view(b, &v);
	c = &b->comp[b->ncomp - 1];
	struct r2_hd_geo g;
	struct r2_hd_msg msg[2 * R2_HD_MAX_FAN + 2];
	uint64_t lens[R2_PLAN_MAX_RAILS];
	r2_hd_geo(&v, c, &g);
	uint32_t ns = r2_hd_nsteps(v.op, c);
	/* a pair of class-0 hosts without a failed link shares class 0's rails:
	 * only the hosts of other classes and the ends of failed links can lack
	 * a common rail with a peer */
	uint32_t nsp = x->nhcx + 2 * x->c->ndown;
	for (uint32_t i = 0; i < nsp; i++) {
		uint32_t h = pl_special_host(x, i);
		uint32_t p = r2_hd_pos(&v, c, &g, h);
		for (uint32_t j = 0; j < ns; j++) {
			size_t nm = r2_hd_msgs_at(&v, c, &g, h, p, j, msg, 2 * R2_HD_MAX_FAN + 2);
			for (size_t k = 0; k < nm; k++) {
				uint32_t a = msg[k].send ? h : msg[k].peer, bb = msg[k].send ? msg[k].peer : h;
				if (!r2_hd_rails(&v, c, a, bb, msg[k].slot, msg[k].nslot, 1, lens))
					return -ENETUNREACH;
			}
		}
	}
	return 0;
}

/* Bruck (bruck.c): radix r < n over every host; variant: bit 0 as
 * pl_build_hd's, bit 1 a wrapped block's two ranges on disjoint rails
 * (r2_hd_parts). */
int pl_build_bruck(struct bld *b, uint32_t r, int variant)
{
	struct ctx *x = b->x;
	if (r < 2 || r - 1 > R2_HD_MAX_FAN || r >= x->n || variant < 0 || variant > 3 ||
	    x->op->op > R2_PLAN_REDUCESCATTER)
		return -EINVAL;
	struct r2_comp *c = pl_add_comp(b);
	if (!c)
		return b->err;
	c->algo = R2_ALGO_BRUCK;
	c->lrail = (uint16_t)variant;
	c->level = (uint8_t)r2_bruck_levels(x->n, r);
	c->nmem = x->n;
	c->off = 0;
	c->len = x->op->size;
	c->fac = pl_add_hosts(b, &r, 1);
	if (b->err)
		return b->err;
	b->nchunks = 1;
	/* the special hosts' pairs must share a rail, as in pl_build_hd */
	struct r2_view v;
	pl_bld_view(b, &v);
	c = &b->comp[b->ncomp - 1];
	struct r2_hd_msg msg[4 * R2_HD_MAX_FAN];
	uint64_t lens[R2_PLAN_MAX_RAILS];
	uint32_t ns = r2_bruck_nsteps(v.op, c), nsp = x->nhcx + 2 * x->c->ndown;
	for (uint32_t i = 0; i < nsp; i++) {
		uint32_t h = pl_special_host(x, i);
		for (uint32_t j = 0; j < ns; j++) {
			size_t nm = r2_bruck_msgs(&v, c, h, j, msg, R2_ARRAY_SIZE(msg));
			for (size_t k = 0; k < nm && k < R2_ARRAY_SIZE(msg); k++) {
				uint32_t a = msg[k].send ? h : msg[k].peer, bb = msg[k].send ? msg[k].peer : h;
				if (!r2_hd_rails(&v, c, a, bb, msg[k].slot, msg[k].nslot, 1, lens))
					return -ENETUNREACH;
			}
		}
	}
	return 0;
}
