/* SPDX-License-Identifier: MIT */
/*
 * Transports (BRIEF.md decision 5): one table of operations, one provider per
 * file (tcp.c, verbs.c), like rdma-core's providers and NCCL's net plugins.
 *
 * A transport instance (struct r2_tp) drives one rail: one NIC of this host.
 * It listens on the NIC's address, connects to peer daemons' addresses on the
 * same rail, and moves messages. A message is a chunk header (struct
 * r2_chunk_hdr, below) plus an optional payload. Each connection to a peer
 * may use several streams (TCP sockets / QPs); a message travels whole on
 * one stream, and the provider spreads messages over streams.
 *
 * Completions: the provider reports, through its completion queue:
 *   R2_TPC_RECV   a message arrived: hdr and payload (a buffer the provider
 *                 owns until the consumer calls ops->release(buf));
 *   R2_TPC_SEND   a message was handed to the network (its payload buffer
 *                 may be reused; being sent is not being delivered: the
 *                 engine's acknowledgements say that);
 *   R2_TPC_CONN   a connection (peer, rail) became usable (after connect or
 *                 accept and the hello exchange);
 *   R2_TPC_ERROR  a connection failed (peer, status): the health layer
 *                 decides what it means for the rail.
 * Progress is the provider's business: tcp runs dedicated progress threads,
 * so the engine never blocks on a socket. The provider signals its
 * completion eventfd whenever it queues a completion.
 *
 * Every operation returns 0 or a negative errno; an operation a provider
 * lacks returns -EOPNOTSUPP (r2_tp_dummy_ops fills the gaps).
 */
#ifndef R2CCL_TRANSPORT_H
#define R2CCL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include "config.h" /* HAVE_IBVERBS */

/* Message kinds carried in r2_chunk_hdr.kind */
enum r2_msg_kind {
	R2_MSG_DATA = 1,    /* a chunk of a collective's data */
	R2_MSG_ACK = 2,     /* acknowledges (comm, opseq, step, chunk, src) */
	R2_MSG_CTRL = 3,    /* daemon-to-daemon control: protobuf payload */
	R2_MSG_HEARTBEAT = 4,
};

/* R2_MSG_HEARTBEAT flags: 0 asks for an answer, 1 is the answer, 2 is a new
 * TCP connection's warm-up payload (dropped, not answered) */
#define R2_HB_WARMUP 2

/* On the wire, little-endian, 64 bytes. Every chunk carries (communicator,
 * operation sequence, step, chunk index) so the receiver applies it exactly
 * once whatever rail or stream it came by, and whenever it comes. */
struct r2_chunk_hdr {
	uint32_t magic;     /* R2_CHUNK_MAGIC */
	uint16_t kind;      /* enum r2_msg_kind */
	uint16_t flags;
	uint64_t comm;      /* communicator key (both ends agree: from the uid) */
	uint64_t opseq;     /* operation sequence number in the communicator */
	uint32_t step;      /* planner step */
	uint32_t chunk;     /* chunk index within (opseq, step, src -> dst) */
	uint32_t src, dst;  /* host indices in the communicator */
	uint64_t off;       /* byte offset in the working buffer */
	uint32_t len;       /* payload bytes following the header */
	uint32_t aux;       /* kind-specific (CTRL: message type; ACK: bytes acknowledged) */
};
#define R2_CHUNK_MAGIC 0x4b484332u /* "2CHK" */
/* hdr.flags for the transport: a latency-class tenant's message (net/
 * tenants.c), sent on the transport's latency lane where it has one (tcp
 * with cfg.lane: a stream of its own per peer, which no other message
 * takes); other transports send it as any. Receivers ignore it. */
#define R2_CHUNK_URGENT 0x40
/* hdr.flags for the transport: a message of a latency-bound operation (an
 * eager AllReduce's, engine/exec_rail_eager.c), likely followed by another
 * to the same peer within microseconds: the thread that read it polls for
 * cfg.spin_us before it sleeps (tcp). Senders that do not know it send 0;
 * receivers that do not know it ignore it. */
#define R2_CHUNK_POLL 0x100
_Static_assert(sizeof(struct r2_chunk_hdr) == 56,
	       "chunk header size");

struct r2_tp;
struct r2_tp_conn;

enum r2_tpc_type { R2_TPC_RECV = 1, R2_TPC_SEND, R2_TPC_CONN, R2_TPC_ERROR };

struct r2_tp_cqe {
	uint8_t type;             /* enum r2_tpc_type */
	int status;               /* 0 or negative errno (ERROR, failed SEND) */
	uint64_t peer;            /* peer daemon id */
	struct r2_tp_conn *conn;
	struct r2_chunk_hdr hdr;  /* RECV: the header; SEND: the header sent */
	void *buf;                /* RECV: payload (release it); SEND: payload pointer given */
	uint64_t ctx;             /* SEND: the caller's context */
	int stream;               /* RECV/SEND: index of the stream it used (-1: n/a) */
};

/* What a rail instance is configured with. */
struct r2_tp_config {
	char ifname[64];          /* the NIC (netdev) */
	struct in_addr addr;      /* its IPv4 address: bind here */
	uint16_t port;            /* listen port (0: any; the chosen one is reported) */
	int rail;                 /* rail index on this host */
	uint64_t self_id;         /* this daemon's id */
	int streams;              /* streams per peer connection (R2CCL_TCP_STREAMS) */
	bool lane;                /* tcp: one stream more, R2_CHUNK_URGENT's alone (tcp_latency_lane) */
	int sndbuf, rcvbuf;       /* socket buffer sizes, 0 = kernel default */
	bool nodelay;             /* TCP_NODELAY */
	char congestion[16];      /* TCP_CONGESTION; "": the kernel's */
	bool bind_device;         /* SO_BINDTODEVICE where permitted */
	uint32_t max_msg;         /* largest payload accepted (chunk size cap) */
	int progress_threads;     /* per rail */
	uint32_t spin_us;         /* tcp: a progress thread polls its sockets this long
				   * after an R2_CHUNK_POLL message before it
				   * sleeps (exec_spin_us; tcp.c progress_main) */
	uint32_t user_timeout_ms; /* TCP_USER_TIMEOUT and connect/hello timeout base (0: 5000) */
	uint64_t max_queued;      /* per-peer queued send bytes before -EAGAIN (0: 64 MiB) */
	/* tcp: a received data chunk or acknowledgement goes to rx_direct,
	 * called on the progress thread that read it, instead of the
	 * completion queue; false: it is queued after all (NULL: always) */
	bool (*rx_direct)(void *arg, const struct r2_tp_cqe *e);
	/* tcp: a data message's send completion (ctx > 1) goes to
	 * sent_direct, called on the progress thread that wrote its last
	 * byte while it holds no lock, instead of the completion queue;
	 * false: it is queued after all (NULL: always) */
	bool (*sent_direct)(void *arg, const struct r2_tp_cqe *e);
	void *rx_arg; /* both's */
	/* verbs provider (0 / empty: the default; the daemon fills them from its
	 * parameters ib_*, docs/transports.md) */
	char ib_hca[128];         /* R2CCL_IB_HCA: NCCL filter (mlx5_0:1, ^mlx5_2) */
	int ib_qps;               /* RC QPs per peer (R2CCL_IB_QPS_PER_CONN; default: streams) */
	int ib_timeout;           /* R2CCL_IB_TIMEOUT: local ACK timeout exponent (default 14) */
	int ib_retry_cnt;         /* R2CCL_IB_RETRY_CNT (default 7) */
	int ib_tc;                /* traffic class (R2CCL_IB_TC, default 0) */
	int ib_sl;                /* service level (R2CCL_IB_SL, default 0) */
	uint32_t ib_slot_size;    /* receive/send slot bytes (R2CCL_IB_SLOT_SIZE, default 64 KiB) */
	int ib_recv_depth;        /* shared receive queue depth (R2CCL_IB_SRQ_DEPTH, default 256) */
	int ib_send_depth;        /* send work requests per QP (R2CCL_IB_SQ_DEPTH, default 64) */
	bool ib_gid_fixed;        /* use ib_gid_index (R2CCL_IB_GID_INDEX); false: pick the GID */
	int ib_gid_index;
	uint32_t poll_busy_us;    /* progress: busy-poll slice while loaded (default 10) */
	uint32_t poll_idle_us;    /* no completion for this long: sleep on the channel (default 100) */
	/* the peer port (docs/security.md): how hellos are authenticated, and
	 * what an accepted connection may hold before its hello is done */
	int auth;                 /* enum r2_tp_auth */
	uint8_t auth_key[64];     /* R2_TP_AUTH_KEY: the HMAC key (the cluster key, or
				   * its SHA-256 when longer than 64 bytes) */
	uint32_t auth_key_len;
	uint32_t hello_timeout_ms; /* an accepted stream's hello done within (0: 3000) */
	uint32_t prehello_max;    /* accepted streams before their hello, all (0: 256) */
	uint32_t prehello_per_addr; /* the same from one source address (0: 16) */
};

/* r2_tp_config.auth */
enum r2_tp_auth {
	R2_TP_AUTH_NONE = 0, /* no key on either side (peer_auth = off; unit tests) */
	R2_TP_AUTH_KEY,      /* every hello proves the cluster key, both ways */
	R2_TP_AUTH_REFUSE,   /* no key here: every hello refused, no dial made */
};

/* The providers that can drive a NIC, best first (r2_tp_select). */
#define R2_TP_MAX_CHOICES 4
struct r2_tp_choice {
	const struct r2_tp_ops *ops;
	int probe;                /* the probe's answer: 0, or -EINVAL (cfg not valid for it) */
	char dev[64];             /* the provider's device of the NIC ("rxe0:1"); "" none */
	char desc[80];            /* the same for people ("rxe0 port 1"); "" none */
};

/* Capabilities (r2_tp_ops.caps): what the engine may rely on, so that it
 * never asks which provider a rail has. */
/* post_send reads the payload straight from the caller's memory, whatever
 * memory it is (registered or not), until its SEND completion: the engine
 * may send chunks from the working buffer itself (tcp_zero_copy). */
#define R2_TP_CAP_ZERO_COPY (1u << 0)
/* Streams ride TCP congestion control: a new connection starts in slow
 * start (the rails warm it up: tcp_warmup) and the host's TCP settings
 * (net.ipv4.tcp_slow_start_after_idle) apply. */
#define R2_TP_CAP_STREAMS (1u << 1)
/* A received data chunk or ACK goes to cfg.rx_direct, a data message's send
 * completion to cfg.sent_direct, from the provider's own thread (when set):
 * the rails thread is not on a message's way in, nor on its completion's. */
#define R2_TP_CAP_RX_DIRECT (1u << 2)

struct r2_tp_ops {
	const char *name;
	unsigned caps;            /* R2_TP_CAP_* */
	/* Whether this provider can drive the NIC cfg->ifname as cfg says
	 * (cfg->ib_hca filter for verbs): 0 with the provider's device of it
	 * in c->dev and c->desc (left "" when it has none), -ENODEV when not,
	 * -EINVAL when cfg is not valid for it (a bad filter). NULL: any NIC. */
	int (*probe)(const struct r2_tp_config *cfg, struct r2_tp_choice *c);
	/* Creates the rail instance, starts its progress threads and listens. */
	int (*open)(const struct r2_tp_config *cfg, struct r2_tp **out);
	void (*close)(struct r2_tp *tp);
	/* The port it listens on (for the address exchange). */
	int (*listen_port)(struct r2_tp *tp, uint16_t *port);
	/* Starts connecting to a peer daemon's address on this rail. Completes
	 * with R2_TPC_CONN or R2_TPC_ERROR. Accepted connections from peers
	 * also report R2_TPC_CONN (the hello carries the peer id). */
	int (*connect)(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port);
	/* Drops every stream to the peer (R2_TPC_ERROR is not reported). */
	int (*disconnect)(struct r2_tp *tp, uint64_t peer_id);
	/* Memory registration (verbs: ibv_reg_mr; tcp: bookkeeping only). */
	int (*reg_mem)(struct r2_tp *tp, void *addr, size_t len, void **handle);
	int (*dereg_mem)(struct r2_tp *tp, void *handle);
	/* Queues a message to a peer (any stream of the connection). buf must
	 * stay valid until its R2_TPC_SEND completion. -ENOTCONN if no
	 * connection, -EAGAIN if the send queue is full. A message with no
	 * record (ctx 0) that is not a data chunk (an ACK, a heartbeat) may
	 * complete silently once written (tcp: nobody takes that completion,
	 * and it would cost the rails thread a wake-up); its failure is still
	 * reported. */
	int (*post_send)(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
			 const void *buf, uint64_t ctx);
	/* Receive buffers are the provider's (from its pool); give one back. */
	void (*release)(struct r2_tp *tp, void *buf);
	/* Takes up to max completions; never blocks. */
	int (*poll)(struct r2_tp *tp, struct r2_tp_cqe *out, int max);
	/* An eventfd that becomes readable when completions are queued. */
	int (*event_fd)(struct r2_tp *tp);
	/* Health hooks: link state of the NIC (1 up, 0 down, <0 unknown) and
	 * counters for the throughput monitor. */
	int (*link_state)(struct r2_tp *tp);
	int (*stats)(struct r2_tp *tp, uint64_t *tx_bytes, uint64_t *rx_bytes);
};

/* Providers. */
extern const struct r2_tp_ops r2_tp_tcp_ops;
#if HAVE_IBVERBS
extern const struct r2_tp_ops r2_tp_verbs_ops;
#endif


/* Picks the providers for the NIC cfg->ifname, in the order the daemon
 * tries to open them: verbs where the NIC has an RDMA port that passes
 * cfg->ib_hca, then tcp (any NIC with an IPv4 address). transport is the
 * daemon's setting: "auto" (that table), or a provider's name ("tcp"): that
 * provider alone. A provider whose probe answers -EINVAL is listed with
 * probe -EINVAL (the caller says so and goes on). Returns the number
 * filled (0: none fits), or -EINVAL for an unknown transport name. */
int r2_tp_select(const struct r2_tp_config *cfg, const char *transport,
		 struct r2_tp_choice *out, int max);

/* Fills every NULL operation of ops with one returning -EOPNOTSUPP. */
void r2_tp_fill_dummy_ops(struct r2_tp_ops *ops);

#endif
