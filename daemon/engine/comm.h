/* SPDX-License-Identifier: MIT */
/*
 * Communicators and their operations.
 *
 * A communicator is created by the first CommInit carrying its unique id and
 * is ready once all of its ranks joined (on one host: all nranks; across
 * hosts: the bootstrap fills in the remote ones). Each rank's submissions form
 * a FIFO; the nth collective of every rank forms one operation, which is
 * checked for matching arguments before it runs. Send/Recv pair the head SEND
 * of one rank with the head RECV of its peer.
 */
#ifndef R2CCL_COMM_H
#define R2CCL_COMM_H

#include "base/comm_record.h"
#include "base/op_record.h"
#include "base/daemon.h"
#include "transport/transport.h"


/* comm.c (loop thread, takes d->lock itself) */
void r2d_comm_handle_init(struct r2_session *s, const void *msg /* R2ccl__CommInit */);
/* MSG_COMM_REASON: why the session's member comm_id failed (a Result). */
void r2d_comm_handle_reason(struct r2_session *s, uint64_t req_id, uint32_t comm_id);
void r2d_comm_handle_destroy(struct r2_session *s, uint64_t req_id, uint32_t comm_id, bool abort);
void r2d_comm_session_gone(struct r2d *d, struct r2_session *s);
void r2d_comm_tick(struct r2d *d); /* bootstrap/op timeouts */
void r2d_comm_destroy_all(struct r2d *d);
struct r2_comm *r2d_comm_find(struct r2d *d, uint32_t id); /* under d->lock */
const char *r2d_comm_state_name(enum r2_comm_state st);
/* Communicator modes: "balance" -> R2_MODE_BALANCE, "hotrepair" ->
 * R2_MODE_HOTREPAIR, anything else -1; the name of a mode ("" for -1). */
int r2d_comm_mode_parse(const char *name);
const char *r2d_comm_mode_name(int mode);
/* Fails every pending op of c with err and marks it broken (under d->lock). */
void r2d_comm_break(struct r2_comm *c, int err, const char *why);
void r2d_comm_put(struct r2_comm *c); /* under d->lock */
/* A communicator of this uid failed lately (under d->lock): its status,
 * its reason in why; 0 if none did. A rank that comes later, or a host's
 * late JOIN at the root, learns the same error at once (not a bootstrap
 * timeout). */
int r2d_comm_tomb(struct r2d *d, const struct r2_uid *uid, char *why, size_t len);
/* Completes op with status (CQE), drops its references, frees it. */
void r2d_op_free(struct r2_op *op, int status);

/* bootstrap.c (loop thread) */
void r2d_uid_fill(struct r2d *d, struct r2_uid *uid);
/* Called after a local rank joined c (under d->lock). */
void r2d_bootstrap_joined(struct r2_comm *c);
void r2d_bootstrap_tick(struct r2d *d); /* loop thread, under d->lock */
/* Fails c's initialization here and on every other host (JOIN_FAIL through
 * the root), e.g. a local rank whose arguments disagree (under d->lock). */
void r2d_bootstrap_fail(struct r2_comm *c, int status, const char *why);
/* How a rank left its communicator (PEER_LEAVE's LeaveHow). */
enum r2_leave { R2_LEAVE_DESTROY, R2_LEAVE_ABORT, R2_LEAVE_DIED };
/* Tells every other host of c that its local rank left (PEER_LEAVE), after
 * c->coll_matched collectives (under d->lock). */
void r2d_bootstrap_leave(struct r2_comm *c, int rank, enum r2_leave how);
/* Rank (of this host or another) left c by destroy or abort after its host
 * matched `after` collectives: later collectives fail with
 * R2CCL_E_PEER_GONE, here and in the executor, and MSG_COMM_REASON says
 * "rank N left the communicator (how)"; what does not need the rank goes
 * on (under d->lock). */
void r2d_comm_member_left(struct r2_comm *c, int rank, enum r2_leave how, uint64_t after);
/* Under d->lock. Rank `from` (of another host) left, and its daemon said how
 * many sends it had executed to each rank: receives from it may still
 * complete (known), and the pair's n-th receive (0-based) of `to` will
 * (sent_before_left). */
bool r2d_comm_left_sent_known(const struct r2_comm *c, int from);
bool r2d_comm_sent_before_left(const struct r2_comm *c, int from, int to, uint64_t n);

/* A pair's send/recv counter as a chunk header carries it: its low 21 bits
 * (exec_rail_p2p.c, rl_p2p_seq). Compared in serial-number arithmetic, so
 * that the order holds across the wrap (after 2^21 transfers of a pair): a
 * is before b when b - a, modulo 2^21, is in (0, 2^20). */
#define R2_P2P_CTR_MASK 0x1fffffull
static inline bool r2_p2p_ctr_before(uint64_t a, uint64_t b)
{
	uint64_t d = (b - a) & R2_P2P_CTR_MASK;

	return d != 0 && d < (R2_P2P_CTR_MASK + 1) / 2;
}
/* "rank N left the communicator (destroy|abort|client died)", with "on host
 * NAME" after N for a rank of another host (host: NULL for this one) */
void r2d_comm_leave_why(int rank, const char *host, enum r2_leave how, char *why, size_t len);
void r2d_comm_ready(struct r2_comm *c); /* comm.c, under d->lock */
struct r2_comm *r2d_comm_new(struct r2d *d, const struct r2_uid *uid, int nranks,
			     const char *tenant);
struct r2_comm *r2d_comm_by_uid(struct r2d *d, const struct r2_uid *uid);
/* The caps (docs/security.md), under d->lock: R2CCL_E_QUOTA with the cap's
 * name in err before s creates a communicator; whether a rank may queue one
 * more operation (if not, c breaks with R2CCL_E_QUOTA). */
int r2d_comm_quota(struct r2_session *s, char *err, size_t errlen);
bool r2d_comm_may_queue(struct r2_comm *c, int rank);
bool r2d_comm_tenant_may_submit(struct r2_comm *c, struct r2_session *s, struct r2_op *op);
/* Answers s's CommInit with err and why (the joiner alone fails). */
void r2d_comm_refused(struct r2_session *s, uint64_t req_id, int err, const char *why);
struct r2_comm *r2d_comm_by_key(struct r2d *d, uint64_t key);
/* Also a dead one still linked, whose executor may still run (under d->lock). */
struct r2_comm *r2d_comm_by_key_any(struct r2d *d, uint64_t key);
/* net.h's my_host_by_key (under d->lock) */
int r2d_comm_my_host_by_key(struct r2d *d, uint64_t key);

/* A rail message (DATA, ACK, CONN, ERROR) to the mailbox of the communicator
 * its header names, or kept as an orphan until that communicator is ready
 * (exec_rail.c; net calls it through struct r2_net_events). */
void r2d_comm_deliver(struct r2d *d, int rail, const struct r2_tp_cqe *cqe);
/* A peer's bootstrap message or a path's CONN / ERROR (bootstrap.c, loop
 * thread; net calls it through struct r2_net_events). */
struct r2_loop_ev;
void r2d_bootstrap_event(struct r2d *d, struct r2_loop_ev *ev);

/* exec_rail.c */
void r2d_comm_mbox_flush(struct r2_comm *c);
/* Wakes c's executor where it waits on its mailbox: its generation moves
 * under the mailbox's lock (a waiter that looked before that does not
 * sleep: rl_mbox_take_since), then its condition is signalled. Under
 * d->lock, which c outlives. */
void r2d_comm_mbox_wake(struct r2_comm *c);
void r2d_comm_adopt_orphans(struct r2_comm *c); /* under d->lock */
void r2d_orphans_free(struct r2d *d);
/* Drops the orphans that came before older_than_us (under d->lock). */
void r2d_orphans_expire(struct r2d *d, uint64_t older_than_us);

/* engine.c */
int r2d_engine_start(struct r2d *d);
/* Stops the dispatcher, then ends every communicator left (their executors
 * joined: r2d_comm_destroy_all), then frees what those used. */
void r2d_engine_stop(struct r2d *d);
int r2d_engine_add_session(struct r2d *d, struct r2_session *s);
void r2d_engine_remove_session(struct r2d *d, struct r2_session *s);
/* Try to match and run ops of c (under d->lock). */
void r2d_engine_progress_comm(struct r2_comm *c);
/* Number of matched ops waiting or running (for drain). */
int r2d_engine_busy(struct r2d *d);
/* True while the dispatcher thread keeps waking up (systemd watchdog). */
bool r2d_engine_alive(struct r2d *d);
/* Rank left c: fail the pending operations that need it (under d->lock). */
void r2d_engine_fail_left(struct r2_comm *c, int rank);

#endif
