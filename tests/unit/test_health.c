// SPDX-License-Identifier: MIT
/* Unit tests of rail health's pure rules (daemon/health_*.c): the
 * throughput monitor's ramp-up rule, which decides whether a path's
 * throughput may be judged yet (a rejoined path must not be found slow
 * while its traffic ramps up, however late that traffic comes back to it),
 * and the view comparison and description a re-plan is decided and logged
 * by. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "health_int.h"

#define S 1000000ull /* 1 s in us */

static struct r2_plink path(int state, uint64_t since_us, uint64_t conn_us)
{
	struct r2_plink l;

	memset(&l, 0, sizeof(l));
	l.state = (uint8_t)state;
	l.since_us = since_us;
	l.conn_us = conn_us;
	return l;
}

/* healthy and connected for long, carrying traffic for long: judged */
START_TEST(test_ramp_settled_path_is_judged)
{
	struct r2_plink l = path(R2_RS_HEALTHY, 100 * S, 90 * S);

	ck_assert(!r2h_mon_ramping(&l, 101 * S, 200 * S));
	/* healthy from the start (never changed state) */
	l = path(R2_RS_HEALTHY, 0, 10 * S);
	ck_assert(!r2h_mon_ramping(&l, 11 * S, 200 * S));
}
END_TEST

/* the case of the faults suite: a path turned healthy at 100 s, but the
 * view turned traffic to it only at 110 s; it is not judged until 3 s after
 * that traffic began, and is from then on */
START_TEST(test_ramp_counts_from_first_traffic)
{
	struct r2_plink l = path(R2_RS_HEALTHY, 100 * S, 99 * S);

	/* no traffic yet since it joined (a sample from before it failed
	 * does not count) */
	ck_assert(r2h_mon_ramping(&l, 0, 110 * S));
	ck_assert(r2h_mon_ramping(&l, 50 * S, 110 * S));
	/* the old rule (3 s from turning healthy) would judge it here */
	ck_assert(r2h_mon_ramping(&l, 110 * S, 110 * S + 500000));
	ck_assert(r2h_mon_ramping(&l, 110 * S, 110 * S + MON_RAMP_US - 1));
	ck_assert(!r2h_mon_ramping(&l, 110 * S, 110 * S + MON_RAMP_US));
}
END_TEST

/* traffic at once after turning healthy: 3 s from then */
START_TEST(test_ramp_after_turning_healthy)
{
	struct r2_plink l = path(R2_RS_HEALTHY, 100 * S, 50 * S);

	ck_assert(r2h_mon_ramping(&l, 100 * S, 100 * S));
	ck_assert(r2h_mon_ramping(&l, 100 * S, 100 * S + MON_RAMP_US - 1));
	ck_assert(!r2h_mon_ramping(&l, 100 * S, 100 * S + MON_RAMP_US));
}
END_TEST

/* recovering (connected again, not yet stable) or failed: never judged,
 * however long it has been in that state or carried traffic */
START_TEST(test_ramp_recovering_or_failed_is_not_judged)
{
	struct r2_plink l = path(R2_RS_RECOVERING, 10 * S, 10 * S);

	ck_assert(r2h_mon_ramping(&l, 11 * S, 500 * S));
	l = path(R2_RS_FAILED, 10 * S, 5 * S);
	ck_assert(r2h_mon_ramping(&l, 11 * S, 500 * S));
	l = path(R2_RS_DRAINED, 10 * S, 5 * S);
	ck_assert(r2h_mon_ramping(&l, 11 * S, 500 * S));
}
END_TEST

/* a new connection on a path whose state did not change (re-dialed
 * without being failed) ramps up too: traffic from before it does not
 * count */
START_TEST(test_ramp_after_reconnect)
{
	struct r2_plink l = path(R2_RS_HEALTHY, 10 * S, 300 * S);

	ck_assert(r2h_mon_ramping(&l, 20 * S, 300 * S + 1));
	ck_assert(r2h_mon_ramping(&l, 20 * S, 400 * S));
	ck_assert(r2h_mon_ramping(&l, 301 * S, 301 * S + MON_RAMP_US - 1));
	ck_assert(!r2h_mon_ramping(&l, 301 * S, 301 * S + MON_RAMP_US));
}
END_TEST

/* a path found slow (link state degraded) long ago is judged: it has to be
 * able to measure normal again */
START_TEST(test_ramp_degraded_is_judged)
{
	struct r2_plink l = path(R2_RS_DEGRADED, 10 * S, 5 * S);

	ck_assert(!r2h_mon_ramping(&l, 11 * S, 100 * S));
}
END_TEST

/* ---- views ---- */

START_TEST(test_view_eq)
{
	struct r2_view *a = r2h_view_new(3, 2), *b = r2h_view_new(3, 2), *c;

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	/* every NIC up equals no view at all */
	ck_assert(r2h_view_eq(a, NULL));
	ck_assert(r2h_view_eq(NULL, b));
	a->down[1 * 2 + 0] = 1;
	ck_assert(!r2h_view_eq(a, b));
	ck_assert(!r2h_view_eq(a, NULL));
	b->down[1 * 2 + 0] = 1;
	ck_assert(r2h_view_eq(a, b));
	/* a bandwidth change under 20% is no reason to re-plan; one over is */
	a->bw[2 * 2 + 1] = 100000000;
	b->bw[2 * 2 + 1] = 110000000;
	ck_assert(r2h_view_eq(a, b));
	b->bw[2 * 2 + 1] = 130000000;
	ck_assert(!r2h_view_eq(a, b));
	/* planned at nominal vs measured: different */
	b->bw[2 * 2 + 1] = 0;
	ck_assert(!r2h_view_eq(a, b));
	/* a copy is equal, and independent */
	c = r2h_view_copy(a);
	ck_assert_ptr_nonnull(c);
	ck_assert(r2h_view_eq(a, c));
	c->down[0] = 1;
	ck_assert(!r2h_view_eq(a, c));
	ck_assert_int_eq(a->down[0], 0);
	r2d_view_free(a);
	r2d_view_free(b);
	r2d_view_free(c);
	r2d_view_free(NULL);
}
END_TEST

START_TEST(test_view_describe)
{
	struct r2_view *v = r2h_view_new(2, 2);
	char buf[256];

	ck_assert_ptr_nonnull(v);
	r2h_view_describe(v, buf, sizeof(buf));
	ck_assert_str_eq(buf, "every NIC up");
	v->down[1 * 2 + 0] = 1;
	v->bw[0 * 2 + 1] = R2_PLAN_NOMINAL_BPS / 4;
	r2h_view_describe(v, buf, sizeof(buf));
	ck_assert_str_eq(buf, "host 0 rail 1 degraded (25%), host 1 rail 0");
	r2d_view_free(v);
}
END_TEST

static Suite *health_suite(void)
{
	Suite *s = suite_create("health");
	TCase *t = tcase_create("ramp");

	tcase_add_test(t, test_ramp_settled_path_is_judged);
	tcase_add_test(t, test_ramp_counts_from_first_traffic);
	tcase_add_test(t, test_ramp_after_turning_healthy);
	tcase_add_test(t, test_ramp_recovering_or_failed_is_not_judged);
	tcase_add_test(t, test_ramp_after_reconnect);
	tcase_add_test(t, test_ramp_degraded_is_judged);
	suite_add_tcase(s, t);
	t = tcase_create("view");
	tcase_add_test(t, test_view_eq);
	tcase_add_test(t, test_view_describe);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(health_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
