// SPDX-License-Identifier: MIT
/* The in-process r2ccld host of the fuzzing harnesses (host.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control/control.h"
#include "engine/comm.h"
#include "host.h"
#include "log.h"
#include "net/rails.h"
#include "transport/loopback.h"

extern char **environ;
static struct fz_host *hosts[FZ_MAX_HOSTS];

_Noreturn void fz_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: harness set-up failed: %s\n", file, line, what);
	abort();
}

uint64_t fz_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void set_param(struct fz_host *h, const char *kv)
{
	char key[64], err[256] = "";
	const char *eq = strchr(kv, '=');

	FZ_CHECK(eq);
	snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
	if (r2_params_set(&h->d.params, key, eq + 1, R2_PS_FILE, err, sizeof(err)) < 0) {
		fprintf(stderr, "parameter %s: %s\n", kv, err);
		abort();
	}
}

/* One NIC per rail of the mask, at 10.0.<rail>.<idx + 1>; no GPUs. */
static void topology(struct fz_host *h, uint32_t rail_mask)
{
	struct r2_topology *t = &h->d.topo;

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
		snprintf(n->addr, sizeof(n->addr), "10.0.%d.%d", r, h->idx + 1);
	}
	for (int g = 0; g < R2_TOPO_MAX_GPUS; g++)
		for (int i = 0; i < R2_TOPO_MAX_NICS; i++)
			t->gpu_nic_dist[g][i] = -1;
	FZ_CHECK(r2_topology_select(t, "") == t->nnics);
}

struct fz_host *fz_host_new(int idx, uint32_t rail_mask, const char *const *params)
{
	/* quiet (a warning per malformed input would be most of the time
	 * spent), short timeouts so state the input left behind ends soon, and
	 * no throttling of requests (the harness feeds one session as fast as
	 * it can; max_req_rate's own code still runs) */
	static const char *const defaults[] = {
		"log_level=err",	 "hb_interval=200000",	  "hb_misses=3",
		"peer_timeout_ms=3000",	 "recover_stable_ms=200", "bootstrap_timeout_ms=500",
		"op_timeout_ms=500",	 "reduce_threads=1",	  "apply_threads=0",
		"spin_us=0",		 "chunk_size=64K",	  "inline_max=4K",
		"proxy_pool_max=16M",	 "proxy_buf_size=1M",	  "tcp_warmup=0",
		"max_req_rate=1000000",	 NULL
	};
	struct fz_host *h = calloc(1, sizeof(*h));
	char err[256] = "";
	int lvl;

	FZ_CHECK(h);
	FZ_CHECK(idx >= 0 && idx < FZ_MAX_HOSTS && !hosts[idx]);
	h->idx = idx;
	h->d.listen_fd = -1;
	pthread_mutex_init(&h->d.lock, NULL);
	FZ_CHECK(r2_params_init(&h->d.params, r2d_param_defs, P_COUNT, err, sizeof(err)) == 0);
	for (int i = 0; defaults[i]; i++)
		set_param(h, defaults[i]);
	for (int i = 0; params && params[i]; i++)
		set_param(h, params[i]);
	FZ_CHECK(r2_params_load_env(&h->d.params, environ, NULL, NULL, err, sizeof(err)) == 0);
	if (r2_log_level_parse(r2_param_str(&h->d.params, P_LOG_LEVEL), &lvl) == 0)
		r2_log_set_level(lvl);
	snprintf(h->d.hostname, sizeof(h->d.hostname), "fuzz%d", idx);
	h->d.host_id = 0x1000 + (uint64_t)idx;
	h->d.next_session_id = 1;
	h->d.next_comm_id = 1;
	h->d.start_us = fz_now_ms() * 1000;
	topology(h, rail_mask);
	r2d_caps_update(&h->d);
	FZ_CHECK(uv_loop_init(&h->loop) == 0);
	h->d.loop = &h->loop;
	FZ_CHECK(r2d_engine_start(&h->d) == 0);
	FZ_CHECK(r2d_rails_start_on(&h->d, &r2_tp_loopback_ops) == 0);
	hosts[idx] = h;
	return h;
}

void fz_pump_once(void)
{
	uint64_t now = fz_now_ms();

	for (int i = 0; i < FZ_MAX_HOSTS; i++) {
		struct fz_host *h = hosts[i];
		if (!h)
			continue;
		uv_run(&h->loop, UV_RUN_NOWAIT);
		if (now - h->last_tick_ms >= 20) { /* server.c's tick */
			h->last_tick_ms = now;
			r2d_comm_tick(&h->d);
			r2d_sessions_tick(&h->d, now * 1000);
		}
	}
}

bool fz_until(bool (*cond)(void *arg), void *arg, int timeout_ms)
{
	uint64_t until = fz_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if (cond(arg))
			return true;
		if (fz_now_ms() >= until)
			return cond(arg);
		fz_pump_once();
		usleep(100);
	}
}
