/* SPDX-License-Identifier: MIT */
/*
 * Requests from r2cclctl. A client that is not root sees only the sessions
 * and communicators of its own uid within its own tenant (cgroup): tenants,
 * and users sharing a cgroup, never see each other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/control.h"
#include "net/bufpool.h"
#include "engine/comm.h"
#include "config.h"
#include "net/health.h"
#include "log.h"
#include "r2ccl.pb-c.h"
#include "net/rails.h"
#include "util.h"

static bool mps_running(void)
{
	/* nvidia-cuda-mps-control -d leaves its pipe directory behind */
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	char path[256];

	snprintf(path, sizeof(path), "%s/control", dir && dir[0] ? dir : "/tmp/nvidia-mps");
	return access(path, F_OK) == 0;
}

/* The caps and their use, seen by s (under d->lock): per-uid ones count s's
 * uid, or for root the uid that uses the most; the others the whole daemon. */
#define NCAPS 13
static size_t status_caps(struct r2d *d, const struct r2_session *s, R2ccl__CapInfo *ci,
			  R2ccl__CapInfo **cp)
{
	const struct r2d_caps *k = &d->caps;
	uint64_t sess = 0, pre = 0, regs = 0, mem = 0, comms = 0, pend = 0;
	uint64_t u_sess = 0, u_pre = 0, u_regs = 0, u_mem = 0, u_comms = 0;
	bool root = s->uid == 0;
	size_t n = 0;

	for (const struct r2_session *t = d->sessions; t; t = t->next) {
		uint64_t ts = 0, tp = 0, tr = 0, tm = 0;
		sess++;
		pre += !t->hello_done;
		regs += t->nmem;
		mem += t->mem_bytes;
		if (!root && t->uid != s->uid)
			continue;
		/* root: the largest use of one uid (summed over its sessions) */
		for (const struct r2_session *o = d->sessions; o; o = o->next) {
			if (o->uid != t->uid)
				continue;
			ts += o->hello_done && o->uid != 0;
			tp += !o->hello_done;
			tr += o->nmem;
			tm += o->mem_bytes;
		}
		u_sess = R2_MAX(u_sess, ts);
		u_pre = R2_MAX(u_pre, tp);
		u_regs = R2_MAX(u_regs, tr);
		u_mem = R2_MAX(u_mem, tm);
		if (!root)
			break;
	}
	for (const struct r2_comm *c = d->comms; c; c = c->next) {
		uint64_t tc = 0;
		if (c->state == R2_COMM_DEAD)
			continue;
		comms++;
		for (int r = 0; r < c->nranks; r++)
			pend = R2_MAX(pend, c->m[r].npending);
		if (!root && c->owner_uid != s->uid)
			continue;
		for (const struct r2_comm *o = d->comms; o; o = o->next)
			tc += o->state != R2_COMM_DEAD && o->owner_uid == c->owner_uid;
		u_comms = R2_MAX(u_comms, tc);
	}
#define CAP(nm, lim, use)                                \
	do {                                             \
		r2ccl__cap_info__init(&ci[n]);           \
		ci[n].name = nm;                         \
		ci[n].limit = (lim);                     \
		ci[n].used = (use);                      \
		cp[n] = &ci[n];                          \
		n++;                                     \
	} while (0)
	CAP("max_sessions", k->sessions, root ? sess : u_sess);
	CAP("max_sessions_per_uid", k->sessions_per_uid, u_sess);
	CAP("max_prehello", k->prehello, root ? pre : u_pre);
	CAP("max_prehello_per_uid", k->prehello_per_uid, u_pre);
	CAP("max_frame_prehello", k->prehello_frame, 0);
	CAP("max_comms", k->comms, root ? comms : u_comms);
	CAP("max_comms_per_uid", k->comms_per_uid, u_comms);
	CAP("max_pending_ops", k->pending_ops, root ? pend : 0);
	CAP("max_regs", k->regs, root ? regs : u_regs);
	CAP("max_regs_per_uid", k->regs_per_uid, u_regs);
	CAP("max_mem", k->mem, root ? mem : u_mem);
	CAP("max_mem_per_uid", k->mem_per_uid, u_mem);
	CAP("max_req_rate", k->req_rate, 0);
#undef CAP
	return n;
}

/* What a status reply points to while it is packed: filled under d->lock,
 * freed after the reply went out. */
struct status_bufs {
	R2ccl__PoolInfo pools[R2_MAX_RAILS], *poolp[R2_MAX_RAILS];
	char pool_nic[R2_MAX_RAILS][64];
	char addrs[R2_TOPO_MAX_NICS][64];
	R2ccl__NicInfo *nics, **nicp;
	R2ccl__GpuInfo *gpus, **gpup;
	R2ccl__SessionInfo *sess, **sessp;
	R2ccl__CommInfo *comms, **commp;
	R2ccl__ParamInfo *params, **paramp;
	char (*uidhex)[40], (*pval)[256];
	char (*ctenant)[256]; /* comms' tenants: a comm may be freed (off this
			       * thread, under d->lock) before the reply is packed */
	R2ccl__CapInfo caps[NCAPS], *capp[NCAPS];
};

static int status_alloc(struct r2d *d, struct status_bufs *b)
{
	size_t ncomms = 0;

	for (struct r2_comm *c = d->comms; c; c = c->next)
		ncomms++;
	b->nics = calloc((size_t)d->topo.nnics + 1, sizeof(*b->nics));
	b->nicp = calloc((size_t)d->topo.nnics + 1, sizeof(*b->nicp));
	b->gpus = calloc((size_t)d->topo.ngpus + 1, sizeof(*b->gpus));
	b->gpup = calloc((size_t)d->topo.ngpus + 1, sizeof(*b->gpup));
	b->sess = calloc(d->nsessions + 1, sizeof(*b->sess));
	b->sessp = calloc(d->nsessions + 1, sizeof(*b->sessp));
	b->comms = calloc(ncomms + 1, sizeof(*b->comms));
	b->commp = calloc(ncomms + 1, sizeof(*b->commp));
	b->uidhex = calloc(ncomms + 1, sizeof(*b->uidhex));
	b->ctenant = calloc(ncomms + 1, sizeof(*b->ctenant));
	b->params = calloc(P_COUNT, sizeof(*b->params));
	b->paramp = calloc(P_COUNT, sizeof(*b->paramp));
	b->pval = calloc(P_COUNT, sizeof(*b->pval));
	return b->nics && b->nicp && b->gpus && b->gpup && b->sess && b->sessp && b->comms &&
			       b->commp && b->uidhex && b->ctenant && b->params && b->paramp && b->pval
		       ? 0
		       : -ENOMEM;
}

static void status_free(struct status_bufs *b)
{
	free(b->nics);
	free(b->nicp);
	free(b->gpus);
	free(b->gpup);
	free(b->sess);
	free(b->sessp);
	free(b->comms);
	free(b->commp);
	free(b->uidhex);
	free(b->ctenant);
	free(b->params);
	free(b->paramp);
	free(b->pval);
	free(b);
}

/* proxy buffer pools (bufpool.c), one per rail */
static void status_pools(struct r2d *d, R2ccl__StatusReply *rep, struct status_bufs *b)
{
	for (int i = 0; d->rails && i < d->rails->n; i++) {
		struct r2_bufpool_stats st;
		if (!d->rails->rail[i].pool)
			continue;
		r2_bufpool_stats(d->rails->rail[i].pool, &st);
		R2ccl__PoolInfo *pi = &b->pools[rep->n_pools];
		r2ccl__pool_info__init(pi);
		snprintf(b->pool_nic[rep->n_pools], sizeof(b->pool_nic[0]), "%s", st.name);
		pi->nic = b->pool_nic[rep->n_pools];
		pi->numa_node = st.numa_node;
		pi->bytes = st.bytes;
		pi->max_bytes = st.max_bytes;
		pi->in_use_bytes = st.in_use;
		pi->high_water_bytes = st.high_water;
		pi->buf_size = st.buf_size;
		pi->slab_size = st.slab_size;
		pi->gets_total = st.gets;
		pi->waits_total = st.waits;
		pi->timeouts_total = st.timeouts;
		pi->registrations = st.registrations;
		rep->pool_bytes += st.bytes;
		rep->pool_used_bytes += st.in_use;
		b->poolp[rep->n_pools++] = pi;
	}
	rep->pools = b->poolp;
}

static void status_hw(struct r2d *d, R2ccl__StatusReply *rep, struct status_bufs *b)
{
	for (int i = 0; i < d->topo.nnics; i++) {
		const struct r2_topo_nic *t = &d->topo.nics[i];
		R2ccl__NicInfo *ni = &b->nics[i];
		r2ccl__nic_info__init(ni);
		ni->name = (char *)t->name;
		ni->kind = (char *)r2_nic_kind_name(t->kind);
		ni->state = t->up ? "up" : "down";
		ni->speed_mbps = t->speed_mbps;
		ni->numa_node = t->numa_node;
		ni->selected = t->selected;
		ni->rail_reason = (char *)(t->why ? t->why : "");
		snprintf(b->addrs[i], sizeof(b->addrs[i]), "%s", t->addr);
		ni->address = b->addrs[i];
		ni->pci = (char *)t->pci;
		ni->mtu = t->mtu;
		for (int r = 0; d->rails && r < d->rails->n; r++)
			if (!strcmp(d->rails->rail[r].ifname, t->name) ||
			    !strcmp(d->rails->rail[r].ifname, t->netdev)) {
				ni->transport = (char *)d->rails->rail[r].ops->name;
				ni->rdma_device = d->rails->rail[r].rdma_dev;
				ni->rail_overlap = r2d_metrics_rail_overlap(
					d, r, &ni->rail_overlap_tenants);
			}
		b->nicp[i] = ni;
	}
	rep->n_nics = (size_t)d->topo.nnics;
	rep->nics = b->nicp;
	for (int i = 0; i < d->topo.ngpus; i++) {
		r2ccl__gpu_info__init(&b->gpus[i]);
		b->gpus[i].name = (char *)d->topo.gpus[i].name;
		b->gpus[i].pci = (char *)d->topo.gpus[i].pci;
		b->gpus[i].numa_node = d->topo.gpus[i].numa_node;
		b->gpup[i] = &b->gpus[i];
	}
	rep->n_gpus = (size_t)d->topo.ngpus;
	rep->gpus = b->gpup;
}

/* sessions and communicators: root sees all, others their uid's and tenant's */
static void status_clients(struct r2_session *s, R2ccl__StatusReply *rep,
			   struct status_bufs *b)
{
	struct r2d *d = s->d;
	bool all = s->uid == 0;
	size_t n = 0;

	for (struct r2_session *t = d->sessions; t; t = t->next) {
		R2ccl__SessionInfo *si = &b->sess[n];
		if (!all && (t->uid != s->uid || strcmp(t->tenant, s->tenant) != 0))
			continue;
		r2ccl__session_info__init(si);
		si->id = t->id;
		si->pid = t->pid;
		si->uid = t->uid;
		si->gid = t->gid;
		si->tenant = t->tenant;
		si->client_name = t->name;
		si->mem_regions = t->nmem;
		si->mem_bytes = t->mem_bytes;
		si->ops_total = t->ops_total;
		si->control_only = t->control_only;
		b->sessp[n++] = si;
	}
	rep->n_sessions = n;
	rep->sessions = b->sessp;
	n = 0;
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		R2ccl__CommInfo *ci = &b->comms[n];
		if (!all && (c->owner_uid != s->uid || strcmp(c->tenant, s->tenant) != 0))
			continue;
		r2ccl__comm_info__init(ci);
		ci->id = c->id;
		snprintf(b->uidhex[n], sizeof(b->uidhex[n]), "%016llx%016llx",
			 (unsigned long long)c->uid.host_id, (unsigned long long)c->uid.nonce);
		ci->uid = b->uidhex[n];
		ci->nranks = (uint32_t)c->nranks;
		ci->local_ranks = (uint32_t)(c->local_ranks ? c->local_ranks : c->joined);
		ci->joined = (uint32_t)c->joined;
		ci->state = (char *)r2d_comm_state_name(c->state);
		snprintf(b->ctenant[n], sizeof(b->ctenant[n]), "%s", c->tenant);
		ci->tenant = b->ctenant[n];
		ci->ops_total = c->ops_total;
		ci->bytes_total = c->bytes_total;
		ci->op_latency_ns_total = c->lat_ns_total;
		ci->nhosts = (uint32_t)c->nhosts;
		ci->mode = (char *)(c->mode >= 0 ? r2d_comm_mode_name(c->mode)
						  : r2_param_str(&d->params, P_MODE));
		b->commp[n++] = ci;
	}
	rep->n_comms = n;
	rep->comms = b->commp;
}

static void status_params(struct r2d *d, R2ccl__StatusReply *rep, struct status_bufs *b)
{
	for (int i = 0; i < P_COUNT; i++) {
		r2ccl__param_info__init(&b->params[i]);
		b->params[i].name = (char *)r2d_param_defs[i].name;
		r2_param_format(&d->params, i, b->pval[i], sizeof(b->pval[i]));
		b->params[i].value = b->pval[i];
		b->params[i].source = (char *)r2_param_source_name(d->params.v[i].src);
		b->paramp[i] = &b->params[i];
	}
	rep->n_params = P_COUNT;
	rep->params = b->paramp;
}

void r2d_ctl_status(struct r2_session *s, uint64_t req_id)
{
	struct r2d *d = s->d;
	R2ccl__StatusReply rep = R2CCL__STATUS_REPLY__INIT;
	struct status_bufs *b = calloc(1, sizeof(*b));

	pthread_mutex_lock(&d->lock);
	rep.req_id = req_id;
	rep.version = R2CCL_VERSION;
	rep.uptime_s = (r2_now_us() - d->start_us) / 1000000;
	rep.pid = getpid();
	rep.config_file = d->params.file ? d->params.file : "";
	rep.socket = (char *)r2_param_str(&d->params, P_SOCKET);
	rep.hostname = d->hostname;
	rep.cpus = (uint32_t)d->topo.ncpus;
	rep.numa_nodes = (uint32_t)d->topo.nnuma;
	rep.mps = mps_running();
	rep.ops_total = d->ops_total;
	rep.op_errors_total = d->op_errors_total;
	rep.quota_refusals = d->quota_refusals;
	if (!b || status_alloc(d, b) < 0) {
		rep.status = -ENOMEM;
		rep.error = "out of memory";
	} else {
		status_pools(d, &rep, b);
		status_hw(d, &rep, b);
		status_clients(s, &rep, b);
		status_params(d, &rep, b);
		rep.n_caps = status_caps(d, s, b->caps, b->capp);
		rep.caps = b->capp;
	}
	pthread_mutex_unlock(&d->lock);
	if (!rep.error)
		rep.error = "";
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &rep);
	if (b)
		status_free(b);
}

/* ---- resilience: drain/undrain, rebalance (health.h; rails and events:
 * ctl_health.c) ---- */

static void ctl_result(struct r2_session *s, uint64_t req_id, int status, const char *err)
{
	R2ccl__Result r = R2CCL__RESULT__INIT;

	r.req_id = req_id;
	r.status = status;
	r.error = (char *)(err ? err : "");
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_RESULT, &r);
}

int r2d_ctl_nic_admin(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__NicAdmin *m = r2ccl__nic_admin__unpack(NULL, f->len, f->payload);
	char err[160] = "";
	int r;

	if (!m)
		return -EPROTO;
	if (s->uid != 0) {
		r = -EPERM;
		snprintf(err, sizeof(err), "only root may drain or undrain a NIC");
	} else if (!m->nic || !m->nic[0]) {
		r = -EINVAL;
		snprintf(err, sizeof(err), "no NIC named");
	} else {
		r = r2d_health_drain(s->d, m->nic, m->drain, err, sizeof(err));
	}
	ctl_result(s, m->req_id, r, err);
	r2ccl__nic_admin__free_unpacked(m, NULL);
	return 0;
}

int r2d_ctl_rebalance(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__Rebalance *m = r2ccl__rebalance__unpack(NULL, f->len, f->payload);
	int r;

	if (!m)
		return -EPROTO;
	r = r2d_health_rebalance(s->d, m->comm_id, s->uid, s->tenant);
	ctl_result(s, m->req_id, r, r == -ENOENT ? "no such communicator" : "");
	r2ccl__rebalance__free_unpacked(m, NULL);
	return 0;
}
