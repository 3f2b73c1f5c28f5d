// SPDX-License-Identifier: MIT
/*
 * Shared transport code: the completion queue to the engine, eventfd, clock,
 * header byte order, peer hash and byte counters (tp_common.h).
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "tp_common.h"

int r2_tp_cq_init(struct r2_tp_cq *q, const char *name, void (*release)(void *arg, void *buf),
		  void *arg)
{
	q->e = NULL;
	q->cap = q->head = q->cnt = 0;
	q->name = name;
	q->release = release;
	q->arg = arg;
	q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->efd < 0)
		return -errno;
	pthread_mutex_init(&q->lock, NULL);
	return 0;
}

void r2_tp_cq_destroy(struct r2_tp_cq *q)
{
	if (q->efd < 0)
		return;
	for (size_t i = 0; i < q->cnt; i++) {
		struct r2_tp_cqe *e = &q->e[(q->head + i) % q->cap];
		if (e->type == R2_TPC_RECV && e->buf && q->release)
			q->release(q->arg, e->buf);
	}
	free(q->e);
	q->e = NULL;
	q->cap = q->head = q->cnt = 0;
	close(q->efd);
	q->efd = -1;
	pthread_mutex_destroy(&q->lock);
}

void r2_tp_cq_push(struct r2_tp_cq *q, const struct r2_tp_cqe *e)
{
	pthread_mutex_lock(&q->lock);
	if (q->cnt == q->cap) {
		size_t ncap = q->cap ? q->cap * 2 : 256;
		struct r2_tp_cqe *n = malloc(ncap * sizeof(*n));
		if (!n) {
			/* Out of memory: nothing sane to do but drop; a RECV's
			 * buffer goes back so that at least nothing leaks. */
			pthread_mutex_unlock(&q->lock);
			log_err("%s: completion queue full, completion dropped", q->name);
			if (e->type == R2_TPC_RECV && e->buf && q->release)
				q->release(q->arg, e->buf);
			return;
		}
		for (size_t i = 0; i < q->cnt; i++)
			n[i] = q->e[(q->head + i) % q->cap];
		free(q->e);
		q->e = n;
		q->cap = ncap;
		q->head = 0;
	}
	q->e[(q->head + q->cnt) % q->cap] = *e;
	if (q->cnt++ == 0)
		r2_tp_efd_signal(q->efd);
	pthread_mutex_unlock(&q->lock);
}

void r2_tp_cq_push_simple(struct r2_tp_cq *q, int type, int status, uint64_t peer,
			  struct r2_tp_conn *conn)
{
	struct r2_tp_cqe e = {
		.type = (uint8_t)type,
		.status = status,
		.peer = peer,
		.conn = conn,
		.stream = -1,
	};
	r2_tp_cq_push(q, &e);
}

/* Up to max completions, oldest first; never blocks. */
int r2_tp_base_poll(struct r2_tp *tp, struct r2_tp_cqe *out, int max)
{
	struct r2_tp_cq *q = &((struct r2_tp_base *)tp)->cmpl;
	int n = 0;

	if (!out || max < 0)
		return -EINVAL;
	pthread_mutex_lock(&q->lock);
	while (n < max && q->cnt) {
		out[n++] = q->e[q->head];
		q->head = (q->head + 1) % q->cap;
		q->cnt--;
	}
	if (q->cnt == 0)
		r2_tp_efd_drain(q->efd);
	else
		r2_tp_efd_signal(q->efd); /* still more: stay readable */
	pthread_mutex_unlock(&q->lock);
	return n;
}

void r2_tp_efd_signal(int fd)
{
	uint64_t one = 1;
	ssize_t r = write(fd, &one, sizeof(one));
	(void)r;
}

void r2_tp_efd_drain(int fd)
{
	uint64_t v;
	ssize_t r = read(fd, &v, sizeof(v));
	(void)r;
}

uint64_t r2_tp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void r2_tp_hdr_le(struct r2_chunk_hdr *h)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	h->magic = htole32(h->magic);
	h->kind = htole16(h->kind);
	h->flags = htole16(h->flags);
	h->comm = htole64(h->comm);
	h->opseq = htole64(h->opseq);
	h->step = htole32(h->step);
	h->chunk = htole32(h->chunk);
	h->src = htole32(h->src);
	h->dst = htole32(h->dst);
	h->off = htole64(h->off);
	h->len = htole32(h->len);
	h->aux = htole32(h->aux);
#else
	(void)h;
#endif
}

unsigned r2_tp_hash64(uint64_t v, unsigned n)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return (unsigned)(v % n);
}

int r2_tp_alloc(const struct r2_tp_config *cfg, struct r2_tp **out, size_t size, struct r2_tp **tp)
{
	if (!cfg || !out)
		return -EINVAL;
	*out = NULL;
	*tp = calloc(1, size);
	return *tp ? 0 : -ENOMEM;
}

int r2_tp_send_check(const struct r2_chunk_hdr *hdr, const void *buf, uint32_t max_msg)
{
	if (!hdr || (hdr->len && !buf))
		return -EINVAL;
	return hdr->len > max_msg ? -EMSGSIZE : 0;
}

int r2_tp_base_init(struct r2_tp_base *b, const char *name, void (*release)(void *arg, void *buf),
		    void *arg,
		    void (*peer_fail)(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report))
{
	memset(&b->peers, 0, sizeof(b->peers));
	b->peer_fail = peer_fail;
	b->port = 0;
	pthread_mutex_init(&b->lock, NULL);
	b->lock_ok = true;
	return r2_tp_cq_init(&b->cmpl, name, release, arg);
}

void r2_tp_base_fini(struct r2_tp_base *b)
{
	if (!b->lock_ok)
		return; /* never initialised */
	pthread_mutex_destroy(&b->lock);
	b->lock_ok = false;
	r2_tp_cq_destroy(&b->cmpl);
}

int r2_tp_base_listen_port(struct r2_tp *tp, uint16_t *port)
{
	if (!tp || !port)
		return -EINVAL;
	*port = ((struct r2_tp_base *)tp)->port;
	return 0;
}

int r2_tp_base_event_fd(struct r2_tp *tp)
{
	return ((struct r2_tp_base *)tp)->cmpl.efd;
}

int r2_tp_base_stats(struct r2_tp *tp, uint64_t *tx_bytes, uint64_t *rx_bytes)
{
	struct r2_tp_counters *c = &((struct r2_tp_base *)tp)->ctr;

	if (tx_bytes)
		*tx_bytes = atomic_load_explicit(&c->tx_bytes, memory_order_relaxed);
	if (rx_bytes)
		*rx_bytes = atomic_load_explicit(&c->rx_bytes, memory_order_relaxed);
	return 0;
}

struct r2_tp_peer *r2_tp_peer_find(const struct r2_tp_peers *t, uint64_t id)
{
	for (struct r2_tp_peer *p = t->bucket[r2_tp_hash64(id, R2_TP_PEER_BUCKETS)]; p; p = p->hnext)
		if (p->id == id)
			return p;
	return NULL;
}

void r2_tp_peer_insert(struct r2_tp_peers *t, struct r2_tp_peer *p, uint64_t id)
{
	unsigned b = r2_tp_hash64(id, R2_TP_PEER_BUCKETS);

	p->id = id;
	p->hnext = t->bucket[b];
	t->bucket[b] = p;
	p->in_table = true;
	p->aprev = NULL;
	p->anext = t->all;
	if (t->all)
		t->all->aprev = p;
	t->all = p;
}

void r2_tp_peer_unhash(struct r2_tp_peers *t, struct r2_tp_peer *p)
{
	if (!p->in_table)
		return;
	for (struct r2_tp_peer **pp = &t->bucket[r2_tp_hash64(p->id, R2_TP_PEER_BUCKETS)]; *pp;
	     pp = &(*pp)->hnext)
		if (*pp == p) {
			*pp = p->hnext;
			break;
		}
	p->in_table = false;
}

void r2_tp_peer_unlink(struct r2_tp_peers *t, struct r2_tp_peer *p)
{
	r2_tp_peer_unhash(t, p);
	if (p->aprev)
		p->aprev->anext = p->anext;
	else if (t->all == p)
		t->all = p->anext;
	if (p->anext)
		p->anext->aprev = p->aprev;
	p->anext = p->aprev = NULL;
}

int r2_tp_base_disconnect(struct r2_tp *tp, uint64_t peer_id)
{
	struct r2_tp_base *b = (struct r2_tp_base *)tp;
	struct r2_tp_peer *p;
	int ret = -ENOTCONN;

	pthread_mutex_lock(&b->lock);
	p = r2_tp_peer_find(&b->peers, peer_id);
	if (p && !p->failed) {
		b->peer_fail(tp, p, -ECONNABORTED, false);
		ret = 0;
	}
	pthread_mutex_unlock(&b->lock);
	return ret;
}

const uint8_t *r2_tp_auth_key(const struct r2_tp_config *cfg, size_t *len)
{
	*len = cfg->auth == R2_TP_AUTH_KEY ? cfg->auth_key_len : 0;
	return cfg->auth_key;
}

int r2_tp_random(void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = getrandom(b, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

void r2_tp_hello_defaults(struct r2_tp_config *cfg)
{
	if (cfg->hello_timeout_ms == 0)
		cfg->hello_timeout_ms = R2_TP_DEFAULT_HELLO_TIMEOUT_MS;
	if (cfg->prehello_max == 0)
		cfg->prehello_max = R2_TP_DEFAULT_PREHELLO_MAX;
	if (cfg->prehello_per_addr == 0)
		cfg->prehello_per_addr = R2_TP_DEFAULT_PREHELLO_PER_ADDR;
}

const char *r2_tp_refusal(int r)
{
	switch (r) {
	case -EACCES:
		return "wrong cluster key, or one side has none (peer_auth)";
	case -EPERM:
		return "no cluster key here (cluster_key_file): every peer is refused";
	case -EMSGSIZE:
		return "not a hello";
	default:
		return "malformed or not for this daemon";
	}
}

int r2_tp_accept(int lfd, struct sockaddr_in *ra, const char *what)
{
	for (;;) {
		socklen_t rl = sizeof(*ra);
		int fd = accept4(lfd, (struct sockaddr *)ra, &rl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0)
			return fd;
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			log_warn_rl("%s: accept: %s", what, strerror(errno));
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS)
				usleep(10000); /* do not spin */
		}
		return -1;
	}
}
