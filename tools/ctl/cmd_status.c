// SPDX-License-Identifier: MIT
/*
 * r2cclctl status, sessions, comms, nics: the daemon's status reply,
 * its sections described once for the table and the JSON.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* A rail shows its transport (and RDMA device), "yes" if it has none open. */
static const char *nic_rail(const struct col *col, const void *row, size_t idx, char *buf,
			    size_t len)
{
	const R2ccl__NicInfo *n = row;

	if (n->transport && n->transport[0])
		snprintf(buf, len, "%s%s%s", n->transport, n->rdma_device[0] ? " " : "",
			 n->rdma_device);
	else
		snprintf(buf, len, "%s", n->selected ? "yes" : "-");
	return buf;
}

#define NIC(f) offsetof(R2ccl__NicInfo, f)
static const struct col nic_cols[] = {
	{ "name", "NAME", 1, COL_STR, NIC(name) },
	{ "kind", "KIND", 2, COL_STR, NIC(kind) },
	{ "state", "STATE", 3, COL_STR, NIC(state) },
	{ "speed_mbps", ">SPEED", 4, COL_U64, NIC(speed_mbps), txt_speed },
	{ "numa_node", ">NUMA", 5, COL_I32, NIC(numa_node), txt_numa },
	{ "rail", "RAIL", 6, COL_BOOL, NIC(selected), nic_rail },
	{ "address", "ADDRESS", 7, COL_STR, NIC(address) },
	{ "pci", "PCI", 9, COL_STR, NIC(pci), NULL, NULL, COL_VERBOSE },
	{ "mtu", ">MTU", 8, COL_U32, NIC(mtu), txt_zero_dash, NULL, COL_VERBOSE },
	{ "transport", NULL, 0, COL_STR, NIC(transport) },
	{ "rdma_device", NULL, 0, COL_STR, NIC(rdma_device) },
	/* rail overlap (docs/operations.md, "Metrics"): communicators, and
	 * tenants, whose data used the rail in the last second */
	{ "rail_overlap", ">OVERLAP", 10, COL_U32, NIC(rail_overlap), txt_zero_dash },
	{ "rail_overlap_tenants", ">TENANTS", 11, COL_U32, NIC(rail_overlap_tenants),
	  txt_zero_dash, NULL, COL_VERBOSE },
	/* the default rule or the rails filter (docs/operations.md "NIC selection") */
	{ "rail_reason", "WHY", 12, COL_STR, NIC(rail_reason) },
};
static const struct section nics = { "nics", COLS(nic_cols) };

#define GPU(f) offsetof(R2ccl__GpuInfo, f)
static const struct col gpu_cols[] = {
	{ NULL, "GPU", 0, COL_U32, 0, txt_index },
	{ "name", "NAME", 0, COL_STR, GPU(name) },
	{ "pci", "PCI", 0, COL_STR, GPU(pci) },
	{ "numa_node", ">NUMA", 0, COL_I32, GPU(numa_node), txt_numa },
};
static const struct section gpus = { "gpus", COLS(gpu_cols) };

static const char *session_kind(const struct col *col, const void *row, size_t idx, char *buf,
				size_t len)
{
	return col_u64(col, row) ? "control" : "client";
}

#define SES(f) offsetof(R2ccl__SessionInfo, f)
static const struct col session_cols[] = {
	{ "id", ">ID", 0, COL_U64, SES(id) },
	{ "pid", ">PID", 0, COL_I32, SES(pid) },
	{ "uid", ">UID", 0, COL_U32, SES(uid) },
	{ "gid", ">GID", 0, COL_U32, SES(gid), NULL, NULL, COL_VERBOSE },
	{ "tenant", "TENANT", 0, COL_STR, SES(tenant) },
	{ "client_name", "NAME", 0, COL_STR, SES(client_name) },
	{ "control_only", "KIND", 0, COL_BOOL, SES(control_only), session_kind, NULL,
	  COL_VERBOSE },
	{ "mem_regions", ">REGIONS", 0, COL_U32, SES(mem_regions) },
	{ "mem_bytes", ">BYTES", 0, COL_U64, SES(mem_bytes), txt_bytes },
	{ "ops_total", ">OPS", 0, COL_U64, SES(ops_total) },
};
static const struct section sessions = { "sessions", COLS(session_cols) };

#define COMM(f) offsetof(R2ccl__CommInfo, f)
static const struct col comm_cols[] = {
	{ "id", ">ID", 0, COL_U32, COMM(id) },
	{ "uid", "UID", 0, COL_STR, COMM(uid) },
	{ "nranks", ">NRANKS", 0, COL_U32, COMM(nranks) },
	{ "local_ranks", ">LOCAL", 0, COL_U32, COMM(local_ranks) },
	{ "joined", ">JOINED", 0, COL_U32, COMM(joined) },
	{ "nhosts", ">HOSTS", 0, COL_U32, COMM(nhosts) },
	{ "state", "STATE", 0, COL_STR, COMM(state) },
	{ "mode", "MODE", 0, COL_STR, COMM(mode) },
	{ "tenant", "TENANT", 0, COL_STR, COMM(tenant) },
	{ "ops_total", ">OPS", 0, COL_U64, COMM(ops_total) },
};
static const struct section comms = { "comms", COLS(comm_cols) };

/* Proxy buffer pools, one per rail (daemon/bufpool.c). */
#define POOL(f) offsetof(R2ccl__PoolInfo, f)
static const struct col pool_cols[] = {
	{ "nic", "NIC", 0, COL_STR, POOL(nic) },
	{ "numa_node", ">NUMA", 0, COL_I32, POOL(numa_node), txt_numa },
	{ "bytes", ">SIZE", 0, COL_U64, POOL(bytes), txt_bytes },
	{ "max_bytes", ">MAX", 0, COL_U64, POOL(max_bytes), txt_bytes },
	{ "in_use_bytes", ">IN USE", 0, COL_U64, POOL(in_use_bytes), txt_bytes },
	{ "high_water_bytes", ">HIGH", 0, COL_U64, POOL(high_water_bytes), txt_bytes },
	{ "buf_size", ">BUFFER", 0, COL_U64, POOL(buf_size), txt_bytes },
	{ "slab_size", NULL, 0, COL_U64, POOL(slab_size) },
	{ "gets_total", NULL, 0, COL_U64, POOL(gets_total) },
	{ "waits_total", ">WAITS", 0, COL_U64, POOL(waits_total) },
	{ "timeouts_total", ">TIMEOUTS", 0, COL_U64, POOL(timeouts_total) },
	{ "registrations", NULL, 0, COL_U32, POOL(registrations) },
};
static const struct section pools = { "pools", COLS(pool_cols) };

#define PARAM(f) offsetof(R2ccl__ParamInfo, f)
static const struct col param_cols[] = {
	{ "name", "PARAMETER", 0, COL_STR, PARAM(name) },
	{ "value", "VALUE", 0, COL_STR, PARAM(value), txt_raw },
	{ "source", "SOURCE", 0, COL_STR, PARAM(source) },
};
static const struct section params = { "params", COLS(param_cols) };

/* The caps in force and their use (docs/security.md). */
#define CAP(f) offsetof(R2ccl__CapInfo, f)
static const struct col cap_cols[] = {
	{ "name", "CAP", 0, COL_STR, CAP(name) },
	{ "limit", ">LIMIT", 0, COL_U64, CAP(limit) },
	{ "used", ">USED", 0, COL_U64, CAP(used) },
};
static const struct section caps = { "caps", COLS(cap_cols) };

/* The daemon's own block of status --json (its text is print_daemon's). */
#define ST(f) offsetof(R2ccl__StatusReply, f)
static const struct col daemon_cols[] = {
	{ "version", NULL, 0, COL_STR, ST(version) },
	{ "pid", NULL, 0, COL_I32, ST(pid) },
	{ "uptime_s", NULL, 0, COL_U64, ST(uptime_s) },
	{ "hostname", NULL, 0, COL_STR, ST(hostname) },
	{ "config_file", NULL, 0, COL_STR, ST(config_file) },
	{ "socket", NULL, 0, COL_STR, ST(socket) },
	{ "cpus", NULL, 0, COL_U32, ST(cpus) },
	{ "numa_nodes", NULL, 0, COL_U32, ST(numa_nodes) },
	{ "mps", NULL, 0, COL_BOOL, ST(mps) },
	{ "pool_bytes", NULL, 0, COL_U64, ST(pool_bytes) },
	{ "pool_used_bytes", NULL, 0, COL_U64, ST(pool_used_bytes) },
	{ "ops_total", NULL, 0, COL_U64, ST(ops_total) },
	{ "op_errors_total", NULL, 0, COL_U64, ST(op_errors_total) },
	{ "quota_refusals", NULL, 0, COL_U64, ST(quota_refusals) },
};
static const struct section daemon_block = { "daemon", COLS(daemon_cols) };

/* The daemon's own block of status, as "label: value" lines. */
static void print_daemon(const R2ccl__StatusReply *st)
{
	char *host = safe_text(or_dash(st->hostname));
	char *ver = safe_text(or_dash(st->version));
	char b1[32], b2[32];

	printf("r2ccld %s on %s: running\n", ver, host);
	free(host);
	free(ver);
	kv("pid", "%d", st->pid);
	kv("uptime", "%s", fmt_duration(st->uptime_s, b1, sizeof(b1)));
	kv("config", "%s", st->config_file && st->config_file[0] ? st->config_file
								  : "(none, defaults)");
	kv("socket", "%s", or_dash(st->socket));
	kv("cpus", "%u (%u NUMA node%s)", st->cpus, st->numa_nodes,
	   st->numa_nodes == 1 ? "" : "s");
	if (st->n_gpus)
		kv("gpus", "%zu, MPS %s%s", st->n_gpus, st->mps ? "on" : "off",
		   st->mps ? "" : " (run r2ccld and its clients under MPS, see the operations guide)");
	else
		kv("mps", "%s", st->mps ? "on" : "off");
	kv("pool", "%s used of %s", fmt_bytes(st->pool_used_bytes, b1, sizeof(b1)),
	   fmt_bytes(st->pool_bytes, b2, sizeof(b2)));
	kv("operations", "%" PRIu64 " (%" PRIu64 " failed)", st->ops_total, st->op_errors_total);
	kv("refused at a cap", "%" PRIu64 " (caps: r2cclctl status -v)", st->quota_refusals);
	kv("sessions", "%zu", st->n_sessions);
	kv("comms", "%zu", st->n_comms);
}

/* One section of status: with --json always, in the text when shown (a title
 * line before its table). */
static void status_section(struct ctl *c, struct jw *j, bool shown, const char *title,
			   const struct section *s, void *const *rows, size_t n)
{
	if (c->json) {
		section_json(j, s, rows, n);
	} else if (shown) {
		printf("\n%s:\n", title);
		section_table(s, rows, n, c->verbose);
	}
}

int cmd_status(struct ctl *c, int argc, char **argv)
{
	R2ccl__StatusReply *st = NULL;
	struct jw j;
	int r = get_status(c, &st);

	if (r)
		return r;
	if (c->json) {
		jw_begin(&j);
		section_object(&j, &daemon_block, st);
	} else {
		print_daemon(st);
	}
	status_section(c, &j, true, "NICs", &nics, (void *const *)st->nics, st->n_nics);
	status_section(c, &j, st->n_gpus, "GPUs", &gpus, (void *const *)st->gpus, st->n_gpus);
	status_section(c, &j, st->n_sessions, "Sessions", &sessions, (void *const *)st->sessions,
		       st->n_sessions);
	status_section(c, &j, st->n_comms, "Communicators", &comms, (void *const *)st->comms,
		       st->n_comms);
	status_section(c, &j, st->n_pools, "Proxy buffer pools", &pools,
		       (void *const *)st->pools, st->n_pools);
	status_section(c, &j, c->verbose, "Caps (docs/security.md)", &caps,
		       (void *const *)st->caps, st->n_caps);
	status_section(c, &j, c->verbose, "Parameters", &params, (void *const *)st->params,
		       st->n_params);
	if (c->json)
		jw_end(&j);
	r2ccl__status_reply__free_unpacked(st, NULL);
	return EXIT_OK;
}

/* sessions, comms, nics: one section of the status reply. */
int cmd_section(struct ctl *c, int argc, char **argv)
{
	R2ccl__StatusReply *st = NULL;
	int r = get_status(c, &st);

	if (r)
		return r;
	if (!strcmp(c->cmd, "sessions"))
		section_print(c, &sessions, (void *const *)st->sessions, st->n_sessions);
	else if (!strcmp(c->cmd, "comms"))
		section_print(c, &comms, (void *const *)st->comms, st->n_comms);
	else
		section_print(c, &nics, (void *const *)st->nics, st->n_nics);
	r2ccl__status_reply__free_unpacked(st, NULL);
	return EXIT_OK;
}
