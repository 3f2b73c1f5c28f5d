// SPDX-License-Identifier: MIT
/* Unit tests of the proxy buffer pools (daemon/net/bufpool.c): buffers taken,
 * given back and reused; growth up to the cap; an exhausted pool that waits
 * and then fails with -ENOBUFS within the timeout; a waiter woken by a put;
 * several threads at once; registrations with transports (a counting
 * provider and the real tcp provider, a chunk sent from a pool buffer over
 * loopback); NUMA placement. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/bufpool.h"
#include "transport/transport.h"

#define KB 1024u
#define TH_CHECK(cond, ...)                      \
	do {                                     \
		if (!(cond))                     \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)
#define MB (1024u * 1024u)

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static struct r2_bufpool *make(size_t buf, size_t slab, size_t max, size_t pre, int node)
{
	struct r2_bufpool_config cfg = { .name = "test0", .buf_size = buf, .slab_size = slab,
					 .max_bytes = max, .prealloc_bytes = pre,
					 .numa_node = node };
	struct r2_bufpool *p = NULL;

	ck_assert_int_eq(r2_bufpool_create(&cfg, &p), 0);
	ck_assert_ptr_nonnull(p);
	return p;
}

START_TEST(test_get_put_reuse)
{
	struct r2_bufpool *p = make(64 * KB, 256 * KB, 1 * MB, 256 * KB, -1);
	struct r2_bufpool_stats st;
	void *b[4];
	int err = 1;

	r2_bufpool_stats(p, &st);
	ck_assert_str_eq(st.name, "test0");
	ck_assert_uint_eq(st.bytes, 256 * KB); /* one slab up front */
	ck_assert_uint_eq(st.max_bytes, 1 * MB);
	ck_assert_uint_eq(st.buf_size, 64 * KB);
	ck_assert_uint_eq(st.slab_size, 256 * KB);
	ck_assert_uint_eq(st.slabs, 1);
	ck_assert_uint_eq(st.in_use, 0);
	for (int i = 0; i < 4; i++) {
		b[i] = r2_bufpool_get(p, 0, &err);
		ck_assert_ptr_nonnull(b[i]);
		ck_assert_int_eq(err, 0);
		ck_assert_uint_eq((uintptr_t)b[i] % 4096, 0);
		memset(b[i], 0x10 + i, 64 * KB); /* the whole buffer is ours */
		for (int j = 0; j < i; j++) {
			uintptr_t x = (uintptr_t)b[i], y = (uintptr_t)b[j];
			ck_assert(x >= y + 64 * KB || y >= x + 64 * KB); /* disjoint */
		}
	}
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(((uint8_t *)b[i])[64 * KB - 1], 0x10 + i);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.bytes, 256 * KB); /* four fit in the first slab */
	ck_assert_uint_eq(st.in_use, 256 * KB);
	ck_assert_uint_eq(st.high_water, 256 * KB);
	ck_assert_uint_eq(st.gets, 4);
	ck_assert_int_eq(r2_bufpool_put(p, b[2]), 0);
	ck_assert_int_eq(r2_bufpool_put(p, NULL), 0);
	/* the buffer given back is the one handed out next */
	ck_assert_ptr_eq(r2_bufpool_get(p, 0, NULL), b[2]);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(r2_bufpool_put(p, b[i]), 0);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.in_use, 0);
	ck_assert_uint_eq(st.high_water, 256 * KB);
	ck_assert_uint_eq(st.gets, 5);
	ck_assert_uint_eq(st.bytes, 256 * KB); /* reused: no growth */
	ck_assert_uint_eq(st.waits, 0);
	r2_bufpool_destroy(p);
	r2_bufpool_destroy(NULL);
}
END_TEST

START_TEST(test_bad_puts)
{
	struct r2_bufpool *p = make(64 * KB, 256 * KB, 256 * KB, 256 * KB, -1);
	struct r2_bufpool_stats st;
	char local[64];
	void *b = r2_bufpool_get(p, 0, NULL);

	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(r2_bufpool_put(p, local), -EINVAL);           /* not the pool's */
	ck_assert_int_eq(r2_bufpool_put(p, (char *)b + 8), -EINVAL);   /* inside a buffer */
	ck_assert_int_eq(r2_bufpool_put(p, b), 0);
	ck_assert_int_eq(r2_bufpool_put(p, b), -EINVAL);               /* twice */
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.in_use, 0);
	/* still four distinct buffers, no duplicate on the free list */
	void *x[4];
	for (int i = 0; i < 4; i++) {
		x[i] = r2_bufpool_get(p, 0, NULL);
		ck_assert_ptr_nonnull(x[i]);
		for (int j = 0; j < i; j++)
			ck_assert_ptr_ne(x[i], x[j]);
	}
	ck_assert_ptr_null(r2_bufpool_get(p, 0, NULL));
	r2_bufpool_destroy(p);
}
END_TEST

START_TEST(test_bad_config)
{
	struct r2_bufpool_config cfg = { .name = "x", .buf_size = 0, .slab_size = 4 * MB,
					 .max_bytes = 4 * MB, .numa_node = -1 };
	struct r2_bufpool *p = (void *)1;

	ck_assert_int_eq(r2_bufpool_create(&cfg, &p), -EINVAL);
	ck_assert_ptr_null(p);
	cfg.buf_size = 1 * MB;
	cfg.max_bytes = 0;
	ck_assert_int_eq(r2_bufpool_create(&cfg, &p), -EINVAL);
	ck_assert_int_eq(r2_bufpool_create(NULL, &p), -EINVAL);
}
END_TEST

/* Sizes that do not divide: buffers page aligned, a slab a whole number of
 * buffers, the cap at least one slab. */
START_TEST(test_rounding)
{
	struct r2_bufpool *p = make(5000, 1000, 1, 0, -1);
	struct r2_bufpool_stats st;

	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.buf_size, 8192);
	ck_assert_uint_eq(st.slab_size, 8192);
	ck_assert_uint_eq(st.max_bytes, 8192);
	ck_assert_uint_eq(st.bytes, 0); /* nothing up front */
	void *b = r2_bufpool_get(p, 0, NULL);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(r2_bufpool_buf_size(p), 8192);
	ck_assert_ptr_null(r2_bufpool_get(p, 0, NULL));
	r2_bufpool_put(p, b);
	r2_bufpool_destroy(p);

	p = make(3 * MB, 4 * MB, 13 * MB, 0, -1); /* slab: two buffers (6 MB) */
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.slab_size, 6 * MB);
	ck_assert_uint_eq(st.max_bytes, 12 * MB);
	r2_bufpool_destroy(p);
}
END_TEST

/* The pool grows slab by slab up to its cap, then says -ENOBUFS at once
 * (timeout 0) or after waiting (timeout): bounded, never a hang. */
START_TEST(test_cap_waits_then_fails)
{
	struct r2_bufpool *p = make(64 * KB, 128 * KB, 512 * KB, 0, -1);
	struct r2_bufpool_stats st;
	void *b[8];
	int err = 0;
	uint64_t t0, dt;

	for (int i = 0; i < 8; i++) {
		b[i] = r2_bufpool_get(p, 0, &err);
		ck_assert_ptr_nonnull(b[i]);
		r2_bufpool_stats(p, &st);
		ck_assert_uint_eq(st.slabs, (uint32_t)(i / 2 + 1)); /* a slab when needed */
	}
	ck_assert_uint_eq(st.bytes, 512 * KB);
	ck_assert_ptr_null(r2_bufpool_get(p, 0, &err));
	ck_assert_int_eq(err, -ENOBUFS);
	t0 = now_us();
	ck_assert_ptr_null(r2_bufpool_get(p, 200000, &err));
	dt = now_us() - t0;
	ck_assert_int_eq(err, -ENOBUFS);
	/* at least the timeout; the upper bound only tells a bounded wait from
	 * a hang, so it is generous: a loaded machine may wake the waiter late */
	ck_assert_msg(dt >= 200000 && dt < 10000000, "waited %llu us", (unsigned long long)dt);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.waits, 1);
	ck_assert_uint_eq(st.timeouts, 1);
	ck_assert_uint_eq(st.in_use, 512 * KB);
	ck_assert_uint_eq(st.bytes, 512 * KB); /* never past the cap */
	r2_bufpool_note_wait(p, false);
	r2_bufpool_note_wait(p, true);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.waits, 2);
	ck_assert_uint_eq(st.timeouts, 2);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(r2_bufpool_put(p, b[i]), 0);
	r2_bufpool_destroy(p);
}
END_TEST

struct later_put {
	struct r2_bufpool *p;
	void *buf;
	unsigned delay_us;
};

/* Gives l->buf back delay_us after a getter started to wait for one (so
 * the wait is there whatever the threads' timing; at most 20 s for it). */
static void *put_later(void *arg)
{
	struct later_put *l = arg;
	struct r2_bufpool_stats st;

	for (int i = 0; i < 20000; i++) {
		r2_bufpool_stats(l->p, &st);
		if (st.waits > 0)
			break;
		usleep(1000);
	}
	usleep(l->delay_us);
	r2_bufpool_put(l->p, l->buf);
	return NULL;
}

/* A waiter gets the buffer another thread gives back. */
START_TEST(test_waiter_woken)
{
	struct r2_bufpool *p = make(64 * KB, 64 * KB, 64 * KB, 64 * KB, -1);
	struct later_put l = { .p = p, .delay_us = 100000 };
	struct r2_bufpool_stats st;
	pthread_t th;
	uint64_t t0, dt;
	int err = 1;
	void *b;

	l.buf = r2_bufpool_get(p, 0, NULL);
	ck_assert_ptr_nonnull(l.buf);
	t0 = now_us();
	pthread_create(&th, NULL, put_later, &l);
	/* a timeout of 30 s: a waiter that the put does not wake still gets
	 * the buffer, at the timeout; well before it (20 s: room for a loaded
	 * machine) means the put woke it */
	b = r2_bufpool_get(p, 30000000, &err);
	dt = now_us() - t0;
	pthread_join(th, NULL);
	ck_assert_ptr_eq(b, l.buf);
	ck_assert_int_eq(err, 0);
	ck_assert_msg(dt >= 90000 && dt < 20000000, "waited %llu us", (unsigned long long)dt);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.waits, 1);
	ck_assert_uint_eq(st.timeouts, 0);
	r2_bufpool_put(p, b);
	r2_bufpool_destroy(p);
}
END_TEST

struct worker {
	struct r2_bufpool *p;
	int id, iters;
	atomic_int *bad;
	uint64_t got;
};

/* Takes (waiting if needed), stamps the whole buffer, checks no one else
 * wrote to it meanwhile, gives it back. */
static void *churn(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < w->iters; i++) {
		int err;
		uint8_t *b = r2_bufpool_get(w->p, 5000000, &err);
		uint8_t tag = (uint8_t)(w->id * 31 + i);
		if (!b) {
			atomic_fetch_add(w->bad, 1000000);
			continue;
		}
		w->got++;
		memset(b, tag, 16 * KB);
		sched_yield();
		for (size_t k = 0; k < 16 * KB; k += 509)
			if (b[k] != tag)
				atomic_fetch_add(w->bad, 1);
		if (r2_bufpool_put(w->p, b) < 0)
			atomic_fetch_add(w->bad, 1000);
	}
	return NULL;
}

START_TEST(test_threads)
{
	/* 6 buffers for 8 threads: they must wait for each other */
	struct r2_bufpool *p = make(16 * KB, 32 * KB, 96 * KB, 32 * KB, -1);
	struct r2_bufpool_stats st;
	struct worker w[8];
	pthread_t th[8];
	atomic_int bad = 0;
	uint64_t total = 0;

	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){ .p = p, .id = i, .iters = 20000, .bad = &bad };
		pthread_create(&th[i], NULL, churn, &w[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		total += w[i].got;
	}
	ck_assert_int_eq(atomic_load(&bad), 0);
	ck_assert_uint_eq(total, 8 * 20000);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.gets, 8 * 20000);
	ck_assert_uint_eq(st.in_use, 0);
	ck_assert_uint_eq(st.bytes, 96 * KB);
	ck_assert_uint_le(st.high_water, 96 * KB);
	ck_assert_uint_eq(st.timeouts, 0);
	r2_bufpool_destroy(p);
}
END_TEST

/* ---- registrations: a provider that counts them ---- */

static int nreg, ndereg, fail_reg_after = -1;
static void *reg_addr[64];
static size_t reg_len[64];

static int count_reg(struct r2_tp *tp, void *addr, size_t len, void **handle)
{
	(void)tp;
	if (fail_reg_after >= 0 && nreg >= fail_reg_after)
		return -EFAULT;
	reg_addr[nreg] = addr;
	reg_len[nreg] = len;
	*handle = (void *)(uintptr_t)(0x1000 + nreg);
	nreg++;
	return 0;
}

static int count_dereg(struct r2_tp *tp, void *handle)
{
	(void)tp;
	ck_assert_uint_ge((uintptr_t)handle, 0x1000);
	ndereg++;
	return 0;
}

static const struct r2_tp_ops counting_ops = { .name = "counting", .reg_mem = count_reg,
					       .dereg_mem = count_dereg };

START_TEST(test_registration)
{
	struct r2_bufpool *p = make(1 * MB, 4 * MB, 16 * MB, 8 * MB, -1);
	struct r2_bufpool_stats st;
	void *b[9];

	nreg = ndereg = 0;
	fail_reg_after = -1;
	ck_assert_int_eq(r2_bufpool_attach(p, &counting_ops, NULL), 0);
	ck_assert_int_eq(nreg, 2); /* both slabs made up front */
	ck_assert_uint_eq(reg_len[0], 4 * MB);
	ck_assert_uint_eq(reg_len[1], 4 * MB);
	ck_assert_int_eq(r2_bufpool_attach(p, &counting_ops, NULL), 1); /* a second rail */
	ck_assert_int_eq(nreg, 4);
	for (int i = 0; i < 9; i++) /* the ninth needs a third slab */
		ck_assert_ptr_nonnull(b[i] = r2_bufpool_get(p, 0, NULL));
	ck_assert_int_eq(nreg, 6); /* a new slab is registered with every transport */
	ck_assert_ptr_eq(reg_addr[4], reg_addr[5]);
	ck_assert_ptr_eq(r2_bufpool_mr(p, b[8], 0), (void *)(uintptr_t)(0x1000 + 4));
	ck_assert_ptr_eq(r2_bufpool_mr(p, b[8], 1), (void *)(uintptr_t)(0x1000 + 5));
	ck_assert_ptr_eq(r2_bufpool_mr(p, b[0], 1), r2_bufpool_mr(p, b[1], 1));
	ck_assert_ptr_null(r2_bufpool_mr(p, &st, 0));
	ck_assert_ptr_null(r2_bufpool_mr(p, b[0], 2));
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.registrations, 6);
	r2_bufpool_detach_all(p);
	ck_assert_int_eq(ndereg, 6);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.registrations, 0);
	for (int i = 0; i < 9; i++)
		r2_bufpool_put(p, b[i]);
	r2_bufpool_destroy(p);
	ck_assert_int_eq(ndereg, 6); /* nothing deregistered twice */
}
END_TEST

/* A transport that refuses a registration: attach fails with its error and
 * leaves nothing registered; a slab that cannot be registered is not made. */
START_TEST(test_registration_fails)
{
	struct r2_bufpool *p = make(1 * MB, 1 * MB, 4 * MB, 2 * MB, -1);
	struct r2_bufpool_stats st;
	int err = 0;

	nreg = ndereg = 0;
	fail_reg_after = 1;
	ck_assert_int_eq(r2_bufpool_attach(p, &counting_ops, NULL), -EFAULT);
	ck_assert_int_eq(nreg, 1);
	ck_assert_int_eq(ndereg, 1); /* the first slab's was undone */
	fail_reg_after = 3; /* both slabs, then no more */
	ck_assert_int_eq(r2_bufpool_attach(p, &counting_ops, NULL), 0);
	ck_assert_int_eq(nreg, 3);
	void *a = r2_bufpool_get(p, 0, NULL), *b = r2_bufpool_get(p, 0, NULL);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_null(r2_bufpool_get(p, 0, &err)); /* a third slab: refused */
	ck_assert_int_eq(err, -EFAULT);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.slabs, 2);
	ck_assert_uint_eq(st.registrations, 2);
	r2_bufpool_put(p, a);
	r2_bufpool_put(p, b);
	r2_bufpool_destroy(p);
	ck_assert_int_eq(ndereg, 3);
	fail_reg_after = -1;
}
END_TEST

/* ---- the real tcp provider: a chunk goes out from a pool buffer ---- */

static int wait_cqe(const struct r2_tp_ops *ops, struct r2_tp *tp, int type,
		    struct r2_tp_cqe *out, int ms)
{
	uint64_t end = now_us() + (uint64_t)ms * 1000;

	while (now_us() < end) {
		struct pollfd pf = { .fd = ops->event_fd(tp), .events = POLLIN };
		poll(&pf, 1, 50);
		if (ops->poll(tp, out, 1) == 1) {
			if (out->type == type)
				return 0;
			if (out->type == R2_TPC_RECV)
				ops->release(tp, out->buf);
		}
	}
	return -ETIMEDOUT;
}

START_TEST(test_tcp_send_from_pool)
{
	const struct r2_tp_ops *ops = &r2_tp_tcp_ops;
	struct r2_tp_config ca = { .ifname = "lo", .rail = 0, .self_id = 0xa, .streams = 2,
				   .nodelay = true, .max_msg = 2 * MB, .progress_threads = 1 };
	struct r2_tp_config cb = ca;
	struct r2_tp *a = NULL, *b = NULL;
	struct r2_tp_cqe e;
	struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_DATA, .comm = 7,
				  .opseq = 1, .off = 0, .len = 1 * MB };
	struct r2_bufpool *p = make(1 * MB, 4 * MB, 4 * MB, 4 * MB, -1);
	struct r2_bufpool_stats st;
	uint16_t port;
	uint8_t *buf;

	inet_pton(AF_INET, "127.0.0.1", &ca.addr);
	cb.addr = ca.addr;
	cb.self_id = 0xb;
	ck_assert_int_eq(ops->open(&ca, &a), 0);
	ck_assert_int_eq(ops->open(&cb, &b), 0);
	ck_assert_int_eq(r2_bufpool_attach(p, ops, a), 0);
	ck_assert_int_eq(r2_bufpool_attach(p, ops, b), 1);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.registrations, 2);
	ops->listen_port(b, &port);
	ck_assert_int_eq(ops->connect(a, 0xb, ca.addr, port), 0);
	ck_assert_int_eq(wait_cqe(ops, a, R2_TPC_CONN, &e, 5000), 0);
	buf = r2_bufpool_get(p, 0, NULL);
	ck_assert_ptr_nonnull(buf);
	for (uint32_t i = 0; i < 1 * MB; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 11));
	ck_assert_int_eq(ops->post_send(a, 0xb, &h, buf, 42), 0);
	ck_assert_int_eq(wait_cqe(ops, a, R2_TPC_SEND, &e, 5000), 0);
	ck_assert_int_eq(e.status, 0);
	ck_assert_ptr_eq(e.buf, buf);
	ck_assert_uint_eq(e.ctx, 42);
	ck_assert_int_eq(wait_cqe(ops, b, R2_TPC_RECV, &e, 5000), 0);
	ck_assert_uint_eq(e.hdr.len, 1 * MB);
	ck_assert_uint_eq(e.hdr.opseq, 1);
	ck_assert_int_eq(memcmp(e.buf, buf, 1 * MB), 0);
	ops->release(b, e.buf);
	ck_assert_int_eq(r2_bufpool_put(p, buf), 0);
	r2_bufpool_stats(p, &st);
	ck_assert_uint_eq(st.in_use, 0);
	r2_bufpool_detach_all(p);
	ops->close(a);
	ops->close(b);
	r2_bufpool_destroy(p);
}
END_TEST

/* ---- NUMA placement ---- */

START_TEST(test_numa_node)
{
	struct r2_bufpool_stats st;
	struct r2_bufpool *p;
	int node = -2;

	if (numa_available() < 0) {
		/* no libnuma support in this kernel: the pool still works */
		p = make(64 * KB, 64 * KB, 64 * KB, 64 * KB, 0);
		r2_bufpool_stats(p, &st);
		ck_assert_int_eq(st.numa_node, -1);
		r2_bufpool_destroy(p);
		return;
	}
	int last = numa_max_node();
	p = make(64 * KB, 64 * KB, 64 * KB, 64 * KB, last);
	r2_bufpool_stats(p, &st);
	ck_assert_int_eq(st.numa_node, last);
	void *b = r2_bufpool_get(p, 0, NULL);
	/* the page really lives on that node (touched at creation) */
	ck_assert_int_eq(get_mempolicy(&node, NULL, 0, b, MPOL_F_NODE | MPOL_F_ADDR), 0);
	ck_assert_int_eq(node, last);
	r2_bufpool_put(p, b);
	r2_bufpool_destroy(p);
	/* unknown locality (-1) or a node that does not exist: the current one */
	for (int i = 0; i < 2; i++) {
		p = make(64 * KB, 64 * KB, 64 * KB, 64 * KB, i ? 4095 : -1);
		r2_bufpool_stats(p, &st);
		ck_assert_int_ge(st.numa_node, 0);
		ck_assert_int_le(st.numa_node, last);
		r2_bufpool_destroy(p);
	}
}
END_TEST

/* Tenants' isolation: a buffer that held another owner's bytes comes back
 * with everything past what the new owner writes at once cleared; the same
 * owner gets it as it left it (nothing to clear); an unowned get does not
 * clear, and the next owner's does. One buffer, so each get is that one. */
START_TEST(test_owner_cleared)
{
	struct r2_bufpool *p = make(64 * KB, 64 * KB, 64 * KB, 64 * KB, -1);
	unsigned char *b;
	int err;

	b = r2_bufpool_get_for(p, 0, 1, 0, &err);
	ck_assert_ptr_nonnull(b);
	memset(b, 0xaa, 64 * KB);
	ck_assert_int_eq(r2_bufpool_put(p, b), 0);
	b = r2_bufpool_get_for(p, 0, 1, 100, &err); /* the same owner */
	ck_assert_uint_eq(b[100], 0xaa);
	ck_assert_uint_eq(b[64 * KB - 1], 0xaa);
	ck_assert_int_eq(r2_bufpool_put(p, b), 0);
	b = r2_bufpool_get_for(p, 0, 2, 100, &err); /* another owner */
	ck_assert_uint_eq(b[99], 0xaa);             /* its own to write */
	for (size_t i = 100; i < 64 * KB; i++)
		TH_CHECK(b[i] == 0, "byte %zu of owner 1 left for owner 2: %#x", i, b[i]);
	memset(b, 0xbb, 64 * KB);
	ck_assert_int_eq(r2_bufpool_put(p, b), 0);
	b = r2_bufpool_get(p, 0, &err); /* no owner: as it is */
	ck_assert_uint_eq(b[64 * KB - 1], 0xbb);
	memset(b, 0xcc, 64 * KB);
	ck_assert_int_eq(r2_bufpool_put(p, b), 0);
	b = r2_bufpool_get_for(p, 0, 2, 64 * KB, &err); /* it writes all of it */
	ck_assert_uint_eq(b[64 * KB - 1], 0xcc);
	ck_assert_int_eq(r2_bufpool_put(p, b), 0);
	b = r2_bufpool_get_for(p, 0, 3, 0, &err);
	ck_assert_uint_eq(b[0], 0);
	ck_assert_uint_eq(b[64 * KB - 1], 0);
	ck_assert_int_eq(r2_bufpool_put(p, b), 0);
	r2_bufpool_destroy(p);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("bufpool");
	TCase *tc = tcase_create("pool");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_get_put_reuse);
	tcase_add_test(tc, test_bad_puts);
	tcase_add_test(tc, test_bad_config);
	tcase_add_test(tc, test_rounding);
	tcase_add_test(tc, test_cap_waits_then_fails);
	tcase_add_test(tc, test_waiter_woken);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_registration);
	tcase_add_test(tc, test_registration_fails);
	tcase_add_test(tc, test_tcp_send_from_pool);
	tcase_add_test(tc, test_numa_node);
	tcase_add_test(tc, test_owner_cleared);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
