// SPDX-License-Identifier: MIT
/*
 * tcp provider: the data path: the receive buffer pool, completions of
 * sends, reading streams into messages, writing queued messages with
 * sendmsg, and post_send / release (tcp_int.h).
 */
#include "tcp_int.h"

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

void tcp_pool_put(struct r2_tp *tp, void *buf)
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

void tcp_pool_destroy(struct r2_tp *tp)
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

/* direct: the caller (a progress thread) holds no lock, so a data message's
 * completion may go to cfg.sent_direct (the daemon's tcp_rx_direct: to its
 * communicator from this thread, without the rails thread's wake-up). */
void tcp_complete_msgs(struct r2_tp *tp, struct tcp_stream *st, struct tcp_msg *m, int status,
		       bool direct)
{
	while (m) {
		struct tcp_msg *next = m->next;
		/* written, with no record (ctx 0) and no data: an ACK or a
		 * heartbeat. Its completion would only wake the rails thread
		 * for nothing (r2d_comm_deliver drops it): not reported
		 * (transport.h, post_send) */
		if (status == 0 && m->ctx == 0 && le16toh(m->wire.kind) != R2_MSG_DATA) {
			free(m);
			m = next;
			continue;
		}
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
		if (!(direct && status == 0 && m->ctx > 1 && e.hdr.kind == R2_MSG_DATA &&
		      tp->cfg.sent_direct && tp->cfg.sent_direct(tp->cfg.rx_arg, &e)))
			r2_tp_cq_push(&tp->b.cmpl, &e);
		free(m);
		m = next;
	}
}

/* Messages a poster wrote inline (tcp_post_send), reported after its locks
 * are dropped: to rx_direct first, which takes a send completion on the
 * posting thread where that thread asked for it (rails.c: the eager path's
 * executor; no completion queue, no rails thread's wake-up), else queued as
 * every other completion. */
static void complete_written(struct r2_tp *tp, uint64_t peer, struct r2_tp_conn *conn, int idx,
			     struct tcp_msg *m)
{
	while (m) {
		struct tcp_msg *next = m->next;
		struct r2_tp_cqe e = {
			.type = R2_TPC_SEND,
			.peer = peer,
			.conn = conn,
			.hdr = m->wire,
			.buf = (void *)m->buf,
			.ctx = m->ctx,
			.stream = idx,
		};
		r2_tp_hdr_le(&e.hdr);
		/* (a record-less control message completes silently, as in
		 * tcp_complete_msgs) */
		if (!(m->ctx == 0 && e.hdr.kind != R2_MSG_DATA) &&
		    !(m->ctx != 0 && tp->cfg.rx_direct && tp->cfg.rx_direct(tp->cfg.rx_arg, &e)))
			r2_tp_cq_push(&tp->b.cmpl, &e);
		free(m);
		m = next;
	}
}

void tcp_push_simple(struct r2_tp *tp, int type, int status, struct tcp_peer *p)
{
	r2_tp_cq_push_simple(&tp->b.cmpl, type, status, p->h.id, (struct r2_tp_conn *)p);
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
	if (e.hdr.kind == R2_MSG_DATA && (e.hdr.flags & R2_CHUNK_POLL))
		st->th->poll_rx = true; /* this thread, the stream's owner */
	if (atomic_load_explicit(&st->dead, memory_order_relaxed)) {
		tcp_pool_put(tp, e.buf);
		return;
	}
	/* a chunk or an ACK: to its communicator from this thread, without
	 * the rails thread's wake-up (tcp_rx_direct) */
	if ((e.hdr.kind == R2_MSG_DATA || e.hdr.kind == R2_MSG_ACK) && tp->cfg.rx_direct &&
	    tp->cfg.rx_direct(tp->cfg.rx_arg, &e))
		return;
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
		bool hello = st->rx_phase == RX_HELLO || st->rx_phase == RX_PROOF;
		uint32_t want = hello ? TCP_HELLO_SIZE : HDR_SIZE;
		size_t c = want - st->rx_hgot;
		if (c > n)
			c = n;
		memcpy(st->rx_h.raw + st->rx_hgot, d, c);
		st->rx_hgot += (uint32_t)c;
		d += c;
		n -= c;
		if (st->rx_hgot < want)
			continue;
		if (hello) {
			st->rx_hgot = 0;
			r = tcp_hello_in(tp, st); /* sets the next phase */
			if (r < 0)
				return r;
		} else {
			r = hdr_in(tp, st);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int tcp_stream_rx(struct r2_tp *tp, struct tcp_stream *st)
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

/* Writes what st's queue holds (the writer claimed st->tx_busy). The
 * messages written complete here, or, with written, are handed to the
 * caller (tcp_post_send: it reports them once its locks are dropped). */
static int stream_tx(struct r2_tp *tp, struct tcp_stream *st, struct tcp_msg ***written)
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
			tcp_disarm_out(st);
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
			tcp_disarm_out(st);
		pthread_mutex_unlock(&st->qlock);
		if (written && done) {
			**written = done;
			*written = dtail;
		} else {
			tcp_complete_msgs(tp, st, done, 0, true); /* no lock held */
		}
		if ((size_t)w < total || !more)
			return 0;
	}
	return 0;
}

/* The owner thread (EPOLLOUT). While a poster writes inline (tcp_post_send)
 * it leaves the stream alone: EPOLLOUT is level-triggered, so it comes back
 * to whatever the poster left queued. */
int tcp_stream_tx(struct r2_tp *tp, struct tcp_stream *st)
{
	int r;

	pthread_mutex_lock(&st->qlock);
	if (st->tx_busy) {
		pthread_mutex_unlock(&st->qlock);
		return 0;
	}
	st->tx_busy = true;
	pthread_mutex_unlock(&st->qlock);
	r = stream_tx(tp, st, NULL);
	pthread_mutex_lock(&st->qlock);
	st->tx_busy = false;
	pthread_mutex_unlock(&st->qlock);
	return r;
}

/* A small message posted to an idle stream is written by the poster itself
 * (under tp->b.lock, so the owner cannot close fd meanwhile; MSG_DONTWAIT:
 * never blocks): no wake-up of the progress thread and no epoll_ctl on the
 * latency path of a small operation or an acknowledgement. What the socket
 * does not take, and any error, is left to the owner (EPOLLOUT armed): it
 * writes the rest, or fails the stream as it would have. */
static void stream_tx_inline(struct r2_tp *tp, struct tcp_stream *st, struct tcp_msg ***written)
{
	bool left;

	(void)stream_tx(tp, st, written);
	pthread_mutex_lock(&st->qlock);
	st->tx_busy = false;
	left = st->hello_left || st->q_head;
	if (left)
		tcp_arm_out(st);
	pthread_mutex_unlock(&st->qlock);
}

/* ---- operations of the data path ---- */

int tcp_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle)
{
	(void)tp;
	(void)len;
	if (!handle)
		return -EINVAL;
	*handle = addr;
	return 0;
}

int tcp_dereg_mem(struct r2_tp *tp, void *handle)
{
	(void)tp;
	(void)handle;
	return 0;
}

int tcp_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
		  const void *buf, uint64_t ctx)
{
	int ret = r2_tp_send_check(hdr, buf, tp->cfg.max_msg);

	if (ret < 0)
		return ret;
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
	struct tcp_peer *p = tcp_peer_find(tp, peer_id);
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
	/* the latency lane: the last stream, urgent messages alone */
	int lane = tp->cfg.lane && p->nstreams >= 2 ? p->nstreams - 1 : -1;
	bool urgent = (hdr->flags & R2_CHUNK_URGENT) != 0;
	/* The least queued stream, the first of equals: the first idle one.
	 * Messages that come one at a time (a small AllReduce's, a step's to
	 * a peer it meets once per operation) keep to the same warm
	 * connection and reading thread; concurrent ones spread over as many
	 * streams as are busy. Taking the streams in turn instead left each
	 * idle for several operations: on the 16-core machine messages then
	 * sat 0.7-3 ms on a stream now and then (a 256 KB AllReduce's p99
	 * 2.4x its p50; recursive doubling on 8 hosts 18.4 ms where one stream
	 * took 7.5; docs/benchmarks.md, 2026-12-06). */
	for (int i = 0; i < p->nstreams; i++) {
		struct tcp_stream *st = p->streams[i];
		if (!st || (lane >= 0 && (i == lane) != urgent))
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
	atomic_fetch_add_explicit(&best->queued, sz, memory_order_relaxed);
	pthread_mutex_lock(&best->qlock);
	if (best->q_tail)
		best->q_tail->next = m;
	else
		best->q_head = m;
	best->q_tail = m;
	/* alone on an idle stream that is up: written here (stream_tx_inline) */
	bool inl = best->q_head == m && !best->hello_left &&
		   !best->tx_busy && !best->ev_out && best->state == ST_UP &&
		   !atomic_load_explicit(&best->dead, memory_order_relaxed) &&
		   sz <= HDR_SIZE + TCP_TX_INLINE_MAX;
	if (inl)
		best->tx_busy = true;
	else
		tcp_arm_out(best);
	pthread_mutex_unlock(&best->qlock);
	struct tcp_msg *written = NULL, **wtail = &written;
	int idx = best->idx;
	if (inl)
		stream_tx_inline(tp, best, &wtail);
	pthread_mutex_unlock(&tp->b.lock);
	if (written) /* (p only as the completion's opaque conn, as queued ones carry it) */
		complete_written(tp, peer_id, (struct r2_tp_conn *)p, idx, written);
	return 0;
}

void tcp_release(struct r2_tp *tp, void *buf)
{
	tcp_pool_put(tp, buf);
}
