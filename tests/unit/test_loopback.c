// SPDX-License-Identifier: MIT
/* Unit tests of the loopback transport provider (daemon/transport/loopback.c):
 * "hosts" in one process, keyed by address, and each fault of loopback.h. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/loopback.h"
#include "transport/transport.h"
#include "unit_support.h"

static const struct r2_tp_ops *ops = &r2_tp_loopback_ops;
static void setup(void) { tu_fds_mark(); }

static void teardown(void)
{
	ck_assert_int_eq(r2_lb_in_flight(), 0);
	tu_fds_check(); /* every eventfd closed */
}

/* A host: an instance on 10.0.0.<id>, daemon id <id>. */
static struct r2_tp *host(uint64_t id, uint32_t max_msg, uint64_t max_queued)
{
	struct r2_tp_config c = { .rail = 0, .self_id = id, .streams = 2, .max_msg = max_msg,
				  .max_queued = max_queued };
	struct r2_tp *tp = NULL;
	char a[32];

	snprintf(a, sizeof(a), "10.0.0.%u", (unsigned)id);
	inet_pton(AF_INET, a, &c.addr);
	ck_assert_int_eq(ops->open(&c, &tp), 0);
	ck_assert_ptr_nonnull(tp);
	return tp;
}

static void addr_of(uint64_t id, struct in_addr *a)
{
	char s[32];

	snprintf(s, sizeof(s), "10.0.0.%u", (unsigned)id);
	inet_pton(AF_INET, s, a);
}

static int dial(struct r2_tp *from, struct r2_tp *to, uint64_t to_id)
{
	struct in_addr a;
	uint16_t port = 0;

	addr_of(to_id, &a);
	ck_assert_int_eq(ops->listen_port(to, &port), 0);
	return ops->connect(from, to_id, a, port);
}

/* How long a completion that must come is waited for: it comes at once
 * when all is well (next() returns as soon as the eventfd is readable), but
 * a loaded machine may run the delay timer's thread late. */
#define WAIT_MS 10000

/* The next completion of tp, waiting up to ms on its eventfd; 0 if none. */
static int next(struct r2_tp *tp, struct r2_tp_cqe *e, int ms)
{
	struct pollfd pf = { .fd = ops->event_fd(tp), .events = POLLIN };
	int n = ops->poll(tp, e, 1);

	if (n == 0 && poll(&pf, 1, ms) == 1)
		n = ops->poll(tp, e, 1);
	ck_assert_int_ge(n, 0);
	return n;
}

static void expect(struct r2_tp *tp, int type, int status, uint64_t peer)
{
	struct r2_tp_cqe e;

	ck_assert_int_eq(next(tp, &e, WAIT_MS), 1);
	ck_assert_int_eq(e.type, type);
	ck_assert_int_eq(e.status, status);
	ck_assert_uint_eq(e.peer, peer);
}

static void expect_none(struct r2_tp *tp)
{
	struct r2_tp_cqe e;

	ck_assert_int_eq(next(tp, &e, 0), 0);
}

static void connect_pair(struct r2_tp *a, struct r2_tp *b)
{
	ck_assert_int_eq(dial(a, b, 2), 0);
	expect(a, R2_TPC_CONN, 0, 2);
	expect(b, R2_TPC_CONN, 0, 1);
}

static void send_chunk(struct r2_tp *tp, uint64_t peer, uint32_t chunk, const void *buf,
		       uint32_t len)
{
	struct r2_chunk_hdr h = { .kind = R2_MSG_DATA, .comm = 7, .opseq = 3, .chunk = chunk,
				  .len = len };

	ck_assert_int_eq(ops->post_send(tp, peer, &h, buf, chunk), 0);
}

/* A RECV of chunk `chunk` (payload its index in every byte when non-empty). */
static void expect_chunk(struct r2_tp *tp, uint64_t peer, uint32_t chunk)
{
	struct r2_tp_cqe e;

	ck_assert_int_eq(next(tp, &e, WAIT_MS), 1);
	ck_assert_int_eq(e.type, R2_TPC_RECV);
	ck_assert_uint_eq(e.peer, peer);
	ck_assert_uint_eq(e.hdr.magic, R2_CHUNK_MAGIC);
	ck_assert_uint_eq(e.hdr.chunk, chunk);
	for (uint32_t i = 0; i < e.hdr.len; i++)
		ck_assert_uint_eq(((uint8_t *)e.buf)[i], (uint8_t)chunk);
	ops->release(tp, e.buf);
}

static void expect_sends(struct r2_tp *tp, uint64_t peer, uint32_t first, uint32_t n, int status)
{
	for (uint32_t i = first; i < first + n; i++) {
		struct r2_tp_cqe e;

		ck_assert_int_eq(next(tp, &e, WAIT_MS), 1);
		ck_assert_int_eq(e.type, R2_TPC_SEND);
		ck_assert_int_eq(e.status, status);
		ck_assert_uint_eq(e.peer, peer);
		ck_assert_uint_eq(e.ctx, i);
		ck_assert_uint_eq(e.hdr.chunk, i);
	}
}

static uint8_t pay[16][256];

static void fill(void)
{
	for (int i = 0; i < 16; i++)
		memset(pay[i], i, sizeof(pay[i]));
}

START_TEST(deliver_in_order)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);
	uint64_t tx = 0, rx = 0, want = 0;
	struct pollfd pf = { .fd = ops->event_fd(b), .events = POLLIN };

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(dial(a, b, 2), -EISCONN);
	ck_assert_int_eq(dial(b, a, 1), -EISCONN);
	for (uint32_t i = 0; i < 16; i++) {
		send_chunk(a, 2, i, pay[i], i * 16);
		want += sizeof(struct r2_chunk_hdr) + i * 16;
	}
	expect_sends(a, 2, 0, 16, 0);
	ck_assert_int_eq(poll(&pf, 1, 0), 1); /* readable while RECVs wait */
	for (uint32_t i = 0; i < 16; i++) {
		struct r2_tp_cqe e;

		ck_assert_int_eq(next(b, &e, WAIT_MS), 1);
		ck_assert_int_eq(e.type, R2_TPC_RECV);
		ck_assert_uint_eq(e.hdr.chunk, i);
		ck_assert_uint_eq(e.hdr.len, i * 16);
		ck_assert_uint_eq(e.hdr.comm, 7);
		ck_assert_int_eq(e.stream, (int)(i % 2)); /* two streams in turn */
		if (i == 0)
			ck_assert_ptr_null(e.buf); /* no payload, no buffer */
		else
			ck_assert_mem_eq(e.buf, pay[i], i * 16);
		ops->release(b, e.buf);
	}
	ck_assert_int_eq(poll(&pf, 1, 0), 0); /* empty: not readable */
	ck_assert_int_eq(ops->stats(a, &tx, NULL), 0);
	ck_assert_int_eq(ops->stats(b, NULL, &rx), 0);
	ck_assert_uint_eq(tx, want);
	ck_assert_uint_eq(rx, want);
	ck_assert_int_eq(ops->link_state(a), 1);
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(connect_errors)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 100, 0);
	struct in_addr nowhere;
	uint8_t big[200] = { 0 };
	struct r2_chunk_hdr h = { .kind = R2_MSG_DATA, .len = sizeof(big) };

	addr_of(9, &nowhere);
	ck_assert_int_eq(ops->connect(a, 9, nowhere, 1), 0);
	expect(a, R2_TPC_ERROR, -ECONNREFUSED, 9); /* nothing listens there */
	ck_assert_int_eq(dial(a, b, 3), 0);          /* b is daemon 2, not 3 */
	expect(a, R2_TPC_ERROR, -ECONNREFUSED, 3);
	ck_assert_int_eq(r2_lb_refuse(b, -EHOSTUNREACH), 0);
	ck_assert_int_eq(dial(a, b, 2), 0);
	expect(a, R2_TPC_ERROR, -EHOSTUNREACH, 2);
	expect_none(b); /* refused: b never heard of it */
	ck_assert_int_eq(ops->post_send(a, 2, &h, big, 0), -ENOTCONN);
	ck_assert_int_eq(r2_lb_refuse(b, 0), 0);
	connect_pair(a, b);
	ck_assert_int_eq(ops->post_send(a, 2, &h, big, 0), -EMSGSIZE); /* b takes 100 at most */
	ck_assert_int_eq(ops->post_send(a, 2, &h, NULL, 0), -EINVAL);
	ck_assert_int_eq(r2_lb_drop((struct r2_tp *)&h, 2, 1), -EINVAL); /* not an instance */
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(drop)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(r2_lb_drop(a, 2, 3), 0);
	for (uint32_t i = 0; i < 5; i++)
		send_chunk(a, 2, i, pay[i], 32);
	expect_sends(a, 2, 0, 5, 0); /* handed over, every one */
	expect_chunk(b, 1, 3);
	expect_chunk(b, 1, 4);
	expect_none(b);
	/* a black hole in one direction only */
	ck_assert_int_eq(r2_lb_drop(a, R2_LB_ANY_PEER, R2_LB_ALL), 0);
	ck_assert_int_eq(r2_lb_drop(a, 2, 0), 0); /* peer 2's own rule wins */
	send_chunk(a, 2, 5, pay[5], 8);
	expect_chunk(b, 1, 5);
	ck_assert_int_eq(r2_lb_drop(a, 2, R2_LB_ALL), 0);
	for (uint32_t i = 6; i < 9; i++)
		send_chunk(a, 2, i, pay[i], 8);
	expect_sends(a, 2, 5, 4, 0);
	expect_none(b);
	send_chunk(b, 1, 9, pay[9], 8);
	expect_chunk(a, 2, 9);
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(delay)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);
	uint64_t t0;

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(r2_lb_delay(a, 2, 100000), 0); /* 100 ms */
	t0 = tu_now_ms();
	for (uint32_t i = 0; i < 3; i++)
		send_chunk(a, 2, i, pay[i], 64);
	ck_assert_int_eq(r2_lb_delay(a, 2, 0), 0);
	send_chunk(a, 2, 3, pay[3], 64); /* undelayed, but after the others */
	expect_sends(a, 2, 0, 4, 0);
	/* all four wait while the delay runs; a loaded machine may get here
	 * after it ended, when they may be delivered already (the count read
	 * first: a clock still under the delay after it means it was) */
	int inflight = r2_lb_in_flight();
	if (tu_now_ms() - t0 < 100)
		ck_assert_int_eq(inflight, 4);
	/* none came early: the first (and so every one after it, in order)
	 * not before the delay (t0 is before the posts), however slow */
	expect_chunk(b, 1, 0);
	ck_assert_uint_ge(tu_now_ms() - t0, 100);
	for (uint32_t i = 1; i < 4; i++)
		expect_chunk(b, 1, i);
	ck_assert_int_eq(r2_lb_in_flight(), 0);
	/* the other direction was never delayed */
	send_chunk(b, 1, 4, pay[4], 64);
	expect_chunk(a, 2, 4);
	ops->close(a);
	ops->close(b);
}
END_TEST

/* Late SEND completions (r2_lb_delay_sendc): the message arrives at once,
 * its completion 100 ms later, the others' in the order sent; one still
 * pending when its instance closes is dropped without a report. */
START_TEST(late_send_completion)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);
	struct r2_tp_cqe e;
	uint64_t t0;

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(r2_lb_delay_sendc(a, 2, 100000), 0);
	t0 = tu_now_ms();
	for (uint32_t i = 0; i < 3; i++)
		send_chunk(a, 2, i, pay[i], 64);
	for (uint32_t i = 0; i < 3; i++)
		expect_chunk(b, 1, i);
	int got = next(a, &e, 0); /* then the clock: past it, one may have come */
	if (tu_now_ms() - t0 < 100)
		ck_assert_int_eq(got, 0);
	if (got) { /* the first, late as it must be */
		ck_assert_int_eq(e.type, R2_TPC_SEND);
		ck_assert_uint_eq(e.ctx, 0);
	}
	expect_sends(a, 2, got ? 1 : 0, got ? 2 : 3, 0);
	ck_assert_uint_ge(tu_now_ms() - t0, 100);
	/* back to at once */
	ck_assert_int_eq(r2_lb_delay_sendc(a, 2, 0), 0);
	send_chunk(a, 2, 3, pay[3], 64);
	expect_sends(a, 2, 3, 1, 0);
	expect_chunk(b, 1, 3);
	/* pending at close: dropped */
	ck_assert_int_eq(r2_lb_delay_sendc(a, 2, 100000), 0);
	send_chunk(a, 2, 4, pay[4], 64);
	expect_chunk(b, 1, 4);
	ops->close(a);
	ck_assert_int_eq(next(b, &e, 200), 1); /* b's end: the connection reset */
	ck_assert_int_eq(e.type, R2_TPC_ERROR);
	ops->close(b);
}
END_TEST

START_TEST(reorder)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(r2_lb_reorder(a, 2, 3), 0);
	send_chunk(a, 2, 0, pay[0], 16);
	send_chunk(a, 2, 1, pay[1], 16);
	expect_none(b); /* held until the third */
	ck_assert_int_eq(r2_lb_in_flight(), 2);
	send_chunk(a, 2, 2, pay[2], 16);
	send_chunk(a, 2, 3, pay[3], 16);
	expect_sends(a, 2, 0, 4, 0);
	expect_chunk(b, 1, 2);
	expect_chunk(b, 1, 1);
	expect_chunk(b, 1, 0);
	expect_chunk(b, 1, 3);
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(duplicate)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);
	uint64_t rx = 0;

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(r2_lb_duplicate(a, 2, 1), 0);
	send_chunk(a, 2, 0, pay[0], 40);
	send_chunk(a, 2, 1, pay[1], 40);
	expect_sends(a, 2, 0, 2, 0); /* one SEND each */
	expect_chunk(b, 1, 0);
	expect_chunk(b, 1, 0);
	expect_chunk(b, 1, 1);
	expect_none(b);
	ck_assert_int_eq(ops->stats(b, NULL, &rx), 0);
	ck_assert_uint_eq(rx, 3 * (sizeof(struct r2_chunk_hdr) + 40));
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(hold_and_backpressure)
{
	/* 56 + 100 bytes a message: one fits under 200, a second does not */
	struct r2_tp *a = host(1, 0, 200), *b = host(2, 0, 0);

	fill();
	connect_pair(a, b);
	uint8_t late[100];

	memset(late, 9, sizeof(late));
	ck_assert_int_eq(r2_lb_hold(a, 2, true), 0);
	send_chunk(a, 2, 0, late, 100);
	struct r2_chunk_hdr h = { .kind = R2_MSG_DATA, .chunk = 1, .len = 100 };
	ck_assert_int_eq(ops->post_send(a, 2, &h, pay[1], 1), -EAGAIN);
	expect_none(a); /* no SEND while held */
	expect_none(b);
	memset(late, 0, sizeof(late)); /* read when sent, not when posted: 0s arrive */
	ck_assert_int_eq(r2_lb_hold(a, 2, false), 0);
	expect_sends(a, 2, 0, 1, 0);
	expect_chunk(b, 1, 0);
	send_chunk(a, 2, 1, pay[1], 100);
	expect_sends(a, 2, 1, 1, 0);
	expect_chunk(b, 1, 1);
	/* a connection failing under held sends completes them with its status */
	ck_assert_int_eq(r2_lb_hold(a, 2, true), 0);
	send_chunk(a, 2, 2, pay[2], 10);
	send_chunk(a, 2, 3, pay[3], 10);
	ck_assert_int_eq(r2_lb_fail(a, 2, -ETIMEDOUT), 0);
	expect(a, R2_TPC_ERROR, -ETIMEDOUT, 2);
	expect_sends(a, 2, 2, 2, -ETIMEDOUT);
	expect(b, R2_TPC_ERROR, -ETIMEDOUT, 1);
	expect_none(b);
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(fail_and_reconnect)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);
	uint64_t t0;

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(r2_lb_delay(a, 2, 50000), 0);
	send_chunk(a, 2, 0, pay[0], 64);
	expect_sends(a, 2, 0, 1, 0);
	ck_assert_int_eq(r2_lb_in_flight(), 1);
	ck_assert_int_eq(r2_lb_fail(b, 1, -ECONNRESET), 0);
	ck_assert_int_eq(r2_lb_in_flight(), 0); /* lost with the connection */
	expect(a, R2_TPC_ERROR, -ECONNRESET, 2);
	expect(b, R2_TPC_ERROR, -ECONNRESET, 1);
	usleep(80000);
	expect_none(b);
	ck_assert_int_eq(r2_lb_fail(a, 2, -EIO), -ENOTCONN);
	ck_assert_int_eq(ops->post_send(a, 2, &(struct r2_chunk_hdr){ .len = 0 }, NULL, 0),
			 -ENOTCONN);
	/* the rules outlast the connection: the reconnected one is delayed too
	 * (in flight while the delay runs, if this gets here before it ends;
	 * delivered not before it, however slow the machine) */
	connect_pair(a, b);
	t0 = tu_now_ms();
	send_chunk(a, 2, 1, pay[1], 64);
	expect_sends(a, 2, 1, 1, 0);
	int inflight = r2_lb_in_flight();
	if (tu_now_ms() - t0 < 50)
		ck_assert_int_eq(inflight, 1);
	expect_chunk(b, 1, 1);
	ck_assert_uint_ge(tu_now_ms() - t0, 50);
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(disconnect)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);

	fill();
	connect_pair(a, b);
	ck_assert_int_eq(r2_lb_hold(a, 2, true), 0);
	send_chunk(a, 2, 0, pay[0], 64);
	ck_assert_int_eq(ops->disconnect(a, 2), 0);
	expect_sends(a, 2, 0, 1, -ECONNABORTED);
	expect_none(a); /* no ERROR for the side that asked */
	expect(b, R2_TPC_ERROR, -ECONNRESET, 1);
	ck_assert_int_eq(ops->disconnect(a, 2), -ENOTCONN);
	ck_assert_int_eq(ops->disconnect(b, 1), -ENOTCONN);
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(link_down)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0), *c = host(3, 0, 0);

	connect_pair(a, b);
	ck_assert_int_eq(dial(c, a, 1), 0);
	expect(c, R2_TPC_CONN, 0, 1);
	expect(a, R2_TPC_CONN, 0, 3);
	ck_assert_int_eq(r2_lb_link(a, false), 0);
	ck_assert_int_eq(ops->link_state(a), 0);
	ck_assert_int_eq(ops->link_state(b), 1);
	/* every connection of a fails on both ends */
	expect(a, R2_TPC_ERROR, -ENETDOWN, 3);
	expect(a, R2_TPC_ERROR, -ENETDOWN, 2);
	expect(b, R2_TPC_ERROR, -ENETDOWN, 1);
	expect(c, R2_TPC_ERROR, -ENETDOWN, 1);
	ck_assert_int_eq(dial(a, b, 2), 0);
	expect(a, R2_TPC_ERROR, -ENETUNREACH, 2);
	ck_assert_int_eq(dial(b, a, 1), 0);
	expect(b, R2_TPC_ERROR, -ENETUNREACH, 1);
	/* b and c still talk */
	ck_assert_int_eq(dial(b, c, 3), 0);
	expect(b, R2_TPC_CONN, 0, 3);
	expect(c, R2_TPC_CONN, 0, 2);
	ck_assert_int_eq(r2_lb_link(a, true), 0);
	ck_assert_int_eq(ops->link_state(a), 1);
	connect_pair(a, b);
	ops->close(a);
	ops->close(b);
	ops->close(c);
}
END_TEST

START_TEST(close_peer)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);
	uint16_t pa = 0, pb = 0;

	fill();
	ck_assert_int_eq(ops->listen_port(a, &pa), 0);
	ck_assert_int_eq(ops->listen_port(b, &pb), 0);
	ck_assert_uint_ne(pa, 0);
	connect_pair(a, b);
	send_chunk(a, 2, 0, pay[0], 64); /* left unpolled in b: close gives it back */
	ops->close(b);
	expect_sends(a, 2, 0, 1, 0);
	expect(a, R2_TPC_ERROR, -ECONNRESET, 2);
	/* a second instance on one address and port is refused */
	struct r2_tp_config c = { .self_id = 5, .port = pa };
	struct r2_tp *x = NULL;
	addr_of(1, &c.addr);
	ck_assert_int_eq(ops->open(&c, &x), -EADDRINUSE);
	ck_assert_ptr_null(x);
	ops->close(a);
}
END_TEST

/* The completion queue (tp_common.c) grows past its first 256 entries while
 * its ring has wrapped, keeps the order, and its eventfd stays readable
 * while completions remain after a partial poll. */
START_TEST(completion_queue_growth)
{
	struct r2_tp *a = host(1, 0, 0), *b = host(2, 0, 0);
	struct pollfd pf = { .fd = ops->event_fd(b), .events = POLLIN };
	struct r2_tp_cqe e[64];
	uint32_t want = 0;
	int n;

	connect_pair(a, b);
	for (uint32_t i = 0; i < 250; i++)
		send_chunk(a, 2, i, NULL, 0);
	for (int k = 0; k < 2; k++) { /* 128 out: the ring's head moves on */
		ck_assert_int_eq(ops->poll(b, e, 64), 64);
		for (int i = 0; i < 64; i++)
			ck_assert_uint_eq(e[i].hdr.chunk, want++);
	}
	ck_assert_int_eq(poll(&pf, 1, 0), 1);
	for (uint32_t i = 250; i < 700; i++) /* wraps, then grows twice */
		send_chunk(a, 2, i, NULL, 0);
	while ((n = ops->poll(b, e, 64)) > 0)
		for (int i = 0; i < n; i++) {
			ck_assert_int_eq(e[i].type, R2_TPC_RECV);
			ck_assert_uint_eq(e[i].hdr.chunk, want++);
		}
	ck_assert_int_eq(n, 0);
	ck_assert_uint_eq(want, 700);
	ck_assert_int_eq(poll(&pf, 1, 0), 0);
	ck_assert_int_eq(ops->poll(b, NULL, 1), -EINVAL);
	ops->close(a); /* a's 700 SENDs are dropped unpolled */
	ops->close(b);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("loopback");
	TCase *t = tcase_create("loopback");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, deliver_in_order);
	tcase_add_test(t, connect_errors);
	tcase_add_test(t, drop);
	tcase_add_test(t, late_send_completion);
	tcase_add_test(t, delay);
	tcase_add_test(t, reorder);
	tcase_add_test(t, duplicate);
	tcase_add_test(t, hold_and_backpressure);
	tcase_add_test(t, fail_and_reconnect);
	tcase_add_test(t, disconnect);
	tcase_add_test(t, link_down);
	tcase_add_test(t, close_peer);
	tcase_add_test(t, completion_queue_growth);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *r = srunner_create(suite());
	int failed;

	srunner_run_all(r, CK_NORMAL);
	failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
