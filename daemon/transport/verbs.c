// SPDX-License-Identifier: MIT
/*
 * The verbs transport provider: its rail instance (open, close), progress
 * thread and operation table (BRIEF.md decision 5): RDMA over rdma-core,
 * the same table and contract as tcp.c (read its header comment: connect /
 * accept semantics, who wins when both dial, ERROR reporting rules, SEND
 * completions of queued messages on failure are the same here).
 *
 * Device. open() finds the RDMA device port bound to cfg->ifname (RoCE: a
 * GID table entry of the port has that netdev; IB: the netdev's
 * device/infiniband/ directory), filtered by cfg->ib_hca (ib_hca, NCCL syntax,
 * common/nicfilter.h). -ENODEV if there is none (the daemon uses tcp then).
 * One ibv_context and one protection domain per device, shared by every rail
 * instance on it (a global table, refcounted), with one thread per device
 * reading its async events. GID: RoCE v2 with the rail's IPv4 address first
 * (r2v_gid_choose), cfg->ib_gid_index (ib_gid_index) overrides; IB: LID and
 * GID 0.
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
#include "util.h"
#include "verbs_int.h"

/* A configuration value, or its default where the caller left it 0. */
static int or_default(int v, int def)
{
	return v ? v : def;
}

static void tick(struct r2_tp *tp)
{
	uint64_t t = r2_tp_now_ns();
	for (struct vsock *s = tp->socks; s; s = s->next)
		if (!s->dead && s->state != S_UP && t > s->deadline)
			v_sock_fail(tp, s, -ETIMEDOUT);
	/* async events */
	if (atomic_exchange(&tp->qp_event, false)) {
		for (struct vpeer *p = (struct vpeer *)tp->b.peers.all, *next; p; p = next) {
			next = (struct vpeer *)p->h.anext;
			for (int i = 0; i < p->nqps; i++)
				if (p->qps[i] && atomic_load(&p->qps[i]->fatal)) {
					v_peer_fail(tp, p, -EIO, true);
					break;
				}
		}
	}
	bool fatal = atomic_load(&tp->dev_fatal);
	if (atomic_exchange(&tp->port_event, false) || fatal) {
		int st = fatal ? -ENODEV : atomic_load(&tp->port_err) ? -ENETDOWN : 0;
		if (st)
			while (tp->b.peers.all)
				v_peer_fail(tp, (struct vpeer *)tp->b.peers.all, st, true);
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
		if (v_drain_cq(tp) > 0)
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
			if (v_drain_cq(tp) > 0) { /* raced with the arming */
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
				v_on_listen(tp);
			} else if (*kind == OBJ_SOCK) {
				v_on_sock(tp, (struct vsock *)evs[i].data.ptr, evs[i].events);
			}
		}
		if (last_ep - last_tick > 100000000ull || tp->dead || atomic_load(&tp->qp_event) ||
		    atomic_load(&tp->port_event) || atomic_load(&tp->dev_fatal)) {
			tick(tp);
			last_tick = last_ep;
		}
		if (tp->dead || tp->socks) {
			v_reap(tp);
		}
		pthread_mutex_unlock(&tp->b.lock);
		/* flushed completions of destroyed QPs leave the CQ before any
		 * new QP can reuse their numbers */
		v_drain_cq(tp);
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

	ret = r2_tp_alloc(cfg, out, sizeof(*tp), &tp);
	if (ret < 0)
		return ret;
	tp->cfg = *cfg;
	struct r2_tp_config *c = &tp->cfg;
	c->ifname[sizeof(c->ifname) - 1] = 0;
	c->ib_hca[sizeof(c->ib_hca) - 1] = 0;
	r2_tp_hello_defaults(c);
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
	pthread_mutex_init(&tp->pool_lock, NULL);
	pthread_mutex_init(&tp->reg_lock, NULL);
	ret = r2_tp_base_init(&tp->b, "verbs", v_cq_release, tp, v_peer_fail_hook);
	if (ret < 0)
		goto fail;

	ret = v_open_port(tp, devname, sizeof(devname));
	if (ret)
		goto fail;
	ret = v_open_queues(tp);
	if (ret)
		goto fail;
	ret = v_open_side_channel(tp);
	if (ret)
		goto fail;

	pthread_mutex_lock(&v_devs_lock);
	tp->dnext = tp->dev->tps;
	tp->dev->tps = tp;
	pthread_mutex_unlock(&v_devs_lock);

	ret = -r2_thread_create(&tp->tid, progress_main, tp);
	if (ret)
		goto fail;
	tp->started = true;
	char name[16];
	snprintf(name, sizeof(name), "r2ibv%d", c->rail);
	pthread_setname_np(tp->tid, name);
	bool ib = tp->link_layer == IBV_LINK_LAYER_INFINIBAND;
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
		pthread_mutex_lock(&v_devs_lock);
		for (struct r2_tp **pp = &tp->dev->tps; *pp; pp = &(*pp)->dnext)
			if (*pp == tp) {
				*pp = tp->dnext;
				break;
			}
		pthread_mutex_unlock(&v_devs_lock);
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
	for (struct vsock *s = tp->socks; s; s = s->next) {
		/* an acceptor's peer before the dialer's proof is in no table */
		if (s->peer && !s->peer->h.failed)
			v_peer_fail(tp, s->peer, -ECONNABORTED, false);
		s->dead = true;
	}
	if (tp->epfd >= 0)
		v_reap(tp);
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
		v_dev_put(tp->dev);
	int fds[] = { tp->lfd, tp->wfd, tp->epfd };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	pthread_mutex_destroy(&tp->pool_lock);
	pthread_mutex_destroy(&tp->reg_lock);
	free(tp);
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
