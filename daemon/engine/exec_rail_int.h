/* SPDX-License-Identifier: MIT */
/*
 * What the files of the rail phase share (exec_rail*.c; private to them).
 *
 * The chunk protocol (docs/architecture.md, The chunk / acknowledgement
 * protocol): every chunk carries
 * (communicator, operation sequence, step, source, offset); the receiving
 * daemon acknowledges it as soon as it holds it (rails thread), and applies
 * it exactly once: a chunk whose (step, source, offset) was already applied
 * or staged is dropped (and acknowledged again). The sender keeps each chunk
 * until its acknowledgement, so a chunk lost with a failed connection is sent
 * again on another rail. Chunks for later steps or operations wait in a stash
 * until the executor gets there.
 *
 *   exec_rail.c         the hierarchical collectives: local, rail, local phase
 *   exec_rail_mbox.c    the communicator mailbox and orphans (rails thread)
 *   exec_rail_p2p.c     send/recv across hosts
 *   exec_rail_input.c   rail input: GPU staging glue, lazy input, plan build
 *   exec_rail_send.c    sending: chunk buffers, post, repost, completions
 *   exec_rail_detour.c  sending through a bridge when no rail is left
 *   exec_rail_settle.c  chunks sent from W: waiting until transports let go
 *   exec_rail_apply.c   applying: seen set, apply queue, relay, ack
 *   exec_rail_desc.c    the operation's descriptor, compared with every peer's
 *   exec_rail_loop.c    the rail phase loop
 *   exec_rail_eager.c   small AllReduce: one message each way per host pair
 */
#ifndef R2CCL_EXEC_RAIL_INT_H
#define R2CCL_EXEC_RAIL_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm.h"
#include "engine/exec.h"
#include "planner/planner.h"
#include "transport/transport.h"
#include "util.h"

struct r2_bufpool;
struct r2_pool;
struct r2_view;

/* A message of a communicator's mailbox: a transport's completion (from the
 * rails thread), or a received chunk back from the apply queue. */
struct r2_rmsg {
	struct r2_rmsg *next;
	int rail;
	uint64_t when_us;
	struct r2_tp_cqe cqe;
};

/* cqe.type of a received chunk the apply queue has applied, back in the
 * mailbox (no transport reports it) */
#define R2_RMSG_APPLIED 0xa0
/* A chunk this host sends (or relays), kept until it is acknowledged. */
struct sendrec {
	struct sendrec *next;
	struct r2_chunk_hdr hdr;
	void *buf;
	/* the rail it went on: planned, or the one the tenants' scheduler
	 * moved it to while it was queued (the rails' threads write it then) */
	_Atomic int rail;
	uint64_t peer;
	uint64_t via; /* 0, or the bridge it went to (detour.h): no rail to peer */
	bool posted, sent, acked;
	uint64_t post_us; /* when it was first posted (step_order's bound) */
	uint8_t posts; /* times posted (saturates): more than once, an earlier
			* copy may still be queued */
	bool orphan; /* its operation ended first: freed at its send completion */
	/* A bridge refused it (NACK) before its send completion came: it goes
	 * again at that completion, not before. posted && !sent means one
	 * completion is on its way, and what is freed meanwhile must be left
	 * to it (op_end, p2p_free): re-posting at the NACK would break that
	 * (the record freed under its late completion). NACK_AGAIN, or
	 * NACK_BUSY (the bridge's queues were full: a transfer's waits for
	 * its pump). */
	uint8_t nack_wait;
	/* refused busy (a bridge's queues full, or a receiver that cannot keep
	 * it yet) this many times in a row: not posted again before again_us */
	uint8_t busy_naks;
	uint64_t again_us;
	void *owner; /* a transfer (struct p2pop), NULL for a collective's chunk */
	int retries;
	struct r2_bufpool *pool; /* where buf comes from (NULL: the heap) */
	/* buf points into the working buffer W (tcp_zero_copy): nothing to
	 * free; copied out (unborrow) before W changes under it */
	bool borrowed;
	/* borrowed from the caller's input S (lazy input), which does not
	 * change during the operation: never copied out */
	bool stable;
	int tenant; /* its communicator's tenant in the scheduler (net/tenants.h) */
	/* its proxy buffer counted against that tenant's max_proxy: the tenant
	 * + 1 (0: not counted) and the bytes (r2d_tenants_proxy_take) */
	int proxy_t;
	uint32_t proxy_bytes;
	struct r2d *proxy_d;
};

enum { NACK_AGAIN = 1, NACK_BUSY = 2 };

/* Where s went: its peer, or the bridge it went through. */
static inline uint64_t rl_sent_to(const struct sendrec *s)
{
	return s->via ? s->via : s->peer;
}

/* A bridge refused s (busy: its queues were full), or its receiver did
 * (busy: it cannot keep it yet, exec_rail_mbox.c). True when s's send
 * completion is still on its way: s is marked and goes again at it; false
 * when it may go again now. */
static inline bool rl_nack_defer(struct sendrec *s, bool busy)
{
	if (busy) { /* 1 ms later, doubling for each refusal in a row, to 128 ms */
		s->again_us = r2_now_us() + (1000ull << R2_MIN(s->busy_naks, 7));
		s->busy_naks += s->busy_naks < UINT8_MAX;
	}
	if (!s->posted || s->sent)
		return false;
	s->nack_wait = busy ? NACK_BUSY : NACK_AGAIN;
	return true;
}

/* The operation that lists s ends while a send completion is on its way:
 * s is left to it. Published last (release): once the rails thread sees it
 * (rl_is_orphan, acquire), it may free s, and the executor touches s no
 * more. */
static inline void rl_orphan(struct sendrec *s)
{
	__atomic_store_n(&s->orphan, true, __ATOMIC_RELEASE);
}

static inline bool rl_is_orphan(const struct sendrec *s)
{
	return __atomic_load_n(&s->orphan, __ATOMIC_ACQUIRE);
}

/* opseq of a send/recv transfer's chunks: never a collective's */
#define P2P_BIT (1ull << 63)

/* The send window of an operation (exec_rail_send.c): its chunks sent and
 * not acknowledged yet. */
struct rail_tx {
	/* unacknowledged (or unsent), oldest first: acknowledgements come
	 * mostly in that order, and rl_repost() posts in it */
	struct sendrec *sends, **sends_tail; /* sends_tail: the last one's next */
	int nsends;
	bool need_repost; /* a send failed or its rail went: post it again */
	/* the proxy buffer pool is exhausted: sends wait for acknowledgements */
	struct r2_bufpool *pool_wait;
	uint64_t pool_wait_since;
	/* step_order: a chunk of a later step waits behind an earlier step's
	 * unacknowledged ones on its rail (rl_send_ready); holds: the (rail,
	 * next hop) pairs such chunks still occupy (rl_order_scan) */
	bool order_wait;
	struct order_hold { int rail; uint64_t peer; } *holds;
	size_t nholds, capholds;
};

/* Detours of an operation, the sender's side (exec_rail_detour.c). */
struct rail_detours {
	/* bridges that refused a detour (NACK): no rail to dst either */
	struct { uint32_t dst, via; } *nacked;
	size_t nnacked, capnacked;
	unsigned detoured; /* chunks sent through a bridge (logged once) */
};

/* The lazy input (exec_rail_input.c; out-of-place, one local rank): W
 * starts as a copy of S, made piecewise only where needed; until a region
 * of W is written, its sends read S and its first reduction reads S and
 * writes W. */
struct rail_lazy {
	const char *S; /* NULL: W holds the input from the start */
	/* the regions of W that hold their data, sorted, disjoint */
	struct { uint64_t a, b; } *init;
	size_t ninit, capinit;
};

/* Received chunks on the apply queue (exec_rail_apply.c). */
struct rail_applyq {
	/* chunks on the apply queue since the last drain: [off, off+len) of W
	 * each writes (one that overlaps waits for the queue to drain), by the
	 * job's message (key): peers' chunks often share (off, len), and a
	 * message back from before a drain must not end a later one's entry */
	struct { uint64_t off, len; const void *key; } *busy;
	size_t nbusy, capbusy;
	uint64_t async_got; /* bytes of the current step the queue applied */
};

/* The apply queue's busy set (exec_rail_apply.c): a job writing [off,
 * off+len) queued under key; the job of key done (none: nothing); whether
 * [off, off+len) meets a queued job's bytes. */
int rl_busy_add(struct rail_applyq *aq, uint64_t off, uint64_t len, const void *key);
void rl_busy_done(struct rail_applyq *aq, const void *key);
bool rl_busy_overlaps(const struct rail_applyq *aq, uint64_t off, uint64_t len);

/* The chunks of the current step applied or relayed (exec_rail_apply.c):
 * each once, however often it is delivered. */
struct rail_dedup {
	/* applied chunks: (src, off) */
	struct { uint32_t src; uint64_t off; } *seen;
	size_t nseen, capseen;
	/* chunks relayed for other hosts (bridge): (src, dst, off) */
	struct { uint32_t src, dst; uint64_t off; } *rseen;
	size_t nrseen, caprseen;
};

/* A DATA message flagged R2_CHUNK_DESC carries the sender's struct op_desc
 * (exec_rail_desc.c) instead of bytes of W; its step is R2_DESC_STEP, its
 * offset 0. (net/detour.h has flags 0x1 to 0x8.) */
#define R2_CHUNK_DESC 0x10
#define R2_DESC_STEP 0xfffffff0u
/* An eager AllReduce's message (exec_rail_eager.c): its header carries the
 * operation's descriptor (rl_desc_to_hdr), so that hosts that took
 * different paths for one collective (a count on either side of the eager
 * limit) or disagree within the eager path find the mismatch at once. */
#define R2_CHUNK_EAGER 0x20
/* (R2_CHUNK_LAZY_ACK 0x80, net/rails.h: an eager message posted the first
 * time, whose receiver owes its ACK: exec_rail_ack.c) */

/* What a host's ranks called, as its peers compare it: the fields a
 * collective's ranks must agree on (same_collective() in engine.c), those
 * the collective does not use zeroed. */
struct op_desc {
	uint32_t opcode;     /* R2_OP_* */
	uint32_t dtype;
	uint64_t count;
	uint32_t redop;      /* 0 unless the collective reduces */
	int32_t root;        /* -1 unless it has a root */
	/* the view the host planned it with (descriptor messages only; a
	 * daemon before 2026-12-08 sends the fields above alone): its epoch,
	 * for the message, and a hash of what plans follow from, compared */
	uint64_t view_epoch, view_hash;
};

/* The descriptors of an operation (exec_rail_desc.c). */
struct rail_desc {
	struct op_desc mine;
	uint8_t *got; /* [nhosts]: that host's descriptor came and agreed */
	int ngot;
};

/* GPU staging (exec_rail_input.c; gpu/gpu.c stages the buffers piecewise). */
struct rail_stage {
	/* the operation; its stage_* hooks are set for GPU buffers */
	struct r2_exec *x;
	/* with x->stage_out set: every write into W of the plan, to tell when
	 * a region is final */
	struct wr { uint32_t step, peer; uint64_t off, len; } *wr;
	size_t nwr, capwr;
};

/* One collective's rail phase (exec_rail_loop.c runs it; executor thread). */
struct railop {
	/* the operation */
	struct r2_comm *c;
	struct r2d *d;
	int tenant1; /* its communicator's tenant + 1 (0: not looked up yet) */
	uint32_t weight; /* that tenant's weight (rl_tenant), for the apply queue */
	char *W;
	uint64_t size;
	uint32_t elem;
	r2ccl_dtype_t dtype;
	r2ccl_redop_t redop;
	uint64_t opseq;
	uint32_t chunk;
	uint32_t spread; /* a transfer's chunk count is a multiple of this */
	uint64_t deadline;
	int err;
	/* lazy acknowledgements (exec_rail_ack.c): its descriptors, and an
	 * AllReduce's last step's direct chunks, go flagged
	 * R2_CHUNK_LAZY_ACK (ack_linger on, up to R2_LAZY_OP_MAX bytes: what
	 * end_sends lets linger without awaiting its ACKs) */
	bool lazy, lazy_last;
	/* a log-step plan of step_order steps or more (exec_rail_send.c
	 * rl_send_ready) */
	bool order;
	double order_bw; /* cost_nic_bw, bytes/s: how long a held chunk may wait */
	struct r2_view *view; /* the agreed view this operation plans with */
	/* the plan and its current step */
	struct r2_plan *plan;
	struct r2_xfer *xf, *xfn; /* this step's transfers and the next step's */
	size_t maxx;
	int nxn;
	uint32_t step;
	bool applied_since; /* a chunk was applied: try the next step's sends */
	/* the next step's send chunks: posted early once the bytes they read
	 * are no longer awaited in this step (chunk-level pipelining) */
	struct pend {
		uint64_t off, len;
		uint32_t xi;
		bool posted;
		uint32_t scan; /* rcv[] before this index no longer holds it back */
	} *nsend;
	size_t nnsend, capnsend;
	/* this step's expected receive chunks */
	/* the step's receives as this host cuts them; got: bytes of it
	 * applied, whatever the sender's cut (a host of other tcp_streams or
	 * chunk_size cuts otherwise): done when all are in */
	struct rpend { uint32_t src; uint64_t off, len, got; bool done; } *rcv;
	size_t nrcv, caprcv;
	struct r2_rmsg *stash; /* chunks of later steps or operations */
	uint64_t step_got; /* bytes of the current step received (stuck()) */
	/* the step's last chunk: when it reached the mailbox, from whom, on
	 * which rail (the per-step debug line) */
	uint64_t last_rx_us;
	uint32_t last_rx_src;
	int last_rx_rail;
	/* where the operation's time went (the --log-level debug line at its
	 * end): microseconds blocked on an empty mailbox, in reductions and
	 * copies of received chunks, waiting for transports to let go of W
	 * (settle), for GPU staging; messages handled; post attempts */
	struct {
		uint64_t t0, idle_us, apply_us, settle_us, stage_us;
		uint64_t data, acks, sendc, reposts, tries, eagain, queued;
		uint64_t first_rx, last_rx;
	} prof;
	struct rail_tx tx;
	struct rail_detours det;
	struct rail_lazy in;
	struct rail_applyq aq;
	struct rail_dedup dedup;
	struct rail_stage stage;
	struct rail_desc desc;
};

/* ---- exec_rail_ack.c: lazy acknowledgements (eager messages, small plans) ---- */

/* The largest collective by the planner's plan whose messages go flagged
 * R2_CHUNK_LAZY_ACK (struct railop lazy): what end_sends copies to let
 * linger past the operation rather than await its ACKs. */
#define R2_LAZY_OP_MAX (1u << 20)

/* How long an ACK may stay owed when no collective to its sender follows
 * (1000; a unit test makes it long, as rl_linger_look_ms). */
extern uint64_t rl_ack_owed_us;
/* m (taken; owed an ACK when flagged R2_CHUNK_LAZY_ACK and not through a
 * bridge, R2_CHUNK_DETOUR): an eager message, a plan's descriptor or chunk. */
void rl_ack_owe(struct r2_comm *c, const struct r2_rmsg *m);
/* A data chunk of collective opseq came from host (taken from the
 * mailbox): this host's lingering messages to it of earlier collectives
 * were received (rl_p2p_implied), now and when they start to linger
 * (rl_acks_seen_apply, after rl_p2p_linger). */
void rl_ack_seen(struct r2_comm *c, uint32_t host, uint64_t opseq);
void rl_acks_seen_apply(struct r2_comm *c);
/* This host posted collective opseq's message to host (an eager message,
 * or a plan's descriptor): what it owed host for earlier collectives is
 * paid. */
void rl_acks_implied(struct r2_comm *c, uint32_t host, uint64_t opseq);
void rl_acks_free(struct r2_comm *c); /* the executor's end */
/* An ACK of the message with header hdr, which came from peer on rail (on
 * another rail if that one fails). mbox.c */
void rl_ack_send(struct r2d *d, int rail, uint64_t peer, const struct r2_chunk_hdr *hdr);
/* A data chunk of collective opseq came from host: every lingering message
 * of this host's to it, of a collective before opseq and flagged
 * R2_CHUNK_LAZY_ACK, was received (exec_rail_p2p.c). */
void rl_p2p_implied(struct r2_comm *c, uint32_t host, uint64_t opseq);
/* s went flagged R2_CHUNK_LAZY_ACK, direct, and is not acknowledged yet:
 * its receiver's next collective answers it (rl_p2p_implied,
 * rl_ack_implied_op; lazy_again in exec_rail_loop.c). */
bool rl_lazy_unanswered(const struct sendrec *s);

/* ---- exec_rail_mbox.c: the communicator mailbox (rails thread in,
 * executor out) ---- */

/* Appends m to c's mailbox; applied: m comes back from the apply queue */
void rl_mbox_append(struct r2_comm *c, struct r2_rmsg *m, bool applied);
/* The oldest message, waiting up to timeout_ms for one (NULL: none). */
struct r2_rmsg *rl_mbox_take(struct r2_comm *c, int timeout_ms);
/* Quiet: an ACK or data chunk put in does not wake the executor (c->mbox_quiet). */
void rl_mbox_quiet(struct r2_comm *c, bool on);
/* How long a quiet executor waits before it looks at its mailbox anyway (5;
 * a unit test makes it long, so that a wake-up lost would be a hang) */
extern int rl_linger_look_ms;
/* exec_spin_us as this host takes it: -1 resolved by its CPUs (config.c) */
uint64_t rl_exec_spin_us(struct r2d *d);
/* Busy-polls up to spin_us (0: returns at once) until c->mbox_gen moves
 * from gen: a message came or an operation was queued. */
void rl_mbox_spin(struct r2_comm *c, unsigned gen, uint64_t spin_us);
/* rl_mbox_take, busy-polling up to spin_us first where it would sleep. */
struct r2_rmsg *rl_mbox_take_spin(struct r2_comm *c, int timeout_ms, uint64_t spin_us);
/* rl_mbox_take_spin from gen, the mailbox generation its caller saw when it
 * found nothing else to do: a message or an operation queued since ends the
 * wait at once */
struct r2_rmsg *rl_mbox_take_since(struct r2_comm *c, int timeout_ms, uint64_t spin_us,
				   unsigned gen);
/* Puts messages back at the head of the mailbox, in their order. */
void rl_mbox_unget(struct r2_comm *c, struct r2_rmsg *head, struct r2_rmsg *tail);
/* Frees m and gives a received chunk's buffer back to its rail. */
void rl_rmsg_free(struct r2d *d, struct r2_rmsg *m);

/* ---- exec_rail_p2p.c: send/recv ---- */

/* The most messages one r2_p2p_pump takes from the mailbox */
#define R2_P2P_PUMP_MAX 1024
/* Handles a transfer's message; true if it was one (and m is consumed). */
bool rl_p2p_handle(struct r2_comm *c, struct r2_rmsg *m);
int rl_p2p_linger(struct r2_comm *c, uint64_t seq, struct sendrec **s, int n,
		  struct rail_detours *det);
/* The pair's counter slot (executor thread only). */
uint64_t *rl_p2p_slot(struct r2_comm *c, uint32_t src, uint32_t dst);
uint64_t rl_p2p_seq(uint32_t src, uint32_t dst, uint64_t ctr);
int rl_p2p_start(struct r2_comm *c, struct r2_exec *x, uint64_t seq, uint32_t peer_host,
	      bool is_send, char *buf, uint64_t len);

/* ---- exec_rail_input.c: GPU staging, lazy input, the plan ---- */

int rl_stage_wait(struct railop *o, const void *p, uint64_t n);
int rl_stage_plan(struct railop *o);
void rl_stage_first_sends(struct railop *o);
void rl_stage_final(struct railop *o, uint32_t src, uint32_t step, uint64_t off, uint64_t len);
int rl_init_cov(const struct rail_lazy *in, uint64_t a, uint64_t b);
int rl_init_mark(struct rail_lazy *in, uint64_t a, uint64_t b);
int rl_init_fill(struct railop *o, uint64_t a, uint64_t b);
int rl_build_plan(struct railop *o, enum r2_plan_op op, uint32_t root, uint32_t peer);
int rl_list_chunks(struct railop *o, const struct r2_xfer *xf, int nx, int dir, bool sends);

/* ---- exec_rail_send.c: chunk records, posting, send completions ---- */

struct r2_pool *rl_par_pool(struct r2d *d, uint64_t len);
void rl_sendrec_free(struct sendrec *s);
int rl_chunk_buf(struct r2d *d, struct sendrec *s, const void *src, uint64_t len);
int rl_unborrow(struct r2d *d, struct sendrec *s);
int rl_post_any(struct r2d *d, struct sendrec *s);
int rl_post(struct railop *o, struct sendrec *s);
/* The operation's tenant in the scheduler (net/tenants.h), looked up once
 * (with its weight, o->weight) */
int rl_tenant(struct railop *o);
/* rl_post_any, or with no rail left to s's peer, through a bridge not in
 * det's refusals (rl_detour_send): 0, -EAGAIN (queue full), -ENOTCONN */
int rl_post_via(struct r2_comm *c, struct rail_detours *det, struct sendrec *s, uint64_t opseq);
void rl_inject_dup(struct r2d *d, const struct sendrec *s);
void rl_sends_add(struct rail_tx *tx, struct sendrec *s);
void rl_sends_free(struct rail_tx *tx, struct sendrec **pp);
int rl_send_ready(struct railop *o, bool all);
/* step_order (exec_rail_send.c): the rails an earlier step than `step`
 * still occupies (o->tx.holds), then whether transfer x waits for them */
int rl_order_scan(struct railop *o, uint32_t step, uint64_t now);
bool rl_order_held(const struct railop *o, const struct r2_xfer *x);
int rl_pool_timeout(struct railop *o);
int rl_repost(struct railop *o);
bool rl_sent_on_failed(const struct r2_comm *c, const struct sendrec *s);
void rl_sent(struct railop *o, struct sendrec *t, int status);

/* ---- exec_rail_detour.c: the sender's side of detours ---- */

bool rl_detour_possible(const struct railop *o, uint64_t peer);
bool rl_detour_possible_for(const struct r2_comm *c, const struct rail_detours *det,
			    uint64_t peer);
/* s (DATA for its own host) through a bridge not in det's refusals: 0, or
 * -ENOTCONN when none takes it */
int rl_detour_send(struct r2_comm *c, struct rail_detours *det, struct sendrec *s,
		   uint64_t opseq);
/* A NACK from `from` (a bridge, or the chunk's own receiver, busy): the
 * chunks it names go again (a busy one not before its again_us); <0 when
 * the destination is found unreachable. */
int rl_nack(struct railop *o, const struct r2_chunk_hdr *h, uint64_t from);
/* A bridge's NACK from `from` for h: noted in det (unless only busy);
 * R2CCL_E_PEER_GONE when h's destination is left with no bridge and no rail */
int rl_detour_refused(struct r2_comm *c, struct rail_detours *det, const struct r2_chunk_hdr *h,
		      uint64_t from);

/* ---- exec_rail_settle.c: chunks sent from W (tcp_zero_copy) ---- */

void rl_settle_end(struct railop *o);
/* No transport reads a chunk sent from W or from the input S any more, and
 * every unacknowledged chunk has its own copy: W and S may change. */
int rl_settle_copy_all(struct railop *o);
int rl_before_write(struct railop *o, uint64_t off, uint64_t len);

/* ---- exec_rail_apply.c: received chunks into W ---- */

void rl_apply_drain(struct railop *o);
void rl_applied(struct railop *o, const struct r2_rmsg *m);
uint64_t rl_apply(struct railop *o, struct r2_rmsg *m, int nx, bool *taken);
uint64_t rl_relay(struct railop *o, const struct r2_chunk_hdr *h, const void *buf, int nx);
void rl_ack(struct railop *o, const struct r2_chunk_hdr *h);
/* A message of a later collective came from host: it ended this one with
 * every message of mine to it in hand; my sends to it flagged
 * R2_CHUNK_LAZY_ACK (direct) are acknowledged (exec_rail_ack.c). */
void rl_ack_implied_op(struct railop *o, uint32_t host);

/* ---- exec_rail_desc.c: the descriptor exchange ---- */

/* Sends this host's descriptor to every other host, then compares what
 * came early (the stash). R2CCL_E_MISMATCH (the communicator broken with
 * the reason) when a peer disagrees. */
int rl_desc_begin(struct railop *o);
/* A received descriptor (m's header has R2_CHUNK_DESC) of this operation:
 * compared once per peer. 1: of another operation (the caller stashes or
 * drops it); 0: taken into account (the caller frees m); <0: mismatch. */
int rl_desc_in(struct railop *o, const struct r2_rmsg *m);
/* This host's descriptor of x's operation. */
void rl_desc_fill(struct op_desc *dd, const struct r2_exec *x);
/* theirs (host src's) against mine: 0 when they agree, else
 * R2CCL_E_MISMATCH with the communicator broken and the reason logged. */
int rl_desc_check(struct r2_comm *c, uint64_t opseq, const struct op_desc *mine,
		  const struct op_desc *theirs, uint32_t src);
/* Host src took the eager path for collective opseq where this host took
 * the planner's (eager: false), or the other way round, and both called
 * the same collective: their eager_max or chunk_size differ. Breaks c with
 * that reason; R2CCL_E_MISMATCH. */
int rl_path_mismatch(struct r2_comm *c, uint64_t opseq, uint32_t src, bool eager);
/* The descriptor in an eager message's header (R2_CHUNK_EAGER). */
void rl_desc_to_hdr(const struct op_desc *d, struct r2_chunk_hdr *h);
void rl_desc_from_hdr(struct op_desc *d, const struct r2_chunk_hdr *h);
/* Every peer's descriptor came. */
bool rl_desc_done(const struct railop *o);
void rl_desc_end(struct railop *o);

/* ---- exec_rail_eager.c: small AllReduce in one direct exchange ---- */

/* Whether [off, off + len) lies in [base, base + size), without overflow: a
 * peer's chunk header can carry any offset (one near 2^64 wrapped off + len
 * to a small number and passed a plain sum test, so the chunk was applied
 * before the buffer: found by fuzz_peer, 2026-12-03). exec_rail_apply.c */
bool rl_in_range(uint64_t off, uint64_t len, uint64_t base, uint64_t size);

#define R2_EAGER_MAX (64u << 10)  /* bytes: the eager path always up to this size */
#define R2_EAGER_MAX_HOSTS 8      /* n - 1 messages per host: few hosts only */
#define R2_EAGER_MAX_PIECES 8     /* above R2_EAGER_MAX: a message per rail, at most */
/* How many pieces each eager message has for an AllReduce of size bytes
 * (elements of es bytes), 0: not eager. The same answer on every host for
 * the same operation (size, hosts, the agreed view v, NULL: nothing known
 * failed, and eager_max and chunk_size, which every host must have alike:
 * rl_path_mismatch says so when they do not). */
int rl_eager_pieces(const struct r2_comm *c, uint64_t size, size_t es, const struct r2_view *v);
/* The slot (src * np + piece) of an eager message with header h on host me
 * of nhosts, the operation split in np pieces of size bytes; -1: not one
 * (from itself or no host, to another, not eager, a piece or length this
 * host does not make). */
int rl_eager_slot(const struct r2_chunk_hdr *h, uint32_t nhosts, uint32_t me, int np,
		  uint64_t size, size_t es);
int rl_eager_allreduce(struct r2_exec *x, void *W, const void *S, uint64_t size,
		       r2ccl_dtype_t dtype, r2ccl_redop_t redop, uint64_t opseq, int np);

/* ---- exec_rail_loop.c: the rail phase ---- */

int64_t rl_handle(struct railop *o, struct r2_rmsg *m, uint32_t step, int nx);
int rail_phase(struct r2_exec *x, void *W, const void *S, uint64_t size, r2ccl_dtype_t dtype,
	       r2ccl_redop_t redop, enum r2_plan_op op, uint32_t root, uint32_t peer,
	       uint64_t opseq, struct r2_view *view);

#endif
