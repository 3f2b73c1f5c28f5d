// SPDX-License-Identifier: MIT
/*
 * r2cclctl tenants [set NAME key=value...]: the daemon's tenant table (policy,
 * bytes, operations, queues, throttling, quota use) and, for root, changing
 * a tenant's policy at run time (docs/tenancy.md).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "util.h"

/* bits/s as "300M" (decimal), "-" for 0 */
static const char *txt_rate(const struct col *col, const void *row, size_t idx, char *buf,
			    size_t len)
{
	uint64_t v = col_u64(col, row);
	static const char units[] = " KMGT";
	double x = (double)v;
	int u = 0;

	if (!v)
		return "-";
	while (x >= 1000 && u < 4) {
		x /= 1000;
		u++;
	}
	snprintf(buf, len, u ? "%.4g%c" : "%.0f", x, units[u]);
	return buf;
}

static const char *txt_us_ms(const struct col *col, const void *row, size_t idx, char *buf,
			     size_t len)
{
	snprintf(buf, len, "%.1f", (double)col_u64(col, row) / 1000.0);
	return buf;
}

/* "sessions/max" of a quota, the max "-" when none */
static const char *txt_quota(const R2ccl__TenantInfo *t, uint64_t use, uint64_t max, bool bytes,
			     char *buf, size_t len)
{
	char a[32], b[32];

	if (bytes) {
		fmt_bytes(use, a, sizeof(a));
		if (max)
			fmt_bytes(max, b, sizeof(b));
	} else {
		snprintf(a, sizeof(a), "%llu", (unsigned long long)use);
		snprintf(b, sizeof(b), "%llu", (unsigned long long)max);
	}
	snprintf(buf, len, "%s/%s", a, max ? b : "-");
	(void)t;
	return buf;
}

static const char *txt_comms_q(const struct col *col, const void *row, size_t idx, char *buf,
			       size_t len)
{
	const R2ccl__TenantInfo *t = row;
	return txt_quota(t, t->comms, t->max_comms, false, buf, len);
}

static const char *txt_sessions_q(const struct col *col, const void *row, size_t idx,
				  char *buf, size_t len)
{
	const R2ccl__TenantInfo *t = row;
	return txt_quota(t, t->sessions, t->max_sessions, false, buf, len);
}

static const char *txt_mem_q(const struct col *col, const void *row, size_t idx, char *buf,
			     size_t len)
{
	const R2ccl__TenantInfo *t = row;
	return txt_quota(t, t->mem_bytes, t->max_mem, true, buf, len);
}

static const char *txt_pending_q(const struct col *col, const void *row, size_t idx,
				  char *buf, size_t len)
{
	const R2ccl__TenantInfo *t = row;
	return txt_quota(t, t->pending_ops, t->max_pending_ops, false, buf, len);
}

static const char *txt_proxy_q(const struct col *col, const void *row, size_t idx, char *buf,
			       size_t len)
{
	const R2ccl__TenantInfo *t = row;
	return txt_quota(t, t->proxy_bytes, t->max_proxy, true, buf, len);
}

static void json_rail_bytes(struct jw *j, const struct col *col, const void *row)
{
	const R2ccl__TenantInfo *t = row;

	jw_open(j, col->key, '[');
	for (size_t k = 0; k < t->n_rail_bytes; k++)
		jw_u64(j, NULL, t->rail_bytes[k]);
	jw_close(j, ']');
}

static const char *txt_rail_list(const uint64_t *v, size_t nv, const char *unit, char *buf,
				 size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (size_t k = 0; k < nv && n < len; k++) {
		char b[32];
		n += (size_t)snprintf(buf + n, len - n, "%s%s%s", k ? "," : "",
				      fmt_bytes(v[k], b, sizeof(b)), unit);
	}
	return buf[0] ? buf : "-";
}

static const char *txt_rail_bytes(const struct col *col, const void *row, size_t idx,
				  char *buf, size_t len)
{
	const R2ccl__TenantInfo *t = row;

	return txt_rail_list(t->rail_bytes, t->n_rail_bytes, "", buf, len);
}

static const char *txt_rail_bps(const struct col *col, const void *row, size_t idx, char *buf,
				size_t len)
{
	const R2ccl__TenantInfo *t = row;

	return txt_rail_list(t->rail_bytes_per_s, t->n_rail_bytes_per_s, "/s", buf, len);
}

static void json_rail_bps(struct jw *j, const struct col *col, const void *row)
{
	const R2ccl__TenantInfo *t = row;

	jw_open(j, col->key, '[');
	for (size_t k = 0; k < t->n_rail_bytes_per_s; k++)
		jw_u64(j, NULL, t->rail_bytes_per_s[k]);
	jw_close(j, ']');
}

static const char *txt_bps(const struct col *col, const void *row, size_t idx, char *buf,
			   size_t len)
{
	char b[32];

	snprintf(buf, len, "%s/s", fmt_bytes(col_u64(col, row), b, sizeof(b)));
	return buf;
}

#define TI(f) offsetof(R2ccl__TenantInfo, f)
static const struct col tenant_cols[] = {
	{ "name", "TENANT", 0, COL_STR, TI(name) },
	{ "cgroup", "CGROUP", 0, COL_STR, TI(cgroup) },
	{ "weight", ">WEIGHT", 0, COL_U32, TI(weight) },
	{ "rate_bps", ">RATE", 0, COL_U64, TI(rate_bps), txt_rate },
	{ "class", "CLASS", 0, COL_STR, TI(class_) },
	{ "bytes_total", ">BYTES", 0, COL_U64, TI(bytes_total), txt_bytes },
	{ "bytes_per_s", ">NOW", 0, COL_U64, TI(bytes_per_s), txt_bps },
	{ "ops_total", ">OPS", 0, COL_U64, TI(ops_total) },
	{ "queued_chunks", ">QUEUED", 0, COL_U32, TI(queued_chunks) },
	{ "throttled_us", ">THROTTLED_MS", 0, COL_U64, TI(throttled_us), txt_us_ms },
	{ "max_wait_us", ">MAXWAIT_MS", 0, COL_U64, TI(max_wait_us), txt_us_ms, NULL,
	  COL_VERBOSE },
	{ "sessions", ">SESSIONS", 0, COL_U32, TI(sessions), txt_sessions_q },
	{ "comms", ">COMMS", 0, COL_U32, TI(comms), txt_comms_q },
	{ "mem_bytes", ">MEM", 0, COL_U64, TI(mem_bytes), txt_mem_q, NULL, COL_VERBOSE },
	{ "pending_ops", ">PENDING", 0, COL_U32, TI(pending_ops), txt_pending_q, NULL,
	  COL_VERBOSE },
	{ "proxy_bytes", ">PROXY", 0, COL_U64, TI(proxy_bytes), txt_proxy_q, NULL,
	  COL_VERBOSE },
	{ "rail_bytes", "RAIL_BYTES", 0, COL_U64, TI(bytes_total), txt_rail_bytes,
	  json_rail_bytes, COL_VERBOSE },
	{ "rail_bytes_per_s", "RAIL_NOW", 0, COL_U64, TI(bytes_per_s), txt_rail_bps,
	  json_rail_bps, COL_VERBOSE },
	{ "burst_bytes", NULL, 0, COL_U64, TI(burst_bytes) },
	{ "limit_bps", NULL, 0, COL_U64, TI(limit_bps) },
	{ "reserve_bps", NULL, 0, COL_U64, TI(reserve_bps) },
	{ "chunks_total", NULL, 0, COL_U64, TI(chunks_total) },
	{ "queued_bytes", NULL, 0, COL_U64, TI(queued_bytes) },
	{ "regs", NULL, 0, COL_U32, TI(regs) },
	{ "max_sessions", NULL, 0, COL_U32, TI(max_sessions) },
	{ "max_comms", NULL, 0, COL_U32, TI(max_comms) },
	{ "max_regs", NULL, 0, COL_U32, TI(max_regs) },
	{ "max_mem", NULL, 0, COL_U64, TI(max_mem) },
	{ "max_req_rate", NULL, 0, COL_U32, TI(max_req_rate) },
	{ "max_pending_ops", NULL, 0, COL_U32, TI(max_pending_ops) },
	{ "max_proxy", NULL, 0, COL_U64, TI(max_proxy) },
	{ "proxy_high", NULL, 0, COL_U64, TI(proxy_high) },
	{ "proxy_waits", NULL, 0, COL_U64, TI(proxy_waits) },
	{ "req_paced", NULL, 0, COL_U64, TI(req_paced) },
	{ "dynamic", NULL, 0, COL_BOOL, TI(dynamic) },
	{ "changed_ago_us", NULL, 0, COL_U64, TI(changed_ago_us) },
	{ "snapshot_mono_us", NULL, 0, COL_U64, TI(snapshot_mono_us) },
};
static const struct section tenants = { "tenants", COLS(tenant_cols) };

/* tenants set: with --json, also when the request left and the answer came
 * (CLOCK_MONOTONIC, the daemon's clock too: a reaction is measured from
 * them against the counters' snapshot_mono_us, tools/bench/tenant-bench.sh) */
static int tenants_set(struct ctl *c, int argc, char **argv)
{
	R2ccl__TenantSet req = R2CCL__TENANT_SET__INIT;
	struct r2_frame f;
	char spec[512] = "";
	size_t n = 0;
	int r;

	for (int i = 1; i < argc; i++) {
		int w = snprintf(spec + n, sizeof(spec) - n, "%s%s", i > 1 ? " " : "", argv[i]);
		if (w < 0 || (size_t)w >= sizeof(spec) - n)
			return report(c, EXIT_USAGE, -EINVAL, "tenants set: the policy is too long");
		n += (size_t)w;
	}
	req.req_id = CTL_REQ_ID;
	req.name = argv[0];
	req.spec = spec;
	uint64_t sent = r2_now_us();
	r = ctl_call(c, "tenants set", R2CCL__MSG_TYPE__MSG_TENANT_SET, &req.base,
		     R2CCL__MSG_TYPE__MSG_RESULT, &f);
	uint64_t done = r2_now_us();
	if (r)
		return r;
	r2_frame_free(&f);
	if (c->json) {
		struct jw j;
		jw_begin(&j);
		jw_str(&j, "command", "tenants set");
		jw_str(&j, "tenant", argv[0]);
		jw_str(&j, "policy", spec);
		jw_i64(&j, "status", 0);
		jw_u64(&j, "sent_mono_us", sent);
		jw_u64(&j, "reply_mono_us", done);
		jw_end(&j);
	} else {
		printf("tenant %s: %s\n", argv[0], spec);
	}
	return EXIT_OK;
}

int cmd_tenants(struct ctl *c, int argc, char **argv)
{
	R2ccl__TenantsReply *rep = NULL;
	int r;

	if (argc > 0) {
		if (strcmp(argv[0], "set"))
			return report(c, EXIT_USAGE, -EINVAL,
				      "tenants: 'set NAME key=value...' or nothing, not '%s'",
				      argv[0]);
		if (argc < 3)
			return report(c, EXIT_USAGE, -EINVAL,
				      "tenants set NAME key=value... (weight=W rate=R class=C)");
		return tenants_set(c, argc - 1, argv + 1);
	}
	for (long k = 0;; k++) {
		r = ctl_query(c, R2CCL__MSG_TYPE__MSG_TENANTS, &r2ccl__tenants_request__descriptor,
			      R2CCL__MSG_TYPE__MSG_TENANTS_REPLY,
			      &r2ccl__tenants_reply__descriptor, (ProtobufCMessage **)&rep);
		if (r)
			return r;
		section_print(c, &tenants, (void *const *)rep->tenants, rep->n_tenants);
		if (!c->json && !rep->sched)
			printf("(scheduler off: sched = 0; chunks go to the rails in the order "
			       "posted)\n");
		r2ccl__tenants_reply__free_unpacked(rep, NULL);
		if (!c->follow || (c->count && k + 1 >= c->count))
			return EXIT_OK;
		/* --follow: JSON objects (or tables) one after another, a blank
		 * line apart, as events --follow prints them */
		putchar('\n');
		if (fflush(stdout) != 0)
			return EXIT_OK; /* the reader went away */
		int ms = c->interval_ms ? c->interval_ms : 1000;
		struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
}
