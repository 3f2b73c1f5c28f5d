/* SPDX-License-Identifier: MIT */
/*
 * The communicator record. The engine owns communicators: it creates, fills,
 * runs and frees them (engine/comm.h has its functions). The record is
 * declared here, below every layer, because the net layer reads a ready
 * communicator's membership (its hosts, under d->lock) for health's view
 * agreement and for detours; net finds and breaks communicators only through
 * the table the engine registers (net/net.h, struct r2_net_events).
 */
#ifndef R2CCL_COMM_RECORD_H
#define R2CCL_COMM_RECORD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "r2ccl.h"

struct r2d;
struct r2_session;
struct r2_rmsg; /* a message from the rails for this communicator (engine/exec_rail.c) */
struct r2_op;   /* a rank's submission (engine/comm.h) */
struct r2_exec; /* a matched operation (engine/comm.h) */

#define R2_UID_MAGIC 0x52324944u /* "DI2R" */

/* Layout of r2ccl_unique_id_t.internal (128 bytes). */
struct r2_uid {
	uint32_t magic;
	uint32_t version;
	uint64_t host_id;   /* the root daemon's id */
	uint64_t nonce;     /* random */
	uint32_t naddrs;    /* root daemon's rail addresses (multi-host) */
	uint32_t reserved;
	uint32_t addrs[8];  /* IPv4, network order */
	uint16_t ports[8];
	uint8_t pad[128 - 32 - 32 - 16];
};
_Static_assert(sizeof(struct r2_uid) == R2CCL_UNIQUE_ID_BYTES, "uid layout");


enum r2_comm_state { R2_COMM_JOINING, R2_COMM_READY, R2_COMM_BROKEN, R2_COMM_DEAD };

struct r2_comm_member {
	struct r2_session *s; /* NULL: not joined (yet), left, or on another host */
	bool local;           /* a rank of this host */
	bool left;            /* destroyed its communicator (others may go on) */
	uint64_t remote_host; /* root, before the membership: the daemon that holds it */
	uint64_t init_req_id;
	struct r2_op *head, *tail; /* pending, in submission order */
	uint32_t npending;
	/* sends executed by this rank to each rank ([nranks], NULL: none yet):
	 * a rank of this host: the executor's count (allocated under d->lock,
	 * entries written with atomic stores); a rank of another host that left:
	 * what its daemon said (PEER_LEAVE), so that receives from it up to that
	 * count still complete */
	uint64_t *sent;
};

#define R2_COMM_MAX_RAILS 8
struct r2_host {
	uint64_t id;
	uint32_t first_rank, nlocal;
	int naddrs;
	uint32_t addr[R2_COMM_MAX_RAILS]; /* IPv4, network order */
	uint16_t port[R2_COMM_MAX_RAILS];
	char name[64];
	uint32_t failed_rails; /* executor: rails whose connection to it failed */
	uint32_t reset_rails;  /* of those, the ones it reset (its daemon is gone) */
};

struct r2_comm {
	struct r2d *d;
	uint32_t id;
	uint64_t serial;       /* never reused (ids are): names it in events */
	struct r2_uid uid;
	uint64_t key;          /* names it in chunk headers: uid host_id ^ nonce */
	bool root_local;       /* this daemon is the root (bootstrap) */
	bool joined_sent;      /* non-root: JOIN sent to the root */
	bool have_membership;
	uint64_t membership_us; /* when the membership became known */
	int my_host;
	struct r2_host *hosts; /* [nhosts] once the membership is known */
	int *rank_host;        /* [nranks] */
	uint64_t coll_seq;     /* collectives run so far (rail-phase opseq) */
	uint64_t coll_matched; /* collectives the dispatcher matched (under d->lock) */
	/* a member left (destroy or abort, here or on another host): the
	 * collectives numbered above gone_after cannot run (UINT64_MAX: none
	 * left), and left_why says who (MSG_COMM_REASON while not broken) */
	_Atomic uint64_t gone_after;
	char left_why[128];
	struct { uint64_t key, next; } *p2p; /* send/recv counters per (src, dst) */
	uint32_t np2p, capp2p;
	void *p2p_ops;         /* transfers across hosts in flight (exec_rail.c) */
	struct r2_rmsg *p2p_stash; /* transfer chunks that came before their op */
	struct r2_rmsg *deferred;  /* chunks of later collectives */
	void *acks_owed;           /* ACKs owed for eager messages (exec_rail_ack.c) */
	/* mailbox: rail messages for the executor */
	pthread_mutex_t mbox_lock;
	pthread_cond_t mbox_cond;
	struct r2_rmsg *mbox_head, *mbox_tail;
	/* bumped with every message put in and every operation queued: what a
	 * busy-polling executor watches (rl_mbox_spin), without the locks */
	atomic_uint mbox_gen;
	/* the executor waits only for acknowledgements of lingering messages
	 * (r2_p2p_pump, quiet): an ACK or a data chunk put in does not wake
	 * it; they wait for its next look (the next operation, at most
	 * rl_linger_look_ms); mbox_lock */
	bool mbox_quiet;
	int apply_inflight; /* chunks on the apply queue (exec_rail.c); mbox_lock */
	enum r2_comm_state state;
	int broken_err;
	char why[192];          /* the reason it broke (MSG_COMM_REASON) */
	_Atomic int abort_err;  /* set when broken: executors stop waiting for peers */
	char tenant[256];
	int mode;           /* enum r2_mode (planner.h) every host agreed on; -1: not known yet */
	uint32_t owner_uid; /* uid of the first local rank's process */
	/* root: the peer whose JOIN made it here (no local rank had joined
	 * yet); 0: a local rank made it (bootstrap.c caps these per peer) */
	uint64_t begun_by;
	uint32_t share;     /* r2ccl_share_t the owner chose (who else may join) */
	int nranks;
	int joined;
	int local_ranks;
	int nhosts;
	uint64_t created_us;
	struct r2_comm_member *m; /* [nranks] */
	uint64_t ops_total;
	uint64_t op_errors, bytes_total; /* under d->lock (metrics) */
	/* under d->lock: when a collective across hosts last completed; every
	 * host took part, so each was alive then, even one this host has no path
	 * to (a plan that routes around it: health_agree.c's peer timeout) */
	uint64_t coll_done_us;
	uint64_t lat_ns_total;           /* operations' latencies summed (r2cclctl top) */
	int refs; /* under d->lock: 1 for the table + executions in flight */

	/* executor */
	pthread_t thread;
	bool thread_started;
	pthread_cond_t cond;
	bool stop;
	struct r2_exec *exec_head, *exec_tail; /* matched operations to run */
	bool executing;
	struct r2_comm *next;
};

/* Made here by a peer's JOIN and still waiting, no local rank in it yet:
 * counted against that peer's cap (bootstrap.c), not against max_comms
 * (comm.c). */
static inline bool r2_comm_begun_waiting(const struct r2_comm *c)
{
	return c->state == R2_COMM_JOINING && c->begun_by && c->owner_uid == (uint32_t)-1;
}

#endif
