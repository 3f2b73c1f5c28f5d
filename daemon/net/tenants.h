/* SPDX-License-Identifier: MIT */
/*
 * The host's tenants on the rails: the scheduler (sched.h) behind one lock,
 * between the rail phase's data chunks and the transports.
 *
 * r2d_rails_send_tenant() queues a data chunk in its tenant's queue of the
 * rail; chunks leave for the transport in the scheduler's order while their
 * peer's connection on the rail has fewer than sched_window bytes handed to
 * the transport and not yet written (their R2_TPC_SEND not come): a peer
 * that stalls holds back its own chunks only (and, within a tenant, those
 * behind them in its queue). A queued chunk is "posted" for the
 * engine: its R2_TPC_SEND comes as for any post, also when the connection
 * fails while it waits (status -ENOTCONN: the engine re-sends it). With
 * sched = off chunks go straight to the transport, in the order posted, as
 * before the scheduler (bytes still counted per tenant).
 *
 * Any thread; the tenant table also from the loop (configuration, r2cclctl).
 */
#ifndef R2CCL_NET_TENANTS_H
#define R2CCL_NET_TENANTS_H

#include <stdbool.h>
#include <stdint.h>

#include "net/sched.h"
#include "transport/transport.h"

struct r2d;
struct r2_req_slot; /* base/daemon.h */

/* One row of `r2cclctl tenants`. */
struct r2_tenant_row {
	int index; /* in the table (r2d_tenants_of) */
	struct r2_tenant_policy pol;
	bool dynamic;
	uint64_t rate_bps, limit_bps, reserve_bps, burst_bytes;
	uint64_t bytes, chunks, bytes_rail[R2_SCHED_MAX_RAILS];
	/* bytes per second over the last whole second (the rails thread takes
	 * them once a second) */
	uint64_t bytes_per_s, bytes_per_s_rail[R2_SCHED_MAX_RAILS];
	uint32_t queued;
	uint64_t queued_bytes, throttled_us, max_wait_us;
	uint64_t changed_us; /* last policy change (r2_now_us) */
	/* proxy buffers its chunks hold: now, the most at once, and the takes
	 * refused at its max_proxy (the chunk waited for its own to come back) */
	uint64_t proxy_bytes, proxy_high, proxy_waits;
	uint32_t ops_open; /* operations submitted and not completed */
	uint64_t req_paced; /* its sessions held back at its max_req_rate */
};

/* The table exists from the configuration on (idempotent); freed with the
 * rails (chunks still queued are dropped: their operations are gone). */
int r2d_tenants_init(struct r2d *d);
void r2d_tenants_free(struct r2d *d);
/* sched = on|off, quantum, prio_run, window, sched_move (from the
 * parameters). */
void r2d_tenants_configure(struct r2d *d, bool on, uint32_t quantum, uint64_t prio_run,
			   uint64_t window, bool move);
bool r2d_tenants_on(struct r2d *d);
int r2d_tenants_policy_set(struct r2d *d, const struct r2_tenant_policy *p);
/* The policy of the entry named name (false: none). */
bool r2d_tenants_policy_get(struct r2d *d, const char *name, struct r2_tenant_policy *p);
/* The policy of tenant t (false: no such tenant). */
bool r2d_tenants_policy_at(struct r2d *d, int t, struct r2_tenant_policy *p);
/* Some tenant of the table is of class cls. */
bool r2d_tenants_has_class(struct r2d *d, enum r2_tclass cls);
/* The tenant (index) of a cgroup path, made on first use (sched.h). */
int r2d_tenants_of(struct r2d *d, const char *cgroup);
/* The same without making one (-ENOENT): r2cclctl's sessions. */
int r2d_tenants_find(struct r2d *d, const char *cgroup);
/* The tenant's own cap and reservation (bits/s, 0 none, UINT64_MAX: kept
 * as it is); clamped as r2_sched_set_limit says. */
int r2d_tenants_set_limit(struct r2d *d, int t, uint64_t limit_bps, uint64_t reserve_bps);
/* max_proxy: bytes of proxy buffers for one of tenant t's chunks (any
 * thread). False when the tenant holds some and these would pass its quota:
 * the chunk waits for its tenant's buffers to come back, as for an
 * exhausted pool; a tenant holding none always gets one. give: the chunk's
 * buffer went back. */
bool r2d_tenants_proxy_take(struct r2d *d, int t, uint64_t bytes);
void r2d_tenants_proxy_give(struct r2d *d, int t, uint64_t bytes);
/* The proxy bytes tenant t holds now; *cap its max_proxy (0: none). */
uint64_t r2d_tenants_proxy_use(struct r2d *d, int t, uint64_t *cap);
/* max_req_rate (the loop thread): a session's place in its tenant's 100 ms
 * window. r2d_tenants_req before a request of the session is read: true
 * (counted: charged) while the tenant's window has room (rate / 10) and the
 * session has not used its share of it (the window over the sessions that
 * asked in the window before); false, and *until the window's end, when the
 * session must wait. *rate gets the quota (0: none, always true). refund:
 * the read found no request after all. (struct r2_req_slot: base/daemon.h) */
bool r2d_tenants_req(struct r2d *d, int t, uint64_t now, struct r2_req_slot *sl,
		     uint64_t *until, uint32_t *rate);
void r2d_tenants_req_refund(struct r2d *d, int t, struct r2_req_slot *sl);
/* max_pending_ops: an operation of tenant t was submitted. 1: counted
 * until r2d_tenants_op_end; 0: allowed, not counted (no such tenant); -1:
 * refused (enforce, and the tenant at its quota). *n gets the count before
 * it. */
int r2d_tenants_op_begin(struct r2d *d, int t, bool enforce, uint32_t *n);
void r2d_tenants_op_end(struct r2d *d, int t);
/* Copies up to max rows; returns how many. */
int r2d_tenants_rows(struct r2d *d, struct r2_tenant_row *rows, int max);

/* The rail phase's data chunk of tenant t (ctx as for r2d_rails_send).
 * railp: the engine's record of the chunk's rail, or NULL. With it, the
 * chunk may leave on another rail to the same peer (r2d_rails_movable),
 * taken there by the scheduler while it waits; *railp is set to that rail
 * before the transport has it, so its R2_TPC_SEND and a failure of that
 * connection find the chunk by its rail. */
int r2d_rails_send_tenant(struct r2d *d, int rail, uint64_t peer, const struct r2_chunk_hdr *hdr,
			  const void *buf, uint64_t ctx, int t, _Atomic int *railp);
/* The rails thread: a data send completed (the window opens), and the
 * chunks it can hand on now; returns the ms until a throttled chunk may go
 * (or max_ms). */
void r2d_tenants_sent(struct r2d *d, int rail, uint64_t peer, uint32_t len);
int r2d_tenants_pump_all(struct r2d *d, int max_ms);
/* Queued chunks to a peer whose connection on the rail dropped (peer 0:
 * every peer): they complete with -ENOTCONN from the rails thread (the
 * engine re-sends them). */
void r2d_tenants_fail(struct r2d *d, int rail, uint64_t peer);
/* The rails thread: the connection to peer on the rail came up (CONN) or
 * went (ERROR); while it is down a chunk for it is refused at once. */
void r2d_tenants_conn(struct r2d *d, int rail, uint64_t peer, bool up);
/* r2d_rails_send: a data chunk handed to the transport (in the window until
 * its send completion). */
void r2d_tenants_posted(struct r2d *d, int rail, uint64_t peer, uint32_t len);

#endif
