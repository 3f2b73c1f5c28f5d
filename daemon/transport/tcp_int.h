/* SPDX-License-Identifier: MIT */
/*
 * The tcp provider's private header: its objects (rail instance, progress
 * thread, peer connection, stream, queued message) and what its files share.
 * The provider: tcp.c (instance, progress threads, operation table; its
 * header comment describes the whole), tcp_conn.c (connection management),
 * tcp_data.c (the data path).
 */
#ifndef R2CCL_TCP_INT_H
#define R2CCL_TCP_INT_H

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "tcp_wire.h"
#include "tp_common.h"
#include "transport.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define TCP_DEFAULT_STREAMS 2
#define TCP_MAX_STREAMS 64
#define TCP_MAX_THREADS 16
#define TCP_DEFAULT_MAX_MSG (64u << 20)
#define TCP_DEFAULT_MAX_QUEUED (64ull << 20)
#define TCP_DEFAULT_USER_TIMEOUT_MS 5000u
#define TCP_STAGE_SIZE (32u << 10)
#define TCP_RX_DIRECT_MIN (16u << 10) /* payload left >= this: recv into it */
#define TCP_RX_BUDGET (16u << 20)     /* bytes per stream per wake-up */
#define TCP_TX_IOV 64
#define TCP_TX_BATCH (8u << 20)
#define TCP_TX_ROUNDS 8
#define TCP_TX_INLINE_MAX (64u << 10) /* post_send writes itself up to this */
#define HDR_SIZE R2_TP_HDR_SIZE

/* pool size classes: 4 KiB .. 64 MiB */
#define POOL_MIN_SHIFT 12
#define POOL_NCLASS 15
#define POOL_CLASS_BYTES (128u << 20) /* cached bytes per class (at most 128 buffers) */
#define POOL_BUF_MAGIC 0x50324342u
#define POOL_HDR 64u


enum { OBJ_WAKE = 1, OBJ_LISTEN, OBJ_STREAM };
enum { ST_CONNECTING = 1, ST_HELLO, ST_UP };
enum { RX_HELLO = 1, RX_PROOF, RX_HDR, RX_PAYLOAD }; /* RX_PROOF: acceptor, after its ANSWER */
enum { ROLE_DIAL = 1, ROLE_ACCEPT };

struct tcp_obj {
	int kind;
};

struct tcp_msg {
	struct tcp_msg *next;
	struct r2_chunk_hdr wire; /* little-endian */
	const void *buf;
	uint32_t len;
	uint64_t done; /* bytes of header + payload written */
	uint64_t ctx;
};

struct tcp_thread;
struct tcp_peer;

struct tcp_stream {
	struct tcp_obj obj;
	struct r2_tp *tp;
	struct tcp_thread *th;     /* owner: the only thread doing I/O on fd, closes it */
	struct tcp_stream *anext, *aprev; /* tp->streams, under tp->b.lock */
	struct tcp_peer *peer;     /* under tp->b.lock; NULL until the hello (acceptor) */
	int fd;
	int idx;
	int role;
	int state;                 /* owner thread (read under tp->b.lock by others) */
	atomic_bool dead;
	int fail_status;           /* under tp->b.lock, set with dead */
	uint64_t t_start;
	uint64_t nonce;            /* dialer: the connection's nonce */
	/* the hello exchange (owner thread): the DIAL (sent or received) and
	 * the ANSWER, which both proofs cover (tcp_wire.h) */
	struct tcp_hello hs_dial, hs_answer;
	/* acceptor: counted in tp->prehello until its PROOF checks out */
	bool prehello;             /* under tp->b.lock */
	struct in_addr raddr;      /* acceptor: the dialer's address */

	/* tx: queue under qlock, consumed only by the owner */
	pthread_mutex_t qlock;
	struct tcp_msg *q_head, *q_tail;
	bool ev_out;               /* EPOLLOUT armed (under qlock) */
	bool tx_busy;              /* a thread is writing fd (under qlock): the
				    * owner, or a poster writing inline (tcp_data.c) */
	uint8_t hello_out[TCP_HELLO_SIZE];
	uint32_t hello_left;       /* under qlock */
	_Atomic uint64_t queued;   /* bytes queued (header + payload) */

	/* rx: owner only */
	int rx_phase;
	union {
		struct r2_chunk_hdr hdr;
		uint8_t raw[TCP_HELLO_SIZE]; /* RX_HELLO, RX_PROOF: a packed hello */
	} rx_h;
	uint32_t rx_hgot;
	uint8_t *rx_buf;
	uint32_t rx_need, rx_got;
	uint8_t *stage;
};

struct tcp_peer {
	struct r2_tp_peer h;                /* first: id, table, list (tp->b.peers) */
	uint64_t nonce;
	int role;
	int nstreams, nup, nattached;
	bool conn_reported;
	uint32_t max_msg;                   /* the peer's */
	struct tcp_stream *streams[];
};

struct tcp_thread {
	struct r2_tp *tp;
	pthread_t tid;
	bool started;
	int epfd;
	int wfd;
	struct tcp_obj wake_obj;
	atomic_bool reap;
	uint64_t last_tick;
	bool poll_rx; /* an R2_CHUNK_POLL message delivered since the last look */
};

struct pool_buf {
	uint32_t magic;
	int32_t cls; /* -1: not pooled (larger than the largest class) */
	struct pool_buf *next;
};
_Static_assert(sizeof(struct pool_buf) <= POOL_HDR, "pool header");

struct r2_tp {
	struct r2_tp_base b; /* first: tp_common.h */
	struct r2_tp_config cfg;
	int lfd;
	struct tcp_obj listen_obj;
	atomic_bool stop;
	atomic_bool cc_warned; /* tcp_congestion refused: said once */
	unsigned prehello;     /* accepted streams before their PROOF (b.lock) */

	/* b.lock: peers, streams list, stream<->peer links */
	struct tcp_stream *streams;
	unsigned next_thread;
	int nthreads;
	struct tcp_thread *threads;


	pthread_mutex_t pool_lock;
	struct pool_buf *pool[POOL_NCLASS];
	unsigned pool_n[POOL_NCLASS];

};

/* tcp_conn.c: sockets, streams, peers, hello, dialing and accepting */
void tcp_arm_out(struct tcp_stream *st);
int tcp_bind_device(struct r2_tp *tp, int fd);
void tcp_disarm_out(struct tcp_stream *st);
int tcp_epoll_set(struct tcp_thread *th, int op, int fd, uint32_t events, void *ptr);
int tcp_hello_in(struct r2_tp *tp, struct tcp_stream *st);
void tcp_on_connected(struct r2_tp *tp, struct tcp_stream *st);
void tcp_on_listen(struct r2_tp *tp);
void tcp_peer_fail(struct r2_tp *tp, struct tcp_peer *p, int status, bool report);
void tcp_peer_fail_hook(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report);
struct tcp_peer *tcp_peer_find(struct r2_tp *tp, uint64_t id);
void tcp_peer_free(struct r2_tp *tp, struct tcp_peer *p);
void tcp_reap_streams(struct r2_tp *tp, struct tcp_thread *th);
void tcp_stream_fail(struct r2_tp *tp, struct tcp_stream *st, int status);
void tcp_stream_free(struct r2_tp *tp, struct tcp_stream *st, bool complete, int status);
void tcp_stream_kill(struct tcp_stream *st, int status);
int tcp_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port);

/* tcp_data.c: receive buffers, completions, reading and writing streams */
void tcp_complete_msgs(struct r2_tp *tp, struct tcp_stream *st, struct tcp_msg *m, int status,
		       bool direct);
void tcp_pool_destroy(struct r2_tp *tp);
void tcp_pool_put(struct r2_tp *tp, void *buf);
void tcp_push_simple(struct r2_tp *tp, int type, int status, struct tcp_peer *p);
int tcp_stream_rx(struct r2_tp *tp, struct tcp_stream *st);
int tcp_stream_tx(struct r2_tp *tp, struct tcp_stream *st);
int tcp_dereg_mem(struct r2_tp *tp, void *handle);
int tcp_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
		  const void *buf, uint64_t ctx);
int tcp_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle);
void tcp_release(struct r2_tp *tp, void *buf);

#endif
