/* SPDX-License-Identifier: MIT */
/*
 * One r2ccld "host" inside a test process, set up as main.c sets one up: the
 * registry's parameters, a topology of one NIC per rail at
 * 10.0.<rail>.<idx + 1> (no GPUs), the real engine (dispatcher, executors)
 * and the real rails and health over the loopback provider; its control loop
 * is a libuv loop the caller runs. Several hosts of one process reach each
 * other over loopback rails. Shared by the engine's unit tests
 * (tests/unit/engine_harness.c, on Check) and the fuzzers (tests/fuzz/host.c).
 */
#ifndef R2CCL_TEST_LBHOST_H
#define R2CCL_TEST_LBHOST_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/daemon.h"

struct r2t_host_cfg {
	int idx;                     /* the host's number: its addresses, host_id */
	uint32_t rail_mask;          /* bit r: a NIC on rail r (rails 0..7) */
	const char *const *defaults; /* "name=value", NULL-terminated; may be NULL */
	const char *const *params;   /* the same, over the defaults */
	enum r2_param_source src;    /* what both are set as */
	const char *name;            /* hostname: <name><idx> */
};

/* Sets up d (zeroed by the caller) and loop, then R2CCL_* of the environment
 * over the parameters, and starts the engine and the rails. 0, or -1 with
 * err saying which part failed. */
int r2t_host_start(struct r2d *d, uv_loop_t *loop, const struct r2t_host_cfg *cfg, char *err,
		   size_t errlen);

#endif
