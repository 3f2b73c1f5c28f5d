// SPDX-License-Identifier: MIT
/* The in-process r2ccld host of the fuzzing harnesses (host.h). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "control/control.h"
#include "engine/comm.h"
#include "host.h"
#include "lbhost.h"

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
	const struct r2t_host_cfg cfg = { .idx = idx, .rail_mask = rail_mask, .defaults = defaults,
					  .params = params, .src = R2_PS_FILE, .name = "fuzz" };
	char err[256] = "";

	FZ_CHECK(h);
	FZ_CHECK(idx >= 0 && idx < FZ_MAX_HOSTS && !hosts[idx]);
	h->idx = idx;
	if (r2t_host_start(&h->d, &h->loop, &cfg, err, sizeof(err)))
		fz_fail(__FILE__, __LINE__, err);
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
