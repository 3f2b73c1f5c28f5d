/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl: the session with r2ccld (handshake, control requests, the
 * shared submission ring). Library code: no logging, negative error codes.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "session.h"
#include "r2ccl.pb-c.h"
#include "util.h"

#define DEFAULT_TIMEOUT_MS 30000
/* A waiting client polls its CQ before it sleeps: for operations up to
 * 64 KiB, 50 us; on a host of 8 or more CPUs for operations up to 1 MiB,
 * 250 us (a decode-sized AllReduce across hosts takes 100-300 us there, and
 * a wake-up at its end costs more than the poll). */
#define SMALL_HOST_SPIN_US 50
#define SMALL_HOST_SPIN_MAX (64u << 10)
#define SPIN_US 250
#define SPIN_MAX (1u << 20)

static bool big_host(void)
{
	static int v = -1;

	if (v < 0)
		v = sysconf(_SC_NPROCESSORS_ONLN) >= 8;
	return v;
}

/* R2CCL_SPIN_US: how long a waiting client polls its CQ before sleeping. */
static int spin_us(void)
{
	static int v = -1;
	const char *e;

	if (v < 0) {
		e = getenv("R2CCL_SPIN_US");
		v = e && *e ? atoi(e) : big_host() ? SPIN_US : SMALL_HOST_SPIN_US;
		if (v < 0)
			v = 0;
	}
	return v;
}
#define OP_GRACE_MS 5000

extern const char *__progname;

/* Releases what c holds (not c itself). */
static void client_release(r2ccl_client_t *c)
{
	while (c->mem) {
		struct r2_cmem *m = c->mem;
		c->mem = m->next;
		munmap(m->addr, m->size);
		close(m->fd);
		free(m);
	}
	if (c->ring)
		munmap(c->ring, c->ring_bytes);
	r2_closep(&c->sq_efd);
	r2_closep(&c->cq_efd);
	r2_rpc_close(&c->rpc);
}

static void client_free(r2ccl_client_t *c)
{
	if (!c)
		return;
	client_release(c);
	free(c);
}

static int mark_gone(r2ccl_client_t *c)
{
	c->gone = true;
	return R2CCL_E_DAEMON_GONE;
}

int r2c_rpc(r2ccl_client_t *c, uint16_t type, const void *msg, uint16_t reply_type,
	    void **reply, void *(*unpack)(void *, size_t, const uint8_t *), const int *fds,
	    int nfds, int *rfds, int max_rfds)
{
	R2ccl__Result *res;
	struct r2_frame f;
	int r;

	if (c->gone)
		return R2CCL_E_DAEMON_GONE;
	c->rpc.timeout_ms = c->timeout_ms;
	r = r2_rpc_call(&c->rpc, type, msg, fds, nfds, reply_type, &f, &res);
	if (r == -EPIPE || r == -ECONNRESET)
		return mark_gone(c);
	if (r < 0)
		return r == -EPROTO ? R2CCL_E_PROTOCOL : r;
	if (r == R2_RPC_RESULT) {
		/* a generic answer (e.g. not supported) in place of the reply */
		r = res->status < 0 ? res->status : R2CCL_E_PROTOCOL;
		r2ccl__result__free_unpacked(res, NULL);
		return r;
	}
	if (r == R2_RPC_UNEXPECTED || f.nfds > max_rfds) {
		r2_frame_free(&f);
		return R2CCL_E_PROTOCOL;
	}
	*reply = unpack(NULL, f.len, f.payload);
	if (!*reply) {
		r2_frame_free(&f);
		return R2CCL_E_PROTOCOL;
	}
	for (int i = 0; i < max_rfds; i++) {
		rfds[i] = i < f.nfds ? f.fds[i] : -1;
		if (i < f.nfds)
			f.fds[i] = -1; /* taken */
	}
	r2_frame_free(&f);
	return 0;
}

static void *unpack_hello_reply(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__hello_reply__unpack(a, l, d);
}

/* The reason of a failed r2ccl_connect, for r2ccl_last_error. */
static void connect_failed(int r, const char *path, const R2ccl__HelloReply *rep)
{
	if (rep && rep->status < 0 && rep->error && rep->error[0])
		r2c_fail(r, "r2ccld at %s refused the session: %s", path, rep->error);
	else if (r == -ENOENT || r == -ECONNREFUSED)
		r2c_fail(r, "no r2ccld listening at %s (%s): is the daemon running, and is "
			 "R2CCL_SOCKET or socket_path right?", path, r2ccl_strerror(r));
	else if (r == -EACCES)
		r2c_fail(r, "no permission to connect to %s", path);
	else if (r == -ETIMEDOUT && !rep)
		r2c_fail(r, "r2ccld at %s did not accept the connection or answer within the "
			 "timeout (its backlog full, or the daemon stalled)", path);
	else
		r2c_fail(r, "connecting to r2ccld at %s: %s", path, r2ccl_strerror(r));
}

int r2ccl_connect(const r2ccl_connect_opts_t *opts, r2ccl_client_t **out)
{
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	R2ccl__Hello hello;
	R2ccl__HelloReply *rep = NULL;
	r2ccl_client_t *c;
	const char *path;
	int r, rfds[3] = { -1, -1, -1 };

	r2c_clear_error();
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (opts) {
		if (opts->size < offsetof(r2ccl_connect_opts_t, client_name) + sizeof(char *))
			return -EINVAL;
		memcpy(&o, opts, R2_MIN(opts->size, sizeof(o)));
	}
	path = o.socket_path ? o.socket_path : getenv("R2CCL_SOCKET");
	if (!path || !path[0])
		path = R2CCL_DEFAULT_SOCKET;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->magic = R2C_CLIENT_LIVE;
	c->pid = getpid();
	c->fork_gen = r2c_fork_gen();
	c->sq_efd = c->cq_efd = -1;
	c->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
	r2_rpc_init(&c->rpc, 16u << 20, c->timeout_ms);
	c->next_req = 1;
	c->next_tag = 1;
	/* a full backlog (a stalled daemon) waits timeout_ms at most */
	r = r2_rpc_dial(&c->rpc, path, R2_RPC_SNDTIMEO);
	if (r == -EAGAIN)
		r = -ETIMEDOUT;
	if (r < 0)
		goto fail;
	r2_rpc_hello_init(&hello, o.client_name ? o.client_name : __progname, false);
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_HELLO, &hello, R2CCL__MSG_TYPE__MSG_HELLO_REPLY,
		    (void **)&rep, unpack_hello_reply, NULL, 0, rfds, 3);
	if (r < 0)
		goto fail;
	if (rep->status < 0) {
		r = rep->status;
		goto fail;
	}
	c->sq_efd = rfds[1];
	c->cq_efd = rfds[2];
	rfds[1] = rfds[2] = -1;
	if (rfds[0] < 0 || c->sq_efd < 0 || c->cq_efd < 0 ||
	    rep->ring_bytes < sizeof(struct r2_ring_shm)) {
		r = R2CCL_E_PROTOCOL;
		goto fail;
	}
	c->session_id = rep->session_id;
	c->op_timeout_ms = (int)rep->op_timeout_ms;
	c->ring_bytes = sizeof(struct r2_ring_shm);
	c->ring = mmap(NULL, c->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, rfds[0], 0);
	r2_closep(&rfds[0]);
	if (c->ring == MAP_FAILED) {
		c->ring = NULL;
		r = -errno;
		goto fail;
	}
	if (c->ring->magic != R2_RING_MAGIC || c->ring->entries != R2_RING_ENTRIES) {
		r = R2CCL_E_PROTOCOL;
		goto fail;
	}
	r2ccl__hello_reply__free_unpacked(rep, NULL);
	*out = c;
	return 0;
fail:
	connect_failed(r, path, rep);
	for (int i = 0; i < 3; i++)
		r2_closep(&rfds[i]);
	if (rep)
		r2ccl__hello_reply__free_unpacked(rep, NULL);
	client_free(c);
	return r;
}

void r2ccl_disconnect(r2ccl_client_t *c)
{
	int r = r2c_client_use(c);

	if (r == -EINVAL || r == -EBADF)
		return; /* NULL, or disconnected already */
	/* in a forked child this releases the child's copies only: closing
	 * the inherited socket does not end the parent's session */
	if (r == 0)
		r2c_gpu_forget(c);
	client_release(c);
	r2c_client_bury(c);
}

void r2c_client_shutdown(r2ccl_client_t *c)
{
	if (c && c->rpc.fd >= 0)
		shutdown(c->rpc.fd, SHUT_RDWR);
}

int r2ccl_client_check(r2ccl_client_t *c)
{
	int r = r2c_client_use(c);

	if (r < 0)
		return r;
	return r2c_client_alive(c);
}

int r2c_client_alive(r2ccl_client_t *c)
{
	struct pollfd p;

	if (c->gone)
		return R2CCL_E_DAEMON_GONE;
	/* the daemon's end closed (POLLRDHUP), even behind a reply no call
	 * read (one that came after its call gave up: r2_rpc_call skips it) */
	p.fd = c->rpc.fd;
	p.events = POLLRDHUP;
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return mark_gone(c);
	return 0;
}

/* ---- the ring ---- */

static int reap(r2ccl_client_t *c, uint64_t tag, int *status)
{
	struct r2_ring_shm *ring = c->ring;
	uint32_t head = atomic_load_explicit(&ring->cq_head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&ring->cq_tail, memory_order_acquire);
	int found = 0;

	while (head != tail) {
		struct r2_cqe e = ring->cq[head & (R2_RING_ENTRIES - 1)];
		head++;
		atomic_store_explicit(&ring->cq_head, head, memory_order_release);
		if (c->inflight)
			c->inflight--;
		if (e.tag == tag) {
			*status = e.status;
			found = 1;
		} else if (e.status < 0) {
			r2c_gpu_cqe(c, &e); /* a stream operation's: gpu.c */
		}
	}
	return found;
}

int r2c_submit_wait(r2ccl_client_t *c, struct r2_sqe *q)
{
	struct r2_ring_shm *ring = c->ring;
	uint64_t one = 1, v;
	uint32_t tail;
	int status = 0, r;
	uint64_t deadline;

	if (c->gone)
		return R2CCL_E_DAEMON_GONE;
	if (c->inflight >= R2_RING_ENTRIES)
		reap(c, 0, &status); /* stream operations' completions (tag 0: none) */
	if (c->inflight >= R2_RING_ENTRIES)
		return -EBUSY;
	q->tag = c->next_tag++;
	tail = atomic_load_explicit(&ring->sq_tail, memory_order_relaxed);
	if (tail - atomic_load_explicit(&ring->sq_head, memory_order_acquire) >= R2_RING_ENTRIES)
		return -EBUSY;
	ring->sq[tail & (R2_RING_ENTRIES - 1)] = *q;
	atomic_store(&ring->sq_tail, tail + 1);
	c->inflight++;
	/* the dispatcher busy-polling the ring needs no doorbell (ring.h) */
	if (!atomic_load(&ring->daemon_spinning) &&
	    write(c->sq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	/* poll the CQ a little before sleeping: small operations are answered in
	 * microseconds (large ones need the CPUs for the reduction instead) */
	uint64_t bytes = q->count * r2ccl_dtype_size((r2ccl_dtype_t)q->dtype);
	uint64_t spin = bytes <= (big_host() ? SPIN_MAX : SMALL_HOST_SPIN_MAX) ? (uint64_t)spin_us() : 0;
	for (uint64_t until = r2_now_us() + spin; r2_now_us() < until;) {
		if (reap(c, q->tag, &status))
			return status;
		sched_yield();
	}

	deadline = r2_now_us() + (uint64_t)(c->op_timeout_ms + OP_GRACE_MS) * 1000;
	for (;;) {
		/* the socket for its end only: a late reply left unread there
		 * must not wake this loop */
		struct pollfd p[2] = { { c->cq_efd, POLLIN, 0 }, { c->rpc.fd, POLLRDHUP, 0 } };
		uint64_t now;

		if (reap(c, q->tag, &status))
			return status;
		now = r2_now_us();
		if (now >= deadline)
			return -ETIMEDOUT; /* the daemon should have answered by now */
		atomic_store(&ring->client_waiting, 1);
		if (reap(c, q->tag, &status)) { /* posted before it saw the flag */
			atomic_store(&ring->client_waiting, 0);
			return status;
		}
		r = poll(p, 2, (int)R2_MIN((deadline - now) / 1000 + 1, 1000));
		atomic_store(&ring->client_waiting, 0);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (p[0].revents & POLLIN) {
			if (read(c->cq_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				return -errno;
		}
		if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			if (reap(c, q->tag, &status))
				return status;
			if (r2c_client_alive(c) < 0)
				return R2CCL_E_DAEMON_GONE;
		}
	}
}
