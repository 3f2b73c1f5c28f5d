/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-sim: runs the planner and its cost model on a described cluster.
 *
 *   r2ccl-sim CLUSTER [WORKLOAD]       per-policy table for each operation
 *   r2ccl-sim --table [--svg FILE]     ours vs bound vs R2CCL vs plain, n x X
 *   r2ccl-sim --speed [N R]            re-plan time, precomputed table, lookup
 *   r2ccl-sim --scale [--op OP]        16..1024 hosts x 8 rails: today's plans,
 *                                      log-step ones, the bound (and a stronger
 *                                      one for allreduce), re-plan time (wall, CPU)
 *
 * Options: --policy NAME (default: all), --alpha S, --gamma S (override the
 * cluster's), --size BYTES (table mode, default 1G), --check (also evaluate
 * each plan step by step; small clusters only).
 *
 * Cluster file (one directive a line, '#' comments; bandwidths in bytes/s
 * or with a unit: 100Gbit, 12.5GB, 800Mbit):
 *   hosts N | rails R | bw BW | lat S | alpha S | gamma S
 *   nic H R down | nic H R up | nic H R bw BW | nic H R tx BW rx BW
 *   link A B R down | link A B R up | pcie H R HOPS
 *   at T <nic ...|link ...>       the same change at time T (seconds)
 * Workload file (default: "op allreduce 256M"):
 *   op NAME SIZE [elem E] [root H] [peer H] [count C]
 * H may be '*' in nic/pcie lines (every host).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "planner.h"
#include "util.h"

#define MAX_HOSTS 65536

struct change {
	double at;
	int kind;          /* 0 nic state, 1 nic bw, 2 link down, 3 link up */
	uint32_t h, r, b;  /* nic: h r; link: h b r */
	int state;
	double tx, rx;
};

struct sim_cluster {
	uint32_t n, R;
	double bw, lat, alpha, gamma;
	struct r2_nic *nic;
	struct r2_link *down;
	uint32_t ndown;
	uint8_t *pcie;
	struct change *ch;
	uint32_t nch;
	bool have_alpha, have_gamma;
};

struct wop {
	enum r2_plan_op op;
	uint64_t size;
	uint32_t elem, root, peer, count;
};

static int parse_bw(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || v < 0)
		return -1;
	if (!*end || !strcasecmp(end, "B"))
		*out = v;
	else if (!strcasecmp(end, "Gbit") || !strcasecmp(end, "Gb"))
		*out = v * 1e9 / 8;
	else if (!strcasecmp(end, "Mbit") || !strcasecmp(end, "Mb"))
		*out = v * 1e6 / 8;
	else if (!strcasecmp(end, "GB"))
		*out = v * 1e9;
	else if (!strcasecmp(end, "MB"))
		*out = v * 1e6;
	else
		return -1;
	return 0;
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || v < 0)
		return -1;
	double m = 1;
	if (*end == 'K' || *end == 'k')
		m = 1024.0;
	else if (*end == 'M' || *end == 'm')
		m = 1024.0 * 1024;
	else if (*end == 'G' || *end == 'g')
		m = 1024.0 * 1024 * 1024;
	else if (*end)
		return -1;
	*out = (uint64_t)(v * m);
	return 0;
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

static void link_set(struct sim_cluster *c, uint32_t a, uint32_t b, uint16_t r, bool down)
{
	if (a > b) {
		uint32_t t = a;
		a = b;
		b = t;
	}
	for (uint32_t i = 0; i < c->ndown; i++)
		if (c->down[i].a == a && c->down[i].b == b && c->down[i].rail == r) {
			if (!down)
				c->down[i] = c->down[--c->ndown];
			qsort(c->down, c->ndown, sizeof(*c->down), link_cmp);
			return;
		}
	if (!down)
		return;
	c->down = realloc(c->down, (c->ndown + 1) * sizeof(*c->down));
	c->down[c->ndown++] = (struct r2_link){ a, b, r };
	qsort(c->down, c->ndown, sizeof(*c->down), link_cmp);
}

static void apply(struct sim_cluster *c, const struct change *x)
{
	uint32_t h0 = x->h == UINT32_MAX ? 0 : x->h, h1 = x->h == UINT32_MAX ? c->n : x->h + 1;
	for (uint32_t h = h0; h < h1; h++) {
		struct r2_nic *ni = &c->nic[(size_t)h * c->R + x->r];
		switch (x->kind) {
		case 0:
			ni->state = (uint8_t)x->state;
			if (x->state == R2_NIC_UP)
				ni->bw_tx = ni->bw_rx = c->bw;
			break;
		case 1:
			ni->bw_tx = x->tx;
			ni->bw_rx = x->rx;
			ni->state = (x->tx < c->bw || x->rx < c->bw) ? R2_NIC_DEGRADED : R2_NIC_UP;
			break;
		case 2:
		case 3:
			link_set(c, h, x->b, (uint16_t)x->r, x->kind == 2);
			break;
		}
	}
}

static int parse_host(const char *s, uint32_t n, uint32_t *h)
{
	if (!strcmp(s, "*")) {
		*h = UINT32_MAX;
		return 0;
	}
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (*end || v >= n)
		return -1;
	*h = (uint32_t)v;
	return 0;
}

/* Parses a nic/link change from tokens; returns 0 or -1. */
static int parse_change(struct sim_cluster *c, char **t, int nt, struct change *x)
{
	memset(x, 0, sizeof(*x));
	if (nt >= 4 && !strcmp(t[0], "nic")) {
		if (parse_host(t[1], c->n, &x->h) || (x->r = (uint32_t)atoi(t[2])) >= c->R)
			return -1;
		if (!strcmp(t[3], "down")) {
			x->kind = 0;
			x->state = R2_NIC_DOWN;
		} else if (!strcmp(t[3], "up")) {
			x->kind = 0;
			x->state = R2_NIC_UP;
		} else if (!strcmp(t[3], "bw") && nt >= 5) {
			x->kind = 1;
			if (parse_bw(t[4], &x->tx))
				return -1;
			x->rx = x->tx;
		} else if (!strcmp(t[3], "tx") && nt >= 7 && !strcmp(t[5], "rx")) {
			x->kind = 1;
			if (parse_bw(t[4], &x->tx) || parse_bw(t[6], &x->rx))
				return -1;
		} else {
			return -1;
		}
		return 0;
	}
	if (nt >= 5 && !strcmp(t[0], "link")) {
		if (parse_host(t[1], c->n, &x->h) || x->h == UINT32_MAX ||
		    parse_host(t[2], c->n, &x->b) || x->b == UINT32_MAX || x->h == x->b ||
		    (x->r = (uint32_t)atoi(t[3])) >= c->R)
			return -1;
		x->kind = !strcmp(t[4], "down") ? 2 : !strcmp(t[4], "up") ? 3 : -1;
		return x->kind < 0 ? -1 : 0;
	}
	return -1;
}

static int tokenize(char *line, char **t, int max)
{
	char *h = strchr(line, '#');
	if (h)
		*h = 0;
	int n = 0;
	for (char *s = strtok(line, " \t\r\n"); s && n < max; s = strtok(NULL, " \t\r\n"))
		t[n++] = s;
	return n;
}

static void cluster_alloc(struct sim_cluster *c)
{
	c->nic = calloc((size_t)c->n * c->R, sizeof(*c->nic));
	for (size_t i = 0; i < (size_t)c->n * c->R; i++)
		c->nic[i] = (struct r2_nic){ R2_NIC_UP, c->bw, c->bw, c->lat };
}

static int change_cmp(const void *pa, const void *pb)
{
	const struct change *a = pa, *b = pb;
	return a->at < b->at ? -1 : a->at > b->at;
}

static int load_cluster(const char *path, struct sim_cluster *c)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "r2ccl-sim: %s: %s\n", path, strerror(errno));
		return -1;
	}
	memset(c, 0, sizeof(*c));
	c->bw = 12.5e9;
	c->alpha = 5e-6;
	char line[512], *t[16];
	int ln = 0;
	while (fgets(line, sizeof(line), f)) {
		ln++;
		int nt = tokenize(line, t, 16);
		if (!nt)
			continue;
		bool bad = false;
		if (!c->nic && (!strcmp(t[0], "nic") || !strcmp(t[0], "link") || !strcmp(t[0], "at") ||
				!strcmp(t[0], "pcie"))) {
			if (!c->n || !c->R) {
				fprintf(stderr, "%s:%d: 'hosts' and 'rails' first\n", path, ln);
				fclose(f);
				return -1;
			}
			cluster_alloc(c);
		}
		if (!strcmp(t[0], "hosts") && nt == 2) {
			c->n = (uint32_t)atoi(t[1]);
			bad = c->n < 1 || c->n > MAX_HOSTS || c->nic;
		} else if (!strcmp(t[0], "rails") && nt == 2) {
			c->R = (uint32_t)atoi(t[1]);
			bad = c->R < 1 || c->R > R2_PLAN_MAX_RAILS || c->nic;
		} else if (!strcmp(t[0], "bw") && nt == 2) {
			bad = parse_bw(t[1], &c->bw) || c->nic;
		} else if (!strcmp(t[0], "lat") && nt == 2) {
			c->lat = atof(t[1]);
		} else if (!strcmp(t[0], "alpha") && nt == 2) {
			c->alpha = atof(t[1]);
		} else if (!strcmp(t[0], "gamma") && nt == 2) {
			c->gamma = atof(t[1]);
		} else if (!strcmp(t[0], "pcie") && nt == 4) {
			uint32_t h, r = (uint32_t)atoi(t[2]);
			bad = parse_host(t[1], c->n, &h) || r >= c->R;
			if (!bad) {
				if (!c->pcie)
					c->pcie = calloc((size_t)c->n * c->R, 1);
				for (uint32_t x = h == UINT32_MAX ? 0 : h; x < (h == UINT32_MAX ? c->n : h + 1); x++)
					c->pcie[(size_t)x * c->R + r] = (uint8_t)atoi(t[3]);
			}
		} else if (!strcmp(t[0], "at") && nt >= 2) {
			struct change x;
			bad = parse_change(c, t + 2, nt - 2, &x);
			if (!bad) {
				x.at = atof(t[1]);
				c->ch = realloc(c->ch, (c->nch + 1) * sizeof(*c->ch));
				c->ch[c->nch++] = x;
			}
		} else {
			struct change x;
			bad = parse_change(c, t, nt, &x);
			if (!bad)
				apply(c, &x);
		}
		if (bad) {
			fprintf(stderr, "%s:%d: cannot parse this line\n", path, ln);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	if (c->nch > 1)
		qsort(c->ch, c->nch, sizeof(*c->ch), change_cmp);
	if (!c->n || !c->R) {
		fprintf(stderr, "%s: needs 'hosts' and 'rails'\n", path);
		return -1;
	}
	if (!c->nic)
		cluster_alloc(c);
	return 0;
}

static int load_workload(const char *path, struct wop **ops, uint32_t *nops, uint32_t n)
{
	*ops = NULL;
	*nops = 0;
	if (!path) {
		*ops = calloc(1, sizeof(**ops));
		(*ops)[0] = (struct wop){ R2_PLAN_ALLREDUCE, 256ull << 20, 4, 0, n > 1 ? 1 : 0, 1 };
		*nops = 1;
		return 0;
	}
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "r2ccl-sim: %s: %s\n", path, strerror(errno));
		return -1;
	}
	char line[512], *t[16];
	int ln = 0;
	while (fgets(line, sizeof(line), f)) {
		ln++;
		int nt = tokenize(line, t, 16);
		if (!nt)
			continue;
		struct wop w = { R2_PLAN_ALLREDUCE, 0, 4, 0, n > 1 ? 1 : 0, 1 };
		bool bad = strcmp(t[0], "op") || nt < 3 || r2_op_parse(t[1], &w.op) ||
			   parse_size(t[2], &w.size);
		for (int i = 3; !bad && i + 1 < nt; i += 2) {
			if (!strcmp(t[i], "elem"))
				w.elem = (uint32_t)atoi(t[i + 1]);
			else if (!strcmp(t[i], "root"))
				w.root = (uint32_t)atoi(t[i + 1]);
			else if (!strcmp(t[i], "peer"))
				w.peer = (uint32_t)atoi(t[i + 1]);
			else if (!strcmp(t[i], "count"))
				w.count = (uint32_t)atoi(t[i + 1]);
			else
				bad = true;
		}
		if (nt % 2 == 0)
			bad = true;
		if (bad || !w.elem || !w.count) {
			fprintf(stderr, "%s:%d: cannot parse this line\n", path, ln);
			fclose(f);
			return -1;
		}
		*ops = realloc(*ops, (*nops + 1) * sizeof(**ops));
		(*ops)[(*nops)++] = w;
	}
	fclose(f);
	return 0;
}

static void to_cluster(struct sim_cluster *s, struct r2_cluster *c)
{
	c->nhosts = s->n;
	c->nrails = s->R;
	c->nic = s->nic;
	c->pcie_dist = s->pcie;
	c->down = s->down;
	c->ndown = s->ndown;
	c->cost.alpha = s->alpha;
	c->cost.gamma = s->gamma;
}

/* Rounds size to what the op accepts. */
static uint64_t fit_size(enum r2_plan_op op, uint64_t size, uint32_t elem, uint32_t n)
{
	uint64_t q = (op == R2_PLAN_ALLGATHER || op == R2_PLAN_REDUCESCATTER) ? (uint64_t)elem * n : elem;
	uint64_t s = size / q * q;
	return s ? s : q;
}

static const char *fmt_size(uint64_t s, char *buf, size_t n)
{
	if (s >= (1ull << 30) && s % (1ull << 30) == 0)
		snprintf(buf, n, "%lluG", (unsigned long long)(s >> 30));
	else if (s >= (1ull << 20) && s % (1ull << 20) == 0)
		snprintf(buf, n, "%lluM", (unsigned long long)(s >> 20));
	else if (s >= 1024 && s % 1024 == 0)
		snprintf(buf, n, "%lluK", (unsigned long long)(s >> 10));
	else
		snprintf(buf, n, "%llu", (unsigned long long)s);
	return buf;
}

static double plan_time(const struct r2_cluster *c, const struct r2_opdesc *od, struct r2_plan **pp,
			int *err)
{
	struct r2_plan *p = NULL;
	*err = r2_plan_build(c, od, NULL, &p);
	if (*err)
		return NAN;
	double t = p->time;
	if (pp)
		*pp = p;
	else
		r2_plan_free(p);
	return t;
}

static int run_workload(struct sim_cluster *s, const struct wop *ops, uint32_t nops, int only_pol,
			bool check)
{
	struct r2_cluster c;
	/* healthy reference: every NIC up at the nominal bandwidth */
	struct sim_cluster h = *s;
	h.nic = malloc((size_t)s->n * s->R * sizeof(*h.nic));
	for (size_t i = 0; i < (size_t)s->n * s->R; i++)
		h.nic[i] = (struct r2_nic){ R2_NIC_UP, s->bw, s->bw, s->lat };
	h.down = NULL;
	h.ndown = 0;
	struct r2_cluster hc;
	to_cluster(&h, &hc);
	printf("# cluster: %u hosts x %u rails, %.3g GB/s per NIC, alpha %.3g s, gamma %.3g s\n", s->n,
	       s->R, s->bw / 1e9, s->alpha, s->gamma);
	printf("%-9s %-13s %6s %-9s %-9s %12s %10s %9s %9s %7s\n", "t_start", "op", "size", "policy",
	       "algo", "time_us", "busbw_GBs", "x_healthy", "x_bound", "steps");
	double totals[R2_POL_COUNT] = { 0 };
	/* each policy keeps its own clock; events apply when its clock passes */
	for (int pol = 0; pol < R2_POL_COUNT; pol++) {
		if (only_pol >= 0 && pol != only_pol)
			continue;
		struct sim_cluster w = *s;
		w.nic = malloc((size_t)s->n * s->R * sizeof(*w.nic));
		memcpy(w.nic, s->nic, (size_t)s->n * s->R * sizeof(*w.nic));
		w.down = NULL;
		w.ndown = 0;
		for (uint32_t i = 0; i < s->ndown; i++)
			link_set(&w, s->down[i].a, s->down[i].b, s->down[i].rail, true);
		double clock = 0;
		uint32_t next = 0;
		for (uint32_t i = 0; i < nops; i++) {
			for (uint32_t rep = 0; rep < ops[i].count; rep++) {
				for (uint32_t k = 0; k < s->nch; k++)
					if (s->ch[k].at <= clock && s->ch[k].at >= 0 && k >= next) {
						apply(&w, &s->ch[k]);
						next = k + 1;
					}
				to_cluster(&w, &c);
				struct r2_opdesc od = { ops[i].op, fit_size(ops[i].op, ops[i].size, ops[i].elem, s->n),
							ops[i].elem, ops[i].root % s->n, ops[i].peer % s->n,
							(enum r2_policy)pol };
				if (od.op == R2_PLAN_SENDRECV && od.peer == od.root)
					od.peer = (od.root + 1) % s->n;
				int err;
				struct r2_plan *p = NULL;
				double t = plan_time(&c, &od, &p, &err);
				struct r2_opdesc hod = od;
				int herr;
				double th = plan_time(&hc, &hod, NULL, &herr);
				char sz[32];
				fmt_size(od.size, sz, sizeof(sz));
				if (!p) {
					printf("%-9.4f %-13s %6s %-9s %-9s %12s %10s %9s %9s %7s\n", clock,
					       r2_op_name(od.op), sz, r2_policy_name(od.policy), "-",
					       err == -EHOSTDOWN ? "hang" : "unreach", "0", "inf", "inf", "-");
					totals[pol] = INFINITY;
					continue;
				}
				if (rep == 0 || rep + 1 == ops[i].count)
					printf("%-9.4f %-13s %6s %-9s %-9s %12.1f %10.2f %9.3f %9.3f %7u\n", clock,
					       r2_op_name(od.op), sz, r2_policy_name(od.policy),
					       r2_algo_name(p->algo), t * 1e6,
					       r2_busbw(od.op, s->n, od.size, t) / 1e9, t / th, p->gap, p->nsteps);
				if (check) {
					double ev = r2_plan_eval(p, &c);
					printf("#   step-by-step evaluation %.1f us (predicted %.1f)\n", ev * 1e6, t * 1e6);
				}
				clock += t;
				totals[pol] += t;
				r2_plan_free(p);
			}
		}
		free(w.nic);
		free(w.down);
	}
	printf("# total workload time per policy:");
	for (int pol = 0; pol < R2_POL_COUNT; pol++)
		if (only_pol < 0 || pol == only_pol)
			printf(" %s %.4g s", r2_policy_name((enum r2_policy)pol), totals[pol]);
	printf("\n");
	free(h.nic);
	return 0;
}

/* ---- n x X table ---------------------------------------------------------- */

struct row {
	uint32_t n;
	double X, ours, bound, r2f, plain, balance, recursive;
};

/* One degraded host (host 0) that lost a fraction X of its two NICs. */
static void degraded_cluster(struct sim_cluster *s, uint32_t n, double X, double alpha, double gamma)
{
	memset(s, 0, sizeof(*s));
	s->n = n;
	s->R = 2;
	s->bw = 12.5e9;
	s->alpha = alpha;
	s->gamma = gamma;
	cluster_alloc(s);
	double left = 2 * (1 - X);
	if (X <= 0) {
		return;
	} else if (left >= 1) {
		s->nic[1].bw_tx = s->nic[1].bw_rx = s->bw * (left - 1);
		s->nic[1].state = R2_NIC_DEGRADED;
	} else {
		s->nic[1].state = R2_NIC_DOWN;
		s->nic[0].bw_tx = s->nic[0].bw_rx = s->bw * left;
		s->nic[0].state = R2_NIC_DEGRADED;
	}
}

static double table_time(uint32_t n, double X, enum r2_policy pol, uint64_t size, double alpha,
			 double gamma, double *bound)
{
	struct sim_cluster s;
	struct r2_cluster c;
	degraded_cluster(&s, n, X, alpha, gamma);
	to_cluster(&s, &c);
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, size, 4, 0, 1, pol };
	struct r2_plan *p = NULL;
	double t = NAN;
	if (r2_plan_build(&c, &od, NULL, &p) == 0) {
		t = p->time;
		if (bound)
			*bound = p->bound;
		r2_plan_free(p);
	}
	free(s.nic);
	return t;
}

static void svg_plot(const char *path, const struct row *rows, int nrows)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "r2ccl-sim: %s: %s\n", path, strerror(errno));
		return;
	}
	/* one panel per X: time ratio vs log2(n) for ours, bound, r2ccl, plain */
	double Xs[3] = { 0.25, 0.5, 0.75 };
	int W = 960, H = 360, pw = 300, ph = 260, ox = 50, oy = 40;
	fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
		   "font-family='sans-serif' font-size='11'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
		W, H);
	const char *col[4] = { "#d62728", "#000000", "#1f77b4", "#7f7f7f" };
	const char *name[4] = { "ours", "lower bound", "R2CCL failure-optimized", "plain ring" };
	for (int px = 0; px < 3; px++) {
		int x0 = ox + px * (pw + 15), y0 = oy;
		double ymax = 1.0 / (1 - Xs[px]) * 1.1;
		fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#444'/>\n", x0, y0,
			pw, ph);
		fprintf(f, "<text x='%d' y='%d'>X = %.2f (time / healthy vs hosts)</text>\n", x0 + 5, y0 - 8,
			Xs[px]);
		for (double yv = 1; yv <= ymax; yv += 0.5) {
			int y = y0 + ph - (int)((yv - 0.8) / (ymax - 0.8) * ph);
			fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#ddd'/>"
				   "<text x='%d' y='%d'>%.1f</text>\n", x0, y, x0 + pw, y, x0 - 25, y + 4, yv);
		}
		for (int s = 0; s < 4; s++) {
			fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", col[s]);
			for (int i = 0; i < nrows; i++) {
				if (fabs(rows[i].X - Xs[px]) > 1e-9)
					continue;
				double v = s == 0 ? rows[i].ours : s == 1 ? rows[i].bound : s == 2 ? rows[i].r2f : rows[i].plain;
				double lx = log2(rows[i].n) / 10.0;
				int x = x0 + (int)(lx * pw);
				int y = y0 + ph - (int)((v - 0.8) / (ymax - 0.8) * ph);
				fprintf(f, "%d,%d ", x, y);
			}
			fprintf(f, "'/>\n");
		}
		for (int i = 0; i < nrows; i++)
			if (fabs(rows[i].X - Xs[px]) < 1e-9)
				fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>%u</text>\n",
					x0 + (int)(log2(rows[i].n) / 10.0 * pw), y0 + ph + 14, rows[i].n);
	}
	for (int s = 0; s < 4; s++)
		fprintf(f, "<rect x='%d' y='%d' width='12' height='3' fill='%s'/><text x='%d' y='%d'>%s</text>\n",
			ox + s * 200, H - 22, col[s], ox + s * 200 + 16, H - 17, name[s]);
	fprintf(f, "</svg>\n");
	fclose(f);
}

static int run_table(uint64_t size, double alpha, double gamma, const char *svg)
{
	uint32_t ns[] = { 2, 3, 4, 8, 16, 64, 1024 };
	double Xs[] = { 0.25, 0.5, 0.75 };
	struct row rows[32];
	int nr = 0;
	char sz[32];
	printf("# AllReduce %s, n hosts x 2 rails at 12.5 GB/s per NIC, host 0 lost a fraction X of\n"
	       "# its bandwidth; alpha %.3g s, gamma %.3g s. Times relative to the healthy cluster\n"
	       "# (ours on it). bound = max(n/(n-X), n/(2(n-1)(1-X))); r2ccl = 1+nX/(2(n-1)(1-X));\n"
	       "# plain = 1/(1-X). balance/recursive: our executable Balance and recursive dual-ring plans.\n",
	       fmt_size(size, sz, sizeof(sz)), alpha, gamma);
	printf("%5s %5s %8s %8s %8s %8s %9s %9s %9s %6s\n", "n", "X", "ours", "bound", "r2ccl", "plain",
	       "balance", "recursive", "ours/bnd", "algo");
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++)
		for (size_t b = 0; b < R2_ARRAY_SIZE(Xs); b++) {
			uint32_t n = ns[a];
			double X = Xs[b], bound = 0;
			double healthy = table_time(n, 0, R2_POL_OURS, size, alpha, gamma, NULL);
			double t = table_time(n, X, R2_POL_OURS, size, alpha, gamma, &bound);
			double tb = table_time(n, X, R2_POL_BALANCE, size, alpha, gamma, NULL);
			double tr = table_time(n, X, R2_POL_R2CCL, size, alpha, gamma, NULL);
			struct sim_cluster s;
			degraded_cluster(&s, n, X, alpha, gamma);
			struct r2_cluster c;
			to_cluster(&s, &c);
			struct r2_opdesc od = { R2_PLAN_ALLREDUCE, size, 4, 0, 1, R2_POL_OURS };
			struct r2_plan *p = NULL;
			r2_plan_build(&c, &od, NULL, &p);
			free(s.nic);
			struct row r = { n, X, t / healthy, fmax(n / (n - X), n / (2.0 * (n - 1) * (1 - X))),
					 1 + n * X / (2.0 * (n - 1) * (1 - X)), 1 / (1 - X), tb / healthy,
					 tr / healthy };
			printf("%5u %5.2f %8.4f %8.4f %8.4f %8.4f %9.4f %9.4f %9.4f %6s\n", n, X, r.ours, r.bound,
			       r.r2f, r.plain, r.balance, r.recursive, t / bound,
			       p ? r2_algo_name(p->algo) : "-");
			r2_plan_free(p);
			rows[nr++] = r;
		}
	if (svg)
		svg_plot(svg, rows, nr);
	return 0;
}

/* ---- speed ----------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int run_speed(uint32_t n, uint32_t R, uint64_t size, double alpha)
{
	struct sim_cluster s;
	memset(&s, 0, sizeof(s));
	s.n = n;
	s.R = R;
	s.bw = 25e9;
	s.alpha = alpha;
	cluster_alloc(&s);
	struct r2_cluster c;
	to_cluster(&s, &c);
	struct r2_opdesc od = { R2_PLAN_ALLREDUCE, size, 4, 0, 1, R2_POL_OURS };
	struct r2_plan *p = NULL;
	char sz[32];
	uint64_t t0 = r2_now_ns();
	int e = r2_plan_build(&c, &od, NULL, &p);
	uint64_t t1 = r2_now_ns();
	if (e) {
		fprintf(stderr, "r2ccl-sim: plan failed: %d\n", e);
		return 1;
	}
	printf("# AllReduce %s on %u hosts x %u rails (25 GB/s per NIC, alpha %.3g s)\n",
	       fmt_size(size, sz, sizeof(sz)), n, R, alpha);
	printf("healthy plan:          %8.3f ms  (%s, K=%u, predicted %.3f ms, gap %.3f, %zu bytes)\n",
	       (t1 - t0) / 1e6, r2_algo_name(p->algo), p->nchunks, p->time * 1e3, p->gap, p->bytes);
	r2_plan_free(p);
	/* re-plan after one NIC failure: median of 21 runs, each a different NIC */
	double ts[21];
	for (int i = 0; i < 21; i++) {
		uint32_t h = (uint32_t)((i * 2654435761u) % n), r = (uint32_t)(i % R);
		s.nic[(size_t)h * R + r].state = R2_NIC_DOWN;
		uint64_t a = r2_now_ns();
		e = r2_plan_build(&c, &od, NULL, &p);
		ts[i] = (r2_now_ns() - a) / 1e6;
		if (i == 0 && !e)
			printf("one NIC down (h%u r%u): %s, K=%u, predicted %.3f ms, gap %.3f, %zu bytes\n", h, r,
			       r2_algo_name(p->algo), p->nchunks, p->time * 1e3, p->gap, p->bytes);
		if (!e)
			r2_plan_free(p);
		s.nic[(size_t)h * R + r].state = R2_NIC_UP;
	}
	qsort(ts, 21, sizeof(double), cmp_d);
	printf("re-plan after one NIC failure: median %.3f ms, min %.3f, max %.3f (21 runs)\n", ts[10],
	       ts[0], ts[20]);
	/* precomputed table */
	struct r2_plan_table tb;
	t0 = r2_now_ns();
	e = r2_plan_table_build(&c, &od, NULL, &tb);
	t1 = r2_now_ns();
	if (e) {
		fprintf(stderr, "r2ccl-sim: table failed: %d\n", e);
		return 1;
	}
	size_t have = 0;
	for (size_t i = 0; i < (size_t)n * R; i++)
		have += tb.plan[i] != NULL;
	printf("precomputed table: %zu plans (every single-NIC failure), built in %.2f s, "
	       "%.2f MiB (%.0f bytes per plan)\n", have, (t1 - t0) / 1e9, tb.bytes / 1048576.0,
	       (double)tb.bytes / (have ? have : 1));
	uint32_t L = 1000000;
	volatile uint64_t sink = 0;
	t0 = r2_now_ns();
	for (uint32_t i = 0; i < L; i++) {
		const struct r2_plan *q = r2_plan_table_lookup(&tb, (i * 2654435761u) % n, i % R);
		sink += q ? q->nsteps : 0;
	}
	t1 = r2_now_ns();
	printf("lookup: %.1f ns per lookup (%u lookups)\n", (double)(t1 - t0) / L, L);
	/* first expansion from a looked-up plan (what the engine does next) */
	const struct r2_plan *q = r2_plan_table_lookup(&tb, 1, 0);
	size_t mx = r2_plan_max_xfers(q);
	struct r2_xfer *x = malloc(mx * sizeof(*x));
	t0 = r2_now_ns();
	int cnt = r2_plan_expand(q, 2, 0, x, mx);
	t1 = r2_now_ns();
	printf("expand host 2 step 0 of that plan: %d transfers in %.3f ms\n", cnt, (t1 - t0) / 1e6);
	free(x);
	r2_plan_table_free(&tb);
	free(s.nic);
	(void)sink;
	return 0;
}

/* ---- scale: log-step schedules against today's plans and the bound ------- */

/* CPU time of this thread (ms): re-planning cost that other load on the
 * machine does not inflate, unlike the wall clock. */
static double thread_cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/*
 * A stronger lower bound for AllReduce than r2_bound(), for the table only
 * (docs/planner.md, "Recursive doubling at scale", gives the arguments):
 * hosts with P NICs of bandwidth b (a healthy host of the table's cluster).
 * One step: every host receives n-1 whole inputs from n-1 peers. Two or more
 * steps: each costs alpha plus its busiest NIC's bytes, whose sum is >= W.
 * Under (rounds+1) alpha: the last step (a alpha-rounds) brings every byte
 * from mu_a = ceil(n / (P+1)^(rounds-a)) - 1 messages.
 */
static double strong_bound(uint32_t n, uint32_t P, double b, double alpha, double S, double W,
			   uint32_t rounds)
{
	double single = fmax(ceil((n - 1.0) / P) * alpha, (n - 1.0) * (alpha + S / b) / P);
	double multi = fmax(rounds * alpha, 2 * alpha + W);
	double last = INFINITY;
	for (uint32_t a = 1; a <= rounds; a++) {
		double mu = ceil(n / pow(P + 1.0, (double)(rounds - a))) - 1;
		double t = fmax(a * alpha, fmax(alpha + mu * S / (P * b), mu * (alpha + S / b) / P));
		last = fmin(last, (rounds - a) * alpha + t);
	}
	return fmax(fmin(single, multi), fmin((rounds + 1) * alpha, last));
}

static int run_scale(double alpha, enum r2_plan_op op)
{
	static const uint32_t ns[] = { 16, 64, 256, 1024 };
	static const uint64_t sizes[] = { 64ull << 10, 1ull << 20, 64ull << 20, 1ull << 30 };
	const uint32_t R = 8;
	double worst = 0;
	printf("# %s, n hosts x %u rails, 25 GB/s per NIC, alpha %.3g s; down: NIC (host 0, rail 0)\n"
	       "# today: the plan without log-step schedules; new: with them; bound = max(alpha + W,\n"
	       "# rounds * alpha), W the bandwidth bound, rounds = ceil(log_{P+1} n), P the most NICs\n"
	       "# of a host; ref = ceil(log2 n) * alpha + W (the 1-port alpha term, not a bound here);\n"
	       "# lb+ (allreduce): a stronger lower bound, docs/planner.md \"Recursive doubling at scale\"\n",
	       r2_op_name(op), R, alpha);
	printf("%5s %5s %7s %10s %10s %-6s %10s %-6s %10s %7s %7s %7s %8s %7s\n", "n", "size",
	       "health", "bound_us", "W_us", "today", "today_us", "new", "new_us", "tdy/bnd", "new/bnd",
	       "new/ref", "lb+_us", "new/lb+");
	for (size_t a = 0; a < R2_ARRAY_SIZE(ns); a++)
		for (size_t z = 0; z < R2_ARRAY_SIZE(sizes); z++)
			for (int down = 0; down < 2; down++) {
				struct sim_cluster s;
				memset(&s, 0, sizeof(s));
				s.n = ns[a];
				s.R = R;
				s.bw = 25e9;
				s.alpha = alpha;
				cluster_alloc(&s);
				if (down)
					s.nic[0].state = R2_NIC_DOWN;
				struct r2_cluster c;
				to_cluster(&s, &c);
				uint64_t size = fit_size(op, sizes[z], 4, s.n);
				struct r2_opdesc od = { op, size, 4, 0, 1, R2_POL_OURS };
				struct r2_plan_params prm;
				r2_plan_params_default(&prm);
				struct r2_plan *pt = NULL, *pn = NULL;
				prm.no_logstep = true;
				int e1 = r2_plan_build(&c, &od, &prm, &pt);
				prm.no_logstep = false;
				int e2 = r2_plan_build(&c, &od, &prm, &pn);
				if (e1 || e2) {
					fprintf(stderr, "r2ccl-sim: plan failed: %d %d\n", e1, e2);
					free(s.nic);
					return 1;
				}
				double W, bound = r2_bound_terms(&c, &od, &W);
				double ref = ceil(log2((double)s.n)) * alpha + W;
				double lbp = op == R2_PLAN_ALLREDUCE ?
					     fmax(bound, strong_bound(s.n, R, s.bw, alpha, (double)size, W,
								      (uint32_t)r2_bound_rounds(&c, &od))) : 0;
				char sz[32];
				printf("%5u %5s %7s %10.2f %10.2f %-6s %10.2f %-6s %10.2f %7.3f %7.3f %7.3f %8.2f %7.3f\n",
				       s.n, fmt_size(size, sz, sizeof(sz)), down ? "1 down" : "healthy",
				       bound * 1e6, W * 1e6, r2_algo_name(pt->algo), pt->time * 1e6,
				       r2_algo_name(pn->algo), pn->time * 1e6, pt->time / bound,
				       pn->time / bound, pn->time / ref, lbp * 1e6, lbp > 0 ? pn->time / lbp : 0);
				worst = fmax(worst, pn->time / bound);
				r2_plan_free(pt);
				r2_plan_free(pn);
				free(s.nic);
			}
	printf("# worst new/bound: %.3f\n", worst);
	/* re-plan at 1024 x 8 after one NIC failure, per size */
	struct sim_cluster s;
	memset(&s, 0, sizeof(s));
	s.n = 1024;
	s.R = R;
	s.bw = 25e9;
	s.alpha = alpha;
	cluster_alloc(&s);
	struct r2_cluster c;
	to_cluster(&s, &c);
	for (size_t z = 0; z < R2_ARRAY_SIZE(sizes); z++) {
		double ts[11], tc[11];
		struct r2_opdesc od = { op, fit_size(op, sizes[z], 4, s.n), 4, 0, 1, R2_POL_OURS };
		for (int i = 0; i < 11; i++) {
			uint32_t h = (uint32_t)((i * 2654435761u) % s.n), r = (uint32_t)(i % R);
			struct r2_plan *p = NULL;
			s.nic[(size_t)h * R + r].state = R2_NIC_DOWN;
			double c0 = thread_cpu_ms();
			uint64_t t0 = r2_now_ns();
			int e = r2_plan_build(&c, &od, NULL, &p);
			ts[i] = (r2_now_ns() - t0) / 1e6;
			tc[i] = thread_cpu_ms() - c0;
			if (!e)
				r2_plan_free(p);
			s.nic[(size_t)h * R + r].state = R2_NIC_UP;
		}
		qsort(ts, 11, sizeof(double), cmp_d);
		qsort(tc, 11, sizeof(double), cmp_d);
		char sz[32];
		printf("re-plan 1024 x 8, one NIC down, %s: median %.3f ms, max %.3f (11 runs);"
		       " CPU time median %.3f ms, max %.3f\n",
		       fmt_size(od.size, sz, sizeof(sz)), ts[5], ts[10], tc[5], tc[10]);
	}
	free(s.nic);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: r2ccl-sim [--policy P] [--alpha S] [--gamma S] [--check] CLUSTER [WORKLOAD]\n"
		"       r2ccl-sim --table [--size BYTES] [--alpha S] [--gamma S] [--svg FILE]\n"
		"       r2ccl-sim --speed [--size BYTES] [--alpha S] [N R]\n"
		"       r2ccl-sim --scale [--alpha S] [--op OP]\n");
}

int main(int argc, char **argv)
{
	int mode = 0, pol = -1;
	enum r2_plan_op sop = R2_PLAN_ALLREDUCE;
	bool check = false;
	double alpha = NAN, gamma = NAN;
	uint64_t size = 0;
	const char *svg = NULL, *pos[3] = { NULL, NULL, NULL };
	int npos = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--table"))
			mode = 1;
		else if (!strcmp(a, "--speed"))
			mode = 2;
		else if (!strcmp(a, "--scale"))
			mode = 3;
		else if (!strcmp(a, "--op") && i + 1 < argc) {
			if (r2_op_parse(argv[++i], &sop)) {
				usage();
				return 2;
			}
		}
		else if (!strcmp(a, "--check"))
			check = true;
		else if (!strcmp(a, "--policy") && i + 1 < argc) {
			enum r2_policy p;
			if (!strcmp(argv[i + 1], "all")) {
				pol = -1;
			} else if (r2_policy_parse(argv[i + 1], &p)) {
				usage();
				return 2;
			} else {
				pol = p;
			}
			i++;
		} else if (!strcmp(a, "--alpha") && i + 1 < argc)
			alpha = atof(argv[++i]);
		else if (!strcmp(a, "--gamma") && i + 1 < argc)
			gamma = atof(argv[++i]);
		else if (!strcmp(a, "--size") && i + 1 < argc) {
			if (parse_size(argv[++i], &size)) {
				usage();
				return 2;
			}
		} else if (!strcmp(a, "--svg") && i + 1 < argc)
			svg = argv[++i];
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage();
			return 0;
		} else if (a[0] == '-') {
			usage();
			return 2;
		} else if (npos < 3)
			pos[npos++] = a;
	}
	if (mode == 1)
		return run_table(size ? size : 1ull << 30, isnan(alpha) ? 0 : alpha, isnan(gamma) ? 0 : gamma,
				 svg);
	if (mode == 3)
		return run_scale(isnan(alpha) ? 5e-6 : alpha, sop);
	if (mode == 2) {
		uint32_t n = pos[0] ? (uint32_t)atoi(pos[0]) : 1024, R = pos[1] ? (uint32_t)atoi(pos[1]) : 8;
		if (n < 2 || R < 1 || R > R2_PLAN_MAX_RAILS) {
			usage();
			return 2;
		}
		return run_speed(n, R, size ? size : 1ull << 30, isnan(alpha) ? 5e-6 : alpha);
	}
	if (!pos[0]) {
		usage();
		return 2;
	}
	struct sim_cluster s;
	if (load_cluster(pos[0], &s))
		return 1;
	if (!isnan(alpha))
		s.alpha = alpha;
	if (!isnan(gamma))
		s.gamma = gamma;
	struct wop *ops;
	uint32_t nops;
	if (load_workload(pos[1], &ops, &nops, s.n))
		return 1;
	int rc = run_workload(&s, ops, nops, pol, check);
	free(ops);
	free(s.nic);
	free(s.down);
	free(s.pcie);
	free(s.ch);
	return rc;
}
