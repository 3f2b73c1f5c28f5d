/* SPDX-License-Identifier: MIT */
/*
 * Cost-model helpers: the lower bound, busbw, the least-squares calibration
 * of alpha/beta/gamma, names, and the table of precomputed plans.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner_int.h"

/*
 * Lower bound: the larger of a bandwidth term and a latency term. Bandwidth, host level (a relaxation of the rail
 * structure: a host may use all its usable NICs for anything). TX_i / RX_i:
 * sum of host i's usable NIC bandwidths. allreduce: every host sends and
 * receives at least S (each byte of its result depends on the others, each
 * byte of its input on every other result), and every byte needs n-1
 * reduction transfers plus n-1 result transfers: 2(n-1)S in total.
 */
double r2_bound(const struct r2_cluster *c, const struct r2_opdesc *op)
{
	return r2_bound_terms(c, op, NULL);
}

/* The bandwidth term alone (*bw if not NULL); returns the bound. */
double r2_bound_terms(const struct r2_cluster *c, const struct r2_opdesc *op, double *bw)
{
	uint32_t n = c->nhosts, R = c->nrails;
	if (bw)
		*bw = 0;
	if (n < 2 || !op->size)
		return 0;
	double S = (double)op->size, seg = S / n;
	double mintx = INFINITY, minrx = INFINITY, sumtx = 0, sumrx = 0;
	double *tx = malloc(n * sizeof(double)), *rx = malloc(n * sizeof(double));
	if (!tx || !rx) {
		free(tx);
		free(rx);
		return 0;
	}
	for (uint32_t h = 0; h < n; h++) {
		tx[h] = rx[h] = 0;
		for (uint32_t r = 0; r < R; r++) {
			const struct r2_nic *ni = &c->nic[(size_t)h * R + r];
			if (ni->state == R2_NIC_DOWN || ni->bw_tx <= 0 || ni->bw_rx <= 0)
				continue;
			tx[h] += ni->bw_tx;
			rx[h] += ni->bw_rx;
		}
		mintx = fmin(mintx, tx[h]);
		minrx = fmin(minrx, rx[h]);
		sumtx += tx[h];
		sumrx += rx[h];
	}
	double b = 0;
	switch (op->op) {
	case R2_PLAN_ALLREDUCE:
		b = fmax(fmax(S / mintx, S / minrx),
			 fmax(2.0 * (n - 1) * S / sumtx, 2.0 * (n - 1) * S / sumrx));
		break;
	case R2_PLAN_REDUCESCATTER:
		b = fmax(fmax((n - 1) * seg / mintx, seg / minrx),
			 fmax((n - 1) * S / sumtx, (n - 1) * S / sumrx));
		break;
	case R2_PLAN_ALLGATHER:
		b = fmax(fmax(seg / mintx, (n - 1) * seg / minrx),
			 fmax((n - 1) * S / sumtx, (n - 1) * S / sumrx));
		break;
	case R2_PLAN_BROADCAST: {
		double mr = INFINITY;
		for (uint32_t h = 0; h < n; h++)
			if (h != op->root)
				mr = fmin(mr, rx[h]);
		b = fmax(fmax(S / tx[op->root], S / mr), (n - 1) * S / sumtx);
		break;
	}
	case R2_PLAN_REDUCE: {
		double mt = INFINITY;
		for (uint32_t h = 0; h < n; h++)
			if (h != op->root)
				mt = fmin(mt, tx[h]);
		b = fmax(fmax(S / rx[op->root], S / mt), (n - 1) * S / sumrx);
		break;
	}
	case R2_PLAN_SENDRECV:
		b = S / fmin(tx[op->root], rx[op->peer]);
		break;
	default:
		break;
	}
	free(tx);
	free(rx);
	if (bw)
		*bw = b;
	return fmax(b + c->cost.alpha, r2_bound_rounds(c, op) * c->cost.alpha);
}

/*
 * Latency term: rounds of alpha that any schedule in the step model pays.
 * A host that receives m messages in one step pays at least ceil(m / P)
 * alpha on one of its P usable NICs, and after that step it holds at most
 * (1 + m) times the inputs its senders held. Since 1 + m <= (P + 1)^ceil(m/P),
 * gathering n inputs costs at least ceil(log_{P+1} n) alpha, P the most
 * usable NICs of any host (1 for sendrecv).
 */
double r2_bound_rounds(const struct r2_cluster *c, const struct r2_opdesc *op)
{
	uint32_t n = c->nhosts, R = c->nrails, P = 1;
	if (n < 2)
		return 0;
	if (op->op == R2_PLAN_SENDRECV)
		return 1;
	for (uint32_t h = 0; h < n; h++) {
		uint32_t k = 0;
		for (uint32_t r = 0; r < R; r++) {
			const struct r2_nic *ni = &c->nic[(size_t)h * R + r];
			k += ni->state != R2_NIC_DOWN && ni->bw_tx > 0 && ni->bw_rx > 0;
		}
		P = k > P ? k : P;
	}
	uint32_t L = 0;
	for (uint64_t reach = 1; reach < n; reach *= (uint64_t)P + 1)
		L++;
	return L;
}

double r2_busbw(enum r2_plan_op op, uint32_t n, uint64_t size, double t)
{
	if (t <= 0)
		return 0;
	double alg = (double)size / t;
	switch (op) {
	case R2_PLAN_ALLREDUCE:
		return alg * 2.0 * (n - 1) / n;
	case R2_PLAN_ALLGATHER:
	case R2_PLAN_REDUCESCATTER:
		return alg * (double)(n - 1) / n;
	default:
		return alg;
	}
}

/* Solves the k x k system A x = y (k <= 3) by Gaussian elimination with
 * partial pivoting; returns false if singular. */
static bool solve(double A[3][3], double y[3], int k, double x[3])
{
	for (int i = 0; i < k; i++) {
		int p = i;
		for (int r = i + 1; r < k; r++)
			if (fabs(A[r][i]) > fabs(A[p][i]))
				p = r;
		if (fabs(A[p][i]) < 1e-300)
			return false;
		for (int c = 0; c < k; c++) {
			double t = A[i][c];
			A[i][c] = A[p][c];
			A[p][c] = t;
		}
		double t = y[i];
		y[i] = y[p];
		y[p] = t;
		for (int r = i + 1; r < k; r++) {
			double f = A[r][i] / A[i][i];
			for (int c = i; c < k; c++)
				A[r][c] -= f * A[i][c];
			y[r] -= f * y[i];
		}
	}
	for (int i = k - 1; i >= 0; i--) {
		double s = y[i];
		for (int c = i + 1; c < k; c++)
			s -= A[i][c] * x[c];
		x[i] = s / A[i][i];
	}
	return true;
}

int r2_cost_fit(const struct r2_sample *s, size_t n, double *alpha, double *beta, double *gamma,
		double *rms)
{
	if (n < 2)
		return -EINVAL;
	/* scale columns for conditioning: size in MB-ish units */
	double ssz = 0, sd = 0;
	for (size_t i = 0; i < n; i++) {
		ssz = fmax(ssz, fabs(s[i].size));
		sd = fmax(sd, fabs(s[i].depth));
	}
	if (ssz <= 0)
		ssz = 1;
	bool use_g = sd > 0 && n >= 3;
	if (sd <= 0)
		sd = 1;
	int k = use_g ? 3 : 2;
	double x[3] = { 0, 0, 0 };
	int ret = 0;
	for (;;) {
		double A[3][3] = { { 0 } }, y[3] = { 0 };
		for (size_t i = 0; i < n; i++) {
			double f[3] = { 1, s[i].size / ssz, s[i].depth / sd };
			for (int a = 0; a < k; a++) {
				for (int b = 0; b < k; b++)
					A[a][b] += f[a] * f[b];
				y[a] += f[a] * s[i].time;
			}
		}
		if (solve(A, y, k, x))
			break;
		if (k == 3) {
			k = 2;
			ret = -EINVAL;
			x[2] = 0;
			continue;
		}
		return -EINVAL;
	}
	*alpha = x[0];
	*beta = x[1] / ssz;
	*gamma = k == 3 ? x[2] / sd : 0;
	if (rms) {
		double e = 0;
		for (size_t i = 0; i < n; i++) {
			double p = *alpha + *beta * s[i].size + *gamma * s[i].depth;
			e += (p - s[i].time) * (p - s[i].time);
		}
		*rms = sqrt(e / n);
	}
	return ret;
}

static const char *const op_names[] = { "allreduce", "allgather", "reducescatter",
					"broadcast", "reduce", "sendrecv" };
static const char *const pol_names[] = { "ours", "plain", "hotrepair", "balance", "r2ccl" };
static const char *const algo_names[] = { "ring", "recursive", "shard", "chain", "tree", "direct", "hd", "rd", "bruck" };

const char *r2_op_name(enum r2_plan_op op)
{
	return op < R2_PLAN_COUNT ? op_names[op] : "?";
}

const char *r2_policy_name(enum r2_policy p)
{
	return p < R2_POL_COUNT ? pol_names[p] : "?";
}

const char *r2_algo_name(enum r2_algo a)
{
	return a < R2_ALGO_COUNT ? algo_names[a] : "?";
}

int r2_op_parse(const char *s, enum r2_plan_op *op)
{
	for (int i = 0; i < R2_PLAN_COUNT; i++)
		if (!strcmp(s, op_names[i])) {
			*op = (enum r2_plan_op)i;
			return 0;
		}
	return -EINVAL;
}

int r2_policy_parse(const char *s, enum r2_policy *p)
{
	for (int i = 0; i < R2_POL_COUNT; i++)
		if (!strcmp(s, pol_names[i])) {
			*p = (enum r2_policy)i;
			return 0;
		}
	return -EINVAL;
}

enum r2_policy r2_mode_policy(enum r2_mode m)
{
	return m == R2_MODE_HOTREPAIR ? R2_POL_HOTREPAIR : R2_POL_OURS;
}

/* ---- precomputed plans --------------------------------------------------- */

int r2_plan_table_build(const struct r2_cluster *c, const struct r2_opdesc *op,
			const struct r2_plan_params *prm, struct r2_plan_table *t)
{
	memset(t, 0, sizeof(*t));
	size_t N = (size_t)c->nhosts * c->nrails;
	struct r2_nic *nic = malloc(N * sizeof(*nic));
	t->plan = calloc(N, sizeof(*t->plan));
	if (!nic || !t->plan) {
		free(nic);
		free(t->plan);
		t->plan = NULL;
		return -ENOMEM;
	}
	memcpy(nic, c->nic, N * sizeof(*nic));
	struct r2_cluster cc = *c;
	cc.nic = nic;
	t->nhosts = c->nhosts;
	t->nrails = c->nrails;
	t->bytes = sizeof(*t) + N * sizeof(*t->plan);
	for (size_t i = 0; i < N; i++) {
		uint8_t st = nic[i].state;
		nic[i].state = R2_NIC_DOWN;
		if (r2_plan_build(&cc, op, prm, &t->plan[i]) == 0)
			t->bytes += t->plan[i]->bytes;
		nic[i].state = st;
	}
	free(nic);
	return 0;
}

const struct r2_plan *r2_plan_table_lookup(const struct r2_plan_table *t, uint32_t host,
					   uint32_t rail)
{
	if (!t->plan || host >= t->nhosts || rail >= t->nrails)
		return NULL;
	return t->plan[(size_t)host * t->nrails + rail];
}

void r2_plan_table_free(struct r2_plan_table *t)
{
	if (t->plan)
		for (size_t i = 0; i < (size_t)t->nhosts * t->nrails; i++)
			r2_plan_free(t->plan[i]);
	free(t->plan);
	memset(t, 0, sizeof(*t));
}
