/* SPDX-License-Identifier: MIT */
/*
 * Prometheus metrics: r2ccld's state in the text exposition format (0.0.4),
 * served at GET /metrics on an opt-in TCP listener of the control loop
 * (metrics_listen) and written atomically to a file for node_exporter's
 * textfile collector (metrics_textfile). docs/operations.md "Metrics" lists
 * every metric.
 *
 * Everything runs on the loop thread. The rendering reads read-only copies:
 * health's snapshot (loop-thread state), the proxy pools' stats (their own
 * mutex), and the tenants' and communicators' counters copied under d->lock
 * (a few hundred bytes; never held while formatting). The 1 s tick also
 * closes the rail-overlap interval: how many communicators, and how many
 * tenants, had data on each rail (sent or received) in the last second.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "base/daemon.h"
#include "config.h"
#include "control/control.h"
#include "engine/comm.h"
#include "log.h"
#include "net/bufpool.h"
#include "net/health.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "r2ccl.h"
#include "util.h"

#define METRICS_TICK_MS 1000
#define TEXTFILE_EVERY 5          /* ticks */
#define HTTP_MAX_REQUEST 4096     /* bytes of request line and headers */
#define HTTP_TIMEOUT_MS 5000      /* a connection's whole life */
#define HTTP_MAX_CONNS 16

struct mconn {
	struct r2_metrics *m;
	struct mconn *next, **pprev; /* the open connections */
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t wreq;
	char req[HTTP_MAX_REQUEST];
	size_t n;
	char *resp;
	bool answered;
	int closing; /* handles still to close */
};

struct r2_metrics {
	struct r2d *d;
	uv_timer_t tick;
	uv_tcp_t listener;
	bool listening;
	int nconns;
	struct mconn *conns;
	unsigned ticks;
	/* rail overlap of the last closed interval (loop thread) */
	uint32_t overlap_comms[R2_MAX_RAILS], overlap_tenants[R2_MAX_RAILS];
	uint64_t requests, bad_requests;
};

/* ---- the text ---- */

/* A label value with \, " and newline escaped. */
static void put_label(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n') {
			fputs("\\n", f);
			continue;
		}
		fputc(*s, f);
	}
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The NIC labels of node_exporter's infiniband collector (device, port):
 * the RDMA device and port of a verbs rail, the netdev (port 1) of a tcp
 * rail; nic is always the netdev, rail its index. */
static void nic_labels(FILE *f, struct r2d *d, int rail)
{
	const struct r2_rail *rl = &d->rails->rail[rail];
	char dev[64];
	const char *port = "1";

	snprintf(dev, sizeof(dev), "%s", rl->rdma_dev[0] ? rl->rdma_dev : rl->ifname);
	char *colon = rl->rdma_dev[0] ? strchr(dev, ':') : NULL;
	if (colon) { /* "mlx5_0:1" */
		*colon = 0;
		port = rl->rdma_dev + (colon - dev) + 1;
	}
	fputs("device=\"", f);
	put_label(f, dev);
	fprintf(f, "\",port=\"%s\",nic=\"", port);
	put_label(f, rl->ifname);
	fprintf(f, "\",rail=\"%d\"", rail);
}

static const char *const states[] = { "healthy", "degraded", "failed", "recovering" };

static uint64_t nic_speed_bytes(struct r2d *d, const char *ifname)
{
	for (int i = 0; i < d->topo.nnics; i++) {
		const struct r2_topo_nic *n = &d->topo.nics[i];
		if (!strcmp(n->name, ifname) || !strcmp(n->netdev, ifname))
			return n->speed_mbps * 125000ull;
	}
	return 0;
}

/* One NIC metric line per rail: v(x) picks the value. */
#define PER_RAIL(name, type, help, expr)                                   \
	do {                                                               \
		head(f, name, type, help);                                 \
		for (size_t i_ = 0; i_ < hs->nrails; i_++) {               \
			const struct r2d_rail_info *x = &hs->rails[i_];    \
			fputs(name "{", f);                                \
			nic_labels(f, d, (int)x->index);                   \
			fprintf(f, "} %llu\n", (unsigned long long)(expr)); \
		}                                                          \
	} while (0)

/* A path is listed once it carried data or left the healthy state: a host
 * of a large cluster talks to a few of its peers (1024 peers x 8 rails of
 * idle paths took 108 ms and 11 MB a scrape). */
static bool path_shown(const struct r2d_path_info *x)
{
	return x->tx_chunks || x->rx_chunks || x->changes || x->failovers || x->resends ||
	       strcmp(x->state, "healthy");
}

#define PER_PATH(name, type, help, fmt, expr)                                \
	do {                                                                 \
		head(f, name, type, help);                                   \
		for (size_t i_ = 0; i_ < hs->npaths; i_++) {                 \
			const struct r2d_path_info *x = &hs->paths[i_];      \
			if (!path_shown(x))                                  \
				continue;                                    \
			fputs(name "{", f);                                  \
			nic_labels(f, d, (int)x->rail);                      \
			fputs(",peer=\"", f);                                \
			put_label(f, x->host);                               \
			fprintf(f, "\"} " fmt "\n", (expr));                 \
		}                                                            \
	} while (0)

struct comm_copy {
	uint32_t id;
	char tenant[128];
	int nranks, nhosts;
	uint64_t key, ops, errors, bytes;
};

/* Copies the tenants' and communicators' counters under d->lock. */
static int copy_engine(struct r2d *d, struct r2_op_stats **ts, uint32_t *nts,
		       struct comm_copy **cs, size_t *ncs)
{
	size_t n = 0, k = 0;

	pthread_mutex_lock(&d->lock);
	for (struct r2_comm *c = d->comms; c; c = c->next)
		n++;
	*ts = calloc(R2_OPSTAT_TENANTS, sizeof(**ts));
	*cs = calloc(n + 1, sizeof(**cs));
	if (!*ts || !*cs) {
		pthread_mutex_unlock(&d->lock);
		free(*ts);
		free(*cs);
		*ts = NULL;
		*cs = NULL;
		return -ENOMEM;
	}
	*nts = d->nop_stats;
	memcpy(*ts, d->op_stats, sizeof(d->op_stats[0]) * d->nop_stats);
	for (struct r2_comm *c = d->comms; c && k < n; c = c->next) {
		struct comm_copy *x = &(*cs)[k++];
		x->id = c->id;
		snprintf(x->tenant, sizeof(x->tenant), "%.127s", c->tenant[0] ? c->tenant : "_none");
		x->nranks = c->nranks;
		x->nhosts = c->nhosts;
		x->key = c->key;
		x->ops = c->ops_total;
		x->errors = c->op_errors;
		x->bytes = c->bytes_total;
	}
	*ncs = k;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void render_tenants(FILE *f, const struct r2_op_stats *ts, uint32_t nts)
{
	static const double bounds[R2_LAT_NBUCKETS] = R2_LAT_BOUNDS;

	head(f, "r2ccl_tenant_operations_total", "counter",
	     "operations completed, by tenant, kind and result");
	for (uint32_t t = 0; t < nts; t++)
		for (int k = 1; k < R2_OP_MAX; k++)
			for (int e = 0; e < 2; e++) {
				if (!ts[t].ops[k][e])
					continue;
				fputs("r2ccl_tenant_operations_total{tenant=\"", f);
				put_label(f, ts[t].tenant);
				fprintf(f, "\",op=\"%s\",result=\"%s\"} %llu\n", r2_opcode_name((uint32_t)k),
					e ? "error" : "ok", (unsigned long long)ts[t].ops[k][e]);
			}
	head(f, "r2ccl_tenant_bytes_total", "counter",
	     "bytes of the operations completed (a rank's largest buffer), by tenant and kind");
	for (uint32_t t = 0; t < nts; t++)
		for (int k = 1; k < R2_OP_MAX; k++) {
			if (!ts[t].ops[k][0] && !ts[t].ops[k][1])
				continue;
			fputs("r2ccl_tenant_bytes_total{tenant=\"", f);
			put_label(f, ts[t].tenant);
			fprintf(f, "\",op=\"%s\"} %llu\n", r2_opcode_name((uint32_t)k),
				(unsigned long long)ts[t].bytes[k]);
		}
	head(f, "r2ccl_tenant_operation_latency_seconds", "histogram",
	     "time from the first rank's submission to the completion of an operation");
	for (uint32_t t = 0; t < nts; t++) {
		uint64_t cum = 0;
		for (int b = 0; b <= R2_LAT_NBUCKETS; b++) {
			cum += ts[t].lat[b];
			fputs("r2ccl_tenant_operation_latency_seconds_bucket{tenant=\"", f);
			put_label(f, ts[t].tenant);
			if (b < R2_LAT_NBUCKETS)
				fprintf(f, "\",le=\"%g\"} %llu\n", bounds[b], (unsigned long long)cum);
			else
				fprintf(f, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
		}
		fputs("r2ccl_tenant_operation_latency_seconds_sum{tenant=\"", f);
		put_label(f, ts[t].tenant);
		fprintf(f, "\"} %.6f\n", ts[t].lat_sum);
		fputs("r2ccl_tenant_operation_latency_seconds_count{tenant=\"", f);
		put_label(f, ts[t].tenant);
		fprintf(f, "\"} %llu\n", (unsigned long long)cum);
	}
}

/* The scheduler's tenants (net/tenants.h): bytes per rail, throttling,
 * queues, policy. At most 64 tenants: the label stays bounded. */
static void render_sched(FILE *f, struct r2d *d)
{
	struct r2_tenant_row *rows = calloc(R2_SCHED_MAX_TENANTS, sizeof(*rows));
	int n = rows ? r2d_tenants_rows(d, rows, R2_SCHED_MAX_TENANTS) : 0;
	int nr = d->rails ? R2_MIN(d->rails->n, R2_SCHED_MAX_RAILS) : 0;

	head(f, "r2ccl_tenant_rail_transmit_bytes_total", "counter",
	     "data bytes of the tenant's chunks handed to the rail, by the tenants' scheduler");
	for (int t = 0; t < n; t++)
		for (int r = 0; r < nr; r++) {
			fputs("r2ccl_tenant_rail_transmit_bytes_total{tenant=\"", f);
			put_label(f, rows[t].pol.name);
			fputs("\",", f);
			nic_labels(f, d, r);
			fprintf(f, "} %llu\n", (unsigned long long)rows[t].bytes_rail[r]);
		}
	static const struct {
		const char *name, *type, *help;
	} g[] = {
		{ "r2ccl_tenant_throttled_seconds_total", "counter",
		  "time the tenant's chunks waited on its rate" },
		{ "r2ccl_tenant_queued_chunks", "gauge", "the tenant's chunks waiting in its queues" },
		{ "r2ccl_tenant_weight", "gauge", "the tenant's weight" },
		{ "r2ccl_tenant_rate_limit_bytes_per_second", "gauge",
		  "the tenant's cap in force, all rails of this host (0: none)" },
	};
	for (size_t k = 0; k < sizeof(g) / sizeof(g[0]); k++) {
		head(f, g[k].name, g[k].type, g[k].help);
		for (int t = 0; t < n; t++) {
			fprintf(f, "%s{tenant=\"", g[k].name);
			put_label(f, rows[t].pol.name);
			fprintf(f, "\",class=\"%s\"} ", r2_tclass_name(rows[t].pol.cls));
			if (k == 0)
				fprintf(f, "%.6f\n", (double)rows[t].throttled_us / 1e6);
			else
				fprintf(f, "%llu\n",
					(unsigned long long)(k == 1   ? rows[t].queued
							     : k == 2 ? rows[t].pol.weight
								      : rows[t].rate_bps / 8));
		}
	}
	free(rows);
}

static void render_comms(FILE *f, const struct comm_copy *cs, size_t ncs)
{
	static const struct {
		const char *name, *type, *help;
		int field;
	} rows[] = {
		{ "r2ccl_communicator_operations_total", "counter",
		  "operations the communicator completed", 0 },
		{ "r2ccl_communicator_operation_errors_total", "counter",
		  "operations the communicator completed with an error", 1 },
		{ "r2ccl_communicator_bytes_total", "counter",
		  "bytes of its operations (a rank's largest buffer)", 2 },
		{ "r2ccl_communicator_ranks", "gauge", "ranks of the communicator (every host)", 3 },
	};
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		head(f, rows[r].name, rows[r].type, rows[r].help);
		for (size_t i = 0; i < ncs; i++) {
			uint64_t v = rows[r].field == 0	  ? cs[i].ops
				     : rows[r].field == 1 ? cs[i].errors
				     : rows[r].field == 2 ? cs[i].bytes
							  : (uint64_t)cs[i].nranks;
			fprintf(f, "%s{comm=\"%u\",tenant=\"", rows[r].name, cs[i].id);
			put_label(f, cs[i].tenant);
			fprintf(f, "\"} %llu\n", (unsigned long long)v);
		}
	}
}

/* The daemon's own gauges and counters. */
static void render_daemon(FILE *f, struct r2d *d, size_t ncs)
{
	head(f, "r2ccl_build_info", "gauge", "the daemon's version");
	fprintf(f, "r2ccl_build_info{version=\"%s\"} 1\n", R2CCL_VERSION);
	head(f, "r2ccl_uptime_seconds", "gauge", "seconds since the daemon started");
	fprintf(f, "r2ccl_uptime_seconds %.3f\n", (double)(r2_now_us() - d->start_us) / 1e6);
	head(f, "r2ccl_sessions", "gauge", "client sessions connected (r2cclctl included)");
	fprintf(f, "r2ccl_sessions %u\n", d->nsessions);
	head(f, "r2ccl_communicators", "gauge", "communicators this daemon holds");
	fprintf(f, "r2ccl_communicators %zu\n", ncs);
	head(f, "r2ccl_operations_total", "counter", "rank operations completed");
	fprintf(f, "r2ccl_operations_total %llu\n", (unsigned long long)d->ops_total);
	head(f, "r2ccl_operation_errors_total", "counter", "rank operations that failed");
	fprintf(f, "r2ccl_operation_errors_total %llu\n", (unsigned long long)d->op_errors_total);
	head(f, "r2ccl_chunks_refused_total", "counter",
	     "data chunks refused (busy) as they could not be kept here: their communicator "
	     "not ready yet and the early chunks at their cap, or no memory; their senders "
	     "send them again");
	fprintf(f, "r2ccl_chunks_refused_total %llu\n",
		(unsigned long long)atomic_load(&d->chunks_refused));
	head(f, "r2ccl_chunks_duplicate_total", "counter",
	     "data chunks that came twice (sent again after a connection failed) and were "
	     "applied once");
	fprintf(f, "r2ccl_chunks_duplicate_total %llu\n",
		(unsigned long long)atomic_load(&d->chunks_dup_dropped));
}

/* NICs (rails): traffic, speed, state, failovers, overlap. */
static void render_nics(FILE *f, struct r2d *d, const struct r2d_health_snap *hs)
{
	struct r2_metrics *m = d->metrics;

	PER_RAIL("r2ccl_nic_transmit_bytes_total", "counter", "bytes the rail's transport sent",
		 x->tx_bytes);
	PER_RAIL("r2ccl_nic_receive_bytes_total", "counter",
		 "bytes the rail's transport received", x->rx_bytes);
	PER_RAIL("r2ccl_nic_transmit_chunks_total", "counter", "data chunks sent on the rail",
		 x->tx_chunks);
	PER_RAIL("r2ccl_nic_receive_chunks_total", "counter", "data chunks received on the rail",
		 x->rx_chunks);
	PER_RAIL("r2ccl_nic_resends_total", "counter",
		 "data chunks posted again because a path of the rail lost them", x->resends);
	PER_RAIL("r2ccl_nic_transmit_rate_bytes_per_second", "gauge",
		 "bytes/s sent, 1 s samples (EWMA)", x->tx_bps);
	PER_RAIL("r2ccl_nic_receive_rate_bytes_per_second", "gauge",
		 "bytes/s received, 1 s samples (EWMA)", x->rx_bps);
	head(f, "r2ccl_nic_speed_bytes_per_second", "gauge",
	     "the NIC's link speed (only where the kernel reports one)");
	for (size_t i = 0; i < hs->nrails; i++) {
		uint64_t sp = nic_speed_bytes(d, hs->rails[i].nic);
		if (!sp)
			continue;
		fputs("r2ccl_nic_speed_bytes_per_second{", f);
		nic_labels(f, d, (int)hs->rails[i].index);
		fprintf(f, "} %llu\n", (unsigned long long)sp);
	}
	head(f, "r2ccl_nic_state", "gauge", "1 for the rail's health state, 0 for the others");
	for (size_t i = 0; i < hs->nrails; i++)
		for (size_t s = 0; s < sizeof(states) / sizeof(states[0]); s++) {
			fputs("r2ccl_nic_state{", f);
			nic_labels(f, d, (int)hs->rails[i].index);
			fprintf(f, ",state=\"%s\"} %d\n", states[s],
				!strcmp(hs->rails[i].state, states[s]));
		}
	PER_RAIL("r2ccl_nic_drained", "gauge", "1 while the operator drained the rail",
		 x->drained);
	PER_RAIL("r2ccl_nic_state_changes_total", "counter", "health state changes of the rail",
		 x->changes);
	PER_RAIL("r2ccl_nic_failovers_total", "counter",
		 "paths of the rail failed (their traffic moved to other rails)", x->failovers);
	PER_RAIL("r2ccl_nic_errors_total", "counter", "errors on the rail's paths", x->errors);
	PER_RAIL("r2ccl_nic_missed_heartbeats_total", "counter",
		 "heartbeats missed on the rail's paths", x->hb_missed);
	head(f, "r2ccl_rail_overlap", "gauge",
	     "communicators whose data went over the rail in the last second");
	for (size_t i = 0; i < hs->nrails; i++) {
		fputs("r2ccl_rail_overlap{", f);
		nic_labels(f, d, (int)hs->rails[i].index);
		fprintf(f, "} %u\n", m ? m->overlap_comms[hs->rails[i].index % R2_MAX_RAILS] : 0);
	}
	head(f, "r2ccl_rail_overlap_tenants", "gauge",
	     "tenants whose data went over the rail in the last second");
	for (size_t i = 0; i < hs->nrails; i++) {
		fputs("r2ccl_rail_overlap_tenants{", f);
		nic_labels(f, d, (int)hs->rails[i].index);
		fprintf(f, "} %u\n", m ? m->overlap_tenants[hs->rails[i].index % R2_MAX_RAILS] : 0);
	}
}

/* The proxy buffer pools, one per rail. */
static void render_pools(FILE *f, struct r2d *d)
{
	static const char *const pool_names[] = {
		"r2ccl_proxy_pool_bytes", "r2ccl_proxy_pool_max_bytes",
		"r2ccl_proxy_pool_in_use_bytes", "r2ccl_proxy_pool_gets_total",
		"r2ccl_proxy_pool_waits_total", "r2ccl_proxy_pool_timeouts_total",
	};
	static const char *const pool_help[] = {
		"bytes of slabs the rail's proxy pool allocated", "the pool's cap",
		"bytes of the pool's buffers handed out now", "buffers handed out",
		"takers that found the pool exhausted and waited", "takers that gave up",
	};
	for (int k = 0; k < 6; k++) {
		head(f, pool_names[k], k < 3 ? "gauge" : "counter", pool_help[k]);
		for (int i = 0; d->rails && i < d->rails->n; i++) {
			struct r2_bufpool_stats st;
			if (!d->rails->rail[i].pool)
				continue;
			r2_bufpool_stats(d->rails->rail[i].pool, &st);
			uint64_t v[] = { st.bytes, st.max_bytes, st.in_use,
					 st.gets,  st.waits,	 st.timeouts };
			fprintf(f, "%s{", pool_names[k]);
			nic_labels(f, d, i);
			fprintf(f, "} %llu\n", (unsigned long long)v[k]);
		}
	}
}

/* Paths (peer, rail): those shown (path_shown). */
static void render_paths(FILE *f, struct r2d *d, const struct r2d_health_snap *hs)
{
	PER_PATH("r2ccl_path_transmit_bytes_total", "counter", "data bytes sent to the peer",
		 "%llu", (unsigned long long)x->tx_bytes);
	PER_PATH("r2ccl_path_receive_bytes_total", "counter", "data bytes received from the peer",
		 "%llu", (unsigned long long)x->rx_bytes);
	PER_PATH("r2ccl_path_transmit_chunks_total", "counter", "data chunks sent to the peer",
		 "%llu", (unsigned long long)x->tx_chunks);
	PER_PATH("r2ccl_path_receive_chunks_total", "counter",
		 "data chunks received from the peer", "%llu", (unsigned long long)x->rx_chunks);
	PER_PATH("r2ccl_path_resends_total", "counter",
		 "data chunks posted again because the path lost them with its connection", "%llu",
		 (unsigned long long)x->resends);
	PER_PATH("r2ccl_path_bandwidth_bytes_per_second", "gauge",
		 "the throughput monitor's rate of the path while it has work (0: not measured)",
		 "%llu", (unsigned long long)x->rate_bps);
	PER_PATH("r2ccl_path_rtt_seconds", "gauge", "heartbeat round trip", "%.6f",
		 (double)x->rtt_us / 1e6);
	head(f, "r2ccl_path_state", "gauge", "1 for the path's health state, 0 for the others");
	for (size_t i = 0; i < hs->npaths; i++)
		for (size_t s = 0; s < sizeof(states) / sizeof(states[0]) && path_shown(&hs->paths[i]);
		     s++) {
			fputs("r2ccl_path_state{", f);
			nic_labels(f, d, (int)hs->paths[i].rail);
			fputs(",peer=\"", f);
			put_label(f, hs->paths[i].host);
			fprintf(f, "\",state=\"%s\"} %d\n", states[s],
				!strcmp(hs->paths[i].state, states[s]));
		}
	PER_PATH("r2ccl_path_state_changes_total", "counter", "health state changes of the path",
		 "%llu", (unsigned long long)x->changes);
	PER_PATH("r2ccl_path_failovers_total", "counter",
		 "times the path failed (its traffic moved to other rails)", "%llu",
		 (unsigned long long)x->failovers);
	PER_PATH("r2ccl_path_missed_heartbeats_total", "counter", "heartbeats missed on the path",
		 "%llu", (unsigned long long)x->missed_total);
}

/* The daemon's totals over every rail and path, and its re-plans. */
static void render_totals(FILE *f, const struct r2d_health_snap *hs)
{
	uint64_t fo = 0, missed = 0;

	for (size_t i = 0; i < hs->nrails; i++) {
		fo += hs->rails[i].failovers;
		missed += hs->rails[i].hb_missed;
	}
	head(f, "r2ccl_failovers_total", "counter", "path failures, every rail");
	fprintf(f, "r2ccl_failovers_total %llu\n", (unsigned long long)fo);
	head(f, "r2ccl_missed_heartbeats_total", "counter", "heartbeats missed, every path");
	fprintf(f, "r2ccl_missed_heartbeats_total %llu\n", (unsigned long long)missed);
	head(f, "r2ccl_replans_total", "counter",
	     "planning views committed (a communicator re-planned around a change)");
	fprintf(f, "r2ccl_replans_total %llu\n", (unsigned long long)hs->replans);
	head(f, "r2ccl_replan_duration_seconds", "summary",
	     "time from a proposed view to its commit (collectives held meanwhile)");
	fprintf(f, "r2ccl_replan_duration_seconds_sum %.6f\n", (double)hs->replan_us_sum / 1e6);
	fprintf(f, "r2ccl_replan_duration_seconds_count %llu\n",
		(unsigned long long)hs->replan_timed);
}

int r2d_metrics_render(struct r2d *d, char **out, size_t *len)
{
	struct r2_metrics *m = d->metrics;
	struct r2d_health_snap hs;
	struct r2_op_stats *ts = NULL;
	struct comm_copy *cs = NULL;
	uint32_t nts = 0;
	size_t ncs = 0;
	FILE *f;
	int r;

	*out = NULL;
	*len = 0;
	r = r2d_health_snapshot(d, &hs);
	if (r < 0)
		return r;
	r = copy_engine(d, &ts, &nts, &cs, &ncs);
	if (r < 0) {
		r2d_health_snap_free(&hs);
		return r;
	}
	f = open_memstream(out, len);
	if (!f) {
		r = -errno;
		goto out;
	}

	render_daemon(f, d, ncs);
	render_nics(f, d, &hs);
	render_pools(f, d);
	render_paths(f, d, &hs);
	render_totals(f, &hs);
	render_tenants(f, ts, nts);
	render_sched(f, d);
	render_comms(f, cs, ncs);
	head(f, "r2ccl_metrics_requests_total", "counter", "HTTP requests to the metrics listener");
	fprintf(f, "r2ccl_metrics_requests_total %llu\n",
		(unsigned long long)(m ? m->requests : 0));
	r = ferror(f) ? -EIO : 0;
	if (fclose(f) != 0 && !r)
		r = -EIO;
	if (r < 0) {
		free(*out);
		*out = NULL;
		*len = 0;
	}
out:
	free(ts);
	free(cs);
	r2d_health_snap_free(&hs);
	return r;
}

/* ---- rail overlap ---- */

static void close_interval(struct r2_metrics *m)
{
	struct r2d *d = m->d;
	int nr = d->rails ? d->rails->n : 0;
	uint64_t keys[R2_RAIL_USE_SLOTS];

	for (int r = 0; r < nr && r < R2_MAX_RAILS; r++) {
		int n = r2d_rails_take_usage(d, r, keys, R2_RAIL_USE_SLOTS);
		int k = n < R2_RAIL_USE_SLOTS ? n : R2_RAIL_USE_SLOTS;
		const char *seen[R2_RAIL_USE_SLOTS];
		uint32_t nt = 0;

		/* distinct tenants of those communicators (under d->lock: names only) */
		pthread_mutex_lock(&d->lock);
		for (int i = 0; i < k; i++)
			for (struct r2_comm *c = d->comms; c; c = c->next) {
				if (c->key != keys[i])
					continue;
				uint32_t j;
				for (j = 0; j < nt && strcmp(seen[j], c->tenant); j++)
					;
				if (j == nt)
					seen[nt++] = c->tenant;
				break;
			}
		pthread_mutex_unlock(&d->lock);
		m->overlap_comms[r] = (uint32_t)n;
		m->overlap_tenants[r] = nt;
	}
}

uint32_t r2d_metrics_rail_overlap(struct r2d *d, int rail, uint32_t *tenants)
{
	struct r2_metrics *m = d->metrics;

	if (!m || rail < 0 || rail >= R2_MAX_RAILS) {
		if (tenants)
			*tenants = 0;
		return 0;
	}
	if (tenants)
		*tenants = m->overlap_tenants[rail];
	return m->overlap_comms[rail];
}

/* ---- the textfile ---- */

static void write_textfile(struct r2_metrics *m, const char *path)
{
	char tmp[4096], *buf;
	size_t len;
	int fd, r;

	if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof(tmp))
		return;
	r = r2d_metrics_render(m->d, &buf, &len);
	if (r < 0) {
		log_warn("metrics_textfile: %s", strerror(-r));
		return;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_warn("metrics_textfile: cannot create %s: %s", tmp, strerror(errno));
		free(buf);
		return;
	}
	r = 0;
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			r = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (close(fd) < 0 && r >= 0)
		r = -errno;
	free(buf);
	if (r < 0 || rename(tmp, path) < 0) {
		log_warn("metrics_textfile: cannot write %s: %s", path,
			 strerror(r < 0 ? -r : errno));
		unlink(tmp);
	}
}

static void on_tick(uv_timer_t *t)
{
	struct r2_metrics *m = t->data;
	const char *path = r2_param_str(&m->d->params, P_METRICS_TEXTFILE);

	close_interval(m);
	if (path[0] && m->ticks++ % TEXTFILE_EVERY == 0)
		write_textfile(m, path);
}

/* ---- the HTTP responder: one request, one response, then close ---- */

static void conn_closed(uv_handle_t *h)
{
	struct mconn *c = h->data;

	if (--c->closing == 0) {
		c->m->nconns--;
		*c->pprev = c->next;
		if (c->next)
			c->next->pprev = c->pprev;
		free(c->resp);
		free(c);
	}
}

static void conn_close(struct mconn *c)
{
	if (c->closing)
		return;
	c->closing = 2;
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->timer, conn_closed);
	uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void on_written(uv_write_t *w, int status)
{
	(void)status;
	conn_close(w->data);
}

static void respond(struct mconn *c, int code, const char *reason, const char *ctype,
		    const char *body, size_t blen, bool with_body)
{
	char hdr[256];
	int h = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n",
			 code, reason, ctype, blen);
	size_t n = (size_t)h + (with_body ? blen : 0);

	c->answered = true;
	uv_read_stop((uv_stream_t *)&c->tcp);
	c->resp = malloc(n);
	if (!c->resp) {
		conn_close(c);
		return;
	}
	memcpy(c->resp, hdr, (size_t)h);
	if (with_body && blen)
		memcpy(c->resp + h, body, blen);
	uv_buf_t b = uv_buf_init(c->resp, (unsigned)n);
	c->wreq.data = c;
	if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0)
		conn_close(c);
}

#define TEXT "text/plain; charset=utf-8"

/* The request line and headers are complete in c->req: answer it. */
static void handle(struct mconn *c)
{
	char method[16], target[256], version[16];
	bool head_only;

	c->m->requests++;
	if (sscanf(c->req, "%15s %255s %15s", method, target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7)) {
		c->m->bad_requests++;
		respond(c, 400, "Bad Request", TEXT, "bad request\n", 12, true);
		return;
	}
	head_only = !strcmp(method, "HEAD");
	if (strcmp(method, "GET") && !head_only) {
		respond(c, 405, "Method Not Allowed", TEXT, "GET only\n", 9, true);
		return;
	}
	char *q = strchr(target, '?');
	if (q)
		*q = 0;
	if (!strcmp(target, "/")) {
		static const char page[] = "r2ccld: metrics at /metrics\n";
		respond(c, 200, "OK", TEXT, page, sizeof(page) - 1, !head_only);
		return;
	}
	if (strcmp(target, "/metrics")) {
		respond(c, 404, "Not Found", TEXT, "not found\n", 10, true);
		return;
	}
	char *body;
	size_t len;
	if (r2d_metrics_render(c->m->d, &body, &len) < 0) {
		respond(c, 500, "Internal Server Error", TEXT, "cannot render\n", 14, true);
		return;
	}
	respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body, len, !head_only);
	free(body);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct mconn *c = h->data;

	(void)hint;
	buf->base = c->req + c->n;
	buf->len = sizeof(c->req) - 1 - c->n;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct mconn *c = s->data;

	(void)buf;
	if (c->answered || c->closing)
		return;
	if (nread < 0) {
		conn_close(c);
		return;
	}
	c->n += (size_t)nread;
	c->req[c->n] = 0;
	if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
		handle(c);
		return;
	}
	if (c->n >= sizeof(c->req) - 1) {
		c->m->bad_requests++;
		respond(c, 431, "Request Header Fields Too Large", TEXT, "too large\n", 10, true);
	}
}

static void on_timeout(uv_timer_t *t)
{
	conn_close(t->data);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct r2_metrics *m = server->data;
	struct mconn *c;

	if (status < 0)
		return;
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->m = m;
	uv_tcp_init(m->d->loop, &c->tcp);
	uv_timer_init(m->d->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	m->nconns++;
	c->next = m->conns;
	if (c->next)
		c->next->pprev = &c->next;
	c->pprev = &m->conns;
	m->conns = c;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 || m->nconns > HTTP_MAX_CONNS) {
		conn_close(c);
		return;
	}
	uv_timer_start(&c->timer, on_timeout, HTTP_TIMEOUT_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		conn_close(c);
}

int r2d_metrics_parse_listen(const char *s, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(s, ':'), *ps = colon ? colon + 1 : s;
	char *end;
	long port;

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	port = strtol(ps, &end, 10);
	if (!*ps || *end || port < 1 || port > 65535)
		return -EINVAL;
	sa->sin_port = htons((uint16_t)port);
	if (!colon) {
		sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return 0;
	}
	if ((size_t)(colon - s) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	if (!host[0] || !strcmp(host, "*")) {
		sa->sin_addr.s_addr = htonl(INADDR_ANY);
		return 0;
	}
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

int r2d_metrics_start(struct r2d *d)
{
	const char *listen = r2_param_str(&d->params, P_METRICS_LISTEN);
	struct r2_metrics *m = calloc(1, sizeof(*m));
	struct sockaddr_in sa;
	int r;

	if (!m)
		return -ENOMEM;
	m->d = d;
	d->metrics = m;
	uv_timer_init(d->loop, &m->tick);
	m->tick.data = m;
	uv_timer_start(&m->tick, on_tick, METRICS_TICK_MS, METRICS_TICK_MS);
	if (!listen[0])
		return 0;
	r = r2d_metrics_parse_listen(listen, &sa);
	if (r < 0) {
		log_err("metrics_listen: '%s' is not PORT or IPV4:PORT", listen);
		return r;
	}
	uv_tcp_init(d->loop, &m->listener);
	m->listener.data = m;
	m->listening = true;
	r = uv_tcp_bind(&m->listener, (const struct sockaddr *)&sa, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&m->listener, 64, on_connection);
	if (r < 0) {
		log_err("metrics_listen: cannot listen on %s: %s", listen, uv_strerror(r));
		return r;
	}
	log_info("metrics at http://%s:%u/metrics", inet_ntoa(sa.sin_addr),
		 (unsigned)ntohs(sa.sin_port));
	return 0;
}

void r2d_metrics_close(struct r2d *d)
{
	struct r2_metrics *m = d->metrics;

	if (!m)
		return;
	uv_timer_stop(&m->tick);
	uv_close((uv_handle_t *)&m->tick, NULL);
	if (m->listening)
		uv_close((uv_handle_t *)&m->listener, NULL);
	m->listening = false;
	for (struct mconn *c = m->conns; c; c = c->next)
		conn_close(c);
}

void r2d_metrics_free(struct r2d *d)
{
	free(d->metrics);
	d->metrics = NULL;
}
