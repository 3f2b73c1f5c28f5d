// SPDX-License-Identifier: MIT
/* Unit tests of the engine (daemon/engine/): communicators formed through
 * the real bootstrap (JOIN / MEMBERSHIP over loopback rails) and every
 * collective and send/recv run by the real dispatcher, executors and rail
 * phase between several hosts of one process (engine_harness.h), each result
 * checked element by element against its definition. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine_harness.h"
#include "net/tenants.h"
#include "engine/exec_rail_int.h"

#define T_MS 10000

static int32_t val(int rank, uint64_t i)
{
	return (int32_t)((rank + 1) * 1000 + (int64_t)(i % 977)) - 500;
}

/* One AllReduce of count int32 on the n ranks over their buffers in, out
 * (memory regions im, om), every result checked. */
static void one_allreduce(struct th_sess **ss, int n, uint64_t count, uint32_t redop,
			  int32_t *const *out, const uint32_t *im, const uint32_t *om)
{
	uint64_t tag[16];

	for (int r = 0; r < n; r++)
		memset(out[r], 0, count * 4);
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_ALLREDUCE, count, R2CCL_INT32, redop, 0, im[r],
				   om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (uint64_t i = 0; i < count; i++) {
		int32_t want = val(0, i);
		for (int r = 1; r < n; r++)
			want = redop == R2CCL_MAX ? (val(r, i) > want ? val(r, i) : want)
						  : want + val(r, i);
		for (int r = 0; r < n; r++)
			TH_CHECK(out[r][i] == want, "rank %d element %llu: %d, want %d", r,
				      (unsigned long long)i, out[r][i], want);
	}
}

/* AllReduce (SUM or MAX) of count int32 over n ranks, `times` times over
 * the same buffers (a session holds 8 memory regions). */
static void allreduce_loop(struct th_sess **ss, int n, uint64_t count, uint32_t redop, int times)
{
	int32_t *in[16], *out[16];
	uint32_t im[16], om[16];

	for (int r = 0; r < n; r++) {
		im[r] = th_mem(ss[r], count * 4, (void **)&in[r]);
		om[r] = th_mem(ss[r], count * 4, (void **)&out[r]);
		for (uint64_t i = 0; i < count; i++)
			in[r][i] = val(r, i);
	}
	for (int k = 0; k < times; k++)
		one_allreduce(ss, n, count, redop, out, im, om);
}

static void allreduce(struct th_sess **ss, int n, uint64_t count, uint32_t redop)
{
	allreduce_loop(ss, n, count, redop, 1);
}

/* two hosts, one rank each, two rails: a multi-chunk AllReduce (1 MB, 64 KB
 * chunks) and a small one (inline on the dispatcher), then a MAX */
START_TEST(test_allreduce_two_hosts)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	allreduce(ss, 2, 256 * 1024, R2CCL_SUM);
	allreduce(ss, 2, 100, R2CCL_SUM);
	allreduce(ss, 2, 50000, R2CCL_MAX);
	th_free_all(hs, 2);
}
END_TEST

/* The tenant's row of host h (net/tenants.h). */
static struct r2_tenant_row tenant_row(struct th_host *h, const char *name)
{
	struct r2_tenant_row rows[R2_SCHED_MAX_TENANTS];
	int n = r2d_tenants_rows(&h->d, rows, R2_SCHED_MAX_TENANTS);

	for (int i = 0; i < n; i++)
		if (!strcmp(rows[i].pol.name, name))
			return rows[i];
	ck_abort_msg("no tenant %s", name);
	return rows[0];
}

/* Tenants on the rails' send path: an AllReduce's chunks go through its
 * tenant's queues (bytes counted); a cap of 40 Mbit/s on both hosts makes
 * 1 MB per host take at least (1 MB - burst) / 5 MB/s, throttled, and the
 * result stays right; sched = 0 sends straight to the transports, bytes
 * still counted. */
START_TEST(test_tenant_cap)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	struct r2_tenant_policy p;
	uint64_t t0, fast_ms, slow_ms, b0[2], per_op[2], thr[2];

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	t0 = th_now_ms();
	allreduce(ss, 2, 256 * 1024, R2CCL_SUM);
	fast_ms = th_now_ms() - t0;
	for (int i = 0; i < 2; i++) {
		struct r2_tenant_row w = tenant_row(hs[i], "test");
		/* ring of two hosts: half the buffer each way in each of the two phases */
		ck_assert_uint_ge(w.bytes, 1u << 20);
		ck_assert_uint_eq(w.queued, 0);
		b0[i] = per_op[i] = w.bytes;
		ck_assert(r2d_tenants_policy_get(&hs[i]->d, "test", &p));
		p.rate_bps = 40000000;
		ck_assert_int_ge(r2d_tenants_policy_set(&hs[i]->d, &p), 0);
	}
	t0 = th_now_ms();
	allreduce(ss, 2, 256 * 1024, R2CCL_SUM);
	slow_ms = th_now_ms() - t0;
	/* (1 MB - 100 KB burst) at 5 MB/s: 190 ms at least */
	ck_assert_msg(slow_ms >= 180, "capped AllReduce took %llu ms (uncapped %llu ms)",
		      (unsigned long long)slow_ms, (unsigned long long)fast_ms);
	for (int i = 0; i < 2; i++) {
		struct r2_tenant_row w = tenant_row(hs[i], "test");
		ck_assert_uint_eq(w.rate_bps, 40000000);
		ck_assert_uint_eq(w.burst_bytes, 100000);
		ck_assert_uint_gt(w.throttled_us, 100000);
		ck_assert_uint_eq(w.bytes - b0[i], per_op[i]); /* the same bytes again */
		ck_assert_uint_eq(w.queued, 0);
		b0[i] = w.bytes;
		thr[i] = w.throttled_us;
		r2d_tenants_configure(&hs[i]->d, false, 0, 0, 0, false);
	}
	/* scheduler off: straight to the transports, not throttled. Not timed
	 * against the capped run (a loaded machine can make an uncapped run
	 * as slow): no chunk waited on the tenant's bucket, though the cap of
	 * 40 Mbit/s is still set and 1 MB is far past its burst. */
	allreduce(ss, 2, 256 * 1024, R2CCL_SUM);
	for (int i = 0; i < 2; i++) {
		struct r2_tenant_row w = tenant_row(hs[i], "test");
		ck_assert_uint_eq(w.bytes - b0[i], per_op[i]);
		ck_assert_msg(w.throttled_us == thr[i], "sched = 0 still throttled (%llu us more)",
			      (unsigned long long)(w.throttled_us - thr[i]));
		ck_assert_uint_eq(w.rate_bps, 40000000);
	}
	th_free_all(hs, 2);
}
END_TEST

/* A tenant's max_proxy: its chunks hold at most that many proxy buffer
 * bytes at once (a chunk past it waits for the tenant's own buffers to come
 * back with their acks), and the transfer still arrives whole; without the
 * quota the same transfer holds more. The bytes go back to 0. */
static void send_recv_proxy(struct th_sess **ss, uint64_t cnt, uint32_t m0, uint32_t n1,
			    const int32_t *b0, const int32_t *r1)
{
	uint64_t t0 = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, m0, 0);
	uint64_t t1 = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, n1);

	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), 0);
	ck_assert_mem_eq(r1, b0, cnt * 4);
	for (int k = 0; k < 200 && tenant_row(ss[0]->h, "test").proxy_bytes; k++)
		th_pump(10);
	ck_assert_uint_eq(tenant_row(ss[0]->h, "test").proxy_bytes, 0);
}

START_TEST(test_tenant_proxy_quota)
{
	static const char *const prm[] = { "chunk_size=65536", "tcp_zero_copy=0", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[2];
	struct r2_tenant_policy p;
	const uint64_t cnt = 1u << 20; /* 4 MiB: 64 chunks */
	int32_t *b0, *r1;
	uint32_t m0, n1;
	struct r2_tenant_row w;

	th_cluster(hs, 2, 1, 0x1, ss, prm);
	m0 = th_mem(ss[0], cnt * 4, (void **)&b0);
	n1 = th_mem(ss[1], cnt * 4, (void **)&r1);
	for (uint64_t i = 0; i < cnt; i++)
		b0[i] = val(0, i);
	ck_assert_int_ge(r2d_tenants_of(&hs[0]->d, "test"), 0); /* made on first use */
	ck_assert(r2d_tenants_policy_get(&hs[0]->d, "test", &p));
	p.max_proxy = 2 * 65536;
	ck_assert_int_ge(r2d_tenants_policy_set(&hs[0]->d, &p), 0);
	send_recv_proxy(ss, cnt, m0, n1, b0, r1);
	w = tenant_row(hs[0], "test");
	ck_assert_uint_gt(w.proxy_high, 0);
	ck_assert_uint_le(w.proxy_high, 2 * 65536);
	ck_assert_uint_gt(w.proxy_waits, 0);
	/* no quota: the same transfer holds more at once */
	p.max_proxy = 0;
	ck_assert_int_ge(r2d_tenants_policy_set(&hs[0]->d, &p), 0);
	memset(r1, 0, cnt * 4);
	send_recv_proxy(ss, cnt, m0, n1, b0, r1);
	w = tenant_row(hs[0], "test");
	ck_assert_msg(w.proxy_high > 2 * 65536, "without max_proxy the most held was %llu bytes",
		      (unsigned long long)w.proxy_high);
	th_free_all(hs, 2);
}
END_TEST

/* three hosts of two ranks each: local phase, rail phase, local phase */
START_TEST(test_allreduce_three_hosts_two_ranks)
{
	struct th_host *hs[3];
	struct th_sess *ss[6];

	th_cluster(hs, 3, 2, 0x3, ss, NULL);
	allreduce(ss, 6, 100000, R2CCL_SUM);
	th_free_all(hs, 3);
}
END_TEST

/* On nhosts hosts of one rank each (2 rails), with params: an AllReduce of
 * each of the n int32 counts (SUM, exact results), of which neager took the
 * eager path on every host. */
static void eager_case(int nhosts, const char *const *params, const uint64_t *counts, int n,
		       uint64_t neager)
{
	struct th_host *hs[4];
	struct th_sess *ss[4];

	th_cluster(hs, nhosts, 1, 0x3, ss, params);
	for (int i = 0; i < n; i++)
		allreduce(ss, nhosts, counts[i], R2CCL_SUM);
	for (int h = 0; h < nhosts; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), neager);
	th_free_all(hs, nhosts);
}

/* Hosts that cut a transfer into chunks differently (tcp_streams, which
 * follows the cores when not set, or chunk_size differ): a receive is done
 * when its bytes are all in, whatever the sender's cut. Before 2026-12-05 a
 * receive was done at the first chunk at its offset, so a host cutting more
 * coarsely than its peer sent bytes on in the next step before the rest of
 * them had come: wrong sums. */
START_TEST(test_allreduce_mixed_chunk_cuts)
{
	struct th_host *hs[3];
	struct th_sess *ss[3];
	const int streams[3] = { 1, 3, 4 };

	th_cluster(hs, 3, 1, 0x3, ss, NULL);
	for (int h = 0; h < 3; h++)
		hs[h]->d.rails->tcp_streams = streams[h];
	for (int i = 0; i < 3; i++)
		allreduce(ss, 3, 1u << 20, R2CCL_SUM); /* 4 MB: 64 KB chunks */
	th_free_all(hs, 3);
}
END_TEST

/* Every eager message of host h (of 20 AllReduces back to back on 2
 * hosts) is answered once: taken as acknowledged when the peer's next
 * message comes (acks_implied_total of h), or by an ACK the peer wrote
 * after waiting R2_ACK_OWED_US for a collective of its own
 * (acks_owed_sent_total of the peer: the last one at least, no collective
 * follows it). Exact results; nothing is left lingering at the end (the
 * harness's free, under ASan in CI, finds no record left). */
struct lazy_arg {
	struct th_host **hs;
	uint64_t want;
};

static bool lazy_answered(void *arg)
{
	struct lazy_arg *a = arg;

	for (int h = 0; h < 2; h++)
		if (atomic_load(&a->hs[h]->d.acks_implied_total) +
			    atomic_load(&a->hs[1 - h]->d.acks_owed_sent_total) <
		    a->want)
			return false;
	return true;
}

START_TEST(test_eager_lazy_acks)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	struct lazy_arg a = { hs, 20 };

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	allreduce_loop(ss, 2, 100, R2CCL_SUM, 20);
	for (int h = 0; h < 2; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), 20);
	ck_assert(th_until(lazy_answered, &a, T_MS));
	/* the last message of each host had no next one to answer it */
	for (int h = 0; h < 2; h++)
		ck_assert_uint_ge(atomic_load(&hs[h]->d.acks_owed_sent_total), 1);
	/* and most were answered by the next message, not by an ACK (one
	 * host's collective ends with the other's message in hand: its own
	 * next message answers it) */
	ck_assert_uint_ge(atomic_load(&hs[0]->d.acks_implied_total) +
				  atomic_load(&hs[1]->d.acks_implied_total),
			  1);
	th_free_all(hs, 2);
}
END_TEST

/* The same by the planner's plan (eager_max 0): 20 small AllReduces on 2
 * hosts x 2 rails, each host's descriptor and last-step chunks of each
 * flagged lazy (at least 2 messages an operation: 40 answered per host,
 * implied by the peer's next descriptor or by an ACK it wrote after
 * R2_ACK_OWED_US); most implied. Exact results (allreduce_loop). Then a
 * large one (over R2_LAZY_OP_MAX: acknowledged at once, as before) and a
 * small one again: exact. */
START_TEST(test_plan_lazy_acks)
{
	const char *const params[] = { "eager_max=0", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[2];
	struct lazy_arg a = { hs, 40 };
	uint64_t implied;

	/* an owed ACK after 2 s, not 1 ms: the test thread's gap between two
	 * operations (longer than 1 ms on a loaded machine) must not decide
	 * which answers them (set before any thread reads it) */
	const uint64_t owed_us = rl_ack_owed_us;
	rl_ack_owed_us = 2000000;
	th_cluster(hs, 2, 1, 0x3, ss, params);
	allreduce_loop(ss, 2, 100, R2CCL_SUM, 20);
	for (int h = 0; h < 2; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), 0);
	ck_assert(th_until(lazy_answered, &a, T_MS));
	implied = atomic_load(&hs[0]->d.acks_implied_total) +
		  atomic_load(&hs[1]->d.acks_implied_total);
	ck_assert_uint_ge(implied, 40);
	allreduce(ss, 2, 1u << 19, R2CCL_SUM); /* 2 MB */
	allreduce(ss, 2, 100, R2CCL_MAX);
	th_free_all(hs, 2);
	rl_ack_owed_us = owed_us; /* (for the cases after it when not forked) */
}
END_TEST

/* An executor that waits only for its lingering messages' answers is woken
 * by the next operation queued, also when it was queued while the executor
 * busy-polled (exec_spin_us) on its way to that wait: the wake-up was lost
 * there, and every small AllReduce of a loop on the 16-core machine took
 * the 5 ms of rl_linger_look_ms. With it and rl_ack_owed_us (the other
 * bound of that wait) made 60 s here, a lost wake-up is a failed th_wait;
 * the long busy-poll makes the next submission land in it. */
START_TEST(test_eager_loop_spinning)
{
	static const char *const p[] = { "exec_spin_us=20000", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[2];
	const int look_ms = rl_linger_look_ms;
	const uint64_t owed_us = rl_ack_owed_us;

	rl_linger_look_ms = 60000;
	rl_ack_owed_us = 60000000;
	th_cluster(hs, 2, 1, 0x3, ss, p);
	allreduce_loop(ss, 2, 100, R2CCL_SUM, 10);
	for (int h = 0; h < 2; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), 10);
	th_free_all(hs, 2);
	rl_linger_look_ms = look_ms; /* (for the cases after it when not forked) */
	rl_ack_owed_us = owed_us;
}
END_TEST

/* Small AllReduces across hosts go eager (exec_rail_eager.c: one message
 * each way, in a piece per rail above 64 KiB), larger ones by the
 * planner's schedule, mixed in one communicator; exact results; the eager
 * count says which path ran. (The unit tests' chunk_size is 64 KiB, and an
 * eager piece is at most a chunk.) */
START_TEST(test_allreduce_eager)
{
	struct th_host *hs[4];
	struct th_sess *ss[6];
	enum { NQ = 4 }; /* a session holds 8 memory regions */
	int32_t *in[2][NQ], *out[2][NQ];
	uint32_t im[2][NQ], om[2][NQ];
	uint64_t tag[2][NQ];
	/* the second by the planner, the fourth eager in 2 pieces */
	const uint64_t cnt[NQ] = { 1, 100000, 37, 20001 };

	/* 1 eager; 100000 by the planner (200 KB pieces > a chunk); 16385 in
	 * 2 pieces, 8192 and 8193 elements; 32769 by the planner (a piece
	 * would pass a chunk) */
	eager_case(2, NULL, (const uint64_t[]){ 1, 100000, 16385, 32769 }, 4, 2);
	/* chunks of 1 MiB: eager up to the default eager_max (512 KiB), the
	 * planner's beyond */
	eager_case(2, (const char *const[]){ "chunk_size=1M", NULL },
		   (const uint64_t[]){ 131072, 131073 }, 2, 1);
	/* eager_max 64 KiB: the planner's from 64 KiB + 1 (the old rule) */
	eager_case(2, (const char *const[]){ "eager_max=65536", NULL },
		   (const uint64_t[]){ 16384, 16385 }, 2, 1);
	/* eager_max 0: never eager, not even 4 bytes */
	eager_case(2, (const char *const[]){ "eager_max=0", NULL }, (const uint64_t[]){ 1 }, 1,
		   0);
	/* 4 hosts: eager up to 64 KiB, the planner's above (eager would send
	 * 3 x the bytes), whatever the NICs' speed */
	eager_case(4, (const char *const[]){ "cost_nic_bw=1250000000", NULL },
		   (const uint64_t[]){ 16384, 20000 }, 2, 1);
	/* eager_hosts 8: above 64 KiB on 3 and 4 hosts where the cost model
	 * puts eager's one step under the log-step plans. NICs of 10 Gbit/s,
	 * alpha 200 us, 2 rails: 80 KB eager (4 hosts: 296 us against
	 * recursive doubling's 464), 512 KB by the planner (829 against 820);
	 * in pieces of at most a chunk (1 MiB here) */
	eager_case(4, (const char *const[]){ "eager_hosts=8", "cost_nic_bw=1250000000",
					      "chunk_size=1M", NULL },
		   (const uint64_t[]){ 20000, 131072 }, 2, 1);
	eager_case(3, (const char *const[]){ "eager_hosts=8", "cost_nic_bw=1250000000",
					      "chunk_size=1M", NULL },
		   (const uint64_t[]){ 20000, 65537 }, 2, 2);
	/* the default model (1 Gbit/s NICs): 80 KB on 4 hosts by the planner
	 * (1160 us against 1040), eager_hosts or not */
	eager_case(4, (const char *const[]){ "eager_hosts=8", "chunk_size=1M", NULL },
		   (const uint64_t[]){ 20000 }, 1, 0);

	/* queued back to back, small and large mixed: a host ahead sends the
	 * next operation's message while the other still runs this one */
	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	for (int q = 0; q < NQ; q++) {
		for (int r = 0; r < 2; r++) {
			im[r][q] = th_mem(ss[r], cnt[q] * 4, (void **)&in[r][q]);
			om[r][q] = th_mem(ss[r], cnt[q] * 4, (void **)&out[r][q]);
			for (uint64_t i = 0; i < cnt[q]; i++)
				in[r][q][i] = val(r, i + (uint64_t)q);
		}
	}
	for (int r = 0; r < 2; r++)
		for (int q = 0; q < NQ; q++)
			tag[r][q] = th_submit(ss[r], R2_OP_ALLREDUCE, cnt[q], R2CCL_INT32,
					      R2CCL_SUM, 0, im[r][q], om[r][q]);
	for (int q = 0; q < NQ; q++)
		for (int r = 0; r < 2; r++)
			ck_assert_int_eq(th_wait(ss[r], tag[r][q], T_MS), 0);
	for (int q = 0; q < NQ; q++)
		for (uint64_t i = 0; i < cnt[q]; i++)
			for (int r = 0; r < 2; r++)
				TH_CHECK(out[r][q][i] == val(0, i + (uint64_t)q) + val(1, i + (uint64_t)q),
					 "op %d rank %d element %llu", q, r, (unsigned long long)i);
	for (int h = 0; h < 2; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), NQ - 1);
	th_free_all(hs, 2);

	/* three hosts of two ranks: local phase, eager exchange, local phase */
	th_cluster(hs, 3, 2, 0x3, ss, NULL);
	allreduce(ss, 6, 1000, R2CCL_SUM);
	allreduce(ss, 6, 7, R2CCL_MAX);
	for (int h = 0; h < 3; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), 2);
	th_free_all(hs, 3);
}
END_TEST

/* AllGather, ReduceScatter, Broadcast, Reduce on nhosts hosts of rph
 * ranks each */
static void other_collectives(int nhosts, int rph, const char *const *params)
{
	struct th_host *hs[8];
	struct th_sess *ss[8];
	const int n = nhosts * rph;
	const uint64_t cnt = 30000;
	int32_t *in[8], *out[8];
	uint32_t im[8], om[8];
	uint64_t tag[8];

	th_cluster(hs, nhosts, rph, 0x3, ss, params);
	for (int r = 0; r < n; r++) {
		im[r] = th_mem(ss[r], cnt * n * 4, (void **)&in[r]);
		om[r] = th_mem(ss[r], cnt * n * 4, (void **)&out[r]);
		for (uint64_t i = 0; i < cnt * n; i++)
			in[r][i] = val(r, i);
	}
	/* AllGather: rank r's cnt elements at r * cnt everywhere */
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_ALLGATHER, cnt, R2CCL_INT32, 0, 0, im[r], om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < n; r++)
		for (int q = 0; q < n; q++)
			for (uint64_t i = 0; i < cnt; i++)
				TH_CHECK(out[r][q * cnt + i] == val(q, i), "allgather rank %d block %d", r, q);
	/* ReduceScatter: rank r gets the sum of block r */
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_REDUCESCATTER, cnt, R2CCL_INT32, R2CCL_SUM, 0,
				   im[r], om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < n; r++)
		for (uint64_t i = 0; i < cnt; i++) {
			int32_t want = 0;
			for (int q = 0; q < n; q++)
				want += val(q, r * cnt + i);
			TH_CHECK(out[r][i] == want, "reducescatter rank %d", r);
		}
	/* Broadcast from rank 1 */
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_BROADCAST, cnt, R2CCL_INT32, 0, 1, im[r], om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < n; r++)
		for (uint64_t i = 0; i < cnt; i++)
			TH_CHECK(out[r][i] == val(1, i), "broadcast rank %d", r);
	/* Reduce to the last rank */
	memset(out[n - 1], 0, cnt * 4);
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_REDUCE, cnt, R2CCL_INT32, R2CCL_SUM, n - 1, im[r],
				   om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (uint64_t i = 0; i < cnt; i++) {
		int32_t want = 0;
		for (int q = 0; q < n; q++)
			want += val(q, i);
		TH_CHECK(out[n - 1][i] == want, "reduce element %llu", (unsigned long long)i);
	}
	th_free_all(hs, nhosts);
}

START_TEST(test_other_collectives)
{
	other_collectives(3, 1, NULL);
}
END_TEST

/* two ranks per host (the local phases), with a reduction pool of two
 * threads and an apply thread */
START_TEST(test_other_collectives_two_ranks)
{
	static const char *const p[] = { "reduce_threads=2", "apply_threads=1", NULL };

	other_collectives(2, 2, p);
}
END_TEST

/* one host, three ranks: the local executor only, with a reduction pool
 * of two threads; then send/recv between two of its ranks */
START_TEST(test_local_collectives)
{
	static const char *const p[] = { "reduce_threads=2", NULL };
	struct th_host *hs[1];
	struct th_sess *ss[2];
	const uint64_t cnt = 100000;
	int32_t *b0, *r1;
	uint32_t m0, n1;
	uint64_t t0, t1;

	other_collectives(1, 3, p);
	th_cluster(hs, 1, 2, 0x1, ss, p);
	m0 = th_mem(ss[0], cnt * 4, (void **)&b0);
	n1 = th_mem(ss[1], cnt * 4, (void **)&r1);
	for (uint64_t i = 0; i < cnt; i++)
		b0[i] = val(0, i);
	t1 = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, n1);
	t0 = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, m0, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), 0);
	ck_assert_mem_eq(r1, b0, cnt * 4);
	th_free_all(hs, 1);
}
END_TEST

START_TEST(test_allreduce_threads)
{
	static const char *const p[] = { "reduce_threads=2", "apply_threads=1", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[4];

	th_cluster(hs, 2, 2, 0x3, ss, p);
	allreduce(ss, 4, 1 << 20, R2CCL_SUM);
	th_free_all(hs, 2);
}
END_TEST

/* With an apply thread: an AllReduce of 1 MB by the plan (over eager_max)
 * applies its received chunks on the executor, none on the apply queue (a
 * latency-bound operation: exec_rail_apply.c APPLY_INLINE_OP_MAX); one of
 * 4 MB queues them; both exact. */
START_TEST(test_apply_inline_latency_bound)
{
	static const char *const p[] = { "apply_threads=1", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[2];

	th_cluster(hs, 2, 1, 0x3, ss, p);
	allreduce_loop(ss, 2, 256 * 1024, R2CCL_SUM, 3);
	for (int h = 0; h < 2; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.chunks_applyq_total), 0);
	allreduce(ss, 2, 1 << 20, R2CCL_SUM);
	for (int h = 0; h < 2; h++)
		ck_assert_uint_gt(atomic_load(&hs[h]->d.chunks_applyq_total), 0);
	th_free_all(hs, 2);
}
END_TEST

/* step_order on every log-step plan (step_order=1) on 8 hosts x 2 rails,
 * the log-step plans allowed there (logstep_hosts=8) and chosen: AllReduces
 * of 256 KB, 1 MB and an odd ~4 MB, exact (a chunk held behind another
 * step's must still go, once, and every wait end); chunks were held.
 * Holds made certain: host 0's messages arrive 5 ms late, so its chunks of
 * one step are still unacknowledged when the next step's are ready (its
 * peer's data come at once), and a chunk may wait 64 ms (a 64 KB chunk at
 * cost_nic_bw 1 MB/s; cost_alpha_us scaled with it, 250 ms = 2 ms at 1
 * Gbit/s, so that the log-step plans are chosen). Without the delay, a
 * hold depended on whether host 0 ran late (none in one ASan run). */
START_TEST(test_step_order_eight_hosts)
{
	static const char *const p[] = { "eager_max=0", "step_order=1", "logstep_hosts=8",
					 "cost_nic_bw=1000000", "cost_alpha_us=250000", NULL };
	struct th_host *hs[8];
	struct th_sess *ss[8];

	th_cluster(hs, 8, 1, 0x3, ss, p);
	for (int r = 0; r < 2; r++)
		for (int h = 1; h < 8; h++)
			ck_assert_int_eq(r2_lb_delay(th_tp(hs[0], r), hs[h]->d.host_id, 5000), 0);
	allreduce_loop(ss, 8, 64 * 1024, R2CCL_SUM, 3);
	allreduce_loop(ss, 8, 256 * 1024, R2CCL_SUM, 2);
	allreduce(ss, 8, 1000003, R2CCL_SUM);
	uint64_t holds = 0;
	for (int h = 0; h < 8; h++)
		holds += atomic_load(&hs[h]->d.order_holds_total);
	ck_assert_uint_gt(holds, 0);
	th_free_all(hs, 8);
}
END_TEST

/* Bruck's schedule (logstep=bruck) on 5 and 7 hosts x 2 rails, the
 * log-step plans allowed there and chosen (alpha 2 ms): AllReduces of 3
 * elements (empty pieces), 16 Ki elements and an odd ~400 KB, then
 * AllGather and ReduceScatter, every element exact; each host ran every
 * AllReduce by a Bruck plan. */
START_TEST(test_bruck_hosts)
{
	static const char *const p[] = { "eager_max=0", "logstep=bruck", "logstep_hosts=8",
					 "cost_alpha_us=2000", NULL };
	const int ns[] = { 5, 7 };
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		struct th_host *hs[8];
		struct th_sess *ss[8];
		int n = ns[i];

		th_cluster(hs, n, 1, 0x3, ss, p);
		allreduce(ss, n, 3, R2CCL_SUM);
		allreduce_loop(ss, n, 16 * 1024, R2CCL_SUM, 2);
		allreduce(ss, n, 100003, R2CCL_SUM);
		for (int h = 0; h < n; h++)
			ck_assert_uint_eq(atomic_load(&hs[h]->d.bruck_ops_total), 4);
		th_free_all(hs, n);
	}
	other_collectives(5, 1, p);
}
END_TEST

/* Send/Recv between hosts, both directions, then a mismatch refused */
START_TEST(test_send_recv)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	const uint64_t cnt = 200000;
	int32_t *b0, *b1, *r0, *r1;
	uint32_t m0, m1, n0, n1;
	uint64_t t0, t1;

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	m0 = th_mem(ss[0], cnt * 4, (void **)&b0);
	m1 = th_mem(ss[1], cnt * 4, (void **)&b1);
	n0 = th_mem(ss[0], cnt * 4, (void **)&r0);
	n1 = th_mem(ss[1], cnt * 4, (void **)&r1);
	for (uint64_t i = 0; i < cnt; i++) {
		b0[i] = val(0, i);
		b1[i] = val(1, i);
	}
	t0 = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, m0, 0);
	t1 = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, n1);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), 0);
	ck_assert_mem_eq(r1, b0, cnt * 4);
	/* the receive first this time */
	t0 = th_submit(ss[0], R2_OP_RECV, cnt, R2CCL_INT32, 0, 1, 0, n0);
	th_pump(20);
	t1 = th_submit(ss[1], R2_OP_SEND, cnt, R2CCL_INT32, 0, 0, m1, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), 0);
	ck_assert_mem_eq(r0, b1, cnt * 4);
	/* to itself, and with a buffer out of range: refused at submission */
	t0 = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 0, m0, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), -EINVAL);
	t0 = th_submit(ss[0], R2_OP_SEND, cnt + 1, R2CCL_INT32, 0, 1, m0, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), R2CCL_E_BAD_BUFFER);
	th_free_all(hs, 2);
}
END_TEST

/* A pair's 2^21-th transfer: its chunks carry the counter's low 21 bits,
 * 0 again. The receiver has posted the first of three receives, the
 * sender sends all three (a send completes once written): the chunks of
 * the third, past the wrap, reach the receiver while its counter is still
 * below the wrap. Compared as plain numbers they were taken for old
 * duplicates and dropped after their ACK: that receive timed out. */
START_TEST(test_send_recv_counter_wrap)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	const uint64_t cnt = 1000;
	int32_t *b[3], *r[3];
	uint32_t mb[3], mr[3];
	uint64_t ts[3], tr[3];

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	for (int h = 0; h < 2; h++) {
		uint64_t *slot = rl_p2p_slot(hs[h]->d.comms, 0, 1);
		ck_assert_ptr_nonnull(slot);
		*slot = R2_P2P_CTR_MASK - 1; /* the third transfer is past the wrap */
	}
	for (int k = 0; k < 3; k++) {
		mb[k] = th_mem(ss[0], cnt * 4, (void **)&b[k]);
		mr[k] = th_mem(ss[1], cnt * 4, (void **)&r[k]);
		for (uint64_t i = 0; i < cnt; i++)
			b[k][i] = val(k, i) + 17 * k;
	}
	tr[0] = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, mr[0]);
	th_pump(20);
	for (int k = 0; k < 3; k++)
		ts[k] = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, mb[k], 0);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(th_wait(ss[0], ts[k], T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], tr[0], T_MS), 0);
	th_pump(50); /* the other two transfers' chunks at host 1 before its receives */
	for (int k = 1; k < 3; k++)
		tr[k] = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, mr[k]);
	for (int k = 1; k < 3; k++)
		ck_assert_int_eq(th_wait(ss[1], tr[k], 3000), 0);
	for (int k = 0; k < 3; k++)
		ck_assert_mem_eq(r[k], b[k], cnt * 4);
	/* the order across the wrap (serial-number arithmetic) */
	ck_assert(r2_p2p_ctr_before(R2_P2P_CTR_MASK, 0));
	ck_assert(!r2_p2p_ctr_before(0, R2_P2P_CTR_MASK));
	ck_assert(r2_p2p_ctr_before(5, 7) && !r2_p2p_ctr_before(7, 5) && !r2_p2p_ctr_before(7, 7));
	th_free_all(hs, 2);
}
END_TEST

/* A send blocked on its proxy pool, and behind it on the same executor a
 * collective whose peer calls it only once its receive of that send is
 * done (a GPU stream orders them so): the collective's waits refill the
 * send. Before, only the executor's idle pump did: both waited to
 * op_timeout_ms. */
START_TEST(test_send_blocked_behind_collective)
{
	static const char *const p[] = { "proxy_pool_max=2M", "proxy_buf_size=1M", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[2];
	const uint64_t cnt = 2u << 20; /* 8 MB: four times the pool */
	int32_t *b, *r, *in[2], *out[2];
	uint32_t mb, mr, mi[2], mo[2];
	uint64_t ts, tr, ta[2];

	th_cluster(hs, 2, 1, 0x3, ss, p);
	mb = th_mem(ss[0], cnt * 4, (void **)&b);
	mr = th_mem(ss[1], cnt * 4, (void **)&r);
	for (uint64_t i = 0; i < cnt; i++)
		b[i] = val(0, i);
	for (int k = 0; k < 2; k++) {
		mi[k] = th_mem(ss[k], 64, (void **)&in[k]);
		mo[k] = th_mem(ss[k], 64, (void **)&out[k]);
		for (int i = 0; i < 16; i++)
			in[k][i] = k + 1;
	}
	tr = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, mr);
	ts = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, mb, 0);
	ta[0] = th_submit(ss[0], R2_OP_ALLREDUCE, 16, R2CCL_INT32, R2CCL_SUM, 0, mi[0], mo[0]);
	ck_assert_int_eq(th_wait(ss[1], tr, 8000), 0); /* before the timeout (20 s) */
	ck_assert_mem_eq(r, b, cnt * 4);
	ta[1] = th_submit(ss[1], R2_OP_ALLREDUCE, 16, R2CCL_INT32, R2CCL_SUM, 0, mi[1], mo[1]);
	ck_assert_int_eq(th_wait(ss[0], ts, T_MS), 0);
	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(th_wait(ss[k], ta[k], T_MS), 0);
		for (int i = 0; i < 16; i++)
			ck_assert_int_eq(out[k][i], 3);
	}
	th_free_all(hs, 2);
}
END_TEST

/* Collectives whose ranks (of one host) disagree fail with MISMATCH on
 * every rank and break the communicator: what comes after is refused */
START_TEST(test_mismatch)
{
	struct th_host *hs[1];
	struct th_sess *ss[2];
	int32_t *a, *b;
	uint32_t ma, mb;
	uint64_t t0, t1;

	th_cluster(hs, 1, 2, 0x1, ss, NULL);
	ma = th_mem(ss[0], 4096, (void **)&a);
	mb = th_mem(ss[1], 4096, (void **)&b);
	t0 = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	t1 = th_submit(ss[1], R2_OP_ALLREDUCE, 200, R2CCL_INT32, R2CCL_SUM, 0, mb, mb);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), R2CCL_E_MISMATCH);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), R2CCL_E_MISMATCH);
	t0 = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), R2CCL_E_COMM_BROKEN);
	th_free_all(hs, 1);
}
END_TEST

/* The communicator's reason as MSG_COMM_REASON gives it to rank s (the
 * reason r2ccl_last_error() shows): its status, the text in s. */
static int reason_of(struct th_sess *s)
{
	int n = s->nresults;

	r2d_comm_handle_reason(&s->s, 77, s->comm_id);
	ck_assert_int_eq(s->nresults, n + 1);
	return s->result_status;
}

/* One collective whose hosts disagree: ss[r] submits opcode/count/dtype/
 * redop/root of its row; every rank must fail with MISMATCH well before
 * op_timeout_ms (20 s), and a later collective is refused. */
struct call {
	uint32_t opcode;
	uint64_t count;
	uint32_t dtype, redop;
	int root;
};

static void mismatch_across(struct th_sess **ss, int n, const struct call *calls)
{
	uint32_t mem[4];
	uint64_t tag[4], t0 = th_now_ms();
	void *p;

	for (int r = 0; r < n; r++) {
		mem[r] = th_mem(ss[r], 64 * 1024 * (uint64_t)n, &p);
		tag[r] = th_submit(ss[r], calls[r].opcode, calls[r].count, calls[r].dtype,
				   calls[r].redop, calls[r].root, mem[r], mem[r]);
	}
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), R2CCL_E_MISMATCH);
	/* before op_timeout_ms (20 s) would have ended it: only a timeout, not
	 * a slow machine, takes that long (each wait above is 10 s at most) */
	ck_assert_uint_lt(th_now_ms() - t0, 20000);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(reason_of(ss[r]), R2CCL_E_MISMATCH);
	tag[0] = th_submit(ss[0], R2_OP_ALLREDUCE, 16, R2CCL_INT32, R2CCL_SUM, 0, mem[0], mem[0]);
	ck_assert_int_eq(th_wait(ss[0], tag[0], T_MS), R2CCL_E_COMM_BROKEN);
}

/* One mismatch case on n hosts of one rank each (after an AllReduce that
 * agreed, with agreed_first): want[r] is rank r's reason (NULL: not
 * checked; "...TAIL": it ends with TAIL, where which peer a rank heard
 * first decides the rest). */
static void mismatch_case(int n, bool agreed_first, const struct call *calls,
			  const char *const *want)
{
	struct th_host *hs[3];
	struct th_sess *ss[3];

	th_cluster(hs, n, 1, 0x3, ss, NULL);
	if (agreed_first)
		allreduce(ss, n, 1000, R2CCL_SUM);
	mismatch_across(ss, n, calls);
	for (int r = 0; r < n; r++) {
		const char *e = ss[r]->result_error, *w = want[r];
		size_t le = strlen(e), lw;
		if (!w)
			continue;
		if (strncmp(w, "...", 3)) {
			ck_assert_str_eq(e, w);
			continue;
		}
		w += 3;
		lw = strlen(w);
		ck_assert_msg(le >= lw && !strcmp(e + le - lw, w), "rank %d: \"%s\"", r, e);
	}
	th_free_all(hs, n);
}

/* Hosts whose ranks disagree on the count (one of them 0: no rail phase
 * but the descriptors), the type, the reduction, the kind, the root: every
 * rank fails fast with MISMATCH and a reason that names the other call. */
START_TEST(test_mismatch_across_hosts)
{
	mismatch_case(2, true,
		      (const struct call[]){ { R2_OP_ALLREDUCE, 1024, R2CCL_INT32, R2CCL_SUM, 0 },
					     { R2_OP_ALLREDUCE, 2048, R2CCL_INT32, R2CCL_SUM, 0 } },
		      (const char *const[]){
			      "collective 2 (allreduce): rank 1 posted count 2048, this rank 1024",
			      "collective 2 (allreduce): rank 0 posted count 1024, this rank 2048" });
	mismatch_case(2, false,
		      (const struct call[]){ { R2_OP_ALLREDUCE, 0, R2CCL_INT32, R2CCL_SUM, 0 },
					     { R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0 } },
		      (const char *const[]){
			      "collective 1 (allreduce): rank 1 posted count 100, this rank 0", NULL });
	/* counts on either side of the eager limit (64 KiB): one host takes
	 * the eager path, the other the planner's; each finds the other's
	 * call in what it receives (an eager header, a descriptor) */
	mismatch_case(2, false,
		      (const struct call[]){ { R2_OP_ALLREDUCE, 10000, R2CCL_INT32, R2CCL_SUM, 0 },
					     { R2_OP_ALLREDUCE, 20000, R2CCL_INT32, R2CCL_SUM, 0 } },
		      (const char *const[]){
			      "collective 1 (allreduce): rank 1 posted count 20000, this rank 10000",
			      "collective 1 (allreduce): rank 0 posted count 10000, this rank 20000" });
	mismatch_case(2, false,
		      (const struct call[]){ { R2_OP_ALLREDUCE, 5000, R2CCL_INT32, R2CCL_SUM, 0 },
					     { R2_OP_ALLREDUCE, 5000, R2CCL_FLOAT32, R2CCL_SUM, 0 } },
		      (const char *const[]){
			      "collective 1 (allreduce): rank 1 posted type float, this rank int32", NULL });
	mismatch_case(2, false,
		      (const struct call[]){ { R2_OP_REDUCE, 5000, R2CCL_INT32, R2CCL_SUM, 1 },
					     { R2_OP_REDUCE, 5000, R2CCL_INT32, R2CCL_MAX, 1 } },
		      (const char *const[]){
			      NULL, "collective 1 (reduce): rank 0 posted op sum, this rank max" });
	mismatch_case(2, false,
		      (const struct call[]){ { R2_OP_ALLREDUCE, 5000, R2CCL_INT32, R2CCL_SUM, 0 },
					     { R2_OP_ALLGATHER, 5000, R2CCL_INT32, 0, 0 } },
		      (const char *const[]){
			      "collective 1 (allreduce): rank 1 called allgather, this rank allreduce",
			      NULL });
	/* three hosts, the last one's root differs: the two that agree both
	 * name it; it names whichever it heard first */
	mismatch_case(3, false,
		      (const struct call[]){ { R2_OP_BROADCAST, 4096, R2CCL_INT32, 0, 0 },
					     { R2_OP_BROADCAST, 4096, R2CCL_INT32, 0, 0 },
					     { R2_OP_BROADCAST, 4096, R2CCL_INT32, 0, 1 } },
		      (const char *const[]){
			      "collective 1 (broadcast): rank 2 posted root 1, this rank 0",
			      "collective 1 (broadcast): rank 2 posted root 1, this rank 0",
			      "...posted root 0, this rank 1" });
}
END_TEST

/* A communicator of two ranks on one host: no rail phase */
START_TEST(test_local_only)
{
	struct th_host *hs[1];
	struct th_sess *ss[2];

	th_cluster(hs, 1, 2, 0x1, ss, NULL);
	allreduce(ss, 2, 300000, R2CCL_SUM);
	th_free_all(hs, 1);
}
END_TEST

/* Bootstrap failures: ranks that disagree on nranks fail every rank
 * (JOIN_FAIL through the root); a rank given twice fails with DUP_RANK */
START_TEST(test_bootstrap_failures)
{
	struct th_host *hs[2];
	struct th_sess *a, *b, *c;
	struct r2_uid uid;

	hs[0] = th_host_new(0, 0x3, NULL);
	hs[1] = th_host_new(1, 0x3, NULL);
	th_uid(hs[0], &uid);
	a = th_sess_new(hs[0]);
	b = th_sess_new(hs[1]);
	th_init(a, &uid, 3, 0);
	th_init(b, &uid, 3, 0); /* rank 0 again, on another host */
	c = th_sess_new(hs[1]);
	th_init(c, &uid, 3, 2);
	struct th_sess *ss[3] = { a, b, c };
	ck_assert(th_wait_init(ss, 3, T_MS));
	ck_assert_int_ne(a->init_status, 0);
	ck_assert_int_ne(b->init_status, 0);
	ck_assert_int_ne(c->init_status, 0);
	th_free_all(hs, 2);
}
END_TEST


/* A rank that never calls the collective: the others fail with ETIMEDOUT
 * after op_timeout_ms, and the reason says who was waited for */
START_TEST(test_op_timeout)
{
	static const char *const p[] = { "op_timeout_ms=300", NULL };
	struct th_host *h = th_host_new(0, 0x1, p);
	struct th_sess *ss[2] = { th_sess_new(h), th_sess_new(h) };
	struct r2_uid uid;
	int32_t *a;
	uint32_t ma;
	uint64_t t0, start;

	th_uid(h, &uid);
	th_init(ss[0], &uid, 2, 0);
	th_init(ss[1], &uid, 2, 1);
	ck_assert(th_wait_init(ss, 2, T_MS));
	ma = th_mem(ss[0], 4096, (void **)&a);
	start = th_now_ms();
	t0 = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), -ETIMEDOUT);
	ck_assert_uint_ge(th_now_ms() - start, 300);
	r2d_comm_handle_reason(&ss[0]->s, 7, ss[0]->comm_id);
	ck_assert_int_eq(ss[0]->nresults, 1);
	ck_assert_int_eq(ss[0]->result_status, -ETIMEDOUT);
	ck_assert_ptr_nonnull(strstr(ss[0]->result_error, "rank 1"));
	/* a communicator of another session: not found */
	r2d_comm_handle_reason(&ss[1]->s, 8, ss[0]->comm_id);
	ck_assert_int_eq(ss[1]->result_status, -ENOENT);
	th_host_free(h);
}
END_TEST

/* A rank on the second host never joins: every joined rank fails with
 * BOOTSTRAP after bootstrap_timeout_ms */
START_TEST(test_bootstrap_timeout)
{
	static const char *const p[] = { "bootstrap_timeout_ms=300", NULL };
	struct th_host *hs[2] = { th_host_new(0, 0x3, p), th_host_new(1, 0x3, p) };
	struct th_sess *ss[2] = { th_sess_new(hs[0]), th_sess_new(hs[1]) };
	struct r2_uid uid;

	th_uid(hs[0], &uid);
	th_init(ss[0], &uid, 3, 0);
	th_init(ss[1], &uid, 3, 1); /* rank 2 never comes */
	ck_assert(th_wait_init(ss, 2, T_MS));
	ck_assert_int_eq(ss[0]->init_status, R2CCL_E_BOOTSTRAP);
	ck_assert_int_eq(ss[1]->init_status, R2CCL_E_BOOTSTRAP);
	th_free_all(hs, 2);
}
END_TEST

/* CommInit arguments refused: a bad unique id, rank out of range, a mode
 * nobody knows, nranks that disagree across hosts (JOIN_FAIL) */
START_TEST(test_init_refused)
{
	struct th_host *hs[2] = { th_host_new(0, 0x3, NULL), th_host_new(1, 0x3, NULL) };
	struct th_sess *a = th_sess_new(hs[0]), *b = th_sess_new(hs[1]);
	struct r2_uid uid;
	struct th_sess *ss[2] = { a, b };

	memset(&uid, 0, sizeof(uid));
	th_init(a, &uid, 2, 0);
	ck_assert(a->init_done);
	ck_assert_int_eq(a->init_status, -EINVAL);
	a->init_done = false;
	th_uid(hs[0], &uid);
	th_init(a, &uid, 2, 5);
	ck_assert_int_eq(a->init_status, -EINVAL);
	a->init_done = false;
	th_init(a, &uid, 2, 0);
	th_init(b, &uid, 3, 1);
	ck_assert(th_wait_init(ss, 2, T_MS));
	ck_assert_int_ne(a->init_status, 0);
	ck_assert_int_ne(b->init_status, 0);
	th_free_all(hs, 2);
}
END_TEST

/* A rank leaves (destroy, abort, its client dies) while its peers on
 * the other host go on: their collectives fail with PEER_GONE well before
 * op_timeout_ms (20 s), and MSG_COMM_REASON says who left and how. */
static void leave_case(enum r2_leave how, bool posted_first, const char *want)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	int32_t *b;
	uint32_t mb;
	uint64_t t, t0;

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	allreduce(ss, 2, 1000, R2CCL_SUM);
	mb = th_mem(ss[1], 4096, (void **)&b);
	if (posted_first) { /* rank 1 waits in the rail phase for rank 0 */
		t = th_submit(ss[1], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, mb, mb);
		th_pump(50);
		ck_assert_int_eq(th_wait(ss[1], t, 0), TH_TIMEOUT);
	}
	t0 = th_now_ms();
	if (how == R2_LEAVE_DIED) {
		th_sess_die(ss[0]);
	} else {
		r2d_comm_handle_destroy(&ss[0]->s, 9, ss[0]->comm_id, how == R2_LEAVE_ABORT);
		ck_assert_int_eq(ss[0]->nresults, 1);
		ck_assert_int_eq(ss[0]->result_status, 0);
		/* again: gone from this session */
		r2d_comm_handle_destroy(&ss[0]->s, 10, ss[0]->comm_id, false);
		ck_assert_int_eq(ss[0]->result_status, -ENOENT);
	}
	if (!posted_first)
		t = th_submit(ss[1], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, mb, mb);
	ck_assert_int_eq(th_wait(ss[1], t, T_MS), R2CCL_E_PEER_GONE);
	/* before op_timeout_ms (20 s): the wait above gives it 10 s at most */
	ck_assert_uint_lt(th_now_ms() - t0, 20000);
	ck_assert_int_eq(reason_of(ss[1]), R2CCL_E_PEER_GONE);
	ck_assert_str_eq(ss[1]->result_error, want);
	/* and what comes after, at once (not at op_timeout_ms: T_MS is half
	 * of it, room for a loaded machine) */
	t = th_submit(ss[1], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, mb, mb);
	ck_assert_int_eq(th_wait(ss[1], t, T_MS), R2CCL_E_PEER_GONE);
	r2d_comm_handle_destroy(&ss[1]->s, 11, ss[1]->comm_id, false);
	ck_assert_int_eq(ss[1]->result_status, 0);
	th_free_all(hs, 2);
}

START_TEST(test_destroy_and_abort)
{
	leave_case(R2_LEAVE_DESTROY, false, "rank 0 on host host0 left the communicator (destroy)");
	leave_case(R2_LEAVE_DESTROY, true, "rank 0 on host host0 left the communicator (destroy)");
	leave_case(R2_LEAVE_ABORT, true, "rank 0 on host host0 left the communicator (abort)");
	leave_case(R2_LEAVE_DIED, true, "rank 0 on host host0 left the communicator (client died)");
	leave_case(R2_LEAVE_DIED, false, "rank 0 on host host0 left the communicator (client died)");
}
END_TEST

/* A receive from rank 0 already running on host 1 when rank 0 destroys its
 * member: it fails with PEER_GONE at once, not at op_timeout_ms */
START_TEST(test_leave_during_transfer)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	int32_t *b;
	uint32_t mb;
	uint64_t t, t0;

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	mb = th_mem(ss[1], 64 * 1024, (void **)&b);
	t = th_submit(ss[1], R2_OP_RECV, 16 * 1024, R2CCL_INT32, 0, 0, 0, mb);
	th_pump(50);
	ck_assert_int_eq(th_wait(ss[1], t, 0), TH_TIMEOUT);
	t0 = th_now_ms();
	r2d_comm_handle_destroy(&ss[0]->s, 9, ss[0]->comm_id, false);
	ck_assert_int_eq(th_wait(ss[1], t, T_MS), R2CCL_E_PEER_GONE);
	ck_assert_uint_lt(th_now_ms() - t0, 20000); /* op_timeout_ms */
	ck_assert_int_eq(reason_of(ss[1]), R2CCL_E_PEER_GONE);
	ck_assert_str_eq(ss[1]->result_error, "rank 0 on host host0 left the communicator (destroy)");
	th_free_all(hs, 2);
}
END_TEST

struct left_arg {
	struct th_host *h;
	int rank;
};

static bool has_left(void *arg)
{
	struct left_arg *l = arg;
	bool left;

	pthread_mutex_lock(&l->h->d.lock);
	left = l->h->d.comms && l->h->d.comms->m[l->rank].left;
	pthread_mutex_unlock(&l->h->d.lock);
	return left;
}

/* host h learned that rank left its (only) communicator */
static bool wait_left(struct th_host *h, int rank, int timeout_ms)
{
	struct left_arg l = { h, rank };

	return th_until(has_left, &l, timeout_ms);
}

/* Rank 0 sends to rank 1 (another host), its send completes, and it
 * destroys its member before rank 1 posts the receive (the fault suite's
 * dupchunks case, where chunks were delayed and the receive came after the
 * leave): the receive still gets every byte, because rank 0's daemon said
 * it had sent one; a second receive from rank 0 fails at once. */
START_TEST(test_leave_after_send)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	int32_t *a, *b;
	uint32_t ma, mb;
	uint64_t t, t0;
	const uint64_t cnt = 16 * 1024;

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	ma = th_mem(ss[0], cnt * 4, (void **)&a);
	mb = th_mem(ss[1], cnt * 4, (void **)&b);
	for (uint64_t i = 0; i < cnt; i++)
		a[i] = val(0, i);
	t = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, ma, 0);
	ck_assert_int_eq(th_wait(ss[0], t, T_MS), 0);
	r2d_comm_handle_destroy(&ss[0]->s, 9, ss[0]->comm_id, false);
	ck_assert(wait_left(hs[1], 0, T_MS));
	t = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, mb);
	ck_assert_int_eq(th_wait(ss[1], t, T_MS), 0);
	ck_assert_mem_eq(b, a, cnt * 4);
	t0 = th_now_ms();
	t = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, mb);
	ck_assert_int_eq(th_wait(ss[1], t, T_MS), R2CCL_E_PEER_GONE);
	ck_assert_uint_lt(th_now_ms() - t0, 20000); /* op_timeout_ms */
	th_free_all(hs, 2);
}
END_TEST

/* Two ranks per host; rank 0 destroys its member while rank 1 stays: the
 * collective host 1's ranks are in fails on both, with the reason; a
 * transfer between ranks 1 and 2 (which do not need rank 0) still runs;
 * one to rank 0 is refused. */
START_TEST(test_leave_others_go_on)
{
	struct th_host *hs[2];
	struct th_sess *ss[4];
	int32_t *b[4];
	uint32_t mb[4];
	uint64_t t[4], t0;
	const uint64_t cnt = 50000;

	th_cluster(hs, 2, 2, 0x3, ss, NULL);
	for (int r = 0; r < 4; r++)
		mb[r] = th_mem(ss[r], cnt * 4, (void **)&b[r]);
	for (int r = 2; r < 4; r++)
		t[r] = th_submit(ss[r], R2_OP_ALLREDUCE, cnt, R2CCL_INT32, R2CCL_SUM, 0, mb[r], mb[r]);
	th_pump(50);
	t0 = th_now_ms();
	r2d_comm_handle_destroy(&ss[0]->s, 9, ss[0]->comm_id, false);
	for (int r = 2; r < 4; r++) {
		ck_assert_int_eq(th_wait(ss[r], t[r], T_MS), R2CCL_E_PEER_GONE);
		ck_assert_int_eq(reason_of(ss[r]), R2CCL_E_PEER_GONE);
		ck_assert_str_eq(ss[r]->result_error, "rank 0 on host host0 left the communicator (destroy)");
	}
	ck_assert_uint_lt(th_now_ms() - t0, 20000); /* op_timeout_ms */
	t[1] = th_submit(ss[1], R2_OP_ALLREDUCE, cnt, R2CCL_INT32, R2CCL_SUM, 0, mb[1], mb[1]);
	ck_assert_int_eq(th_wait(ss[1], t[1], T_MS), R2CCL_E_PEER_GONE);
	ck_assert_int_eq(reason_of(ss[1]), R2CCL_E_PEER_GONE);
	ck_assert_str_eq(ss[1]->result_error, "rank 0 left the communicator (destroy)");
	for (uint64_t i = 0; i < cnt; i++)
		b[1][i] = val(1, i);
	t[1] = th_submit(ss[1], R2_OP_SEND, cnt, R2CCL_INT32, 0, 2, mb[1], 0);
	t[2] = th_submit(ss[2], R2_OP_RECV, cnt, R2CCL_INT32, 0, 1, 0, mb[2]);
	ck_assert_int_eq(th_wait(ss[1], t[1], T_MS), 0);
	ck_assert_int_eq(th_wait(ss[2], t[2], T_MS), 0);
	ck_assert_mem_eq(b[2], b[1], cnt * 4);
	t[3] = th_submit(ss[3], R2_OP_SEND, cnt, R2CCL_INT32, 0, 0, mb[3], 0);
	ck_assert_int_eq(th_wait(ss[3], t[3], T_MS), R2CCL_E_PEER_GONE);
	th_free_all(hs, 2);
}
END_TEST

/* A draining daemon refuses new operations with SHUTDOWN */
START_TEST(test_draining)
{
	struct th_host *hs[1];
	struct th_sess *ss[2];
	int32_t *a;
	uint32_t ma;
	uint64_t t;

	th_cluster(hs, 1, 2, 0x1, ss, NULL);
	ma = th_mem(ss[0], 4096, (void **)&a);
	pthread_mutex_lock(&hs[0]->d.lock);
	hs[0]->d.draining = true;
	pthread_mutex_unlock(&hs[0]->d.lock);
	t = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	ck_assert_int_eq(th_wait(ss[0], t, T_MS), R2CCL_E_SHUTDOWN);
	ck_assert_int_eq(r2d_engine_busy(&hs[0]->d), 0);
	th_free_all(hs, 1);
}
END_TEST

/* float32 and uint8 AllReduce across hosts: exact for values whose sums
 * are exact in the type */
START_TEST(test_other_types)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	const uint64_t cnt = 100000;
	float *fi[2], *fo[2];
	uint32_t im[2], om[2];
	uint64_t tag[2];

	th_cluster(hs, 2, 1, 0x3, ss, NULL);
	for (int r = 0; r < 2; r++) {
		im[r] = th_mem(ss[r], cnt * 4, (void **)&fi[r]);
		om[r] = th_mem(ss[r], cnt * 4, (void **)&fo[r]);
		for (uint64_t i = 0; i < cnt; i++)
			fi[r][i] = (float)((i % 1000) * (r + 1)) * 0.5f;
	}
	for (int r = 0; r < 2; r++)
		tag[r] = th_submit(ss[r], R2_OP_ALLREDUCE, cnt, R2CCL_FLOAT32, R2CCL_SUM, 0, im[r],
				   om[r]);
	for (int r = 0; r < 2; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < 2; r++)
		for (uint64_t i = 0; i < cnt; i++)
			TH_CHECK(fo[r][i] == (float)((i % 1000) * 3) * 0.5f, "rank %d element %llu", r,
				 (unsigned long long)i);
	th_free_all(hs, 2);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("engine");

	TH_ADD(s, test_allreduce_two_hosts);
	TH_ADD(s, test_tenant_cap);
	TH_ADD(s, test_tenant_proxy_quota);
	TH_ADD(s, test_allreduce_three_hosts_two_ranks);
	TH_ADD(s, test_allreduce_eager);
	TH_ADD(s, test_eager_lazy_acks);
	TH_ADD(s, test_plan_lazy_acks);
	TH_ADD(s, test_eager_loop_spinning);
	TH_ADD(s, test_allreduce_mixed_chunk_cuts);
	TH_ADD(s, test_other_collectives);
	TH_ADD(s, test_other_collectives_two_ranks);
	TH_ADD(s, test_allreduce_threads);
	TH_ADD(s, test_apply_inline_latency_bound);
	TH_ADD(s, test_step_order_eight_hosts);
	TH_ADD(s, test_bruck_hosts);
	TH_ADD(s, test_local_collectives);
	TH_ADD(s, test_send_recv);
	TH_ADD(s, test_send_recv_counter_wrap);
	TH_ADD(s, test_send_blocked_behind_collective);
	TH_ADD(s, test_mismatch);
	TH_ADD(s, test_mismatch_across_hosts);
	TH_ADD(s, test_local_only);
	TH_ADD(s, test_bootstrap_failures);
	TH_ADD(s, test_op_timeout);
	TH_ADD(s, test_bootstrap_timeout);
	TH_ADD(s, test_init_refused);
	TH_ADD(s, test_destroy_and_abort);
	TH_ADD(s, test_leave_others_go_on);
	TH_ADD(s, test_leave_during_transfer);
	TH_ADD(s, test_leave_after_send);
	TH_ADD(s, test_draining);
	TH_ADD(s, test_other_types);
	return s;
}

int main(void)
{
	th_slow_silence = true; /* no test here is about failure detection */
	return th_run(suite());
}
