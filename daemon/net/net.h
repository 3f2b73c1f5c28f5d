/* SPDX-License-Identifier: MIT */
/*
 * What the net layer reports to the layer above it. Net never calls the
 * engine: the engine fills this table and registers it when it starts
 * (r2d_net_set_events, from r2d_engine_start, before the rails start), the
 * way a libuv handle carries its callbacks. Each callback says the thread it
 * runs on.
 */
#ifndef R2CCL_NET_H
#define R2CCL_NET_H

#include <stdint.h>

struct r2d;
struct r2_comm;
struct r2_uid;
struct r2_loop_ev;
struct r2_tp_cqe;

struct r2_net_events {
	/* A DATA or ACK message, or a connection's CONN / ERROR, for the
	 * communicator its header names: to its mailbox (rails thread; health
	 * hands the ACKs of a dropped path on from the loop thread). */
	void (*deliver)(struct r2d *d, int rail, const struct r2_tp_cqe *cqe);
	/* A peer's control message that is not health's (bootstrap), or a
	 * path's CONN / ERROR (loop thread, no lock held). */
	void (*loop_event)(struct r2d *d, struct r2_loop_ev *ev);
	/* The communicator its chunk headers name, or its unique id names
	 * (under d->lock; NULL: none here). */
	struct r2_comm *(*comm_by_key)(struct r2d *d, uint64_t key);
	struct r2_comm *(*comm_by_uid)(struct r2d *d, const struct r2_uid *uid);
	/* This host's index in the communicator of that key: one here in any
	 * state once its hosts are known, or one that ended here lately; -1
	 * when it cannot tell (under d->lock). A bridge refuses a detoured
	 * chunk for another host of a communicator it cannot forward for. */
	int (*my_host_by_key)(struct r2d *d, uint64_t key);
	/* A peer of c is gone: fail c's pending operations and mark it broken
	 * (under d->lock). */
	void (*comm_break)(struct r2_comm *c, int err, const char *why);
	/* The rails stop (their thread has ended, the transports still live):
	 * let go of every receive buffer still held (messages for
	 * communicators that never came). */
	void (*rails_closing)(struct r2d *d);
};

/* The table stays the caller's and must outlive the rails. */
void r2d_net_set_events(struct r2d *d, const struct r2_net_events *ev);

#endif
