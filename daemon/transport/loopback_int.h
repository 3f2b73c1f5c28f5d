/* SPDX-License-Identifier: MIT */
/*
 * Between the loopback provider (loopback.c: connections, messages, the
 * timer) and its fault controls (loopback_ctl.c: the r2_lb_* calls of
 * loopback.h, which set rules and fail connections). Everything here is
 * under lb_g.lock.
 */
#ifndef R2CCL_LOOPBACK_INT_H
#define R2CCL_LOOPBACK_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "loopback.h"
#include "tp_common.h"

#define LB_DEFAULT_MAX_MSG (64u << 20)
#define LB_DEFAULT_MAX_QUEUED (64ull << 20)
#define LB_FIRST_PORT 20000
#define LB_MAX_RULES 16
#define LB_BUF_MAGIC 0x424c3252u
#define LB_BUF_HDR 64u

struct lbmsg {
	struct lbmsg *next;
	struct r2_chunk_hdr hdr; /* host order, magic set */
	const void *src;         /* the sender's payload (until SEND) */
	void *copy;              /* the receiver's buffer (after SEND) */
	uint64_t ctx;
	uint64_t due;            /* ns, CLOCK_MONOTONIC */
	struct lbpeer *dst;      /* the receiving end */
	int stream;
};

struct lbpeer {
	struct r2_tp_peer h;     /* first: tp_common.h */
	struct r2_tp *tp;
	struct lbpeer *remote;   /* the other end; NULL once failed */
	bool conn_reported;
	uint32_t max_msg;        /* the other end's */
	unsigned rr;
	uint64_t queued;         /* bytes of held sends */
	struct lbmsg *sq_head, *sq_tail; /* held sends, oldest first */
	struct lbmsg *ro;        /* reorder window to the other end, newest first */
	uint64_t last_due;       /* of the latest message to this end */
	int nflight;             /* messages to this end in the timer list */
};

struct lbrule {
	bool used, hold;
	uint64_t peer;
	uint32_t drop, dup, reorder, delay_us;
	uint32_t sendc_delay_us;  /* r2_lb_delay_sendc */
	uint32_t drop_ctrl_type;  /* r2_lb_drop_ctrl */
	r2_lb_match_fn drop_match;
	void *drop_arg;
};

struct r2_tp {
	struct r2_tp_base b;     /* first: tp_common.h; b.lock is not used */
	struct r2_tp_config cfg;
	struct r2_tp *next;      /* g.tps */
	bool link_down;
	int refuse;
	struct lbrule rules[LB_MAX_RULES];
};

/* A SEND completion that comes late (r2_lb_delay_sendc). */
struct lbsendc {
	struct lbsendc *next;
	uint64_t due;
	struct r2_tp *tp;
	struct r2_tp_cqe e;
};

struct lb_global {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct r2_tp *tps;
	struct lbmsg *flight;    /* delayed messages, by due time (stable) */
	struct lbsendc *late;    /* delayed SEND completions, by due time */
	unsigned misuse;         /* r2_lb_misuse */
	int nflight;             /* delayed + held for reordering */
	uint16_t next_port;
	bool timer_on;
	unsigned timer_gen;
	pthread_t timer;
};
/* every instance of the process (loopback.c) */
extern struct lb_global lb_g;

/* tp is a loopback instance of this process */
bool lb_is(const struct r2_tp *tp);
/* The rule for the messages tp sends to peer: its own, else R2_LB_ANY_PEER's
 * (NULL: none); get finds or makes peer's own (NULL: no room). */
struct lbrule *lb_rule_of(struct r2_tp *tp, uint64_t peer);
struct lbrule *lb_rule_get(struct r2_tp *tp, uint64_t peer);
/* Sends what a hold kept queued to p, in order. */
void lb_flush_held(struct lbpeer *p);
struct lbpeer *lb_peer_find(struct r2_tp *tp, uint64_t id);
/* p's connection fails (both ends); every connection of tp fails. */
void lb_conn_fail(struct lbpeer *p, int status, bool report, int remote_status, bool silent);
void lb_fail_all(struct r2_tp *tp, int status, bool report, int remote_status, bool silent);

#endif
