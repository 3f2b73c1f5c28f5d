/* SPDX-License-Identifier: MIT */
/*
 * Plan construction, part 1: the cluster-derived context shared by every
 * candidate (host classes), the builder of one candidate, and its routes
 * (HotRepair remaps, bridges).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_bld.h"

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

void pl_ctx_free(struct ctx *x)
{
	free(x->hcls);
	free(x->cls);
	free(x->hcx);
	free(x->hbw);
	free(x->tx);
	free(x->rx);
	free(x->mt);
	free(x->mr);
	free(x->touch);
	free(x->mark);
	free(x->shard_cls);
}

int pl_ctx_init(struct ctx *x, const struct r2_cluster *c, const struct r2_opdesc *op,
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
	x->touch = calloc((size_t)n * R, sizeof(uint32_t));
	x->mark = calloc((size_t)n * R, 1);
	if (!x->hcls || !x->hbw || !x->tx || !x->rx || !x->mt || !x->mr || !x->touch || !x->mark)
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



/* ---- builder (one candidate schedule) ------------------------------------ */


void pl_bld_free(struct bld *b)
{
	free(b->comp);
	free(b->hosts);
	free(b->route);
	free(b->rhash);
	free(b->bridge_use);
	free(b->cls);
	memset(b, 0, sizeof(*b));
}

int pl_bld_init(struct bld *b, struct ctx *x, enum r2_algo algo)
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

void *pl_grow(void *p, uint32_t *cap, uint32_t need, size_t sz)
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

struct r2_comp *pl_add_comp(struct bld *b)
{
	struct r2_comp *c = pl_grow(b->comp, &b->capcomp, b->ncomp + 1, sizeof(*c));
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

uint32_t pl_add_hosts(struct bld *b, const uint32_t *h, uint32_t k)
{
	uint32_t *p = pl_grow(b->hosts, &b->caphl, b->nhl + k, sizeof(*p));
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
		if (d[lo].rail < R2_PLAN_MAX_RAILS)
			m |= (uint16_t)(1u << d[lo].rail);
	return m;
}

bool r2_link_is_down(const struct r2_link *d, uint32_t nd, uint32_t a, uint32_t b, uint16_t rail)
{
	return rail < R2_PLAN_MAX_RAILS && (r2_pair_down_mask(d, nd, a, b) >> rail) & 1u;
}

uint32_t pl_special_host(const struct ctx *x, uint32_t i)
{
	if (i < x->nhcx)
		return x->hcx[i].host;
	const struct r2_link *d = &x->c->down[(i - x->nhcx) / 2];
	return (i - x->nhcx) % 2 ? d->b : d->a;
}

bool pl_pair_ok(const struct ctx *x, uint32_t a, uint32_t b, uint32_t r)
{
	return usable(x, a, r) && usable(x, b, r) &&
	       !r2_link_is_down(x->c->down, x->c->ndown, a, b, (uint16_t)r);
}

/* Bridge C for a -> b: first hop on p (a, C), second on q (C, b). Prefers
 * p = pa, q = pb, then the shortest PCIe distance, then the least used
 * bridge, then the most bandwidth. */
bool pl_find_bridge(struct bld *b, uint32_t a, uint32_t bb, uint32_t pa, uint32_t pb,
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
				if (C == a || C == bb || !pl_pair_ok(x, a, C, p) || !pl_pair_ok(x, C, bb, q))
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
		if (C == a || C == bb || !pl_pair_ok(x, a, C, l) || !pl_pair_ok(x, C, bb, l))
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

int pl_rhash_find(struct bld *b, uint32_t a, uint32_t bb, uint16_t l)
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

int pl_add_route(struct bld *b, const struct r2_route *rt)
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
	struct r2_route *p = pl_grow(b->route, &b->caproute, b->nroute + 1, sizeof(*p));
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
int pl_edge_route(struct bld *b, uint32_t a, uint32_t bb, uint16_t l, struct r2_hop *hop,
		      bool count)
{
	struct ctx *x = b->x;
	int k = pl_rhash_find(b, a, bb, l);
	if (k >= 0) {
		const struct r2_route *r = &b->route[k];
		*hop = (struct r2_hop){ r->rail, r->rail2, r->via };
	} else if (pl_pair_ok(x, a, bb, l)) {
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
		else if (pl_pair_ok(x, a, bb, pa))
			p = (int)pa;
		else if (pl_pair_ok(x, a, bb, pb))
			p = (int)pb;
		else {
			double best = -1;
			for (uint32_t r = 0; r < x->R; r++)
				if (pl_pair_ok(x, a, bb, r) &&
				    fmin(hbw_rail(x, a, r), hbw_rail(x, bb, r)) > best) {
					best = fmin(hbw_rail(x, a, r), hbw_rail(x, bb, r));
					p = (int)r;
				}
		}
		if (bridged) {
			/* hop set by find_bridge_on */
		} else if (p >= 0) {
			*hop = (struct r2_hop){ (uint16_t)p, (uint16_t)p, R2_NO_HOST };
		} else if (!pl_find_bridge(b, a, bb, pa, pb, hop)) {
			return -ENETUNREACH;
		}
		struct r2_route rt = { a, bb, l, hop->rail, hop->rail2, hop->via };
		if (pl_add_route(b, &rt))
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

void pl_bld_view(struct bld *b, struct r2_view *v)
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

void pl_bld_sort_routes(struct bld *b)
{
	if (b->nroute > 1)
		qsort(b->route, b->nroute, sizeof(*b->route), route_cmp);
	if (b->rcap) {
		memset(b->rhash, 0xff, b->rcap * sizeof(uint32_t));
		for (uint32_t i = 0; i < b->nroute; i++)
			rhash_insert(b, i);
	}
}

