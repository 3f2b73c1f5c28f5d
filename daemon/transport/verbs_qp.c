// SPDX-License-Identifier: MIT
/*
 * verbs provider: peer connections and their RC QPs: create, bring to
 * RTR/RTS, fail, destroy and reap (verbs_int.h).
 */
#include "verbs_int.h"

/* ---- peers, QPs ---- */

struct vpeer *v_peer_find(struct r2_tp *tp, uint64_t id)
{
	return (struct vpeer *)r2_tp_peer_find(&tp->b.peers, id);
}

struct vqp *v_qp_find(struct r2_tp *tp, uint32_t qpn)
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

struct vpeer *v_peer_alloc(uint64_t id, int role, int nqps, uint64_t nonce)
{
	struct vpeer *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->h.id = id;
	p->role = role;
	p->nqps = nqps;
	p->nonce = nonce;
	return p;
}

struct vpeer *v_peer_new(struct r2_tp *tp, uint64_t id, int role, int nqps, uint64_t nonce)
{
	struct vpeer *p = v_peer_alloc(id, role, nqps, nonce);
	if (p)
		r2_tp_peer_insert(&tp->b.peers, &p->h, id);
	return p;
}

/* Fails a peer connection (under tp->b.lock): reports ERROR by tcp's rule and
 * hands it to the progress thread's reaper. */
void v_peer_fail(struct r2_tp *tp, struct vpeer *p, int status, bool report)
{
	if (p->h.failed)
		return;
	p->h.failed = true;
	p->fail_status = status;
	if (report && (p->conn_reported || (p->role == ROLE_DIAL && p->h.id > tp->cfg.self_id)))
		v_push_simple(tp, R2_TPC_ERROR, status, p);
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

void v_peer_fail_hook(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report)
{
	v_peer_fail(tp, (struct vpeer *)p, status, report);
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
			v_complete_send(tp, q, r->m, status);
	}
	while (q->tq_head) {
		struct vmsg *m = q->tq_head;
		q->tq_head = m->next;
		v_complete_send(tp, q, m, status);
	}
	q->tq_tail = NULL;
	if (q->rx_buf)
		v_heap_put(q->rx_buf);
	if (q->hmr)
		ibv_dereg_mr(q->hmr);
	free(q->hdrs);
	free(q->ring);
	free(q);
}

/* progress thread, under tp->b.lock */
void v_reap(struct r2_tp *tp)
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
		if (s->prehello)
			tp->prehello--;
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

int v_peer_make_qps(struct r2_tp *tp, struct vpeer *p)
{
	for (int i = 0; i < p->nqps; i++) {
		p->qps[i] = qp_create(tp, p, i);
		if (!p->qps[i])
			return -ENOMEM;
	}
	return 0;
}

int v_peer_qps_rts(struct r2_tp *tp, struct vpeer *p, const struct r2v_cm_msg *rm)
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
