/* SPDX-License-Identifier: MIT */
/*
 * Rail health (BRIEF.md decision 9) and the agreed planning view of each
 * communicator (docs/resilience.md).
 *
 * Loop thread: rtnetlink link events, heartbeats, transport CONN/ERROR,
 * peers' RailEvents, re-probing, the view agreement, r2cclctl. Executors:
 * r2d_health_op_begin() at each collective's start (the view to plan with).
 */
#ifndef R2CCL_HEALTH_H
#define R2CCL_HEALTH_H

#include <stdint.h>

#include "base/daemon.h"

struct r2_comm;
struct r2_loop_ev;

/* A communicator's planning view: what every daemon of it plans with from
 * operation start_opseq on. */
struct r2_view {
	uint64_t epoch, start;
	uint32_t nhosts, nrails;
	uint8_t *down;     /* [h * nrails + r] NIC unusable */
	uint64_t *bw;      /* [h * nrails + r] bytes/s measured, 0: nominal */
	uint32_t nlinks;
	uint32_t *links;   /* triples a, b, rail (a < b) */
};

int r2d_health_start(struct r2d *d);  /* loop thread, after r2d_rails_start */
void r2d_health_close(struct r2d *d); /* loop thread: closes its handles */
void r2d_health_free(struct r2d *d);  /* after the loop ended */

/* Transport CONN / ERROR of (peer, rail) (loop thread, no lock held). */
void r2d_health_conn(struct r2d *d, int rail, uint64_t peer, int type, int status);
/* Peer control messages PEER_RAIL_EVENT .. PEER_VIEW_REQUEST (loop thread,
 * no lock held). */
void r2d_health_ctrl(struct r2d *d, const struct r2_loop_ev *ev);

/* Executor: collective seq of c is about to start. Waits while a view
 * change is being agreed (bounded), then returns the view to plan with (a
 * copy; NULL: every NIC up). Free with r2d_view_free. */
struct r2_view *r2d_health_op_begin(struct r2_comm *c, uint64_t seq);
void r2d_view_free(struct r2_view *v);

/* r2cclctl (loop thread). The reply goes out through reply (the control
 * layer's r2d_session_reply): net does not call the control layer. */
typedef int (*r2_reply_fn)(struct r2_session *s, uint16_t type, const void *protobuf_msg);
void r2d_health_ctl_rails(struct r2_session *s, uint64_t req_id, r2_reply_fn reply);
void r2d_health_ctl_events(struct r2_session *s, uint64_t req_id, uint64_t since, uint32_t max,
			   r2_reply_fn reply);
int r2d_health_drain(struct r2d *d, const char *nic, bool drain, char *err, size_t errlen);
int r2d_health_rebalance(struct r2d *d, uint32_t comm_id, uint32_t uid, const char *tenant);

/* An event for `r2cclctl events` and the log (loop thread). */
void r2d_health_event(struct r2d *d, int sev, const char *kind, const char *subject,
		      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

const char *r2d_rstate_name(int st);

/* The bandwidth the planner assumes for a NIC it knows nothing against
 * (exec_rail.c build_plan); a degraded NIC is planned at a fraction of it. */
#define R2_PLAN_NOMINAL_BPS 125000000ull

/* Throughput monitor (any thread): a data chunk of len bytes posted to peer
 * on rail (len < 0: a post that failed, undone), and one acknowledged. */
void r2d_health_data_posted(struct r2d *d, int rail, uint64_t peer, int64_t len);
void r2d_health_data_acked(struct r2d *d, int rail, uint64_t peer, uint32_t len);

#endif
