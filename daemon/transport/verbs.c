// SPDX-License-Identifier: MIT
/*
 * The verbs transport provider (BRIEF.md decision 5): RDMA over rdma-core,
 * the same table and contract as tcp.c (read its header comment: connect /
 * accept semantics, who wins when both dial, ERROR reporting rules, SEND
 * completions of queued messages on failure are the same here).
 *
 * Device. open() finds the RDMA device port bound to cfg->ifname (RoCE: a
 * GID table entry of the port has that netdev; IB: the netdev's
 * device/infiniband/ directory), filtered by R2CCL_IB_HCA (NCCL syntax,
 * common/nicfilter.h). -ENODEV if there is none (the daemon uses tcp then).
 * One ibv_context and one protection domain per device, shared by every rail
 * instance on it (a global table, refcounted), with one thread per device
 * reading its async events. GID: RoCE v2 with the rail's IPv4 address first
 * (r2v_gid_choose), R2CCL_IB_GID_INDEX overrides; IB: LID and GID 0.
 *
 * Connections. Side channel: a TCP listener on cfg->addr:cfg->port (so the
 * daemon's address exchange is the same as tcp's). The dialer sends HELLO
 * (struct r2v_cm_msg, 192 bytes: ids, nonce, nqps, QPNs, PSNs, GID, LID,
 * MTU, slot size, max_msg) with its QPs in INIT; the acceptor brings its QPs
 * to RTR/RTS and answers REPLY; the dialer brings its QPs to RTR/RTS, sends
 * READY and reports CONN; the acceptor reports CONN on READY (so it never
 * sends before the dialer's QPs can receive). The side channel socket stays
 * open (keepalive 2 s + 1 s x 3): its EOF fails the connection, which is how
 * a peer daemon's death is seen without traffic. Each connection has
 * cfg->ib_qps RC QPs (default cfg->streams, 2); path MTU the smaller of both
 * ports' (and of the RoCE netdev MTU); timeout / retry_cnt from the config,
 * rnr_retry 7 (a receiver out of buffers slows the sender, never fails it);
 * traffic class and SL from the config.
 *
 * Data path: send/receive. A message is the 56-byte chunk header then the
 * payload, cut into fragments of the receive slot size (default 64 KiB), all
 * sent back to back on one QP (RC keeps their order). Receives come from one
 * shared receive queue (SRQ) per rail of registered slots; a message that fits
 * one slot is handed up in place (zero copy; release() gives the slot back),
 * larger ones are reassembled into a heap buffer. Sends: the payload goes
 * straight from the caller's memory when it lies in a region registered with
 * reg_mem (the proxy pools); otherwise it is copied into registered send
 * slots. Work requests are chained (one ibv_post_send per QP per pass:
 * one doorbell for many messages). post_send() picks the QP with the fewest
 * queued bytes and posts at once when the send queue has room; the rest is
 * posted by the progress thread as completions come back.
 *
 * Progress: one thread per rail polls the CQ. Adaptive: while completions
 * keep coming it busy-polls (checking its other fds every poll_busy_us,
 * default 10 us); after poll_idle_us (default 100 us) without one it arms the
 * completion channel and sleeps in epoll (ibv_get_cq_event).
 *
 * Health: completion errors fail the connection with a classified status
 * (verbs_util: retry exceeded -ETIMEDOUT, RNR -EBUSY, flushed -ECONNABORTED,
 * remote -ECONNREFUSED, local -EIO, fatal -ENODEV). Async events: QP fatal
 * fails that connection; port error fails every connection of the rail
 * (-ENETDOWN); device fatal, -ENODEV. link_state() queries the port.
 * A failed connection's QPs are moved to ERR and destroyed by the progress
 * thread before its queued sends complete with an error (so no DMA can still
 * read a buffer the engine gets back).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "config.h"
#include "log.h"
#include "nicfilter.h"
#include "tp_common.h"
#include "transport.h"
#include "verbs_util.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define HDR_SIZE ((uint32_t)sizeof(struct r2_chunk_hdr))
#define V_DEFAULT_QPS 2
#define V_DEFAULT_TIMEOUT 14    /* 4.096 us << 14 = 67 ms per try */
#define V_DEFAULT_RETRY 7
#define V_DEFAULT_SLOT (64u << 10)
#define V_DEFAULT_RDEPTH 256
#define V_DEFAULT_SDEPTH 64
#define V_DEFAULT_MAX_MSG (64u << 20)
#define V_DEFAULT_MAX_QUEUED (64ull << 20)
#define V_DEFAULT_TIMEOUT_MS 5000u
#define V_POST_BATCH 32
#define V_POLL_BATCH 32
#define V_QP_BUCKETS 1024
#define V_RECV_TAG (1ull << 63)
#define V_HEAP_MAGIC 0x56324842u
#define V_HEAP_HDR 64u

enum { OBJ_WAKE = 1, OBJ_LISTEN, OBJ_SOCK, OBJ_CHAN };
enum { ROLE_DIAL = 1, ROLE_ACCEPT };
enum { S_DIALING = 1, S_WAIT_HELLO, S_WAIT_REPLY, S_WAIT_READY, S_UP };

struct r2_tp;

struct vdev {
	struct vdev *next;
	char name[IBV_SYSFS_NAME_MAX];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int refs;
	int stop_fd;
	pthread_t tid;
	bool started;
	struct r2_tp *tps; /* rails on this device (g_lock) */
};

struct vmsg {
	struct vmsg *next;
	struct r2_chunk_hdr hdr;  /* host order */
	struct r2_chunk_hdr wire; /* little-endian */
	const uint8_t *buf;
	uint32_t len;
	uint32_t lkey;
	bool zc;                  /* payload in registered memory */
	bool hdr_posted;
	uint32_t posted;          /* payload bytes posted */
	uint64_t ctx;
};

struct vrec {
	uint64_t seq;
	struct vmsg *m;
	int slot;  /* send slot, -1 none */
	bool last;
};

struct vpeer;

struct vqp {
	struct vqp *hnext;
	struct r2_tp *tp;
	struct vpeer *peer;
	struct ibv_qp *qp;
	uint32_t qpn, psn;
	int idx;
	atomic_bool fatal;
	uint8_t *hdrs;
	struct ibv_mr *hmr;
	struct vmsg *tq_head, *tq_tail;
	uint64_t queued;
	struct vrec *ring;
	uint32_t depth, r_head, r_cnt;
	uint64_t seq;
	/* reassembly */
	bool rx_active;
	struct r2_chunk_hdr rx_hdr;
	uint8_t *rx_buf;
	uint32_t rx_got;
};

struct vsock {
	int kind;
	struct vsock *next; /* tp->socks */
	int fd;
	int state;
	struct vpeer *peer;
	bool dead;
	uint64_t deadline;
	uint8_t rx[R2V_CM_SIZE];
	uint32_t rx_got;
	uint8_t tx[2 * R2V_CM_SIZE];
	uint32_t tx_len, tx_done;
	bool want_out;
};

struct vpeer {
	struct r2_tp_peer h;  /* first: id, table, list (tp->b.peers) */
	struct vpeer *dnext;  /* tp->dead */
	uint64_t nonce;
	int role;
	bool conn_reported;
	int fail_status;
	struct vsock *sock;
	int nqps;
	uint32_t rslot, max_msg; /* the peer's */
	unsigned rr;
	uint64_t queued;
	struct vqp *qps[R2V_MAX_QPS];
};

struct r2_tp {
	struct r2_tp_base b; /* first: tp_common.h */
	struct r2_tp_config cfg;
	struct vdev *dev;
	struct r2_tp *dnext;
	uint8_t port;
	int link_layer;
	enum ibv_mtu active_mtu;
	uint16_t lid;
	int gid_index;
	uint8_t gid[16];
	int netdev_mtu;
	atomic_bool port_event, dev_fatal, qp_event;
	atomic_int port_err; /* 1: PORT_ERR seen (until ACTIVE) */

	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	int cq_size;
	struct ibv_srq *srq;
	uint32_t slot;
	int rdepth;
	uint8_t *rslab;
	struct ibv_mr *rmr;
	int rslots;
	int *rspare;
	int rspare_n;
	uint8_t *sslab;
	struct ibv_mr *smr;
	int sslots;
	int *sfree;
	int sfree_n;
	int tx_out, tx_cap;

	int lfd, wfd, epfd;
	int listen_kind, wake_kind, chan_kind;
	pthread_t tid;
	bool started;
	atomic_bool stop;

	/* b.lock: peers, QPs, side channel sockets */
	struct vpeer *dead; /* failed peers waiting for the reaper (dnext chain) */
	struct vqp *qbuckets[V_QP_BUCKETS];
	struct vsock *socks;


	pthread_mutex_t pool_lock; /* rspare */

	pthread_mutex_t reg_lock;
	struct vreg *regs;

	/* payload bytes sent straight from memory registered with reg_mem
	 * (zero copy) and copied into the send slots (logged at close) */
	_Atomic uint64_t tx_zc_bytes, tx_copy_bytes;
};

struct vreg {
	struct vreg *next;
	uintptr_t addr;
	size_t len;
	struct ibv_mr *mr;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vdev *g_devs;

/* A configuration value, or its default where the caller left it 0. */
static int or_default(int v, int def)
{
	return v ? v : def;
}

/* ---- heap buffers (reassembled messages) ---- */

static void *heap_get(uint32_t len)
{
	void *p;
	if (posix_memalign(&p, 64, V_HEAP_HDR + (size_t)len))
		return NULL;
	*(uint32_t *)p = V_HEAP_MAGIC;
	return (uint8_t *)p + V_HEAP_HDR;
}

static void heap_put(void *buf)
{
	uint32_t *h = (uint32_t *)((uint8_t *)buf - V_HEAP_HDR);
	if (*h != V_HEAP_MAGIC) {
		log_err("verbs: release of a buffer that is not the transport's (%p)", buf);
		return;
	}
	*h = 0;
	free(h);
}

static void buf_release(struct r2_tp *tp, void *buf)
{
	if (!buf)
		return;
	uint8_t *b = buf;
	if (b >= tp->rslab && b < tp->rslab + (size_t)tp->rslots * tp->slot) {
		int s = (int)((size_t)(b - tp->rslab) / tp->slot);
		pthread_mutex_lock(&tp->pool_lock);
		tp->rspare[tp->rspare_n++] = s;
		pthread_mutex_unlock(&tp->pool_lock);
		return;
	}
	heap_put(buf);
}

/* ---- completions (to the engine: tp_common.c's queue) ---- */

static void cq_release(void *arg, void *buf)
{
	buf_release(arg, buf);
}

static void push_simple(struct r2_tp *tp, int type, int status, struct vpeer *p)
{
	r2_tp_cq_push_simple(&tp->b.cmpl, type, status, p->h.id, (struct r2_tp_conn *)p);
}

static void complete_send(struct r2_tp *tp, struct vqp *q, struct vmsg *m, int status)
{
	struct r2_tp_cqe e = {
		.type = R2_TPC_SEND,
		.status = status,
		.peer = q->peer->h.id,
		.conn = (struct r2_tp_conn *)q->peer,
		.hdr = m->hdr,
		.buf = (void *)m->buf,
		.ctx = m->ctx,
		.stream = q->idx,
	};
	uint64_t sz = HDR_SIZE + (uint64_t)m->len;
	q->queued -= sz;
	q->peer->queued -= sz;
	if (!status) {
		atomic_fetch_add_explicit(&tp->b.ctr.tx_bytes, sz, memory_order_relaxed);
		atomic_fetch_add_explicit(m->zc ? &tp->tx_zc_bytes : &tp->tx_copy_bytes, m->len,
					  memory_order_relaxed);
	}
	r2_tp_cq_push(&tp->b.cmpl, &e);
	free(m);
}

/* ---- devices ---- */

static void *async_main(void *arg)
{
	struct vdev *d = arg;
	struct pollfd pf[2] = { { .fd = d->ctx->async_fd, .events = POLLIN },
				{ .fd = d->stop_fd, .events = POLLIN } };
	for (;;) {
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		struct ibv_async_event ev;
		while (ibv_get_async_event(d->ctx, &ev) == 0) {
			switch (ev.event_type) {
			case IBV_EVENT_QP_FATAL:
			case IBV_EVENT_QP_REQ_ERR:
			case IBV_EVENT_QP_ACCESS_ERR:
			case IBV_EVENT_PATH_MIG_ERR: {
				struct vqp *q = ev.element.qp ? ev.element.qp->qp_context : NULL;
				if (q) {
					atomic_store(&q->fatal, true);
					atomic_store(&q->tp->qp_event, true);
					r2_tp_efd_signal(q->tp->wfd);
				}
				log_warn("verbs %s: async event %s on qp %u", d->name,
					 ibv_event_type_str(ev.event_type),
					 ev.element.qp ? ev.element.qp->qp_num : 0);
				break;
			}
			case IBV_EVENT_PORT_ERR:
			case IBV_EVENT_PORT_ACTIVE:
			case IBV_EVENT_LID_CHANGE:
			case IBV_EVENT_GID_CHANGE:
			case IBV_EVENT_DEVICE_FATAL:
				log_info("verbs %s: async event %s (port %d)", d->name,
					 ibv_event_type_str(ev.event_type), ev.element.port_num);
				pthread_mutex_lock(&g_lock);
				for (struct r2_tp *tp = d->tps; tp; tp = tp->dnext) {
					if (ev.event_type == IBV_EVENT_DEVICE_FATAL) {
						atomic_store(&tp->dev_fatal, true);
					} else if (ev.element.port_num == tp->port) {
						if (ev.event_type == IBV_EVENT_PORT_ERR)
							atomic_store(&tp->port_err, 1);
						else if (ev.event_type == IBV_EVENT_PORT_ACTIVE)
							atomic_store(&tp->port_err, 0);
						atomic_store(&tp->port_event, true);
					} else {
						continue;
					}
					r2_tp_efd_signal(tp->wfd);
				}
				pthread_mutex_unlock(&g_lock);
				break;
			default:
				log_debug("verbs %s: async event %s", d->name,
					  ibv_event_type_str(ev.event_type));
				break;
			}
			ibv_ack_async_event(&ev);
		}
	}
	return NULL;
}

static void dev_free(struct vdev *d)
{
	if (d->started) {
		r2_tp_efd_signal(d->stop_fd);
		pthread_join(d->tid, NULL);
	}
	if (d->stop_fd >= 0)
		close(d->stop_fd);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	free(d);
}

static void dev_put(struct vdev *d)
{
	pthread_mutex_lock(&g_lock);
	if (--d->refs > 0) {
		pthread_mutex_unlock(&g_lock);
		return;
	}
	for (struct vdev **pp = &g_devs; *pp; pp = &(*pp)->next)
		if (*pp == d) {
			*pp = d->next;
			break;
		}
	pthread_mutex_unlock(&g_lock);
	dev_free(d); /* outside g_lock: its async thread takes it */
}

static struct vdev *dev_get(const char *name, int *err)
{
	pthread_mutex_lock(&g_lock);
	for (struct vdev *d = g_devs; d; d = d->next)
		if (!strcmp(d->name, name)) {
			d->refs++;
			pthread_mutex_unlock(&g_lock);
			return d;
		}
	struct vdev *d = calloc(1, sizeof(*d));
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	*err = -ENODEV;
	if (!d || !list)
		goto fail;
	d->stop_fd = -1;
	snprintf(d->name, sizeof(d->name), "%s", name);
	for (int i = 0; i < num; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			d->ctx = ibv_open_device(list[i]);
			break;
		}
	if (!d->ctx)
		goto fail;
	d->pd = ibv_alloc_pd(d->ctx);
	d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!d->pd || d->stop_fd < 0) {
		*err = -ENOMEM;
		goto fail;
	}
	fcntl(d->ctx->async_fd, F_SETFL, fcntl(d->ctx->async_fd, F_GETFL) | O_NONBLOCK);
	if (pthread_create(&d->tid, NULL, async_main, d)) {
		*err = -EAGAIN;
		goto fail;
	}
	d->started = true;
	char tn[16];
	snprintf(tn, sizeof(tn), "r2ibv-%.9s", name);
	pthread_setname_np(d->tid, tn);
	d->refs = 1;
	d->next = g_devs;
	g_devs = d;
	ibv_free_device_list(list);
	pthread_mutex_unlock(&g_lock);
	return d;
fail:
	if (list)
		ibv_free_device_list(list);
	pthread_mutex_unlock(&g_lock);
	if (d)
		dev_free(d); /* never started its thread */
	return NULL;
}

/* ---- discovery ---- */

static int read_sysfs_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static int gid_table(struct ibv_context *ctx, uint8_t port, bool ib, struct r2v_gid_ent *out,
		     int max)
{
	struct ibv_port_attr pa;
	int n = 0;
	if (ibv_query_port(ctx, port, &pa))
		return -EIO;
	for (int i = 0; i < pa.gid_tbl_len && n < max; i++) {
		struct ibv_gid_entry ge;
		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &ge, 0))
			continue; /* empty entry */
		out[n].index = i;
		out[n].type = ge.gid_type == IBV_GID_TYPE_ROCE_V2 ? R2V_GID_ROCE_V2 :
			      ge.gid_type == IBV_GID_TYPE_ROCE_V1 && !ib ? R2V_GID_ROCE_V1 : R2V_GID_IB;
		memcpy(out[n].gid, ge.gid.raw, 16);
		out[n].ndev_ifindex = ge.ndev_ifindex;
		n++;
	}
	return n;
}

static bool sysfs_ib_of_netdev(const char *ifname, const char *dev)
{
	char path[512];
	snprintf(path, sizeof(path), "/sys/class/net/%s/device/infiniband/%s", ifname, dev);
	return access(path, F_OK) == 0;
}

/* Finds the device port for netdev ifname passing filter f. */
static int find_port(const char *ifname, const struct r2_nicfilter *f, char *dev, size_t devlen,
		     int *port_out)
{
	int num = 0, ret = -ENODEV;
	unsigned ifidx = ifname && *ifname ? if_nametoindex(ifname) : 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list)
		return -ENODEV;
	for (int i = 0; i < num && ret; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;
		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da)) {
			ibv_close_device(ctx);
			continue;
		}
		for (uint8_t p = 1; p <= da.phys_port_cnt && ret; p++) {
			struct ibv_port_attr pa;
			if (ibv_query_port(ctx, p, &pa) || !r2_nicfilter_match(f, name, p))
				continue;
			bool ib = pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
			bool hit = false;
			if (ib) {
				hit = ifname && *ifname ? sysfs_ib_of_netdev(ifname, name) : true;
			} else {
				struct r2v_gid_ent ents[64];
				int n = gid_table(ctx, p, false, ents, 64);
				for (int k = 0; k < n && !hit; k++)
					hit = ifidx ? ents[k].ndev_ifindex == ifidx : true;
			}
			if (hit) {
				snprintf(dev, devlen, "%s", name);
				*port_out = p;
				ret = 0;
			}
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return ret;
}

static int parse_filter(const char *hca, struct r2_nicfilter *f)
{
	return r2_nicfilter_parse(hca && *hca ? hca : NULL, f);
}

int r2_verbs_probe(const char *ifname, const char *hca, char *dev, size_t devlen, int *port)
{
	struct r2_nicfilter f;
	char d[IBV_SYSFS_NAME_MAX];
	int p = 0;
	if (parse_filter(hca, &f))
		return -EINVAL;
	int r = find_port(ifname, &f, d, sizeof(d), &p);
	if (r)
		return r;
	if (dev && devlen)
		snprintf(dev, devlen, "%s", d);
	if (port)
		*port = p;
	return 0;
}

static int verbs_probe(const struct r2_tp_config *cfg, struct r2_tp_choice *c)
{
	char d[IBV_SYSFS_NAME_MAX];
	int port = 0;
	int r = r2_verbs_probe(cfg->ifname, cfg->ib_hca, d, sizeof(d), &port);

	if (r == 0) {
		snprintf(c->dev, sizeof(c->dev), "%.40s:%d", d, port);
		snprintf(c->desc, sizeof(c->desc), "%.40s port %d", d, port);
	}
	return r;
}

/* ---- peers, QPs ---- */

static struct vpeer *peer_find(struct r2_tp *tp, uint64_t id)
{
	return (struct vpeer *)r2_tp_peer_find(&tp->b.peers, id);
}

static struct vqp *qp_find(struct r2_tp *tp, uint32_t qpn)
{
	for (struct vqp *q = tp->qbuckets[qpn % V_QP_BUCKETS]; q; q = q->hnext)
		if (q->qpn == qpn)
			return q;
	return NULL;
}

static void qp_unhash(struct r2_tp *tp, struct vqp *q)
{
	for (struct vqp **pp = &tp->qbuckets[q->qpn % V_QP_BUCKETS]; *pp; pp = &(*pp)->hnext)
		if (*pp == q) {
			*pp = q->hnext;
			return;
		}
}

static struct vpeer *peer_new(struct r2_tp *tp, uint64_t id, int role, int nqps, uint64_t nonce)
{
	struct vpeer *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->role = role;
	p->nqps = nqps;
	p->nonce = nonce;
	r2_tp_peer_insert(&tp->b.peers, &p->h, id);
	return p;
}

/* Fails a peer connection (under tp->lock): reports ERROR by tcp's rule and
 * hands it to the progress thread's reaper. */
static void peer_fail(struct r2_tp *tp, struct vpeer *p, int status, bool report)
{
	if (p->h.failed)
		return;
	p->h.failed = true;
	p->fail_status = status;
	if (report && (p->conn_reported || (p->role == ROLE_DIAL && p->h.id > tp->cfg.self_id)))
		push_simple(tp, R2_TPC_ERROR, status, p);
	log_debug("verbs %s: peer %llu failed (%d)", tp->cfg.ifname, (unsigned long long)p->h.id,
		  status);
	/* table and list -> dead list */
	r2_tp_peer_unlink(&tp->b.peers, &p->h);
	p->dnext = tp->dead;
	tp->dead = p;
	if (p->sock)
		p->sock->dead = true;
	r2_tp_efd_signal(tp->wfd);
}

static void peer_fail_hook(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report)
{
	peer_fail(tp, (struct vpeer *)p, status, report);
}

static void qp_destroy(struct r2_tp *tp, struct vqp *q, int status)
{
	if (q->qp) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
		qp_unhash(tp, q);
		if (ibv_destroy_qp(q->qp))
			log_err("verbs %s: ibv_destroy_qp failed", tp->cfg.ifname);
		q->qp = NULL;
	}
	/* no DMA from here: give every message back */
	while (q->r_cnt) {
		struct vrec *r = &q->ring[q->r_head];
		q->r_head = (q->r_head + 1) % q->depth;
		q->r_cnt--;
		tp->tx_out--;
		if (r->slot >= 0)
			tp->sfree[tp->sfree_n++] = r->slot;
		if (r->last)
			complete_send(tp, q, r->m, status);
	}
	while (q->tq_head) {
		struct vmsg *m = q->tq_head;
		q->tq_head = m->next;
		complete_send(tp, q, m, status);
	}
	q->tq_tail = NULL;
	if (q->rx_buf)
		heap_put(q->rx_buf);
	if (q->hmr)
		ibv_dereg_mr(q->hmr);
	free(q->hdrs);
	free(q->ring);
	free(q);
}

/* progress thread, under tp->lock */
static void reap(struct r2_tp *tp)
{
	while (tp->dead) {
		struct vpeer *p = tp->dead;
		tp->dead = p->dnext;
		int st = p->fail_status ? p->fail_status : -ECONNRESET;
		for (int i = 0; i < p->nqps; i++)
			if (p->qps[i])
				qp_destroy(tp, p->qps[i], st);
		if (p->sock) {
			p->sock->peer = NULL;
			p->sock->dead = true;
		}
		free(p);
	}
	for (struct vsock **pp = &tp->socks; *pp;) {
		struct vsock *s = *pp;
		if (!s->dead) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		if (s->peer)
			s->peer->sock = NULL;
		epoll_ctl(tp->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		shutdown(s->fd, SHUT_RDWR);
		close(s->fd);
		free(s);
	}
}

static struct vqp *qp_create(struct r2_tp *tp, struct vpeer *p, int idx)
{
	struct vqp *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->tp = tp;
	q->peer = p;
	q->idx = idx;
	q->depth = (uint32_t)tp->cfg.ib_send_depth;
	q->ring = calloc(q->depth, sizeof(*q->ring));
	if (posix_memalign((void **)&q->hdrs, 64, (size_t)q->depth * 64))
		q->hdrs = NULL;
	if (!q->ring || !q->hdrs)
		goto fail;
	q->hmr = ibv_reg_mr(tp->dev->pd, q->hdrs, (size_t)q->depth * 64, IBV_ACCESS_LOCAL_WRITE);
	if (!q->hmr)
		goto fail;
	struct ibv_qp_init_attr ia = {
		.qp_context = q,
		.send_cq = tp->cq,
		.recv_cq = tp->cq,
		.srq = tp->srq,
		.cap = { .max_send_wr = q->depth, .max_send_sge = 2, .max_recv_wr = 0,
			 .max_recv_sge = 1, .max_inline_data = 0 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	q->qp = ibv_create_qp(tp->dev->pd, &ia);
	if (!q->qp)
		goto fail;
	q->qpn = q->qp->qp_num;
	q->psn = (uint32_t)(r2_tp_now_ns() ^ ((uint64_t)q->qpn << 8) ^ (uint64_t)rand()) & 0xffffff;
	struct ibv_qp_attr a;
	int mask = r2v_qp_init_attr(&a, tp->port, IBV_ACCESS_LOCAL_WRITE);
	if (ibv_modify_qp(q->qp, &a, mask)) {
		log_err("verbs %s: QP to INIT: %s", tp->cfg.ifname, strerror(errno));
		goto fail;
	}
	unsigned b = q->qpn % V_QP_BUCKETS;
	q->hnext = tp->qbuckets[b];
	tp->qbuckets[b] = q;
	return q;
fail:
	if (q->qp)
		ibv_destroy_qp(q->qp);
	if (q->hmr)
		ibv_dereg_mr(q->hmr);
	free(q->hdrs);
	free(q->ring);
	free(q);
	return NULL;
}

static int peer_make_qps(struct r2_tp *tp, struct vpeer *p)
{
	for (int i = 0; i < p->nqps; i++) {
		p->qps[i] = qp_create(tp, p, i);
		if (!p->qps[i])
			return -ENOMEM;
	}
	return 0;
}

static int peer_qps_rts(struct r2_tp *tp, struct vpeer *p, const struct r2v_cm_msg *rm)
{
	bool roce = tp->link_layer != IBV_LINK_LAYER_INFINIBAND;
	for (int i = 0; i < p->nqps; i++) {
		struct r2v_rtr_params rp = {
			.dest_qpn = rm->qpn[i],
			.rq_psn = rm->psn[i],
			.mtu = r2v_mtu_path(tp->active_mtu, (enum ibv_mtu)rm->mtu,
					    roce ? tp->netdev_mtu : 0),
			.port = tp->port,
			.global = roce || rm->lid == 0,
			.sgid_index = tp->gid_index,
			.dlid = rm->lid,
			.traffic_class = (uint8_t)tp->cfg.ib_tc,
			.sl = (uint8_t)tp->cfg.ib_sl,
			.hop_limit = 64,
		};
		memcpy(rp.dgid, rm->gid, 16);
		struct ibv_qp_attr a;
		int mask = r2v_qp_rtr_attr(&a, &rp);
		if (ibv_modify_qp(p->qps[i]->qp, &a, mask)) {
			int e = errno;
			log_err("verbs %s: QP to RTR: %s", tp->cfg.ifname, strerror(e));
			return -e;
		}
		mask = r2v_qp_rts_attr(&a, p->qps[i]->psn, tp->cfg.ib_timeout, tp->cfg.ib_retry_cnt, 7);
		if (ibv_modify_qp(p->qps[i]->qp, &a, mask)) {
			int e = errno;
			log_err("verbs %s: QP to RTS: %s", tp->cfg.ifname, strerror(e));
			return -e;
		}
	}
	p->rslot = rm->slot_size;
	p->max_msg = rm->max_msg;
	return 0;
}

/* ---- send path (under tp->lock) ---- */

static uint32_t lkey_of(struct r2_tp *tp, const void *buf, uint32_t len, bool *zc)
{
	uintptr_t a = (uintptr_t)buf;
	*zc = false;
	pthread_mutex_lock(&tp->reg_lock);
	for (struct vreg *r = tp->regs; r; r = r->next)
		if (a >= r->addr && a + len <= r->addr + r->len) {
			*zc = true;
			uint32_t k = r->mr->lkey;
			pthread_mutex_unlock(&tp->reg_lock);
			return k;
		}
	pthread_mutex_unlock(&tp->reg_lock);
	return 0;
}

static void qp_kick(struct r2_tp *tp, struct vqp *q)
{
	struct ibv_send_wr wrs[V_POST_BATCH];
	struct ibv_sge sges[V_POST_BATCH][2];
	int n = 0;
	struct vpeer *p = q->peer;

	if (!q->qp || p->h.failed || !p->conn_reported)
		return;
	uint32_t fs = p->rslot < tp->slot ? p->rslot : tp->slot;
	while (q->tq_head && q->r_cnt < q->depth && n < V_POST_BATCH && tp->tx_out < tp->tx_cap) {
		struct vmsg *m = q->tq_head;
		struct ibv_sge *sg = sges[n];
		int ns = 0, slot = -1;
		uint32_t part;
		if (!m->hdr_posted) {
			part = m->len < fs - HDR_SIZE ? m->len : fs - HDR_SIZE;
			if (m->zc || part == 0) {
				uint8_t *h = q->hdrs + (q->seq % q->depth) * 64;
				memcpy(h, &m->wire, HDR_SIZE);
				sg[ns++] = (struct ibv_sge){ (uintptr_t)h, HDR_SIZE, q->hmr->lkey };
				if (part)
					sg[ns++] = (struct ibv_sge){ (uintptr_t)m->buf, part, m->lkey };
			} else {
				if (!tp->sfree_n)
					break;
				slot = tp->sfree[--tp->sfree_n];
				uint8_t *s = tp->sslab + (size_t)slot * tp->slot;
				memcpy(s, &m->wire, HDR_SIZE);
				memcpy(s + HDR_SIZE, m->buf, part);
				sg[ns++] = (struct ibv_sge){ (uintptr_t)s, HDR_SIZE + part, tp->smr->lkey };
			}
			m->hdr_posted = true;
		} else {
			uint32_t left = m->len - m->posted;
			part = left < fs ? left : fs;
			if (m->zc) {
				sg[ns++] = (struct ibv_sge){ (uintptr_t)(m->buf + m->posted), part, m->lkey };
			} else {
				if (!tp->sfree_n)
					break;
				slot = tp->sfree[--tp->sfree_n];
				uint8_t *s = tp->sslab + (size_t)slot * tp->slot;
				memcpy(s, m->buf + m->posted, part);
				sg[ns++] = (struct ibv_sge){ (uintptr_t)s, part, tp->smr->lkey };
			}
		}
		m->posted += part;
		bool last = m->posted == m->len;
		struct vrec *r = &q->ring[(q->r_head + q->r_cnt) % q->depth];
		r->seq = q->seq;
		r->m = m;
		r->slot = slot;
		r->last = last;
		q->r_cnt++;
		tp->tx_out++;
		wrs[n] = (struct ibv_send_wr){
			.wr_id = q->seq++,
			.sg_list = sg,
			.num_sge = ns,
			.opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED,
		};
		if (n)
			wrs[n - 1].next = &wrs[n];
		n++;
		if (last) {
			q->tq_head = m->next;
			if (!q->tq_head)
				q->tq_tail = NULL;
		}
	}
	if (!n)
		return;
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(q->qp, wrs, &bad);
	if (r) {
		log_err("verbs %s: ibv_post_send: %s", tp->cfg.ifname, strerror(r));
		peer_fail(tp, p, -EIO, true);
	}
}

static void kick_all(struct r2_tp *tp)
{
	for (struct vpeer *p = (struct vpeer *)tp->b.peers.all; p; p = (struct vpeer *)p->h.anext)
		for (int i = 0; i < p->nqps; i++)
			if (p->qps[i] && p->qps[i]->tq_head)
				qp_kick(tp, p->qps[i]);
}

/* ---- receive path (progress thread, under tp->lock) ---- */

static void deliver(struct r2_tp *tp, struct vqp *q, const struct r2_chunk_hdr *h, void *buf)
{
	struct r2_tp_cqe e = {
		.type = R2_TPC_RECV,
		.peer = q->peer->h.id,
		.conn = (struct r2_tp_conn *)q->peer,
		.hdr = *h,
		.buf = buf,
		.stream = q->idx,
	};
	atomic_fetch_add_explicit(&tp->b.ctr.rx_bytes, HDR_SIZE + (uint64_t)h->len, memory_order_relaxed);
	r2_tp_cq_push(&tp->b.cmpl, &e);
}

/* Returns true when the slot was handed up (not to be reposted), or sets
 * *err on a protocol error. */
static bool rx_frag(struct r2_tp *tp, struct vqp *q, int slot, uint32_t len, int *repl, int *err)
{
	uint8_t *d = tp->rslab + (size_t)slot * tp->slot;
	*err = 0;
	if (!q->rx_active) {
		struct r2_chunk_hdr h;
		if (len < HDR_SIZE) {
			*err = -EPROTO;
			return false;
		}
		memcpy(&h, d, HDR_SIZE);
		r2_tp_hdr_le(&h);
		if (h.magic != R2_CHUNK_MAGIC || h.len > tp->cfg.max_msg) {
			*err = -EPROTO;
			return false;
		}
		uint32_t part = len - HDR_SIZE;
		if (part > h.len) {
			*err = -EPROTO;
			return false;
		}
		if (part == h.len) {
			if (!h.len) {
				deliver(tp, q, &h, NULL);
				return false;
			}
			int s = -1;
			pthread_mutex_lock(&tp->pool_lock);
			if (tp->rspare_n)
				s = tp->rspare[--tp->rspare_n];
			pthread_mutex_unlock(&tp->pool_lock);
			if (s >= 0) {
				*repl = s;
				deliver(tp, q, &h, d + HDR_SIZE);
				return true;
			}
			void *b = heap_get(h.len);
			if (!b) {
				*err = -ENOMEM;
				return false;
			}
			memcpy(b, d + HDR_SIZE, h.len);
			deliver(tp, q, &h, b);
			return false;
		}
		q->rx_buf = heap_get(h.len);
		if (!q->rx_buf) {
			*err = -ENOMEM;
			return false;
		}
		memcpy(q->rx_buf, d + HDR_SIZE, part);
		q->rx_hdr = h;
		q->rx_got = part;
		q->rx_active = true;
		return false;
	}
	if (len > q->rx_hdr.len - q->rx_got) {
		*err = -EPROTO;
		return false;
	}
	memcpy(q->rx_buf + q->rx_got, d, len);
	q->rx_got += len;
	if (q->rx_got == q->rx_hdr.len) {
		q->rx_active = false;
		deliver(tp, q, &q->rx_hdr, q->rx_buf);
		q->rx_buf = NULL;
	}
	return false;
}

static void post_recvs(struct r2_tp *tp, const int *slots, int n)
{
	struct ibv_recv_wr wrs[V_POLL_BATCH];
	struct ibv_sge sges[V_POLL_BATCH];
	while (n > 0) {
		int k = n < V_POLL_BATCH ? n : V_POLL_BATCH;
		for (int i = 0; i < k; i++) {
			sges[i] = (struct ibv_sge){ (uintptr_t)(tp->rslab + (size_t)slots[i] * tp->slot),
						    tp->slot, tp->rmr->lkey };
			wrs[i] = (struct ibv_recv_wr){ .wr_id = V_RECV_TAG | (uint64_t)slots[i],
						       .sg_list = &sges[i], .num_sge = 1,
						       .next = i + 1 < k ? &wrs[i + 1] : NULL };
		}
		struct ibv_recv_wr *bad;
		int r = ibv_post_srq_recv(tp->srq, wrs, &bad);
		if (r)
			log_err("verbs %s: ibv_post_srq_recv: %s", tp->cfg.ifname, strerror(r));
		slots += k;
		n -= k;
	}
}

static void fail_qp_status(struct r2_tp *tp, struct vqp *q, const struct ibv_wc *wc)
{
	int st = r2v_wc_errno(wc->status);
	log_warn("verbs %s: peer %llu qp %u: completion error %s (%s)", tp->cfg.ifname,
		 (unsigned long long)q->peer->h.id, q->qpn, ibv_wc_status_str(wc->status),
		 r2v_wc_class_name(r2v_wc_classify(wc->status)));
	peer_fail(tp, q->peer, st, true);
}

/* Polls the CQ until empty (at most a few batches); returns completions seen. */
static int drain_cq(struct r2_tp *tp)
{
	struct ibv_wc wc[V_POLL_BATCH];
	int total = 0;
	for (int round = 0; round < 8; round++) {
		int n = ibv_poll_cq(tp->cq, V_POLL_BATCH, wc);
		if (n <= 0)
			break;
		int repost[V_POLL_BATCH], nrep = 0;
		struct vqp *kick[V_POLL_BATCH];
		int nkick = 0;
		bool was_capped;
		pthread_mutex_lock(&tp->b.lock);
		was_capped = tp->tx_out >= tp->tx_cap;
		for (int i = 0; i < n; i++) {
			struct vqp *q = qp_find(tp, wc[i].qp_num);
			if (q && q->peer->h.failed)
				q = NULL;
			if (wc[i].wr_id & V_RECV_TAG) {
				int slot = (int)(wc[i].wr_id & ~V_RECV_TAG);
				int repl = -1, err = 0;
				if (slot < 0 || slot >= tp->rslots)
					continue;
				if (wc[i].status != IBV_WC_SUCCESS) {
					if (q)
						fail_qp_status(tp, q, &wc[i]);
					repost[nrep++] = slot;
					continue;
				}
				if (!q) {
					repost[nrep++] = slot;
					continue;
				}
				if (rx_frag(tp, q, slot, wc[i].byte_len, &repl, &err))
					repost[nrep++] = repl;
				else
					repost[nrep++] = slot;
				if (err) {
					log_warn("verbs %s: peer %llu: bad message (%d)", tp->cfg.ifname,
						 (unsigned long long)q->peer->h.id, err);
					peer_fail(tp, q->peer, err, true);
				}
				continue;
			}
			if (!q)
				continue; /* a flushed WR of a connection already torn down */
			if (wc[i].status != IBV_WC_SUCCESS) {
				fail_qp_status(tp, q, &wc[i]);
				continue;
			}
			if (!q->r_cnt || q->ring[q->r_head].seq != wc[i].wr_id) {
				log_err("verbs %s: send completion out of order", tp->cfg.ifname);
				peer_fail(tp, q->peer, -EPROTO, true);
				continue;
			}
			struct vrec *r = &q->ring[q->r_head];
			q->r_head = (q->r_head + 1) % q->depth;
			q->r_cnt--;
			tp->tx_out--;
			if (r->slot >= 0)
				tp->sfree[tp->sfree_n++] = r->slot;
			if (r->last)
				complete_send(tp, q, r->m, 0);
			if (q->tq_head) {
				int k;
				for (k = 0; k < nkick && kick[k] != q; k++)
					;
				if (k == nkick)
					kick[nkick++] = q;
			}
		}
		if (nrep)
			post_recvs(tp, repost, nrep);
		for (int k = 0; k < nkick; k++)
			if (!kick[k]->peer->h.failed)
				qp_kick(tp, kick[k]);
		if (was_capped)
			kick_all(tp);
		pthread_mutex_unlock(&tp->b.lock);
		total += n;
		if (n < V_POLL_BATCH)
			break;
	}
	return total;
}

/* ---- side channel (progress thread, under tp->lock) ---- */

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

static struct vsock *sock_new(struct r2_tp *tp, int fd, int state, uint32_t events)
{
	struct vsock *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->kind = OBJ_SOCK;
	s->fd = fd;
	s->state = state;
	s->deadline = r2_tp_now_ns() + 2ull * tp->cfg.user_timeout_ms * 1000000ull;
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
	memcpy(m->gid, tp->gid, 16);
	for (int i = 0; i < p->nqps && type != R2V_CM_READY; i++) {
		m->qpn[i] = p->qps[i]->qpn;
		m->psn[i] = p->qps[i]->psn;
	}
}

static void conn_up(struct r2_tp *tp, struct vpeer *p)
{
	p->sock->state = S_UP;
	p->conn_reported = true;
	push_simple(tp, R2_TPC_CONN, 0, p);
	log_debug("verbs %s: peer %llu connected (%d QPs)", tp->cfg.ifname,
		  (unsigned long long)p->h.id, p->nqps);
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
	case S_WAIT_REPLY:
		if (m.type != R2V_CM_REPLY || m.self_id != p->h.id || m.nonce != p->nonce ||
		    m.nqps != p->nqps)
			return -EPROTO;
		r = peer_qps_rts(tp, p, &m);
		if (r)
			return r;
		fill_cm(tp, p, &m, R2V_CM_READY);
		r = sock_send_msg(tp, s, &m);
		if (r)
			return r;
		conn_up(tp, p);
		return 0;
	case S_WAIT_READY:
		if (m.type != R2V_CM_READY || m.self_id != p->h.id || m.nonce != p->nonce)
			return -EPROTO;
		conn_up(tp, p);
		return 0;
	case S_WAIT_HELLO:
		break;
	default:
		return -EPROTO;
	}
	/* acceptor: a HELLO */
	if (m.type != R2V_CM_HELLO)
		return -EPROTO;
	p = peer_find(tp, m.self_id);
	if (p && p->role == ROLE_DIAL) {
		/* Both sides dialed: the lower id's connection wins. */
		if (m.self_id > tp->cfg.self_id)
			return -EPROTO; /* ours wins; it drops its own quietly */
		peer_fail(tp, p, -ECONNABORTED, false);
		p = NULL;
	}
	if (p) /* the peer reconnected: the old connection is gone */
		peer_fail(tp, p, -ECONNRESET, true);
	p = peer_new(tp, m.self_id, ROLE_ACCEPT, m.nqps, m.nonce);
	if (!p)
		return -ENOMEM;
	p->sock = s;
	s->peer = p;
	r = peer_make_qps(tp, p);
	if (!r)
		r = peer_qps_rts(tp, p, &m);
	if (r) {
		peer_fail(tp, p, r, false);
		return r;
	}
	struct r2v_cm_msg rep;
	fill_cm(tp, p, &rep, R2V_CM_REPLY);
	s->state = S_WAIT_READY;
	return sock_send_msg(tp, s, &rep);
}

static void sock_fail(struct r2_tp *tp, struct vsock *s, int status)
{
	if (s->peer)
		peer_fail(tp, s->peer, status, true);
	s->dead = true;
}

static void on_sock(struct r2_tp *tp, struct vsock *s, uint32_t ev)
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
			sock_fail(tp, s, -err);
			return;
		}
		struct vpeer *p = s->peer;
		r = peer_make_qps(tp, p);
		if (r) {
			sock_fail(tp, s, r);
			return;
		}
		struct r2v_cm_msg m;
		fill_cm(tp, p, &m, R2V_CM_HELLO);
		s->state = S_WAIT_REPLY;
		s->want_out = true; /* armed since connect; the flush disarms */
		r = sock_send_msg(tp, s, &m);
		if (r)
			sock_fail(tp, s, r);
		return;
	}
	if (ev & EPOLLOUT) {
		r = sock_flush(tp, s);
		if (r) {
			sock_fail(tp, s, r);
			return;
		}
	}
	if (!(ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
		return;
	for (;;) {
		ssize_t n = recv(s->fd, s->rx + s->rx_got, R2V_CM_SIZE - s->rx_got, 0);
		if (n == 0) {
			sock_fail(tp, s, -ECONNRESET);
			return;
		}
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR)
				continue;
			sock_fail(tp, s, -errno);
			return;
		}
		if (s->state == S_UP) {
			sock_fail(tp, s, -EPROTO); /* nothing is expected after READY */
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
				sock_fail(tp, s, -EPROTONOSUPPORT);
				return;
			}
		}
		if (s->rx_got == R2V_CM_SIZE) {
			r = sock_msg(tp, s);
			if (r) {
				log_debug("verbs %s: side channel: %d", tp->cfg.ifname, r);
				sock_fail(tp, s, r);
				return;
			}
		}
	}
}

static void on_listen(struct r2_tp *tp)
{
	for (;;) {
		int fd = accept4(tp->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		sock_opts(tp, fd);
		if (!sock_new(tp, fd, S_WAIT_HELLO, EPOLLIN))
			close(fd);
	}
}

static void tick(struct r2_tp *tp)
{
	uint64_t t = r2_tp_now_ns();
	for (struct vsock *s = tp->socks; s; s = s->next)
		if (!s->dead && s->state != S_UP && t > s->deadline)
			sock_fail(tp, s, -ETIMEDOUT);
	/* async events */
	if (atomic_exchange(&tp->qp_event, false)) {
		for (struct vpeer *p = (struct vpeer *)tp->b.peers.all, *next; p; p = next) {
			next = (struct vpeer *)p->h.anext;
			for (int i = 0; i < p->nqps; i++)
				if (p->qps[i] && atomic_load(&p->qps[i]->fatal)) {
					peer_fail(tp, p, -EIO, true);
					break;
				}
		}
	}
	bool fatal = atomic_load(&tp->dev_fatal);
	if (atomic_exchange(&tp->port_event, false) || fatal) {
		int st = fatal ? -ENODEV : atomic_load(&tp->port_err) ? -ENETDOWN : 0;
		if (st)
			while (tp->b.peers.all)
				peer_fail(tp, (struct vpeer *)tp->b.peers.all, st, true);
	}
}

static void *progress_main(void *arg)
{
	struct r2_tp *tp = arg;
	struct epoll_event evs[32];
	uint64_t busy_ns = (uint64_t)tp->cfg.poll_busy_us * 1000, idle_ns = (uint64_t)tp->cfg.poll_idle_us * 1000;
	uint64_t last_busy = 0, last_ep = 0, last_tick = 0;
	bool armed = false;

	while (!atomic_load(&tp->stop)) {
		if (drain_cq(tp) > 0)
			last_busy = r2_tp_now_ns();
		uint64_t t = r2_tp_now_ns();
		int timeout = 100;
		if (t - last_busy < idle_ns) {
			if (t - last_ep < busy_ns)
				continue; /* busy poll */
			timeout = 0;
		} else if (!armed) {
			ibv_req_notify_cq(tp->cq, 0);
			armed = true;
			if (drain_cq(tp) > 0) { /* raced with the arming */
				last_busy = r2_tp_now_ns();
				continue;
			}
		}
		int n = epoll_wait(tp->epfd, evs, 32, timeout);
		last_ep = r2_tp_now_ns();
		pthread_mutex_lock(&tp->b.lock);
		for (int i = 0; i < n; i++) {
			int *kind = evs[i].data.ptr;
			if (*kind == OBJ_WAKE) {
				r2_tp_efd_drain(tp->wfd);
			} else if (*kind == OBJ_CHAN) {
				struct ibv_cq *cq;
				void *cctx;
				while (ibv_get_cq_event(tp->ch, &cq, &cctx) == 0) {
					ibv_ack_cq_events(cq, 1);
					armed = false;
				}
				last_busy = last_ep;
			} else if (*kind == OBJ_LISTEN) {
				on_listen(tp);
			} else if (*kind == OBJ_SOCK) {
				on_sock(tp, (struct vsock *)evs[i].data.ptr, evs[i].events);
			}
		}
		if (last_ep - last_tick > 100000000ull || tp->dead || atomic_load(&tp->qp_event) ||
		    atomic_load(&tp->port_event) || atomic_load(&tp->dev_fatal)) {
			tick(tp);
			last_tick = last_ep;
		}
		if (tp->dead || tp->socks) {
			reap(tp);
		}
		pthread_mutex_unlock(&tp->b.lock);
		/* flushed completions of destroyed QPs leave the CQ before any
		 * new QP can reuse their numbers */
		drain_cq(tp);
	}
	return NULL;
}

/* ---- operations ---- */

static void verbs_close(struct r2_tp *tp);

static int verbs_open(const struct r2_tp_config *cfg, struct r2_tp **out)
{
	struct r2_tp *tp;
	int ret;
	char devname[IBV_SYSFS_NAME_MAX];
	int port = 0;

	ret = r2_tp_alloc(cfg, out, sizeof(*tp), &tp);
	if (ret < 0)
		return ret;
	tp->cfg = *cfg;
	struct r2_tp_config *c = &tp->cfg;
	c->ifname[sizeof(c->ifname) - 1] = 0;
	c->ib_hca[sizeof(c->ib_hca) - 1] = 0;
	c->ib_qps = or_default(c->ib_qps, c->streams > 0 ? c->streams : V_DEFAULT_QPS);
	if (c->ib_qps < 1)
		c->ib_qps = 1;
	if (c->ib_qps > R2V_MAX_QPS)
		c->ib_qps = R2V_MAX_QPS;
	c->ib_timeout = or_default(c->ib_timeout, V_DEFAULT_TIMEOUT);
	c->ib_retry_cnt = or_default(c->ib_retry_cnt, V_DEFAULT_RETRY);
	c->ib_slot_size = (uint32_t)or_default((int)c->ib_slot_size, V_DEFAULT_SLOT);
	if (c->ib_slot_size < 4096)
		c->ib_slot_size = 4096;
	if (c->ib_slot_size > (16u << 20))
		c->ib_slot_size = 16u << 20;
	c->ib_slot_size = (c->ib_slot_size + 63) & ~63u;
	c->ib_recv_depth = or_default(c->ib_recv_depth, V_DEFAULT_RDEPTH);
	if (c->ib_recv_depth < 16)
		c->ib_recv_depth = 16;
	c->ib_send_depth = or_default(c->ib_send_depth, V_DEFAULT_SDEPTH);
	if (c->ib_send_depth < 4)
		c->ib_send_depth = 4;
	if (!c->poll_busy_us)
		c->poll_busy_us = 10;
	if (!c->poll_idle_us)
		c->poll_idle_us = 100;
	if (!c->max_msg)
		c->max_msg = V_DEFAULT_MAX_MSG;
	if (!c->user_timeout_ms)
		c->user_timeout_ms = V_DEFAULT_TIMEOUT_MS;
	if (!c->max_queued)
		c->max_queued = V_DEFAULT_MAX_QUEUED;
	tp->slot = c->ib_slot_size;
	tp->rdepth = c->ib_recv_depth;
	tp->lfd = tp->wfd = tp->epfd = -1;
	tp->listen_kind = OBJ_LISTEN;
	tp->wake_kind = OBJ_WAKE;
	tp->chan_kind = OBJ_CHAN;
	ret = r2_tp_base_init(&tp->b, "verbs", cq_release, tp, peer_fail_hook);
	if (ret < 0)
		goto fail;
	pthread_mutex_init(&tp->pool_lock, NULL);
	pthread_mutex_init(&tp->reg_lock, NULL);

	struct r2_nicfilter f;
	if (parse_filter(c->ib_hca, &f)) {
		log_err("verbs: bad R2CCL_IB_HCA filter");
		ret = -EINVAL;
		goto fail;
	}
	ret = find_port(c->ifname, &f, devname, sizeof(devname), &port);
	if (ret) {
		log_debug("verbs: no RDMA device port for %s", c->ifname);
		goto fail;
	}
	tp->dev = dev_get(devname, &ret);
	if (!tp->dev)
		goto fail;
	tp->port = (uint8_t)port;
	struct ibv_port_attr pa;
	if (ibv_query_port(tp->dev->ctx, tp->port, &pa)) {
		ret = -EIO;
		goto fail;
	}
	tp->link_layer = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? IBV_LINK_LAYER_INFINIBAND :
								      IBV_LINK_LAYER_ETHERNET;
	tp->active_mtu = r2v_mtu_valid(pa.active_mtu) ? pa.active_mtu : IBV_MTU_1024;
	tp->lid = pa.lid;
	bool ib = tp->link_layer == IBV_LINK_LAYER_INFINIBAND;
	struct r2v_gid_ent ents[256];
	int ng = gid_table(tp->dev->ctx, tp->port, ib, ents, 256);
	tp->gid_index = c->ib_gid_fixed ? c->ib_gid_index : r2v_gid_choose(ents, ng, c->addr.s_addr, ib);
	if (tp->gid_index < 0 && ib)
		tp->gid_index = 0;
	if (tp->gid_index < 0) {
		log_err("verbs %s: %s port %d has no GID for %s", c->ifname, devname, port,
			inet_ntoa(c->addr));
		ret = -EADDRNOTAVAIL;
		goto fail;
	}
	union ibv_gid g;
	static const uint8_t zero_gid[16];
	if (tp->gid_index >= pa.gid_tbl_len || ibv_query_gid(tp->dev->ctx, tp->port, tp->gid_index, &g)) {
		log_err("verbs %s: %s port %d has no GID index %d (table of %d)", c->ifname, devname,
			port, tp->gid_index, pa.gid_tbl_len);
		ret = -EINVAL;
		goto fail;
	}
	/* an unused entry reads as zeros (rxe answers any index): no address */
	if (!memcmp(g.raw, zero_gid, 16)) {
		log_err("verbs %s: %s port %d GID[%d] is empty", c->ifname, devname, port,
			tp->gid_index);
		ret = -EADDRNOTAVAIL;
		goto fail;
	}
	memcpy(tp->gid, g.raw, 16);
	char mb[32], path[256];
	snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", c->ifname);
	tp->netdev_mtu = read_sysfs_line(path, mb, sizeof(mb)) == 0 ? atoi(mb) : 0;

	struct ibv_device_attr da;
	if (ibv_query_device(tp->dev->ctx, &da)) {
		ret = -EIO;
		goto fail;
	}
	if (tp->rdepth > da.max_srq_wr)
		tp->rdepth = da.max_srq_wr;
	if (c->ib_send_depth > da.max_qp_wr)
		c->ib_send_depth = da.max_qp_wr;
	tp->cq_size = da.max_cqe < 16384 ? da.max_cqe : 16384;
	tp->tx_cap = tp->cq_size - tp->rdepth - 64;
	if (tp->tx_cap < 64) {
		ret = -ENOMEM;
		goto fail;
	}
	tp->ch = ibv_create_comp_channel(tp->dev->ctx);
	if (!tp->ch) {
		ret = errno ? -errno : -ENOMEM;
		goto fail;
	}
	fcntl(tp->ch->fd, F_SETFL, fcntl(tp->ch->fd, F_GETFL) | O_NONBLOCK);
	tp->cq = ibv_create_cq(tp->dev->ctx, tp->cq_size, tp, tp->ch, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = (uint32_t)tp->rdepth, .max_sge = 1 } };
	tp->srq = tp->cq ? ibv_create_srq(tp->dev->pd, &sa) : NULL;
	if (!tp->cq || !tp->srq) {
		log_err("verbs %s: CQ/SRQ creation failed: %s", c->ifname, strerror(errno));
		ret = -ENOMEM;
		goto fail;
	}
	/* receive slab: rdepth posted + rdepth spare (handed up in place) */
	tp->rslots = 2 * tp->rdepth;
	tp->sslots = 2 * c->ib_send_depth;
	if (posix_memalign((void **)&tp->rslab, 4096, (size_t)tp->rslots * tp->slot))
		tp->rslab = NULL;
	if (posix_memalign((void **)&tp->sslab, 4096, (size_t)tp->sslots * tp->slot))
		tp->sslab = NULL;
	tp->rspare = calloc((size_t)tp->rslots, sizeof(int));
	tp->sfree = calloc((size_t)tp->sslots, sizeof(int));
	if (!tp->rslab || !tp->sslab || !tp->rspare || !tp->sfree) {
		ret = -ENOMEM;
		goto fail;
	}
	tp->rmr = ibv_reg_mr(tp->dev->pd, tp->rslab, (size_t)tp->rslots * tp->slot,
			     IBV_ACCESS_LOCAL_WRITE);
	tp->smr = ibv_reg_mr(tp->dev->pd, tp->sslab, (size_t)tp->sslots * tp->slot,
			     IBV_ACCESS_LOCAL_WRITE);
	if (!tp->rmr || !tp->smr) {
		log_err("verbs %s: ibv_reg_mr: %s", c->ifname, strerror(errno));
		ret = -ENOMEM;
		goto fail;
	}
	for (int i = 0; i < tp->sslots; i++)
		tp->sfree[tp->sfree_n++] = i;
	for (int i = tp->rdepth; i < tp->rslots; i++)
		tp->rspare[tp->rspare_n++] = i;
	{
		int *init = malloc((size_t)tp->rdepth * sizeof(int));
		if (!init) {
			ret = -ENOMEM;
			goto fail;
		}
		for (int i = 0; i < tp->rdepth; i++)
			init[i] = i;
		post_recvs(tp, init, tp->rdepth);
		free(init);
	}

	tp->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	tp->epfd = epoll_create1(EPOLL_CLOEXEC);
	tp->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tp->wfd < 0 || tp->epfd < 0 || tp->lfd < 0) {
		ret = -errno;
		goto fail;
	}
	int one = 1;
	setsockopt(tp->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = c->addr, .sin_port = htons(c->port) };
	socklen_t sl = sizeof(sin);
	if (bind(tp->lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(tp->lfd, SOMAXCONN) < 0 ||
	    getsockname(tp->lfd, (struct sockaddr *)&sin, &sl) < 0) {
		ret = -errno;
		goto fail;
	}
	tp->b.port = ntohs(sin.sin_port);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &tp->wake_kind };
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->wfd, &ev);
	ev.data.ptr = &tp->listen_kind;
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->lfd, &ev);
	ev.data.ptr = &tp->chan_kind;
	epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->ch->fd, &ev);

	pthread_mutex_lock(&g_lock);
	tp->dnext = tp->dev->tps;
	tp->dev->tps = tp;
	pthread_mutex_unlock(&g_lock);

	ret = -pthread_create(&tp->tid, NULL, progress_main, tp);
	if (ret)
		goto fail;
	tp->started = true;
	char name[16];
	snprintf(name, sizeof(name), "r2ibv%d", c->rail);
	pthread_setname_np(tp->tid, name);
	char gs[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, tp->gid, gs, sizeof(gs));
	log_info("verbs %s: %s port %u (%s, MTU %d, LID %u, GID[%d] %s), side channel port %u, "
		 "%d QPs/peer, SRQ %d x %u B, timeout %d retry %d tc %d sl %d",
		 c->ifname, devname, tp->port, ib ? "InfiniBand" : "RoCE",
		 r2v_mtu_bytes(tp->active_mtu), tp->lid, tp->gid_index, gs, tp->b.port, c->ib_qps,
		 tp->rdepth, tp->slot, c->ib_timeout, c->ib_retry_cnt, c->ib_tc, c->ib_sl);
	*out = tp;
	return 0;
fail:
	verbs_close(tp);
	return ret;
}

static void verbs_close(struct r2_tp *tp)
{
	if (!tp)
		return;
	atomic_store(&tp->stop, true);
	if (tp->started) {
		r2_tp_efd_signal(tp->wfd);
		pthread_join(tp->tid, NULL);
		log_info("verbs %s: payload sent: %llu bytes zero-copy from registered memory, "
			 "%llu bytes copied into send slots",
			 tp->cfg.ifname, (unsigned long long)atomic_load(&tp->tx_zc_bytes),
			 (unsigned long long)atomic_load(&tp->tx_copy_bytes));
	}
	if (tp->dev) {
		pthread_mutex_lock(&g_lock);
		for (struct r2_tp **pp = &tp->dev->tps; *pp; pp = &(*pp)->dnext)
			if (*pp == tp) {
				*pp = tp->dnext;
				break;
			}
		pthread_mutex_unlock(&g_lock);
	}
	/* single-threaded from here; close() drops everything (no completions) */
	while (tp->b.peers.all) {
		struct vpeer *p = (struct vpeer *)tp->b.peers.all;
		r2_tp_peer_unlink(&tp->b.peers, &p->h);
		p->dnext = tp->dead;
		tp->dead = p;
		p->h.failed = true;
		p->fail_status = -ECONNABORTED;
		if (p->sock)
			p->sock->dead = true;
	}
	for (struct vsock *s = tp->socks; s; s = s->next)
		s->dead = true;
	if (tp->epfd >= 0)
		reap(tp);
	r2_tp_base_fini(&tp->b); /* RECV buffers still queued go back */
	while (tp->regs) {
		struct vreg *r = tp->regs;
		tp->regs = r->next;
		ibv_dereg_mr(r->mr);
		free(r);
	}
	if (tp->srq)
		ibv_destroy_srq(tp->srq);
	if (tp->cq) {
		struct ibv_wc wc[16];
		while (ibv_poll_cq(tp->cq, 16, wc) > 0)
			;
		ibv_destroy_cq(tp->cq);
	}
	if (tp->ch)
		ibv_destroy_comp_channel(tp->ch);
	if (tp->rmr)
		ibv_dereg_mr(tp->rmr);
	if (tp->smr)
		ibv_dereg_mr(tp->smr);
	free(tp->rslab);
	free(tp->sslab);
	free(tp->rspare);
	free(tp->sfree);
	if (tp->dev)
		dev_put(tp->dev);
	int fds[] = { tp->lfd, tp->wfd, tp->epfd };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	pthread_mutex_destroy(&tp->pool_lock);
	pthread_mutex_destroy(&tp->reg_lock);
	free(tp);
}

static int verbs_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port)
{
	if (peer_id == tp->cfg.self_id)
		return -EINVAL;
	pthread_mutex_lock(&tp->b.lock);
	struct vpeer *p = peer_find(tp, peer_id);
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
	struct vsock *s = sock_new(tp, fd, S_DIALING, EPOLLIN | EPOLLOUT);
	if (!s) {
		close(fd);
		pthread_mutex_unlock(&tp->b.lock);
		return -ENOMEM;
	}
	p = peer_new(tp, peer_id, ROLE_DIAL, tp->cfg.ib_qps, nonce);
	if (!p) {
		s->dead = true;
		pthread_mutex_unlock(&tp->b.lock);
		r2_tp_efd_signal(tp->wfd);
		return -ENOMEM;
	}
	p->sock = s;
	s->peer = p;
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}

static int verbs_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle)
{
	if (!tp || !addr || !len || !handle)
		return -EINVAL;
	struct vreg *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->mr = ibv_reg_mr(tp->dev->pd, addr, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!r->mr) {
		int e = errno ? errno : ENOMEM;
		free(r);
		log_err("verbs %s: ibv_reg_mr(%zu bytes): %s", tp->cfg.ifname, len, strerror(e));
		return -e;
	}
	r->addr = (uintptr_t)addr;
	r->len = len;
	pthread_mutex_lock(&tp->reg_lock);
	r->next = tp->regs;
	tp->regs = r;
	pthread_mutex_unlock(&tp->reg_lock);
	*handle = r;
	return 0;
}

static int verbs_dereg_mem(struct r2_tp *tp, void *handle)
{
	if (!tp || !handle)
		return -EINVAL;
	/* A message in flight from this region keeps using its lkey: the
	 * caller deregisters only what it no longer sends from. */
	pthread_mutex_lock(&tp->reg_lock);
	for (struct vreg **pp = &tp->regs; *pp; pp = &(*pp)->next)
		if (*pp == handle) {
			struct vreg *r = *pp;
			*pp = r->next;
			pthread_mutex_unlock(&tp->reg_lock);
			int e = ibv_dereg_mr(r->mr);
			free(r);
			return e ? -e : 0;
		}
	pthread_mutex_unlock(&tp->reg_lock);
	return -ENOENT;
}

static int verbs_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
			   const void *buf, uint64_t ctx)
{
	if (!hdr || (hdr->len && !buf))
		return -EINVAL;
	if (hdr->len > tp->cfg.max_msg)
		return -EMSGSIZE;
	struct vmsg *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->hdr = *hdr;
	m->hdr.magic = R2_CHUNK_MAGIC;
	m->wire = m->hdr;
	r2_tp_hdr_le(&m->wire);
	m->buf = buf;
	m->len = hdr->len;
	m->ctx = ctx;
	if (m->len)
		m->lkey = lkey_of(tp, buf, m->len, &m->zc);
	uint64_t sz = HDR_SIZE + (uint64_t)hdr->len;

	pthread_mutex_lock(&tp->b.lock);
	struct vpeer *p = peer_find(tp, peer_id);
	int ret = 0;
	if (!p || p->h.failed || !p->conn_reported)
		ret = -ENOTCONN;
	else if (hdr->len > p->max_msg)
		ret = -EMSGSIZE;
	else if (p->queued > 0 && p->queued + sz > tp->cfg.max_queued)
		ret = -EAGAIN;
	if (ret) {
		pthread_mutex_unlock(&tp->b.lock);
		free(m);
		return ret;
	}
	struct vqp *best = NULL;
	for (int k = 0; k < p->nqps; k++) {
		struct vqp *q = p->qps[(p->rr + (unsigned)k) % (unsigned)p->nqps];
		if (q && (!best || q->queued < best->queued))
			best = q;
	}
	p->rr++;
	best->queued += sz;
	p->queued += sz;
	if (best->tq_tail)
		best->tq_tail->next = m;
	else
		best->tq_head = m;
	best->tq_tail = m;
	qp_kick(tp, best);
	pthread_mutex_unlock(&tp->b.lock);
	return 0;
}

static void verbs_release(struct r2_tp *tp, void *buf)
{
	buf_release(tp, buf);
}

static int verbs_link_state(struct r2_tp *tp)
{
	struct ibv_port_attr pa;
	if (ibv_query_port(tp->dev->ctx, tp->port, &pa))
		return -EIO;
	return pa.state == IBV_PORT_ACTIVE ? 1 : 0;
}

const struct r2_tp_ops r2_tp_verbs_ops = {
	.name = "verbs",
	.caps = 0,
	.probe = verbs_probe,
	.open = verbs_open,
	.close = verbs_close,
	.listen_port = r2_tp_base_listen_port,
	.connect = verbs_connect,
	.disconnect = r2_tp_base_disconnect,
	.reg_mem = verbs_reg_mem,
	.dereg_mem = verbs_dereg_mem,
	.post_send = verbs_post_send,
	.release = verbs_release,
	.poll = r2_tp_base_poll,
	.event_fd = r2_tp_base_event_fd,
	.link_state = verbs_link_state,
	.stats = r2_tp_base_stats,
};
