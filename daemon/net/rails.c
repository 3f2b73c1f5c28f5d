/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/comm_record.h"
#include "net/bufpool.h"
#include "config.h"
#include "hmac_sha256.h"
#include "net/health.h"
#include "net/net.h"
#include "log.h"
#include "net/detour.h"
#include "net/rails.h"
#include "net/rails_int.h"
#include "net/tenants.h"
#include "util.h"


static int nic_mask(const char *ifname, struct in_addr *addr, struct in_addr *mask)
{
	struct ifaddrs *ifa, *i;
	int r = -ENOENT;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || strcmp(i->ifa_name, ifname))
			continue;
		*addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
		*mask = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr;
		r = 0;
		break;
	}
	freeifaddrs(ifa);
	return r;
}

int r2d_rails_match(struct r2d *d, uint32_t ipv4)
{
	struct r2_rails *rs = d->rails;

	for (int i = 0; rs && i < rs->n; i++) {
		uint32_t m = rs->rail[i].mask.s_addr;
		if ((ipv4 & m) == (rs->rail[i].addr.s_addr & m))
			return i;
	}
	return -1;
}

int r2d_rails_connect(struct r2d *d, uint64_t peer, uint32_t ipv4, uint16_t port)
{
	struct r2_rails *rs = d->rails;
	struct r2_peer *p;
	struct in_addr a = { ipv4 };
	int rail = r2d_rails_match(d, ipv4);

	if (rail < 0)
		return -ENETUNREACH;
	p = r2d_rails_peer(d, peer, false);
	if (!p && r2d_rails_make_room(d) == 0)
		p = r2d_rails_peer(d, peer, true);
	if (!p) {
		log_warn_rl("peer table full (%d peers, every one needed by a communicator): "
			    "not connecting to peer %016llx",
			    R2_MAX_PEERS, (unsigned long long)peer);
		return -ENOSPC;
	}
	p->addr[rail] = ipv4;
	p->port[rail] = port;
	p->link[rail].known = true;
	if ((p->warm_pending & p->conn_mask) & (1u << rail)) {
		/* connected before a communicator needed it: warm it up now */
		p->warm_pending &= ~(1u << rail);
		rl_warmup(rs, rail, peer);
	}
	if (p->want_mask & (1u << rail))
		return 0;
	p->want_mask |= 1u << rail;
	int r = rs->rail[rail].ops->connect(rs->rail[rail].tp, peer, a, port);
	if (r == -EPERM)
		log_warn_rl("rail %d (%s): not connecting to peer %016llx: no cluster key "
			    "(cluster_key_file, docs/security.md)",
			    rail, rs->rail[rail].ifname, (unsigned long long)peer);
	return r;
}

static void note_use(struct r2_rails *rs, int rail, uint64_t key);

int r2d_rails_send(struct r2d *d, int rail, uint64_t peer, const struct r2_chunk_hdr *hdr,
		   const void *buf, uint64_t ctx)
{
	struct r2_rails *rs = d->rails;
	bool data = hdr->kind == R2_MSG_DATA && hdr->len;
	/* (not a lazily acknowledged one: its answer comes with the
	 * receiver's next collective, R2_CHUNK_LAZY_ACK) */
	bool mon = data && !(hdr->flags & R2_CHUNK_LAZY_ACK);
	int r;

	if (!rs || rail < 0 || rail >= rs->n)
		return -EINVAL;
	/* throughput monitor: counted before the post (its ACK may come first) */
	if (mon)
		r2d_health_data_posted(d, rail, peer, hdr->len);
	r = rs->rail[rail].ops->post_send(rs->rail[rail].tp, peer, hdr, buf, ctx);
	if (r < 0 && mon)
		r2d_health_data_posted(d, rail, peer, -(int64_t)hdr->len);
	if (r >= 0 && data) {
		struct r2_peer *p = r2d_rails_peer_find(d, peer);
		r2d_tenants_posted(d, rail, peer, hdr->len); /* in the window until written */
		note_use(rs, rail, hdr->comm);
		if (p) {
			atomic_fetch_add_explicit(&p->tx_bytes[rail], hdr->len,
						  memory_order_relaxed);
			atomic_fetch_add_explicit(&p->tx_chunks[rail], 1, memory_order_relaxed);
		}
	}
	return r;
}

/* Marks the communicator key as a user of the rail in this interval: one
 * load when it is already there (the common case: the first slot). */
static void note_use(struct r2_rails *rs, int rail, uint64_t key)
{
	_Atomic uint64_t *u = rs->used_by[rail];

	if (!key)
		return;
	for (int i = 0; i < R2_RAIL_USE_SLOTS; i++) {
		uint64_t v = atomic_load_explicit(&u[i], memory_order_relaxed);
		if (v == key)
			return;
		if (!v) {
			if (atomic_compare_exchange_strong(&u[i], &v, key) || v == key)
				return;
		}
	}
	atomic_fetch_add_explicit(&rs->used_more[rail], 1, memory_order_relaxed);
}

int r2d_rails_take_usage(struct r2d *d, int rail, uint64_t *keys, int max)
{
	struct r2_rails *rs = d->rails;
	int n = 0;

	if (!rs || rail < 0 || rail >= rs->n)
		return 0;
	for (int i = 0; i < R2_RAIL_USE_SLOTS; i++) {
		uint64_t v = atomic_exchange(&rs->used_by[rail][i], 0);
		if (v && n < max)
			keys[n++] = v;
	}
	n += (int)atomic_exchange(&rs->used_more[rail], 0) > 0;
	return n;
}

void r2d_rails_note_resend(struct r2d *d, int rail, uint64_t peer, uint32_t n)
{
	struct r2_peer *p = r2d_rails_peer_find(d, peer);

	if (p && rail >= 0 && rail < R2_MAX_RAILS && n)
		atomic_fetch_add_explicit(&p->resends[rail], n, memory_order_relaxed);
}

/* tcp_threads and tcp_streams as set, 0 resolved once at start-up by the
 * cores: threads one per 4 cores, 1 to 4 (a 2-core host: 1; 16 cores: 4,
 * where two namespace hosts over 2 rails went from 3.1-3.8 to 5.5-6.8
 * GB/s); streams 2 per thread, 1 with a single thread (one stream was best
 * on the 2-core 4 x 2 cluster at 1 Gbit/s, docs/planner.md). */
static void tcp_resolve(struct r2d *d, struct r2_rails *rs)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);

	rs->tcp_threads = (int)r2_param_int(&d->params, P_TCP_THREADS);
	if (rs->tcp_threads <= 0)
		rs->tcp_threads = (int)R2_MAX(1, R2_MIN(4, cores / 4));
	rs->tcp_streams = (int)r2_param_int(&d->params, P_TCP_STREAMS);
	if (rs->tcp_streams <= 0)
		rs->tcp_streams = rs->tcp_threads > 1 ? 2 * rs->tcp_threads : 1;
}

bool r2d_rails_zero_copy(struct r2d *d, int rail)
{
	struct r2_rails *rs = d->rails;

	return rs && rail >= 0 && rail < rs->n && (rs->rail[rail].ops->caps & R2_TP_CAP_ZERO_COPY) &&
	       r2_param_bool(&d->params, P_TCP_ZERO_COPY);
}

void r2d_rails_drop(struct r2d *d, int rail, uint64_t peer)
{
	struct r2_rails *rs = d->rails;

	if (rs && rail >= 0 && rail < rs->n && rs->rail[rail].tp)
		rs->rail[rail].ops->disconnect(rs->rail[rail].tp, peer);
	r2d_tenants_fail(d, rail, peer); /* its queued chunks complete with an error too */
}

void r2d_rails_release(struct r2d *d, int rail, void *buf)
{
	struct r2_rails *rs = d->rails;

	if (buf && rs && rail >= 0 && rail < rs->n)
		rs->rail[rail].ops->release(rs->rail[rail].tp, buf);
}

static void to_loop(struct r2_rails *rs, int rail, const struct r2_tp_cqe *c)
{
	struct r2_loop_ev *ev = calloc(1, sizeof(*ev));

	if (!ev) {
		if (c->type == R2_TPC_RECV)
			r2d_rails_release(rs->d, rail, c->buf);
		return;
	}
	ev->rail = rail;
	ev->cqe = *c;
	pthread_mutex_lock(&rs->qlock);
	if (rs->qtail)
		rs->qtail->next = ev;
	else
		rs->qhead = ev;
	rs->qtail = ev;
	pthread_mutex_unlock(&rs->qlock);
	uv_async_send(&rs->async);
}

/* A connection came up (loop thread): the peer's entry, made room for if
 * the table is full (a peer no communicator needs goes), and its warm-up,
 * only when a communicator needs the peer or we dialed it (else when one
 * does: r2d_rails_connect). false: no entry could be made; the connection
 * is dropped. */
static bool conn_in(struct r2_rails *rs, const struct r2_loop_ev *ev)
{
	struct r2d *d = rs->d;
	uint64_t id = ev->cqe.peer;
	uint32_t bit = 1u << ev->rail;
	struct r2_peer *p;
	bool needed;

	pthread_mutex_lock(&d->lock);
	needed = r2d_rails_peer_needed(d, id);
	p = r2d_rails_peer(d, id, false);
	if (!p && r2d_rails_make_room(d) == 0)
		p = r2d_rails_peer(d, id, true);
	pthread_mutex_unlock(&d->lock);
	if (!p) {
		log_warn_rl("rail %d (%s): peer table full (%d peers, every one needed by a "
			    "communicator): connection of peer %016llx dropped",
			    ev->rail, rs->rail[ev->rail].ifname, R2_MAX_PEERS,
			    (unsigned long long)id);
		rs->rail[ev->rail].ops->disconnect(rs->rail[ev->rail].tp, id);
		return false;
	}
	p->conn_mask |= bit;
	log_info("rail %d (%s): connected to peer %016llx", ev->rail, rs->rail[ev->rail].ifname,
		 (unsigned long long)id);
	if (needed || (p->want_mask & bit)) {
		p->warm_pending &= ~bit;
		rl_warmup(rs, ev->rail, id);
	} else {
		p->warm_pending |= bit;
	}
	return true;
}

static void on_async(uv_async_t *h)
{
	struct r2_rails *rs = h->data;
	struct r2_loop_ev *ev, *next;

	pthread_mutex_lock(&rs->qlock);
	ev = rs->qhead;
	rs->qhead = rs->qtail = NULL;
	pthread_mutex_unlock(&rs->qlock);
	for (; ev; ev = next) {
		next = ev->next;
		if (ev->cqe.type == R2_TPC_SEND) {
			/* a warm-up's last message (cqe_in): the rail's next */
			rl_warmup_done(rs, ev->rail, ev->cqe.peer);
			free(ev);
			continue;
		}
		if (ev->cqe.type == R2_TPC_CONN && !conn_in(rs, ev)) {
			free(ev); /* no room for it in the peer table: dropped */
			continue;
		} else if (ev->cqe.type == R2_TPC_ERROR) {
			struct r2_peer *p = r2d_rails_peer(rs->d, ev->cqe.peer, false);
			if (p) {
				p->conn_mask &= ~(1u << ev->rail);
				p->want_mask &= ~(1u << ev->rail);
				p->warm_pending &= ~(1u << ev->rail);
			}
			log_warn("rail %d (%s): connection to peer %016llx failed: %s", ev->rail,
				 rs->rail[ev->rail].ifname, (unsigned long long)ev->cqe.peer,
				 strerror(-ev->cqe.status));
		}
		if (ev->cqe.type == R2_TPC_CONN || ev->cqe.type == R2_TPC_ERROR)
			r2d_health_conn(rs->d, ev->rail, ev->cqe.peer, ev->cqe.type,
					ev->cqe.status);
		rs->d->net_ev->loop_event(rs->d, ev);
		if (ev->cqe.type == R2_TPC_RECV)
			r2d_rails_release(rs->d, ev->rail, ev->cqe.buf);
		free(ev);
	}
}

/* A heartbeat (rails thread): flags 0 asks for an answer (flags 1) that
 * echoes off (the sender's clock, us): the round trip; R2_HB_WARMUP: a new
 * connection's warm-up, dropped. */
static void heartbeat_in(struct r2_rails *rs, int rail, const struct r2_tp_cqe *c,
			 struct r2_peer *p)
{
	if (c->hdr.flags == R2_HB_WARMUP) {
		/* nothing to answer */
	} else if (c->hdr.flags == 0) {
		struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_HEARTBEAT,
					  .flags = 1, .off = c->hdr.off };
		rs->rail[rail].ops->post_send(rs->rail[rail].tp, c->peer, &h, NULL, 0);
	} else if (p) {
		uint64_t now = r2_now_us();
		if (now >= c->hdr.off)
			atomic_store_explicit(&p->rtt_us[rail], now - c->hdr.off,
					      memory_order_relaxed);
	}
	r2d_rails_release(rs->d, rail, c->buf);
}

/* One completion of rail, counted, then to the loop, the heartbeat monitor
 * or the engine: on the rails thread, or a received chunk or ACK on the
 * progress thread that read it (rx_direct). */
static void cqe_in(struct r2_rails *rs, int rail, struct r2_tp_cqe *c)
{
	if (c->type == R2_TPC_RECV) {
		struct r2_peer *p = r2d_rails_peer_find(rs->d, c->peer);
		if (p)
			atomic_store_explicit(&p->last_rx_us[rail], r2_now_us(),
					      memory_order_relaxed);
		if (c->hdr.kind == R2_MSG_HEARTBEAT) {
			heartbeat_in(rs, rail, c, p);
			return;
		}
		if (c->hdr.kind == R2_MSG_DATA)
			note_use(rs, rail, c->hdr.comm);
		if (p && c->hdr.kind == R2_MSG_DATA) {
			atomic_fetch_add_explicit(&p->rx_bytes[rail], c->hdr.len,
						  memory_order_relaxed);
			atomic_fetch_add_explicit(&p->rx_chunks[rail], 1, memory_order_relaxed);
		}
	}
	if (c->type == R2_TPC_SEND && c->hdr.kind == R2_MSG_DATA && c->hdr.len)
		r2d_tenants_sent(rs->d, rail, c->peer, c->hdr.len);
	if (c->type == R2_TPC_SEND && c->ctx == 1) {
		rl_ctrl_copy_free(rs, c->buf);
	} else if (c->type == R2_TPC_SEND && c->ctx == WARMUP_CTX &&
		   c->hdr.kind == R2_MSG_HEARTBEAT) {
		to_loop(rs, rail, c); /* on_async: the rail's next warm-up */
	} else if (c->type == R2_TPC_RECV && c->hdr.kind == R2_MSG_CTRL) {
		if (!rl_ctrl_detour_in(rs, rail, c))
			to_loop(rs, rail, c);
	} else if (c->type == R2_TPC_CONN || c->type == R2_TPC_ERROR) {
		to_loop(rs, rail, c);
		rs->d->net_ev->deliver(rs->d, rail, c);
		if (c->type == R2_TPC_ERROR)
			r2d_tenants_fail(rs->d, rail, c->peer);
		else
			r2d_tenants_conn(rs->d, rail, c->peer, true);
	} else {
		if (c->type == R2_TPC_RECV && c->hdr.kind == R2_MSG_ACK)
			r2d_health_data_acked(rs->d, rail, c->peer, c->hdr.aux);
		rs->d->net_ev->deliver(rs->d, rail, c);
	}
}

/* What rail's provider has completed (cqe_in each). The number taken (0:
 * none). */
static int drain_rail(struct r2_rails *rs, int rail, struct r2_tp_cqe *cq, int max)
{
	int total = 0;

	for (;;) {
		int k = rs->rail[rail].ops->poll(rs->rail[rail].tp, cq, max);
		if (k <= 0)
			return total;
		total += k;
		for (int i = 0; i < k; i++)
			cqe_in(rs, rail, &cq[i]);
	}
}

/* tcp_rx_direct: a data chunk or ACK a TCP progress thread read goes to
 * the engine from that thread (r2d_comm_deliver takes d->lock, the mailbox
 * wakes the executor), one hand-off less than through the rails thread.
 * Everything else, and everything once the rails stop, still goes through
 * the completion queue: the stop waits for the calls in progress. */
/* Send completions a thread took of its own posts (r2d_rails_own_sends):
 * kept until its scope ends, when it holds no lock (the tenants' pump posts
 * under theirs, and a completion may post again: a bridge's next chunk). */
#define OWN_SENDS_MAX 16
static __thread int own_depth;
static __thread int own_n;
static __thread struct own_send {
	struct r2_rails *rs;
	int rail;
	struct r2_tp_cqe c;
} own[OWN_SENDS_MAX];

/* A delivery off the rails thread may begin (direct_busy up: the stop
 * waits for it to end), unless the rails are stopping (then false: it is
 * queued for the rails thread as before). */
static bool direct_begin(struct r2_rails *rs)
{
	atomic_fetch_add(&rs->direct_busy, 1);
	if (atomic_load(&rs->direct_off) || !rs->d->net_ev) {
		atomic_fetch_sub(&rs->direct_busy, 1);
		return false;
	}
	return true;
}

/* c to cqe_in on this thread (false: queued instead). */
static bool direct_in(struct r2_rails *rs, int rail, struct r2_tp_cqe *c)
{
	if (!direct_begin(rs))
		return false;
	cqe_in(rs, rail, c);
	atomic_fetch_sub(&rs->direct_busy, 1);
	return true;
}

/* Larger data chunks (not an eager AllReduce's, R2_CHUNK_POLL), those of
 * bulk transfers (chunk_size, 1 MiB), still go through the rails thread: a
 * 256 KB AllReduce's on 4 hosts (128 KB a rail) stays here. Delivered here, 16-64 MB AllReduces on 4
 * namespace hosts of the 2-core machine ran at 0.41-0.54 GB/s bus bandwidth
 * instead of 0.62-0.82 (uncapped rails, docs/benchmarks.md section 2,
 * 2026-12-06); the likely cause: each delivery takes d->lock
 * (r2d_comm_deliver) on the thread that reads the socket, which reads
 * nothing while it waits for the executor to let go of it. */
#define RX_DIRECT_MAX (256u << 10)
static bool rx_direct(void *arg, const struct r2_tp_cqe *e)
{
	struct r2_rail *rl = arg;
	struct r2_rails *rs = rl->rs;
	struct r2_tp_cqe c = *e;

	if (e->type != R2_TPC_SEND) {
		if (e->hdr.kind == R2_MSG_DATA && e->hdr.len > RX_DIRECT_MAX &&
		    !(e->hdr.flags & R2_CHUNK_POLL))
			return false; /* a bulk chunk: through the rails thread */
		return direct_in(rs, rl->index, &c);
	}
	if (!own_depth || own_n == OWN_SENDS_MAX || !direct_begin(rs))
		return false; /* not in a scope that takes them: the rails thread */
	/* direct_busy stays up until it is delivered (the stop waits) */
	own[own_n++] = (struct own_send){ rs, rl->index, c };
	return true;
}

/* tcp_rx_direct, the other way: a data chunk's send completion, from the
 * progress thread that wrote its last byte (holding no lock), to its
 * communicator at once. Through the rails thread a large operation's
 * chunks cost that thread a wake-up each: 1 MB AllReduces on 2 namespace
 * hosts of the 2-core machine made it 4.8 switches and 21 system calls an
 * operation (docs/benchmarks.md, 2026-12-06 12:24). */
static bool sent_direct(void *arg, const struct r2_tp_cqe *e)
{
	struct r2_rail *rl = arg;
	struct r2_tp_cqe c = *e;

	return direct_in(rl->rs, rl->index, &c);
}

void r2d_rails_own_sends(bool on)
{
	if (on) {
		own_depth++;
		return;
	}
	if (--own_depth > 0)
		return;
	for (int i = 0; i < own_n; i++) {
		cqe_in(own[i].rs, own[i].rail, &own[i].c);
		atomic_fetch_sub(&own[i].rs->direct_busy, 1);
	}
	own_n = 0;
}

/* No progress thread delivers directly from now on (the rails thread stops,
 * or the engine goes). */
static void direct_stop(struct r2_rails *rs)
{
	atomic_store(&rs->direct_off, true);
	while (atomic_load(&rs->direct_busy))
		sched_yield();
}

/* After traffic, every rail's completions are polled for spin_us more
 * (exec_spin_us) before the thread sleeps: a small operation's reply comes
 * microseconds later, and the provider's event (an eventfd write and this
 * thread's wake-up) is then off its path. At most spin_us per wake-up, so
 * the tenants' queues and the wake-ups are seen as often as without. */
static void spin_rails(struct r2_rails *rs, struct r2_tp_cqe *cq, int max, uint64_t spin_us)
{
	uint64_t until = r2_now_us() + spin_us;

	while (!atomic_load(&rs->stop) && r2_now_us() < until) {
		int got = 0;
		for (int rail = 0; rail < rs->n; rail++)
			got += drain_rail(rs, rail, cq, max);
		if (!got)
			r2_cpu_relax();
	}
}

/* Whether a message comes in through this thread on some rail: its
 * provider queues received chunks for it (verbs), or tcp_rx_direct is off.
 * Where none does, the polls after traffic would only take CPUs from the
 * rails' own threads. */
static bool rails_rx_here(struct r2_rails *rs)
{
	if (!r2_param_bool(&rs->d->params, P_TCP_RX_DIRECT))
		return true;
	for (int rail = 0; rail < rs->n; rail++)
		if (!(rs->rail[rail].ops->caps & R2_TP_CAP_RX_DIRECT))
			return true;
	return false;
}

static void *rails_thread(void *arg)
{
	struct r2_rails *rs = arg;
	struct epoll_event evs[R2_MAX_RAILS + 1];
	struct r2_tp_cqe cq[64];
	int timeout = 100;

	while (!atomic_load(&rs->stop)) {
		int n = epoll_wait(rs->epfd, evs, R2_MAX_RAILS + 1, timeout), got = 0;
		for (int e = 0; e < n; e++) {
			int rail = (int)evs[e].data.u32;
			uint64_t v;
			if (rail < 0 || rail >= rs->n) {
				if (read(rs->wake_fd, &v, sizeof(v)) < 0)
					(void)0;
				continue;
			}
			if (read(rs->rail[rail].ops->event_fd(rs->rail[rail].tp), &v, sizeof(v)) < 0)
				(void)0;
			got += drain_rail(rs, rail, cq, 64);
		}
		if (got && rs->spin_us && rails_rx_here(rs))
			spin_rails(rs, cq, 64, rs->spin_us);
		/* the tenants' queues: what the windows and buckets let go now,
		 * and when a throttled chunk may go */
		timeout = r2d_tenants_pump_all(rs->d, 100);
	}
	return NULL;
}

/* The provider of a rail (r2_tp_select): verbs where the NIC (netdev) has an
 * RDMA port that passes ib_hca, tcp elsewhere, or everywhere with transport =
 * tcp; a provider that fails to open falls back to the next (tcp). Both ends
 * of a rail must use the same provider (docs/transports.md): a rail is all
 * RDMA or all tcp. */
static int open_rail(struct r2d *d, struct r2_rail *rl, const struct r2_tp_config *cfg)
{
	struct r2_tp_choice ch[R2_TP_MAX_CHOICES];
	int n = r2_tp_select(cfg, r2_param_str(&d->params, P_TRANSPORT), ch, R2_TP_MAX_CHOICES);
	int r = n < 0 ? n : -ENODEV;

	rl->rdma_dev[0] = 0;
	for (int i = 0; i < n; i++) {
		const char *next = i + 1 < n ? ch[i + 1].ops->name : "no transport";

		if (ch[i].probe == -EINVAL) {
			log_warn("rail %s: ib_hca '%s' is not a valid filter; the rail uses %s",
				 rl->ifname, cfg->ib_hca, next);
			continue;
		}
		r = ch[i].ops->open(cfg, &rl->tp);
		if (r == 0) {
			rl->ops = ch[i].ops;
			snprintf(rl->rdma_dev, sizeof(rl->rdma_dev), "%s", ch[i].dev);
			return 0;
		}
		if (ch[i].desc[0])
			log_warn("rail %s: %s: %s transport failed to open (%s), using %s", rl->ifname,
				 ch[i].desc, ch[i].ops->name, strerror(-r), next);
		else
			log_warn("rail %s (%s): %s transport failed to open: %s", rl->ifname,
				 inet_ntoa(rl->addr), ch[i].ops->name, strerror(-r));
	}
	return r;
}

/* With net.ipv4.tcp_slow_start_after_idle = 1 (the kernel's default) TCP
 * shrinks the window of a connection that idles or carries only heartbeats
 * back to 10 segments within a second or two, so the connections a re-plan
 * turns to after a failure start slowly (docs/operations.md). */
static void slow_start_check(struct r2d *d, const struct r2_rails *rs)
{
	FILE *f;
	int v = 0;
	bool tcp = false;

	for (int i = 0; i < rs->n; i++)
		tcp |= rs->rail[i].ops->caps & R2_TP_CAP_STREAMS;
	if (!tcp || !r2_param_int(&d->params, P_TCP_WARMUP))
		return;
	f = fopen("/proc/sys/net/ipv4/tcp_slow_start_after_idle", "r");
	if (!f)
		return;
	if (fscanf(f, "%d", &v) == 1 && v)
		log_warn("net.ipv4.tcp_slow_start_after_idle is %d: TCP rails lose their "
			 "congestion window while idle, and the first collective after a re-plan "
			 "runs slower; set it to 0 on r2ccl hosts (docs/operations.md)", v);
	fclose(f);
}

/* forced: every rail on this provider, at the address the topology lists
 * for its NIC (a /24), instead of the NIC's own (r2d_rails_start_on). */
static int rails_start(struct r2d *d, const struct r2_tp_ops *forced)
{
	struct r2_rails *rs = calloc(1, sizeof(*rs));
	struct epoll_event ev = { .events = EPOLLIN };
	int r;

	if (!rs)
		return -ENOMEM;
	rs->d = d;
	/* no direct delivery before every rail is counted and the rails
	 * thread runs (until then messages queue) */
	atomic_init(&rs->direct_off, true);
	pthread_mutex_init(&rs->ctrl_lock, NULL);
	d->rails = rs;
	tcp_resolve(d, rs);
	r = r2d_tenants_init(d); /* made by the configuration, or here (tests) */
	if (r < 0)
		return r;
	rs->spin_us = r2_spin_budget_us(r2_param_int(&d->params, P_EXEC_SPIN_US));
	r2d_tenants_configure(d, r2_param_bool(&d->params, P_SCHED),
			      (uint32_t)r2_param_int(&d->params, P_SCHED_QUANTUM),
			      (uint64_t)r2_param_int(&d->params, P_SCHED_PRIO_RUN),
			      (uint64_t)r2_param_int(&d->params, P_SCHED_WINDOW),
			      r2_param_bool(&d->params, P_SCHED_MOVE));
	pthread_mutex_init(&rs->qlock, NULL);
	rs->epfd = epoll_create1(EPOLL_CLOEXEC);
	rs->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ev.data.u32 = UINT32_MAX;
	epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->wake_fd, &ev);
	struct r2_tp_config auth = { 0 };
	bool any_nic = false;
	for (int i = 0; i < d->topo.nnics; i++)
		any_nic |= d->topo.nics[i].selected && d->topo.nics[i].kind != R2_NIC_RDMA;
	if (any_nic)
		r2d_rails_auth_setup(d, &auth);
	/* the latency lane: on, or auto with a latency-class tenant in the
	 * configuration at start (decided once for every rail) */
	const char *lane_param = r2_param_str(&d->params, P_TCP_LATENCY_LANE);
	bool lane = !strcmp(lane_param, "on") ||
		    (!strcmp(lane_param, "auto") && r2d_tenants_has_class(d, R2_TCLASS_LATENCY));
	for (int i = 0; i < d->topo.nnics && rs->n < R2_MAX_RAILS; i++) {
		const struct r2_topo_nic *nic = &d->topo.nics[i];
		struct r2_rail *rl = &rs->rail[rs->n];
		struct r2_tp_config cfg = { 0 };
		/* A rail is a netdev: an RDMA NIC's is the one under its PCI
		 * device (ib0, ens1f0np0); one without a netdev has no address
		 * for the side channel and is not a rail. */
		const char *ifname = nic->kind == R2_NIC_RDMA ? nic->netdev : nic->name;

		if (!nic->selected || !ifname[0])
			continue;
		if (forced) {
			if (inet_pton(AF_INET, nic->addr, &rl->addr) != 1)
				continue;
			rl->mask.s_addr = htonl(0xffffff00u);
		} else if (nic_mask(ifname, &rl->addr, &rl->mask) < 0) {
			continue; /* no IPv4 address: not usable by tcp */
		}
		snprintf(rl->ifname, sizeof(rl->ifname), "%s", ifname);
		rl->index = rs->n;
		snprintf(cfg.ifname, sizeof(cfg.ifname), "%s", ifname);
		cfg.addr = rl->addr;
		cfg.port = (uint16_t)r2_param_int(&d->params, P_PORT);
		cfg.rail = rs->n;
		cfg.self_id = d->host_id;
		cfg.streams = rs->tcp_streams;
		cfg.sndbuf = (int)r2_param_int(&d->params, P_TCP_SNDBUF);
		cfg.rcvbuf = (int)r2_param_int(&d->params, P_TCP_RCVBUF);
		cfg.nodelay = r2_param_bool(&d->params, P_TCP_NODELAY);
		cfg.lane = lane;
		snprintf(cfg.congestion, sizeof(cfg.congestion), "%s",
			 r2_param_str(&d->params, P_TCP_CONGESTION));
		cfg.bind_device = true;
		cfg.max_msg = (uint32_t)r2_param_int(&d->params, P_CHUNK_SIZE) + (1u << 20);
		cfg.progress_threads = rs->tcp_threads;
		cfg.spin_us = (uint32_t)rs->spin_us;
		rl->rs = rs;
		if (r2_param_bool(&d->params, P_TCP_RX_DIRECT)) {
			cfg.rx_direct = rx_direct;
			cfg.sent_direct = sent_direct;
			cfg.rx_arg = rl;
		}
		snprintf(cfg.ib_hca, sizeof(cfg.ib_hca), "%s", r2_param_str(&d->params, P_IB_HCA));
		cfg.ib_timeout = (int)r2_param_int(&d->params, P_IB_TIMEOUT);
		cfg.ib_retry_cnt = (int)r2_param_int(&d->params, P_IB_RETRY_CNT);
		cfg.ib_qps = (int)r2_param_int(&d->params, P_IB_QPS_PER_CONN);
		cfg.ib_tc = (int)r2_param_int(&d->params, P_IB_TC);
		cfg.ib_sl = (int)r2_param_int(&d->params, P_IB_SL);
		cfg.ib_gid_index = (int)r2_param_int(&d->params, P_IB_GID_INDEX);
		cfg.ib_gid_fixed = cfg.ib_gid_index >= 0;
		cfg.ib_slot_size = (uint32_t)r2_param_int(&d->params, P_IB_SLOT_SIZE);
		cfg.ib_recv_depth = (int)r2_param_int(&d->params, P_IB_SRQ_DEPTH);
		cfg.ib_send_depth = (int)r2_param_int(&d->params, P_IB_SQ_DEPTH);
		cfg.auth = auth.auth;
		memcpy(cfg.auth_key, auth.auth_key, sizeof(cfg.auth_key));
		cfg.auth_key_len = auth.auth_key_len;
		cfg.hello_timeout_ms = (uint32_t)r2_param_int(&d->params, P_PEER_HELLO_TIMEOUT_MS);
		cfg.prehello_max = (uint32_t)r2_param_int(&d->params, P_PEER_MAX_PREHELLO);
		cfg.prehello_per_addr =
			(uint32_t)r2_param_int(&d->params, P_PEER_MAX_PREHELLO_PER_ADDR);
		if (forced) {
			rl->rdma_dev[0] = 0;
			rl->ops = forced;
			r = forced->open(&cfg, &rl->tp);
		} else {
			r = open_rail(d, rl, &cfg);
		}
		r2_wipe(cfg.auth_key, sizeof(cfg.auth_key));
		if (r < 0)
			continue;
		rl->ops->listen_port(rl->tp, &rl->port);
		ev.data.u32 = (uint32_t)rs->n;
		epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rl->ops->event_fd(rl->tp), &ev);
		if (rl->rdma_dev[0])
			log_info("rail %d: %s %s:%u (verbs on %s, %d QPs per peer)", rs->n, ifname,
				 inet_ntoa(rl->addr), rl->port, rl->rdma_dev,
				 cfg.ib_qps ? cfg.ib_qps : cfg.streams);
		else
			log_info("rail %d: %s %s:%u (%s, %d streams per peer%s)", rs->n, ifname,
				 inet_ntoa(rl->addr), rl->port, rl->ops->name, cfg.streams,
				 cfg.lane ? " and a latency lane" : "");
		rs->n++;
	}
	r2_wipe(auth.auth_key, sizeof(auth.auth_key));
	slow_start_check(d, rs);
	r2d_bufpools_start(d);
	uv_async_init(d->loop, &rs->async, on_async);
	rs->async.data = rs;
	if (r2_thread_create(&rs->thread, rails_thread, rs) == 0)
		pthread_setname_np(rs->thread, "r2-rails");
	else {
		uv_close((uv_handle_t *)&rs->async, NULL);
		return -EAGAIN;
	}
	rs->started = true;
	atomic_store(&rs->direct_off, false);
	r = r2d_health_start(d);
	if (r < 0)
		log_warn("health: cannot start: %s", strerror(-r));
	return 0;
}

int r2d_rails_start(struct r2d *d)
{
	return rails_start(d, NULL);
}

int r2d_rails_start_on(struct r2d *d, const struct r2_tp_ops *ops)
{
	return ops ? rails_start(d, ops) : -EINVAL;
}

void r2d_rails_quiesce(struct r2d *d)
{
	struct r2_rails *rs = d->rails;
	uint64_t one = 1;

	/* join the rails thread before its uv_async handle is closed: a peer
	 * that drops its connection now must not signal a closed handle */
	if (!rs || !rs->started)
		return;
	direct_stop(rs);
	atomic_store(&rs->stop, true);
	if (write(rs->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
	pthread_join(rs->thread, NULL);
	rs->started = false;
}

/* Rail's completions taken at the stop (detours_settle): how many. */
static int poll_at_stop(struct r2_rails *rs, int rail)
{
	struct r2_tp_cqe cq[32];
	int k = rs->rail[rail].ops->poll(rs->rail[rail].tp, cq, 32);

	for (int i = 0; i < k; i++) {
		if (cq[i].type == R2_TPC_RECV)
			r2d_rails_release(rs->d, rail, cq[i].buf);
		else if (cq[i].type == R2_TPC_SEND && cq[i].ctx == 1)
			rl_ctrl_copy_free(rs, cq[i].buf);
		else if (cq[i].type == R2_TPC_SEND && cq[i].ctx == WARMUP_CTX)
			; /* a warm-up's last message: nothing to free (2 is also
			   * R2_DETOUR_TAG, whose record would be NULL here) */
		else if (r2d_detour_sendc_at_stop(rs->d, &cq[i]))
			;
		else if (cq[i].type == R2_TPC_SEND && rs->d->net_ev)
			/* an ended operation's chunk: freed there */
			rs->d->net_ev->deliver(rs->d, rail, &cq[i]);
	}
	return k > 0 ? k : 0;
}

/* Every rail's, once: how many. */
static int poll_all_at_stop(struct r2_rails *rs)
{
	int got = 0;

	for (int rail = 0; rail < rs->n; rail++)
		got += poll_at_stop(rs, rail);
	return got;
}

/* Forwarded chunks (detour.c) are sent from their receive buffers, and
 * release() hands a buffer to the next receive: their send completions are
 * taken here first (the rails thread is gone), at most 100 ms; then the
 * connections they wait on are dropped, which completes them (failed: the
 * transport reads them no more), for at most 1 s more. Meanwhile received
 * buffers go back, the send completions of ended operations' chunks go to
 * the engine's delivery (which frees them: no communicator is left), and
 * the rest is dropped, as close() would drop it. */
static void detours_settle(struct r2_rails *rs)
{
	uint64_t t0 = r2_now_us();
	bool cut = false;

	while (r2d_detours_unsent(rs->d, false) > 0) {
		uint64_t waited = r2_now_us() - t0;

		if (!cut && waited > 100000) {
			r2d_detours_unsent(rs->d, true);
			cut = true;
		} else if (waited > 1100000) {
			break; /* r2d_detours_free says which, and keeps their buffers */
		}
		if (!poll_all_at_stop(rs))
			usleep(200);
	}
	/* what the cut completed besides them (other chunks queued on those
	 * connections) is taken with the rest by connections_settle */
}

/* The connections go before the transports close: a message still queued
 * then completes (failed) instead of vanishing in close(), and an ended
 * operation's record left to that completion (rl_orphan) is freed by the
 * engine's delivery (no communicator is left). Taken until the rails are
 * quiet for 20 ms, at most 500 ms (tcp completes them on its threads). */
static void connections_settle(struct r2_rails *rs)
{
	int np = atomic_load(&rs->npeers);
	uint64_t t0 = r2_now_us(), quiet = t0;

	for (int rail = 0; rail < rs->n; rail++)
		for (int i = 0; i < np; i++)
			rs->rail[rail].ops->disconnect(rs->rail[rail].tp, rs->peer[i].id);
	for (;;) {
		int got = poll_all_at_stop(rs);
		uint64_t now = r2_now_us();

		if (got)
			quiet = now;
		if (now - quiet >= 20000 || now - t0 >= 500000)
			break;
		if (!got)
			usleep(500);
	}
}

void r2d_rails_stop(struct r2d *d)
{
	struct r2_rails *rs = d->rails;
	uint64_t one = 1;

	if (!rs)
		return;
	direct_stop(rs);
	r2d_health_free(d);
	if (rs->started) {
		atomic_store(&rs->stop, true);
		if (write(rs->wake_fd, &one, sizeof(one)) < 0)
			(void)0;
		pthread_join(rs->thread, NULL);
	}
	detours_settle(rs);
	connections_settle(rs);
	r2d_detours_free(d); /* their receive buffers go back while the transports live */
	if (d->net_ev && d->net_ev->rails_closing)
		d->net_ev->rails_closing(d); /* and the engine's orphans' */
	/* events the loop did not take (a control message that came during the
	 * stop): their receive buffers go back too */
	while (rs->qhead) {
		struct r2_loop_ev *ev = rs->qhead;
		rs->qhead = ev->next;
		if (ev->cqe.type == R2_TPC_RECV)
			r2d_rails_release(d, ev->rail, ev->cqe.buf);
		free(ev);
	}
	rs->qtail = NULL;
	r2d_bufpools_detach(d); /* deregistered while the transports live */
	for (int i = 0; i < rs->n; i++)
		rs->rail[i].ops->close(rs->rail[i].tp);
	/* control messages the transports held, dropped by close() without
	 * their completions (a LEAVE sent during the stop) */
	while (rs->ctrl_copies)
		rl_ctrl_copy_free(rs, rs->ctrl_copies->payload);
	pthread_mutex_destroy(&rs->ctrl_lock);
	r2d_bufpools_free(d);
	r2d_tenants_free(d); /* chunks still queued: their operations are gone */
	close(rs->epfd);
	close(rs->wake_fd);
	pthread_mutex_destroy(&rs->qlock);
	free(rs);
	d->rails = NULL;
}

void r2d_net_set_events(struct r2d *d, const struct r2_net_events *ev)
{
	d->net_ev = ev;
}
