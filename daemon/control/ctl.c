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

void r2d_ctl_status(struct r2_session *s, uint64_t req_id)
{
	struct r2d *d = s->d;
	R2ccl__StatusReply rep = R2CCL__STATUS_REPLY__INIT;
	R2ccl__NicInfo *nics = NULL, **nicp = NULL;
	R2ccl__GpuInfo *gpus = NULL, **gpup = NULL;
	R2ccl__SessionInfo *sess = NULL, **sessp = NULL;
	R2ccl__CommInfo *comms = NULL, **commp = NULL;
	R2ccl__ParamInfo *params = NULL, **paramp = NULL;
	char (*uidhex)[40] = NULL, (*pval)[256] = NULL, addrs[R2_TOPO_MAX_NICS][64];
	bool all = s->uid == 0;
	size_t n;

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
	/* proxy buffer pools (bufpool.c), one per rail */
	R2ccl__PoolInfo pools[R2_MAX_RAILS], *poolp[R2_MAX_RAILS];
	char pool_nic[R2_MAX_RAILS][64];
	for (int i = 0; d->rails && i < d->rails->n; i++) {
		struct r2_bufpool_stats st;
		if (!d->rails->rail[i].pool)
			continue;
		r2_bufpool_stats(d->rails->rail[i].pool, &st);
		R2ccl__PoolInfo *pi = &pools[rep.n_pools];
		r2ccl__pool_info__init(pi);
		snprintf(pool_nic[rep.n_pools], sizeof(pool_nic[0]), "%s", st.name);
		pi->nic = pool_nic[rep.n_pools];
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
		rep.pool_bytes += st.bytes;
		rep.pool_used_bytes += st.in_use;
		poolp[rep.n_pools++] = pi;
	}
	rep.pools = poolp;

	nics = calloc((size_t)d->topo.nnics + 1, sizeof(*nics));
	nicp = calloc((size_t)d->topo.nnics + 1, sizeof(*nicp));
	gpus = calloc((size_t)d->topo.ngpus + 1, sizeof(*gpus));
	gpup = calloc((size_t)d->topo.ngpus + 1, sizeof(*gpup));
	sess = calloc(d->nsessions + 1, sizeof(*sess));
	sessp = calloc(d->nsessions + 1, sizeof(*sessp));
	n = 0;
	for (struct r2_comm *c = d->comms; c; c = c->next)
		n++;
	comms = calloc(n + 1, sizeof(*comms));
	commp = calloc(n + 1, sizeof(*commp));
	uidhex = calloc(n + 1, sizeof(*uidhex));
	params = calloc(P_COUNT, sizeof(*params));
	paramp = calloc(P_COUNT, sizeof(*paramp));
	pval = calloc(P_COUNT, sizeof(*pval));
	if (!nics || !nicp || !gpus || !gpup || !sess || !sessp || !comms || !commp || !uidhex ||
	    !params || !paramp || !pval) {
		rep.status = -ENOMEM;
		rep.error = "out of memory";
		goto send;
	}
	for (int i = 0; i < d->topo.nnics; i++) {
		const struct r2_topo_nic *t = &d->topo.nics[i];
		R2ccl__NicInfo *ni = &nics[i];
		r2ccl__nic_info__init(ni);
		ni->name = (char *)t->name;
		ni->kind = (char *)r2_nic_kind_name(t->kind);
		ni->state = t->up ? "up" : "down";
		ni->speed_mbps = t->speed_mbps;
		ni->numa_node = t->numa_node;
		ni->selected = t->selected;
		snprintf(addrs[i], sizeof(addrs[i]), "%s", t->addr);
		ni->address = addrs[i];
		ni->pci = (char *)t->pci;
		ni->mtu = t->mtu;
		for (int r = 0; d->rails && r < d->rails->n; r++)
			if (!strcmp(d->rails->rail[r].ifname, t->name)) {
				ni->transport = (char *)d->rails->rail[r].ops->name;
				ni->rdma_device = d->rails->rail[r].rdma_dev;
				ni->rail_overlap = r2d_metrics_rail_overlap(
					d, r, &ni->rail_overlap_tenants);
			}
		nicp[i] = ni;
	}
	rep.n_nics = (size_t)d->topo.nnics;
	rep.nics = nicp;
	for (int i = 0; i < d->topo.ngpus; i++) {
		r2ccl__gpu_info__init(&gpus[i]);
		gpus[i].name = (char *)d->topo.gpus[i].name;
		gpus[i].pci = (char *)d->topo.gpus[i].pci;
		gpus[i].numa_node = d->topo.gpus[i].numa_node;
		gpup[i] = &gpus[i];
	}
	rep.n_gpus = (size_t)d->topo.ngpus;
	rep.gpus = gpup;
	n = 0;
	for (struct r2_session *t = d->sessions; t; t = t->next) {
		R2ccl__SessionInfo *si = &sess[n];
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
		sessp[n++] = si;
	}
	rep.n_sessions = n;
	rep.sessions = sessp;
	n = 0;
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		R2ccl__CommInfo *ci = &comms[n];
		if (!all && (c->owner_uid != s->uid || strcmp(c->tenant, s->tenant) != 0))
			continue;
		r2ccl__comm_info__init(ci);
		ci->id = c->id;
		snprintf(uidhex[n], sizeof(uidhex[n]), "%016llx%016llx",
			 (unsigned long long)c->uid.host_id, (unsigned long long)c->uid.nonce);
		ci->uid = uidhex[n];
		ci->nranks = (uint32_t)c->nranks;
		ci->local_ranks = (uint32_t)(c->local_ranks ? c->local_ranks : c->joined);
		ci->joined = (uint32_t)c->joined;
		ci->state = (char *)r2d_comm_state_name(c->state);
		ci->tenant = c->tenant;
		ci->ops_total = c->ops_total;
		ci->bytes_total = c->bytes_total;
		ci->op_latency_ns_total = c->lat_ns_total;
		ci->nhosts = (uint32_t)c->nhosts;
		ci->mode = (char *)(c->mode >= 0 ? r2d_comm_mode_name(c->mode)
						  : r2_param_str(&d->params, P_MODE));
		commp[n++] = ci;
	}
	rep.n_comms = n;
	rep.comms = commp;
	for (int i = 0; i < P_COUNT; i++) {
		r2ccl__param_info__init(&params[i]);
		params[i].name = (char *)r2d_param_defs[i].name;
		r2_param_format(&d->params, i, pval[i], sizeof(pval[i]));
		params[i].value = pval[i];
		params[i].source = (char *)r2_param_source_name(d->params.v[i].src);
		paramp[i] = &params[i];
	}
	rep.n_params = P_COUNT;
	rep.params = paramp;
send:
	pthread_mutex_unlock(&d->lock);
	if (!rep.error)
		rep.error = "";
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &rep);
	free(nics);
	free(nicp);
	free(gpus);
	free(gpup);
	free(sess);
	free(sessp);
	free(comms);
	free(commp);
	free(uidhex);
	free(params);
	free(paramp);
	free(pval);
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
