/* SPDX-License-Identifier: MIT */
/*
 * The loopback provider's control API, for tests (loopback.c): several
 * "hosts" in one process, each a provider instance opened with its own
 * cfg->addr, and the faults a test commands on the messages one instance
 * sends to a peer: drop, delay, reorder, duplicate, hold, late send
 * completions; and on its
 * connections: fail, link down, refuse. docs/transports.md describes the
 * provider and how its semantics follow tcp.c's.
 *
 * A rule applies to the messages instance tp sends to peer (a daemon id), or,
 * with peer R2_LB_ANY_PEER, to every peer that has no rule of its own. Rules
 * live on the instance (they outlast a connection: a reconnect finds them).
 * Every call returns 0 or a negative errno (-EINVAL: tp not a loopback
 * instance; -ENOSPC: too many rules on it).
 */
#ifndef R2CCL_LOOPBACK_H
#define R2CCL_LOOPBACK_H

#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

extern const struct r2_tp_ops r2_tp_loopback_ops;

#define R2_LB_ANY_PEER 0
#define R2_LB_ALL UINT32_MAX /* a count: every message from now on */

/* The next n messages to peer vanish after their SEND completion (status
 * 0: they were handed to the "network"), as a black-holed link does. */
int r2_lb_drop(struct r2_tp *tp, uint64_t peer, uint32_t n);
/* Control messages (R2_MSG_CTRL) of PeerMsg type `type` to peer for which
 * match(payload, len, arg) holds vanish likewise, from now until the rule
 * is set again (match NULL: none); other messages pass (every copy of one
 * view's commit lost, while the next view's gets through). match runs on
 * the sending thread, under the provider's lock: it reads the payload and
 * arg, nothing else of the provider. */
typedef bool (*r2_lb_match_fn)(const void *buf, uint32_t len, void *arg);
int r2_lb_drop_ctrl(struct r2_tp *tp, uint64_t peer, uint32_t type, r2_lb_match_fn match,
		    void *arg);
/* Each message to peer arrives delay_us later (0: at once). Messages of one
 * connection still arrive in the order sent (a later one never overtakes an
 * earlier one), as on one TCP stream. */
int r2_lb_delay(struct r2_tp *tp, uint64_t peer, uint32_t delay_us);
/* The SEND completion of each message to peer comes delay_us after the
 * message left (0: at once, before it arrives), as from a transport whose
 * completions take a slower way than its data (a busy completion thread):
 * the receiver may answer first. Completions still pending when tp closes
 * are dropped (close() reports nothing). */
int r2_lb_delay_sendc(struct r2_tp *tp, uint64_t peer, uint32_t delay_us);
/* The next n messages to peer are held until the n-th is sent, then
 * delivered in reverse order (as messages on different streams may come). */
int r2_lb_reorder(struct r2_tp *tp, uint64_t peer, uint32_t n);
/* The next n messages to peer arrive twice. */
int r2_lb_duplicate(struct r2_tp *tp, uint64_t peer, uint32_t n);
/* hold: messages to peer stay queued in the sender (no SEND completion, as
 * behind a full socket buffer; post_send returns -EAGAIN past max_queued);
 * releasing the hold sends them, in order. A connection that fails while
 * they are queued completes them with SEND status < 0. */
int r2_lb_hold(struct r2_tp *tp, uint64_t peer, bool hold);
/* Bytes of the messages to peer that a hold keeps queued now; -ENOTCONN
 * with no connection to peer. */
int64_t r2_lb_held(struct r2_tp *tp, uint64_t peer);
/* The connection between tp and peer fails now: R2_TPC_ERROR (status) on
 * both ends, queued sends complete with status, messages in flight are
 * lost. -ENOTCONN when there is none. */
int r2_lb_fail(struct r2_tp *tp, uint64_t peer, int status);
/* The link of tp goes down or up. Down: link_state() says 0, every
 * connection of tp fails on both ends with -ENETDOWN, and connects from or
 * to tp fail with -ENETUNREACH. Up: connects work again. */
int r2_lb_link(struct r2_tp *tp, bool up);
/* Connects to tp fail with status (ERROR at the dialer, e.g.
 * -ECONNREFUSED); 0 accepts them again. */
int r2_lb_refuse(struct r2_tp *tp, int status);
/* Messages in flight (delayed or held for reordering) anywhere; a test waits
 * for 0 before it checks what arrived. */
int r2_lb_in_flight(void);
/* Receive buffers given back by release() while a send of this process
 * still read from them (held, or before its SEND completion): a breach of
 * the transport contract that a real provider would turn into corrupted
 * bytes on the wire (logged too). Counted over the process's life. */
unsigned r2_lb_misuse(void);

#endif
