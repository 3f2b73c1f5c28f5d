// SPDX-License-Identifier: MIT
/* Between rails.c and rails_ctrl.c (the rails' control messages). */
#ifndef R2_NET_RAILS_INT_H
#define R2_NET_RAILS_INT_H
#include <stdbool.h>
#include <stddef.h>
#include "net/rails.h"

/* A control message's copy, in the list of those a transport holds (the
 * payload follows the links, aligned as malloc's) */
struct ctrl_copy {
	struct ctrl_copy *prev, *next;
	max_align_t payload[];
};

/* A control message's copy back from the transport (its send completion,
 * or the stop). */
void rl_ctrl_copy_free(struct r2_rails *rs, void *payload);
/* Rails thread: a detoured control message; true when passed on (this host
 * is the bridge), else *c is made the origin's. */
bool rl_ctrl_detour_in(struct r2_rails *rs, int rail, struct r2_tp_cqe *c);

/* rails_warm.c (loop thread): peer's connection on rail warmed up in its
 * turn; a warm-up's last message completed (its SEND, ctx WARMUP_CTX). */
#define WARMUP_CTX 2
void rl_warmup(struct r2_rails *rs, int rail, uint64_t peer);
void rl_warmup_done(struct r2_rails *rs, int rail, uint64_t peer);

#endif
