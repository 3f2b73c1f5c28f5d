/* SPDX-License-Identifier: MIT */
/*
 * What every layer of r2ccld shares (docs/architecture.md, "Layers"): the
 * daemon (struct r2d), the parameter indices, and the records of a session
 * and of a memory region. Their functions live in the control layer
 * (control/control.h); the engine reaches them through engine/source.h.
 *
 * Threads:
 *  - the control loop (libuv, main thread): the Unix socket, sessions'
 *    control frames, signals, the systemd watchdog, r2cclctl requests;
 *  - the engine dispatcher (engine/engine.c): waits on every session's doorbell,
 *    copies and validates submissions, matches them across the ranks of a
 *    communicator, runs small operations inline and hands large ones to
 *  - one executor thread per communicator (so a long collective of one
 *    communicator never delays another), which uses
 *  - the reduction helper pool (parallel-for over element ranges).
 *
 * Locking: d->lock protects the session list, every session's memory table,
 * every communicator's membership and op queues. Nobody holds it while moving
 * data: an operation being executed holds references on the sessions (and
 * thus the mappings) it touches, so a client that dies mid-operation cannot
 * unmap memory under the executor.
 */
#ifndef R2CCL_DAEMON_H
#define R2CCL_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "framing.h"
#include "params.h"
#include "r2ccl.h"
#include "ring.h"
#include "base/topology.h"

struct r2d;
struct r2_engine;
struct r2_comm;
struct r2_rails;
struct r2_health;
struct r2_net_events;
struct r2_source_ops;
struct r2_outbuf;
struct r2_metrics;

/* Parameter indices (control/config_params.c holds the table). */
enum r2d_param {
	P_SOCKET,
	P_SOCKET_MODE,
	P_SOCKET_OWNER,
	P_SOCKET_GROUP,
	P_CONFIG,
	P_RAILS,
	P_TOPOLOGY_XML,
	P_LOG_LEVEL,
	P_OP_TIMEOUT_MS,
	P_BOOTSTRAP_TIMEOUT_MS,
	P_MAX_FRAME,
	P_MAX_SESSIONS,
	P_MAX_OUTQ,
	P_MAX_MEM_PER_SESSION,
	P_REDUCE_THREADS,
	P_APPLY_THREADS,
	P_INLINE_MAX,
	P_SYSTEMD,
	P_HB_INTERVAL,
	P_MAX_RETRIES,
	P_RECURSION_THRESH,
	P_ROUTING_ALGO,
	P_LOGSTEP,
	P_LOGSTEP_HOSTS,
	P_PROXY_BUF_SIZE,
	P_PROXY_POOL_MAX,
	P_MODE,
	P_PORT,
	P_TCP_STREAMS,
	P_TCP_THREADS,
	P_TCP_SNDBUF,
	P_TCP_RCVBUF,
	P_TCP_NODELAY,
	P_TCP_LATENCY_LANE,
	P_TCP_CONGESTION,
	P_TCP_ZERO_COPY,
	P_TCP_WARMUP,
	P_TCP_RX_DIRECT,
	P_CHUNK_SIZE,
	P_EAGER_MAX,
	P_EAGER_HOSTS,
	P_ACK_LINGER,
	P_STEP_ORDER,
	P_INJECT_DUP,
	P_INJECT_APPLY_DELAY_US,
	P_INJECT_REFUSE,
	P_SPIN_US,
	P_CONTROL_BATCH,
	P_EXEC_SPIN_US,
	P_COST_ALPHA_US,
	P_COST_NIC_BW,
	P_HB_MISSES,
	P_HB_STALL_MISSES,
	P_RECOVER_STABLE_MS,
	P_PEER_TIMEOUT_MS,
	P_DEGRADED_PCT,
	P_TRANSPORT,
	P_IB_HCA,
	P_IB_TIMEOUT,
	P_IB_RETRY_CNT,
	P_IB_QPS_PER_CONN,
	P_IB_TC,
	P_IB_SL,
	P_IB_GID_INDEX,
	P_IB_SLOT_SIZE,
	P_IB_SRQ_DEPTH,
	P_IB_SQ_DEPTH,
	/* the GPU path (daemon/gpu/) */
	P_GPU_COPY,
	P_GPU_BLOCKS,
	P_GPU_SPLIT_MIN,
	P_GPU_STAGE_CACHE,
	P_GPU_STAGE_PIECES,
	P_GPU_LEGACY_IPC,
	/* caps on what a client can make the daemon hold (docs/security.md) */
	P_MAX_SESSIONS_PER_UID,
	P_MAX_PREHELLO,
	P_MAX_PREHELLO_PER_UID,
	P_HELLO_TIMEOUT_MS,
	P_MAX_FRAME_PREHELLO,
	P_MAX_COMMS,
	P_MAX_COMMS_PER_UID,
	P_MAX_PENDING_OPS,
	P_MAX_REGS,
	P_MAX_REGS_PER_UID,
	P_MAX_MEM,
	P_MAX_MEM_PER_UID,
	P_MAX_REQ_RATE,
	/* metrics (control/metrics.c) */
	P_METRICS_LISTEN,
	P_METRICS_TEXTFILE,
	/* the peer port (docs/security.md) */
	P_PEER_AUTH,
	P_CLUSTER_KEY_FILE,
	P_PEER_MAX_PREHELLO,
	P_PEER_MAX_PREHELLO_PER_ADDR,
	P_PEER_HELLO_TIMEOUT_MS,
	/* tenants (net/tenants.c, docs/tenancy.md) */
	P_SCHED,
	P_SCHED_WINDOW,
	P_SCHED_QUANTUM,
	P_SCHED_PRIO_RUN,
	P_SCHED_MOVE,
	P_COUNT
};

/* A session's requests in its tenant's max_req_rate window
 * (r2d_tenants_req, net/tenants.h). */
struct r2_req_slot {
	uint64_t win; /* the window's start */
	uint32_t n;   /* its requests in it */
	bool charged; /* the last check counted one (refunded if no frame came) */
};

/* The caps in force (config.c resolves the "0: auto" defaults from the host
 * at start-up and on SIGHUP); every layer reads them under d->lock. */
struct r2d_caps {
	uint32_t sessions, sessions_per_uid;
	uint32_t prehello, prehello_per_uid, prehello_root; /* root's reserved slots */
	uint32_t hello_timeout_ms, prehello_frame;
	uint32_t comms, comms_per_uid;
	uint32_t pending_ops; /* per member of a communicator */
	uint32_t regs, regs_per_uid;
	uint64_t mem, mem_per_uid;
	uint32_t req_rate; /* control requests per second per session */
};

extern const struct r2_param_def r2d_param_defs[P_COUNT];
_Static_assert(P_COUNT <= R2_PARAM_MAX, "raise R2_PARAM_MAX (common/params.h)");

/* Operation statistics of one tenant (metrics, control/metrics.c): the
 * engine adds each completed operation under d->lock (r2d_exec_complete).
 * Latency: from the first rank's submission to the completion, counted in
 * the first bucket whose upper bound (R2_LAT_BOUNDS, seconds) holds it;
 * lat[R2_LAT_NBUCKETS] is +Inf. */
#define R2_LAT_BOUNDS                                                                      \
	{ 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, \
	  1, 2.5, 5, 10 }
#define R2_LAT_NBUCKETS 16
#define R2_OPSTAT_TENANTS 32 /* then "_other" (no unbounded labels) */
#define R2_OPSTAT_NKINDS 8   /* enum r2_opcode (ring.h: R2_OP_MAX) */
struct r2_op_stats {
	char tenant[128];
	uint64_t ops[R2_OPSTAT_NKINDS][2]; /* by opcode: [0] succeeded, [1] failed */
	uint64_t bytes[R2_OPSTAT_NKINDS];  /* the largest buffer of a rank's op */
	uint64_t lat[R2_LAT_NBUCKETS + 1];
	double lat_sum;
};

/* A region of client memory the daemon mapped (memfd, sealed). */
struct r2_memreg {
	uint32_t id;
	int fd;
	uint64_t size;
	void *addr;
	atomic_int refs; /* the session's table + operations using it */
	struct r2_memreg *next;
};

struct r2_session {
	struct r2d *d;
	const struct r2_source_ops *src; /* what the engine calls (engine/source.h) */
	uint64_t id;
	int fd;
	uv_poll_t poll;
	int poll_events;
	struct r2_frame_reader reader;
	bool hello_done;
	bool control_only;
	bool closing;  /* loop side: being torn down */
	atomic_bool dead; /* engine side: no more completions (set under d->lock, read without) */
	atomic_int refs;

	/* identity */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	/* the connecting process, race-free (SO_PEERPIDFD, else pidfd_open of
	 * pid at accept): -1 if neither worked. Its pid as the client sees it
	 * (the last of /proc/<pid>/status NSpid), for the owner check of legacy
	 * CUDA IPC handles (daemon/gpu/owner.h). */
	int pidfd;
	pid_t nspid;
	int nslevels; /* pid namespaces below the daemon's /proc's, plus 1 */
	char tenant[256];
	int tenant_idx; /* its tenant in the scheduler's table (net/tenants.h) */
	char name[64];

	/* shared ring */
	int ring_fd, sq_efd, cq_efd;
	struct r2_ring_shm *ring;
	pthread_mutex_t cq_lock;
	uint32_t sq_seen;   /* dispatcher's private copy of sq_head */

	/* registered memory (under d->lock) */
	struct r2_memreg *mem;
	uint32_t next_mem_id;
	uint64_t mem_bytes;
	uint32_t nmem;

	/* outgoing control frames not yet written (client slow to read) */
	struct r2_outbuf *outq_head, *outq_tail;
	size_t outq_bytes;

	uint64_t ops_total;
	uint64_t connected_at_us;
	/* control requests in the current 100 ms window (max_req_rate), and
	 * until when the socket is not read after the window was used up */
	uint64_t req_window_us;
	uint32_t req_count;
	uint64_t throttled_until_us;
	struct r2_req_slot treq; /* its tenant's max_req_rate (net/tenants.h) */
	struct r2_session *next;
};

/* The daemon. Each layer keeps its state in its own group below (the
 * engine's, rails' and health's behind opaque pointers); a layer writes only
 * its own group. Reads across groups: the engine reads `draining`; net reads
 * the communicator list under d->lock (membership only, base/comm_record.h);
 * control reads every group for r2cclctl and the tick. */
struct r2d {
	/* base: every layer */
	uv_loop_t *loop;
	struct r2_params params;
	struct r2_topology topo;
	pthread_mutex_t lock;
	uint64_t start_us;
	char hostname[64];
	uint64_t host_id; /* random per daemon start; names this daemon in unique ids */

	/* control (control/): the socket, the loop's handles, sessions */
	int listen_fd;
	uv_poll_t listen_poll;
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t tick;      /* watchdog, timeouts, drain */
	bool systemd;
	unsigned socket_mode;
	uint64_t watchdog_usec;
	uint64_t last_watchdog_us;
	struct r2_session *sessions;
	uint32_t nsessions;
	uint64_t next_session_id;
	bool draining;
	uint64_t drain_deadline_us;
	int exit_code;
	struct r2d_caps caps;
	uint64_t listen_paused_until_us; /* EMFILE back-off (server.c) */
	uint64_t quota_refusals;         /* callers refused at a cap */
	struct r2_metrics *metrics; /* metrics.c */

	/* engine (engine/): communicators, the dispatcher, counters */
	struct r2_comm *comms;
	uint32_t next_comm_id;
	uint64_t comm_serial; /* the last r2_comm serial given */
	struct r2_engine *engine;
	void *orphans; /* rail messages for communicators not ready yet */
	uint32_t norphans;
	uint64_t orphan_bytes; /* their payloads (capped: exec_rail_mbox.c) */
	void *comm_tombs; /* communicators that failed lately (engine/comm.c) */
	uint64_t ops_total, op_errors_total;
	struct r2_op_stats op_stats[R2_OPSTAT_TENANTS]; /* under d->lock */
	uint32_t nop_stats;
	atomic_uint_fast64_t chunks_dup_dropped; /* delivered twice, applied once */
	/* data chunks refused (NACK, busy) as they could not be kept here */
	atomic_uint_fast64_t chunks_refused;
	atomic_uint_fast64_t eager_ops_total;    /* small AllReduces in one exchange */
	atomic_uint_fast64_t chunks_applyq_total; /* received chunks applied on the apply queue */
	atomic_uint_fast64_t order_holds_total; /* chunks step_order held back, at each look */
	atomic_uint_fast64_t bruck_ops_total;   /* rail phases by a Bruck plan (any n) */
	/* eager messages of this host's taken as acknowledged by the peer's
	 * next collective's chunk; ACKs this host wrote for eager messages
	 * after waiting (engine/exec_rail_ack.c) */
	atomic_uint_fast64_t acks_implied_total, acks_owed_sent_total;

	/* net (net/): rails, health, and what net reports to the engine */
	struct r2_rails *rails;
	struct r2_health *health; /* health.c */
	const struct r2_net_events *net_ev; /* set by the engine (net/net.h) */
	struct r2_tenants *tenants; /* tenants.c: the scheduler's table and queues */
};

/* fatal.c: a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes
 * the signal, the thread and a backtrace to stderr, then takes its default
 * action. Called once, first thing in main. */
void r2d_fatal_signals_install(void);

#endif
