// SPDX-License-Identifier: MIT
/*
 * The tcp transport provider (BRIEF.md decision 5): one instance per rail (NIC).
 *
 * Sockets. The instance listens on cfg->addr:cfg->port. Every outgoing socket
 * is bound to cfg->addr before connect (IP_BIND_ADDRESS_NO_PORT), so its
 * traffic leaves by this rail's NIC, and, with cfg->bind_device, also
 * SO_BINDTODEVICE(cfg->ifname) where permitted (EPERM is ignored). Every
 * stream has TCP_USER_TIMEOUT (cfg->user_timeout_ms, default 5 s) and
 * keepalive (idle 2 s, interval 1 s, 3 probes), so a black-holed link is
 * detected without heartbeats; TCP_NODELAY and SO_SNDBUF/SO_RCVBUF from cfg
 * (0 keeps the kernel's default and its auto-tuning).
 *
 * Connections. A connection to a peer daemon has cfg->streams TCP streams
 * (the daemon's tcp_streams; 0, the default, is 1 on a host of fewer than 8
 * cores, else 2 per progress thread). Who dials: either side (a daemon
 * must reach a root that does not know it yet). When both dial each other at once, the connection dialed
 * by the LOWER self_id wins: the higher side drops its own dial quietly (no
 * ERROR) and accepts; the lower side refuses the higher side's streams. A
 * dial to a lower id that fails before it is up reports no ERROR for that
 * reason (the bootstrap timeout bounds a peer that is really unreachable).
 * connect() returns -EISCONN when the peer is connected, -EALREADY while a
 * connection with it (dialed or accepted) is being set up (no second CONN
 * comes then).
 * post_send() sets hdr->magic itself.
 * Each stream starts with a 40-byte hello (struct tcp_hello: magic, version,
 * stream index, nstreams, rail, max_msg, sender id, intended receiver id, a
 * per-connection nonce). The acceptor validates it and answers with its own
 * hello; the dialer checks that the answer comes from the peer it meant.
 * A stream is up on the acceptor when it got the hello, on the dialer when
 * it got the answer; R2_TPC_CONN is reported once per peer, when all its
 * streams are up. (On the dialing side a RECV from the peer can come just
 * before its CONN: the acceptor may send as soon as it has all the hellos.)
 * A hello from a peer that has a connection here with another nonce means
 * the peer reconnected: the old connection fails (ERROR if its CONN had been
 * reported) and the new one replaces it.
 *
 * Failures. Any stream error (reset, EOF, user timeout, malformed header or
 * len > max_msg, connect/hello not done within 2 x user timeout) fails the
 * whole peer connection on this rail: R2_TPC_ERROR (peer, status) is reported
 * once (on the acceptor side only when CONN had been reported; on the dialing
 * side always, as the completion of connect), every stream of it is shut down
 * (so the peer sees it too), and every send still queued completes with
 * R2_TPC_SEND status < 0 (the engine re-sends it elsewhere). disconnect()
 * does the same without ERROR (sends fail with -ECONNABORTED). A bad stream
 * that never said hello is closed alone; the listener keeps going.
 *
 * Data path. post_send() queues the message on the peer's stream with the
 * fewest queued bytes (ties round robin) and arms EPOLLOUT there; -EAGAIN
 * when the peer has more than cfg->max_queued bytes queued (default 64 MiB;
 * one message is always accepted). Progress threads (cfg->progress_threads,
 * default 1; streams are spread over them) run epoll: they write queued
 * messages with sendmsg (header + payload iovecs, several messages per call,
 * partial writes resumed; MSG_NOSIGNAL), and read into a 32 KiB staging
 * buffer that is parsed into headers and small payloads; a large payload is
 * received straight into its final buffer (no copy). Receive buffers come
 * from a pool of power-of-two size classes (64-byte aligned) and go back to
 * it by release(). Messages of one stream arrive in order; across streams
 * no order is promised.
 *
 * Completions go to a mutex-protected queue; the eventfd (event_fd) is
 * readable while the queue is non-empty (poll() clears it when it empties it).
 * RECV buffers must be released before close(). close() stops the threads
 * and drops everything still queued (no completions).
 * Wire format: headers little-endian (converted with htole/letoh).
 */
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
#define HDR_SIZE ((uint32_t)sizeof(struct r2_chunk_hdr))

/* pool size classes: 4 KiB .. 64 MiB */
#define POOL_MIN_SHIFT 12
#define POOL_NCLASS 15
#define POOL_CLASS_BYTES (128u << 20) /* cached bytes per class (at most 128 buffers) */
#define POOL_BUF_MAGIC 0x50324342u
#define POOL_HDR 64u


enum { OBJ_WAKE = 1, OBJ_LISTEN, OBJ_STREAM };
enum { ST_CONNECTING = 1, ST_HELLO, ST_UP };
enum { RX_HELLO = 1, RX_HDR, RX_PAYLOAD };
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
	struct tcp_stream *anext, *aprev; /* tp->streams, under tp->lock */
	struct tcp_peer *peer;     /* under tp->lock; NULL until the hello (acceptor) */
	int fd;
	int idx;
	int role;
	int state;                 /* owner thread (read under tp->lock by others) */
	atomic_bool dead;
	int fail_status;           /* under tp->lock, set with dead */
	uint64_t t_start;
	uint64_t nonce;            /* dialer: the connection's nonce */

	/* tx: queue under qlock, consumed only by the owner */
	pthread_mutex_t qlock;
	struct tcp_msg *q_head, *q_tail;
	bool ev_out;               /* EPOLLOUT armed (under qlock) */
	uint8_t hello_out[sizeof(struct tcp_hello)];
	uint32_t hello_left;       /* under qlock */
	_Atomic uint64_t queued;   /* bytes queued (header + payload) */

	/* rx: owner only */
	int rx_phase;
	union {
		struct tcp_hello hello;
		struct r2_chunk_hdr hdr;
		uint8_t raw[64];
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
	unsigned rr;
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

	/* b.lock: peers, streams list, stream<->peer links */
	struct tcp_stream *streams;
	unsigned next_thread;
	int nthreads;
	struct tcp_thread *threads;


	pthread_mutex_t pool_lock;
	struct pool_buf *pool[POOL_NCLASS];
	unsigned pool_n[POOL_NCLASS];

};

static void hello_le(struct tcp_hello *h)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	h->magic = htole32(h->magic);
	h->version = htole16(h->version);
	h->stream = htole16(h->stream);
	h->nstreams = htole16(h->nstreams);
	h->rail = htole16(h->rail);
	h->max_msg = htole32(h->max_msg);
	h->self_id = htole64(h->self_id);
	h->dst_id = htole64(h->dst_id);
	h->nonce = htole64(h->nonce);
#else
	(void)h;
#endif
}

/* ---- buffer pool ---- */

static int pool_class(uint32_t len)
{
	int c = 0;
	while (c < POOL_NCLASS && (1ull << (POOL_MIN_SHIFT + c)) < len)
		c++;
	return c < POOL_NCLASS ? c : -1;
}

static void *pool_get(struct r2_tp *tp, uint32_t len)
{
	int c = pool_class(len);
	struct pool_buf *b = NULL;
	size_t sz;

	if (c >= 0) {
		pthread_mutex_lock(&tp->pool_lock);
		b = tp->pool[c];
		if (b) {
			tp->pool[c] = b->next;
			tp->pool_n[c]--;
		}
		pthread_mutex_unlock(&tp->pool_lock);
		if (b)
			return (uint8_t *)b + POOL_HDR;
		sz = (size_t)1 << (POOL_MIN_SHIFT + c);
	} else {
		sz = len;
	}
	void *p;
	if (posix_memalign(&p, 64, POOL_HDR + sz))
		return NULL;
	b = p;
	b->magic = POOL_BUF_MAGIC;
	b->cls = c;
	b->next = NULL;
	return (uint8_t *)b + POOL_HDR;
}

static void pool_put(struct r2_tp *tp, void *buf)
{
	if (!buf)
		return;
	struct pool_buf *b = (struct pool_buf *)((uint8_t *)buf - POOL_HDR);
	if (b->magic != POOL_BUF_MAGIC) {
		log_err("tcp: release of a buffer that is not the transport's (%p)", buf);
		return;
	}
	int c = b->cls;
	if (c >= 0 && c < POOL_NCLASS) {
		uint64_t csz = 1ull << (POOL_MIN_SHIFT + c);
		unsigned cap = (unsigned)(POOL_CLASS_BYTES / csz);
		if (cap < 2)
			cap = 2;
		if (cap > 128)
			cap = 128;
		pthread_mutex_lock(&tp->pool_lock);
		if (tp->pool_n[c] < cap) {
			b->next = tp->pool[c];
			tp->pool[c] = b;
			tp->pool_n[c]++;
			b = NULL;
		}
		pthread_mutex_unlock(&tp->pool_lock);
	}
	if (b) {
		b->magic = 0;
		free(b);
	}
}

static void pool_destroy(struct r2_tp *tp)
{
	for (int c = 0; c < POOL_NCLASS; c++) {
		while (tp->pool[c]) {
			struct pool_buf *b = tp->pool[c];
			tp->pool[c] = b->next;
			free(b);
		}
		tp->pool_n[c] = 0;
	}
}

/* ---- completions ---- */

static void complete_msgs(struct r2_tp *tp, struct tcp_stream *st, struct tcp_msg *m, int status)
{
	while (m) {
		struct tcp_msg *next = m->next;
		struct r2_tp_cqe e = {
			.type = R2_TPC_SEND,
			.status = status,
			.peer = st->peer ? st->peer->h.id : 0,
			.conn = (struct r2_tp_conn *)st->peer,
			.hdr = m->wire,
			.buf = (void *)m->buf,
			.ctx = m->ctx,
			.stream = st->idx,
		};
		r2_tp_hdr_le(&e.hdr);
		r2_tp_cq_push(&tp->b.cmpl, &e);
		free(m);
		m = next;
	}
}

static void push_simple(struct r2_tp *tp, int type, int status, struct tcp_peer *p)
{
	r2_tp_cq_push_simple(&tp->b.cmpl, type, status, p->h.id, (struct r2_tp_conn *)p);
}

/* ---- sockets ---- */

static void set_sockopts(struct r2_tp *tp, int fd)
{
	const struct r2_tp_config *c = &tp->cfg;
	int one = 1;

	if (c->nodelay)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (c->congestion[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, c->congestion,
					   (socklen_t)strlen(c->congestion)) < 0 &&
	    !atomic_exchange(&tp->cc_warned, true))
		log_warn("tcp: rail %d: congestion control '%s' refused (%s): the kernel's "
			 "default stays", c->rail, c->congestion, strerror(errno));
	if (c->sndbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &c->sndbuf, sizeof(c->sndbuf));
	if (c->rcvbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &c->rcvbuf, sizeof(c->rcvbuf));
	unsigned ut = c->user_timeout_ms;
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
	int idle = 2, intvl = 1, cnt = 3;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* SO_BINDTODEVICE when asked and permitted; returns 0 or -errno (not EPERM). */
static int bind_device(struct r2_tp *tp, int fd)
{
	if (!tp->cfg.bind_device || !tp->cfg.ifname[0])
		return 0;
	if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, tp->cfg.ifname,
		       (socklen_t)strlen(tp->cfg.ifname)) < 0) {
		if (errno == EPERM || errno == EACCES)
			return 0;
		return -errno;
	}
	return 0;
}

static int epoll_set(struct tcp_thread *th, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };
	return epoll_ctl(th->epfd, op, fd, &ev) < 0 ? -errno : 0;
}

/* under st->qlock */
static void arm_out(struct tcp_stream *st)
{
	if (!st->ev_out) {
		st->ev_out = true;
		epoll_set(st->th, EPOLL_CTL_MOD, st->fd, EPOLLIN | EPOLLOUT, &st->obj);
	}
}

/* under st->qlock */
static void disarm_out(struct tcp_stream *st)
{
	if (st->ev_out) {
		st->ev_out = false;
		epoll_set(st->th, EPOLL_CTL_MOD, st->fd, EPOLLIN, &st->obj);
	}
}

static struct tcp_thread *pick_thread(struct r2_tp *tp)
{
	return &tp->threads[tp->next_thread++ % (unsigned)tp->nthreads];
}

/* under tp->lock */
static struct tcp_stream *stream_new(struct r2_tp *tp, int fd, int role)
{
	struct tcp_stream *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->stage = malloc(TCP_STAGE_SIZE);
	if (!st->stage) {
		free(st);
		return NULL;
	}
	st->obj.kind = OBJ_STREAM;
	st->tp = tp;
	st->fd = fd;
	st->role = role;
	st->idx = -1;
	st->rx_phase = RX_HELLO;
	st->t_start = r2_tp_now_ns();
	pthread_mutex_init(&st->qlock, NULL);
	st->th = pick_thread(tp);
	st->anext = tp->streams;
	if (tp->streams)
		tp->streams->aprev = st;
	tp->streams = st;
	return st;
}

/* Frees a stream the owner already took out of epoll (or close() after the
 * threads stopped); unlinked by the caller. Queued sends fail with status
 * (complete = true) or are dropped. */
static void stream_free(struct r2_tp *tp, struct tcp_stream *st, bool complete, int status)
{
	struct tcp_msg *q;

	if (st->fd >= 0)
		close(st->fd);
	pthread_mutex_lock(&st->qlock);
	q = st->q_head;
	st->q_head = st->q_tail = NULL;
	pthread_mutex_unlock(&st->qlock);
	if (complete) {
		complete_msgs(tp, st, q, status);
	} else {
		while (q) {
			struct tcp_msg *n = q->next;
			free(q);
			q = n;
		}
	}
	pool_put(tp, st->rx_buf);
	free(st->stage);
	pthread_mutex_destroy(&st->qlock);
	free(st);
}

/* ---- peers (all under tp->lock) ---- */

static struct tcp_peer *peer_find(struct r2_tp *tp, uint64_t id)
{
	return (struct tcp_peer *)r2_tp_peer_find(&tp->b.peers, id);
}

static struct tcp_peer *peer_new(struct r2_tp *tp, uint64_t id, int role, int nstreams,
				 uint64_t nonce)
{
	struct tcp_peer *p = calloc(1, sizeof(*p) + (size_t)nstreams * sizeof(p->streams[0]));
	if (!p)
		return NULL;
	p->role = role;
	p->nstreams = nstreams;
	p->nonce = nonce;
	p->max_msg = UINT32_MAX;
	r2_tp_peer_insert(&tp->b.peers, &p->h, id);
	return p;
}

static void peer_free(struct r2_tp *tp, struct tcp_peer *p)
{
	r2_tp_peer_unlink(&tp->b.peers, &p->h);
	free(p);
}

static void wake_thread(struct tcp_thread *th)
{
	atomic_store(&th->reap, true);
	r2_tp_efd_signal(th->wfd);
}

/* Marks a stream for its owner to tear down; under tp->lock. */
static void stream_kill(struct tcp_stream *st, int status)
{
	if (atomic_exchange(&st->dead, true))
		return;
	st->fail_status = status;
	if (st->fd >= 0)
		shutdown(st->fd, SHUT_RDWR);
	wake_thread(st->th);
}

/* Fails a peer connection on this rail; under tp->lock. */
static void peer_fail(struct r2_tp *tp, struct tcp_peer *p, int status, bool report)
{
	if (p->h.failed)
		return;
	p->h.failed = true;
	r2_tp_peer_unhash(&tp->b.peers, &p->h);
	/* A dial to a lower id that fails before it is up was most likely
	 * refused because that peer dialed us at the same time (its
	 * connection wins): no ERROR, its connection reports CONN. */
	if (report && (p->conn_reported || (p->role == ROLE_DIAL && p->h.id > tp->cfg.self_id)))
		push_simple(tp, R2_TPC_ERROR, status, p);
	log_debug("tcp %s: peer %llu failed (%d)", tp->cfg.ifname, (unsigned long long)p->h.id,
		  status);
	for (int i = 0; i < p->nstreams; i++)
		if (p->streams[i])
			stream_kill(p->streams[i], status);
	if (p->nattached == 0)
		peer_free(tp, p);
}

static void peer_fail_hook(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report)
{
	peer_fail(tp, (struct tcp_peer *)p, status, report);
}

/* A stream's own error (owner thread). */
static void stream_fail(struct r2_tp *tp, struct tcp_stream *st, int status)
{
	pthread_mutex_lock(&tp->b.lock);
	if (st->peer)
		peer_fail(tp, st->peer, status, true);
	else
		stream_kill(st, status);
	pthread_mutex_unlock(&tp->b.lock);
}

/* The owner thread tears down its dead streams (after an epoll batch, so no
 * event of the batch points to freed memory). */
static void reap_streams(struct r2_tp *tp, struct tcp_thread *th)
{
	struct tcp_stream *list = NULL;

	pthread_mutex_lock(&tp->b.lock);
	for (struct tcp_stream *st = tp->streams, *next; st; st = next) {
		next = st->anext;
		if (st->th != th || !atomic_load(&st->dead))
			continue;
		if (st->aprev)
			st->aprev->anext = st->anext;
		else
			tp->streams = st->anext;
		if (st->anext)
			st->anext->aprev = st->aprev;
		st->anext = list;
		list = st;
	}
	pthread_mutex_unlock(&tp->b.lock);

	while (list) {
		struct tcp_stream *st = list;
		list = st->anext;
		epoll_ctl(th->epfd, EPOLL_CTL_DEL, st->fd, NULL);
		/* The SEND completions name the peer: keep it until they are out. */
		pthread_mutex_lock(&st->qlock);
		struct tcp_msg *q = st->q_head;
		st->q_head = st->q_tail = NULL;
		pthread_mutex_unlock(&st->qlock);
		complete_msgs(tp, st, q, st->fail_status ? st->fail_status : -ECONNRESET);
		pthread_mutex_lock(&tp->b.lock);
		struct tcp_peer *p = st->peer;
		if (p) {
			p->streams[st->idx] = NULL;
			if (--p->nattached == 0 && p->h.failed)
				peer_free(tp, p);
			st->peer = NULL;
		}
		pthread_mutex_unlock(&tp->b.lock);
		stream_free(tp, st, false, 0);
	}
}

/* ---- hello ---- */

/* owner thread; stages the hello in front of the send queue */
static void stage_hello(struct r2_tp *tp, struct tcp_stream *st, uint64_t dst, int nstreams,
			uint64_t nonce)
{
	struct tcp_hello h = {
		.magic = TCP_HELLO_MAGIC,
		.version = TCP_HELLO_VERSION,
		.stream = (uint16_t)st->idx,
		.nstreams = (uint16_t)nstreams,
		.rail = (uint16_t)tp->cfg.rail,
		.max_msg = tp->cfg.max_msg,
		.self_id = tp->cfg.self_id,
		.dst_id = dst,
		.nonce = nonce,
	};
	hello_le(&h);
	pthread_mutex_lock(&st->qlock);
	memcpy(st->hello_out, &h, sizeof(h));
	st->hello_left = sizeof(h);
	arm_out(st);
	pthread_mutex_unlock(&st->qlock);
}

/* under tp->lock: stream st of peer p is up */
static void stream_up(struct r2_tp *tp, struct tcp_peer *p, struct tcp_stream *st)
{
	st->state = ST_UP;
	if (++p->nup == p->nstreams && !p->conn_reported && !p->h.failed) {
		p->conn_reported = true;
		push_simple(tp, R2_TPC_CONN, 0, p);
		log_debug("tcp %s: peer %llu connected (%d streams)", tp->cfg.ifname,
			  (unsigned long long)p->h.id, p->nstreams);
	}
}

static int hello_in(struct r2_tp *tp, struct tcp_stream *st)
{
	struct tcp_hello h = st->rx_h.hello;
	int ret = 0;

	hello_le(&h);
	if (h.magic != TCP_HELLO_MAGIC || h.version != TCP_HELLO_VERSION)
		return -EPROTO;
	if (h.dst_id != tp->cfg.self_id || h.self_id == tp->cfg.self_id)
		return -EPROTO;

	pthread_mutex_lock(&tp->b.lock);
	if (st->role == ROLE_DIAL) {
		struct tcp_peer *p = st->peer;
		if (!p || p->h.failed)
			ret = -ECONNABORTED;
		else if (h.self_id != p->h.id || h.stream != st->idx || h.nonce != p->nonce ||
			 h.nstreams != p->nstreams)
			ret = -EPROTO;
		else {
			p->max_msg = h.max_msg;
			stream_up(tp, p, st);
		}
		pthread_mutex_unlock(&tp->b.lock);
		return ret;
	}

	/* acceptor */
	if (h.nstreams == 0 || h.nstreams > TCP_MAX_STREAMS || h.stream >= h.nstreams) {
		pthread_mutex_unlock(&tp->b.lock);
		return -EPROTO;
	}
	struct tcp_peer *p = peer_find(tp, h.self_id);
	if (p && p->role == ROLE_ACCEPT && p->nonce == h.nonce && !p->streams[h.stream] &&
	    p->nstreams == h.nstreams) {
		/* one more stream of the connection being set up */
	} else {
		if (p && p->role == ROLE_DIAL && !p->h.failed) {
			/* Both sides dialed: the lower id's connection wins. */
			if (h.self_id > tp->cfg.self_id) {
				pthread_mutex_unlock(&tp->b.lock);
				return -EPROTO; /* ours wins; it drops its own quietly */
			}
			peer_fail(tp, p, -ECONNABORTED, false); /* theirs wins */
			p = NULL;
		}
		if (p) /* the peer reconnected: the old connection is gone */
			peer_fail(tp, p, -ECONNRESET, true);
		p = peer_new(tp, h.self_id, ROLE_ACCEPT, h.nstreams, h.nonce);
		if (!p) {
			pthread_mutex_unlock(&tp->b.lock);
			return -ENOMEM;
		}
	}
	p->max_msg = h.max_msg;
	st->idx = h.stream;
	st->peer = p;
	p->streams[h.stream] = st;
	p->nattached++;
	stage_hello(tp, st, h.self_id, h.nstreams, h.nonce);
	stream_up(tp, p, st);
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}

/* ---- rx ---- */

static void deliver(struct r2_tp *tp, struct tcp_stream *st)
{
	struct r2_tp_cqe e = {
		.type = R2_TPC_RECV,
		.peer = st->peer ? st->peer->h.id : 0,
		.conn = (struct r2_tp_conn *)st->peer,
		.hdr = st->rx_h.hdr,
		.buf = st->rx_buf,
		.stream = st->idx,
	};
	r2_tp_hdr_le(&e.hdr);
	st->rx_buf = NULL;
	st->rx_phase = RX_HDR;
	st->rx_hgot = 0;
	if (atomic_load_explicit(&st->dead, memory_order_relaxed)) {
		pool_put(tp, e.buf);
		return;
	}
	r2_tp_cq_push(&tp->b.cmpl, &e);
}

/* a complete chunk header is in rx_h.hdr */
static int hdr_in(struct r2_tp *tp, struct tcp_stream *st)
{
	struct r2_chunk_hdr h = st->rx_h.hdr;
	r2_tp_hdr_le(&h);
	if (h.magic != R2_CHUNK_MAGIC || h.len > tp->cfg.max_msg)
		return -EPROTO;
	if (h.len == 0) {
		st->rx_buf = NULL;
		deliver(tp, st);
		return 0;
	}
	st->rx_buf = pool_get(tp, h.len);
	if (!st->rx_buf)
		return -ENOMEM;
	st->rx_need = h.len;
	st->rx_got = 0;
	st->rx_phase = RX_PAYLOAD;
	return 0;
}

static int rx_consume(struct r2_tp *tp, struct tcp_stream *st, const uint8_t *d, size_t n)
{
	int r;

	while (n) {
		if (st->rx_phase == RX_PAYLOAD) {
			size_t c = st->rx_need - st->rx_got;
			if (c > n)
				c = n;
			memcpy(st->rx_buf + st->rx_got, d, c);
			st->rx_got += (uint32_t)c;
			d += c;
			n -= c;
			if (st->rx_got == st->rx_need)
				deliver(tp, st);
			continue;
		}
		uint32_t want = st->rx_phase == RX_HELLO ? (uint32_t)sizeof(struct tcp_hello) : HDR_SIZE;
		size_t c = want - st->rx_hgot;
		if (c > n)
			c = n;
		memcpy(st->rx_h.raw + st->rx_hgot, d, c);
		st->rx_hgot += (uint32_t)c;
		d += c;
		n -= c;
		if (st->rx_hgot < want)
			continue;
		if (st->rx_phase == RX_HELLO) {
			r = hello_in(tp, st);
			if (r < 0)
				return r;
			st->rx_phase = RX_HDR;
			st->rx_hgot = 0;
		} else {
			r = hdr_in(tp, st);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int stream_rx(struct r2_tp *tp, struct tcp_stream *st)
{
	size_t budget = TCP_RX_BUDGET;
	ssize_t n;

	while (budget > 0) {
		if (st->rx_phase == RX_PAYLOAD && st->rx_need - st->rx_got >= TCP_RX_DIRECT_MIN) {
			n = recv(st->fd, st->rx_buf + st->rx_got, st->rx_need - st->rx_got,
				 MSG_DONTWAIT);
			if (n > 0) {
				atomic_fetch_add_explicit(&tp->b.ctr.rx_bytes, (uint64_t)n,
							  memory_order_relaxed);
				st->rx_got += (uint32_t)n;
				if (st->rx_got == st->rx_need)
					deliver(tp, st);
				budget -= (size_t)n < budget ? (size_t)n : budget;
				continue;
			}
		} else {
			n = recv(st->fd, st->stage, TCP_STAGE_SIZE, MSG_DONTWAIT);
			if (n > 0) {
				atomic_fetch_add_explicit(&tp->b.ctr.rx_bytes, (uint64_t)n,
							  memory_order_relaxed);
				int r = rx_consume(tp, st, st->stage, (size_t)n);
				if (r < 0)
					return r;
				budget -= (size_t)n < budget ? (size_t)n : budget;
				if ((size_t)n < TCP_STAGE_SIZE)
					return 0; /* drained */
				continue;
			}
		}
		if (n == 0)
			return -ECONNRESET; /* EOF */
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno;
	}
	return 0;
}

/* ---- tx ---- */

static int stream_tx(struct r2_tp *tp, struct tcp_stream *st)
{
	for (int round = 0; round < TCP_TX_ROUNDS; round++) {
		struct iovec iov[TCP_TX_IOV];
		int n = 0;
		size_t total = 0;

		pthread_mutex_lock(&st->qlock);
		if (st->hello_left) {
			iov[n].iov_base = st->hello_out + sizeof(st->hello_out) - st->hello_left;
			iov[n].iov_len = st->hello_left;
			total += iov[n++].iov_len;
		}
		/* before the hello is answered (dialer), nothing but the hello */
		uint64_t off = st->q_head ? st->q_head->done : 0;
		for (struct tcp_msg *m = st->q_head; m && n < TCP_TX_IOV - 1 && total < TCP_TX_BATCH;
		     m = m->next, off = 0) {
			uint64_t poff;
			if (off < HDR_SIZE) {
				iov[n].iov_base = (uint8_t *)&m->wire + off;
				iov[n].iov_len = HDR_SIZE - off;
				total += iov[n++].iov_len;
				poff = 0;
			} else {
				poff = off - HDR_SIZE;
			}
			if (m->len > poff) {
				iov[n].iov_base = (uint8_t *)m->buf + poff;
				iov[n].iov_len = m->len - poff;
				total += iov[n++].iov_len;
			}
		}
		if (n == 0) {
			disarm_out(st);
			pthread_mutex_unlock(&st->qlock);
			return 0;
		}
		pthread_mutex_unlock(&st->qlock);

		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w = sendmsg(st->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		atomic_fetch_add_explicit(&tp->b.ctr.tx_bytes, (uint64_t)w, memory_order_relaxed);

		struct tcp_msg *done = NULL, **dtail = &done;
		size_t left = (size_t)w;
		bool more;
		pthread_mutex_lock(&st->qlock);
		if (st->hello_left) {
			size_t c = left < st->hello_left ? left : st->hello_left;
			st->hello_left -= (uint32_t)c;
			left -= c;
		}
		while (left) {
			struct tcp_msg *m = st->q_head;
			uint64_t rem = HDR_SIZE + (uint64_t)m->len - m->done;
			if (left < rem) {
				m->done += left;
				left = 0;
				break;
			}
			left -= rem;
			st->q_head = m->next;
			if (!st->q_head)
				st->q_tail = NULL;
			atomic_fetch_sub_explicit(&st->queued, HDR_SIZE + (uint64_t)m->len,
						  memory_order_relaxed);
			m->next = NULL;
			*dtail = m;
			dtail = &m->next;
		}
		/* zero-length remainders (a fully written message at the head) */
		while (st->q_head && st->q_head->done == HDR_SIZE + (uint64_t)st->q_head->len) {
			struct tcp_msg *m = st->q_head;
			st->q_head = m->next;
			if (!st->q_head)
				st->q_tail = NULL;
			atomic_fetch_sub_explicit(&st->queued, HDR_SIZE + (uint64_t)m->len,
						  memory_order_relaxed);
			m->next = NULL;
			*dtail = m;
			dtail = &m->next;
		}
		more = st->hello_left || st->q_head;
		if (!more)
			disarm_out(st);
		pthread_mutex_unlock(&st->qlock);
		complete_msgs(tp, st, done, 0);
		if ((size_t)w < total || !more)
			return 0;
	}
	return 0;
}

/* ---- progress ---- */

static void on_connected(struct r2_tp *tp, struct tcp_stream *st)
{
	int err = 0;
	socklen_t el = sizeof(err);

	if (getsockopt(st->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err) {
		stream_fail(tp, st, -err);
		return;
	}
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = st->peer;
	if (!p || p->h.failed) {
		pthread_mutex_unlock(&tp->b.lock);
		return;
	}
	st->state = ST_HELLO;
	uint64_t id = p->h.id, nonce = p->nonce;
	int ns = p->nstreams;
	pthread_mutex_unlock(&tp->b.lock);
	stage_hello(tp, st, id, ns, nonce);
}

static void on_stream(struct r2_tp *tp, struct tcp_stream *st, uint32_t ev)
{
	int r;

	if (atomic_load(&st->dead))
		return;
	if (st->state == ST_CONNECTING) {
		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		on_connected(tp, st);
		if (atomic_load(&st->dead))
			return;
		ev |= EPOLLOUT;
	}
	if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
		r = stream_rx(tp, st);
		if (r < 0) {
			stream_fail(tp, st, r);
			return;
		}
	}
	if (ev & EPOLLOUT) {
		r = stream_tx(tp, st);
		if (r < 0) {
			stream_fail(tp, st, r);
			return;
		}
	}
}

static void on_listen(struct r2_tp *tp)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(tp->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				log_warn("tcp %s: accept: %s", tp->cfg.ifname, strerror(errno));
				if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
				    errno == ENOBUFS)
					usleep(10000); /* do not spin */
			}
			return;
		}
		set_sockopts(tp, fd);
		pthread_mutex_lock(&tp->b.lock);
		struct tcp_stream *st = stream_new(tp, fd, ROLE_ACCEPT);
		if (!st) {
			pthread_mutex_unlock(&tp->b.lock);
			close(fd);
			continue;
		}
		st->state = ST_HELLO;
		st->ev_out = false;
		if (epoll_set(st->th, EPOLL_CTL_ADD, fd, EPOLLIN, &st->obj) < 0)
			stream_kill(st, -ENOMEM);
		pthread_mutex_unlock(&tp->b.lock);
	}
}

/* once a second: connect/hello timeouts of this thread's streams */
static void tick(struct r2_tp *tp, struct tcp_thread *th)
{
	uint64_t now = r2_tp_now_ns();
	uint64_t limit = 2ull * tp->cfg.user_timeout_ms * 1000000ull;

	if (now - th->last_tick < 1000000000ull)
		return;
	th->last_tick = now;
	pthread_mutex_lock(&tp->b.lock);
	now = r2_tp_now_ns(); /* streams made before this are older: no underflow */
	for (struct tcp_stream *st = tp->streams; st; st = st->anext) {
		if (st->th != th || st->state == ST_UP || atomic_load(&st->dead))
			continue;
		if (now > st->t_start && now - st->t_start > limit) {
			if (st->peer)
				peer_fail(tp, st->peer, -ETIMEDOUT, true);
			else
				stream_kill(st, -ETIMEDOUT);
		}
	}
	pthread_mutex_unlock(&tp->b.lock);
}

static void *progress_main(void *arg)
{
	struct tcp_thread *th = arg;
	struct r2_tp *tp = th->tp;
	struct epoll_event evs[64];

	th->last_tick = r2_tp_now_ns();
	while (!atomic_load(&tp->stop)) {
		int n = epoll_wait(th->epfd, evs, 64, 1000);
		if (n < 0 && errno != EINTR) {
			log_err("tcp %s: epoll_wait: %s", tp->cfg.ifname, strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct tcp_obj *o = evs[i].data.ptr;
			switch (o->kind) {
			case OBJ_WAKE:
				r2_tp_efd_drain(th->wfd);
				break;
			case OBJ_LISTEN:
				on_listen(tp);
				break;
			case OBJ_STREAM:
				on_stream(tp, (struct tcp_stream *)o, evs[i].events);
				break;
			}
		}
		tick(tp, th);
		if (atomic_exchange(&th->reap, false))
			reap_streams(tp, th);
	}
	return NULL;
}

/* ---- operations ---- */

static void tcp_close(struct r2_tp *tp);

static void cq_release(void *arg, void *buf)
{
	pool_put(arg, buf);
}

static int tcp_open(const struct r2_tp_config *cfg, struct r2_tp **out)
{
	struct r2_tp *tp;
	int ret, one = 1;

	ret = r2_tp_alloc(cfg, out, sizeof(*tp), &tp);
	if (ret < 0)
		return ret;
	tp->cfg = *cfg;
	tp->cfg.ifname[sizeof(tp->cfg.ifname) - 1] = 0;
	if (tp->cfg.streams <= 0)
		tp->cfg.streams = TCP_DEFAULT_STREAMS;
	if (tp->cfg.streams > TCP_MAX_STREAMS)
		tp->cfg.streams = TCP_MAX_STREAMS;
	if (tp->cfg.progress_threads <= 0)
		tp->cfg.progress_threads = 1;
	if (tp->cfg.progress_threads > TCP_MAX_THREADS)
		tp->cfg.progress_threads = TCP_MAX_THREADS;
	if (tp->cfg.max_msg == 0)
		tp->cfg.max_msg = TCP_DEFAULT_MAX_MSG;
	if (tp->cfg.user_timeout_ms == 0)
		tp->cfg.user_timeout_ms = TCP_DEFAULT_USER_TIMEOUT_MS;
	if (tp->cfg.max_queued == 0)
		tp->cfg.max_queued = TCP_DEFAULT_MAX_QUEUED;
	tp->lfd = -1;
	tp->listen_obj.kind = OBJ_LISTEN;
	ret = r2_tp_base_init(&tp->b, "tcp", cq_release, tp, peer_fail_hook);
	if (ret < 0)
		goto out;
	pthread_mutex_init(&tp->pool_lock, NULL);
	tp->nthreads = tp->cfg.progress_threads;
	tp->threads = calloc((size_t)tp->nthreads, sizeof(*tp->threads));
	if (!tp->threads) {
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < tp->nthreads; i++) {
		tp->threads[i].epfd = -1;
		tp->threads[i].wfd = -1;
	}


	tp->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tp->lfd < 0) {
		ret = -errno;
		goto out;
	}
	setsockopt(tp->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ret = bind_device(tp, tp->lfd);
	if (ret < 0)
		goto out;
	/* accepted sockets inherit the buffer sizes from the listener */
	if (tp->cfg.sndbuf > 0)
		setsockopt(tp->lfd, SOL_SOCKET, SO_SNDBUF, &tp->cfg.sndbuf, sizeof(tp->cfg.sndbuf));
	if (tp->cfg.rcvbuf > 0)
		setsockopt(tp->lfd, SOL_SOCKET, SO_RCVBUF, &tp->cfg.rcvbuf, sizeof(tp->cfg.rcvbuf));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = tp->cfg.addr,
				  .sin_port = htons(tp->cfg.port) };
	if (bind(tp->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(tp->lfd, SOMAXCONN) < 0) {
		ret = -errno;
		goto out;
	}
	socklen_t sl = sizeof(sa);
	if (getsockname(tp->lfd, (struct sockaddr *)&sa, &sl) < 0) {
		ret = -errno;
		goto out;
	}
	tp->b.port = ntohs(sa.sin_port);

	for (int i = 0; i < tp->nthreads; i++) {
		struct tcp_thread *th = &tp->threads[i];
		th->tp = tp;
		th->wake_obj.kind = OBJ_WAKE;
		th->epfd = epoll_create1(EPOLL_CLOEXEC);
		th->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (th->epfd < 0 || th->wfd < 0) {
			ret = -errno;
			goto out;
		}
		ret = epoll_set(th, EPOLL_CTL_ADD, th->wfd, EPOLLIN, &th->wake_obj);
		if (ret < 0)
			goto out;
	}
	ret = epoll_set(&tp->threads[0], EPOLL_CTL_ADD, tp->lfd, EPOLLIN, &tp->listen_obj);
	if (ret < 0)
		goto out;
	for (int i = 0; i < tp->nthreads; i++) {
		struct tcp_thread *th = &tp->threads[i];
		ret = -pthread_create(&th->tid, NULL, progress_main, th);
		if (ret < 0)
			goto out;
		th->started = true;
		char name[32];
		snprintf(name, sizeof(name), "r2tcp%d.%d", tp->cfg.rail, i);
		name[15] = 0; /* the kernel's limit */
		pthread_setname_np(th->tid, name);
	}
	log_debug("tcp %s: listening on port %u, %d streams/peer, %d threads", tp->cfg.ifname,
		  tp->b.port, tp->cfg.streams, tp->nthreads);
	ret = 0;
out:
	if (ret < 0) {
		tcp_close(tp);
		tp = NULL;
	}
	*out = tp;
	return ret;
}

static void tcp_close(struct r2_tp *tp)
{
	if (!tp)
		return;
	atomic_store(&tp->stop, true);
	for (int i = 0; tp->threads && i < tp->nthreads; i++)
		if (tp->threads[i].started)
			r2_tp_efd_signal(tp->threads[i].wfd);
	for (int i = 0; tp->threads && i < tp->nthreads; i++)
		if (tp->threads[i].started)
			pthread_join(tp->threads[i].tid, NULL);
	/* single-threaded from here */
	while (tp->streams) {
		struct tcp_stream *st = tp->streams;
		tp->streams = st->anext;
		stream_free(tp, st, false, 0);
	}
	while (tp->b.peers.all)
		peer_free(tp, (struct tcp_peer *)tp->b.peers.all);
	r2_tp_base_fini(&tp->b); /* RECV buffers still queued go back */
	pool_destroy(tp);
	for (int i = 0; tp->threads && i < tp->nthreads; i++) {
		if (tp->threads[i].epfd >= 0)
			close(tp->threads[i].epfd);
		if (tp->threads[i].wfd >= 0)
			close(tp->threads[i].wfd);
	}
	free(tp->threads);
	if (tp->lfd >= 0)
		close(tp->lfd);
	pthread_mutex_destroy(&tp->pool_lock);
	free(tp);
}

static int tcp_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port)
{
	int ret = 0;
	int ns = tp->cfg.streams;
	int fds[TCP_MAX_STREAMS];

	if (peer_id == tp->cfg.self_id)
		return -EINVAL;
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = peer_find(tp, peer_id);
	if (p && !p->h.failed) {
		ret = p->conn_reported ? -EISCONN : -EALREADY;
		pthread_mutex_unlock(&tp->b.lock);
		return ret;
	}
	pthread_mutex_unlock(&tp->b.lock);

	for (int i = 0; i < ns; i++)
		fds[i] = -1;
	for (int i = 0; i < ns; i++) {
		int one = 1;
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			ret = -errno;
			goto fail;
		}
		fds[i] = fd;
		set_sockopts(tp, fd);
		bind_device(tp, fd);
		if (tp->cfg.addr.s_addr != htonl(INADDR_ANY)) {
			struct sockaddr_in la = { .sin_family = AF_INET, .sin_addr = tp->cfg.addr };
			setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
			if (bind(fd, (struct sockaddr *)&la, sizeof(la)) < 0) {
				ret = -errno;
				goto fail;
			}
		}
	}

	uint64_t nonce = r2_tp_now_ns() ^ ((uint64_t)(uintptr_t)tp << 16) ^ (peer_id * 0x9e3779b97f4a7c15ull);
	pthread_mutex_lock(&tp->b.lock);
	p = peer_find(tp, peer_id);
	if (p && !p->h.failed) { /* lost a race with another connect or an accept */
		ret = p->conn_reported ? -EISCONN : -EALREADY;
		pthread_mutex_unlock(&tp->b.lock);
		goto fail;
	}
	p = peer_new(tp, peer_id, ROLE_DIAL, ns, nonce);
	if (!p) {
		pthread_mutex_unlock(&tp->b.lock);
		ret = -ENOMEM;
		goto fail;
	}
	struct sockaddr_in ra = { .sin_family = AF_INET, .sin_addr = addr, .sin_port = htons(port) };
	for (int i = 0; i < ns; i++) {
		struct tcp_stream *st = stream_new(tp, fds[i], ROLE_DIAL);
		if (!st) {
			peer_fail(tp, p, -ENOMEM, true);
			break;
		}
		fds[i] = -1;
		st->idx = i;
		st->peer = p;
		st->state = ST_CONNECTING;
		st->nonce = nonce;
		st->ev_out = true;
		p->streams[i] = st;
		p->nattached++;
		int r = connect(st->fd, (struct sockaddr *)&ra, sizeof(ra));
		if (r < 0 && errno != EINPROGRESS) {
			peer_fail(tp, p, -errno, true);
			break;
		}
		if (epoll_set(st->th, EPOLL_CTL_ADD, st->fd, EPOLLIN | EPOLLOUT, &st->obj) < 0) {
			peer_fail(tp, p, -ENOMEM, true);
			break;
		}
	}
	pthread_mutex_unlock(&tp->b.lock);
	ret = 0;
fail:
	for (int i = 0; i < ns; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return ret;
}

static int tcp_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle)
{
	(void)tp;
	(void)len;
	if (!handle)
		return -EINVAL;
	*handle = addr;
	return 0;
}

static int tcp_dereg_mem(struct r2_tp *tp, void *handle)
{
	(void)tp;
	(void)handle;
	return 0;
}

static int tcp_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
			 const void *buf, uint64_t ctx)
{
	if (!hdr || (hdr->len && !buf))
		return -EINVAL;
	if (hdr->len > tp->cfg.max_msg)
		return -EMSGSIZE;
	struct tcp_msg *m = malloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->next = NULL;
	m->wire = *hdr;
	m->wire.magic = R2_CHUNK_MAGIC;
	r2_tp_hdr_le(&m->wire);
	m->buf = buf;
	m->len = hdr->len;
	m->done = 0;
	m->ctx = ctx;
	uint64_t sz = HDR_SIZE + (uint64_t)hdr->len;

	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = peer_find(tp, peer_id);
	if (!p || p->h.failed || !p->conn_reported) {
		pthread_mutex_unlock(&tp->b.lock);
		free(m);
		return -ENOTCONN;
	}
	if (hdr->len > p->max_msg) {
		pthread_mutex_unlock(&tp->b.lock);
		free(m);
		return -EMSGSIZE;
	}
	uint64_t total = 0, best_q = UINT64_MAX;
	struct tcp_stream *best = NULL;
	for (int k = 0; k < p->nstreams; k++) {
		int i = (int)((p->rr + (unsigned)k) % (unsigned)p->nstreams);
		struct tcp_stream *st = p->streams[i];
		if (!st)
			continue;
		uint64_t q = atomic_load_explicit(&st->queued, memory_order_relaxed);
		total += q;
		if (q < best_q) {
			best_q = q;
			best = st;
		}
	}
	if (!best) {
		pthread_mutex_unlock(&tp->b.lock);
		free(m);
		return -ENOTCONN;
	}
	if (total > 0 && total + sz > tp->cfg.max_queued) {
		pthread_mutex_unlock(&tp->b.lock);
		free(m);
		return -EAGAIN;
	}
	p->rr++;
	atomic_fetch_add_explicit(&best->queued, sz, memory_order_relaxed);
	pthread_mutex_lock(&best->qlock);
	if (best->q_tail)
		best->q_tail->next = m;
	else
		best->q_head = m;
	best->q_tail = m;
	arm_out(best);
	pthread_mutex_unlock(&best->qlock);
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}

static void tcp_release(struct r2_tp *tp, void *buf)
{
	pool_put(tp, buf);
}

static int tcp_link_state(struct r2_tp *tp)
{
	char path[128], buf[64];
	FILE *f;

	if (!tp->cfg.ifname[0])
		return -ENODEV;
	snprintf(path, sizeof(path), "/sys/class/net/%s/operstate", tp->cfg.ifname);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	if (!strcmp(buf, "up"))
		return 1;
	if (strcmp(buf, "unknown"))
		return 0; /* down, lowerlayerdown, dormant, notpresent, testing */
	/* "unknown" (loopback, some virtual devices): IFF_UP and carrier */
	unsigned long flags = 0;
	snprintf(path, sizeof(path), "/sys/class/net/%s/flags", tp->cfg.ifname);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	int ok = fscanf(f, "%lx", &flags);
	fclose(f);
	if (ok != 1)
		return -EIO;
	if (!(flags & IFF_UP))
		return 0;
	snprintf(path, sizeof(path), "/sys/class/net/%s/carrier", tp->cfg.ifname);
	f = fopen(path, "re");
	if (!f)
		return 1;
	int carrier = 1;
	if (fscanf(f, "%d", &carrier) != 1)
		carrier = 1;
	fclose(f);
	return carrier ? 1 : 0;
}

const struct r2_tp_ops r2_tp_tcp_ops = {
	.name = "tcp",
	.caps = R2_TP_CAP_ZERO_COPY | R2_TP_CAP_STREAMS,
	.open = tcp_open,
	.close = tcp_close,
	.listen_port = r2_tp_base_listen_port,
	.connect = tcp_connect,
	.disconnect = r2_tp_base_disconnect,
	.reg_mem = tcp_reg_mem,
	.dereg_mem = tcp_dereg_mem,
	.post_send = tcp_post_send,
	.release = tcp_release,
	.poll = r2_tp_base_poll,
	.event_fd = r2_tp_base_event_fd,
	.link_state = tcp_link_state,
	.stats = r2_tp_base_stats,
};
