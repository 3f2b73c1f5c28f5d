/* SPDX-License-Identifier: MIT */
/*
 * Plan construction, part 4: the candidates, the choice between them by
 * cost, validation and the packing of the winner into one compact
 * allocation (r2_plan_build).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_bld.h"
#include "util.h"


void r2_plan_params_default(struct r2_plan_params *p)
{
	p->recursion_thresh = R2_RECURSION_THRESH_DEFAULT;
	p->routing_algo = R2_ROUTE_STEINER;
	p->max_chunks = 64;
	p->min_chunk = 4096;
	p->no_logstep = false;
	p->no_rd = false;
	p->rd_pairs = false;
	p->bruck_only = false;
	p->logstep_margin = 0;
	p->logstep_healthy = false;
	p->logstep_max_hosts = 0;
	p->logstep_far_margin = 1;
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
	int e = pl_bld_init(b, x, algo);
	if (e)
		return e;
	switch (algo) {
	case R2_ALGO_RING:
		e = pl_build_rings(b, variant ? SHARE_BOTTLENECK : SHARE_EQUAL);
		break;
	case R2_ALGO_RECURSIVE:
		e = pl_build_recursive(b);
		break;
	case R2_ALGO_SHARD:
		e = pl_build_shard(b, K);
		break;
	case R2_ALGO_CHAIN:
	case R2_ALGO_TREE:
		e = pl_build_pipe(b, algo, variant == 2, K, variant == 0 ? SHARE_EQUAL : SHARE_BOTTLENECK);
		break;
	case R2_ALGO_DIRECT:
		e = pl_build_direct(b);
		break;
	default:
		e = -EINVAL;
	}
	if (!e)
		e = b->err;
	if (!e) {
		pl_bld_sort_routes(b);
		e = pl_bld_cost(b);
	}
	return e;
}

static void keep_best(struct bld *best, struct bld *cand, bool *have);
static void keep_logstep(const struct ctx *x, struct bld *best, struct bld *cand, bool *have);

static int hd_candidate(struct ctx *x, struct bld *b, const uint32_t *fac, uint32_t L, uint32_t m,
			int variant)
{
	int e = pl_bld_init(b, x, variant & R2_HD_RD ? R2_ALGO_RD : R2_ALGO_HD);
	if (!e)
		e = pl_build_hd(b, fac, L, m, variant);
	if (!e)
		e = b->err;
	if (!e)
		e = pl_bld_cost(b);
	return e;
}

static int bruck_candidate(struct ctx *x, struct bld *b, uint32_t r, int variant)
{
	int e = pl_bld_init(b, x, R2_ALGO_BRUCK);
	if (!e)
		e = pl_build_bruck(b, r, variant);
	if (!e)
		e = b->err;
	if (!e)
		e = pl_bld_cost(b);
	return e;
}

/* Radices of m, each <= F, greedily the largest divisor, in ascending order
 * (the first reduce-scatter steps carry the most bytes: small radices there
 * use every rail); 0 if m has a prime factor above F. */
static uint32_t hd_factor(uint32_t m, uint32_t F, uint32_t fac[R2_HD_MAX_LEVELS])
{
	uint32_t L = 0;
	while (m > 1) {
		uint32_t d = F < m ? F : m;
		while (d > 1 && m % d)
			d--;
		if (d < 2 || L == R2_HD_MAX_LEVELS)
			return 0;
		fac[L++] = d;
		m /= d;
	}
	for (uint32_t i = 1; i < L; i++)
		for (uint32_t k = i; k > 0 && fac[k - 1] > fac[k]; k--) {
			uint32_t t = fac[k];
			fac[k] = fac[k - 1];
			fac[k - 1] = t;
		}
	return L;
}

/* The log-step candidates: for each radix cap F, the members m (all hosts if
 * n factors into radices <= F, else the largest such m >= n/2 for allreduce,
 * the slowest hosts folding in), both rail variants; then, for allreduce,
 * recursive doubling on the same radices after 0 .. L-1 halving levels. */
static void hd_candidates(struct ctx *x, struct bld *best, bool *have)
{
	struct bld ls; /* the cheapest log-step candidate */
	bool lshave = false;

	/* logstep_healthy: every NIC up at one speed, no link down */
	if (x->prm.logstep_healthy && (x->ncls > 1 || x->any_down || x->c->ndown))
		return;
	if (x->prm.logstep_max_hosts && x->n > x->prm.logstep_max_hosts &&
	    x->prm.logstep_far_margin >= 1)
		return;
	uint32_t n = x->n, R = x->R;
	uint32_t caps[] = { 2, 4, 8, 16, R + 1, 2 * R + 1 };
	enum { NLEAD = 4 };
	uint32_t seen[NLEAD * R2_ARRAY_SIZE(caps)][R2_HD_MAX_LEVELS + 2];
	uint32_t nseen = 0;
	bool rdok[NLEAD * R2_ARRAY_SIZE(caps)];
	double txmax = 0;
	for (uint32_t h = 0; h < n; h++) {
		double t = 0;
		for (uint32_t r = 0; r < R; r++) {
			const struct r2_nic *ni = &x->c->nic[(size_t)h * R + r];
			t += ni->state == R2_NIC_DOWN ? 0 : ni->bw_tx;
		}
		txmax = t > txmax ? t : txmax;
	}
	for (uint32_t lead = 0; lead < NLEAD && !x->prm.bruck_only; lead++)
		for (size_t ci = 0; ci < R2_ARRAY_SIZE(caps); ci++) {
			uint32_t F = caps[ci], fac[R2_HD_MAX_LEVELS + NLEAD], L = 0, m = n;
			for (; m >= 2 && (m == n || x->op->op == R2_PLAN_ALLREDUCE) && 2 * m >= n; m--) {
				L = 0;
				if (m % (1u << lead))
					continue;
				if (m >> lead == 1 || (L = hd_factor(m >> lead, F, fac + lead)))
					break;
			}
			if (m < 2 || 2 * m < n || (m >> lead > 1 && !L) || lead + L > R2_HD_MAX_LEVELS)
				continue;
			/* lead radices 2 first (every rail, the most bytes), then the rest */
			for (uint32_t k = 0; k < lead; k++)
				fac[k] = 2;
			L += lead;
			bool dup = false;
			for (uint32_t s = 0; s < nseen && !dup; s++)
				dup = seen[s][0] == m && seen[s][1] == L &&
				      !memcmp(&seen[s][2], fac, L * sizeof(uint32_t));
			if (dup)
				continue;
			seen[nseen][0] = m;
			seen[nseen][1] = L;
			memcpy(&seen[nseen][2], fac, L * sizeof(uint32_t));
			nseen++;
			for (int variant = lead ? 1 : 0; variant < 2; variant++) {
				struct bld cand;
				if (!hd_candidate(x, &cand, fac, L, m, variant))
					keep_best(&ls, &cand, &lshave);
				else
					pl_bld_free(&cand);
			}
			rdok[nseen - 1] = x->op->op == R2_PLAN_ALLREDUCE && !lead;
		}
	/* recursive doubling, after every HD candidate (the best of those
	 * prunes most of them) */
	for (uint32_t si = 0; si < nseen; si++) {
		uint32_t m = seen[si][0], L = seen[si][1];
		const uint32_t *fac = &seen[si][2];
		if (!rdok[si] || x->prm.no_rd)
			continue;
		/* recursive doubling after nh halving levels: at least
		 * L + nh steps of alpha; a member sends (f-1)/f of its range
		 * in each halving level's RS and AG step, and the owned range
		 * (S / prod f_k, k < nh) to f-1 peers in each doubling step */
		for (uint32_t nh = 0; nh < L; nh++) {
			double own = (double)x->op->size, lb = (L + nh) * x->c->cost.alpha;
			bool pairs = true;
			for (uint32_t k = nh; k < L; k++)
				pairs = pairs && fac[k] == 2;
			if (x->prm.rd_pairs && !pairs)
				continue;
			for (uint32_t k = 0; k < L; k++)
				if (k < nh) {
					lb += 2 * (fac[k] - 1) * own / fac[k] / txmax;
					own /= fac[k];
				} else {
					lb += (fac[k] - 1) * own / txmax;
				}
			if (lshave ? lb >= ls.time : (*have && lb >= best->time))
				continue;
			for (int variant = 0; variant < 2; variant++) {
				struct bld cand;
				if (!hd_candidate(x, &cand, fac, L, m,
						  variant | R2_HD_RD | R2_HD_NHALF((int)nh)))
					keep_best(&ls, &cand, &lshave);
				else
					pl_bld_free(&cand);
			}
		}
	}
	/* Bruck, where no halving/doubling candidate has every host a member
	 * (n has a prime factor above 2R + 1 and 16; bruck_only: always),
	 * radix 2, one peer per NIC and two: at least its steps of alpha and
	 * (n - 1) / n of the buffer in (twice for allreduce) at a host's best
	 * rate. A wrapped block's ranges on disjoint rails (variants 2, 3:
	 * one message a rail, the bytes split by whole rails) only where the
	 * steps' alpha outweighs the bytes and on up to 256 hosts: those
	 * variants load every host to cost (bruck_phase_load). */
	bool whole = false;
	for (uint32_t s = 0; s < nseen; s++)
		whole |= seen[s][0] == n;
	uint32_t radix[] = { 2, R + 1, 2 * R + 1 };
	for (size_t i = 0; i < R2_ARRAY_SIZE(radix) && !whole; i++) {
		uint32_t r = radix[i];
		if (r >= n || r - 1 > R2_HD_MAX_FAN || (i && r == radix[i - 1]))
			continue;
		uint32_t L = r2_bruck_levels(n, r);
		double bytes = (double)(n - 1) / n * (double)x->op->size / txmax;
		double lb = (x->op->op == R2_PLAN_ALLREDUCE ? 2 : 1) * (L * x->c->cost.alpha + bytes);
		if (lshave ? lb >= ls.time : (*have && lb >= best->time))
			continue;
		int nvar = bytes < 4 * L * x->c->cost.alpha && n <= 256 ? 4 : 2;
		for (int variant = 0; variant < nvar; variant++) {
			struct bld cand;
			if (!bruck_candidate(x, &cand, r, variant))
				keep_best(&ls, &cand, &lshave);
			else
				pl_bld_free(&cand);
		}
	}
	if (lshave)
		keep_logstep(x, best, &ls, have);
}

/* A log-step candidate replaces the best plan so far only when it is
 * cheaper by more than logstep_margin (logstep_far_margin on more than
 * logstep_max_hosts hosts): where the two are close (bandwidth-bound
 * sizes), the pipelined plans keep the choice (r2ccld: on TCP rails the
 * model's step costs suit them better, docs/planner.md). */
static void keep_logstep(const struct ctx *x, struct bld *best, struct bld *cand, bool *have)
{
	double margin = x->prm.logstep_max_hosts && x->n > x->prm.logstep_max_hosts
				? x->prm.logstep_far_margin
				: x->prm.logstep_margin;

	if (*have && !(cand->time < best->time * (1 - margin))) {
		pl_bld_free(cand);
		return;
	}
	keep_best(best, cand, have);
}

/* Keeps the cheaper of *best and *cand (frees the other). */
static void keep_best(struct bld *best, struct bld *cand, bool *have)
{
	if (!*have || cand->time < best->time * (1 - 1e-9)) {
		if (*have)
			pl_bld_free(best);
		*best = *cand;
		*have = true;
	} else {
		pl_bld_free(cand);
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
	e = pl_ctx_init(&x, c, op, prm);
	if (e) {
		pl_ctx_free(&x);
		return e;
	}
	if (x.n > 1)
		for (uint32_t h = 0; h < x.n; h++)
			if (!x.cls[x.hcls[h]].mask) {
				pl_ctx_free(&x);
				return -ENETUNREACH;
			}
	if (op->policy == R2_POL_PLAIN && x.any_down) {
		pl_ctx_free(&x);
		return -EHOSTDOWN;
	}
	struct bld best, cand;
	bool have = false;
	memset(&best, 0, sizeof(best));
	if (x.n == 1) {
		e = pl_bld_init(&best, &x, R2_ALGO_RING);
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
				else pl_bld_free(&cand);
				int e2 = candidate(&x, &cand, R2_ALGO_RECURSIVE, 0, 1);
				if (!e2) keep_best(&best, &cand, &have);
				else pl_bld_free(&cand);
				uint32_t kmax = k_limit(&x, op->size / x.n);
				for (uint32_t K = 1;; K = K * 2 > kmax ? kmax : K * 2) {
					int e3 = candidate(&x, &cand, R2_ALGO_SHARD, 0, K);
					if (!e3) keep_best(&best, &cand, &have);
					else pl_bld_free(&cand);
					if (K >= kmax)
						break;
				}
				if (!x.prm.no_logstep)
					hd_candidates(&x, &best, &have);
				e = have ? 0 : (e ? e : e2);
			}
			break;
		case R2_PLAN_ALLGATHER:
		case R2_PLAN_REDUCESCATTER:
			e = candidate(&x, &cand, R2_ALGO_RING,
				      (pol == R2_POL_PLAIN || pol == R2_POL_HOTREPAIR) ? 0 : 1, 1);
			if (!e) keep_best(&best, &cand, &have);
			else pl_bld_free(&cand);
			if (pol == R2_POL_OURS && !x.prm.no_logstep)
				hd_candidates(&x, &best, &have);
			e = have ? 0 : e;
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
					else pl_bld_free(&cand);
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
			pl_bld_free(&cand);
	}
	if (e || !have) {
		if (have)
			pl_bld_free(&best);
		pl_ctx_free(&x);
		return e ? e : -EINVAL;
	}
	struct r2_plan *p = pack(&best, op);
	pl_bld_free(&best);
	pl_ctx_free(&x);
	if (!p)
		return -ENOMEM;
	p->bound = r2_bound(c, op);
	p->gap = p->bound > 0 ? p->time / p->bound : 1.0;
	*out = p;
	return 0;
}

/* One candidate, whatever its cost: r2_plan_build_hd (fac, L, m, variant)
 * or, with fac NULL, r2_plan_build_bruck (radix m, variant). */
static int build_forced(const struct r2_cluster *c, const struct r2_opdesc *op,
			const uint32_t *fac, uint32_t L, uint32_t m, int variant,
			struct r2_plan **out)
{
	struct ctx x;
	struct bld b;
	memset(&b, 0, sizeof(b));
	int e = pl_ctx_init(&x, c, op, NULL);
	if (!e)
		e = fac ? hd_candidate(&x, &b, fac, L, m, variant)
			: bruck_candidate(&x, &b, m, variant);
	struct r2_plan *p = e ? NULL : pack(&b, op);
	pl_bld_free(&b);
	pl_ctx_free(&x);
	if (e)
		return e;
	if (!p)
		return -ENOMEM;
	p->bound = r2_bound(c, op);
	p->gap = p->bound > 0 ? p->time / p->bound : 1.0;
	*out = p;
	return 0;
}

int r2_plan_build_hd(const struct r2_cluster *c, const struct r2_opdesc *op, const uint32_t *fac,
		     uint32_t L, uint32_t m, int variant, struct r2_plan **out)
{
	*out = NULL;
	int e = validate(c, op);
	if (e)
		return e;
	if (!fac || (op->op != R2_PLAN_ALLREDUCE && op->op != R2_PLAN_ALLGATHER &&
		     op->op != R2_PLAN_REDUCESCATTER) || variant < 0 ||
	    (variant & ~(1 | R2_HD_RD | R2_HD_NHALF(0xff))) ||
	    ((variant & R2_HD_RD) && op->op != R2_PLAN_ALLREDUCE) ||
	    (!(variant & R2_HD_RD) && variant >> 8) || (uint32_t)variant >> 8 >= (L ? L : 1))
		return -EINVAL;
	return build_forced(c, op, fac, L, m, variant, out);
}

int r2_plan_build_bruck(const struct r2_cluster *c, const struct r2_opdesc *op, uint32_t r,
			int variant, struct r2_plan **out)
{
	*out = NULL;
	int e = validate(c, op);
	return e ? e : build_forced(c, op, NULL, 0, r, variant, out);
}
