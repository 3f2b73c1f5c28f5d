/* SPDX-License-Identifier: MIT */
/* One r2ccld host over loopback rails in a test process (lbhost.h). */
#include "lbhost.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "control/control.h"
#include "engine/comm.h"
#include "log.h"
#include "net/rails.h"
#include "transport/loopback.h"
#include "util.h"

extern char **environ;

static int set_list(struct r2d *d, const char *const *kvs, enum r2_param_source src, char *err,
		    size_t errlen)
{
	for (int i = 0; kvs && kvs[i]; i++) {
		char key[64], why[256] = "";
		const char *eq = strchr(kvs[i], '=');
		if (!eq) {
			r2_seterr(err, errlen, "parameter %s: no '='", kvs[i]);
			return -1;
		}
		snprintf(key, sizeof(key), "%.*s", (int)(eq - kvs[i]), kvs[i]);
		if (r2_params_set(&d->params, key, eq + 1, src, why, sizeof(why)) < 0) {
			r2_seterr(err, errlen, "parameter %s: %s", kvs[i], why);
			return -1;
		}
	}
	return 0;
}

static int topology(struct r2_topology *t, int idx, uint32_t rail_mask)
{
	memset(t, 0, sizeof(*t));
	t->ncpus = t->ncores = 2;
	t->nsockets = t->nnuma = 1;
	for (int r = 0; r < 8; r++) {
		struct r2_topo_nic *n;
		if (!(rail_mask & (1u << r)))
			continue;
		n = &t->nics[t->nnics++];
		snprintf(n->name, sizeof(n->name), "lb%d", r);
		n->kind = R2_NIC_ETHERNET;
		n->numa_node = -1;
		n->up = true;
		n->speed_mbps = 100000;
		n->port = -1;
		snprintf(n->addr, sizeof(n->addr), "10.0.%d.%d", r, idx + 1);
	}
	for (int g = 0; g < R2_TOPO_MAX_GPUS; g++)
		for (int i = 0; i < R2_TOPO_MAX_NICS; i++)
			t->gpu_nic_dist[g][i] = -1;
	return r2_topology_select(t, "") == t->nnics ? 0 : -1;
}

int r2t_host_start(struct r2d *d, uv_loop_t *loop, const struct r2t_host_cfg *cfg, char *err,
		   size_t errlen)
{
	char why[256] = "";
	int lvl;

	d->listen_fd = -1;
	pthread_mutex_init(&d->lock, NULL);
	if (r2_params_init(&d->params, r2d_param_defs, P_COUNT, why, sizeof(why))) {
		r2_seterr(err, errlen, "parameters: %s", why);
		return -1;
	}
	if (set_list(d, cfg->defaults, cfg->src, err, errlen) ||
	    set_list(d, cfg->params, cfg->src, err, errlen))
		return -1;
	/* R2CCL_* of the environment last (R2CCL_LOG_LEVEL=debug to look) */
	if (r2_params_load_env(&d->params, environ, NULL, NULL, why, sizeof(why))) {
		r2_seterr(err, errlen, "environment: %s", why);
		return -1;
	}
	if (r2_log_level_parse(r2_param_str(&d->params, P_LOG_LEVEL), &lvl) == 0)
		r2_log_set_level(lvl); /* as config.c does */
	snprintf(d->hostname, sizeof(d->hostname), "%s%d", cfg->name, cfg->idx);
	d->host_id = 0x1000 + (uint64_t)cfg->idx;
	d->next_session_id = 1;
	d->next_comm_id = 1;
	d->start_us = r2_now_us();
	if (topology(&d->topo, cfg->idx, cfg->rail_mask)) {
		r2_seterr(err, errlen, "topology: not every loopback NIC selected");
		return -1;
	}
	r2d_caps_update(d); /* the per-uid caps, sized as config.c sizes them */
	if (uv_loop_init(loop)) {
		r2_seterr(err, errlen, "uv_loop_init failed");
		return -1;
	}
	d->loop = loop;
	if (r2d_engine_start(d)) {
		r2_seterr(err, errlen, "r2d_engine_start failed");
		return -1;
	}
	if (r2d_rails_start_on(d, &r2_tp_loopback_ops)) {
		r2_seterr(err, errlen, "r2d_rails_start_on failed");
		return -1;
	}
	return 0;
}
