/* SPDX-License-Identifier: MIT */
/*
 * Rail health (BRIEF.md decision 9) and the agreed planning view of each
 * communicator (docs/resilience.md).
 *
 * Loop thread: rtnetlink link events, heartbeats, transport CONN/ERROR,
 * peers' RailEvents, re-probing, the view agreement, the operator's drain
 * and rebalance, and read-only snapshots for r2cclctl (ctl_health.c builds
 * the replies). Executors: r2d_health_op_begin() at each collective's start
 * (the view to plan with). Any thread: the throughput monitor's counters.
 * The files: health.c (lifecycle, tick), health_state.c, health_monitor.c,
 * health_view.c, health_agree.c, health_peer.c, health_query.c.
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

/* The operator (r2cclctl, loop thread): drain or undrain a rail (-ENODEV,
 * err filled: no such rail); re-plan communicators at their next
 * collective (-ENOENT: comm_id named and not found). */
int r2d_health_drain(struct r2d *d, const char *nic, bool drain, char *err, size_t errlen);
int r2d_health_rebalance(struct r2d *d, uint32_t comm_id, uint32_t uid, const char *tenant);

/* Read-only snapshot of the rails and the paths to peers, for r2cclctl
 * (loop thread: it copies the loop thread's state). */
struct r2d_rail_info {
	char nic[64];
	uint32_t index;
	const char *state;     /* r2d_rstate_name() */
	const char *transport; /* "tcp", "verbs" */
	uint64_t tx_bps, rx_bps; /* byte rates, 1 s samples, EWMA */
	uint64_t tx_bytes, rx_bytes;
	uint64_t errors, changes, failovers;
	uint64_t since_us;     /* in this state since (r2_now_us) */
	uint64_t tx_chunks, rx_chunks, resends; /* summed over its paths */
	uint64_t hb_missed;    /* heartbeats missed on its paths, in all */
	bool drained;
	char cause[128];       /* why it is in this state */
};

struct r2d_path_info {
	uint64_t peer;         /* the peer host's id */
	char host[64];         /* its name from a communicator, else the id in hex */
	uint32_t rail;
	char nic[64];          /* this host's NIC of the rail */
	uint32_t addr;         /* the peer's address on the rail (network order) */
	const char *state;     /* failed too when its host reported the NIC failed */
	uint64_t rtt_us, last_rx_us;
	uint32_t missed;       /* heartbeats */
	uint64_t missed_total; /* heartbeats missed since the start */
	uint64_t errors, failovers, changes;
	uint64_t tx_bytes, tx_chunks, rx_bytes, rx_chunks, resends; /* data */
	uint64_t rate_bps;     /* the throughput monitor's rate while busy, bytes/s; 0: none */
	char cause[128];
};

struct r2d_health_snap {
	uint64_t replans;      /* views committed */
	uint64_t replan_timed, replan_us_sum; /* held ones: count, hold-to-commit time */
	size_t nrails, npaths;
	struct r2d_rail_info *rails;
	struct r2d_path_info *paths; /* every path known or connected, by peer, then rail */
};

/* Fills s (0, or -ENOMEM); free it with r2d_health_snap_free. No rails: empty. */
int r2d_health_snapshot(struct r2d *d, struct r2d_health_snap *s);
void r2d_health_snap_free(struct r2d_health_snap *s);

/* One event of the ring `r2cclctl events` shows. */
struct r2d_event_info {
	uint64_t seq, time_ms;  /* time_ms: Unix time */
	const char *severity;   /* "err", "warn", "info" */
	char kind[16], subject[64], msg[224];
	uint64_t owner;         /* the communicator's serial (0: the daemon's) */
};

/* Copies the events after seq `since` still kept, the last max of them (0:
 * all), taken under health's lock: *ev (malloc'd, free it) and *n; *last_seq
 * is the newest event's seq. 0 or -ENOMEM. */
int r2d_health_events(struct r2d *d, uint64_t since, uint32_t max, struct r2d_event_info **ev,
		      size_t *n, uint64_t *last_seq);

/* An event for `r2cclctl events` and the log (loop thread); _of: one of
 * communicator serial owner's, which its owner may see too
 * (r2d_event_visible). */
void r2d_health_event(struct r2d *d, int sev, const char *kind, const char *subject,
		      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void r2d_health_event_of(struct r2d *d, uint64_t owner, int sev, const char *kind,
			 const char *subject, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

const char *r2d_rstate_name(int st);

/* The bandwidth the planner assumes for a NIC it knows nothing against
 * (exec_rail.c build_plan); a degraded NIC is planned at a fraction of it. */
#define R2_PLAN_NOMINAL_BPS 125000000ull

/* Throughput monitor (any thread): a data chunk of len bytes posted to peer
 * on rail (len < 0: a post that failed, undone), and one acknowledged. */
void r2d_health_data_posted(struct r2d *d, int rail, uint64_t peer, int64_t len);
/* The peer table's entry slot was freed (rails.c evicted its peer id): its
 * throughput monitor starts afresh for the next peer there, and the path
 * events from or about id are forgotten (loop thread). */
void r2d_health_peer_forget(struct r2d *d, int slot, uint64_t id);
void r2d_health_data_acked(struct r2d *d, int rail, uint64_t peer, uint32_t len);

#endif
