// SPDX-License-Identifier: MIT
/* Unit tests of daemon/engine/pool.c: the parallel-for pool (every part runs once,
 * a busy pool makes the second caller run its parts itself) and the work
 * queue the rail phase applies received chunks on (every job runs once, on
 * the queue's threads, several at once; destroy runs what is still queued;
 * bad arguments fail cleanly). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/exec.h"

/* ---- parallel-for ---- */

struct pf {
	atomic_int *hits;
	size_t n;
};

static void pf_part(void *ctx, size_t i)
{
	struct pf *p = ctx;

	ck_assert_uint_lt(i, p->n);
	atomic_fetch_add(&p->hits[i], 1);
}

START_TEST(test_pool_every_part_once)
{
	struct r2_pool *p = NULL;
	size_t sizes[] = { 1, 2, 3, 17, 1000 };

	ck_assert_int_eq(r2_pool_create(&p, 4), 0);
	ck_assert_int_eq(r2_pool_threads(p), 4);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct pf f = { calloc(sizes[k], sizeof(atomic_int)), sizes[k] };
		for (int rep = 0; rep < 20; rep++)
			r2_pool_run(p, f.n, pf_part, &f);
		for (size_t i = 0; i < f.n; i++)
			ck_assert_int_eq(atomic_load(&f.hits[i]), 20);
		free(f.hits);
	}
	r2_pool_destroy(p);
	r2_pool_destroy(NULL);
}
END_TEST

/* two callers at once: each job's parts all run exactly once */
static struct r2_pool *shared_pool;

static void *pf_caller(void *arg)
{
	struct pf *f = arg;

	for (int rep = 0; rep < 50; rep++)
		r2_pool_run(shared_pool, f->n, pf_part, f);
	return NULL;
}

START_TEST(test_pool_two_callers)
{
	struct pf a = { calloc(64, sizeof(atomic_int)), 64 };
	struct pf b = { calloc(64, sizeof(atomic_int)), 64 };
	pthread_t ta, tb;

	ck_assert_int_eq(r2_pool_create(&shared_pool, 3), 0);
	pthread_create(&ta, NULL, pf_caller, &a);
	pthread_create(&tb, NULL, pf_caller, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	for (int i = 0; i < 64; i++) {
		ck_assert_int_eq(atomic_load(&a.hits[i]), 50);
		ck_assert_int_eq(atomic_load(&b.hits[i]), 50);
	}
	r2_pool_destroy(shared_pool);
	free(a.hits);
	free(b.hits);
}
END_TEST

/* ---- work queue ---- */

struct job {
	struct r2_work w;
	int id;
	atomic_int *runs;
	atomic_int *running, *peak;
	pthread_t *who;
	int sleep_us;
};

static void job_run(struct r2_work *w)
{
	struct job *j = (struct job *)w;
	int now = atomic_fetch_add(j->running, 1) + 1;
	int peak = atomic_load(j->peak);

	while (now > peak && !atomic_compare_exchange_weak(j->peak, &peak, now))
		;
	if (j->sleep_us)
		usleep((useconds_t)j->sleep_us);
	j->who[j->id] = pthread_self();
	atomic_fetch_add(&j->runs[j->id], 1);
	atomic_fetch_sub(j->running, 1);
}

#define NJOBS 400

static void wait_runs(atomic_int *runs, int n)
{
	for (int spins = 0; spins < 10000; spins++) {
		int done = 0;
		for (int i = 0; i < n; i++)
			done += atomic_load(&runs[i]) > 0;
		if (done == n)
			return;
		usleep(1000);
	}
	ck_abort_msg("jobs did not all run within 10 s");
}

START_TEST(test_workq_every_job_once_in_parallel)
{
	struct r2_workq *q = NULL;
	struct job *jobs = calloc(NJOBS, sizeof(*jobs));
	atomic_int runs[NJOBS], running = 0, peak = 0;
	pthread_t who[NJOBS];

	memset(runs, 0, sizeof(runs));
	ck_assert_int_eq(r2_workq_create(&q, 4, "t-apply"), 0);
	ck_assert_int_eq(r2_workq_threads(q), 4);
	for (int i = 0; i < NJOBS; i++) {
		jobs[i] = (struct job){ .w.fn = job_run, .id = i, .runs = runs, .running = &running,
					.peak = &peak, .who = who, .sleep_us = i < 16 ? 20000 : 0 };
		r2_workq_submit(q, &jobs[i].w);
	}
	wait_runs(runs, NJOBS);
	for (int i = 0; i < NJOBS; i++) {
		ck_assert_int_eq(atomic_load(&runs[i]), 1);
		ck_assert(!pthread_equal(who[i], pthread_self())); /* on the queue's threads */
	}
	/* the first 16 jobs sleep 20 ms each: 4 threads took them together */
	ck_assert_int_ge(atomic_load(&peak), 2);
	ck_assert_int_le(atomic_load(&peak), 4);
	r2_workq_destroy(q);
	free(jobs);
}
END_TEST

START_TEST(test_workq_destroy_runs_queued)
{
	struct r2_workq *q = NULL;
	struct job *jobs = calloc(64, sizeof(*jobs));
	atomic_int runs[64], running = 0, peak = 0;
	pthread_t who[64];

	memset(runs, 0, sizeof(runs));
	ck_assert_int_eq(r2_workq_create(&q, 1, "t-apply"), 0);
	for (int i = 0; i < 64; i++) {
		jobs[i] = (struct job){ .w.fn = job_run, .id = i, .runs = runs, .running = &running,
					.peak = &peak, .who = who, .sleep_us = 1000 };
		r2_workq_submit(q, &jobs[i].w);
	}
	r2_workq_destroy(q); /* the 60-odd still queued run before it returns */
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(atomic_load(&runs[i]), 1);
	ck_assert_int_eq(atomic_load(&peak), 1); /* one thread: one at a time */
	free(jobs);
}
END_TEST

/* Owners take turns: with one thread held by a first job, 100 jobs of
 * owner 1 then 3 of owner 2 are queued; owner 2's run among the first jobs
 * after the held one (one of each in turn), owner 1's in their order. */
struct ojob {
	struct r2_work w;
	int id;
	atomic_int *seq;
	int *order;
	atomic_bool *hold, *started;
};

static void ojob_run(struct r2_work *w)
{
	struct ojob *j = (struct ojob *)w;

	atomic_store(j->started, true);
	while (atomic_load(j->hold))
		usleep(1000);
	j->order[atomic_fetch_add(j->seq, 1)] = j->id;
}

START_TEST(test_workq_owners_take_turns)
{
	struct r2_workq *q = NULL;
	struct ojob jobs[104];
	int order[104];
	atomic_int seq = 0;
	atomic_bool hold = true, started = false;

	ck_assert_int_eq(r2_workq_create(&q, 1, "t-apply"), 0);
	for (int i = 0; i < 104; i++) {
		jobs[i] = (struct ojob){ .w.fn = ojob_run, .id = i, .seq = &seq, .order = order,
					 .hold = &hold, .started = &started };
		/* job 0 (owner 1) holds the thread; 1..100 owner 1; 101..103 owner 2 */
		jobs[i].w.owner = i <= 100 ? 1 : 2;
	}
	r2_workq_submit(q, &jobs[0].w);
	/* the thread took job 0 and waits: waited for (10 s at most), since a
	 * loaded machine may start the thread late */
	for (int spins = 0; spins < 10000 && !atomic_load(&started); spins++)
		usleep(1000);
	ck_assert_msg(atomic_load(&started), "the thread did not take job 0 within 10 s");
	for (int i = 1; i < 104; i++)
		r2_workq_submit(q, &jobs[i].w);
	atomic_store(&hold, false);
	r2_workq_destroy(q);
	ck_assert_int_eq(atomic_load(&seq), 104);
	ck_assert_int_eq(order[0], 0);
	/* then one of each in turn: owner 2's three among the first seven */
	int last2 = 0, prev1 = 0;
	for (int k = 1; k < 104; k++) {
		if (order[k] > 100) {
			last2 = k;
		} else {
			ck_assert_int_gt(order[k], prev1); /* one owner's jobs in order */
			prev1 = order[k];
		}
	}
	ck_assert_int_le(last2, 7);
}
END_TEST

/* Weighted turns: owner 1 (weight 3) and owner 2 (weight 1) queue 60 jobs
 * each of 64 KiB behind a held one; while both have jobs waiting, owner 1
 * runs three for each of owner 2's. Then jobs of 16 KiB against jobs of
 * 64 KiB, both at weight 1: four of the small ones for each large one
 * (costs in bytes, not jobs). */
static void weighted_run(int w1, uint32_t c1, int w2, uint32_t c2, int per)
{
	struct r2_workq *q = NULL;
	static struct ojob jobs[121];
	static int order[121];
	atomic_int seq = 0;
	atomic_bool hold = true, started = false;

	ck_assert_int_eq(r2_workq_create(&q, 1, "t-apply"), 0);
	for (int i = 0; i < 121; i++) {
		jobs[i] = (struct ojob){ .w.fn = ojob_run, .id = i, .seq = &seq, .order = order,
					 .hold = &hold, .started = &started };
		/* job 0 holds the thread; 1..60 the first owner's, 61..120 the second's */
		bool first = i <= 60;
		jobs[i].w.owner = first ? 1 : 2;
		jobs[i].w.weight = (uint32_t)(first ? w1 : w2);
		jobs[i].w.cost = first ? c1 : c2;
	}
	r2_workq_submit(q, &jobs[0].w);
	for (int spins = 0; spins < 10000 && !atomic_load(&started); spins++)
		usleep(1000);
	ck_assert_msg(atomic_load(&started), "the thread did not take job 0 within 10 s");
	for (int i = 1; i < 121; i++)
		r2_workq_submit(q, &jobs[i].w);
	atomic_store(&hold, false);
	r2_workq_destroy(q);
	ck_assert_int_eq(atomic_load(&seq), 121);
	/* while the first owner has jobs left: `per` of its jobs, then one of
	 * the second's, in turn (whichever owner's turn comes first: job 0
	 * emptied the first owner's queue, so the second's turn comes next) */
	int n1 = 0, n2 = 0;
	for (int k = 1; k < 121 && n1 < 60; k++) {
		bool first = order[k] <= 60;
		if (first)
			n1++;
		else
			n2++;
		ck_assert_msg(n1 <= per * (n2 + 1) && n1 >= per * (n2 - 1),
			      "served job %d: %d of the first owner, %d of the second (%d:1)", k, n1,
			      n2, per);
	}
}

START_TEST(test_workq_weights)
{
	weighted_run(3, 64 << 10, 1, 64 << 10, 3);
}
END_TEST

START_TEST(test_workq_costs)
{
	weighted_run(1, 16 << 10, 1, 64 << 10, 4);
}
END_TEST

START_TEST(test_workq_bad_args)
{
	struct r2_workq *q = (struct r2_workq *)1;

	ck_assert_int_eq(r2_workq_create(&q, 0, "t"), -EINVAL);
	ck_assert_ptr_null(q);
	ck_assert_int_eq(r2_workq_threads(NULL), 0);
	r2_workq_destroy(NULL);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("pool");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_pool_every_part_once);
	tcase_add_test(tc, test_pool_two_callers);
	tcase_add_test(tc, test_workq_every_job_once_in_parallel);
	tcase_add_test(tc, test_workq_destroy_runs_queued);
	tcase_add_test(tc, test_workq_bad_args);
	tcase_add_test(tc, test_workq_owners_take_turns);
	tcase_add_test(tc, test_workq_weights);
	tcase_add_test(tc, test_workq_costs);
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
	return failed ? 1 : 0;
}
