// SPDX-License-Identifier: MIT
/*
 * tcp provider: connection management: socket options, streams and their
 * owner threads, the peer table, the hello exchange, dialing (connect) and
 * accepting, failing and reaping connections (tcp_int.h).
 */
#include <arpa/inet.h>

#include "hmac_sha256.h"
#include "tcp_int.h"

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
int tcp_bind_device(struct r2_tp *tp, int fd)
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

int tcp_epoll_set(struct tcp_thread *th, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };
	return epoll_ctl(th->epfd, op, fd, &ev) < 0 ? -errno : 0;
}

/* under st->qlock */
void tcp_arm_out(struct tcp_stream *st)
{
	if (!st->ev_out) {
		st->ev_out = true;
		tcp_epoll_set(st->th, EPOLL_CTL_MOD, st->fd, EPOLLIN | EPOLLOUT, &st->obj);
	}
}

/* under st->qlock */
void tcp_disarm_out(struct tcp_stream *st)
{
	if (st->ev_out) {
		st->ev_out = false;
		tcp_epoll_set(st->th, EPOLL_CTL_MOD, st->fd, EPOLLIN, &st->obj);
	}
}

static struct tcp_thread *pick_thread(struct r2_tp *tp)
{
	return &tp->threads[tp->next_thread++ % (unsigned)tp->nthreads];
}

/* under tp->b.lock */
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
void tcp_stream_free(struct r2_tp *tp, struct tcp_stream *st, bool complete, int status)
{
	struct tcp_msg *q;

	if (st->fd >= 0)
		close(st->fd);
	pthread_mutex_lock(&st->qlock);
	q = st->q_head;
	st->q_head = st->q_tail = NULL;
	pthread_mutex_unlock(&st->qlock);
	if (complete) {
		tcp_complete_msgs(tp, st, q, status, false);
	} else {
		while (q) {
			struct tcp_msg *n = q->next;
			free(q);
			q = n;
		}
	}
	tcp_pool_put(tp, st->rx_buf);
	free(st->stage);
	pthread_mutex_destroy(&st->qlock);
	free(st);
}

/* ---- peers (all under tp->b.lock) ---- */

struct tcp_peer *tcp_peer_find(struct r2_tp *tp, uint64_t id)
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

void tcp_peer_free(struct r2_tp *tp, struct tcp_peer *p)
{
	r2_tp_peer_unlink(&tp->b.peers, &p->h);
	free(p);
}

static void wake_thread(struct tcp_thread *th)
{
	atomic_store(&th->reap, true);
	r2_tp_efd_signal(th->wfd);
}

/* Marks a stream for its owner to tear down; under tp->b.lock. */
void tcp_stream_kill(struct tcp_stream *st, int status)
{
	if (atomic_exchange(&st->dead, true))
		return;
	st->fail_status = status;
	if (st->fd >= 0)
		shutdown(st->fd, SHUT_RDWR);
	wake_thread(st->th);
}

/* Fails a peer connection on this rail; under tp->b.lock. */
void tcp_peer_fail(struct r2_tp *tp, struct tcp_peer *p, int status, bool report)
{
	if (p->h.failed)
		return;
	p->h.failed = true;
	r2_tp_peer_unhash(&tp->b.peers, &p->h);
	/* A dial to a lower id that fails before it is up was most likely
	 * refused because that peer dialed us at the same time (its
	 * connection wins): no ERROR, its connection reports CONN. */
	if (report && (p->conn_reported || (p->role == ROLE_DIAL && p->h.id > tp->cfg.self_id)))
		tcp_push_simple(tp, R2_TPC_ERROR, status, p);
	log_debug("tcp %s: peer %llu failed (%d)", tp->cfg.ifname, (unsigned long long)p->h.id,
		  status);
	for (int i = 0; i < p->nstreams; i++)
		if (p->streams[i])
			tcp_stream_kill(p->streams[i], status);
	if (p->nattached == 0)
		tcp_peer_free(tp, p);
}

void tcp_peer_fail_hook(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report)
{
	tcp_peer_fail(tp, (struct tcp_peer *)p, status, report);
}

/* A stream's own error (owner thread). */
void tcp_stream_fail(struct r2_tp *tp, struct tcp_stream *st, int status)
{
	pthread_mutex_lock(&tp->b.lock);
	if (st->peer)
		tcp_peer_fail(tp, st->peer, status, true);
	else
		tcp_stream_kill(st, status);
	pthread_mutex_unlock(&tp->b.lock);
}

/* The owner thread tears down its dead streams (after an epoll batch, so no
 * event of the batch points to freed memory). */
void tcp_reap_streams(struct r2_tp *tp, struct tcp_thread *th)
{
	struct tcp_stream *list = NULL;

	pthread_mutex_lock(&tp->b.lock);
	for (struct tcp_stream *st = tp->streams, *next; st; st = next) {
		next = st->anext;
		if (st->th != th || !atomic_load(&st->dead))
			continue;
		if (st->prehello) {
			st->prehello = false;
			tp->prehello--;
		}
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
		tcp_complete_msgs(tp, st, q, st->fail_status ? st->fail_status : -ECONNRESET, false);
		pthread_mutex_lock(&tp->b.lock);
		struct tcp_peer *p = st->peer;
		if (p) {
			p->streams[st->idx] = NULL;
			if (--p->nattached == 0 && p->h.failed)
				tcp_peer_free(tp, p);
			st->peer = NULL;
		}
		pthread_mutex_unlock(&tp->b.lock);
		tcp_stream_free(tp, st, false, 0);
	}
}

/* ---- hello ---- */

static const uint8_t *auth_key(struct r2_tp *tp, size_t *len)
{
	return r2_tp_auth_key(&tp->cfg, len);
}

/* The hello this side sends: type, ids, stream and connection; flags say
 * whether it carries a proof. */
static void hello_fill(struct r2_tp *tp, struct tcp_hello *h, int type, int idx, uint64_t dst,
		       int nstreams, uint64_t nonce)
{
	memset(h, 0, sizeof(*h));
	h->magic = TCP_HELLO_MAGIC;
	h->version = TCP_HELLO_VERSION;
	h->type = (uint8_t)type;
	h->flags = tp->cfg.auth == R2_TP_AUTH_KEY ? TCP_HELLO_F_AUTH : 0;
	h->stream = (uint16_t)idx;
	h->nstreams = (uint16_t)nstreams;
	h->rail = (uint16_t)tp->cfg.rail;
	h->max_msg = tp->cfg.max_msg;
	h->self_id = tp->cfg.self_id;
	h->dst_id = dst;
	h->nonce = nonce;
}

/* owner thread; stages a packed hello in front of the send queue */
static void stage_hello(struct tcp_stream *st, const struct tcp_hello *h)
{
	pthread_mutex_lock(&st->qlock);
	tcp_hello_pack(h, st->hello_out);
	st->hello_left = TCP_HELLO_SIZE;
	tcp_arm_out(st);
	pthread_mutex_unlock(&st->qlock);
}

/* The latency lane's socket (tcp.c) is marked for the network: DSCP EF
 * (expedited forwarding, for switches that honour it) and the interactive
 * priority, the first band of this host's pfifo_fast (and of any qdisc
 * that maps priorities to bands), so its packets pass the bulk streams'
 * queued ones. Best effort: a refusal leaves the lane unmarked. */
static void lane_mark(struct r2_tp *tp, struct tcp_peer *p, struct tcp_stream *st)
{
	int tos = 0xb8, prio = 6; /* DSCP 46 (EF); TC_PRIO_INTERACTIVE */

	if (!tp->cfg.lane || p->nstreams < 2 || st->idx != p->nstreams - 1)
		return;
	/* IP_TOS first: it sets the priority from the TOS, SO_PRIORITY after */
	if (setsockopt(st->fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0 ||
	    setsockopt(st->fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio)) < 0)
		log_debug("tcp %s: latency lane to peer %llu left unmarked: %s", tp->cfg.ifname,
			  (unsigned long long)p->h.id, strerror(errno));
}

/* under tp->b.lock: stream st of peer p is up */
static void stream_up(struct r2_tp *tp, struct tcp_peer *p, struct tcp_stream *st)
{
	st->state = ST_UP;
	lane_mark(tp, p, st);
	if (++p->nup == p->nstreams && !p->conn_reported && !p->h.failed) {
		p->conn_reported = true;
		tcp_push_simple(tp, R2_TPC_CONN, 0, p);
		log_debug("tcp %s: peer %llu connected (%d streams)", tp->cfg.ifname,
			  (unsigned long long)p->h.id, p->nstreams);
	}
}

/* A refused hello: said (rate-limited: anyone on a rail network can send
 * them), and the stream closed by the caller. Never touches a peer. */
static int refuse(struct r2_tp *tp, struct tcp_stream *st, const struct tcp_hello *h, int r)
{
	char a[INET_ADDRSTRLEN] = "?";

	if (st->role == ROLE_ACCEPT)
		inet_ntop(AF_INET, &st->raddr, a, sizeof(a));
	log_warn_rl("tcp %s: hello %s %s (claims daemon %016llx) refused: %s", tp->cfg.ifname,
		    st->role == ROLE_ACCEPT ? "from" : "answered by",
		    st->role == ROLE_ACCEPT ? a : "the peer dialed",
		    h ? (unsigned long long)h->self_id : 0ull, r2_tp_refusal(r));
	return r;
}

/* Dialer: the ANSWER to our DIAL; when it checks out, our PROOF. */
static int answer_in(struct r2_tp *tp, struct tcp_stream *st, const struct tcp_hello *h)
{
	size_t klen;
	const uint8_t *key = auth_key(tp, &klen);
	int r = tcp_hello_check_answer(key, klen, &st->hs_dial, h);

	if (r < 0)
		return refuse(tp, st, h, r);
	st->hs_answer = *h;
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = st->peer;
	if (!p || p->h.failed) {
		pthread_mutex_unlock(&tp->b.lock);
		return -ECONNABORTED;
	}
	struct tcp_hello proof;
	hello_fill(tp, &proof, TCP_HELLO_PROOF, st->idx, p->h.id, p->nstreams, p->nonce);
	if (klen)
		tcp_hello_mac(key, klen, TCP_HELLO_PROOF, &st->hs_dial, h, proof.mac);
	stage_hello(st, &proof);
	p->max_msg = h->max_msg;
	st->rx_phase = RX_PROOF; /* the acceptor's OK next */
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}

/* Dialer: the acceptor took the stream (OK): up. */
static int ok_in(struct r2_tp *tp, struct tcp_stream *st, const struct tcp_hello *h)
{
	int r = tcp_hello_check_ok(&st->hs_dial, h);

	if (r < 0)
		return refuse(tp, st, h, r);
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = st->peer;
	if (!p || p->h.failed) {
		pthread_mutex_unlock(&tp->b.lock);
		return -ECONNABORTED;
	}
	st->rx_phase = RX_HDR;
	stream_up(tp, p, st);
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}

/* Acceptor: a DIAL. Checked on its own (nothing here changes: no peer is
 * looked up for more than the simultaneous dial rule) and answered with our
 * challenge and proof; the stream waits for the dialer's PROOF. */
static int dial_in(struct r2_tp *tp, struct tcp_stream *st, const struct tcp_hello *h)
{
	size_t klen;
	const uint8_t *key = auth_key(tp, &klen);

	if (tp->cfg.auth == R2_TP_AUTH_REFUSE)
		return refuse(tp, st, h, -EPERM);
	if (h->type != TCP_HELLO_DIAL || h->dst_id != tp->cfg.self_id ||
	    h->self_id == tp->cfg.self_id || h->nstreams == 0 || h->nstreams > TCP_MAX_STREAMS ||
	    h->stream >= h->nstreams)
		return refuse(tp, st, h, -EPROTO);
	if (!!(h->flags & TCP_HELLO_F_AUTH) != (klen > 0))
		return refuse(tp, st, h, -EACCES);
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = tcp_peer_find(tp, h->self_id);
	/* Both sides dialed: the lower id's connection wins; ours does. */
	bool ours_wins = p && p->role == ROLE_DIAL && !p->h.failed && h->self_id > tp->cfg.self_id;
	pthread_mutex_unlock(&tp->b.lock);
	if (ours_wins)
		return -EPROTO; /* it drops its own dial quietly */

	struct tcp_hello ans;
	hello_fill(tp, &ans, TCP_HELLO_ANSWER, h->stream, h->self_id, h->nstreams, h->nonce);
	int r = r2_tp_random(ans.chal, sizeof(ans.chal));
	if (r < 0)
		return r;
	if (klen)
		tcp_hello_mac(key, klen, TCP_HELLO_ANSWER, h, &ans, ans.mac);
	st->hs_dial = *h;
	st->hs_answer = ans;
	st->rx_phase = RX_PROOF;
	stage_hello(st, &ans);
	return 0;
}

/* Acceptor: the dialer's PROOF. Only now, authenticated, does the stream
 * join a connection, and may a new connection replace a live one of the
 * same daemon (it reconnected). */
static int proof_in(struct r2_tp *tp, struct tcp_stream *st, const struct tcp_hello *h)
{
	size_t klen;
	const uint8_t *key = auth_key(tp, &klen);
	const struct tcp_hello *dh = &st->hs_dial;
	int r = tcp_hello_check_proof(key, klen, dh, &st->hs_answer, h);

	if (r < 0)
		return refuse(tp, st, h, r);
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = tcp_peer_find(tp, dh->self_id);
	if (p && p->role == ROLE_ACCEPT && p->nonce == dh->nonce && p->nstreams == dh->nstreams &&
	    !p->streams[dh->stream]) { /* (streams has nstreams slots: compare first) */
		/* one more stream of the connection being set up */
	} else {
		if (p && p->role == ROLE_DIAL && !p->h.failed) {
			/* Both sides dialed: the lower id's connection wins. */
			if (dh->self_id > tp->cfg.self_id) {
				pthread_mutex_unlock(&tp->b.lock);
				return -EPROTO; /* ours wins; it drops its own quietly */
			}
			/* theirs wins. Ours up already (CONN said) means the
			 * peer lost it and dialed again: ERROR, as for an
			 * accepted connection it replaces; still setting up,
			 * a dial at the same time: quiet */
			tcp_peer_fail(tp, p, -ECONNABORTED, true);
			p = NULL;
		}
		if (p) /* the peer reconnected: the old connection is gone */
			tcp_peer_fail(tp, p, -ECONNRESET, true);
		p = peer_new(tp, dh->self_id, ROLE_ACCEPT, dh->nstreams, dh->nonce);
		if (!p) {
			pthread_mutex_unlock(&tp->b.lock);
			return -ENOMEM;
		}
	}
	if (st->prehello) {
		st->prehello = false;
		tp->prehello--;
	}
	p->max_msg = dh->max_msg;
	st->idx = dh->stream;
	st->peer = p;
	p->streams[dh->stream] = st;
	p->nattached++;
	st->rx_phase = RX_HDR;
	struct tcp_hello ok;
	hello_fill(tp, &ok, TCP_HELLO_OK, dh->stream, dh->self_id, dh->nstreams, dh->nonce);
	stage_hello(st, &ok); /* before anything sent after CONN */
	stream_up(tp, p, st);
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}

/* A whole hello is in st->rx_h.raw (owner thread): the next step of the
 * exchange, which sets st->rx_phase. <0: the stream is closed (a dialer's
 * failure fails its connection). */
int tcp_hello_in(struct r2_tp *tp, struct tcp_stream *st)
{
	struct tcp_hello h;
	int r = tcp_hello_unpack(st->rx_h.raw, TCP_HELLO_SIZE, &h);

	if (r < 0)
		return refuse(tp, st, NULL, r);
	if (st->role == ROLE_DIAL)
		return st->rx_phase == RX_HELLO ? answer_in(tp, st, &h) : ok_in(tp, st, &h);
	if (st->rx_phase == RX_HELLO)
		return dial_in(tp, st, &h);
	return proof_in(tp, st, &h);
}

/* ---- dialing and accepting ---- */

void tcp_on_connected(struct r2_tp *tp, struct tcp_stream *st)
{
	int err = 0;
	socklen_t el = sizeof(err);

	if (getsockopt(st->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err) {
		tcp_stream_fail(tp, st, -err);
		return;
	}
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = st->peer;
	if (!p || p->h.failed) {
		pthread_mutex_unlock(&tp->b.lock);
		return;
	}
	st->state = ST_HELLO;
	hello_fill(tp, &st->hs_dial, TCP_HELLO_DIAL, st->idx, p->h.id, p->nstreams, p->nonce);
	pthread_mutex_unlock(&tp->b.lock);
	int r = r2_tp_random(st->hs_dial.chal, sizeof(st->hs_dial.chal));
	if (r < 0) {
		tcp_stream_fail(tp, st, r);
		return;
	}
	stage_hello(st, &st->hs_dial);
}

/* under tp->b.lock: accepted streams still before their PROOF from addr */
static unsigned prehello_from(struct r2_tp *tp, struct in_addr addr)
{
	unsigned n = 0;

	for (struct tcp_stream *st = tp->streams; st; st = st->anext)
		n += st->prehello && st->raddr.s_addr == addr.s_addr;
	return n;
}

void tcp_on_listen(struct r2_tp *tp)
{
	char what[96];

	snprintf(what, sizeof(what), "tcp %s", tp->cfg.ifname);
	for (int i = 0; i < 64; i++) {
		struct sockaddr_in ra = { 0 };
		int fd = r2_tp_accept(tp->lfd, &ra, what);
		if (fd < 0)
			return;
		pthread_mutex_lock(&tp->b.lock);
		/* streams that have not proved the key yet: capped in all and
		 * per source address, so that no one address (nor a crowd of
		 * them) holds the daemon's fds and memory */
		bool all = tp->prehello >= tp->cfg.prehello_max;
		if (all || prehello_from(tp, ra.sin_addr) >= tp->cfg.prehello_per_addr) {
			pthread_mutex_unlock(&tp->b.lock);
			char a[INET_ADDRSTRLEN] = "?";
			inet_ntop(AF_INET, &ra.sin_addr, a, sizeof(a));
			log_warn_rl("tcp %s: connection from %s closed: %u connections %s have "
				    "not finished their hello (peer_max_prehello%s)",
				    tp->cfg.ifname, a,
				    all ? tp->cfg.prehello_max : tp->cfg.prehello_per_addr,
				    all ? "in all" : "from that address", all ? "" : "_per_addr");
			close(fd);
			continue;
		}
		set_sockopts(tp, fd);
		struct tcp_stream *st = stream_new(tp, fd, ROLE_ACCEPT);
		if (!st) {
			pthread_mutex_unlock(&tp->b.lock);
			close(fd);
			continue;
		}
		st->state = ST_HELLO;
		st->ev_out = false;
		st->raddr = ra.sin_addr;
		st->prehello = true;
		tp->prehello++;
		if (tcp_epoll_set(st->th, EPOLL_CTL_ADD, fd, EPOLLIN, &st->obj) < 0)
			tcp_stream_kill(st, -ENOMEM);
		pthread_mutex_unlock(&tp->b.lock);
	}
}

int tcp_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port)
{
	int ret = 0;
	int ns = tp->cfg.streams;
	int fds[TCP_MAX_STREAMS];

	if (peer_id == tp->cfg.self_id)
		return -EINVAL;
	if (tp->cfg.auth == R2_TP_AUTH_REFUSE)
		return -EPERM; /* no cluster key: no peer would accept us */
	pthread_mutex_lock(&tp->b.lock);
	struct tcp_peer *p = tcp_peer_find(tp, peer_id);
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
		tcp_bind_device(tp, fd);
		if (tp->cfg.addr.s_addr != htonl(INADDR_ANY)) {
			struct sockaddr_in la = { .sin_family = AF_INET, .sin_addr = tp->cfg.addr };
			setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
			if (bind(fd, (struct sockaddr *)&la, sizeof(la)) < 0) {
				ret = -errno;
				goto fail;
			}
		}
	}

	uint64_t nonce;
	ret = r2_tp_random(&nonce, sizeof(nonce));
	if (ret < 0)
		goto fail;
	pthread_mutex_lock(&tp->b.lock);
	p = tcp_peer_find(tp, peer_id);
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
			tcp_peer_fail(tp, p, -ENOMEM, true);
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
			tcp_peer_fail(tp, p, -errno, true);
			break;
		}
		if (tcp_epoll_set(st->th, EPOLL_CTL_ADD, st->fd, EPOLLIN | EPOLLOUT, &st->obj) < 0) {
			tcp_peer_fail(tp, p, -ENOMEM, true);
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
