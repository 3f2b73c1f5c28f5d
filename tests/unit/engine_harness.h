/* SPDX-License-Identifier: MIT */
/*
 * A cluster of r2ccld "hosts" in one test process, for the unit tests of the
 * engine, health, detour and bootstrap code (test_engine*.c). Each host is a
 * real struct r2d: its parameters from the registry's defaults, a topology
 * with one NIC per rail, the real engine (dispatcher, executors) and the real
 * rails and health over the loopback provider (transport/loopback.h,
 * r2d_rails_start_on), its control loop a libuv loop that the test thread
 * runs (th_pump). Rail r of host i is at 10.0.r.(i+1): hosts share a rail
 * when both have it. Clients are fake submission sources (engine/source.h):
 * a ring in plain memory, memory regions in plain memory, and the
 * completions and CommInit replies recorded for the test. No root, no
 * namespaces, no socket to another process.
 */
#ifndef R2CCL_ENGINE_HARNESS_H
#define R2CCL_ENGINE_HARNESS_H

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/daemon.h"
#include "engine/comm.h"
#include "net/rails.h"
#include "transport/loopback.h"

#define TH_MAX_HOSTS 8
#define TH_MAX_SESS 8
#define TH_MAX_MEM 8
#define TH_MAX_DONE 512
#define TH_TIMEOUT 2 /* th_wait's status when nothing came in time */

struct th_host;

/* Each ck_assert writes to Check's pipe (fork mode): loops over elements
 * check with this, which calls Check only when cond fails. */
#define TH_CHECK(cond, ...)                      \
	do {                                     \
		if (!(cond))                     \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)

struct th_sess {
	struct r2_session s; /* what the engine sees */
	struct th_host *h;
	pthread_mutex_t lock;
	struct {
		uint64_t tag;
		int status;
	} done[TH_MAX_DONE];
	int ndone;
	bool init_done; /* a CommInit reply came */
	int init_status;
	uint32_t comm_id; /* the member's handle */
	uint32_t nhosts;
	int nresults; /* Result replies (CommDestroy, CommReason) */
	int result_status;
	char result_error[192];
	struct r2_memreg mem[TH_MAX_MEM];
	int nmem;
	uint64_t next_tag;
	bool gone; /* th_sess_die: its client went away */
};

struct th_host {
	int idx;
	struct r2d d;
	uv_loop_t loop;
	struct th_sess *sess[TH_MAX_SESS];
	int nsess;
	uint64_t last_tick_us;
};

/* Host idx (0..TH_MAX_HOSTS-1) with rails rail_mask (bit r: rail r), and
 * params: "name=value" strings, NULL-terminated (may be NULL), applied over
 * the defaults th_host_new sets for tests (short heartbeats and timeouts). */
struct th_host *th_host_new(int idx, uint32_t rail_mask, const char *const *params);
/* Set by a suite (test_engine.c, test_engine_faults.c, whose tests about
 * silence set their own hb_misses): paths are judged silent after 500 ms
 * instead of 60 (send stalls: 40 ms), so that a busy 2-core machine, which
 * can starve a rails thread that long, fails none of them falsely (an
 * AllReduce then ended with R2CCL_E_PEER_GONE: "no rail left";
 * test_detour_through_third_host under a parallel unit suite, 2026-12-08). */
extern bool th_slow_silence;
/* Stops and frees the host; checks that nothing leaked (every session and
 * memory region back to the harness's own reference, the loop closed). */
void th_host_free(struct th_host *h);
/* The host's transport instance on rail r (for loopback.h's faults). */
struct r2_tp *th_tp(struct th_host *h, int r);

struct th_sess *th_sess_new(struct th_host *h);
/* The session's client dies (as the control layer sees a socket close):
 * its ranks leave their communicators. */
void th_sess_die(struct th_sess *s);
/* A memory region of size bytes (zeroed): its id; *addr its address. */
uint32_t th_mem(struct th_sess *s, uint64_t size, void **addr);
/* A unique id rooted at host h (as r2ccl_get_unique_id gives). */
void th_uid(struct th_host *h, struct r2_uid *uid);
/* CommInit of rank of nranks on uid (the reply comes later: th_wait_init). */
void th_init(struct th_sess *s, const struct r2_uid *uid, int nranks, int rank);
/* Runs the loops until every session in ss[0..n) has its CommInit reply;
 * false after timeout_ms. */
bool th_wait_init(struct th_sess **ss, int n, int timeout_ms);

/* Submits an operation (as libr2ccl's ring would): its tag. */
uint64_t th_submit(struct th_sess *s, uint32_t opcode, uint64_t count, uint32_t dtype,
		   uint32_t redop, int root, uint32_t send_mem, uint32_t recv_mem);
/* The status of tag's completion, running the loops up to timeout_ms;
 * TH_TIMEOUT when none came. */
int th_wait(struct th_sess *s, uint64_t tag, int timeout_ms);

/* nhosts hosts (0..nhosts-1) on rails rail_mask with params, rph ranks
 * each, one communicator formed through the bootstrap: the sessions in rank
 * order in ss[]; checks every CommInit reply. */
void th_cluster(struct th_host **hs, int nhosts, int rph, uint32_t rail_mask,
		struct th_sess **ss, const char *const *params);
/* th_host_free of hs[n-1] down to hs[0]. */
void th_free_all(struct th_host **hs, int n);

/* One case per test, each forked with a 60 s limit (CK_RUN_CASE=<test>
 * runs one); th_run(suite) runs them all: main's exit status. */
#define TH_ADD(s, t)                                \
	do {                                        \
		TCase *tc_ = tcase_create(#t);      \
		tcase_set_timeout(tc_, 60);         \
		tcase_add_test(tc_, t);             \
		suite_add_tcase(s, tc_);            \
	} while (0)
int th_run(Suite *s);

/* Runs every host's loop (and the control tick) for ms. */
void th_pump(int ms);
/* Runs the loops until cond(arg) or timeout_ms: cond's last value. */
bool th_until(bool (*cond)(void *arg), void *arg, int timeout_ms);
uint64_t th_now_ms(void);

#endif
