// SPDX-License-Identifier: MIT
/*
 * Integration tests: r2ccl_last_error() gives the reason of each failure a
 * program author meets (issue 24): no daemon, bootstrap timeout, operation
 * timeout, mismatch, peer gone; communicator failures are also listed by
 * `r2cclctl events`.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "r2ccl.h"

static struct th_daemon D;

static void kill_daemon_at_exit(void)
{
	if (D.pid > 0)
		th_daemon_stop(&D, SIGKILL, 1000);
	th_daemon_cleanup(&D);
}

static void start_daemon(const char *const *extra)
{
	atexit(kill_daemon_at_exit);
	ck_assert_msg(th_daemon_start(&D, extra) == 0, "r2ccld did not start");
}

static void stop_daemon_ok(void)
{
	th_daemon_stop_ok(&D);
}

/* `r2cclctl events` contains needle */
static void expect_event(const char *needle)
{
	const char *ctl = getenv("R2CCLCTL");
	const char *argv[] = { ctl, "--socket", D.socket, "events", NULL };
	char out[16384];
	int rc;

	ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
	rc = th_run(argv, out, sizeof(out), 10000);
	ck_assert_msg(rc == 0, "events: exit %d:\n%.3000s", rc, out);
	ck_assert_msg(strstr(out, "comm_failed") && strstr(out, needle),
		      "no comm_failed event with \"%s\":\n%.3000s", needle, out);
}

/* One rank in its own thread and client. */
struct rank {
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	int nranks, rank;
	size_t count;
	float *buf;
	int ret;
	char why[256]; /* r2ccl_last_error() in that thread */
};

static void *th_init(void *arg)
{
	struct rank *m = arg;

	m->ret = r2ccl_comm_init_rank(m->c, &m->comm, m->nranks, &m->id, m->rank);
	snprintf(m->why, sizeof(m->why), "%s", r2ccl_last_error());
	return NULL;
}

static void *th_allreduce(void *arg)
{
	struct rank *m = arg;

	m->ret = r2ccl_allreduce(m->comm, m->buf, m->buf, m->count, R2CCL_FLOAT32, R2CCL_SUM);
	snprintf(m->why, sizeof(m->why), "%s", r2ccl_last_error());
	return NULL;
}

static void run(void *(*fn)(void *), struct rank *m, int n)
{
	pthread_t t[8];

	for (int i = 0; i < n; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, fn, &m[i]), 0);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

/* n ranks of one communicator, each with its own client, formed. */
static void ranks_form(struct rank *m, int n)
{
	r2ccl_unique_id_t id;

	memset(m, 0, sizeof(*m) * (size_t)n);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(r2ccl_connect(NULL, &m[i].c), 0);
		ck_assert_int_eq(r2ccl_mem_alloc(m[i].c, 4096, (void **)&m[i].buf), 0);
		m[i].nranks = n;
		m[i].rank = i;
		m[i].count = 16;
	}
	ck_assert_int_eq(r2ccl_get_unique_id(m[0].c, &id), 0);
	for (int i = 0; i < n; i++)
		m[i].id = id;
	run(th_init, m, n);
	for (int i = 0; i < n; i++)
		ck_assert_msg(m[i].ret == 0, "rank %d init: %s (%s)", i, r2ccl_strerror(m[i].ret),
			      m[i].why);
}

static void ranks_free(struct rank *m, int n)
{
	for (int i = 0; i < n; i++) {
		r2ccl_comm_destroy(m[i].comm);
		r2ccl_disconnect(m[i].c);
	}
}

START_TEST(no_daemon)
{
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	r2ccl_client_t *c = (r2ccl_client_t *)&o; /* must be overwritten */
	int r;

	o.socket_path = "/nonexistent/r2ccl-test/r2ccld.sock";
	r = r2ccl_connect(&o, &c);
	ck_assert_int_eq(r, -ENOENT);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(r2ccl_last_error(), "/nonexistent/r2ccl-test/r2ccld.sock") &&
			      strstr(r2ccl_last_error(), "no r2ccld listening"),
		      "%s", r2ccl_last_error());
	/* from the environment, as most programs connect */
	setenv("R2CCL_SOCKET", "/nonexistent/r2ccl-env.sock", 1);
	ck_assert_int_eq(r2ccl_connect(NULL, &c), -ENOENT);
	ck_assert_msg(strstr(r2ccl_last_error(), "/nonexistent/r2ccl-env.sock"), "%s",
		      r2ccl_last_error());
	/* r2ccl_strerror is no call that fails: it leaves the reason */
	r2ccl_strerror(0);
	ck_assert_msg(r2ccl_last_error()[0] != '\0', "cleared by an unrelated call");
}
END_TEST

START_TEST(bootstrap_timeout)
{
	const char *const args[] = { "--bootstrap-timeout-ms", "500", NULL };
	struct rank m[1];
	double t0;

	start_daemon(args);
	memset(m, 0, sizeof(m));
	ck_assert_int_eq(r2ccl_connect(NULL, &m[0].c), 0);
	ck_assert_int_eq(r2ccl_get_unique_id(m[0].c, &m[0].id), 0);
	m[0].nranks = 2; /* rank 1 never comes */
	t0 = th_now_ms();
	th_init(&m[0]);
	ck_assert_msg(m[0].ret == R2CCL_E_BOOTSTRAP, "%s", r2ccl_strerror(m[0].ret));
	/* not before the deadline (500 ms); after it, soon: 10 s, room for a
	 * loaded machine */
	ck_assert_msg(th_now_ms() - t0 < 10000, "took %.0f ms", th_now_ms() - t0);
	ck_assert_msg(th_now_ms() - t0 >= 450, "took only %.0f ms", th_now_ms() - t0);
	ck_assert_msg(strstr(m[0].why, "only 1 of 2 ranks joined") &&
			      strstr(m[0].why, "rank 1 missing"),
		      "reason: \"%s\"", m[0].why);
	ck_assert_ptr_null(m[0].comm);
	expect_event("rank 1 missing");
	r2ccl_disconnect(m[0].c);
	stop_daemon_ok();
}
END_TEST

START_TEST(op_timeout)
{
	const char *const args[] = { "--op-timeout-ms", "500", NULL };
	struct rank m[2];

	start_daemon(args);
	ranks_form(m, 2);
	th_allreduce(&m[0]); /* rank 1 never calls it */
	ck_assert_msg(m[0].ret == -ETIMEDOUT, "%s", r2ccl_strerror(m[0].ret));
	ck_assert_msg(strstr(m[0].why, "rank 0 waited 500 ms for rank 1"), "reason: \"%s\"",
		      m[0].why);
	/* rank 1, late, learns why the communicator is broken */
	th_allreduce(&m[1]);
	ck_assert_msg(m[1].ret == R2CCL_E_COMM_BROKEN, "%s", r2ccl_strerror(m[1].ret));
	ck_assert_msg(strstr(m[1].why, "rank 0 waited 500 ms for rank 1"), "reason: \"%s\"",
		      m[1].why);
	expect_event("rank 0 waited 500 ms for rank 1");
	ranks_free(m, 2);
	stop_daemon_ok();
}
END_TEST

START_TEST(mismatch)
{
	struct rank m[2];

	start_daemon(NULL);
	ranks_form(m, 2);
	m[1].count = 17;
	run(th_allreduce, m, 2);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(m[r].ret == R2CCL_E_MISMATCH, "rank %d: %s", r,
			      r2ccl_strerror(m[r].ret));
		ck_assert_msg(strstr(m[r].why, "count 16") && strstr(m[r].why, "count 17"),
			      "rank %d reason: \"%s\"", r, m[r].why);
	}
	expect_event("count 17");
	ranks_free(m, 2);
	stop_daemon_ok();
}
END_TEST

struct late_init {
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	int nranks, rank, ret;
};

static void *late_init_run(void *arg)
{
	struct late_init *l = arg;

	l->ret = r2ccl_comm_init_rank(l->c, &l->comm, l->nranks, &l->id, l->rank);
	return NULL;
}

/* A communicator fails while forming (two ranks disagree on nranks) and is
 * freed once its ranks are gone; a rank that comes later with the same id
 * gets the same error at once, with the reason, not a bootstrap timeout. */
START_TEST(late_rank_of_failed_comm)
{
	const char *const extra[] = { "--bootstrap-timeout-ms", "20000", NULL };
	struct late_init r0 = { .nranks = 2, .rank = 0 }, r1, r2;
	pthread_t t;
	double t0;

	start_daemon(extra);
	ck_assert_int_eq(r2ccl_connect(NULL, &r0.c), 0);
	ck_assert_int_eq(r2ccl_get_unique_id(r0.c, &r0.id), 0);
	r1 = r0;
	r1.nranks = 3;
	r1.rank = 1;
	ck_assert_int_eq(r2ccl_connect(NULL, &r1.c), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, late_init_run, &r0), 0);
	usleep(200 * 1000);
	late_init_run(&r1);
	pthread_join(t, NULL);
	ck_assert_msg(r0.ret == R2CCL_E_MISMATCH && r1.ret == R2CCL_E_MISMATCH,
		      "rank 0: %d, rank 1: %d", r0.ret, r1.ret);
	r2ccl_disconnect(r0.c);
	r2ccl_disconnect(r1.c);
	/* the daemon frees the communicator as it reads the clients' ends:
	 * waited for (10 s at most), since a loaded machine is slow */
	ck_assert_msg(th_wait_status(&D, "\"comms\": []", 10000),
		      "the failed communicator is still listed after 10 s");
	r2 = r0;
	r2.rank = 1;
	ck_assert_int_eq(r2ccl_connect(NULL, &r2.c), 0);
	t0 = th_now_ms();
	late_init_run(&r2);
	ck_assert_msg(r2.ret == R2CCL_E_MISMATCH, "late rank: %s (%s)", r2ccl_strerror(r2.ret),
		      r2ccl_last_error());
	/* at once, not at the bootstrap timeout (20 s): 10 s is room for a
	 * loaded machine */
	ck_assert_msg(th_now_ms() - t0 < 10000, "late rank waited %.0f ms", th_now_ms() - t0);
	ck_assert_msg(strstr(r2ccl_last_error(), "failed before rank 1 joined") &&
			      strstr(r2ccl_last_error(), "nranks"),
		      "reason: \"%s\"", r2ccl_last_error());
	r2ccl_disconnect(r2.c);
	stop_daemon_ok();
}
END_TEST

/* A second process joins as rank 1 and is killed while rank 0 waits in an
 * AllReduce. */
static void *killer(void *arg)
{
	usleep(300 * 1000);
	kill(*(pid_t *)arg, SIGKILL);
	return NULL;
}

START_TEST(peer_gone)
{
	struct rank m[1];
	int pfd[2];
	pthread_t t;
	pid_t pid;
	char b;

	start_daemon(NULL);
	memset(m, 0, sizeof(m));
	ck_assert_int_eq(r2ccl_connect(NULL, &m[0].c), 0);
	ck_assert_int_eq(r2ccl_mem_alloc(m[0].c, 4096, (void **)&m[0].buf), 0);
	ck_assert_int_eq(r2ccl_get_unique_id(m[0].c, &m[0].id), 0);
	ck_assert_int_eq(pipe(pfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		r2ccl_client_t *c;
		r2ccl_comm_t *comm;

		close(pfd[0]);
		if (r2ccl_connect(NULL, &c) != 0 ||
		    r2ccl_comm_init_rank(c, &comm, 2, &m[0].id, 1) != 0)
			_exit(1);
		if (write(pfd[1], "j", 1) != 1)
			_exit(2);
		pause(); /* killed here */
		_exit(3);
	}
	close(pfd[1]);
	m[0].nranks = 2;
	th_init(&m[0]);
	ck_assert_msg(m[0].ret == 0, "init: %s (%s)", r2ccl_strerror(m[0].ret), m[0].why);
	ck_assert_int_eq(read(pfd[0], &b, 1), 1);
	close(pfd[0]);
	m[0].count = 16;
	ck_assert_int_eq(pthread_create(&t, NULL, killer, &pid), 0);
	th_allreduce(&m[0]);
	pthread_join(t, NULL);
	waitpid(pid, NULL, 0);
	ck_assert_msg(m[0].ret == R2CCL_E_PEER_GONE, "%s", r2ccl_strerror(m[0].ret));
	ck_assert_msg(strstr(m[0].why, "rank 1 left the communicator (client died)"),
		      "reason: \"%s\"", m[0].why);
	expect_event("rank 1 left the communicator (client died)");
	ranks_free(m, 1);
	stop_daemon_ok();
}
END_TEST

TH_MAIN("reasons", 60, no_daemon, bootstrap_timeout, op_timeout, mismatch, late_rank_of_failed_comm,
	peer_gone)
