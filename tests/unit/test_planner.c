/* SPDX-License-Identifier: MIT */
/*
 * Planner tests: every schedule is executed symbolically. Each element of
 * each host's working buffer is a vector of contribution counts per source
 * host; REDUCE adds vectors, COPY copies them; sends read the values at the
 * start of the step. At the end every element must hold exactly what the
 * collective defines (allreduce: one contribution from every host, ...).
 * Each step is also checked for: matching send/receive pairs, relays for
 * bridged transfers, no send overlapping a receive on the same host, no COPY
 * receive overlapping another receive, no use of a down NIC or failed link.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "planner_int.h"
#include "util.h"

/* ---- random numbers (reproducible) -------------------------------------- */

static uint64_t rng_state;
static uint32_t rnd(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng_state >> 33);
}
static double rndu(void) { return rnd() / 2147483648.0; }

/* ---- cluster helpers ---------------------------------------------------- */

struct tcl {
	struct r2_cluster c;
	struct r2_nic *nic;
	struct r2_link *down;
	uint8_t *pcie;
};

static void tcl_init(struct tcl *t, uint32_t n, uint32_t R, double bw)
{
	memset(t, 0, sizeof(*t));
	t->nic = calloc((size_t)n * R, sizeof(*t->nic));
	for (size_t i = 0; i < (size_t)n * R; i++)
		t->nic[i] = (struct r2_nic){ R2_NIC_UP, bw, bw, 0 };
	t->c.nhosts = n;
	t->c.nrails = R;
	t->c.nic = t->nic;
	t->c.cost.alpha = 0;
	t->c.cost.gamma = 0;
}

static void tcl_free(struct tcl *t)
{
	free(t->nic);
	free(t->down);
	free(t->pcie);
}

static struct r2_nic *NIC(struct tcl *t, uint32_t h, uint32_t r)
{
	return &t->nic[(size_t)h * t->c.nrails + r];
}

static int link_cmp(const void *pa, const void *pb)
{
	const struct r2_link *a = pa, *b = pb;
	if (a->a != b->a)
		return a->a < b->a ? -1 : 1;
	if (a->b != b->b)
		return a->b < b->b ? -1 : 1;
	return (int)a->rail - (int)b->rail;
}

static void tcl_add_down(struct tcl *t, uint32_t a, uint32_t b, uint16_t rail)
{
	if (a > b) {
		uint32_t x = a;
		a = b;
		b = x;
	}
	for (uint32_t i = 0; i < t->c.ndown; i++)
		if (t->down[i].a == a && t->down[i].b == b && t->down[i].rail == rail)
			return;
	t->down = realloc(t->down, (t->c.ndown + 1) * sizeof(*t->down));
	t->down[t->c.ndown++] = (struct r2_link){ a, b, rail };
	qsort(t->down, t->c.ndown, sizeof(*t->down), link_cmp);
	t->c.down = t->down;
}

static bool nic_ok(const struct r2_cluster *c, uint32_t h, uint32_t r)
{
	if (h >= c->nhosts || r >= c->nrails)
		return false;
	const struct r2_nic *n = &c->nic[(size_t)h * c->nrails + r];
	return n->state != R2_NIC_DOWN && n->bw_tx > 0 && n->bw_rx > 0;
}

static bool hop_ok(const struct r2_cluster *c, uint32_t a, uint32_t b, uint32_t r)
{
	return nic_ok(c, a, r) && nic_ok(c, b, r) &&
	       !r2_link_is_down(c->down, c->ndown, a, b, (uint16_t)r);
}

/* ---- symbolic execution ------------------------------------------------- */

struct ent {
	uint32_t src, dst, via;
	uint16_t r1, r2;
	uint8_t kind;
	uint64_t off, len;
};

static int ent_cmp(const void *pa, const void *pb)
{
	const struct ent *a = pa, *b = pb;
#define C(f) if (a->f != b->f) return a->f < b->f ? -1 : 1;
	C(src) C(dst) C(off) C(len) C(kind) C(via) C(r1) C(r2)
#undef C
	return 0;
}

struct rng_ { uint64_t off, len; uint8_t kind; };

static int rng_cmp(const void *pa, const void *pb)
{
	const struct rng_ *a = pa, *b = pb;
	return a->off < b->off ? -1 : a->off > b->off;
}

static char fail_msg[256];

/* Runs the plan; returns 0 or -1 with fail_msg set. */
static int run_symbolic(const struct r2_plan *p, const struct r2_cluster *c)
{
	uint32_t n = p->nhosts, E = (uint32_t)(p->size / p->elem), el = p->elem;
	size_t V = (size_t)E * n; /* per host: E elements x n sources */
	uint8_t *buf = calloc((size_t)n * V, 1), *stage = NULL;
	size_t maxx = r2_plan_max_xfers(p);
	struct r2_xfer *x = malloc((maxx + 1) * sizeof(*x));
	size_t cap = 1024, ns = 0, nr = 0, nl = 0;
	struct ent *snd = malloc(cap * sizeof(*snd)), *rcv = malloc(cap * sizeof(*rcv));
	struct ent *rel = malloc(cap * sizeof(*rel));
	struct rng_ *rr = malloc((maxx + 1) * sizeof(*rr));
	int ret = -1;
	uint64_t seg = (uint64_t)E / n;
	/* recursive doubling sends the bytes it REDUCEs into (start-of-step
	 * values: the engine stages those receives) */
	bool staged = p->algo == R2_ALGO_RD;
	/* initial values */
	for (uint32_t h = 0; h < n; h++)
		for (uint32_t e = 0; e < E; e++) {
			uint8_t *v = &buf[h * V + (size_t)e * n];
			bool valid = true;
			if (p->op == R2_PLAN_ALLGATHER)
				valid = e / seg == h;
			else if (p->op == R2_PLAN_BROADCAST || p->op == R2_PLAN_SENDRECV)
				valid = h == p->root;
			if (valid)
				v[h] = 1;
			else
				v[h] = 7; /* junk that must never reach a result */
		}
	for (uint32_t k = 0; k < p->nsteps; k++) {
		ns = nr = nl = 0;
		for (uint32_t h = 0; h < n; h++) {
			int cnt = r2_plan_expand(p, h, k, x, maxx);
			if (cnt < 0) {
				snprintf(fail_msg, sizeof(fail_msg), "expand h%u k%u: %d", h, k, cnt);
				goto out;
			}
			size_t nrr = 0;
			for (int i = 0; i < cnt; i++) {
				struct r2_xfer *t = &x[i];
				if (t->off % el || t->len % el || !t->len || t->off + t->len > p->size) {
					snprintf(fail_msg, sizeof(fail_msg), "bad range h%u k%u", h, k);
					goto out;
				}
				if (ns + 1 >= cap || nr + 1 >= cap || nl + 1 >= cap) {
					cap *= 2;
					snd = realloc(snd, cap * sizeof(*snd));
					rcv = realloc(rcv, cap * sizeof(*rcv));
					rel = realloc(rel, cap * sizeof(*rel));
				}
				if (t->dir == R2_XFER_SEND) {
					snd[ns++] = (struct ent){ h, t->peer, t->via, t->rail, t->rail2, t->kind,
								  t->off, t->len };
					rr[nrr++] = (struct rng_){ t->off, t->len, 255 };
				} else if (t->dir == R2_XFER_RECV) {
					rcv[nr++] = (struct ent){ t->peer, h, t->via, t->rail2, t->rail, t->kind,
								  t->off, t->len };
					rr[nrr++] = (struct rng_){ t->off, t->len, t->kind };
				} else {
					rel[nl++] = (struct ent){ t->peer, t->via, h, t->rail, t->rail2, t->kind,
								  t->off, t->len };
				}
			}
			/* overlap rules on this host */
			qsort(rr, nrr, sizeof(*rr), rng_cmp);
			for (size_t i = 0; i < nrr; i++)
				for (size_t j = i + 1; j < nrr && rr[j].off < rr[i].off + rr[i].len; j++) {
					bool si = rr[i].kind == 255, sj = rr[j].kind == 255;
					if (si && sj)
						continue; /* two reads */
					if (staged && si != sj && (si ? rr[j].kind : rr[i].kind) == R2_XFER_REDUCE)
						continue; /* a send and a staged REDUCE */
					if (si != sj || rr[i].kind == R2_XFER_COPY || rr[j].kind == R2_XFER_COPY) {
						snprintf(fail_msg, sizeof(fail_msg),
							 "overlap on h%u step %u at %llu", h, k,
							 (unsigned long long)rr[j].off);
						goto out;
					}
				}
		}
		if (ns != nr) {
			snprintf(fail_msg, sizeof(fail_msg), "step %u: %zu sends, %zu recvs", k, ns, nr);
			goto out;
		}
		qsort(snd, ns, sizeof(*snd), ent_cmp);
		qsort(rcv, nr, sizeof(*rcv), ent_cmp);
		size_t nbr = 0;
		for (size_t i = 0; i < ns; i++) {
			if (ent_cmp(&snd[i], &rcv[i])) {
				snprintf(fail_msg, sizeof(fail_msg), "step %u: send %u->%u off %llu unmatched",
					 k, snd[i].src, snd[i].dst, (unsigned long long)snd[i].off);
				goto out;
			}
			const struct ent *s = &snd[i];
			if (s->src == s->dst) {
				snprintf(fail_msg, sizeof(fail_msg), "self transfer");
				goto out;
			}
			if (s->via == R2_NO_HOST) {
				if (s->r1 != s->r2 || !hop_ok(c, s->src, s->dst, s->r1)) {
					snprintf(fail_msg, sizeof(fail_msg), "step %u: %u->%u uses bad rail %u",
						 k, s->src, s->dst, s->r1);
					goto out;
				}
			} else {
				nbr++;
				if (!hop_ok(c, s->src, s->via, s->r1) || !hop_ok(c, s->via, s->dst, s->r2)) {
					snprintf(fail_msg, sizeof(fail_msg), "bridge uses bad rail");
					goto out;
				}
			}
		}
		if (nbr != nl) {
			snprintf(fail_msg, sizeof(fail_msg), "step %u: %zu bridged, %zu relays", k, nbr, nl);
			goto out;
		}
		for (size_t i = 0; i < nl; i++) {
			bool found = false;
			for (size_t j = 0; j < ns && !found; j++)
				found = snd[j].via == rel[i].via && snd[j].src == rel[i].src &&
					snd[j].dst == rel[i].dst && snd[j].off == rel[i].off &&
					snd[j].len == rel[i].len && snd[j].r1 == rel[i].r1 &&
					snd[j].r2 == rel[i].r2;
			if (!found) {
				snprintf(fail_msg, sizeof(fail_msg), "relay without send");
				goto out;
			}
		}
		/* apply: stage all sends first (start-of-step values) */
		size_t tot = 0;
		for (size_t i = 0; i < ns; i++)
			tot += (snd[i].len / el) * n;
		free(stage);
		stage = malloc(tot + 1);
		size_t at = 0;
		for (size_t i = 0; i < ns; i++) {
			size_t sz = (snd[i].len / el) * n;
			memcpy(stage + at, &buf[snd[i].src * V + (snd[i].off / el) * n], sz);
			at += sz;
		}
		at = 0;
		for (size_t i = 0; i < ns; i++) {
			size_t sz = (snd[i].len / el) * n;
			uint8_t *d = &buf[snd[i].dst * V + (snd[i].off / el) * n];
			if (snd[i].kind == R2_XFER_COPY)
				memcpy(d, stage + at, sz);
			else
				for (size_t q = 0; q < sz; q++)
					d[q] = (uint8_t)(d[q] + stage[at + q]);
			at += sz;
		}
	}
	/* final check */
	for (uint32_t h = 0; h < n; h++) {
		for (uint32_t e = 0; e < E; e++) {
			const uint8_t *v = &buf[h * V + (size_t)e * n];
			bool check = true;
			int mode = 0; /* 0: all ones; 1: only source s */
			uint32_t s = 0;
			switch (p->op) {
			case R2_PLAN_ALLREDUCE:
				break;
			case R2_PLAN_REDUCESCATTER:
				check = e / seg == h;
				break;
			case R2_PLAN_ALLGATHER:
				mode = 1;
				s = e / seg;
				break;
			case R2_PLAN_BROADCAST:
				mode = 1;
				s = p->root;
				break;
			case R2_PLAN_REDUCE:
				check = h == p->root;
				break;
			case R2_PLAN_SENDRECV:
				check = h == p->peer;
				mode = 1;
				s = p->root;
				break;
			default:
				break;
			}
			if (!check)
				continue;
			for (uint32_t q = 0; q < n; q++) {
				uint8_t want = mode == 0 ? 1 : (q == s);
				if (v[q] != want) {
					snprintf(fail_msg, sizeof(fail_msg),
						 "%s: host %u elem %u src %u has %u want %u",
						 r2_op_name(p->op), h, e, q, v[q], want);
					goto out;
				}
			}
		}
	}
	ret = 0;
out:
	free(buf); free(stage); free(x); free(snd); free(rcv); free(rel); free(rr);
	return ret;
}

static bool tight;

static void check_plan(struct tcl *t, enum r2_plan_op op, enum r2_policy pol, uint64_t size,
		       uint32_t elem, uint32_t root, uint32_t peer, const struct r2_plan_params *prm,
		       const char *what)
{
	struct r2_opdesc od = { op, size, elem, root, peer, pol };
	struct r2_plan *p = NULL;
	int e = r2_plan_build(&t->c, &od, prm, &p);
	if (pol == R2_POL_PLAIN && e == -EHOSTDOWN)
		return;
	ck_assert_msg(e == 0, "%s: build %s/%s failed %d", what, r2_op_name(op), r2_policy_name(pol), e);
	ck_assert_msg(run_symbolic(p, &t->c) == 0, "%s: %s/%s/%s n=%u R=%u: %s", what, r2_op_name(op),
		      r2_policy_name(pol), r2_algo_name(p->algo), t->c.nhosts, t->c.nrails, fail_msg);
	/* analytic prediction against the step-by-step evaluation */
	double ev = r2_plan_eval(p, &t->c);
	ck_assert_msg(isfinite(ev) && isfinite(p->time), "%s: non-finite time", what);
	/* element rounding: each transfer may carry one element more than the
	 * analytic share, at most 4n transfers per NIC per step */
	double minbw = INFINITY;
	for (size_t i = 0; i < (size_t)t->c.nhosts * t->c.nrails; i++)
		if (nic_ok(&t->c, (uint32_t)(i / t->c.nrails), (uint32_t)(i % t->c.nrails)))
			minbw = fmin(minbw, fmin(t->nic[i].bw_tx, t->nic[i].bw_rx));
	double slack = tight ? 0 : p->nsteps * 4.0 * t->c.nhosts * elem / minbw;
	if (p->nsteps)
		ck_assert_msg(ev <= p->time * 1.02 + slack + 1e-12,
			      "%s: %s/%s eval %.6g > predicted %.6g", what, r2_op_name(op),
			      r2_algo_name(p->algo), ev, p->time);
	if (p->bound > 0)
		ck_assert_msg(p->time >= p->bound * 0.999, "%s: time %.6g below bound %.6g (%s)", what,
			      p->time, p->bound, r2_algo_name(p->algo));
	r2_plan_free(p);
}

static const enum r2_plan_op all_ops[] = { R2_PLAN_ALLREDUCE, R2_PLAN_ALLGATHER, R2_PLAN_REDUCESCATTER,
				      R2_PLAN_BROADCAST, R2_PLAN_REDUCE, R2_PLAN_SENDRECV };

/* ---- fixed cases -------------------------------------------------------- */

START_TEST(test_healthy_all_ops)
{
	struct r2_plan_params prm;
	r2_plan_params_default(&prm);
	prm.min_chunk = 4;
	uint32_t ns[] = { 1, 2, 3, 4, 5, 8 };
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++)
		for (uint32_t R = 1; R <= 3; R++) {
			struct tcl t;
			tcl_init(&t, ns[a], R, 1e9);
			t.c.cost.alpha = 1e-6;
			for (size_t o = 0; o < R2_ARRAY_SIZE(all_ops); o++)
				for (int pol = 0; pol < R2_POL_COUNT; pol++) {
					if (all_ops[o] == R2_PLAN_SENDRECV && ns[a] < 2)
						continue;
					check_plan(&t, all_ops[o], (enum r2_policy)pol, 4ull * ns[a] * 60, 4,
						   ns[a] - 1, 0, &prm, "healthy");
				}
			tcl_free(&t);
		}
}
END_TEST



START_TEST(test_one_nic_down)
{
	struct r2_plan_params prm;
	r2_plan_params_default(&prm);
	prm.min_chunk = 4;
	for (uint32_t n = 2; n <= 9; n++) {
		struct tcl t;
		tcl_init(&t, n, 2, 1e9);
		NIC(&t, n / 2, 1)->state = R2_NIC_DOWN;
		for (size_t o = 0; o < R2_ARRAY_SIZE(all_ops); o++)
			for (int pol = 0; pol < R2_POL_COUNT; pol++)
				check_plan(&t, all_ops[o], (enum r2_policy)pol, 4ull * n * 40, 4, 0, n - 1,
					   &prm, "nicdown");
		/* HotRepair moves exactly the failed NIC's ring edges */
		struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4ull * n * 1000, 4, 0, 0, R2_POL_HOTREPAIR };
		struct r2_plan *p;
		ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0);
		ck_assert_uint_eq(p->nremapped, 2);
		ck_assert_uint_eq(p->nbridged, 0);
		r2_plan_free(p);
		/* PLAIN refuses to run on a down NIC (it would hang) */
		od.policy = R2_POL_PLAIN;
		ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), -EHOSTDOWN);
		tcl_free(&t);
	}
}
END_TEST

/* Local ring repair: a failed A-B link on one rail gets a bridge host in
 * that ring only; every other edge stays. */
START_TEST(test_ring_repair_bridge)
{
	struct r2_plan_params prm;
	r2_plan_params_default(&prm);
	uint32_t n = 16, R = 4;
	struct tcl t;
	tcl_init(&t, n, R, 1e9);
	t.pcie = malloc(n * R);
	for (uint32_t i = 0; i < n * R; i++)
		t.pcie[i] = 4;
	t.pcie[9 * R + 2] = 1; /* host 9 is closest to rail 2 */
	t.c.pcie_dist = t.pcie;
	tcl_add_down(&t, 5, 6, 2);
	for (int pol = R2_POL_HOTREPAIR; pol <= R2_POL_BALANCE; pol++) {
		struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4ull * n * 256, 4, 0, 0, (enum r2_policy)pol };
		struct r2_plan *p;
		ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0);
		ck_assert_uint_eq(p->nbridged, 1);
		ck_assert_uint_eq(p->nremapped, 0);
		ck_assert_double_eq_tol(p->edges_kept, (double)(n * R - 1) / (n * R), 1e-12);
		ck_assert_uint_eq(p->nroute, 1);
		ck_assert_uint_eq(p->route[0].a, 5);
		ck_assert_uint_eq(p->route[0].b, 6);
		ck_assert_uint_eq(p->route[0].via, 9);
		ck_assert_uint_eq(p->route[0].rail, 2);
		ck_assert_uint_eq(p->route[0].rail2, 2);
		ck_assert_msg(run_symbolic(p, &t.c) == 0, "%s", fail_msg);
		r2_plan_free(p);
	}
	/* every op and policy still exact with the bridge */
	for (size_t o = 0; o < R2_ARRAY_SIZE(all_ops); o++)
		for (int pol = 0; pol < R2_POL_COUNT; pol++)
			check_plan(&t, all_ops[o], (enum r2_policy)pol, 4ull * n * 32, 4, 5, 6, &prm,
				   "bridge");
	tcl_free(&t);
}
END_TEST

/* Two hosts that share no rail at all: everything between them is relayed. */
START_TEST(test_disjoint_rails)
{
	struct r2_plan_params prm;
	r2_plan_params_default(&prm);
	prm.min_chunk = 4;
	struct tcl t;
	tcl_init(&t, 5, 2, 1e9);
	NIC(&t, 1, 1)->state = R2_NIC_DOWN;
	NIC(&t, 3, 0)->state = R2_NIC_DOWN;
	for (size_t o = 0; o < R2_ARRAY_SIZE(all_ops); o++)
		for (int pol = 0; pol < R2_POL_COUNT; pol++)
			check_plan(&t, all_ops[o], (enum r2_policy)pol, 4ull * 5 * 24, 4, 1, 3, &prm,
				   "disjoint");
	tcl_free(&t);
}
END_TEST

START_TEST(test_unreachable)
{
	struct tcl t;
	tcl_init(&t, 3, 2, 1e9);
	NIC(&t, 1, 0)->state = R2_NIC_DOWN;
	NIC(&t, 1, 1)->state = R2_NIC_DOWN;
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4096, 4, 0, 0, R2_POL_OURS };
	struct r2_plan *p;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, NULL, &p), -ENETUNREACH);
	od.size = 4095;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, NULL, &p), -EINVAL);
	tcl_free(&t);
}
END_TEST

/* ---- random clusters ----------------------------------------------------- */

static void random_cluster(struct tcl *t, uint32_t n, uint32_t R)
{
	tcl_init(t, n, R, 1e9);
	t->c.cost.alpha = rnd() % 2 ? 0 : 2e-6;
	t->c.cost.gamma = rnd() % 2 ? 0 : 1e-7;
	for (uint32_t h = 0; h < n; h++)
		for (uint32_t r = 0; r < R; r++) {
			struct r2_nic *ni = NIC(t, h, r);
			uint32_t q = rnd() % 10;
			if (q == 0) {
				ni->state = R2_NIC_DOWN;
			} else if (q <= 2) {
				ni->state = R2_NIC_DEGRADED;
				ni->bw_tx = ni->bw_rx = 1e9 * (0.1 + 0.8 * rndu());
			}
		}
	for (uint32_t h = 0; h < n; h++) { /* at least one usable NIC */
		bool any = false;
		for (uint32_t r = 0; r < R; r++)
			any |= NIC(t, h, r)->state != R2_NIC_DOWN;
		if (!any)
			NIC(t, h, rnd() % R)->state = R2_NIC_UP;
	}
	if (n > 2 && rnd() % 3 == 0) {
		uint32_t k = 1 + rnd() % 3;
		for (uint32_t i = 0; i < k; i++) {
			uint32_t a = rnd() % n, b = rnd() % n;
			if (a != b)
				tcl_add_down(t, a, b, (uint16_t)(rnd() % R));
		}
	}
}

START_TEST(test_random_clusters)
{
	rng_state = 0x5eed0000ull + (uint64_t)_i;
	struct r2_plan_params prm;
	r2_plan_params_default(&prm);
	prm.min_chunk = 8;
	prm.max_chunks = 8;
	for (int iter = 0; iter < 6; iter++) {
		uint32_t n = 1 + rnd() % (_i < 4 ? 12 : 64), R = 1 + rnd() % 8;
		struct tcl t;
		random_cluster(&t, n, R);
		for (size_t o = 0; o < R2_ARRAY_SIZE(all_ops); o++) {
			if (all_ops[o] == R2_PLAN_SENDRECV && n < 2)
				continue;
			uint32_t segs = 1 + rnd() % 6;
			uint64_t size = 4ull * n * segs * (n > 32 ? 2 : 8);
			uint32_t root = rnd() % n, peer = (root + 1 + rnd() % (n > 1 ? n - 1 : 1)) % n;
			for (int pol = 0; pol < R2_POL_COUNT; pol++) {
				char what[64];
				snprintf(what, sizeof(what), "random seed %d iter %d", _i, iter);
				check_plan(&t, all_ops[o], (enum r2_policy)pol, size, 4, root, peer, &prm, what);
			}
		}
		tcl_free(&t);
	}
}
END_TEST

/* ---- log-step (HD) schedules, forced ------------------------------------- */

/* Radix sequences of m: a first radix, then the prime factors (up to 6). */
static uint32_t seqs_of(uint32_t m, uint32_t seq[][8], uint32_t *len)
{
	uint32_t ns = 0;
	uint32_t first[] = { 2, 3, 4, 5, 8, m };
	for (size_t i = 0; i < R2_ARRAY_SIZE(first) && ns < 6; i++) {
		uint32_t f = first[i], r = m, L = 0;
		if (f < 2 || f > m || m % f)
			continue;
		seq[ns][L++] = f;
		r /= f;
		while (r > 1 && L < 8) { /* the rest in prime radices, ascending */
			uint32_t q = 2;
			while (r % q)
				q++;
			seq[ns][L++] = q;
			r /= q;
		}
		if (r == 1)
			len[ns++] = L;
	}
	return ns;
}

/* n hosts x 3 rails at 1 GB/s, alpha 1 us, in health 0 (healthy), 1 (NIC
 * (n-1, 1) down), 2 (NIC (0, 2) at a quarter) or 3 (link 0 - n-1 down on
 * rail 0). */
static void tcl_health(struct tcl *t, uint32_t n, int health)
{
	tcl_init(t, n, 3, 1e9);
	t->c.cost.alpha = 1e-6;
	if (health == 1)
		NIC(t, n - 1, 1)->state = R2_NIC_DOWN;
	if (health == 2)
		NIC(t, 0, 2)->bw_tx = NIC(t, 0, 2)->bw_rx = 2.5e8;
	if (health == 3)
		tcl_add_down(t, 0, n - 1, 0);
}

/* A forced log-step plan: its step count, the analytic cost equal to the
 * step-by-step evaluation, and not under the bound; then freed. */
static void check_forced(struct r2_plan *p, const struct r2_cluster *c, uint32_t steps,
			 const char *what)
{
	ck_assert_uint_eq(p->nsteps, steps);
	double ev = r2_plan_eval(p, c);
	ck_assert_msg(fabs(ev - p->time) <= 1e-9 * ev + 1e-15, "%s: %s eval %.9g predicted %.9g",
		      what, r2_algo_name(p->algo), ev, p->time);
	ck_assert_msg(p->time >= p->bound * 0.999, "%s: %s below the bound", what,
		      r2_algo_name(p->algo));
	r2_plan_free(p);
}

/* rd: recursive doubling (R2_HD_RD) instead of halving/doubling, after
 * every possible number of halving levels. */
static void check_hd(struct tcl *t, enum r2_plan_op op, uint32_t m, uint64_t size, const char *what,
		     bool rd)
{
	uint32_t seq[6][8], len[6];
	uint32_t ns = seqs_of(m, seq, len);
	ck_assert_msg(ns > 0, "%s: no radices for %u", what, m);
	for (uint32_t s = 0; s < ns; s++)
		for (uint32_t nh = 0; nh < (rd ? len[s] : 1); nh++)
		for (int variant = 0; variant < 2; variant++) {
			struct r2_opdesc od = { op, size, 4, 0, 0, R2_POL_OURS };
			struct r2_plan *p = NULL;
			int e = r2_plan_build_hd(&t->c, &od, seq[s], len[s], m,
						 variant | (rd ? R2_HD_RD | R2_HD_NHALF((int)nh) : 0), &p);
			ck_assert_msg(e == 0, "%s: hd build %d (n=%u m=%u)", what, e, t->c.nhosts, m);
			ck_assert_int_eq(p->algo, rd ? R2_ALGO_RD : R2_ALGO_HD);
			ck_assert_msg(run_symbolic(p, &t->c) == 0,
				      "%s: %s %s n=%u m=%u L=%u f0=%u nh=%u v%d: %s", what, r2_op_name(op),
				      rd ? "rd" : "hd", t->c.nhosts, m, len[s], seq[s][0], nh, variant,
				      fail_msg);
			uint32_t steps = (op == R2_PLAN_ALLREDUCE && !rd ? 2 : 1) * len[s] + nh +
					 (m < t->c.nhosts ? 2 : 0);
			check_forced(p, &t->c, steps, what);
		}
}

START_TEST(test_hd_exact)
{
	/* healthy, a NIC down, a slow NIC, a failed link; allreduce with and
	 * without folded hosts, reducescatter and allgather (m = n) */
	uint32_t ns[] = { 2, 3, 4, 6, 8, 12, 16 };
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++)
		for (int health = 0; health < 4; health++) {
			uint32_t n = ns[a];
			struct tcl t;
			tcl_health(&t, n, health);
			char what[64];
			snprintf(what, sizeof(what), "hd n=%u health %d", n, health);
			uint64_t size = 4ull * n * 30;
			check_hd(&t, R2_PLAN_ALLREDUCE, n, size + 4 * (n > 2), what, false);
			check_hd(&t, R2_PLAN_REDUCESCATTER, n, size, what, false);
			check_hd(&t, R2_PLAN_ALLGATHER, n, size, what, false);
			for (uint32_t m = n > 2 ? (n + 1) / 2 : n; m < n; m++)
				check_hd(&t, R2_PLAN_ALLREDUCE, m, size + 12, what, false);
			/* recursive doubling: the same radices and folds */
			check_hd(&t, R2_PLAN_ALLREDUCE, n, size + 4 * (n > 2), what, true);
			for (uint32_t m = n > 2 ? (n + 1) / 2 : n; m < n; m++)
				check_hd(&t, R2_PLAN_ALLREDUCE, m, size + 12, what, true);
			tcl_free(&t);
		}
}
END_TEST

/* The folded hosts are the slowest; a pair without a common rail is refused. */
START_TEST(test_hd_fold_unreachable)
{
	struct tcl t;
	tcl_init(&t, 6, 2, 1e9);
	NIC(&t, 1, 0)->state = R2_NIC_DOWN;
	NIC(&t, 3, 1)->bw_tx = NIC(&t, 3, 1)->bw_rx = 1e8;
	uint32_t fac[] = { 4 };
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4 * 600, 4, 0, 0, R2_POL_OURS };
	struct r2_plan *p = NULL;
	ck_assert_int_eq(r2_plan_build_hd(&t.c, &od, fac, 1, 4, 0, &p), 0);
	ck_assert_uint_eq(p->comp[0].nleaf, 2);
	ck_assert_uint_eq(p->hosts[p->comp[0].leaf], 1);
	ck_assert_uint_eq(p->hosts[p->comp[0].leaf + 1], 3);
	ck_assert_msg(run_symbolic(p, &t.c) == 0, "%s", fail_msg);
	r2_plan_free(p);
	/* host 0 only on rail 0, host 1 only on rail 1: they exchange at radix 2 */
	NIC(&t, 0, 1)->state = R2_NIC_DOWN;
	uint32_t f2[] = { 2, 3 };
	ck_assert_int_eq(r2_plan_build_hd(&t.c, &od, f2, 2, 6, 0, &p), -ENETUNREACH);
	/* the planner still finds a plan (a bridged one) */
	ck_assert_int_eq(r2_plan_build(&t.c, &od, NULL, &p), 0);
	ck_assert_msg(run_symbolic(p, &t.c) == 0, "%s", fail_msg);
	r2_plan_free(p);
	tcl_free(&t);
}
END_TEST

/* Large cluster, few special hosts: the analytic cost (special groups plus
 * one plain group) equals the step-by-step evaluation. */
START_TEST(test_hd_large)
{
	struct tcl t;
	uint32_t n = 128, R = 4;
	tcl_init(&t, n, R, 1e9);
	t.c.cost.alpha = 2e-6;
	NIC(&t, 5, 2)->state = R2_NIC_DOWN;
	NIC(&t, 77, 1)->bw_tx = NIC(&t, 77, 1)->bw_rx = 3e8;
	tcl_add_down(&t, 9, 100, 3);
	uint32_t seqs[][4] = { { 2, 2, 4, 8 }, { 8, 16 }, { 2, 64 } };
	uint32_t lens[] = { 4, 2, 2 };
	for (size_t s = 0; s < R2_ARRAY_SIZE(lens); s++)
		for (int variant = 0; variant < 6; variant++) { /* 2-5: recursive doubling */
			struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4ull * 128 * 97, 4, 0, 0, R2_POL_OURS };
			struct r2_plan *p = NULL;
			int v = variant < 4 ? variant : (variant & 1) | R2_HD_RD | R2_HD_NHALF(1);
			ck_assert_int_eq(r2_plan_build_hd(&t.c, &od, seqs[s], lens[s], 128, v, &p), 0);
			double ev = r2_plan_eval(p, &t.c);
			ck_assert_msg(fabs(ev - p->time) <= 1e-3 * ev, "eval %.9g predicted %.9g", ev, p->time);
			r2_plan_free(p);
		}
	/* and the choice: a log-step plan, far cheaper than without them */
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 1 << 16, 4, 0, 0, R2_POL_OURS };
	struct r2_plan_params prm;
	r2_plan_params_default(&prm);
	struct r2_plan *p = NULL, *q = NULL;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0);
	prm.no_logstep = true;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &q), 0);
	ck_assert(p->algo == R2_ALGO_HD || p->algo == R2_ALGO_RD);
	ck_assert(q->algo != R2_ALGO_HD && q->algo != R2_ALGO_RD);
	ck_assert_msg(p->time < q->time / 4, "hd %.6g today %.6g", p->time, q->time);
	ck_assert_msg(run_symbolic(p, &t.c) == 0, "%s", fail_msg);
	r2_plan_free(p);
	r2_plan_free(q);
	tcl_free(&t);
}
END_TEST

/* ---- Bruck (any n) ------------------------------------------------------- */

/* Every op, radix and rail variant, symbolically exact, with the step
 * count, the step-by-step evaluation equal to the prediction, and no plan
 * under the bound. Sizes: whole segments, and (allreduce) uneven or empty
 * pieces. */
static void check_bruck(struct tcl *t, const char *what)
{
	uint32_t n = t->c.nhosts;
	enum r2_plan_op ops[] = { R2_PLAN_ALLGATHER, R2_PLAN_REDUCESCATTER, R2_PLAN_ALLREDUCE,
				  R2_PLAN_ALLREDUCE, R2_PLAN_ALLREDUCE };
	uint64_t sizes[] = { 4ull * n * 3, 4ull * n * 5, 4ull * n * 7 + 8, 4ull * (n / 2 + 1), 4 };
	for (size_t o = 0; o < R2_ARRAY_SIZE(ops); o++)
		for (uint32_t r = 2; r < n && r <= 9; r++)
			for (int variant = 0; variant < 4; variant++) {
				struct r2_opdesc od = { ops[o], sizes[o], 4, 0, 0, R2_POL_OURS };
				struct r2_plan *p = NULL;
				int e = r2_plan_build_bruck(&t->c, &od, r, variant, &p);
				ck_assert_msg(e == 0, "%s: bruck build %d (r=%u)", what, e, r);
				ck_assert_int_eq(p->algo, R2_ALGO_BRUCK);
				ck_assert_msg(run_symbolic(p, &t->c) == 0, "%s: %s r=%u v%d size %llu: %s",
					      what, r2_op_name(ops[o]), r, variant,
					      (unsigned long long)sizes[o], fail_msg);
				uint32_t L = 0;
				for (uint64_t c = 1; c < n; c *= r)
					L++;
				check_forced(p, &t->c, (ops[o] == R2_PLAN_ALLREDUCE ? 2 : 1) * L, what);
			}
}

START_TEST(test_bruck_exact)
{
	/* healthy, a NIC down, a slow NIC, a failed link; n prime or not */
	uint32_t ns[] = { 3, 5, 6, 7, 10, 11, 13 };
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++)
		for (int health = 0; health < 4; health++) {
			uint32_t n = ns[a];
			struct tcl t;
			tcl_health(&t, n, health);
			char what[64];
			snprintf(what, sizeof(what), "bruck n=%u health %d", n, health);
			check_bruck(&t, what);
			tcl_free(&t);
		}
	/* radix at n or above, or beyond the fan limit: refused */
	struct tcl t;
	tcl_init(&t, 5, 2, 1e9);
	struct r2_opdesc od = { R2_PLAN_ALLGATHER, 4 * 5, 4, 0, 0, R2_POL_OURS };
	struct r2_plan *p = NULL;
	ck_assert_int_eq(r2_plan_build_bruck(&t.c, &od, 5, 0, &p), -EINVAL);
	ck_assert_int_eq(r2_plan_build_bruck(&t.c, &od, 1, 0, &p), -EINVAL);
	od.op = R2_PLAN_BROADCAST;
	ck_assert_int_eq(r2_plan_build_bruck(&t.c, &od, 2, 0, &p), -EINVAL);
	tcl_free(&t);
}
END_TEST

/* A prime number of hosts at scale (61 and 257 x 8 rails): the analytic
 * cost with few special hosts (bruck_phase_load) equals the step-by-step
 * evaluation, and the planner picks Bruck for an AllGather, where halving
 * and doubling cannot factor n (the ring was 30x the bound at 64 KB). */
START_TEST(test_bruck_choice)
{
	uint32_t ns[] = { 61, 257 };
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++) {
		struct tcl t;
		uint32_t n = ns[a];
		tcl_init(&t, n, 8, 25e9);
		t.c.cost.alpha = 5e-6;
		for (int health = 0; health < 2; health++) {
			if (health)
				NIC(&t, 0, 0)->state = R2_NIC_DOWN;
			for (uint32_t r = 2; r <= 17; r += 7)
				for (int variant = 0; variant < 4; variant++) {
					struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4ull * n * 101 + 4, 4, 0,
								0, R2_POL_OURS };
					struct r2_plan *p = NULL;
					ck_assert_int_eq(r2_plan_build_bruck(&t.c, &od, r, variant, &p), 0);
					double ev = r2_plan_eval(p, &t.c);
					/* one piece is an element longer: the analytic
					 * cost takes a plain host's (as HD's, 1e-3) */
					ck_assert_msg(fabs(ev - p->time) <= 1e-4 * ev,
						      "n=%u r=%u v%d: eval %.9g predicted %.9g", n, r,
						      variant, ev, p->time);
					r2_plan_free(p);
				}
			struct r2_opdesc od = { R2_PLAN_ALLGATHER, 1024ull * n, 4, 0, 0, R2_POL_OURS };
			struct r2_plan_params prm;
			r2_plan_params_default(&prm);
			struct r2_plan *p = NULL, *q = NULL;
			ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0);
			prm.no_logstep = true;
			ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &q), 0);
			ck_assert_int_eq(p->algo, R2_ALGO_BRUCK);
			ck_assert_msg(p->time < q->time / 4, "n=%u: bruck %.6g ring %.6g", n, p->time,
				      q->time);
			/* (symbolically at 257 hosts only when healthy: 45 s of
			 * CPU each under ASan, near the case's limit on CI) */
			if (n < 100 || !health)
				ck_assert_msg(run_symbolic(p, &t.c) == 0, "n=%u: %s", n, fail_msg);
			r2_plan_free(p);
			r2_plan_free(q);
		}
		tcl_free(&t);
	}
}
END_TEST

/* The choice at small sizes: 16 x 8 rails, 64 KB: recursive doubling on
 * radices (4, 4), 2 steps of alpha + S / (2 bw) (3 peers dealt 3/3/2 rails),
 * exact, healthy and with a NIC down (of a 3-rail group); 64 x 8, 1 MB:
 * halving levels first. */
START_TEST(test_rd_choice)
{
	struct tcl t;
	tcl_init(&t, 16, 8, 25e9);
	t.c.cost.alpha = 5e-6;
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 1 << 16, 4, 0, 0, R2_POL_OURS };
	for (int down = 0; down < 2; down++) {
		if (down) /* rail 0: its group {0, 3, 6} keeps 2 rails, S/2 each */
			NIC(&t, 3, 0)->state = R2_NIC_DOWN;
		struct r2_plan *p = NULL;
		ck_assert_int_eq(r2_plan_build(&t.c, &od, NULL, &p), 0);
		ck_assert_int_eq(p->algo, R2_ALGO_RD);
		ck_assert_uint_eq(p->comp[0].nhalf, 0);
		ck_assert_uint_eq(p->nsteps, 2);
		double want = 2 * (5e-6 + (1 << 15) / 25e9);
		ck_assert_msg(fabs(p->time - want) <= 1e-9 * want, "rd %.9g want %.9g", p->time, want);
		ck_assert_msg(fabs(r2_plan_eval(p, &t.c) - p->time) <= 1e-9 * p->time, "eval");
		ck_assert_msg(p->time >= p->bound, "below the bound");
		ck_assert_msg(run_symbolic(p, &t.c) == 0, "%s", fail_msg);
		r2_plan_free(p);
	}
	tcl_free(&t);
	tcl_init(&t, 64, 8, 25e9);
	t.c.cost.alpha = 5e-6;
	od.size = 1 << 20;
	struct r2_plan *p = NULL;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, NULL, &p), 0);
	ck_assert_int_eq(p->algo, R2_ALGO_RD);
	ck_assert_uint_gt(p->comp[0].nhalf, 0);
	ck_assert_uint_lt(p->nsteps, 2u * p->comp[0].level);
	ck_assert_msg(fabs(r2_plan_eval(p, &t.c) - p->time) <= 1e-9 * p->time, "eval");
	r2_plan_free(p);
	/* refused: rd for allgather, h >= L, halving levels without rd */
	uint32_t fac[] = { 8, 8 };
	ck_assert_int_eq(r2_plan_build_hd(&t.c, &od, fac, 2, 64, R2_HD_RD | R2_HD_NHALF(1), &p), 0);
	ck_assert_uint_eq(p->nsteps, 3);
	ck_assert_uint_eq(p->comp[0].nhalf, 1);
	r2_plan_free(p);
	ck_assert_int_eq(r2_plan_build_hd(&t.c, &od, fac, 2, 64, R2_HD_RD | R2_HD_NHALF(2), &p),
			 -EINVAL);
	ck_assert_int_eq(r2_plan_build_hd(&t.c, &od, fac, 2, 64, R2_HD_NHALF(1), &p), -EINVAL);
	od.op = R2_PLAN_ALLGATHER;
	ck_assert_int_eq(r2_plan_build_hd(&t.c, &od, fac, 2, 64, R2_HD_RD, &p), -EINVAL);
	ck_assert_ptr_null(p);
	tcl_free(&t);
}
END_TEST

/* logstep_max_hosts with logstep_far_margin (r2ccld: 4 hosts, 25%): on 16
 * hosts x 2 rails at 1 Gbit/s and 200 us a step (the daemon's model),
 * recursive doubling by pairs where the model puts it far ahead of the
 * ring's 30 steps (64 KB), the ring where the two are close (16 MB), and
 * no log-step plan beyond the hosts at the default margin (1: none). */
START_TEST(test_logstep_far_margin)
{
	struct tcl t;
	struct r2_plan_params prm;
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 1 << 16, 4, 0, 0, R2_POL_OURS };
	struct r2_plan *p = NULL;

	tcl_init(&t, 16, 2, 125e6);
	t.c.cost.alpha = 200e-6;
	r2_plan_params_default(&prm);
	prm.rd_pairs = true;
	prm.logstep_margin = 0.05;
	prm.logstep_healthy = true;
	prm.logstep_max_hosts = 4;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0); /* far margin 1 */
	ck_assert_int_ne(p->algo, R2_ALGO_RD);
	ck_assert_int_ne(p->algo, R2_ALGO_HD);
	double other = p->time;
	r2_plan_free(p);
	prm.logstep_far_margin = 0.25;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0);
	ck_assert_int_eq(p->algo, R2_ALGO_RD);
	ck_assert_uint_le(p->nsteps, 8);
	ck_assert_msg(p->time < 0.75 * other, "rd %.6g other %.6g", p->time, other);
	ck_assert_msg(run_symbolic(p, &t.c) == 0, "%s", fail_msg);
	r2_plan_free(p);
	od.size = 16 << 20;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0);
	ck_assert_int_ne(p->algo, R2_ALGO_RD);
	ck_assert_int_ne(p->algo, R2_ALGO_HD);
	r2_plan_free(p);
	tcl_free(&t);
}
END_TEST

/* Latency rounds of the bound: ceil(log_{P+1} n). */
START_TEST(test_bound_rounds)
{
	struct { uint32_t n, R; enum r2_plan_op op; double rounds; } cs[] = {
		{ 1024, 8, R2_PLAN_ALLREDUCE, 4 }, { 9, 8, R2_PLAN_ALLREDUCE, 1 },
		{ 10, 8, R2_PLAN_ALLGATHER, 2 }, { 16, 1, R2_PLAN_ALLREDUCE, 4 },
		{ 17, 1, R2_PLAN_BROADCAST, 5 }, { 64, 3, R2_PLAN_ALLREDUCE, 3 },
		{ 8, 2, R2_PLAN_SENDRECV, 1 },
	};
	for (size_t i = 0; i < R2_ARRAY_SIZE(cs); i++) {
		struct tcl t;
		tcl_init(&t, cs[i].n, cs[i].R, 1e9);
		t.c.cost.alpha = 1e-6;
		struct r2_opdesc od = { cs[i].op, 4ull * cs[i].n, 4, 0, 1, R2_POL_OURS };
		ck_assert_double_eq(r2_bound_rounds(&t.c, &od), cs[i].rounds);
		double W, b = r2_bound_terms(&t.c, &od, &W);
		ck_assert_double_eq_tol(b, fmax(W + 1e-6, cs[i].rounds * 1e-6), 1e-15);
		tcl_free(&t);
	}
}
END_TEST

/* ---- the n / X table: ours within 5% of the bound ----------------------- */

static double one_degraded(uint32_t n, double X, enum r2_policy pol, double *bound)
{
	struct tcl t;
	tcl_init(&t, n, 2, 12.5e9);
	/* host 0 loses a fraction X of its two NICs' bandwidth */
	double left = 2 * (1 - X); /* in NIC units */
	if (left >= 1) {
		NIC(&t, 0, 1)->bw_tx = NIC(&t, 0, 1)->bw_rx = 12.5e9 * (left - 1);
		NIC(&t, 0, 1)->state = R2_NIC_DEGRADED;
	} else {
		NIC(&t, 0, 1)->state = R2_NIC_DOWN;
		NIC(&t, 0, 0)->bw_tx = NIC(&t, 0, 0)->bw_rx = 12.5e9 * left;
		NIC(&t, 0, 0)->state = R2_NIC_DEGRADED;
	}
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 1ull << 30, 4, 0, 0, pol };
	struct r2_plan *p = NULL;
	ck_assert_int_eq(r2_plan_build(&t.c, &od, NULL, &p), 0);
	double tm = p->time;
	*bound = p->bound;
	r2_plan_free(p);
	tcl_free(&t);
	return tm;
}

START_TEST(test_nx_table)
{
	uint32_t ns[] = { 2, 3, 4, 8, 16, 64, 1024 };
	double Xs[] = { 0.25, 0.5, 0.75 };
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++)
		for (size_t b = 0; b < R2_ARRAY_SIZE(Xs); b++) {
			uint32_t n = ns[a];
			double X = Xs[b], bound;
			double t = one_degraded(n, X, R2_POL_OURS, &bound);
			/* the bound in ANCHORS form, relative to healthy */
			double healthy = 2.0 * (n - 1) * (1ull << 30) / (n * 25e9);
			double anch = fmax(n / (n - X), n / (2.0 * (n - 1) * (1 - X)));
			ck_assert_double_eq_tol(bound / healthy, anch, 1e-9);
			ck_assert_msg(t <= bound * 1.05, "n=%u X=%.2f: ours %.4f x bound", n, X, t / bound);
			double r2 = 1 + n * X / (2.0 * (n - 1) * (1 - X));
			if (r2 > anch * 1.0001)
				ck_assert_msg(t / healthy < r2, "n=%u X=%.2f: ours %.4f >= r2ccl %.4f", n, X,
					      t / healthy, r2);
		}
}
END_TEST

/* ---- exactness of the shard plan with deep pipelines ------------------- */

START_TEST(test_shard_pipelined)
{
	struct r2_plan_params prm;
	r2_plan_params_default(&prm);
	prm.min_chunk = 4;
	prm.max_chunks = 16;
	uint32_t ns[] = { 2, 3, 4, 7, 16 };
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++) {
		struct tcl t;
		uint32_t n = ns[a];
		tcl_init(&t, n, 2, 1e9);
		NIC(&t, 0, 1)->state = R2_NIC_DOWN;
		NIC(&t, n - 1, 0)->bw_tx = NIC(&t, n - 1, 0)->bw_rx = 3e8;
		struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4ull * 1000 * n, 4, 0, 0, R2_POL_OURS };
		struct r2_plan *p;
		ck_assert_int_eq(r2_plan_build(&t.c, &od, &prm, &p), 0);
		ck_assert_int_eq(p->algo, n > 2 ? R2_ALGO_SHARD : p->algo);
		ck_assert_msg(run_symbolic(p, &t.c) == 0, "%s", fail_msg);
		double ev = r2_plan_eval(p, &t.c);
		ck_assert_msg(fabs(ev - p->time) <= 0.02 * ev, "eval %g predicted %g", ev, p->time);
		r2_plan_free(p);
		tcl_free(&t);
	}
}
END_TEST

/* ---- precomputed table --------------------------------------------------- */

START_TEST(test_table)
{
	struct tcl t;
	tcl_init(&t, 6, 3, 1e9);
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, 4ull * 6 * 100, 4, 0, 0, R2_POL_OURS };
	struct r2_plan_table tb;
	ck_assert_int_eq(r2_plan_table_build(&t.c, &od, NULL, &tb), 0);
	for (uint32_t h = 0; h < 6; h++)
		for (uint32_t r = 0; r < 3; r++) {
			const struct r2_plan *p = r2_plan_table_lookup(&tb, h, r);
			ck_assert_ptr_nonnull(p);
			NIC(&t, h, r)->state = R2_NIC_DOWN;
			ck_assert_msg(run_symbolic(p, &t.c) == 0, "table %u/%u: %s", h, r, fail_msg);
			NIC(&t, h, r)->state = R2_NIC_UP;
		}
	ck_assert_ptr_null(r2_plan_table_lookup(&tb, 6, 0));
	ck_assert(tb.bytes > 0);
	r2_plan_table_free(&tb);
	tcl_free(&t);
}
END_TEST

/* ---- calibration ---------------------------------------------------------- */

START_TEST(test_fit)
{
	struct r2_sample s[40];
	rng_state = 7;
	for (int i = 0; i < 40; i++) {
		s[i].size = (double)(1u << (i % 20));
		s[i].depth = i % 4;
		s[i].time = 5e-6 + s[i].size / 10e9 + 0.3e-6 * s[i].depth;
	}
	double a, b, g, rms;
	ck_assert_int_eq(r2_cost_fit(s, 40, &a, &b, &g, &rms), 0);
	ck_assert_double_eq_tol(a, 5e-6, 1e-12);
	ck_assert_double_eq_tol(b, 1e-10, 1e-16);
	ck_assert_double_eq_tol(g, 0.3e-6, 1e-12);
	ck_assert(rms < 1e-12);
	for (int i = 0; i < 40; i++)
		s[i].depth = 0;
	ck_assert_int_eq(r2_cost_fit(s, 40, &a, &b, &g, &rms), 0);
	ck_assert_double_eq_tol(g, 0, 1e-15);
	ck_assert_int_eq(r2_cost_fit(s, 1, &a, &b, &g, &rms), -EINVAL);
}
END_TEST

START_TEST(test_names_busbw)
{
	enum r2_plan_op op;
	enum r2_policy pol;
	ck_assert_int_eq(r2_op_parse("reducescatter", &op), 0);
	ck_assert_int_eq(op, R2_PLAN_REDUCESCATTER);
	ck_assert_int_eq(r2_policy_parse("r2ccl", &pol), 0);
	ck_assert_int_eq(pol, R2_POL_R2CCL);
	ck_assert_int_eq(r2_op_parse("nope", &op), -EINVAL);
	ck_assert_double_eq_tol(r2_busbw(R2_PLAN_ALLREDUCE, 4, 1000, 1.0), 1500, 1e-9);
	ck_assert_double_eq_tol(r2_busbw(R2_PLAN_ALLGATHER, 4, 1000, 1.0), 750, 1e-9);
	ck_assert_int_eq(r2_mode_policy(R2_MODE_BALANCE), R2_POL_OURS);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("planner");
	TCase *tc = tcase_create("fixed");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_healthy_all_ops);
	tcase_add_test(tc, test_one_nic_down);
	tcase_add_test(tc, test_ring_repair_bridge);
	tcase_add_test(tc, test_disjoint_rails);
	tcase_add_test(tc, test_unreachable);
	tcase_add_test(tc, test_shard_pipelined);
	tcase_add_test(tc, test_table);
	tcase_add_test(tc, test_fit);
	tcase_add_test(tc, test_names_busbw);
	tcase_add_test(tc, test_nx_table);
	tcase_add_test(tc, test_hd_exact);
	tcase_add_test(tc, test_hd_fold_unreachable);
	tcase_add_test(tc, test_hd_large);
	tcase_add_test(tc, test_bruck_exact);
	tcase_add_test(tc, test_bruck_choice);
	tcase_add_test(tc, test_bound_rounds);
	tcase_add_test(tc, test_rd_choice);
	tcase_add_test(tc, test_logstep_far_margin);
	suite_add_tcase(s, tc);
	TCase *tr = tcase_create("random");
	tcase_set_timeout(tr, 120);
	tcase_add_loop_test(tr, test_random_clusters, getenv("R2_SEED") ? atoi(getenv("R2_SEED")) : 0, getenv("R2_SEED") ? atoi(getenv("R2_SEED")) + 1 : 12);
	suite_add_tcase(s, tr);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
