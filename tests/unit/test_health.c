// SPDX-License-Identifier: MIT
/* Unit tests of rail health's pure rules (daemon/health_*.c): the
 * throughput monitor's ramp-up rule, which decides whether a path's
 * throughput may be judged yet (a rejoined path must not be found slow
 * while its traffic ramps up, however late that traffic comes back to it),
 * and its trial rule (when a slow path is planned at full speed again to be
 * measured), and the view comparison and description a re-plan is decided and logged
 * by; and the read-only queries r2cclctl's replies are built from (the
 * event ring's window, the rails and paths snapshot). */
#include <arpa/inet.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/control.h"
#include "engine/comm.h"
#include "net/health_int.h"

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

/* ---- trials of slow paths ---- */

/* the first trial 4 x recover_stable_ms after the NIC was planned degraded */
START_TEST(test_trial_first)
{
	uint64_t st = 2 * S; /* recover_stable_ms 2000 */

	ck_assert(!r2h_mon_trial_due(10 * S, 0, st, 18 * S - 1));
	ck_assert(r2h_mon_trial_due(10 * S, 0, st, 18 * S));
	/* the monitor off (recover time 0) or a clock behind: none */
	ck_assert(!r2h_mon_trial_due(10 * S, 0, 0, 100 * S));
	ck_assert(!r2h_mon_trial_due(10 * S, 0, st, 9 * S));
}
END_TEST

/* each trial that found the NIC slow again doubles the wait, up to
 * 2^MON_TRIAL_MAX_SHIFT x (MON_TRIAL_FACTOR 4: 8 s, 16 s, ... 256 s) */
START_TEST(test_trial_backoff)
{
	uint64_t st = 2 * S, base = 8 * S;

	ck_assert_int_eq(MON_TRIAL_FACTOR * st, base);
	for (int k = 0; k <= MON_TRIAL_MAX_SHIFT + 2; k++) {
		int sh = k < MON_TRIAL_MAX_SHIFT ? k : MON_TRIAL_MAX_SHIFT;
		uint64_t wait = base << sh;
		ck_assert_msg(!r2h_mon_trial_due(S, k, st, S + wait - 1), "k %d", k);
		ck_assert_msg(r2h_mon_trial_due(S, k, st, S + wait), "k %d", k);
	}
	ck_assert(r2h_mon_trial_due(S, MON_TRIAL_MAX_SHIFT + 5, st, S + 256 * S));
}
END_TEST

/* a NIC degraded again within 15 s of its release counts one more trial
 * (its next waits twice as long); later, it starts afresh */
START_TEST(test_trial_nic_record)
{
	struct nicdeg n = { 0 };

	r2h_nicdeg_set(&n, true, 10 * S);
	ck_assert(n.on);
	ck_assert_int_eq(n.trials, 0);
	ck_assert_uint_eq(n.since_us, 10 * S);
	r2h_nicdeg_set(&n, true, 12 * S); /* a new figure: still since 10 s */
	ck_assert_uint_eq(n.since_us, 10 * S);
	ck_assert(r2h_mon_trial_due(n.since_us, n.trials, 2 * S, 18 * S));
	r2h_nicdeg_set(&n, false, 18 * S); /* its trial */
	ck_assert(!n.on);
	r2h_nicdeg_set(&n, true, 18 * S + MON_TRIAL_HOLD_US); /* slow again */
	ck_assert_int_eq(n.trials, 1);
	ck_assert(!r2h_mon_trial_due(n.since_us, n.trials, 2 * S, n.since_us + 16 * S - 1));
	ck_assert(r2h_mon_trial_due(n.since_us, n.trials, 2 * S, n.since_us + 16 * S));
	for (int k = 0; k < MON_TRIAL_MAX_SHIFT + 3; k++) {
		r2h_nicdeg_set(&n, false, 1000 * S);
		r2h_nicdeg_set(&n, true, 1001 * S);
	}
	ck_assert_int_eq(n.trials, MON_TRIAL_MAX_SHIFT);
	r2h_nicdeg_set(&n, false, 1002 * S);
	r2h_nicdeg_set(&n, true, 1002 * S + MON_TRIAL_HOLD_US + 1); /* afresh */
	ck_assert_int_eq(n.trials, 0);
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

/* ---- queries ---- */

/* a daemon with health's state and nothing else started */
static struct r2d *qd_new(void)
{
	struct r2d *d = calloc(1, sizeof(*d));

	ck_assert_ptr_nonnull(d);
	pthread_mutex_init(&d->lock, NULL);
	d->health = calloc(1, sizeof(*d->health));
	ck_assert_ptr_nonnull(d->health);
	pthread_mutex_init(&d->health->lock, NULL);
	return d;
}

static void qd_free(struct r2d *d)
{
	pthread_mutex_destroy(&d->health->lock);
	free(d->health);
	free(d->rails);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* the ring keeps the last EV_RING events; since and max pick a window */
START_TEST(test_events_window)
{
	struct r2d *d = qd_new();
	struct r2d_event_info *ev;
	uint64_t last;
	size_t n;

	for (int i = 1; i <= 300; i++)
		r2d_health_event(d, 1 + i % 3, "kind", "subj", "e%d", i);
	ck_assert_int_eq(r2d_health_events(d, 0, 0, &ev, &n, &last), 0);
	ck_assert_uint_eq(n, EV_RING);
	ck_assert_uint_eq(last, 300);
	ck_assert_uint_eq(ev[0].seq, 300 - EV_RING + 1);
	ck_assert_str_eq(ev[0].msg, "e45");
	ck_assert_uint_eq(ev[n - 1].seq, 300);
	ck_assert_str_eq(ev[n - 1].msg, "e300");
	ck_assert_str_eq(ev[n - 1].kind, "kind");
	ck_assert_str_eq(ev[n - 1].subject, "subj");
	ck_assert_uint_gt(ev[n - 1].time_ms, 1700000000000ull);
	free(ev);
	/* after seq 290: 10; the last 5 of those */
	ck_assert_int_eq(r2d_health_events(d, 290, 0, &ev, &n, &last), 0);
	ck_assert_uint_eq(n, 10);
	ck_assert_uint_eq(ev[0].seq, 291);
	free(ev);
	ck_assert_int_eq(r2d_health_events(d, 290, 5, &ev, &n, &last), 0);
	ck_assert_uint_eq(n, 5);
	ck_assert_uint_eq(ev[0].seq, 296);
	/* severities: 1 err, 2 warn, 3 info (296 % 3 == 2: sev 3) */
	ck_assert_str_eq(ev[0].severity, "info");
	ck_assert_str_eq(ev[1].severity, "err");
	ck_assert_str_eq(ev[2].severity, "warn");
	free(ev);
	/* nothing new */
	ck_assert_int_eq(r2d_health_events(d, 300, 0, &ev, &n, &last), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_eq(last, 300);
	free(ev);
	/* since past the last event, up to the largest a client can send
	 * (since + 1 wrapped to 0 and wrote 301 events into the ring's 256
	 * slots before 2026-12-07): nothing, with or without max */
	uint64_t bad[] = { 301, 1ull << 63, UINT64_MAX - 1, UINT64_MAX };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		for (uint32_t mx = 0; mx < 2; mx++) {
			ck_assert_int_eq(r2d_health_events(d, bad[i], mx, &ev, &n, &last), 0);
			ck_assert_uint_eq(n, 0);
			ck_assert_uint_eq(last, 300);
			free(ev);
		}
	qd_free(d);
}
END_TEST

/* A communicator's event is its owner's (uid and tenant) while it is known;
 * the daemon's own events are root's; a later communicator that gets the
 * same id (ids are reused, serials are not) does not show the old one's. */
START_TEST(test_events_owner)
{
	struct r2d *d = qd_new();
	struct r2_uid ua = { 1, 2 }, ub = { 3, 4 };
	struct r2d_event_info *ev;
	uint64_t last;
	size_t n;

	pthread_mutex_lock(&d->lock);
	struct r2_comm *a = r2d_comm_new(d, &ua, 2, "/jobs/a");
	ck_assert_ptr_nonnull(a);
	a->owner_uid = 1000;
	uint32_t id = a->id;
	r2d_comm_break(a, R2CCL_E_MISMATCH, "rank 1 says nranks 3");
	pthread_mutex_unlock(&d->lock);
	r2d_health_event(d, 3, "drain", "eth0", "by r2cclctl");
	ck_assert_int_eq(r2d_health_events(d, 0, 0, &ev, &n, &last), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(ev[0].kind, "comm_failed");
	ck_assert_uint_eq(ev[0].owner, a->serial);
	ck_assert(r2d_event_visible(d, 1000, "/jobs/a", &ev[0]));
	ck_assert(!r2d_event_visible(d, 1001, "/jobs/a", &ev[0]));
	ck_assert(!r2d_event_visible(d, 1000, "/jobs/b", &ev[0]));
	ck_assert(r2d_event_visible(d, 0, "", &ev[0]));
	ck_assert(!r2d_event_visible(d, 1000, "/jobs/a", &ev[1]));
	ck_assert(r2d_event_visible(d, 0, "", &ev[1]));
	/* a is gone; user 1001's communicator in the same tenant gets its id */
	pthread_mutex_lock(&d->lock);
	r2d_comm_put(a);
	d->next_comm_id = id;
	struct r2_comm *b = r2d_comm_new(d, &ub, 1, "/jobs/a");
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(b->id, id);
	b->owner_uid = 1001;
	pthread_mutex_unlock(&d->lock);
	ck_assert(!r2d_event_visible(d, 1001, "/jobs/a", &ev[0]));
	ck_assert(!r2d_event_visible(d, 1000, "/jobs/a", &ev[0]));
	free(ev);
	pthread_mutex_lock(&d->lock);
	r2d_comm_put(b);
	pthread_mutex_unlock(&d->lock);
	free(d->comm_tombs);
	qd_free(d);
}
END_TEST

/* no health (no rails): empty, not an error */
START_TEST(test_events_no_health)
{
	struct r2d d;
	struct r2d_event_info *ev;
	uint64_t last = 7;
	size_t n = 7;

	memset(&d, 0, sizeof(d));
	ck_assert_int_eq(r2d_health_events(&d, 0, 0, &ev, &n, &last), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_eq(last, 0);
	free(ev);
}
END_TEST

static int fake_stats(struct r2_tp *tp, uint64_t *tx, uint64_t *rx)
{
	*tx = 1000 + (uint64_t)(uintptr_t)tp;
	*rx = 2000 + (uint64_t)(uintptr_t)tp;
	return 0;
}

static const struct r2_tp_ops fake_ops = { .name = "fake", .stats = fake_stats };

/* the snapshot: every rail; every path known or connected, peer by peer;
 * a path whose NIC its host reported failed shows failed */
START_TEST(test_snapshot)
{
	struct r2d *d = qd_new();
	struct r2_rails *rs = calloc(1, sizeof(*rs));
	struct r2d_health_snap s;

	ck_assert_ptr_nonnull(rs);
	d->rails = rs;
	rs->n = 2;
	for (int r = 0; r < 2; r++) {
		snprintf(rs->rail[r].ifname, sizeof(rs->rail[r].ifname), "nic%d", r);
		rs->rail[r].ops = &fake_ops;
		rs->rail[r].tp = (struct r2_tp *)(uintptr_t)r;
		snprintf(rs->rail[r].h.cause, sizeof(rs->rail[r].h.cause), "start");
	}
	rs->rail[1].h.drained = true;
	rs->rail[1].h.state = R2_RS_HEALTHY;
	rs->rail[0].h.tx_bps = 5;
	rs->rail[0].h.errors = 3;
	atomic_store(&rs->npeers, 3);
	rs->peer[0].id = 0xa;
	rs->peer[0].link[0].known = true;
	rs->peer[0].link[0].state = R2_RS_RECOVERING;
	rs->peer[0].remote_down = 1u << 0;
	rs->peer[0].conn_mask = 1u << 1; /* rail 1: connected, not "known" */
	rs->peer[0].addr[1] = htonl(0x0a000102);
	atomic_store(&rs->peer[0].rtt_us[1], 42);
	rs->peer[1].id = 0xb; /* no path */
	rs->peer[2].id = 0xc;
	rs->peer[2].link[1].known = true;
	rs->peer[2].link[1].state = R2_RS_FAILED;
	rs->peer[2].link[1].missed = 4;
	snprintf(rs->peer[2].link[1].cause, sizeof(rs->peer[2].link[1].cause), "why");

	ck_assert_int_eq(r2d_health_snapshot(d, &s), 0);
	ck_assert_uint_eq(s.nrails, 2);
	ck_assert_str_eq(s.rails[0].nic, "nic0");
	ck_assert_str_eq(s.rails[0].state, "healthy");
	ck_assert_str_eq(s.rails[0].transport, "fake");
	ck_assert_uint_eq(s.rails[0].tx_bytes, 1000);
	ck_assert_uint_eq(s.rails[1].rx_bytes, 2001);
	ck_assert_uint_eq(s.rails[0].tx_bps, 5);
	ck_assert_uint_eq(s.rails[0].errors, 3);
	ck_assert_str_eq(s.rails[0].cause, "start");
	ck_assert(s.rails[1].drained);
	ck_assert_str_eq(s.rails[1].cause, "drained by the operator");

	ck_assert_uint_eq(s.npaths, 3);
	ck_assert_uint_eq(s.paths[0].peer, 0xa);
	ck_assert_uint_eq(s.paths[0].rail, 0);
	ck_assert_str_eq(s.paths[0].state, "failed"); /* recovering, NIC reported down */
	ck_assert_str_eq(s.paths[0].host, "000000000000000a");
	ck_assert_uint_eq(s.paths[1].rail, 1);
	ck_assert_str_eq(s.paths[1].nic, "nic1");
	ck_assert_str_eq(s.paths[1].state, "healthy");
	ck_assert_uint_eq(s.paths[1].addr, htonl(0x0a000102));
	ck_assert_uint_eq(s.paths[1].rtt_us, 42);
	ck_assert_uint_eq(s.paths[2].peer, 0xc);
	ck_assert_str_eq(s.paths[2].state, "failed");
	ck_assert_str_eq(s.paths[2].cause, "why");
	ck_assert_uint_eq(s.paths[2].missed, 4);
	r2d_health_snap_free(&s);
	ck_assert_ptr_null(s.rails);
	r2d_health_snap_free(NULL);
	qd_free(d);
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
	t = tcase_create("trial");
	tcase_add_test(t, test_trial_first);
	tcase_add_test(t, test_trial_backoff);
	tcase_add_test(t, test_trial_nic_record);
	suite_add_tcase(s, t);
	t = tcase_create("view");
	tcase_add_test(t, test_view_eq);
	tcase_add_test(t, test_view_describe);
	suite_add_tcase(s, t);
	t = tcase_create("query");
	tcase_add_test(t, test_events_window);
	tcase_add_test(t, test_events_owner);
	tcase_add_test(t, test_events_no_health);
	tcase_add_test(t, test_snapshot);
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
