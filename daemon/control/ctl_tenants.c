/* SPDX-License-Identifier: MIT */
/*
 * Tenants on the control socket: `r2cclctl tenants` (the table, its
 * counters and quota use), `r2cclctl tenants set` (root) and
 * r2ccl_set_bandwidth_limit (a caller's own tenant). docs/tenancy.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/comm_record.h"
#include "control/control.h"
#include "log.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "r2ccl.pb-c.h"
#include "util.h"

#define MAXROWS R2_SCHED_MAX_TENANTS

struct tenants_bufs {
	struct r2_tenant_row rows[MAXROWS];
	R2ccl__TenantInfo info[MAXROWS];
	R2ccl__TenantInfo *infop[MAXROWS];
	uint64_t rail_bytes[MAXROWS][R2_SCHED_MAX_RAILS];
	uint64_t rail_bps[MAXROWS][R2_SCHED_MAX_RAILS];
	char cgroup[MAXROWS][R2_SCHED_CGROUP];
	/* use, by tenant index (under d->lock) */
	uint32_t sessions[MAXROWS], comms[MAXROWS], regs[MAXROWS];
	uint64_t mem[MAXROWS], ops[MAXROWS];
};

/* Use of each tenant's quotas and its operations (under d->lock). Root's
 * sessions are not counted against a tenant (as for the per-uid caps). */
static void tenants_use(struct r2d *d, struct tenants_bufs *b)
{
	for (struct r2_session *o = d->sessions; o; o = o->next) {
		int t = o->tenant_idx;
		if (!o->hello_done || o->closing || t < 0 || t >= MAXROWS)
			continue;
		b->sessions[t] += o->uid != 0 && !o->control_only;
		b->regs[t] += o->nmem;
		b->mem[t] += o->mem_bytes;
	}
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		int t;
		if (c->state == R2_COMM_DEAD)
			continue;
		t = r2d_tenants_find(d, c->tenant);
		if (t >= 0 && t < MAXROWS)
			b->comms[t]++;
	}
	for (uint32_t i = 0; i < d->nop_stats && i < R2_OPSTAT_TENANTS; i++) {
		const struct r2_op_stats *st = &d->op_stats[i];
		int t;
		if (st->tenant[0] != '/' && strncmp(st->tenant, "uid:", 4))
			continue; /* "_none", "_other": no tenant of the table */
		t = r2d_tenants_find(d, st->tenant);
		if (t < 0 || t >= MAXROWS)
			continue;
		for (int k = 0; k < R2_OPSTAT_NKINDS; k++)
			b->ops[t] += st->ops[k][0] + st->ops[k][1];
	}
}

int r2d_ctl_tenants(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__TenantsRequest *m = r2ccl__tenants_request__unpack(NULL, f->len, f->payload);
	R2ccl__TenantsReply rep = R2CCL__TENANTS_REPLY__INIT;
	struct tenants_bufs *b;
	struct r2d *d = s->d;
	struct r2_tenant_policy mine;
	uint64_t now = r2_now_us();
	int n, k = 0;

	if (!m)
		return -EPROTO;
	rep.req_id = m->req_id;
	r2ccl__tenants_request__free_unpacked(m, NULL);
	b = calloc(1, sizeof(*b));
	if (!b) {
		rep.status = -ENOMEM;
		rep.error = "out of memory";
		r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_TENANTS_REPLY, &rep);
		return 0;
	}
	pthread_mutex_lock(&d->lock);
	tenants_use(d, b);
	pthread_mutex_unlock(&d->lock);
	n = r2d_tenants_rows(d, b->rows, MAXROWS);
	uint64_t snap = r2_now_us(); /* the counters' time, for samplers */
	if (!r2d_tenants_policy_at(d, s->tenant_idx, &mine))
		mine.name[0] = 0;
	rep.caller_tenant = mine.name;
	rep.sched = r2d_tenants_on(d);
	for (int i = 0; i < n; i++) {
		const struct r2_tenant_row *w = &b->rows[i];
		R2ccl__TenantInfo *ti = &b->info[k];
		int t = w->index;
		if (s->uid != 0 && t != s->tenant_idx)
			continue; /* another user sees its own tenant only (by index:
				   * cgroup names are cut to 63 characters, and
				   * two tenants may share the cut) */
		r2ccl__tenant_info__init(ti);
		ti->name = (char *)w->pol.name;
		snprintf(b->cgroup[k], sizeof(b->cgroup[k]), "%s", w->pol.cgroup);
		ti->cgroup = b->cgroup[k];
		ti->weight = w->pol.weight;
		ti->rate_bps = w->rate_bps;
		ti->class_ = (char *)r2_tclass_name(w->pol.cls);
		ti->burst_bytes = w->burst_bytes;
		ti->limit_bps = w->limit_bps;
		ti->reserve_bps = w->reserve_bps;
		ti->bytes_total = w->bytes;
		ti->chunks_total = w->chunks;
		ti->queued_chunks = w->queued;
		ti->queued_bytes = w->queued_bytes;
		ti->throttled_us = w->throttled_us;
		ti->max_wait_us = w->max_wait_us;
		ti->dynamic = w->dynamic;
		int nr = d->rails ? R2_MIN(d->rails->n, R2_SCHED_MAX_RAILS) : 0;
		memcpy(b->rail_bytes[k], w->bytes_rail, sizeof(b->rail_bytes[k]));
		ti->n_rail_bytes = (size_t)nr;
		ti->rail_bytes = b->rail_bytes[k];
		memcpy(b->rail_bps[k], w->bytes_per_s_rail, sizeof(b->rail_bps[k]));
		ti->n_rail_bytes_per_s = (size_t)nr;
		ti->rail_bytes_per_s = b->rail_bps[k];
		ti->bytes_per_s = w->bytes_per_s;
		if (t >= 0 && t < MAXROWS) {
			ti->sessions = b->sessions[t];
			ti->comms = b->comms[t];
			ti->regs = b->regs[t];
			ti->mem_bytes = b->mem[t];
			ti->ops_total = b->ops[t];
		}
		ti->max_sessions = w->pol.max_sessions;
		ti->max_comms = w->pol.max_comms;
		ti->max_regs = w->pol.max_regs;
		ti->max_mem = w->pol.max_mem;
		ti->max_req_rate = w->pol.max_req_rate;
		ti->max_pending_ops = w->pol.max_pending_ops;
		ti->max_proxy = w->pol.max_proxy;
		ti->pending_ops = w->ops_open;
		ti->proxy_bytes = w->proxy_bytes;
		ti->proxy_high = w->proxy_high;
		ti->proxy_waits = w->proxy_waits;
		ti->req_paced = w->req_paced;
		ti->changed_ago_us = w->changed_us && now > w->changed_us ? now - w->changed_us : 0;
		ti->snapshot_mono_us = snap;
		b->infop[k] = ti;
		k++;
	}
	rep.n_tenants = (size_t)k;
	rep.tenants = b->infop;
	rep.error = "";
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_TENANTS_REPLY, &rep);
	free(b);
	return 0;
}

/* root: `r2cclctl tenants set NAME key=value...` */
static int tenant_set(struct r2_session *s, const char *name, const char *spec, char *err,
		      size_t errlen)
{
	struct r2_tenant_policy p;
	int r;

	if (s->uid != 0) {
		snprintf(err, errlen, "only root may change a tenant's policy "
				      "(r2ccl_set_bandwidth_limit lowers one's own cap)");
		return -EPERM;
	}
	if (!name[0] || strlen(name) >= sizeof(p.name) || strchr(name, ' ')) {
		snprintf(err, errlen, "a tenant needs a name (1-63 characters, no spaces)");
		return -EINVAL;
	}
	if (!r2d_tenants_policy_get(s->d, name, &p)) {
		r2_tenant_policy_default(&p, name);
		if (name[0] == '/') /* a cgroup path: a tenant of that cgroup */
			snprintf(p.cgroup, sizeof(p.cgroup), "%s", name);
		else if (!strstr(spec, "cgroup=")) {
			snprintf(err, errlen, "no tenant %s (a new one needs cgroup=/path)", name);
			return -ENOENT;
		}
	}
	r = r2_tenant_policy_parse(&p, spec, err, errlen);
	if (r < 0)
		return r;
	r = r2d_tenants_policy_set(s->d, &p);
	if (r < 0) {
		snprintf(err, errlen, "the tenant table is full (%d)", R2_SCHED_MAX_TENANTS - 2);
		return r;
	}
	log_info("tenant %s set by uid 0: %s", name, spec);
	return 0;
}

int r2d_ctl_tenant_set(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__TenantSet *m = r2ccl__tenant_set__unpack(NULL, f->len, f->payload);
	R2ccl__Result res = R2CCL__RESULT__INIT;
	char err[256] = "";
	int r;

	if (!m)
		return -EPROTO;
	if (m->own_limit && s->uid != 0 && s->tenant_idx == R2_SCHED_MAX_TENANTS - 1) {
		/* "_other" holds every cgroup the full table had no room for:
		 * one of them may not cap or reserve for all the others */
		snprintf(err, sizeof(err), "this session's tenant is _other (the tenant table is "
			 "full), shared by unrelated cgroups: only root may set its limits");
		r = -EPERM;
	} else if (m->own_limit)
		r = r2d_tenants_set_limit(s->d, s->tenant_idx, m->limit_bps, m->reserve_bps);
	else
		r = tenant_set(s, m->name ? m->name : "", m->spec ? m->spec : "", err,
			       sizeof(err));
	res.req_id = m->req_id;
	res.status = r;
	res.error = err;
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_RESULT, &res);
	r2ccl__tenant_set__free_unpacked(m, NULL);
	return 0;
}
