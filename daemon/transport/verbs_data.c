// SPDX-License-Identifier: MIT
/*
 * verbs provider: the data path: receive buffers, completions to the
 * engine, posting sends (chained work requests, zero copy from registered
 * memory), polling the CQ, reassembly, and the rail's queues (verbs_int.h).
 */
#include "verbs_int.h"

/* ---- heap buffers (reassembled messages) ---- */

static void *heap_get(uint32_t len)
{
	void *p;
	if (posix_memalign(&p, 64, V_HEAP_HDR + (size_t)len))
		return NULL;
	*(uint32_t *)p = V_HEAP_MAGIC;
	return (uint8_t *)p + V_HEAP_HDR;
}

void v_heap_put(void *buf)
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
	v_heap_put(buf);
}

/* ---- completions (to the engine: tp_common.c's queue) ---- */

void v_cq_release(void *arg, void *buf)
{
	buf_release(arg, buf);
}

void v_push_simple(struct r2_tp *tp, int type, int status, struct vpeer *p)
{
	r2_tp_cq_push_simple(&tp->b.cmpl, type, status, p->h.id, (struct r2_tp_conn *)p);
}

void v_complete_send(struct r2_tp *tp, struct vqp *q, struct vmsg *m, int status)
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


/* ---- send path (under tp->b.lock) ---- */

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
		v_peer_fail(tp, p, -EIO, true);
	}
}

static void kick_all(struct r2_tp *tp)
{
	for (struct vpeer *p = (struct vpeer *)tp->b.peers.all; p; p = (struct vpeer *)p->h.anext)
		for (int i = 0; i < p->nqps; i++)
			if (p->qps[i] && p->qps[i]->tq_head)
				qp_kick(tp, p->qps[i]);
}

/* ---- receive path (progress thread, under tp->b.lock) ---- */

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
	v_peer_fail(tp, q->peer, st, true);
}

/* Polls the CQ until empty (at most a few batches); returns completions seen. */
int v_drain_cq(struct r2_tp *tp)
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
			struct vqp *q = v_qp_find(tp, wc[i].qp_num);
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
					v_peer_fail(tp, q->peer, err, true);
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
				v_peer_fail(tp, q->peer, -EPROTO, true);
				continue;
			}
			struct vrec *r = &q->ring[q->r_head];
			q->r_head = (q->r_head + 1) % q->depth;
			q->r_cnt--;
			tp->tx_out--;
			if (r->slot >= 0)
				tp->sfree[tp->sfree_n++] = r->slot;
			if (r->last)
				v_complete_send(tp, q, r->m, 0);
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


int verbs_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle)
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

int verbs_dereg_mem(struct r2_tp *tp, void *handle)
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

int verbs_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
		    const void *buf, uint64_t ctx)
{
	int ret = r2_tp_send_check(hdr, buf, tp->cfg.max_msg);

	if (ret < 0)
		return ret;
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
	struct vpeer *p = v_peer_find(tp, peer_id);
	ret = 0;
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

void verbs_release(struct r2_tp *tp, void *buf)
{
	buf_release(tp, buf);
}

/* The rail's completion channel and CQ, shared receive queue, registered
 * receive and send slots, and the first receives posted. 0 or a negative
 * errno (what was made is undone by close). */
int v_open_queues(struct r2_tp *tp)
{
	struct r2_tp_config *c = &tp->cfg;
	int ret;

	struct ibv_device_attr da;
	if (ibv_query_device(tp->dev->ctx, &da)) {
		ret = -EIO;
		return ret;
	}
	if (tp->rdepth > da.max_srq_wr)
		tp->rdepth = da.max_srq_wr;
	if (c->ib_send_depth > da.max_qp_wr)
		c->ib_send_depth = da.max_qp_wr;
	tp->cq_size = da.max_cqe < 16384 ? da.max_cqe : 16384;
	tp->tx_cap = tp->cq_size - tp->rdepth - 64;
	if (tp->tx_cap < 64) {
		ret = -ENOMEM;
		return ret;
	}
	tp->ch = ibv_create_comp_channel(tp->dev->ctx);
	if (!tp->ch) {
		ret = errno ? -errno : -ENOMEM;
		return ret;
	}
	fcntl(tp->ch->fd, F_SETFL, fcntl(tp->ch->fd, F_GETFL) | O_NONBLOCK);
	tp->cq = ibv_create_cq(tp->dev->ctx, tp->cq_size, tp, tp->ch, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = (uint32_t)tp->rdepth, .max_sge = 1 } };
	tp->srq = tp->cq ? ibv_create_srq(tp->dev->pd, &sa) : NULL;
	if (!tp->cq || !tp->srq) {
		log_err("verbs %s: CQ/SRQ creation failed: %s", c->ifname, strerror(errno));
		ret = -ENOMEM;
		return ret;
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
		return ret;
	}
	tp->rmr = ibv_reg_mr(tp->dev->pd, tp->rslab, (size_t)tp->rslots * tp->slot,
			     IBV_ACCESS_LOCAL_WRITE);
	tp->smr = ibv_reg_mr(tp->dev->pd, tp->sslab, (size_t)tp->sslots * tp->slot,
			     IBV_ACCESS_LOCAL_WRITE);
	if (!tp->rmr || !tp->smr) {
		log_err("verbs %s: ibv_reg_mr: %s", c->ifname, strerror(errno));
		ret = -ENOMEM;
		return ret;
	}
	for (int i = 0; i < tp->sslots; i++)
		tp->sfree[tp->sfree_n++] = i;
	for (int i = tp->rdepth; i < tp->rslots; i++)
		tp->rspare[tp->rspare_n++] = i;
	{
		int *init = malloc((size_t)tp->rdepth * sizeof(int));
		if (!init) {
			ret = -ENOMEM;
			return ret;
		}
		for (int i = 0; i < tp->rdepth; i++)
			init[i] = i;
		post_recvs(tp, init, tp->rdepth);
		free(init);
	}
	return 0;
}
