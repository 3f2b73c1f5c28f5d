/* SPDX-License-Identifier: MIT */
/*
 * Rail input: the GPU staging glue, the lazy input and the plan (built
 * from the agreed view, cut into chunks) the rail phase runs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/health.h"
#include "log.h"
#include "net/rails.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* ---- GPU staging (gpu/gpu.c stages the buffers piecewise) ---- */

/* Waits until host bytes [p, p+n) have come from the GPU (no-op when not
 * staged piecewise). */
int rl_stage_wait(struct railop *o, const void *p, uint64_t n)
{
	struct r2_exec *x = o->stage.x;
	uint64_t t;
	int r;

	if (!x || !x->stage_wait || !p || !n)
		return 0;
	t = r2_now_us();
	r = x->stage_wait(x, p, n);
	o->prof.stage_us += r2_now_us() - t;
	return r;
}

/* Every write into W this plan makes, for rl_stage_final (only when the
 * output goes back to the GPU piecewise). */
int rl_stage_plan(struct railop *o)
{
	if (!o->stage.x || !o->stage.x->stage_out)
		return 0;
	for (uint32_t k = 0; k < o->plan->nsteps; k++) {
		int nx = r2_plan_expand(o->plan, (uint32_t)o->c->my_host, k, o->xfn, o->maxx);
		if (nx < 0)
			return nx;
		for (int i = 0; i < nx; i++) {
			const struct r2_xfer *x = &o->xfn[i];
			if (x->dir != R2_XFER_RECV || !x->len)
				continue;
			if (R2_GROW(o->stage.wr, o->stage.capwr, o->stage.nwr, 16) < 0)
				return -ENOMEM;
			o->stage.wr[o->stage.nwr++] = (struct wr){ k, x->peer, x->off, x->len };
		}
	}
	return 0;
}

/* A chunk from src applied at step into [off, off+len): if no later write
 * of the plan (and no other peer's in this step) touches it, it is final
 * and goes back to the GPU now, while the rail phase goes on. */
void rl_stage_final(struct railop *o, uint32_t src, uint32_t step, uint64_t off, uint64_t len)
{
	struct r2_exec *x = o->stage.x;

	if (!x || !x->stage_out || o->redop == R2CCL_AVG)
		return; /* AVG divides W after the rail phase */
	for (size_t i = 0; i < o->stage.nwr; i++) {
		const struct wr *w = &o->stage.wr[i];
		if ((w->step > step || (w->step == step && w->peer != src)) && w->off < off + len &&
		    off < w->off + w->len)
			return;
	}
	x->stage_out(x, o->W + off, len);
}

/* GPU input: the slices step 0 sends (o->xfn) come to the host first. */
void rl_stage_first_sends(struct railop *o)
{
	struct r2_exec *x = o->stage.x;
	const char *p[R2_STAGE_FIRST_MAX];
	uint64_t n[R2_STAGE_FIRST_MAX];
	int k = 0;

	if (!x->stage_first)
		return;
	for (int i = 0; i < o->nxn && k < R2_STAGE_FIRST_MAX; i++) {
		if (o->xfn[i].dir != R2_XFER_SEND || !o->xfn[i].len)
			continue;
		p[k] = (o->in.S ? o->in.S : (const char *)o->W) + o->xfn[i].off;
		n[k++] = o->xfn[i].len;
	}
	x->stage_first(x, p, n, k);
}

/* ---- lazy input ---- */

/* How much of [a, b) W holds: 0 none, 1 part, 2 all (always 2 without S). */
int rl_init_cov(const struct rail_lazy *in, uint64_t a, uint64_t b)
{
	uint64_t got = 0;

	if (!in->S)
		return 2;
	for (size_t i = 0; i < in->ninit && in->init[i].a < b; i++)
		if (in->init[i].b > a)
			got += R2_MIN(in->init[i].b, b) - R2_MAX(in->init[i].a, a);
	return !got ? 0 : got < b - a ? 1 : 2;
}

/* Records that W holds [a, b) (merged into the sorted list). */
int rl_init_mark(struct rail_lazy *in, uint64_t a, uint64_t b)
{
	size_t i = 0, j;

	if (!in->S || a >= b)
		return 0;
	while (i < in->ninit && in->init[i].b < a)
		i++;
	j = i;
	while (j < in->ninit && in->init[j].a <= b) {
		a = R2_MIN(a, in->init[j].a);
		b = R2_MAX(b, in->init[j].b);
		j++;
	}
	if (i == j) { /* no overlap or contact: insert at i */
		if (R2_GROW(in->init, in->capinit, in->ninit, 16) < 0)
			return -ENOMEM;
		memmove(&in->init[i + 1], &in->init[i], (in->ninit - i) * sizeof(*in->init));
		in->ninit++;
	} else if (j > i + 1) { /* [i, j) merge into i */
		memmove(&in->init[i + 1], &in->init[j], (in->ninit - j) * sizeof(*in->init));
		in->ninit -= j - i - 1;
	}
	in->init[i].a = a;
	in->init[i].b = b;
	return 0;
}

/* Copies the parts of [a, b) W does not hold yet from S. */
int rl_init_fill(struct railop *o, uint64_t a, uint64_t b)
{
	uint64_t cur = a;
	int r;

	if (!o->in.S || rl_init_cov(&o->in, a, b) == 2)
		return 0;
	if ((r = rl_stage_wait(o, o->in.S + a, b - a)) < 0 || (r = rl_stage_wait(o, o->W + a, b - a)) < 0)
		return r;
	for (size_t i = 0; i < o->in.ninit && o->in.init[i].a < b && cur < b; i++) {
		if (o->in.init[i].b <= cur)
			continue;
		if (o->in.init[i].a > cur)
			memcpy(o->W + cur, o->in.S + cur, o->in.init[i].a - cur);
		cur = R2_MAX(cur, o->in.init[i].b);
	}
	if (cur < b)
		memcpy(o->W + cur, o->in.S + cur, b - cur);
	return rl_init_mark(&o->in, a, b);
}

int rl_build_plan(struct railop *o, enum r2_plan_op op, uint32_t root, uint32_t peer)
{
	struct r2_comm *c = o->c;
	int nrails = o->d->rails ? o->d->rails->n : 0;
	struct r2_cluster cl = { 0 };
	struct r2_opdesc od = { 0 };
	struct r2_plan_params prm;
	struct r2_nic *nics;
	int r;

	const struct r2_view *v = o->view;
	bool use_view = v && v->nhosts == (uint32_t)c->nhosts && v->nrails == (uint32_t)nrails;

	if (nrails < 1)
		return R2CCL_E_NO_PATH;
	nics = calloc((size_t)c->nhosts * (size_t)nrails, sizeof(*nics));
	if (!nics)
		return -ENOMEM;
	/* a healthy NIC at cost_nic_bw; a degraded one at its fraction of
	 * the nominal speed the health view counts in */
	const double nic_bw = (double)r2_param_int(&o->d->params, P_COST_NIC_BW);
again:
	for (int i = 0; i < c->nhosts * nrails; i++) {
		nics[i].state = R2_NIC_UP;
		nics[i].bw_tx = nics[i].bw_rx = nic_bw;
		nics[i].lat = 20e-6;
		if (!use_view)
			continue;
		/* the view every daemon of the communicator agreed on for this
		 * operation (health.c): failed NICs DOWN, slow ones DEGRADED */
		if (v->down[i]) {
			nics[i].state = R2_NIC_DOWN;
			nics[i].bw_tx = nics[i].bw_rx = 0;
		} else if (v->bw[i] && v->bw[i] < R2_PLAN_NOMINAL_BPS) {
			nics[i].state = R2_NIC_DEGRADED;
			nics[i].bw_tx = nics[i].bw_rx =
				nic_bw * (double)v->bw[i] / (double)R2_PLAN_NOMINAL_BPS;
		}
	}
	cl.nhosts = (uint32_t)c->nhosts;
	cl.nrails = (uint32_t)nrails;
	cl.nic = nics;
	/* alpha: the per-message cost of the live rails (R2CCL_COST_ALPHA_US,
	 * fitted with r2_cost_fit; docs/planner.md) */
	cl.cost.alpha = (double)r2_param_int(&o->d->params, P_COST_ALPHA_US) * 1e-6;
	od.op = op;
	od.size = o->size;
	od.elem = o->elem;
	od.root = root;
	od.peer = peer;
	/* the communicator's mode (R2CCL_MODE or the ranks' r2ccl_comm_config_t):
	 * balance -> failure-optimized shares, hotrepair -> backup NIC */
	od.policy = c->mode == R2_MODE_HOTREPAIR ? R2_POL_HOTREPAIR : R2_POL_OURS;
	r2_plan_params_default(&prm);
	prm.recursion_thresh = r2_param_double(&o->d->params, P_RECURSION_THRESH);
	prm.routing_algo = (int)r2_param_int(&o->d->params, P_ROUTING_ALGO);
	/* The log-step schedules (planner/hd.c) where R2CCL_LOGSTEP says so.
	 * Recursive doubling sends a range and REDUCEs into it in one step
	 * (the contract's exception): every send of a step is posted before
	 * the step takes its receives (run_step), and a chunk sent from W
	 * itself is copied out before a receive writes there
	 * (rl_before_write), so each send reads the start-of-step value. By
	 * pairs only: each member sums its own values, and with one value
	 * added per level every host gets the same bits. */
	const char *ls = r2_param_str(&o->d->params, P_LOGSTEP);
	prm.no_logstep = strcmp(ls, "off") == 0;
	prm.no_rd = strcmp(ls, "rd") != 0;
	prm.bruck_only = strcmp(ls, "bruck") == 0;
	prm.rd_pairs = true;
	/* within 5% the pipelined plans stay: at 16 MB on 4 hosts x 2 TCP
	 * rails at 1 Gbit/s the model put rd 0.7% ahead of the ring and it ran
	 * 10% behind (tools/bench/plan-check.sh) */
	prm.logstep_margin = 0.05;
	/* and with a NIC down the shard plan, which the model puts behind rd
	 * at 1 MB (14.1 against 13.2 ms), ran in 8.5 ms, rd in 13.2: there
	 * the failure-aware plans keep the choice */
	prm.logstep_healthy = true;
	/* and beyond logstep_hosts (4) only 15% ahead: on 8 hosts x 2 rails
	 * at 1 Gbit/s recursive doubling ran as fast as the ring or faster
	 * where the model put it 19-52% ahead (128 KB-1 MB), and 28-47% behind
	 * at 4 MB (6% ahead in the model), on the 16-core machine and the
	 * 2-core VM alike; on 16 hosts a small AllReduce takes 4-7 steps
	 * instead of the ring's 30 (docs/planner.md, "8 and 16 hosts") */
	prm.logstep_max_hosts = (uint32_t)r2_param_int(&o->d->params, P_LOGSTEP_HOSTS);
	prm.logstep_far_margin = 0.15;
	r = r2_plan_build(&cl, &od, &prm, &o->plan);
	if (use_view && r < 0) {
		/* no plan for this view: every daemon falls back alike to the
		 * all-up plan, whose chunks on failed rails go by another rail
		 * (post_any). (Plans with bridges run: rl_relay() below.) */
		log_debug("communicator %u: view %llu needs an impossible plan; planning with "
			  "every NIC up", c->id, (unsigned long long)v->epoch);
		if (r == 0)
			r2_plan_free(o->plan);
		o->plan = NULL;
		use_view = false;
		goto again;
	}
	free(nics);
	if (r < 0)
		return r;
	if (o->plan->algo == R2_ALGO_BRUCK)
		atomic_fetch_add(&o->d->bruck_ops_total, 1);
	o->maxx = r2_plan_max_xfers(o->plan);
	o->xf = calloc(o->maxx ? o->maxx : 1, sizeof(*o->xf));
	o->xfn = calloc(o->maxx ? o->maxx : 1, sizeof(*o->xfn));
	return o->xf && o->xfn ? 0 : -ENOMEM;
}

/* Transfers from 2 x streams x this size are cut over every stream even
 * when one chunk would hold them. */
#define R2_MIN_SPLIT (64u << 10)

/* Chunks of the step's transfers in direction dir, in send order (reversed
 * when testing with inject_dup, so receivers see them out of order).
 * A transfer is cut into equal chunks of at most o->chunk bytes, their
 * number a multiple of o->spread (the streams of a connection), so every
 * stream carries the same share of it: with unequal shares the streams that
 * finish first start on the next step's chunks while the others still carry
 * this step's, and this step ends later (docs/operations.md, tcp_streams,
 * has the figures). Sender and receiver cut alike. */
int rl_list_chunks(struct railop *o, const struct r2_xfer *xf, int nx, int dir,
		       bool sends)
{
	bool reverse = sends && r2_param_int(&o->d->params, P_INJECT_DUP) > 0;

	if (sends)
		o->nnsend = 0;
	else
		o->nrcv = 0;
	for (int i = 0; i < nx; i++) {
		const struct r2_xfer *x = &xf[i];
		uint64_t n, E = x->len / o->elem;
		if (x->dir != dir || !x->len)
			continue;
		n = R2_DIV_UP(x->len, (uint64_t)o->chunk);
		if (n > 1 || x->len >= 2 * (uint64_t)o->spread * R2_MIN_SPLIT)
			n = R2_DIV_UP(n, o->spread) * o->spread;
		n = R2_MAX(1, R2_MIN(n, E));
		for (uint64_t j = 0; j < n; j++) {
			uint64_t jj = reverse ? n - 1 - j : j;
			uint64_t a = E * jj / n, b = E * (jj + 1) / n;
			uint64_t off = x->off + a * o->elem;
			uint64_t len = (b - a) * o->elem;
			if (sends) {
				if (R2_GROW(o->nsend, o->capnsend, o->nnsend, 64) < 0)
					return -ENOMEM;
				o->nsend[o->nnsend++] = (struct pend){ off, len, (uint32_t)i, false, 0 };
			} else {
				if (R2_GROW(o->rcv, o->caprcv, o->nrcv, 64) < 0)
					return -ENOMEM;
				o->rcv[o->nrcv++] = (struct rpend){ x->peer, off, len, 0, false };
			}
		}
	}
	return 0;
}
