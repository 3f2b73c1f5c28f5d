// SPDX-License-Identifier: MIT
/* Unit tests of the tenants' scheduler (daemon/net/sched.c) on synthetic
 * chunk streams over a simulated link (bytes/s, one chunk on the wire at a
 * time, time in simulated microseconds): exact byte shares per round for
 * 3:1 and 1:1:2, the deficit round robin bound with mixed chunk sizes, the
 * token bucket's bound rate*T + burst in every window (and 95% of the rate
 * reached), the latency class's priority and its bound, the scheduler off
 * (FIFO), a reservation, a weight change taking effect on the next chunk,
 * requeue and removal; chunks taken by another rail (may_move): the
 * weights over both rails, an idle rail's work; the policy syntax and the
 * longest-prefix match. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/sched.h"

#define KB 1024u
#define MB (1024u * 1024u)
#define MAXIT 200000

struct sim {
	struct r2_sched *s;
	struct r2_sched_item items[MAXIT];
	int nitems;
	/* what was sent: tenant, length, time */
	int tenant[MAXIT];
	uint32_t len[MAXIT];
	uint64_t at[MAXIT];
	int nsent;
	uint64_t now;
	double link_Bps;
};

static struct sim *sim_new(uint32_t quantum, uint64_t prio_run, double link_Bps)
{
	struct sim *m = calloc(1, sizeof(*m));
	ck_assert_ptr_nonnull(m);
	m->s = calloc(1, sizeof(*m->s));
	ck_assert_ptr_nonnull(m->s);
	r2_sched_init(m->s, quantum, prio_run);
	m->now = 1000;
	m->link_Bps = link_Bps;
	return m;
}

static void sim_free(struct sim *m)
{
	free(m->s);
	free(m);
}

static int tenant(struct sim *m, const char *name, const char *spec)
{
	struct r2_tenant_policy p;
	char err[128];

	r2_tenant_policy_default(&p, name);
	ck_assert_int_eq(r2_tenant_policy_parse(&p, spec, err, sizeof(err)), 0);
	int t = r2_sched_policy_set(m->s, &p, m->now);
	ck_assert_int_gt(t, 0);
	return t;
}

static struct r2_sched_item *push(struct sim *m, int rail, int t, uint32_t len)
{
	ck_assert_int_lt(m->nitems, MAXIT);
	struct r2_sched_item *it = &m->items[m->nitems++];
	it->len = len;
	it->tenant = (uint16_t)t;
	r2_sched_enqueue(m->s, rail, it, m->now);
	return it;
}

/* Sends one chunk of rail 0 (waiting for tokens if need be); false when
 * nothing is queued. */
static bool step(struct sim *m)
{
	struct r2_sched_item *it = r2_sched_next(m->s, 0, m->now);

	if (!it) {
		uint64_t w = r2_sched_next_wake(m->s, m->now);
		if (w == UINT64_MAX)
			return false;
		ck_assert_uint_ge(w, m->now);
		m->now = w;
		it = r2_sched_next(m->s, 0, m->now);
		ck_assert_ptr_nonnull(it);
	}
	ck_assert_int_lt(m->nsent, MAXIT);
	m->tenant[m->nsent] = it->tenant;
	m->len[m->nsent] = it->len;
	m->at[m->nsent] = m->now;
	m->nsent++;
	m->now += (uint64_t)((double)it->len / m->link_Bps * 1e6);
	return true;
}

/* Every tenant of ts[] keeps `depth` chunks of len queued on rail 0. */
static void run_backlogged(struct sim *m, const int *ts, int nt, uint32_t len, int chunks)
{
	int queued[8] = { 0 };

	for (int k = 0; k < chunks; k++) {
		for (int i = 0; i < nt; i++) {
			queued[i] = (int)m->s->t[ts[i]].queued;
			while (queued[i] < 4) {
				push(m, 0, ts[i], len);
				queued[i]++;
			}
		}
		ck_assert(step(m));
	}
}

static uint64_t bytes_of(struct sim *m, int t, int from, int to)
{
	uint64_t b = 0;

	for (int i = from; i < to; i++)
		if (m->tenant[i] == t)
			b += m->len[i];
	return b;
}

/* every round of 4 chunks of the first n sent: exactly 3 of a, 1 of b */
static void assert_rounds_3_1(struct sim *m, int a, int b, int n)
{
	for (int k = 0; k + 4 <= n; k += 4) {
		ck_assert_uint_eq(bytes_of(m, a, k, k + 4), 3 * MB);
		ck_assert_uint_eq(bytes_of(m, b, k, k + 4), 1 * MB);
	}
}

START_TEST(test_share_3_1)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=3"), b = tenant(m, "b", "weight=1");
	int ts[] = { a, b };

	run_backlogged(m, ts, 2, 1 * MB, 400);
	assert_rounds_3_1(m, a, b, m->nsent);
	sim_free(m);
}
END_TEST

START_TEST(test_share_1_1_2)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=1"), b = tenant(m, "b", "weight=1"),
	    c = tenant(m, "c", "weight=2");
	int ts[] = { a, b, c };

	run_backlogged(m, ts, 3, 1 * MB, 400);
	for (int w = 0; w + 4 <= m->nsent; w += 4) {
		ck_assert_uint_eq(bytes_of(m, a, w, w + 4), 1 * MB);
		ck_assert_uint_eq(bytes_of(m, b, w, w + 4), 1 * MB);
		ck_assert_uint_eq(bytes_of(m, c, w, w + 4), 2 * MB);
	}
	/* the same over 100 ms windows of a 1 Gbit/s link (12 chunks each):
	 * within one chunk of the weights' share */
	uint64_t win = 100000;
	for (uint64_t t0 = m->at[0]; t0 + win <= m->at[m->nsent - 1]; t0 += win) {
		int from = 0, to;
		while (m->at[from] < t0)
			from++;
		for (to = from; to < m->nsent && m->at[to] < t0 + win; to++)
			;
		uint64_t tot = bytes_of(m, a, from, to) + bytes_of(m, b, from, to) +
			       bytes_of(m, c, from, to);
		double sc = (double)bytes_of(m, c, from, to);
		ck_assert_double_le(sc > tot / 2.0 ? sc - tot / 2.0 : tot / 2.0 - sc, 1.0 * MB);
	}
	sim_free(m);
}
END_TEST

/* Mixed chunk sizes: deficit round robin keeps |bytes_a/3 - bytes_b| within
 * the largest chunk plus a quantum over every prefix (both backlogged). */
START_TEST(test_drr_bound_mixed)
{
	struct sim *m = sim_new(256 * KB, 0, 125e6);
	int a = tenant(m, "a", "weight=3"), b = tenant(m, "b", "weight=1");
	unsigned seed = 7;
	double ba = 0, bb = 0;

	for (int k = 0; k < 5000; k++) {
		while (m->s->t[a].queued < 4)
			push(m, 0, a, 64 * KB + (uint32_t)(rand_r(&seed) % (960 * KB)));
		while (m->s->t[b].queued < 4)
			push(m, 0, b, 64 * KB + (uint32_t)(rand_r(&seed) % (960 * KB)));
		ck_assert(step(m));
		if (m->tenant[m->nsent - 1] == a)
			ba += m->len[m->nsent - 1];
		else
			bb += m->len[m->nsent - 1];
		double diff = ba / 3.0 - bb;
		ck_assert_double_le(diff < 0 ? -diff : diff, 1.0 * MB + 3 * 256.0 * KB);
	}
	double share = ba / (ba + bb);
	ck_assert_double_ge(share, 0.74);
	ck_assert_double_le(share, 0.76);
	sim_free(m);
}
END_TEST

/* Bytes sent in every window [at[i], at[i] + T) of the send times. */
static void check_bucket(struct sim *m, int t, double rate_Bps, double burst)
{
	static const uint64_t wins[] = { 10000, 100000, 1000000 };

	for (size_t w = 0; w < sizeof(wins) / sizeof(wins[0]); w++) {
		int to = 0;
		uint64_t sum = 0;
		for (int from = 0; from < m->nsent; from++) {
			if (to < from) {
				to = from;
				sum = 0;
			}
			while (to < m->nsent && m->at[to] < m->at[from] + wins[w]) {
				if (m->tenant[to] == t)
					sum += m->len[to];
				to++;
			}
			ck_assert_msg((double)sum <= rate_Bps * (double)wins[w] / 1e6 + burst + 1,
				      "window %llu us from %llu: %llu bytes > rate*T + burst %.0f",
				      (unsigned long long)wins[w], (unsigned long long)m->at[from],
				      (unsigned long long)sum,
				      rate_Bps * (double)wins[w] / 1e6 + burst);
			if (m->tenant[from] == t)
				sum -= m->len[from];
		}
	}
}

START_TEST(test_bucket_bound)
{
	/* 300 Mbit/s alone on a 1 Gbit/s link, 512 KiB chunks (burst 2%:
	 * 750,000 bytes) */
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "rate=300M");
	int ts[] = { a };

	ck_assert_uint_eq(r2_sched_rate(m->s, a), 300000000ull);
	ck_assert_uint_eq(r2_sched_burst(m->s, a), 750000ull);
	uint64_t t0 = m->now;
	run_backlogged(m, ts, 1, 512 * KB, 150);
	check_bucket(m, a, 37.5e6, 750000);
	double got = (double)bytes_of(m, a, 0, m->nsent) / ((double)(m->now - t0) / 1e6);
	ck_assert_double_ge(got, 0.95 * 37.5e6);
	ck_assert_uint_gt(m->s->t[a].throttled_us, 0);
	sim_free(m);
}
END_TEST

/* A chunk larger than the burst: the bound is rate*T + the chunk. */
START_TEST(test_bucket_large_chunk)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "rate=100M");
	int b = tenant(m, "b", "weight=1");
	int ts[] = { a, b };

	run_backlogged(m, ts, 2, 1 * MB, 300);
	check_bucket(m, a, 12.5e6, 1.0 * MB);
	/* b takes what a may not */
	ck_assert_uint_gt(bytes_of(m, b, 0, m->nsent), 4 * bytes_of(m, a, 0, m->nsent));
	sim_free(m);
}
END_TEST

/* A latency tenant's chunk goes next when it comes; bulk gets a chunk after
 * at most prio_run bytes of latency chunks in a row. */
START_TEST(test_priority_bound)
{
	struct sim *m = sim_new(1 * MB, 4 * MB, 125e6);
	int bulk = tenant(m, "bulk", "weight=10 class=bulk");
	int lat = tenant(m, "lat", "weight=1 class=latency");

	for (int i = 0; i < 8; i++)
		push(m, 0, bulk, 1 * MB);
	ck_assert(step(m));
	ck_assert_int_eq(m->tenant[0], bulk);
	push(m, 0, lat, 128 * KB);
	ck_assert(step(m));
	ck_assert_int_eq(m->tenant[1], lat); /* ahead of 7 bulk chunks */

	/* both backlogged: runs of latency bytes never exceed prio_run + one chunk */
	int ts[] = { bulk, lat };
	int start = m->nsent;
	run_backlogged(m, ts, 2, 256 * KB, 2000);
	uint64_t run = 0, maxrun = 0, nbulk = 0;
	for (int i = start; i < m->nsent; i++) {
		if (m->tenant[i] == lat) {
			run += m->len[i];
			maxrun = run > maxrun ? run : maxrun;
		} else {
			run = 0;
			nbulk++;
		}
	}
	ck_assert_uint_le(maxrun, 4 * MB + 256 * KB);
	ck_assert_uint_ge(maxrun, 4 * MB);
	ck_assert_uint_gt(nbulk, 2000 / 20);
	sim_free(m);
}
END_TEST

START_TEST(test_off_fifo)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=1 rate=1M"), b = tenant(m, "b", "weight=9 class=latency");

	m->s->enabled = false;
	for (int i = 0; i < 20; i++)
		push(m, 0, i % 3 ? a : b, 1 * MB);
	for (int i = 0; i < 20; i++) {
		ck_assert(step(m));
		ck_assert_int_eq(m->tenant[i], i % 3 ? a : b);
	}
	ck_assert(!step(m));
	sim_free(m);
}
END_TEST

/* A reserved tenant of weight 1 against weight 9 gets its reservation. */
START_TEST(test_reserve)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=1"), b = tenant(m, "b", "weight=9");
	int ts[] = { a, b };

	r2_sched_set_limit(m->s, a, 0, 500000000ull, 0, m->now); /* 62.5 MB/s of 125 */
	uint64_t t0 = m->now;
	run_backlogged(m, ts, 2, 512 * KB, 2000);
	double got = (double)bytes_of(m, a, 0, m->nsent) / ((double)(m->now - t0) / 1e6);
	ck_assert_double_ge(got, 0.95 * 62.5e6);
	/* its own cap never above the policy's rate */
	struct r2_tenant_policy p = m->s->t[a].pol;
	p.rate_bps = 100000000;
	r2_sched_policy_set(m->s, &p, m->now);
	r2_sched_set_limit(m->s, a, 200000000ull, 0, 0, m->now);
	ck_assert_uint_eq(r2_sched_rate(m->s, a), 100000000ull);
	r2_sched_set_limit(m->s, a, 50000000ull, 80000000ull, 0, m->now);
	ck_assert_uint_eq(r2_sched_rate(m->s, a), 50000000ull);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 50000000ull);
	/* within its weight share of the rails: weight 1 of 1 + 9 */
	r2_sched_set_limit(m->s, a, 0, 800000000ull, 500000000ull, m->now);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 50000000ull); /* 1/10 of 500M */
	r2_sched_set_limit(m->s, a, 0, 800000000ull, 10000000000ull, m->now);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 100000000ull); /* its cap, 100M */
	p.rate_bps = 0;
	r2_sched_policy_set(m->s, &p, m->now);
	r2_sched_set_limit(m->s, a, 0, 800000000ull, 1000000000ull, m->now);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 100000000ull); /* 1/10 of 1G */
	r2_sched_set_limit(m->s, a, 0, 80000000ull, 10000000000ull, m->now);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 80000000ull); /* as asked */
	sim_free(m);
}
END_TEST

/* A reservation is cut to its weight share again whenever the table
 * changes: a tenant that reserved the whole link while alone keeps half of
 * it once another comes, and less as more come or a weight rises; the other
 * tenant is served. Before 2026-12-07 the cut was made once, at the call: a
 * tenant that reserved alone kept strict priority over every later one. */
START_TEST(test_reserve_shares_again)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=1");

	r2_sched_set_limit(m->s, a, 0, 1000000000ull, 1000000000ull, m->now);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 1000000000ull); /* alone: all of 1G */
	int b = tenant(m, "b", "weight=1");
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 500000000ull);
	int ts[] = { a, b };
	uint64_t n0 = m->nsent;
	run_backlogged(m, ts, 2, 512 * KB, 400);
	uint64_t ba = bytes_of(m, a, (int)n0, m->nsent), bb = bytes_of(m, b, (int)n0, m->nsent);
	ck_assert_msg(bb * 10 >= (ba + bb) * 4, "b got %llu of %llu bytes",
		      (unsigned long long)bb, (unsigned long long)(ba + bb));
	/* a tenant made for an unmatched cgroup (weight 1): a third */
	ck_assert_int_gt(r2_sched_tenant_of(m->s, "/jobs/c", m->now), 0);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 333333333ull);
	/* b's weight 4 on a reload: 1 of 6 */
	struct r2_tenant_policy p = m->s->t[b].pol;
	p.weight = 4;
	r2_sched_policy_set(m->s, &p, m->now);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 166666666ull);
	/* what it asked is kept: back to 1 of 3 when b's weight is 1 again */
	p.weight = 1;
	r2_sched_policy_set(m->s, &p, m->now);
	ck_assert_uint_eq(m->s->t[a].reserve_bps, 333333333ull);
	sim_free(m);
}
END_TEST

/* A weight changed at run time counts from the next chunk. */
START_TEST(test_change_next_chunk)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=1"), b = tenant(m, "b", "weight=1");
	int ts[] = { a, b };

	run_backlogged(m, ts, 2, 1 * MB, 40);
	ck_assert_uint_eq(bytes_of(m, a, 0, 40), 20 * MB);
	struct r2_tenant_policy p = m->s->t[a].pol;
	p.weight = 3;
	r2_sched_policy_set(m->s, &p, m->now);
	int at = m->nsent;
	run_backlogged(m, ts, 2, 1 * MB, 40);
	/* from the next round on: 3 of 4 */
	ck_assert_uint_ge(bytes_of(m, a, at, at + 40), 29 * MB);
	ck_assert_uint_le(bytes_of(m, a, at, at + 40), 31 * MB);
	/* a cap set now holds from the next chunk: nothing more than its burst
	 * goes at once */
	p.rate_bps = 8000000; /* 1 MB/s */
	r2_sched_policy_set(m->s, &p, m->now);
	at = m->nsent;
	run_backlogged(m, ts, 2, 1 * MB, 40);
	ck_assert_uint_le(bytes_of(m, a, at, at + 40), 2 * MB);
	sim_free(m);
}
END_TEST

/* A class changed while chunks wait: the next chunk is served as the new
 * class (bulk tenant b made latency goes ahead of a's backlog). */
START_TEST(test_class_change)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=1"), b = tenant(m, "b", "weight=1");

	for (int i = 0; i < 4; i++) {
		push(m, 0, a, 1 * MB);
		push(m, 0, b, 1 * MB);
	}
	ck_assert(step(m));
	ck_assert(step(m));
	struct r2_tenant_policy p = m->s->t[b].pol;
	p.cls = R2_TCLASS_LATENCY;
	r2_sched_policy_set(m->s, &p, m->now);
	int at = m->nsent;
	for (int i = 0; i < 3; i++) {
		ck_assert(step(m));
		ck_assert_int_eq(m->tenant[at + i], b);
	}
	while (step(m))
		;
	ck_assert_int_eq(m->nsent, 8);
	ck_assert_uint_eq(m->s->t[a].queued + m->s->t[b].queued, 0);
	sim_free(m);
}
END_TEST

/* An item that may not go (its peer's window full) passes its tenant over:
 * the other tenant is served, and it goes once it may. */
static bool not_tenant(const struct r2_sched_item *it, void *arg)
{
	return it->tenant != *(const int *)arg;
}

START_TEST(test_may_send)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=9 class=latency"), b = tenant(m, "b", "weight=1");
	int blocked = a;

	for (int i = 0; i < 3; i++) {
		push(m, 0, a, 1 * MB);
		push(m, 0, b, 1 * MB);
	}
	m->s->may_send = not_tenant;
	m->s->may_send_arg = &blocked;
	for (int i = 0; i < 3; i++) {
		ck_assert(step(m));
		ck_assert_int_eq(m->tenant[i], b);
	}
	ck_assert_ptr_null(r2_sched_next(m->s, 0, m->now)); /* only a's left, blocked */
	blocked = -1;
	for (int i = 3; i < 6; i++) {
		ck_assert(step(m));
		ck_assert_int_eq(m->tenant[i], a);
	}
	sim_free(m);
}
END_TEST

/* A window shared by every tenant (one peer's, net/tenants.c) that holds
 * `room` chunks; the sim's step frees one when it "writes" it. */
struct window {
	int room, held;
};

static bool window_open(const struct r2_sched_item *it, void *arg)
{
	const struct window *w = arg;

	(void)it;
	return w->held < w->room;
}

/* Both tenants backlogged behind a full shared window: every opening lets
 * one chunk go, and the openings follow the weights (3 of a, 1 of b per
 * round of 4), however the round robin stood when the window filled. (The
 * turn used to fall to the tenant the ring's cursor wrapped to, and a took
 * every opening while b's chunks waited: tenant-bench's 100 ms windows of
 * a at 100% with b's 12 MB queued, 2026-12-04.) */
START_TEST(test_share_behind_window)
{
	for (int room = 1; room <= 3; room++) {
		struct sim *m = sim_new(1 * MB, 0, 125e6);
		int a = tenant(m, "a", "weight=3"), b = tenant(m, "b", "weight=1");
		struct window w = { room, 0 };
		int n = 0;

		m->s->may_send = window_open;
		m->s->may_send_arg = &w;
		for (int i = 0; i < 200; i++) {
			push(m, 0, a, 1 * MB);
			push(m, 0, b, 1 * MB);
		}
		while (n < 200) {
			struct r2_sched_item *it;
			/* fill the window, then one chunk is written */
			while ((it = r2_sched_next(m->s, 0, m->now)) != NULL) {
				m->tenant[m->nsent] = it->tenant;
				m->len[m->nsent++] = it->len;
				w.held++;
				n++;
			}
			ck_assert_int_eq(w.held, room);
			w.held--;
		}
		assert_rounds_3_1(m, a, b, n);
		sim_free(m);
	}
}
END_TEST

/* The weights hold over the rails together: b has chunks for rail 0 only,
 * a for both rails; b gets a quarter of all the bytes (half of rail 0), not
 * a quarter of rail 0 alone (an eighth: per-rail round robin). */
START_TEST(test_share_across_rails)
{
	struct sim *m = sim_new(256 * KB, 0, 125e6);
	int a = tenant(m, "a", "weight=3"), b = tenant(m, "b", "weight=1");
	uint64_t by[2][2] = { { 0 } }; /* [tenant a|b][rail] */

	for (int i = 0; i < 800; i++) {
		int rail = i % 2;
		while (!m->s->rail[0].q[a].head || !m->s->rail[1].q[a].head) {
			push(m, 0, a, 256 * KB);
			push(m, 1, a, 256 * KB);
		}
		while (m->s->t[b].queued < 4)
			push(m, 0, b, 256 * KB);
		struct r2_sched_item *it = r2_sched_next(m->s, rail, m->now);
		ck_assert_ptr_nonnull(it);
		by[it->tenant == b][rail] += it->len;
		/* every prefix: within two chunks of the weights */
		double lag = (double)(by[0][0] + by[0][1]) / 3.0 - (double)(by[1][0] + by[1][1]);
		ck_assert_msg(lag < 2.0 * 256 * KB && lag > -2.0 * 256 * KB, "chunk %d: lag %.0f", i,
			      lag);
	}
	ck_assert_uint_eq(by[1][1], 0);
	ck_assert_uint_eq(by[0][0] + by[0][1], 3 * (by[1][0] + by[1][1]));
	sim_free(m);
}
END_TEST

static bool move_ok(const struct r2_sched_item *it, int to, void *arg)
{
	(void)it;
	(void)to;
	return *(bool *)arg;
}

/* At a given moment a's chunks are all planned for rail 0 (its step's
 * share of rail 1 already sent) and b's for rail 1. Where chunks may move
 * (may_move), rail 1 takes a's chunks from rail 0's queue while a is owed,
 * so the weights hold over both rails in every prefix (3:1); where they
 * may not, b has rail 1 to itself: half of all the bytes. */
static void run_split(bool allow, uint64_t by[2][2])
{
	struct sim *m = sim_new(256 * KB, 0, 125e6);
	int a = tenant(m, "a", "weight=3"), b = tenant(m, "b", "weight=1");

	m->s->may_move = move_ok;
	m->s->may_send_arg = &allow;
	for (int i = 0; i < 800; i++) {
		int rail = i % 2;
		while (m->s->t[a].queued < 8)
			push(m, 0, a, 256 * KB);
		while (m->s->t[b].queued < 8)
			push(m, 1, b, 256 * KB);
		uint32_t q0 = r2_sched_queued(m->s, 0), q1 = r2_sched_queued(m->s, 1);
		struct r2_sched_item *it = r2_sched_next(m->s, rail, m->now);
		ck_assert_ptr_nonnull(it);
		/* the chunk leaves the queue it was in, whichever rail takes it */
		ck_assert_uint_eq(q0 + q1 - 1, r2_sched_queued(m->s, 0) + r2_sched_queued(m->s, 1));
		ck_assert_uint_eq(r2_sched_queued(m->s, it->tenant == a ? 0 : 1),
				  (it->tenant == a ? q0 : q1) - 1);
		by[it->tenant == b][rail] += it->len;
		if (allow) {
			double lag = (double)(by[0][0] + by[0][1]) / 3.0 -
				     (double)(by[1][0] + by[1][1]);
			ck_assert_msg(lag < 2.0 * 256 * KB && lag > -2.0 * 256 * KB,
				      "chunk %d: lag %.0f", i, lag);
		}
	}
	sim_free(m);
}

START_TEST(test_move_keeps_share)
{
	uint64_t by[2][2] = { { 0 } }, off[2][2] = { { 0 } }; /* [a|b][rail] */

	run_split(true, by);
	ck_assert_uint_eq(by[0][0] + by[0][1], 3 * (by[1][0] + by[1][1]));
	ck_assert_uint_gt(by[0][1], 0); /* a's chunks left on rail 1 too */
	run_split(false, off);
	ck_assert_uint_eq(off[0][1], 0);
	ck_assert_uint_eq(off[1][0], 0);
	ck_assert_uint_eq(off[0][0], off[1][1]); /* 1:1, not 3:1 */
}
END_TEST

/* One tenant, chunks queued on rail 0 only: an idle rail 1 takes them
 * where they may move, takes nothing where they may not, and a tenant with
 * chunks on both rails is never moved (its own rail's chunk goes). */
START_TEST(test_move_idle_rail)
{
	struct sim *m = sim_new(256 * KB, 0, 125e6);
	int a = tenant(m, "a", "weight=1");
	bool allow = false;

	m->s->may_move = move_ok;
	m->s->may_send_arg = &allow;
	struct r2_sched_item *x = push(m, 0, a, 256 * KB);
	push(m, 0, a, 256 * KB);
	ck_assert_ptr_null(r2_sched_next(m->s, 1, m->now));
	allow = true;
	ck_assert_ptr_eq(r2_sched_next(m->s, 1, m->now), x);
	ck_assert_uint_eq(r2_sched_queued(m->s, 0), 1);
	ck_assert_uint_eq(m->s->t[a].queued, 1);
	struct r2_sched_item *y = push(m, 1, a, 256 * KB);
	ck_assert_ptr_eq(r2_sched_next(m->s, 1, m->now), y);
	ck_assert_uint_eq(r2_sched_queued(m->s, 0), 1);
	ck_assert_ptr_nonnull(r2_sched_next(m->s, 1, m->now)); /* rail 0's last */
	ck_assert_uint_eq(r2_sched_queued(m->s, 0), 0);
	ck_assert_ptr_null(r2_sched_next(m->s, 0, m->now));
	ck_assert_ptr_null(r2_sched_next(m->s, 1, m->now));
	ck_assert_uint_eq(m->s->t[a].queued, 0);
	ck_assert_uint_eq(m->s->t[a].bytes, 3 * 256 * KB);
	sim_free(m);
}
END_TEST

/* Tenants 1:1 with 256 KiB chunks, quantum 256 KiB (catch-up bound 16
 * chunks); b's queue runs dry for `gap` chunks of a, then both are
 * backlogged for 64 more: returns how many of those 64 went to b. */
static int after_gap(int gap)
{
	struct sim *m = sim_new(256 * KB, 0, 125e6);
	int a = tenant(m, "a", "weight=1"), b = tenant(m, "b", "weight=1");
	int ts[] = { a, b }, nb = 0;

	run_backlogged(m, ts, 2, 256 * KB, 40);
	/* b's queue drains (a kept backlogged), then a alone for gap chunks */
	while (m->s->t[b].queued)
		run_backlogged(m, ts, 1, 256 * KB, 1);
	run_backlogged(m, ts, 1, 256 * KB, gap);
	int from = m->nsent;
	run_backlogged(m, ts, 2, 256 * KB, 64);
	for (int i = from; i < m->nsent; i++)
		nb += m->tenant[i] == b;
	sim_free(m);
	return nb;
}

/* A tenant whose queues ran dry for a moment (the next step's chunks not
 * yet final) gets back what it was owed, up to 16 quanta per unit of
 * weight; a long idle time earns no more than that bound. */
START_TEST(test_catch_up_bounded)
{
	int nb = after_gap(8);
	/* owed: half of the 8 chunks a sent while b was dry */
	ck_assert_msg(nb >= 32 + 3 && nb <= 32 + 5, "short gap: b got %d of 64", nb);
	nb = after_gap(200);
	/* at most the bound (16 chunks of lag: 8 more for b of 64) */
	ck_assert_msg(nb >= 32 + 7 && nb <= 32 + 9, "long gap: b got %d of 64", nb);
}
END_TEST

static bool drop_b(struct r2_sched_item *it, void *arg)
{
	return it->tenant == *(int *)arg;
}

START_TEST(test_requeue_remove)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	int a = tenant(m, "a", "weight=1"), b = tenant(m, "b", "weight=1");

	struct r2_sched_item *x = push(m, 0, a, 1 * MB);
	push(m, 0, a, 1 * MB);
	push(m, 0, b, 1 * MB);
	push(m, 0, b, 1 * MB);
	struct r2_sched_item *it = r2_sched_next(m->s, 0, m->now);
	ck_assert_ptr_eq(it, x);
	ck_assert_uint_eq(m->s->t[a].bytes, 1 * MB);
	r2_sched_requeue(m->s, 0, it);
	ck_assert_uint_eq(m->s->t[a].bytes, 0);
	ck_assert_ptr_eq(r2_sched_next(m->s, 0, m->now), x);
	ck_assert_int_eq(r2_sched_remove(m->s, 0, drop_b, &b), 2);
	ck_assert_uint_eq(m->s->t[b].queued, 0);
	ck_assert_uint_eq(r2_sched_queued(m->s, 0), 1);
	it = r2_sched_next(m->s, 0, m->now);
	ck_assert_ptr_nonnull(it);
	ck_assert_int_eq(it->tenant, a);
	ck_assert_ptr_null(r2_sched_next(m->s, 0, m->now));
	sim_free(m);
}
END_TEST

START_TEST(test_policy_syntax_and_match)
{
	struct sim *m = sim_new(1 * MB, 0, 125e6);
	struct r2_tenant_policy p;
	char err[256], line[512];

	r2_tenant_policy_default(&p, "x");
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "cgroup=/kubepods/burstable weight=3 rate=2G "
						     "class=latency max_comms=8 max_mem=1G",
						err, sizeof(err)),
			 0);
	ck_assert_uint_eq(p.weight, 3);
	ck_assert_uint_eq(p.rate_bps, 2000000000ull);
	ck_assert_int_eq(p.cls, R2_TCLASS_LATENCY);
	ck_assert_uint_eq(p.max_comms, 8);
	ck_assert_uint_eq(p.max_mem, 1ull << 30);
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "max_req_rate=50 max_pending_ops=16 "
						     "max_proxy=2M",
						err, sizeof(err)),
			 0);
	ck_assert_uint_eq(p.max_req_rate, 50);
	ck_assert_uint_eq(p.max_pending_ops, 16);
	ck_assert_uint_eq(p.max_proxy, 2u << 20);
	ck_assert_uint_eq(p.max_comms, 8); /* the keys not given are kept */
	r2_tenant_policy_format(&p, line, sizeof(line));
	ck_assert_ptr_nonnull(strstr(line, "rate=2000000000 class=latency"));
	ck_assert_ptr_nonnull(strstr(line, "max_req_rate=50 max_pending_ops=16 max_proxy=2097152"));
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "max_proxy=-1", err, sizeof(err)), -EINVAL);
	/* 100 ms windows: a rate of 1-9/s is refused, not rounded up to 10 */
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "max_req_rate=5", err, sizeof(err)), -EINVAL);
	ck_assert_uint_eq(p.max_req_rate, 50);
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "weight=0", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "class=fast", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "rate=12Q", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "colour=red", err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unknown tenant key"));
	ck_assert_int_eq(r2_tenant_policy_parse(&p, "cgroup=relative", err, sizeof(err)),
			 -EINVAL);

	ck_assert_int_eq(r2_sched_tenant_find(m->s, "/kubepods/x"), -ENOENT);
	int k = tenant(m, "k8s", "cgroup=/kubepods");
	int kb = tenant(m, "k8s-burstable", "cgroup=/kubepods/burstable weight=2");
	int sv = tenant(m, "foo", "cgroup=/system.slice/foo.service");
	ck_assert_int_eq(r2_sched_tenant_find(m->s, "/kubepods/burstable/pod1/c"), kb);
	ck_assert_int_eq(r2_sched_tenant_of(m->s, "/kubepods/burstable/pod1/c", m->now), kb);
	ck_assert_int_eq(r2_sched_tenant_of(m->s, "/kubepods/besteffort/pod2", m->now), k);
	ck_assert_int_eq(r2_sched_tenant_of(m->s, "/kubepods", m->now), k);
	ck_assert_int_eq(r2_sched_tenant_of(m->s, "/system.slice/foo.service", m->now), sv);
	/* a prefix is a whole path component */
	int u = r2_sched_tenant_of(m->s, "/kubepodsX/a", m->now);
	ck_assert_int_ne(u, k);
	ck_assert(m->s->t[u].dynamic);
	ck_assert_str_eq(m->s->t[u].pol.name, "/kubepodsX/a");
	ck_assert_int_eq(r2_sched_tenant_of(m->s, "/kubepodsX/a", m->now), u);
	ck_assert_int_eq(r2_sched_tenant_find(m->s, "/kubepodsX/a"), u);
	ck_assert_int_eq(r2_sched_tenant_find(m->s, "/kubepodsX/b"), -ENOENT);
	int u2 = r2_sched_tenant_of(m->s, "/user.slice/b", m->now);
	ck_assert_int_ne(u2, u);
	/* the default policy changed: the unmatched cgroups' tenants follow */
	r2_tenant_policy_default(&p, "default");
	p.weight = 7;
	p.cls = R2_TCLASS_LATENCY;
	ck_assert_int_eq(r2_sched_policy_set(m->s, &p, m->now), 0);
	ck_assert_uint_eq(m->s->t[u2].pol.weight, 7);
	ck_assert_int_eq(m->s->t[u2].pol.cls, R2_TCLASS_LATENCY);
	ck_assert_str_eq(m->s->t[u2].pol.cgroup, "/user.slice/b");
	ck_assert_uint_eq(m->s->t[k].pol.weight, 1); /* a named one keeps its own */
	/* the table full: "_other" */
	char path[64];
	int last = -1;
	for (int i = 0; i < 80; i++) {
		snprintf(path, sizeof(path), "/many/%d", i);
		last = r2_sched_tenant_of(m->s, path, m->now);
	}
	ck_assert_int_eq(last, R2_SCHED_MAX_TENANTS - 1);
	ck_assert_str_eq(m->s->t[last].pol.name, "_other");
	ck_assert_int_eq(r2_sched_find(m->s, "_other"), last);
	/* a new named entry no longer fits */
	r2_tenant_policy_default(&p, "late");
	ck_assert_int_eq(r2_sched_policy_set(m->s, &p, m->now), -ENOSPC);
	sim_free(m);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("sched");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_share_3_1);
	tcase_add_test(tc, test_share_1_1_2);
	tcase_add_test(tc, test_drr_bound_mixed);
	tcase_add_test(tc, test_bucket_bound);
	tcase_add_test(tc, test_bucket_large_chunk);
	tcase_add_test(tc, test_priority_bound);
	tcase_add_test(tc, test_off_fifo);
	tcase_add_test(tc, test_reserve);
	tcase_add_test(tc, test_reserve_shares_again);
	tcase_add_test(tc, test_change_next_chunk);
	tcase_add_test(tc, test_requeue_remove);
	tcase_add_test(tc, test_class_change);
	tcase_add_test(tc, test_may_send);
	tcase_add_test(tc, test_share_behind_window);
	tcase_add_test(tc, test_share_across_rails);
	tcase_add_test(tc, test_move_keeps_share);
	tcase_add_test(tc, test_move_idle_rail);
	tcase_add_test(tc, test_catch_up_bounded);
	tcase_add_test(tc, test_policy_syntax_and_match);
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
