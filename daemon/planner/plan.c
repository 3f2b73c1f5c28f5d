/* SPDX-License-Identifier: MIT */
/*
 * Plan construction: host classes, routes (HotRepair remaps, bridges), the
 * schedules (rings over rails, recursive dual-ring, shard plan, chain, tree,
 * direct), the analytic step-by-step cost, the choice between candidates and
 * the packing of the winner into one compact allocation.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner_int.h"

#define MAX_LEVELS 16

void r2_plan_params_default(struct r2_plan_params *p)
{
	p->recursion_thresh = R2_RECURSION_THRESH_DEFAULT;
	p->routing_algo = R2_ROUTE_STEINER;
	p->max_chunks = 64;
	p->min_chunk = 4096;
}

/* ---- cluster-derived context (shared by all candidates) ----------------- */



static bool nic_usable(const struct r2_nic *n)
{
	return n->state != R2_NIC_DOWN && n->bw_tx > 0 && n->bw_rx > 0;
}

static uint64_t nic_sig(const struct r2_cluster *c, uint32_t h)
{
	uint64_t x = 1469598103934665603ull;
	for (uint32_t r = 0; r < c->nrails; r++) {
		const struct r2_nic *n = &c->nic[(size_t)h * c->nrails + r];
		double v[3] = { nic_usable(n) ? n->bw_tx : 0, nic_usable(n) ? n->bw_rx : 0, n->lat };
		const unsigned char *p = (const unsigned char *)v;
		for (size_t i = 0; i < sizeof(v); i++)
			x = (x ^ p[i]) * 1099511628211ull;
	}
	return x;
}

static bool same_nics(const struct r2_cluster *c, uint32_t a, uint32_t b)
{
	for (uint32_t r = 0; r < c->nrails; r++) {
		const struct r2_nic *x = &c->nic[(size_t)a * c->nrails + r];
		const struct r2_nic *y = &c->nic[(size_t)b * c->nrails + r];
		bool ux = nic_usable(x), uy = nic_usable(y);
		if (ux != uy || x->lat != y->lat)
			return false;
		if (ux && (x->bw_tx != y->bw_tx || x->bw_rx != y->bw_rx))
			return false;
	}
	return true;
}

static void ctx_free(struct ctx *x)
{
	free(x->hcls);
	free(x->cls);
	free(x->hcx);
	free(x->hbw);
	free(x->tx);
	free(x->rx);
	free(x->mt);
	free(x->mr);
	free(x->shard_cls);
}

static int ctx_init(struct ctx *x, const struct r2_cluster *c, const struct r2_opdesc *op,
		    const struct r2_plan_params *prm)
{
	memset(x, 0, sizeof(*x));
	x->c = c;
	x->op = op;
	if (prm)
		x->prm = *prm;
	else
		r2_plan_params_default(&x->prm);
	if (x->prm.max_chunks < 1)
		x->prm.max_chunks = 1;
	if (x->prm.max_chunks > 4096)
		x->prm.max_chunks = 4096;
	x->n = c->nhosts;
	x->R = c->nrails;
	x->elem = op->elem;
	uint32_t n = x->n, R = x->R;
	x->hcls = calloc(n, sizeof(*x->hcls));
	x->hbw = calloc(n, sizeof(*x->hbw));
	x->tx = calloc((size_t)n * R, sizeof(double));
	x->rx = calloc((size_t)n * R, sizeof(double));
	x->mt = calloc((size_t)n * R, sizeof(uint32_t));
	x->mr = calloc((size_t)n * R, sizeof(uint32_t));
	if (!x->hcls || !x->hbw || !x->tx || !x->rx || !x->mt || !x->mr)
		return -ENOMEM;

	/* classes through a small open-addressing table of representatives */
	uint32_t cap = 16;
	while (cap < 2 * n)
		cap <<= 1;
	uint32_t *slot = malloc(cap * sizeof(uint32_t));
	uint64_t *sig = malloc(cap * sizeof(uint64_t));
	uint32_t *rep = malloc(n * sizeof(uint32_t));
	uint32_t *cnt = calloc(n, sizeof(uint32_t));
	if (!slot || !sig || !rep || !cnt) {
		free(slot); free(sig); free(rep); free(cnt);
		return -ENOMEM;
	}
	memset(slot, 0xff, cap * sizeof(uint32_t));
	uint32_t ncls = 0;
	for (uint32_t h = 0; h < n; h++) {
		uint64_t s = nic_sig(c, h);
		uint32_t i = (uint32_t)(s ^ (s >> 29)) & (cap - 1);
		for (;;) {
			if (slot[i] == UINT32_MAX) {
				slot[i] = ncls;
				sig[i] = s;
				rep[ncls] = h;
				x->hcls[h] = ncls++;
				break;
			}
			if (sig[i] == s && same_nics(c, rep[slot[i]], h)) {
				x->hcls[h] = slot[i];
				break;
			}
			i = (i + 1) & (cap - 1);
		}
		cnt[x->hcls[h]]++;
	}
	/* class 0 = most populous (fewest exceptions) */
	uint32_t big = 0;
	for (uint32_t k = 1; k < ncls; k++)
		if (cnt[k] > cnt[big])
			big = k;
	uint32_t *perm = slot; /* reuse: old -> new */
	for (uint32_t k = 0; k < ncls; k++)
		perm[k] = k == big ? 0 : (k == 0 ? big : k);
	x->ncls = ncls;
	x->cls = calloc(ncls, sizeof(*x->cls));
	if (!x->cls) {
		free(slot); free(sig); free(rep); free(cnt);
		return -ENOMEM;
	}
	for (uint32_t k = 0; k < ncls; k++) {
		struct r2_hclass *hc = &x->cls[perm[k]];
		uint32_t h = rep[k];
		hc->count = cnt[k];
		for (uint32_t r = 0; r < R; r++) {
			const struct r2_nic *ni = &c->nic[(size_t)h * R + r];
			if (nic_usable(ni)) {
				hc->mask |= (uint16_t)(1u << r);
				hc->bw[r] = ni->bw_tx < ni->bw_rx ? ni->bw_tx : ni->bw_rx;
			} else {
				if (ni->state == R2_NIC_DOWN)
					x->any_down = true;
			}
		}
		for (uint32_t r = 0; r < R; r++) {
			if (hc->mask & (1u << r)) {
				hc->remap[r] = (uint8_t)r;
				continue;
			}
			/* backup NIC: the usable one with the most bandwidth,
			 * ties to the next rail after r */
			int best = -1;
			for (uint32_t d = 1; d < R; d++) {
				uint32_t q = (r + d) % R;
				if (!(hc->mask & (1u << q)))
					continue;
				if (best < 0 || hc->bw[q] > hc->bw[best])
					best = (int)q;
			}
			hc->remap[r] = (uint8_t)(best < 0 ? r : (uint32_t)best);
		}
	}
	for (uint32_t h = 0; h < n; h++) {
		x->hcls[h] = perm[x->hcls[h]];
		double s = 0;
		for (uint32_t r = 0; r < R; r++)
			s += x->cls[x->hcls[h]].bw[r];
		x->hbw[h] = s;
		if (x->hcls[h] != 0)
			x->nhcx++;
	}
	free(slot); free(sig); free(rep); free(cnt);
	x->hcx = calloc(x->nhcx ? x->nhcx : 1, sizeof(*x->hcx));
	if (!x->hcx)
		return -ENOMEM;
	uint32_t e = 0;
	for (uint32_t h = 0; h < n; h++)
		if (x->hcls[h] != 0)
			x->hcx[e++] = (struct r2_hcx){ h, x->hcls[h] };
	return 0;
}

static inline bool usable(const struct ctx *x, uint32_t h, uint32_t r)
{
	return (x->cls[x->hcls[h]].mask >> r) & 1u;
}

static inline double hbw_rail(const struct ctx *x, uint32_t h, uint32_t r)
{
	return x->cls[x->hcls[h]].bw[r];
}

/* ---- builder (one candidate schedule) ------------------------------------ */

struct bld {
	struct ctx *x;
	enum r2_algo algo;
	struct r2_comp *comp;
	uint32_t ncomp, capcomp;
	uint32_t *hosts;
	uint32_t nhl, caphl;
	struct r2_route *route;
	uint32_t nroute, caproute;
	uint32_t *rhash;         /* (a,b,lrail) -> route index */
	uint32_t rcap;
	uint32_t *bridge_use;
	struct r2_hclass *cls;   /* own copy (shard plan writes lambda/shard) */
	uint32_t rem_host;
	uint64_t rem_bytes;
	uint32_t nsteps;
	uint16_t nchunks, depth;
	uint32_t nedges, nkept, nbridged, nremapped;
	double time;
	int err;
};

static void bld_free(struct bld *b)
{
	free(b->comp);
	free(b->hosts);
	free(b->route);
	free(b->rhash);
	free(b->bridge_use);
	free(b->cls);
	memset(b, 0, sizeof(*b));
}

static int bld_init(struct bld *b, struct ctx *x, enum r2_algo algo)
{
	memset(b, 0, sizeof(*b));
	b->x = x;
	b->algo = algo;
	b->rem_host = R2_NO_HOST;
	b->cls = malloc(x->ncls * sizeof(*b->cls));
	b->bridge_use = calloc(x->n, sizeof(uint32_t));
	if (!b->cls || !b->bridge_use)
		return -ENOMEM;
	memcpy(b->cls, x->cls, x->ncls * sizeof(*b->cls));
	return 0;
}

static void *grow(void *p, uint32_t *cap, uint32_t need, size_t sz)
{
	if (need <= *cap)
		return p;
	uint32_t nc = *cap ? *cap : 8;
	while (nc < need)
		nc *= 2;
	void *q = realloc(p, (size_t)nc * sz);
	if (q)
		*cap = nc;
	return q;
}

static struct r2_comp *add_comp(struct bld *b)
{
	struct r2_comp *c = grow(b->comp, &b->capcomp, b->ncomp + 1, sizeof(*c));
	if (!c) {
		b->err = -ENOMEM;
		return NULL;
	}
	b->comp = c;
	c = &b->comp[b->ncomp++];
	memset(c, 0, sizeof(*c));
	c->mem = R2_ALL_HOSTS;
	c->nchunks = 1;
	return c;
}

static uint32_t add_hosts(struct bld *b, const uint32_t *h, uint32_t k)
{
	uint32_t *p = grow(b->hosts, &b->caphl, b->nhl + k, sizeof(*p));
	if (!p) {
		b->err = -ENOMEM;
		return 0;
	}
	b->hosts = p;
	memcpy(&b->hosts[b->nhl], h, k * sizeof(*h));
	uint32_t at = b->nhl;
	b->nhl += k;
	return at;
}

bool r2_link_is_down(const struct r2_link *d, uint32_t nd, uint32_t a, uint32_t b, uint16_t rail)
{
	if (!nd)
		return false;
	if (a > b) {
		uint32_t t = a;
		a = b;
		b = t;
	}
	uint32_t lo = 0, hi = nd;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		const struct r2_link *m = &d[mid];
		if (m->a < a || (m->a == a && (m->b < b || (m->b == b && m->rail < rail))))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < nd && d[lo].a == a && d[lo].b == b && d[lo].rail == rail;
}

uint16_t r2_pair_down_mask(const struct r2_link *d, uint32_t nd, uint32_t a, uint32_t b)
{
	if (!nd)
		return 0;
	if (a > b) {
		uint32_t t = a;
		a = b;
		b = t;
	}
	uint32_t lo = 0, hi = nd;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (d[mid].a < a || (d[mid].a == a && d[mid].b < b))
			lo = mid + 1;
		else
			hi = mid;
	}
	uint16_t m = 0;
	for (; lo < nd && d[lo].a == a && d[lo].b == b; lo++)
		if (d[lo].rail < 16)
			m |= (uint16_t)(1u << d[lo].rail);
	return m;
}

static bool pair_ok(const struct ctx *x, uint32_t a, uint32_t b, uint32_t r)
{
	return usable(x, a, r) && usable(x, b, r) &&
	       !r2_link_is_down(x->c->down, x->c->ndown, a, b, (uint16_t)r);
}

/* Bridge C for a -> b: first hop on p (a, C), second on q (C, b). Prefers
 * p = pa, q = pb, then the shortest PCIe distance, then the least used
 * bridge, then the most bandwidth. */
static bool find_bridge(struct bld *b, uint32_t a, uint32_t bb, uint32_t pa, uint32_t pb,
			struct r2_hop *hop)
{
	struct ctx *x = b->x;
	double best = INFINITY;
	for (uint32_t p = 0; p < x->R; p++) {
		if (!usable(x, a, p))
			continue;
		for (uint32_t q = 0; q < x->R; q++) {
			if (!usable(x, bb, q))
				continue;
			double pen = 1e12 * ((p != pa) + (q != pb));
			for (uint32_t C = 0; C < x->n; C++) {
				if (C == a || C == bb || !pair_ok(x, a, C, p) || !pair_ok(x, C, bb, q))
					continue;
				double d = 0;
				if (x->c->pcie_dist)
					d = x->c->pcie_dist[(size_t)C * x->R + p] +
					    x->c->pcie_dist[(size_t)C * x->R + q];
				double bw = fmin(hbw_rail(x, C, p), hbw_rail(x, C, q));
				double score = pen + 1e9 * d + 1e6 * b->bridge_use[C] - bw * 1e-12;
				if (score < best) {
					best = score;
					hop->rail = (uint16_t)p;
					hop->rail2 = (uint16_t)q;
					hop->via = C;
				}
			}
		}
	}
	if (best == INFINITY)
		return false;
	b->bridge_use[hop->via]++;
	return true;
}

/* Bridge on one rail only (p = q = l). */
static bool find_bridge_on(struct bld *b, uint32_t a, uint32_t bb, uint32_t l, struct r2_hop *hop)
{
	struct ctx *x = b->x;
	double best = INFINITY;
	for (uint32_t C = 0; C < x->n; C++) {
		if (C == a || C == bb || !pair_ok(x, a, C, l) || !pair_ok(x, C, bb, l))
			continue;
		double d = x->c->pcie_dist ? x->c->pcie_dist[(size_t)C * x->R + l] : 0;
		double score = 1e9 * d + 1e6 * b->bridge_use[C] - hbw_rail(x, C, l) * 1e-12;
		if (score < best) {
			best = score;
			*hop = (struct r2_hop){ (uint16_t)l, (uint16_t)l, C };
		}
	}
	if (best == INFINITY)
		return false;
	b->bridge_use[hop->via]++;
	return true;
}

static uint32_t rkey_hash(uint32_t a, uint32_t bb, uint32_t l)
{
	uint64_t k = ((uint64_t)a * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)bb * 0xC2B2AE3D27D4EB4Full) ^
		     ((uint64_t)l * 0x165667B19E3779F9ull);
	return (uint32_t)(k ^ (k >> 31));
}

static int rhash_find(struct bld *b, uint32_t a, uint32_t bb, uint16_t l)
{
	if (!b->rcap)
		return -1;
	uint32_t i = rkey_hash(a, bb, l) & (b->rcap - 1);
	while (b->rhash[i] != UINT32_MAX) {
		struct r2_route *r = &b->route[b->rhash[i]];
		if (r->a == a && r->b == bb && r->lrail == l)
			return (int)b->rhash[i];
		i = (i + 1) & (b->rcap - 1);
	}
	return -1;
}

static void rhash_insert(struct bld *b, uint32_t idx)
{
	struct r2_route *r = &b->route[idx];
	uint32_t i = rkey_hash(r->a, r->b, r->lrail) & (b->rcap - 1);
	while (b->rhash[i] != UINT32_MAX)
		i = (i + 1) & (b->rcap - 1);
	b->rhash[i] = idx;
}

static int add_route(struct bld *b, const struct r2_route *rt)
{
	if (2 * (b->nroute + 1) > b->rcap) {
		uint32_t nc = b->rcap ? b->rcap * 2 : 64;
		uint32_t *h = malloc(nc * sizeof(uint32_t));
		if (!h)
			return -ENOMEM;
		free(b->rhash);
		b->rhash = h;
		b->rcap = nc;
		memset(h, 0xff, nc * sizeof(uint32_t));
		for (uint32_t i = 0; i < b->nroute; i++)
			rhash_insert(b, i);
	}
	struct r2_route *p = grow(b->route, &b->caproute, b->nroute + 1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	b->route = p;
	b->route[b->nroute] = *rt;
	rhash_insert(b, b->nroute);
	b->nroute++;
	return 0;
}

/* Route of ring/chain/tree/direct edge a -> bb on logical rail l; records an
 * exception when it is not "direct on l". */
static int edge_route(struct bld *b, uint32_t a, uint32_t bb, uint16_t l, struct r2_hop *hop,
		      bool count)
{
	struct ctx *x = b->x;
	int k = rhash_find(b, a, bb, l);
	if (k >= 0) {
		const struct r2_route *r = &b->route[k];
		*hop = (struct r2_hop){ r->rail, r->rail2, r->via };
	} else if (pair_ok(x, a, bb, l)) {
		*hop = (struct r2_hop){ l, l, R2_NO_HOST };
	} else {
		uint32_t pa = x->cls[x->hcls[a]].remap[l], pb = x->cls[x->hcls[bb]].remap[l];
		int p = -1;
		bool bridged = false;
		/* local ring repair (seed 2.1): both NICs are up but the A-B path
		 * on this rail failed: insert a bridge C on the same rail, so that
		 * every other edge of every ring stays as it was */
		if (usable(x, a, l) && usable(x, bb, l) && find_bridge_on(b, a, bb, l, hop))
			bridged = true;
		else if (pair_ok(x, a, bb, pa))
			p = (int)pa;
		else if (pair_ok(x, a, bb, pb))
			p = (int)pb;
		else {
			double best = -1;
			for (uint32_t r = 0; r < x->R; r++)
				if (pair_ok(x, a, bb, r) &&
				    fmin(hbw_rail(x, a, r), hbw_rail(x, bb, r)) > best) {
					best = fmin(hbw_rail(x, a, r), hbw_rail(x, bb, r));
					p = (int)r;
				}
		}
		if (bridged) {
			/* hop set by find_bridge_on */
		} else if (p >= 0) {
			*hop = (struct r2_hop){ (uint16_t)p, (uint16_t)p, R2_NO_HOST };
		} else if (!find_bridge(b, a, bb, pa, pb, hop)) {
			return -ENETUNREACH;
		}
		struct r2_route rt = { a, bb, l, hop->rail, hop->rail2, hop->via };
		if (add_route(b, &rt))
			return -ENOMEM;
	}
	if (count) {
		b->nedges++;
		if (hop->via != R2_NO_HOST)
			b->nbridged++;
		else if (hop->rail != l)
			b->nremapped++;
		else
			b->nkept++;
	}
	return 0;
}

/* ---- view over a builder ------------------------------------------------- */

static int route_cmp(const void *pa, const void *pb)
{
	const struct r2_route *a = pa, *b = pb;
	if (a->a != b->a)
		return a->a < b->a ? -1 : 1;
	if (a->b != b->b)
		return a->b < b->b ? -1 : 1;
	return (int)a->lrail - (int)b->lrail;
}

static void bld_view(struct bld *b, struct r2_view *v)
{
	struct ctx *x = b->x;
	memset(v, 0, sizeof(*v));
	v->n = x->n;
	v->R = x->R;
	v->elem = x->elem;
	v->op = x->op->op;
	v->size = x->op->size;
	v->comp = b->comp;
	v->ncomp = b->ncomp;
	v->hosts = b->hosts;
	v->cls = b->cls;
	v->hcx = x->hcx;
	v->nhcx = x->nhcx;
	v->route = b->route;
	v->nroute = b->nroute;
	v->down = x->c->down;
	v->ndown = x->c->ndown;
	v->rem_host = b->rem_host;
	v->rem_bytes = b->rem_bytes;
}

static void bld_sort_routes(struct bld *b)
{
	if (b->nroute > 1)
		qsort(b->route, b->nroute, sizeof(*b->route), route_cmp);
	if (b->rcap) {
		memset(b->rhash, 0xff, b->rcap * sizeof(uint32_t));
		for (uint32_t i = 0; i < b->nroute; i++)
			rhash_insert(b, i);
	}
}

/* ---- analytic cost: phases of identical steps ---------------------------- */

enum ph_type {
	PH_RING, PH_INJECT, PH_EXTRACT, PH_CHAIN_B, PH_CHAIN_R, PH_TREE_B, PH_TREE_R,
	PH_DIRECT, PH_SHARD_FIRST, PH_SHARD_MID, PH_SHARD_LAST
};

struct phase {
	uint32_t s0, s1;
	uint32_t comp;
	uint8_t type;
};

static void ld_clear(struct ctx *x)
{
	size_t N = (size_t)x->n * x->R;
	memset(x->tx, 0, N * sizeof(double));
	memset(x->rx, 0, N * sizeof(double));
	memset(x->mt, 0, N * sizeof(uint32_t));
	memset(x->mr, 0, N * sizeof(uint32_t));
}

void r2_ld_hop(struct ctx *x, uint32_t a, uint32_t bb, const struct r2_hop *h, double bytes,
		   double sign)
{
	uint32_t R = x->R;
	int m = sign > 0 ? 1 : -1;
	if (bytes <= 0)
		return;
	if (h->via == R2_NO_HOST) {
		x->tx[(size_t)a * R + h->rail] += sign * bytes;
		x->mt[(size_t)a * R + h->rail] += (uint32_t)m;
		x->rx[(size_t)bb * R + h->rail] += sign * bytes;
		x->mr[(size_t)bb * R + h->rail] += (uint32_t)m;
	} else {
		uint32_t C = h->via;
		x->tx[(size_t)a * R + h->rail] += sign * bytes;
		x->mt[(size_t)a * R + h->rail] += (uint32_t)m;
		x->rx[(size_t)C * R + h->rail] += sign * bytes;
		x->mr[(size_t)C * R + h->rail] += (uint32_t)m;
		x->tx[(size_t)C * R + h->rail2] += sign * bytes;
		x->mt[(size_t)C * R + h->rail2] += (uint32_t)m;
		x->rx[(size_t)bb * R + h->rail2] += sign * bytes;
		x->mr[(size_t)bb * R + h->rail2] += (uint32_t)m;
	}
}

static double ld_time(struct ctx *x)
{
	const struct r2_cluster *c = x->c;
	double t = 0;
	size_t N = (size_t)x->n * x->R;
	for (size_t i = 0; i < N; i++) {
		if (!x->mt[i] && !x->mr[i])
			continue;
		const struct r2_nic *ni = &c->nic[i];
		double a = c->cost.alpha + ni->lat;
		if (x->mt[i]) {
			double v = x->mt[i] * a + (ni->bw_tx > 0 ? x->tx[i] / ni->bw_tx : INFINITY);
			if (v > t)
				t = v;
		}
		if (x->mr[i]) {
			double v = x->mr[i] * a + (ni->bw_rx > 0 ? x->rx[i] / ni->bw_rx : INFINITY);
			if (v > t)
				t = v;
		}
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
	int k = rhash_find(b, a, bb, l);
	if (k >= 0) {
		const struct r2_route *r = &b->route[k];
		*h = (struct r2_hop){ r->rail, r->rail2, r->via };
	} else {
		*h = (struct r2_hop){ l, l, R2_NO_HOST };
	}
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
	struct phase *p = grow(*ph, cap, *n + 1, sizeof(**ph));
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
static int bld_cost(struct bld *b)
{
	struct ctx *x = b->x;
	struct r2_view v;
	bld_view(b, &v);
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
		default:
			break;
		}
		uint32_t end = cp->step0 + cp->nsteps - (cp->nleaf ? 1 : 0);
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
		ld_clear(x);
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

/* ---- rings over rails --------------------------------------------------- */

enum share_rule { SHARE_EQUAL, SHARE_BOTTLENECK };

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
	ld_clear(x);
	struct r2_hop h;
	for (uint32_t r = 0; r < R; r++)
		for (uint32_t p = 0; p < m; p++) {
			uint32_t a = mem ? mem[p] : p, nb = mem ? mem[(p + 1) % m] : (p + 1) % m;
			int e = edge_route(b, a, nb, (uint16_t)r, &h, false);
			if (e)
				return e;
			r2_ld_hop(x, a, nb, &h, 1, 1);
		}
	double sum = 0;
	for (uint32_t r = 0; r < R; r++) {
		double bn = INFINITY;
		for (uint32_t p = 0; p < m; p++) {
			uint32_t a = mem ? mem[p] : p, nb = mem ? mem[(p + 1) % m] : (p + 1) % m;
			edge_route(b, a, nb, (uint16_t)r, &h, false);
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
	uint32_t memi = mem ? add_hosts(b, mem, m) : R2_ALL_HOSTS;
	uint32_t leafi = nleaf ? add_hosts(b, leaves, nleaf) : 0;
	if (b->err)
		return b->err;
	uint64_t o = off;
	for (uint32_t r = 0; r < R; r++) {
		if (!parts[r]) {
			continue;
		}
		struct r2_comp *c = add_comp(b);
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
			if ((e = edge_route(b, a, nb, (uint16_t)r, &h, true)))
				return e;
		}
		for (uint32_t l = 0; l < nleaf; l++)
			for (uint32_t p = 0; p < m; p++) {
				uint32_t a = mem ? mem[p] : p;
				if ((e = edge_route(b, leaves[l], a, (uint16_t)r, &h, false)) ||
				    (e = edge_route(b, a, leaves[l], (uint16_t)r, &h, false)))
					return e;
			}
	}
	return 0;
}

static int build_rings(struct bld *b, enum share_rule rule)
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

static int build_recursive(struct bld *b)
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

static int build_pipe(struct bld *b, enum r2_algo algo, bool steiner, uint32_t K,
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
	uint32_t memi = add_hosts(b, mem, m);
	uint64_t o = 0;
	for (uint32_t r = 0; r < R && !e && !b->err; r++) {
		if (!parts[r])
			continue;
		struct r2_comp *c = add_comp(b);
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
			e = edge_route(b, par, mem[i], (uint16_t)r, &h, true);
			if (!e)
				e = edge_route(b, mem[i], par, (uint16_t)r, &h, false);
		}
	}
	free(mem);
	b->nchunks = (uint16_t)K;
	return e ? e : b->err;
}

static int build_direct(struct bld *b)
{
	struct ctx *x = b->x;
	uint32_t a = x->op->root, d = x->op->peer, R = x->R;
	double share[R2_PLAN_MAX_RAILS], sum = 0;
	uint64_t parts[R2_PLAN_MAX_RAILS];
	for (uint32_t r = 0; r < R; r++) {
		share[r] = 0;
		if (pair_ok(x, a, d, r)) {
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
	uint32_t memi = add_hosts(b, pair, 2);
	uint64_t o = 0;
	for (uint32_t r = 0; r < R; r++) {
		if (!parts[r])
			continue;
		struct r2_comp *c = add_comp(b);
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
		int e = edge_route(b, a, d, (uint16_t)r, &h, true);
		if (e)
			return e;
	}
	return b->err;
}

/* ---- the shard plan (ours, allreduce) ------------------------------------ */


static int build_shard(struct bld *b, uint32_t K)
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
	struct r2_comp *c = add_comp(b);
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
	bld_view(b, &v);
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
			if (r2_pair_split(&v, a, bb, frac) || rhash_find(b, a, bb, R2_LRAIL_PAIR) >= 0)
				continue;
			struct r2_hop h;
			uint32_t pa = 0, pb = 0;
			for (uint32_t r = 0; r < x->R; r++) {
				if (hbw_rail(x, a, r) > hbw_rail(x, a, pa))
					pa = r;
				if (hbw_rail(x, bb, r) > hbw_rail(x, bb, pb))
					pb = r;
			}
			if (!find_bridge(b, a, bb, pa, pb, &h))
				return -ENETUNREACH;
			struct r2_route rt = { a, bb, R2_LRAIL_PAIR, h.rail, h.rail2, h.via };
			if (add_route(b, &rt))
				return -ENOMEM;
			b->nbridged++;
			bld_view(b, &v); /* route array may have moved */
		}
	}
	b->nchunks = (uint16_t)K;
	return 0;
}

/* ---- validation, bound, driver ------------------------------------------ */

static int validate(const struct r2_cluster *c, const struct r2_opdesc *op)
{
	if (!c || !op || !c->nic || c->nhosts < 1 || c->nrails < 1 ||
	    c->nrails > R2_PLAN_MAX_RAILS || op->elem < 1 || op->op >= R2_PLAN_COUNT ||
	    op->policy >= R2_POL_COUNT)
		return -EINVAL;
	if (op->size % op->elem)
		return -EINVAL;
	if ((op->op == R2_PLAN_ALLGATHER || op->op == R2_PLAN_REDUCESCATTER) &&
	    op->size % ((uint64_t)c->nhosts * op->elem))
		return -EINVAL;
	if ((op->op == R2_PLAN_BROADCAST || op->op == R2_PLAN_REDUCE || op->op == R2_PLAN_SENDRECV) &&
	    op->root >= c->nhosts)
		return -EINVAL;
	if (op->op == R2_PLAN_SENDRECV && (op->peer >= c->nhosts || op->peer == op->root))
		return -EINVAL;
	for (uint32_t i = 1; i < c->ndown; i++) {
		const struct r2_link *p = &c->down[i - 1], *q = &c->down[i];
		if (p->a > q->a || (p->a == q->a && (p->b > q->b || (p->b == q->b && p->rail >= q->rail))))
			return -EINVAL;
	}
	for (uint32_t i = 0; i < c->ndown; i++)
		if (c->down[i].a >= c->down[i].b || c->down[i].b >= c->nhosts)
			return -EINVAL;
	return 0;
}

static struct r2_plan *pack(struct bld *b, const struct r2_opdesc *op)
{
	struct ctx *x = b->x;
	size_t sz = sizeof(struct r2_plan);
	size_t o_comp = sz;
	sz += b->ncomp * sizeof(struct r2_comp);
	size_t o_cls = (sz + 7) & ~(size_t)7;
	sz = o_cls + x->ncls * sizeof(struct r2_hclass);
	size_t o_route = sz;
	sz += b->nroute * sizeof(struct r2_route);
	size_t o_hosts = sz;
	sz += b->nhl * sizeof(uint32_t);
	size_t o_hcx = sz;
	sz += x->nhcx * sizeof(struct r2_hcx);
	size_t o_down = sz;
	sz += x->c->ndown * sizeof(struct r2_link);
	char *mem = calloc(1, sz);
	if (!mem)
		return NULL;
	struct r2_plan *p = (struct r2_plan *)mem;
	p->op = op->op;
	p->policy = op->policy;
	p->algo = b->algo;
	p->nhosts = x->n;
	p->nrails = x->R;
	p->elem = op->elem;
	p->root = op->root;
	p->peer = op->peer;
	p->size = op->size;
	p->nsteps = b->nsteps;
	p->nchunks = b->nchunks ? b->nchunks : 1;
	p->depth = (uint16_t)(b->depth + (b->nbridged ? 1 : 0));
	p->time = b->time;
	p->edges_kept = b->nedges ? (double)b->nkept / b->nedges : 1.0;
	p->nbridged = b->nbridged;
	p->nremapped = b->nremapped;
	p->cost = x->c->cost;
	p->ncomp = b->ncomp;
	p->comp = (struct r2_comp *)(mem + o_comp);
	if (b->ncomp)
		memcpy(p->comp, b->comp, b->ncomp * sizeof(struct r2_comp));
	p->nclass = x->ncls;
	p->cls = (struct r2_hclass *)(mem + o_cls);
	memcpy(p->cls, b->cls, x->ncls * sizeof(struct r2_hclass));
	p->nroute = b->nroute;
	p->route = (struct r2_route *)(mem + o_route);
	if (b->nroute)
		memcpy(p->route, b->route, b->nroute * sizeof(struct r2_route));
	p->nhostlist = b->nhl;
	p->hosts = (uint32_t *)(mem + o_hosts);
	if (b->nhl)
		memcpy(p->hosts, b->hosts, b->nhl * sizeof(uint32_t));
	p->nhcx = x->nhcx;
	p->hcx = (struct r2_hcx *)(mem + o_hcx);
	if (x->nhcx)
		memcpy(p->hcx, x->hcx, x->nhcx * sizeof(struct r2_hcx));
	p->ndown = x->c->ndown;
	p->down = (struct r2_link *)(mem + o_down);
	if (x->c->ndown)
		memcpy(p->down, x->c->down, x->c->ndown * sizeof(struct r2_link));
	p->rem_host = b->rem_host;
	p->rem_bytes = b->rem_bytes;
	p->bytes = sz;
	return p;
}

void r2_plan_free(struct r2_plan *p)
{
	free(p);
}

/* Builds one candidate into *b (initialized); returns 0 with b->time set. */
static int candidate(struct ctx *x, struct bld *b, enum r2_algo algo, int variant, uint32_t K)
{
	int e = bld_init(b, x, algo);
	if (e)
		return e;
	switch (algo) {
	case R2_ALGO_RING:
		e = build_rings(b, variant ? SHARE_BOTTLENECK : SHARE_EQUAL);
		break;
	case R2_ALGO_RECURSIVE:
		e = build_recursive(b);
		break;
	case R2_ALGO_SHARD:
		e = build_shard(b, K);
		break;
	case R2_ALGO_CHAIN:
	case R2_ALGO_TREE:
		e = build_pipe(b, algo, variant == 2, K, variant == 0 ? SHARE_EQUAL : SHARE_BOTTLENECK);
		break;
	case R2_ALGO_DIRECT:
		e = build_direct(b);
		break;
	default:
		e = -EINVAL;
	}
	if (!e)
		e = b->err;
	if (!e) {
		bld_sort_routes(b);
		e = bld_cost(b);
	}
	return e;
}

/* Keeps the cheaper of *best and *cand (frees the other). */
static void keep_best(struct bld *best, struct bld *cand, bool *have)
{
	if (!*have || cand->time < best->time * (1 - 1e-9)) {
		if (*have)
			bld_free(best);
		*best = *cand;
		*have = true;
	} else {
		bld_free(cand);
	}
}

static uint32_t k_limit(const struct ctx *x, uint64_t len)
{
	uint64_t mc = x->prm.min_chunk ? x->prm.min_chunk : 1;
	uint64_t k = len / mc;
	if (k < 1)
		k = 1;
	if (k > x->prm.max_chunks)
		k = x->prm.max_chunks;
	if (k > 65535)
		k = 65535;
	return (uint32_t)k;
}

int r2_plan_build(const struct r2_cluster *c, const struct r2_opdesc *op,
		  const struct r2_plan_params *prm, struct r2_plan **out)
{
	*out = NULL;
	int e = validate(c, op);
	if (e)
		return e;
	struct ctx x;
	e = ctx_init(&x, c, op, prm);
	if (e) {
		ctx_free(&x);
		return e;
	}
	if (x.n > 1)
		for (uint32_t h = 0; h < x.n; h++)
			if (!x.cls[x.hcls[h]].mask) {
				ctx_free(&x);
				return -ENETUNREACH;
			}
	if (op->policy == R2_POL_PLAIN && x.any_down) {
		ctx_free(&x);
		return -EHOSTDOWN;
	}
	struct bld best, cand;
	bool have = false;
	memset(&best, 0, sizeof(best));
	if (x.n == 1) {
		e = bld_init(&best, &x, R2_ALGO_RING);
		have = !e;
	} else {
		enum r2_policy pol = op->policy;
		switch (op->op) {
		case R2_PLAN_ALLREDUCE:
			if (pol == R2_POL_PLAIN || pol == R2_POL_HOTREPAIR) {
				e = candidate(&x, &cand, R2_ALGO_RING, 0, 1);
				if (!e) keep_best(&best, &cand, &have);
			} else if (pol == R2_POL_BALANCE) {
				e = candidate(&x, &cand, R2_ALGO_RING, 1, 1);
				if (!e) keep_best(&best, &cand, &have);
			} else if (pol == R2_POL_R2CCL) {
				e = candidate(&x, &cand, R2_ALGO_RECURSIVE, 0, 1);
				if (!e) keep_best(&best, &cand, &have);
			} else {
				e = candidate(&x, &cand, R2_ALGO_RING, 1, 1);
				if (!e) keep_best(&best, &cand, &have);
				else bld_free(&cand);
				int e2 = candidate(&x, &cand, R2_ALGO_RECURSIVE, 0, 1);
				if (!e2) keep_best(&best, &cand, &have);
				else bld_free(&cand);
				uint32_t kmax = k_limit(&x, op->size / x.n);
				for (uint32_t K = 1;; K = K * 2 > kmax ? kmax : K * 2) {
					int e3 = candidate(&x, &cand, R2_ALGO_SHARD, 0, K);
					if (!e3) keep_best(&best, &cand, &have);
					else bld_free(&cand);
					if (K >= kmax)
						break;
				}
				e = have ? 0 : (e ? e : e2);
			}
			break;
		case R2_PLAN_ALLGATHER:
		case R2_PLAN_REDUCESCATTER:
			e = candidate(&x, &cand, R2_ALGO_RING,
				      (pol == R2_POL_PLAIN || pol == R2_POL_HOTREPAIR) ? 0 : 1, 1);
			if (!e) keep_best(&best, &cand, &have);
			break;
		case R2_PLAN_BROADCAST:
		case R2_PLAN_REDUCE: {
			uint32_t kmax = k_limit(&x, op->size);
			int shapes[3][2] = { { R2_ALGO_CHAIN, 1 }, { R2_ALGO_TREE, 1 }, { R2_ALGO_TREE, 2 } };
			int lo = 0, hi = 3;
			if (pol == R2_POL_PLAIN || pol == R2_POL_HOTREPAIR || pol == R2_POL_BALANCE) {
				hi = 1;
			} else if (pol == R2_POL_R2CCL) {
				lo = 2;
			} else if (x.prm.routing_algo == R2_ROUTE_RING) {
				hi = 1;
			} else if (x.prm.routing_algo == R2_ROUTE_TREE) {
				lo = 1; hi = 2;
			}
			int last = 0;
			for (int s = lo; s < hi; s++)
				for (uint32_t K = 1;; K = K * 2 > kmax ? kmax : K * 2) {
					int variant = shapes[s][1];
					if (pol == R2_POL_PLAIN || pol == R2_POL_HOTREPAIR)
						variant = 0;
					last = candidate(&x, &cand, (enum r2_algo)shapes[s][0], variant, K);
					if (!last) keep_best(&best, &cand, &have);
					else bld_free(&cand);
					if (K >= kmax)
						break;
				}
			e = have ? 0 : last;
			break;
		}
		case R2_PLAN_SENDRECV:
			e = candidate(&x, &cand, R2_ALGO_DIRECT, 0, 1);
			if (!e) keep_best(&best, &cand, &have);
			break;
		default:
			e = -EINVAL;
		}
		if (e && !have)
			bld_free(&cand);
	}
	if (e || !have) {
		if (have)
			bld_free(&best);
		ctx_free(&x);
		return e ? e : -EINVAL;
	}
	struct r2_plan *p = pack(&best, op);
	bld_free(&best);
	ctx_free(&x);
	if (!p)
		return -ENOMEM;
	p->bound = r2_bound(c, op);
	p->gap = p->bound > 0 ? p->time / p->bound : 1.0;
	*out = p;
	return 0;
}
