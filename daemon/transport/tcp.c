// SPDX-License-Identifier: MIT
/*
 * The tcp transport provider: its rail instance (open, close), progress
 * threads and operation table (BRIEF.md decision 5): one instance per rail (NIC).
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
 * reason (the bootstrap timeout bounds a peer that is really unreachable);
 * one that was up (CONN said) and yields to the lower id's new dial does
 * (that peer lost it and reconnects).
 * connect() returns -EISCONN when the peer is connected, -EALREADY while a
 * connection with it (dialed or accepted) is being set up (no second CONN
 * comes then).
 * post_send() sets hdr->magic itself.
 * Each stream starts with a hello exchange (tcp_wire.h, tcp_hello.c): the
 * dialer's DIAL (ids, stream index, nstreams, rail, max_msg, a
 * per-connection nonce, a fresh random challenge), the acceptor's ANSWER
 * (its own challenge and, with a cluster key, an HMAC-SHA256 proof over both
 * hellos), the dialer's PROOF (its HMAC over the same). cfg->auth says
 * whether proofs are made and required (R2_TP_AUTH_KEY), left out on both
 * sides (R2_TP_AUTH_NONE), or every hello refused (R2_TP_AUTH_REFUSE: no key
 * here). The acceptor looks nothing up and changes nothing until the PROOF
 * checks out: an unauthenticated, mismatched or malformed hello is closed
 * alone (a rate-limited warning) and never touches a live connection of
 * the daemon id it claims. A stream is up on the acceptor when the PROOF
 * checks out and the stream joined a connection (it then sends OK before
 * anything else), on the dialer when that OK comes; R2_TPC_CONN is reported
 * once per peer, when all its streams are up. (On the dialing side a RECV
 * from the peer can come just before its CONN.)
 * An authenticated hello from a peer that has a connection here with another
 * nonce means the peer reconnected: the old connection fails (ERROR if its
 * CONN had been reported) and the new one replaces it.
 * Accepted streams before their PROOF are capped (cfg->prehello_max in all,
 * cfg->prehello_per_addr per source address: more are closed at accept) and
 * closed when the exchange is not done within cfg->hello_timeout_ms.
 *
 * Failures. Any stream error (reset, EOF, user timeout, malformed header or
 * len > max_msg, a dial not connected and answered within 2 x user timeout) fails the
 * whole peer connection on this rail: R2_TPC_ERROR (peer, status) is reported
 * once (on the acceptor side only when CONN had been reported; on the dialing
 * side always, as the completion of connect), every stream of it is shut down
 * (so the peer sees it too), and every send still queued completes with
 * R2_TPC_SEND status < 0 (the engine re-sends it elsewhere). disconnect()
 * does the same without ERROR (sends fail with -ECONNABORTED). A bad stream
 * that never said hello is closed alone; the listener keeps going.
 *
 * Latency lane (cfg->lane): one stream more per connection; a message with
 * R2_CHUNK_URGENT (a latency-class tenant's) takes the last stream, every
 * other message the others, so an urgent one never waits behind bulk bytes
 * in this side's queues or socket (the network's queues are the network's:
 * a fair-queueing qdisc such as fq_codel, Linux's usual default, keeps the
 * lane's packets from waiting behind the bulk flows' there). A side uses
 * the lane of a connection of two streams or more, whoever dialed it.
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
#include "tcp_int.h"
#include "util.h"

/* ---- progress ---- */

static void on_stream(struct r2_tp *tp, struct tcp_stream *st, uint32_t ev)
{
	int r;

	if (atomic_load(&st->dead))
		return;
	if (st->state == ST_CONNECTING) {
		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		tcp_on_connected(tp, st);
		if (atomic_load(&st->dead))
			return;
		ev |= EPOLLOUT;
	}
	if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
		r = tcp_stream_rx(tp, st);
		if (r < 0) {
			tcp_stream_fail(tp, st, r);
			return;
		}
	}
	if (ev & EPOLLOUT) {
		r = tcp_stream_tx(tp, st);
		if (r < 0) {
			tcp_stream_fail(tp, st, r);
			return;
		}
	}
}

/* Four times a second: a dial not connected and answered within 2 x user timeout
 * fails; an accepted stream without its hello done within hello_timeout_ms
 * (a few seconds: a port scan or an idle attacker holds nothing long) is
 * closed. */
static void tick(struct r2_tp *tp, struct tcp_thread *th)
{
	uint64_t now = r2_tp_now_ns();
	uint64_t dial_limit = 2ull * tp->cfg.user_timeout_ms * 1000000ull;
	uint64_t hello_limit = (uint64_t)tp->cfg.hello_timeout_ms * 1000000ull;

	if (now - th->last_tick < 250000000ull)
		return;
	th->last_tick = now;
	pthread_mutex_lock(&tp->b.lock);
	now = r2_tp_now_ns(); /* streams made before this are older: no underflow */
	for (struct tcp_stream *st = tp->streams; st; st = st->anext) {
		if (st->th != th || st->state == ST_UP || atomic_load(&st->dead))
			continue;
		uint64_t limit = st->role == ROLE_ACCEPT ? hello_limit : dial_limit;
		if (now > st->t_start && now - st->t_start > limit) {
			if (st->peer)
				tcp_peer_fail(tp, st->peer, -ETIMEDOUT, true);
			else
				tcp_stream_kill(st, -ETIMEDOUT);
		}
	}
	pthread_mutex_unlock(&tp->b.lock);
}

static void *progress_main(void *arg)
{
	struct tcp_thread *th = arg;
	struct r2_tp *tp = th->tp;
	struct epoll_event evs[64];
	uint64_t spin_until = 0; /* epoll polled, not slept in, until then */

	/* After a latency-bound message (R2_CHUNK_POLL: an eager AllReduce's,
	 * which come one at a time, so on the peer's first idle stream and
	 * one thread per rail, tcp_post_send) the thread polls its sockets for
	 * spin_us before it sleeps: the next one is read without a wake-up,
	 * which on a big host's idle CPU costs some 100 us (issue 21: a small
	 * AllReduce that once waited past the poll kept doing so, each host
	 * late for the other). Other traffic keeps it busy without polling
	 * and leaves the CPUs to the copies and reductions: with every
	 * thread polling after every message (before 2026-12-06), 128 KB
	 * AllReduces on 2 namespace hosts of the 16-core machine took 130-150
	 * us instead of 100 at a 250 us poll, and 128 KB-1 MB 2-5x as long at
	 * 1 ms (docs/benchmarks.md). */
	th->last_tick = r2_tp_now_ns();
	while (!atomic_load(&tp->stop)) {
		bool spinning = spin_until && r2_now_us() < spin_until;
		int n = epoll_wait(th->epfd, evs, 64, spinning ? 0 : 250);
		if (spinning && n == 0)
			r2_cpu_relax();
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
				tcp_on_listen(tp);
				break;
			case OBJ_STREAM:
				on_stream(tp, (struct tcp_stream *)o, evs[i].events);
				break;
			}
		}
		if (th->poll_rx) {
			th->poll_rx = false;
			if (tp->cfg.spin_us)
				spin_until = r2_now_us() + tp->cfg.spin_us;
		}
		tick(tp, th);
		if (atomic_exchange(&th->reap, false))
			tcp_reap_streams(tp, th);
	}
	return NULL;
}

/* ---- operations ---- */

static void tcp_close(struct r2_tp *tp);

static void cq_release(void *arg, void *buf)
{
	tcp_pool_put(arg, buf);
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
	/* the latency lane: the last stream of each connection this side dials */
	if (tp->cfg.lane && tp->cfg.streams < TCP_MAX_STREAMS)
		tp->cfg.streams++;
	else
		tp->cfg.lane = false;
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
	r2_tp_hello_defaults(&tp->cfg);
	if (tp->cfg.auth == R2_TP_AUTH_KEY &&
	    (tp->cfg.auth_key_len == 0 || tp->cfg.auth_key_len > sizeof(tp->cfg.auth_key))) {
		ret = -EINVAL;
		goto out;
	}
	tp->lfd = -1;
	tp->listen_obj.kind = OBJ_LISTEN;
	pthread_mutex_init(&tp->pool_lock, NULL);
	ret = r2_tp_base_init(&tp->b, "tcp", cq_release, tp, tcp_peer_fail_hook);
	if (ret < 0)
		goto out;
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
	ret = tcp_bind_device(tp, tp->lfd);
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
		ret = tcp_epoll_set(th, EPOLL_CTL_ADD, th->wfd, EPOLLIN, &th->wake_obj);
		if (ret < 0)
			goto out;
	}
	ret = tcp_epoll_set(&tp->threads[0], EPOLL_CTL_ADD, tp->lfd, EPOLLIN, &tp->listen_obj);
	if (ret < 0)
		goto out;
	for (int i = 0; i < tp->nthreads; i++) {
		struct tcp_thread *th = &tp->threads[i];
		ret = -r2_thread_create(&th->tid, progress_main, th);
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
		tcp_stream_free(tp, st, false, 0);
	}
	while (tp->b.peers.all)
		tcp_peer_free(tp, (struct tcp_peer *)tp->b.peers.all);
	r2_tp_base_fini(&tp->b); /* RECV buffers still queued go back */
	tcp_pool_destroy(tp);
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
	.caps = R2_TP_CAP_ZERO_COPY | R2_TP_CAP_STREAMS | R2_TP_CAP_RX_DIRECT,
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
