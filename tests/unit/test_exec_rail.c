// SPDX-License-Identifier: MIT
/* Unit tests of the rail phase's pure pieces (daemon/exec_rail_*.c, through
 * exec_rail_int.h): the lazy input's set of regions W holds (init_mark,
 * init_cov) against a byte map, the cut of a step's transfers into chunks
 * (list_chunks), step_order's rule (order_held), the send/recv sequence numbers (p2p_slot, p2p_seq) and the
 * communicator mailbox's order (mbox_append, mbox_take, mbox_unget). */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/exec_rail_int.h"
#include "net/detour.h"
#include "util.h"

/* ---- lazy input: the regions of W that hold their data ---- */

/* The reference: 0/1/2 as init_cov answers, from a byte map. */
static int map_cov(const unsigned char *map, uint64_t a, uint64_t b)
{
	uint64_t got = 0;

	for (uint64_t i = a; i < b; i++)
		got += map[i];
	return !got ? 0 : got < b - a ? 1 : 2;
}

static void check_sorted_disjoint(const struct rail_lazy *in)
{
	for (size_t i = 0; i < in->ninit; i++) {
		ck_assert_uint_lt(in->init[i].a, in->init[i].b);
		/* merged: neither overlapping nor touching the next */
		if (i + 1 < in->ninit)
			ck_assert_uint_lt(in->init[i].b, in->init[i + 1].a);
	}
}

/* The range test of a peer's chunk (rl_apply, rl_relay): offsets that wrap
 * off + len past 2^64 are outside, whatever they wrap to */
START_TEST(test_chunk_range_no_wrap)
{
	ck_assert(rl_in_range(0, 16, 0, 16));
	ck_assert(rl_in_range(4096, 1024, 4096, 1024));
	ck_assert(rl_in_range(5000, 100, 4096, 1024));
	ck_assert(!rl_in_range(5100, 100, 4096, 1024)); /* past the end */
	ck_assert(!rl_in_range(4000, 100, 4096, 1024)); /* before the start */
	ck_assert(!rl_in_range(0, 17, 0, 16));
	ck_assert(!rl_in_range(UINT64_MAX - 7, 16, 0, 1 << 20)); /* wraps to 8 */
	ck_assert(!rl_in_range(UINT64_MAX - 7, 16, 4096, 1 << 20));
	ck_assert(!rl_in_range(UINT64_MAX, 1, 0, UINT64_MAX));
	ck_assert(rl_in_range(UINT64_MAX - 1, 1, 0, UINT64_MAX));
	ck_assert(!rl_in_range(8, UINT64_MAX, 0, 1 << 20));
}
END_TEST

START_TEST(test_lazy_regions_match_byte_map)
{
	enum { N = 4096 };
	static unsigned char map[N];
	struct rail_lazy in = { .S = "" }; /* any S: the set is kept */
	unsigned seed = 12345;

	memset(map, 0, sizeof(map));
	for (int round = 0; round < 400; round++) {
		uint64_t a = rand_r(&seed) % N, len = 1 + rand_r(&seed) % 200;
		uint64_t b = R2_MIN(N, a + len);
		ck_assert_int_eq(rl_init_mark(&in, a, b), 0);
		memset(map + a, 1, b - a);
		check_sorted_disjoint(&in);
		for (int q = 0; q < 20; q++) {
			/* R2_MIN evaluates its arguments twice: no rand_r() inside */
			uint64_t qa = rand_r(&seed) % N, qlen = 1 + rand_r(&seed) % 300;
			uint64_t qb = R2_MIN((uint64_t)N, qa + qlen);
			ck_assert_int_eq(rl_init_cov(&in, qa, qb), map_cov(map, qa, qb));
		}
	}
	free(in.init);
}
END_TEST

START_TEST(test_lazy_regions_merge)
{
	struct rail_lazy in = { .S = "" };

	ck_assert_int_eq(rl_init_mark(&in, 10, 20), 0);
	ck_assert_int_eq(rl_init_mark(&in, 30, 40), 0);
	ck_assert_int_eq(rl_init_mark(&in, 0, 5), 0);
	ck_assert_uint_eq(in.ninit, 3);
	ck_assert_int_eq(rl_init_cov(&in, 5, 10), 0);
	ck_assert_int_eq(rl_init_cov(&in, 15, 35), 1);
	/* touching regions merge into one */
	ck_assert_int_eq(rl_init_mark(&in, 20, 30), 0);
	ck_assert_uint_eq(in.ninit, 2);
	ck_assert_uint_eq(in.init[1].a, 10);
	ck_assert_uint_eq(in.init[1].b, 40);
	ck_assert_int_eq(rl_init_cov(&in, 10, 40), 2);
	/* one spanning all of them */
	ck_assert_int_eq(rl_init_mark(&in, 0, 50), 0);
	ck_assert_uint_eq(in.ninit, 1);
	ck_assert_int_eq(rl_init_cov(&in, 0, 50), 2);
	/* an empty region marks nothing */
	ck_assert_int_eq(rl_init_mark(&in, 60, 60), 0);
	ck_assert_uint_eq(in.ninit, 1);
	free(in.init);
}
END_TEST

START_TEST(test_lazy_without_input)
{
	struct rail_lazy in = { .S = NULL };

	/* W holds the input from the start: all of it, nothing recorded */
	ck_assert_int_eq(rl_init_cov(&in, 0, 1000), 2);
	ck_assert_int_eq(rl_init_mark(&in, 0, 10), 0);
	ck_assert_uint_eq(in.ninit, 0);
}
END_TEST

/* ---- the cut of transfers into chunks ---- */

START_TEST(test_chunks_cover_each_transfer)
{
	struct r2_xfer xf[] = {
		{ .peer = 1, .dir = R2_XFER_RECV, .off = 0, .len = 10u << 20 },
		{ .peer = 2, .dir = R2_XFER_SEND, .off = 0, .len = 4u << 20 },
		{ .peer = 3, .dir = R2_XFER_RECV, .off = 12u << 20, .len = 100 * 4 },
		{ .peer = 2, .dir = R2_XFER_RECV, .off = 20u << 20, .len = 3u << 20 },
		{ .peer = 4, .dir = R2_XFER_RECV, .off = 30u << 20, .len = 0 },
	};
	uint32_t spreads[] = { 1, 2, 3 };

	for (size_t k = 0; k < sizeof(spreads) / sizeof(spreads[0]); k++) {
		struct railop o = { .elem = 4, .chunk = 1u << 20, .spread = spreads[k] };
		ck_assert_int_eq(rl_list_chunks(&o, xf, 5, R2_XFER_RECV, false), 0);
		for (int i = 0; i < 5; i++) {
			uint64_t next = xf[i].off, n = 0;
			if (xf[i].dir != R2_XFER_RECV)
				continue;
			for (size_t j = 0; j < o.nrcv; j++) {
				const struct rpend *q = &o.rcv[j];
				if (q->off < xf[i].off || q->off >= xf[i].off + xf[i].len)
					continue;
				/* in order, contiguous, whole elements, at most a chunk */
				ck_assert_uint_eq(q->src, xf[i].peer);
				ck_assert_uint_eq(q->off, next);
				ck_assert_uint_eq(q->len % o.elem, 0);
				ck_assert_uint_gt(q->len, 0);
				ck_assert_uint_le(q->len, o.chunk);
				ck_assert(!q->done);
				next += q->len;
				n++;
			}
			ck_assert_uint_eq(next, xf[i].off + xf[i].len);
			/* every stream carries the same share of a transfer cut */
			if (n > 1)
				ck_assert_uint_eq(n % o.spread, 0);
		}
		/* the small one (400 bytes) is one chunk; the empty one none */
		size_t total = 0;
		for (size_t j = 0; j < o.nrcv; j++)
			total += o.rcv[j].len;
		ck_assert_uint_eq(total, (10u << 20) + 400 + (3u << 20));
		free(o.rcv);
	}
}
END_TEST

/* ---- the apply queue's busy set ---- */

/* Entries end by their job, not by their bytes: peers' chunks of one
 * region often have the same offset and length, and the message of a job
 * from before a drain (which empties the set) may come back after a later
 * job of the same bytes was queued. Matched by (off, len) it ended that
 * later job's entry, so a third chunk of the bytes ran beside it (a lost
 * sum on 8 hosts with a NIC down, 2026-12-05). */
START_TEST(test_busy_set_by_job)
{
	struct rail_applyq aq = { 0 };
	int j1 = 1, j2 = 2, j3 = 3;

	ck_assert_int_eq(rl_busy_add(&aq, 1000, 500, &j1), 0);
	ck_assert(rl_busy_overlaps(&aq, 1499, 10));
	ck_assert(!rl_busy_overlaps(&aq, 1500, 10)); /* touching is not meeting */
	ck_assert(!rl_busy_overlaps(&aq, 990, 10));
	aq.nbusy = 0; /* rl_apply_drain: every job done, their messages not taken yet */
	ck_assert_int_eq(rl_busy_add(&aq, 1000, 500, &j2), 0);
	rl_busy_done(&aq, &j1); /* j1's message, from before the drain */
	ck_assert(rl_busy_overlaps(&aq, 1200, 100)); /* j2 still writes there */
	ck_assert_int_eq(rl_busy_add(&aq, 0, 100, &j3), 0);
	rl_busy_done(&aq, &j2);
	ck_assert(!rl_busy_overlaps(&aq, 1000, 500));
	ck_assert(rl_busy_overlaps(&aq, 50, 1));
	rl_busy_done(&aq, &j3);
	ck_assert_uint_eq(aq.nbusy, 0);
	free(aq.busy);
}
END_TEST

/* ---- send/recv sequence numbers ---- */

START_TEST(test_p2p_counters_per_pair)
{
	struct r2_comm c;
	uint64_t *s12, *s21, seq;

	memset(&c, 0, sizeof(c));
	s12 = rl_p2p_slot(&c, 1, 2);
	ck_assert_ptr_nonnull(s12);
	ck_assert_uint_eq(*s12, 0);
	(*s12)++;
	s21 = rl_p2p_slot(&c, 2, 1);
	ck_assert_ptr_nonnull(s21);
	ck_assert_uint_eq(*s21, 0); /* its own counter */
	/* many pairs: the table grows and keeps every counter */
	for (uint32_t i = 0; i < 100; i++)
		*rl_p2p_slot(&c, 10 + i, 3) = i;
	ck_assert_uint_eq(*rl_p2p_slot(&c, 1, 2), 1);
	for (uint32_t i = 0; i < 100; i++)
		ck_assert_uint_eq(*rl_p2p_slot(&c, 10 + i, 3), i);
	ck_assert_uint_eq(c.np2p, 102);
	/* a transfer's sequence: flagged, never a collective's */
	seq = rl_p2p_seq(5, 7, 9);
	ck_assert(seq & P2P_BIT);
	ck_assert_uint_ne(seq, rl_p2p_seq(7, 5, 9));
	ck_assert_uint_ne(seq, rl_p2p_seq(5, 7, 10));
	free(c.p2p);
}
END_TEST

/* ---- step_order: a later step's chunk behind an earlier step's ---- */

/* rl_order_scan, then rl_order_held for x */
static bool held(struct railop *o, const struct r2_xfer *x, uint32_t step, uint64_t now)
{
	ck_assert_int_eq(rl_order_scan(o, step, now), 0);
	return rl_order_held(o, x);
}

/* rl_order_scan and rl_order_held against a list of sends of operation 7,
 * rail 0 unless said: which earlier-step chunks hold a step-2 chunk to host
 * 1 on rail 0 back (cost_nic_bw 1e9 B/s: 100 KB take 100 us, the bound 200
 * us) */
START_TEST(test_order_held_rule)
{
	struct r2_host hosts[4] = { { .id = 100 }, { .id = 101 }, { .id = 102 }, { .id = 103 } };
	struct r2_comm c = { .hosts = hosts, .nhosts = 4 };
	struct railop o = { .c = &c, .opseq = 7, .order_bw = 1e9 };
	struct r2_xfer x = { .peer = 1, .via = R2_NO_HOST, .rail = 0 };
	struct sendrec s = { .peer = 102, .posted = true, .post_us = 1000 };
	uint64_t now = 1150;

	s.hdr.opseq = 7;
	s.hdr.step = 1;
	s.hdr.len = 100000;
	o.tx.sends = &s;
	/* step 1's chunk to host 2, posted 150 us ago, unacknowledged: held */
	ck_assert(held(&o, &x, 2, now));
	/* bounded: past its time at cost_nic_bw + 100 us it holds nothing */
	ck_assert(!held(&o, &x, 2, 1000 + 100 + 100));
	ck_assert(held(&o, &x, 2, 1000 + 100 + 99));
	/* the same peer (one connection, in order anyway): not held */
	s.peer = 101;
	ck_assert(!held(&o, &x, 2, now));
	s.peer = 102;
	/* another rail, the same step, a later step, another operation, a
	 * transfer's chunk, acknowledged or not yet posted: not held */
	x.rail = 1;
	ck_assert(!held(&o, &x, 2, now));
	x.rail = 0;
	ck_assert(!held(&o, &x, 1, now));
	s.hdr.step = 3;
	ck_assert(!held(&o, &x, 2, now));
	s.hdr.step = 1;
	s.hdr.opseq = 6;
	ck_assert(!held(&o, &x, 2, now));
	s.hdr.opseq = 7;
	s.owner = &o;
	ck_assert(!held(&o, &x, 2, now));
	s.owner = NULL;
	s.acked = true;
	ck_assert(!held(&o, &x, 2, now));
	s.acked = false;
	s.posted = false;
	ck_assert(!held(&o, &x, 2, now));
	s.posted = true;
	/* bridged through host 2 (the chunk's next hop is host 2's): not held */
	x.via = 2;
	ck_assert(!held(&o, &x, 2, now));
	x.via = R2_NO_HOST;
	/* a step 0 chunk later in the list holds it too */
	struct sendrec s0 = s;
	s.acked = true;
	s0.hdr.step = 0;
	s.next = &s0;
	ck_assert(held(&o, &x, 2, now));
	/* each (rail, next hop) once, however many chunks occupy it */
	s.acked = false;
	s0.peer = 102;
	ck_assert(held(&o, &x, 2, now));
	ck_assert_uint_eq(o.tx.nholds, 1);
	s0.rail = 1;
	ck_assert(held(&o, &x, 2, now));
	ck_assert_uint_eq(o.tx.nholds, 2);
	free(o.tx.holds);
}
END_TEST

/* ---- the mailbox ---- */

static struct r2_rmsg *msg(int rail)
{
	struct r2_rmsg *m = calloc(1, sizeof(*m));

	ck_assert_ptr_nonnull(m);
	m->rail = rail;
	m->cqe.type = R2_TPC_CONN; /* no buffer to give back */
	return m;
}

START_TEST(test_mbox_order)
{
	struct r2_comm c;
	struct r2_rmsg *a, *b;

	memset(&c, 0, sizeof(c));
	pthread_mutex_init(&c.mbox_lock, NULL);
	pthread_cond_init(&c.mbox_cond, NULL);
	ck_assert_ptr_null(rl_mbox_take(&c, 0));
	ck_assert_ptr_null(rl_mbox_take(&c, 20)); /* waits, then nothing */
	for (int i = 0; i < 3; i++)
		rl_mbox_append(&c, msg(i), false);
	a = rl_mbox_take(&c, 0);
	b = rl_mbox_take(&c, 0);
	ck_assert_int_eq(a->rail, 0);
	ck_assert_int_eq(b->rail, 1);
	/* put back in their order, ahead of what is left */
	a->next = b;
	rl_mbox_unget(&c, a, b);
	for (int i = 0; i < 3; i++) {
		struct r2_rmsg *m = rl_mbox_take(&c, 0);
		ck_assert_ptr_nonnull(m);
		ck_assert_int_eq(m->rail, i);
		free(m);
	}
	ck_assert_ptr_null(rl_mbox_take(&c, 0));
	ck_assert_ptr_null(c.mbox_tail);
	/* a chunk back from the apply queue: one fewer in flight */
	c.apply_inflight = 1;
	rl_mbox_append(&c, msg(9), true);
	ck_assert_int_eq(c.apply_inflight, 0);
	free(rl_mbox_take(&c, 0));
	pthread_cond_destroy(&c.mbox_cond);
	pthread_mutex_destroy(&c.mbox_lock);
}
END_TEST

/* r2_p2p_progress (a GPU operation's wait for its streams, across hosts):
 * with no transfer in flight it takes nothing from the mailbox, which may
 * hold chunks of the collective about to run */
START_TEST(test_p2p_progress_idle)
{
	struct r2_comm c;
	struct r2_rmsg *m;

	memset(&c, 0, sizeof(c));
	pthread_mutex_init(&c.mbox_lock, NULL);
	pthread_cond_init(&c.mbox_cond, NULL);
	rl_mbox_append(&c, msg(3), false);
	ck_assert(!r2_p2p_progress(&c));
	m = rl_mbox_take(&c, 0);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->rail, 3);
	free(m);
	pthread_cond_destroy(&c.mbox_cond);
	pthread_mutex_destroy(&c.mbox_lock);
}
END_TEST

/* r2_p2p_pump takes at most R2_P2P_PUMP_MAX messages and leaves the rest:
 * each one it takes is handled (here: an ended collective's chunk, counted
 * and dropped). It took one more than it handled, lost, until 2026-12-07. */
START_TEST(test_p2p_pump_budget)
{
	struct r2d d;
	struct r2_comm c;
	char err[128];
	const int N = R2_P2P_PUMP_MAX + 77;

	memset(&d, 0, sizeof(d));
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(r2_params_init(&d.params, r2d_param_defs, P_COUNT, err, sizeof(err)), 0);
	c.d = &d;
	c.coll_seq = 10;
	c.gone_after = UINT64_MAX;
	pthread_mutex_init(&c.mbox_lock, NULL);
	pthread_cond_init(&c.mbox_cond, NULL);
	for (int i = 0; i < N; i++) {
		struct r2_rmsg *m = msg(0);
		m->cqe.type = R2_TPC_RECV; /* no buffer: nothing to give back */
		m->cqe.hdr.kind = R2_MSG_DATA;
		m->cqe.hdr.opseq = 5;
		rl_mbox_append(&c, m, false);
	}
	r2_p2p_pump(&c, 0, 0);
	uint64_t dropped = atomic_load(&d.chunks_dup_dropped);
	ck_assert_uint_eq(dropped, R2_P2P_PUMP_MAX);
	r2_p2p_pump(&c, 0, 0);
	dropped = atomic_load(&d.chunks_dup_dropped);
	ck_assert_uint_eq(dropped, N);
	ck_assert_ptr_null(rl_mbox_take(&c, 0));
	pthread_cond_destroy(&c.mbox_cond);
	pthread_mutex_destroy(&c.mbox_lock);
	r2_params_free(&d.params);
}
END_TEST

/* Which slot an eager message fills: only a piece this host makes, from
 * another host of the communicator, to this one. A header of the old
 * format (no piece count) named any piece index, and host 1's message with
 * index 1 took host 2's slot, until 2026-12-07. */
START_TEST(test_eager_slot)
{
	struct r2_chunk_hdr h;
	const uint64_t size = 1000 * 4;

	memset(&h, 0, sizeof(h));
	h.flags = R2_CHUNK_EAGER;
	h.src = 1;
	h.dst = 0;
	/* one piece: the old format (count 0) or the new (count 1), index 0 */
	h.len = (uint32_t)size;
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 1, size, 4), 1);
	h.chunk = 1u << 16;
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 1, size, 4), 1);
	h.chunk = 1; /* old format, index 1: no such piece */
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 1, size, 4), -1);
	h.chunk = 7;
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 1, size, 4), -1);
	/* two pieces of 500 elements */
	h.len = 2000;
	h.chunk = 2u << 16 | 1;
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), 3);
	h.chunk = 2u << 16 | 2;
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), -1);
	h.chunk = 3u << 16 | 1; /* another split */
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), -1);
	h.chunk = 2u << 16 | 1;
	h.len = 1996; /* not that piece's length */
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), -1);
	h.len = 2000;
	h.src = 3; /* no such host */
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), -1);
	h.src = 0; /* from itself */
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), -1);
	h.src = 2;
	h.dst = 1; /* to another host */
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), -1);
	h.dst = 0;
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), 5);
	h.flags = 0; /* not an eager message */
	ck_assert_int_eq(rl_eager_slot(&h, 3, 0, 2, size, 4), -1);
}
END_TEST

/* At a stop, a send completion of context 2 with no record (a TCP warm-up's
 * last message: WARMUP_CTX is 2, as is R2_DETOUR_TAG) is not a detour's:
 * before 2026-12-07 its record, NULL, was dereferenced (a crash when the
 * daemon stopped during a warm-up). */
START_TEST(test_detour_stop_untagged)
{
	struct r2d d;
	struct r2_tp_cqe c;

	memset(&d, 0, sizeof(d));
	memset(&c, 0, sizeof(c));
	c.type = R2_TPC_SEND;
	c.ctx = R2_DETOUR_TAG;
	ck_assert(!r2d_detour_sendc_at_stop(&d, &c));
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("exec_rail");
	TCase *t = tcase_create("rail");

	tcase_add_test(t, test_chunk_range_no_wrap);
	tcase_add_test(t, test_lazy_regions_match_byte_map);
	tcase_add_test(t, test_lazy_regions_merge);
	tcase_add_test(t, test_lazy_without_input);
	tcase_add_test(t, test_chunks_cover_each_transfer);
	tcase_add_test(t, test_busy_set_by_job);
	tcase_add_test(t, test_order_held_rule);
	tcase_add_test(t, test_p2p_counters_per_pair);
	tcase_add_test(t, test_mbox_order);
	tcase_add_test(t, test_p2p_progress_idle);
	tcase_add_test(t, test_p2p_pump_budget);
	tcase_add_test(t, test_eager_slot);
	tcase_add_test(t, test_detour_stop_untagged);
	suite_add_tcase(s, t);
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
