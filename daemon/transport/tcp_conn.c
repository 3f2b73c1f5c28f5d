// SPDX-License-Identifier: MIT
/*
 * tcp provider: connection management: socket options, streams and their
 * owner threads, the peer table, the hello exchange, dialing (connect) and
 * accepting, failing and reaping connections (tcp_int.h).
 */
#include "tcp_int.h"

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
		tcp_complete_msgs(tp, st, q, status);
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
		tcp_complete_msgs(tp, st, q, st->fail_status ? st->fail_status : -ECONNRESET);
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
	tcp_arm_out(st);
	pthread_mutex_unlock(&st->qlock);
}

/* under tp->b.lock: stream st of peer p is up */
static void stream_up(struct r2_tp *tp, struct tcp_peer *p, struct tcp_stream *st)
{
	st->state = ST_UP;
	if (++p->nup == p->nstreams && !p->conn_reported && !p->h.failed) {
		p->conn_reported = true;
		tcp_push_simple(tp, R2_TPC_CONN, 0, p);
		log_debug("tcp %s: peer %llu connected (%d streams)", tp->cfg.ifname,
			  (unsigned long long)p->h.id, p->nstreams);
	}
}

int tcp_hello_in(struct r2_tp *tp, struct tcp_stream *st)
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
	struct tcp_peer *p = tcp_peer_find(tp, h.self_id);
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
			tcp_peer_fail(tp, p, -ECONNABORTED, false); /* theirs wins */
			p = NULL;
		}
		if (p) /* the peer reconnected: the old connection is gone */
			tcp_peer_fail(tp, p, -ECONNRESET, true);
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
	uint64_t id = p->h.id, nonce = p->nonce;
	int ns = p->nstreams;
	pthread_mutex_unlock(&tp->b.lock);
	stage_hello(tp, st, id, ns, nonce);
}

void tcp_on_listen(struct r2_tp *tp)
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

	uint64_t nonce = r2_tp_now_ns() ^ ((uint64_t)(uintptr_t)tp << 16) ^ (peer_id * 0x9e3779b97f4a7c15ull);
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
