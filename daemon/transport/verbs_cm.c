// SPDX-License-Identifier: MIT
/*
 * verbs provider: the TCP side channel that exchanges QPs (HELLO / REPLY /
 * READY / UP, each side proving the cluster key as tcp's hello does:
 * verbs_util.h) and watches the peer daemon (its EOF fails the connection).
 */
#include "verbs_int.h"

/* ---- side channel (progress thread, under tp->b.lock) ---- */

static void sock_opts(struct r2_tp *tp, int fd)
{
	int one = 1, idle = 2, intvl = 1, cnt = 3;
	unsigned ut = tp->cfg.user_timeout_ms;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* deadline_ms: the exchange must be done within (the sock fails then) */
static struct vsock *sock_new(struct r2_tp *tp, int fd, int state, uint32_t events,
			      uint64_t deadline_ms)
{
	struct vsock *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->kind = OBJ_SOCK;
	s->fd = fd;
	s->state = state;
	s->deadline = r2_tp_now_ns() + deadline_ms * 1000000ull;
	struct epoll_event ev = { .events = events, .data.ptr = s };
	if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		free(s);
		return NULL;
	}
	s->next = tp->socks;
	tp->socks = s;
	return s;
}

static void sock_events(struct r2_tp *tp, struct vsock *s, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = s };
	epoll_ctl(tp->epfd, EPOLL_CTL_MOD, s->fd, &ev);
}

/* writes what is staged; <0 on error */
static int sock_flush(struct r2_tp *tp, struct vsock *s)
{
	while (s->tx_done < s->tx_len) {
		ssize_t w = send(s->fd, s->tx + s->tx_done, s->tx_len - s->tx_done, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (!s->want_out) {
					s->want_out = true;
					sock_events(tp, s, EPOLLIN | EPOLLOUT);
				}
				return 0;
			}
			return -errno;
		}
		s->tx_done += (uint32_t)w;
	}
	s->tx_len = s->tx_done = 0;
	if (s->want_out) {
		s->want_out = false;
		sock_events(tp, s, EPOLLIN);
	}
	return 0;
}

static int sock_send_msg(struct r2_tp *tp, struct vsock *s, const struct r2v_cm_msg *m)
{
	if (s->tx_len + R2V_CM_SIZE > sizeof(s->tx))
		return -ENOBUFS;
	if (r2v_cm_pack(m, s->tx + s->tx_len) < 0)
		return -EINVAL;
	s->tx_len += R2V_CM_SIZE;
	return sock_flush(tp, s);
}

static void fill_cm(struct r2_tp *tp, struct vpeer *p, struct r2v_cm_msg *m, int type)
{
	memset(m, 0, sizeof(*m));
	m->type = (uint16_t)type;
	m->nqps = (uint16_t)p->nqps;
	m->rail = (uint16_t)tp->cfg.rail;
	m->lid = tp->lid;
	m->mtu = (uint8_t)tp->active_mtu;
	m->link_layer = (uint8_t)tp->link_layer;
	m->slot_size = tp->slot;
	m->max_msg = tp->cfg.max_msg;
	m->self_id = tp->cfg.self_id;
	m->dst_id = p->h.id;
	m->nonce = p->nonce;
	m->flags = tp->cfg.auth == R2_TP_AUTH_KEY ? R2V_CM_F_AUTH : 0;
	memcpy(m->gid, tp->gid, 16);
	for (int i = 0; i < p->nqps && (type == R2V_CM_HELLO || type == R2V_CM_REPLY); i++) {
		m->qpn[i] = p->qps[i]->qpn;
		m->psn[i] = p->qps[i]->psn;
	}
}

static void conn_up(struct r2_tp *tp, struct vpeer *p)
{
	p->sock->state = S_UP;
	p->conn_reported = true;
	v_push_simple(tp, R2_TPC_CONN, 0, p);
	log_debug("verbs %s: peer %llu connected (%d QPs)", tp->cfg.ifname,
		  (unsigned long long)p->h.id, p->nqps);
}

/* A refused exchange: said (rate-limited: anyone on a rail network can
 * send them); the caller closes the side channel. */
static int refuse(struct r2_tp *tp, struct vsock *s, const struct r2v_cm_msg *m, int r)
{
	char a[INET_ADDRSTRLEN] = "?";

	inet_ntop(AF_INET, &s->raddr, a, sizeof(a));
	log_warn_rl("verbs %s: side channel %s %s (claims daemon %016llx) refused: %s",
		    tp->cfg.ifname, s->peer && s->peer->role == ROLE_DIAL ? "to" : "from", a,
		    (unsigned long long)m->self_id, r2_tp_refusal(r));
	return r;
}

/* Acceptor: a HELLO. Checked on its own and answered with our QPs (not yet
 * ready to receive), our challenge and our proof; nothing else changes (no
 * peer is replaced) before the dialer's READY proves the key. */
static int hello_in(struct r2_tp *tp, struct vsock *s, const struct r2v_cm_msg *m)
{
	size_t klen;
	const uint8_t *key = r2_tp_auth_key(&tp->cfg, &klen);

	if (tp->cfg.auth == R2_TP_AUTH_REFUSE)
		return refuse(tp, s, m, -EPERM);
	if (m->type != R2V_CM_HELLO)
		return refuse(tp, s, m, -EPROTO);
	if (!!(m->flags & R2V_CM_F_AUTH) != (klen > 0))
		return refuse(tp, s, m, -EACCES);
	struct vpeer *p = v_peer_find(tp, m->self_id);
	/* Both sides dialed: the lower id's connection wins; ours does. */
	if (p && p->role == ROLE_DIAL && m->self_id > tp->cfg.self_id)
		return -EPROTO; /* it drops its own quietly */
	p = v_peer_alloc(m->self_id, ROLE_ACCEPT, m->nqps, m->nonce);
	if (!p)
		return -ENOMEM;
	p->sock = s;
	s->peer = p; /* failed with s (v_sock_fail): its QPs go with it */
	int r = v_peer_make_qps(tp, p);
	if (r)
		return r;
	s->hs_hello = *m;
	fill_cm(tp, p, &s->hs_reply, R2V_CM_REPLY);
	r = r2_tp_random(s->hs_reply.chal, sizeof(s->hs_reply.chal));
	if (r)
		return r;
	if (klen)
		r2v_cm_mac(key, klen, R2V_CM_REPLY, m, &s->hs_reply, s->hs_reply.mac);
	s->state = S_WAIT_READY;
	return sock_send_msg(tp, s, &s->hs_reply);
}

/* Acceptor: the dialer's READY. Only now, its proof checked, does the peer
 * join the table (replacing a connection of the same daemon: it
 * reconnected), its QPs become ready, and UP tells the dialer to send. */
static int ready_in(struct r2_tp *tp, struct vsock *s, const struct r2v_cm_msg *m)
{
	size_t klen;
	const uint8_t *key = r2_tp_auth_key(&tp->cfg, &klen);
	struct vpeer *p = s->peer;

	if (m->type != R2V_CM_READY || m->self_id != p->h.id || m->nonce != p->nonce)
		return refuse(tp, s, m, -EPROTO);
	int r = r2v_cm_check_mac(key, klen, &s->hs_hello, &s->hs_reply, m);
	if (r)
		return refuse(tp, s, m, r);
	struct vpeer *old = v_peer_find(tp, p->h.id);
	if (old && old->role == ROLE_DIAL) {
		/* Both sides dialed: the lower id's connection wins. */
		if (p->h.id > tp->cfg.self_id)
			return -EPROTO; /* ours wins; it drops its own quietly */
		v_peer_fail(tp, old, -ECONNABORTED, false);
	} else if (old) { /* the peer reconnected: the old connection is gone */
		v_peer_fail(tp, old, -ECONNRESET, true);
	}
	s->prehello = false;
	tp->prehello--;
	r2_tp_peer_insert(&tp->b.peers, &p->h, p->h.id);
	r = v_peer_qps_rts(tp, p, &s->hs_hello);
	if (r)
		return r;
	struct r2v_cm_msg up;
	fill_cm(tp, p, &up, R2V_CM_UP);
	r = sock_send_msg(tp, s, &up);
	if (r)
		return r;
	conn_up(tp, p);
	return 0;
}

/* Dialer: the acceptor's REPLY; when its proof checks out, our QPs become
 * ready and READY carries our proof. */
static int reply_in(struct r2_tp *tp, struct vsock *s, const struct r2v_cm_msg *m)
{
	size_t klen;
	const uint8_t *key = r2_tp_auth_key(&tp->cfg, &klen);
	struct vpeer *p = s->peer;

	if (m->type != R2V_CM_REPLY || m->self_id != p->h.id || m->nonce != p->nonce ||
	    m->nqps != p->nqps)
		return refuse(tp, s, m, -EPROTO);
	int r = r2v_cm_check_mac(key, klen, &s->hs_hello, m, m);
	if (r)
		return refuse(tp, s, m, r);
	r = v_peer_qps_rts(tp, p, m);
	if (r)
		return r;
	struct r2v_cm_msg rdy;
	fill_cm(tp, p, &rdy, R2V_CM_READY);
	if (klen)
		r2v_cm_mac(key, klen, R2V_CM_READY, &s->hs_hello, m, rdy.mac);
	s->state = S_WAIT_UP;
	return sock_send_msg(tp, s, &rdy);
}

/* a whole message arrived on s */
static int sock_msg(struct r2_tp *tp, struct vsock *s)
{
	struct r2v_cm_msg m;
	int r = r2v_cm_unpack(s->rx, R2V_CM_SIZE, &m);
	s->rx_got = 0;
	if (r)
		return r;
	if (m.dst_id != tp->cfg.self_id)
		return -EPROTO;
	struct vpeer *p = s->peer;
	switch (s->state) {
	case S_WAIT_HELLO:
		return hello_in(tp, s, &m);
	case S_WAIT_REPLY:
		return reply_in(tp, s, &m);
	case S_WAIT_READY:
		return ready_in(tp, s, &m);
	case S_WAIT_UP:
		if (m.type != R2V_CM_UP || m.self_id != p->h.id || m.nonce != p->nonce)
			return -EPROTO;
		conn_up(tp, p);
		return 0;
	default:
		return -EPROTO;
	}
}

void v_sock_fail(struct r2_tp *tp, struct vsock *s, int status)
{
	if (s->peer)
		v_peer_fail(tp, s->peer, status, true);
	s->dead = true;
}

void v_on_sock(struct r2_tp *tp, struct vsock *s, uint32_t ev)
{
	int r = 0;
	if (s->dead)
		return;
	if (s->state == S_DIALING) {
		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		int err = 0;
		socklen_t sl = sizeof(err);
		getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
		if (err) {
			v_sock_fail(tp, s, -err);
			return;
		}
		struct vpeer *p = s->peer;
		r = v_peer_make_qps(tp, p);
		if (r) {
			v_sock_fail(tp, s, r);
			return;
		}
		fill_cm(tp, p, &s->hs_hello, R2V_CM_HELLO);
		r = r2_tp_random(s->hs_hello.chal, sizeof(s->hs_hello.chal));
		s->state = S_WAIT_REPLY;
		s->want_out = true; /* armed since connect; the flush disarms */
		if (!r)
			r = sock_send_msg(tp, s, &s->hs_hello);
		if (r)
			v_sock_fail(tp, s, r);
		return;
	}
	if (ev & EPOLLOUT) {
		r = sock_flush(tp, s);
		if (r) {
			v_sock_fail(tp, s, r);
			return;
		}
	}
	if (!(ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
		return;
	for (;;) {
		ssize_t n = recv(s->fd, s->rx + s->rx_got, R2V_CM_SIZE - s->rx_got, 0);
		if (n == 0) {
			v_sock_fail(tp, s, -ECONNRESET);
			return;
		}
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR)
				continue;
			v_sock_fail(tp, s, -errno);
			return;
		}
		if (s->state == S_UP) {
			v_sock_fail(tp, s, -EPROTO); /* nothing is expected after READY */
			return;
		}
		uint32_t had = s->rx_got;
		s->rx_got += (uint32_t)n;
		if (had < 4 && s->rx_got >= 4) {
			/* not a verbs side channel: most likely the host at the other
			 * end runs tcp on this rail (tcp's stream hello, "2TCH") */
			uint32_t mg;
			memcpy(&mg, s->rx, 4);
			mg = le32toh(mg);
			if (mg != R2V_CM_MAGIC) {
				struct sockaddr_in pa = { 0 };
				socklen_t pl = sizeof(pa);
				char as[INET_ADDRSTRLEN] = "?";
				if (getpeername(s->fd, (struct sockaddr *)&pa, &pl) == 0)
					inet_ntop(AF_INET, &pa.sin_addr, as, sizeof(as));
				log_warn("verbs %s: side channel from %s: %s", tp->cfg.ifname, as,
					 mg == 0x48435432u ?
					 "that host uses the tcp transport on this rail; a rail "
					 "must be verbs on every host or tcp on every host" :
					 "not an r2ccl verbs peer");
				v_sock_fail(tp, s, -EPROTONOSUPPORT);
				return;
			}
		}
		if (s->rx_got == R2V_CM_SIZE) {
			r = sock_msg(tp, s);
			if (r) {
				log_debug("verbs %s: side channel: %d", tp->cfg.ifname, r);
				v_sock_fail(tp, s, r);
				return;
			}
		}
	}
}

/* accepted side channels still before READY's proof from addr */
static unsigned prehello_from(struct r2_tp *tp, struct in_addr addr)
{
	unsigned n = 0;

	for (struct vsock *s = tp->socks; s; s = s->next)
		n += s->prehello && !s->dead && s->raddr.s_addr == addr.s_addr;
	return n;
}

/* Side channels that have not proved the key are capped in all and per
 * source address (peer_max_prehello, as tcp's streams: each holds an fd
 * and up to R2V_MAX_QPS QPs) and must finish within hello_timeout_ms. */
void v_on_listen(struct r2_tp *tp)
{
	unsigned max = tp->cfg.prehello_max, per = tp->cfg.prehello_per_addr;

	char what[96];

	snprintf(what, sizeof(what), "verbs %s", tp->cfg.ifname);
	for (int i = 0; i < 64; i++) {
		struct sockaddr_in ra = { 0 };
		int fd = r2_tp_accept(tp->lfd, &ra, what);
		if (fd < 0)
			return;
		unsigned lim = tp->prehello >= max ? max : per;
		if (tp->prehello >= max || prehello_from(tp, ra.sin_addr) >= per) {
			char a[INET_ADDRSTRLEN] = "?";
			inet_ntop(AF_INET, &ra.sin_addr, a, sizeof(a));
			log_warn_rl("verbs %s: side channel from %s closed: %u of them %s have not "
				    "proved the cluster key yet (peer_max_prehello%s)",
				    tp->cfg.ifname, a, lim, lim == max ? "in all" : "from that address",
				    lim == max ? "" : "_per_addr");
			close(fd);
			continue;
		}
		sock_opts(tp, fd);
		struct vsock *s = sock_new(tp, fd, S_WAIT_HELLO, EPOLLIN, tp->cfg.hello_timeout_ms);
		if (!s) {
			close(fd);
			continue;
		}
		s->prehello = true;
		s->raddr = ra.sin_addr;
		tp->prehello++;
	}
}


int verbs_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port)
{
	if (peer_id == tp->cfg.self_id)
		return -EINVAL;
	pthread_mutex_lock(&tp->b.lock);
	struct vpeer *p = v_peer_find(tp, peer_id);
	if (p && !p->h.failed) {
		int r = p->conn_reported ? -EISCONN : -EALREADY;
		pthread_mutex_unlock(&tp->b.lock);
		return r;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		pthread_mutex_unlock(&tp->b.lock);
		return -errno;
	}
	sock_opts(tp, fd);
	int one = 1;
	if (tp->cfg.addr.s_addr != htonl(INADDR_ANY)) {
		struct sockaddr_in la = { .sin_family = AF_INET, .sin_addr = tp->cfg.addr };
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&la, sizeof(la)) < 0) {
			int e = errno;
			close(fd);
			pthread_mutex_unlock(&tp->b.lock);
			return -e;
		}
	}
	uint64_t nonce = r2_tp_now_ns() ^ ((uint64_t)(uintptr_t)tp << 16) ^ (peer_id * 0x9e3779b97f4a7c15ull);
	struct sockaddr_in ra = { .sin_family = AF_INET, .sin_addr = addr, .sin_port = htons(port) };
	int r = connect(fd, (struct sockaddr *)&ra, sizeof(ra));
	if (r < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		pthread_mutex_unlock(&tp->b.lock);
		return -e;
	}
	struct vsock *s = sock_new(tp, fd, S_DIALING, EPOLLIN | EPOLLOUT,
				   2ull * tp->cfg.user_timeout_ms);
	if (!s) {
		close(fd);
		pthread_mutex_unlock(&tp->b.lock);
		return -ENOMEM;
	}
	p = v_peer_new(tp, peer_id, ROLE_DIAL, tp->cfg.ib_qps, nonce);
	if (!p) {
		s->dead = true;
		pthread_mutex_unlock(&tp->b.lock);
		r2_tp_efd_signal(tp->wfd);
		return -ENOMEM;
	}
	p->sock = s;
	s->peer = p;
	s->raddr = addr;
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}
/* The side channel's listener on cfg->addr:cfg->port, the wake-up eventfd
 * and the progress thread's epoll set (wake-up, listener, completion
 * channel). 0 or a negative errno. */
int v_open_side_channel(struct r2_tp *tp)
{
	struct r2_tp_config *c = &tp->cfg;
	int ret;

	tp->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	tp->epfd = epoll_create1(EPOLL_CLOEXEC);
	tp->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tp->wfd < 0 || tp->epfd < 0 || tp->lfd < 0) {
		ret = -errno;
		return ret;
	}
	int one = 1;
	setsockopt(tp->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = c->addr, .sin_port = htons(c->port) };
	socklen_t sl = sizeof(sin);
	if (bind(tp->lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(tp->lfd, SOMAXCONN) < 0 ||
	    getsockname(tp->lfd, (struct sockaddr *)&sin, &sl) < 0) {
		ret = -errno;
		return ret;
	}
	tp->b.port = ntohs(sin.sin_port);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &tp->wake_kind };
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->wfd, &ev);
	ev.data.ptr = &tp->listen_kind;
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->lfd, &ev);
	ev.data.ptr = &tp->chan_kind;
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->ch->fd, &ev);
	return 0;
}
