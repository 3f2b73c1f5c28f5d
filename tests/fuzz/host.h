/* SPDX-License-Identifier: MIT */
/*
 * One r2ccld "host" in the fuzzing process (the harnesses of tests/fuzz/):
 * a real struct r2d built as main.c builds it, with the registry's parameters,
 * a topology of one NIC per rail at 10.0.<rail>.<idx + 1>, the real engine
 * (dispatcher, executors) and the real rails and health over the loopback
 * provider (r2d_rails_start_on), its control loop a libuv loop that the
 * harness runs (fz_pump). Several hosts of one process reach each other over
 * loopback rails, as in tests/unit/engine_harness.c (which is built on Check;
 * this is the same set-up without it: a failure here aborts).
 */
#ifndef R2CCL_FUZZ_HOST_H
#define R2CCL_FUZZ_HOST_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/daemon.h"

#define FZ_MAX_HOSTS 4

struct fz_host {
	int idx;
	struct r2d d;
	uv_loop_t loop;
	uint64_t last_tick_ms;
};

/* Aborts with a message when cond is false (set-up, never the input). */
#define FZ_CHECK(cond)                                                                  \
	do {                                                                            \
		if (!(cond))                                                            \
			fz_fail(__FILE__, __LINE__, #cond);                             \
	} while (0)
_Noreturn void fz_fail(const char *file, int line, const char *what);

/* Host idx (0..FZ_MAX_HOSTS-1) with rails rail_mask (bit r: rail r), and
 * params: "name=value" strings, NULL-terminated (may be NULL), over the
 * defaults of the harnesses (as a configuration file: quiet log, short
 * timeouts, no request-rate
 * throttling); R2CCL_* of the environment over them (R2CCL_LOG_LEVEL=info). */
struct fz_host *fz_host_new(int idx, uint32_t rail_mask, const char *const *params);
/* Runs every host's loop once and, every 20 ms, the control tick (comm,
 * bootstrap and session timeouts), as server.c's tick does. */
void fz_pump_once(void);
/* fz_pump_once until cond(arg) or timeout_ms; cond's last value. */
bool fz_until(bool (*cond)(void *arg), void *arg, int timeout_ms);
uint64_t fz_now_ms(void);

#endif
