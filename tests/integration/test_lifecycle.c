// SPDX-License-Identifier: MIT
/*
 * Integration tests: r2ccld's life cycle (signals, configuration, a second
 * daemon, the daemon dying under its clients) and r2cclctl's exit codes.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "r2ccl.h"

static struct th_daemon D;

static const char *daemon_bin(void)
{
	return getenv("R2CCLD") ? getenv("R2CCLD") : "build/daemon/r2ccld";
}

static const char *ctl_bin(void)
{
	const char *p = getenv("R2CCLCTL");

	ck_assert_msg(p && p[0], "R2CCLCTL is not set");
	return p;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
}

/* ------------------------------------------------------------------------ */
/* ranks driven by threads                                                  */

struct rank {
	r2ccl_client_t *cl;
	r2ccl_comm_t *comm;
	int32_t *buf;
	size_t count;
	int rank;
	r2ccl_unique_id_t id;
	int ret;
	double ms;
	/* the in-flight loop */
	atomic_int iters;
	atomic_bool done;
	int bad_elem; /* -1: every completed op had exact results */
	r2ccl_mode_t mode; /* the communicator's mode it asks for */
};

static void *th_init(void *a)
{
	struct rank *r = a;
	r2ccl_comm_config_t cfg = R2CCL_COMM_CONFIG_INITIALIZER;

	cfg.mode = r->mode;
	r->ret = r2ccl_comm_init_rank_config(r->cl, &r->comm, 2, &r->id, r->rank, &cfg);
	return NULL;
}

static void fill(struct rank *r, int round)
{
	for (size_t i = 0; i < r->count; i++)
		r->buf[i] = (int32_t)i + r->rank * 7 + round;
}

/* expected sum over the two ranks */
static int check(struct rank *r, int round)
{
	for (size_t i = 0; i < r->count; i++)
		if (r->buf[i] != (int32_t)(2 * i) + 7 + 2 * round)
			return (int)i;
	return -1;
}

static void *th_allreduce(void *a)
{
	struct rank *r = a;
	double t0 = th_now_ms();

	fill(r, 0);
	r->ret = r2ccl_allreduce(r->comm, r->buf, r->buf, r->count, R2CCL_INT32, R2CCL_SUM);
	r->ms = th_now_ms() - t0;
	if (r->ret == 0)
		r->bad_elem = check(r, 0);
	return NULL;
}

/* allreduce until an error (or 1000 rounds) */
static void *th_loop(void *a)
{
	struct rank *r = a;

	r->bad_elem = -1;
	for (int round = 0; round < 1000; round++) {
		double t0 = th_now_ms();

		fill(r, round);
		r->ret = r2ccl_allreduce(r->comm, r->buf, r->buf, r->count, R2CCL_INT32, R2CCL_SUM);
		r->ms = th_now_ms() - t0;
		if (r->ret)
			break;
		if (r->bad_elem < 0)
			r->bad_elem = check(r, round);
		atomic_fetch_add(&r->iters, 1);
	}
	atomic_store(&r->done, true);
	return NULL;
}

static void run2(void *(*fn)(void *), struct rank *r)
{
	pthread_t t[2];

	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, fn, &r[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
}

/* Two clients with shared buffers and one unique id; no communicator yet. */
static void pair_connect(struct rank *r, size_t count)
{
	for (int i = 0; i < 2; i++) {
		r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
		int ret;

		memset(&r[i], 0, sizeof(r[i]));
		o.client_name = "lifecycle";
		o.timeout_ms = 10000;
		ret = r2ccl_connect(&o, &r[i].cl);
		ck_assert_msg(ret == 0, "connect: %s", r2ccl_strerror(ret));
		r[i].rank = i;
		r[i].count = count;
		ret = r2ccl_mem_alloc(r[i].cl, count * sizeof(int32_t), (void **)&r[i].buf);
		ck_assert_msg(ret == 0, "mem_alloc: %s", r2ccl_strerror(ret));
	}
	ck_assert_int_eq(r2ccl_get_unique_id(r[0].cl, &r[0].id), 0);
	r[1].id = r[0].id;
}

static void pair_setup(struct rank *r, size_t count)
{
	pair_connect(r, count);
	run2(th_init, r);
	for (int i = 0; i < 2; i++)
		ck_assert_msg(r[i].ret == 0, "init rank %d: %s", i, r2ccl_strerror(r[i].ret));
}

static void pair_check(struct rank *r)
{
	run2(th_allreduce, r);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].ret == 0, "allreduce rank %d: %s", i, r2ccl_strerror(r[i].ret));
		ck_assert_msg(r[i].bad_elem < 0, "rank %d: wrong result at %d", i, r[i].bad_elem);
	}
}

static void pair_free(struct rank *r)
{
	for (int i = 0; i < 2; i++) {
		r2ccl_comm_destroy(r[i].comm);
		r2ccl_disconnect(r[i].cl);
		r[i].comm = NULL;
		r[i].cl = NULL;
	}
}

/* ------------------------------------------------------------------------ */
/* signals                                                                  */

START_TEST(sigterm_idle)
{
	struct stat st;
	int rc;

	th_start(&D, NULL);
	ck_assert_int_eq(stat(D.socket, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	rc = th_daemon_stop(&D, SIGTERM, 30000);
	ck_assert_msg(rc == 0, "exit status %d", rc);
	ck_assert_msg(stat(D.socket, &st) < 0 && errno == ENOENT, "socket file left behind");
	ck_assert_int_ge(th_log_count(&D, "r2ccld stopped"), 1);
	th_daemon_cleanup(&D);
}
END_TEST

START_TEST(sigint_idle)
{
	int rc;

	th_start(&D, NULL);
	rc = th_daemon_stop(&D, SIGINT, 30000);
	ck_assert_msg(rc == 0, "exit status %d", rc);
	ck_assert_int_ne(access(D.socket, F_OK), 0);
	th_daemon_cleanup(&D);
}
END_TEST

START_TEST(sigterm_in_flight)
{
	struct rank r[2];
	pthread_t t[2];
	double t0;
	int rc;

	th_start(&D, NULL);
	pair_setup(r, (64u << 20) / sizeof(int32_t));
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, th_loop, &r[i]), 0);
	/* a few rounds done: the next one is in flight */
	t0 = th_now_ms();
	while (atomic_load(&r[0].iters) < 2 && !atomic_load(&r[0].done) && th_now_ms() - t0 < 30000)
		usleep(1000);
	ck_assert_msg(!atomic_load(&r[0].done), "the loop stopped early: %s",
		      r2ccl_strerror(r[0].ret));
	usleep(20000);
	kill(D.pid, SIGTERM);
	t0 = th_now_ms();
	for (int i = 0; i < 2; i++) {
		while (!atomic_load(&r[i].done) && th_now_ms() - t0 < 30000)
			usleep(1000);
		ck_assert_msg(atomic_load(&r[i].done), "rank %d hangs after SIGTERM", i);
		pthread_join(t[i], NULL);
	}
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].ret == R2CCL_E_SHUTDOWN || r[i].ret == R2CCL_E_DAEMON_GONE,
			      "rank %d after %d rounds: %d (%s)", i, atomic_load(&r[i].iters),
			      r[i].ret, r2ccl_strerror(r[i].ret));
		ck_assert_msg(r[i].bad_elem < 0, "rank %d: wrong result at %d", i, r[i].bad_elem);
		/* the failing call itself came back promptly (< op timeout) */
		ck_assert_msg(r[i].ms < 10000, "rank %d: last op took %.0f ms", i, r[i].ms);
	}
	rc = th_daemon_stop(&D, 0, 15000);
	ck_assert_msg(rc == 0, "exit status %d (log %s)", rc, D.log);
	ck_assert_int_ge(th_log_count(&D, "SIGTERM: draining"), 1);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(r2ccl_client_check(r[i].cl), R2CCL_E_DAEMON_GONE);
	pair_free(r);
	th_daemon_cleanup(&D);
}
END_TEST

/* SIGTERM while one rank waits in an allreduce its peer has not called yet:
 * the waiting op must fail with a shutdown error, not "peer gone". */
START_TEST(sigterm_pending_op)
{
	struct rank r[2];
	pthread_t t;
	double t0;
	int rc;

	th_start(&D, NULL);
	pair_setup(r, 1024);
	pair_check(r);
	/* rank 1 (the newer session) waits: the daemon closes the older session
	 * first at shutdown */
	r[1].ret = 1;
	ck_assert_int_eq(pthread_create(&t, NULL, th_allreduce, &r[1]), 0);
	usleep(200000);
	t0 = th_now_ms();
	kill(D.pid, SIGTERM);
	pthread_join(t, NULL);
	/* promptly: well before op_timeout_ms (30 s by default), with room
	 * for a loaded machine */
	ck_assert_msg(th_now_ms() - t0 < 20000, "took %.0f ms", th_now_ms() - t0);
	ck_assert_msg(r[1].ret == R2CCL_E_SHUTDOWN || r[1].ret == R2CCL_E_DAEMON_GONE,
		      "the waiting rank got %d (%s)", r[1].ret, r2ccl_strerror(r[1].ret));
	rc = th_daemon_stop(&D, 0, 15000);
	ck_assert_msg(rc == 0, "exit status %d (log %s)", rc, D.log);
	pair_free(r);
	th_daemon_cleanup(&D);
}
END_TEST

START_TEST(sigkill_under_client)
{
	struct rank r[2];
	void *p;
	r2ccl_unique_id_t id;

	th_start(&D, NULL);
	pair_setup(r, 4096);
	pair_check(r);
	ck_assert_int_eq(r2ccl_client_check(r[0].cl), 0);
	ck_assert_int_eq(th_daemon_stop(&D, SIGKILL, 5000), 128 + SIGKILL);

	run2(th_allreduce, r);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].ret == R2CCL_E_DAEMON_GONE, "rank %d: %d (%s)", i, r[i].ret,
			      r2ccl_strerror(r[i].ret));
		/* at once (the socket is closed): 10 s is room for a loaded
		 * machine, and far from op_timeout_ms (30 s) */
		ck_assert_msg(r[i].ms < 10000, "rank %d learnt after %.0f ms", i, r[i].ms);
		ck_assert_int_eq(r2ccl_client_check(r[i].cl), R2CCL_E_DAEMON_GONE);
	}
	/* every later call says so too, at once */
	ck_assert_int_eq(r2ccl_get_unique_id(r[0].cl, &id), R2CCL_E_DAEMON_GONE);
	ck_assert_int_eq(r2ccl_mem_alloc(r[1].cl, 4096, &p), R2CCL_E_DAEMON_GONE);
	pair_free(r);

	/* a client that was idle learns it from r2ccl_client_check alone */
	th_daemon_cleanup(&D);
	th_start(&D, NULL);
	{
		r2ccl_client_t *cl;
		ck_assert_int_eq(r2ccl_connect(NULL, &cl), 0);
		ck_assert_int_eq(r2ccl_client_check(cl), 0);
		ck_assert_int_eq(th_daemon_stop(&D, SIGKILL, 5000), 128 + SIGKILL);
		usleep(50000);
		ck_assert_int_eq(r2ccl_client_check(cl), R2CCL_E_DAEMON_GONE);
		r2ccl_disconnect(cl);
	}
	/* the stale socket left behind does not stop the next daemon */
	{
		const char *argv[] = { daemon_bin(), "--socket", D.socket, "--config", "/dev/null",
				       "--check-config", NULL };
		char out[16384];
		ck_assert_int_eq(access(D.socket, F_OK), 0);
		ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 0);
	}
	th_daemon_cleanup(&D);
}
END_TEST

/* A fault in the daemon leaves the signal, the thread and a backtrace in the
 * log, and the default action's exit status (a crash is not a silent
 * "does not answer"). */
START_TEST(fatal_signal)
{
	struct rlimit nocore = { 0, 0 };
	int rc;

	ck_assert_int_eq(setrlimit(RLIMIT_CORE, &nocore), 0); /* inherited */
	th_start(&D, NULL);
	rc = th_daemon_stop(&D, SIGSEGV, 30000);
#if defined(__SANITIZE_ADDRESS__)
	/* ASan's own handler reports it instead */
	ck_assert_msg(rc != 0 && rc != -1, "exit status %d", rc);
#else
	ck_assert_msg(rc == 128 + SIGSEGV, "exit status %d", rc);
	ck_assert_int_eq(th_log_count(&D, "fatal signal 11 (SIGSEGV)"), 1);
	/* (kill(2) reaches whichever thread does not block it) */
	ck_assert_int_eq(th_log_count(&D, "sent by pid "), 1);
	ck_assert_int_eq(th_log_count(&D, "'; backtrace (addr2line"), 1);
	ck_assert_int_ge(th_log_count(&D, ")[0x"), 2); /* frames */
#endif
	th_daemon_cleanup(&D);
}
END_TEST

START_TEST(sighup_reload)
{
	char cfg[] = "/tmp/r2ccl-cfg-XXXXXX";
	const char *args[] = { "--config", cfg, NULL };
	struct rank r[2];
	int fd, n;

	fd = mkstemp(cfg);
	ck_assert_int_ge(fd, 0);
	close(fd);
	write_file(cfg, "# test\nlog_level = info\n");
	th_start(&D, args);
	pair_setup(r, 4096);
	pair_check(r);
	n = th_log_count(&D, "connected (pid");
	ck_assert_int_eq(n, 0); /* a debug line */

	write_file(cfg, "log_level = debug\nbootstrap_timeout_ms = 2000\n");
	kill(D.pid, SIGHUP);
	th_expect_log(&D, "reload: log_level = debug", 1);
	th_expect_log(&D, "reload: bootstrap_timeout_ms = 2000", 1);
	pair_check(r);
	/* debug lines now appear */
	{
		r2ccl_client_t *cl;
		ck_assert_int_eq(r2ccl_connect(NULL, &cl), 0);
		r2ccl_disconnect(cl);
	}
	th_expect_log(&D, "connected (pid", 1);

	/* a broken file on reload: kept running with the old values */
	write_file(cfg, "log_level = debug\nno_such_key = 1\n");
	kill(D.pid, SIGHUP);
	th_expect_log(&D, "reload failed, keeping the running configuration", 1);
	pair_check(r);
	pair_free(r);
	th_stop_ok(&D);
	unlink(cfg);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* configuration at start                                                   */

static void expect_start_fails(const char *const *extra, int want_status, const char *phrase)
{
	char dir[] = "/tmp/r2ccl-cfgfail-XXXXXX", sock[128], out[16384];
	const char *argv[32];
	int n = 0, rc;

	th_temp_path(dir, "s", sock, sizeof(sock));
	argv[n++] = daemon_bin();
	argv[n++] = "--socket";
	argv[n++] = sock;
	for (int i = 0; extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	rc = th_run(argv, out, sizeof(out), 10000);
	ck_assert_msg(rc == want_status, "%s ...: exit %d, expected %d; output:\n%.3000s", extra[0], rc,
		      want_status, out);
	ck_assert_msg(strstr(out, phrase), "no \"%s\" in:\n%.3000s", phrase, out);
	ck_assert_msg(access(sock, F_OK) != 0, "a socket was created");
	rmdir(dir);
}

START_TEST(bad_config_at_start)
{
	char cfg[] = "/tmp/r2ccl-cfg-XXXXXX";
	int fd = mkstemp(cfg);

	{
		const char *a[] = { "--config", "/dev/null", "--op-timeout-ms", "abc", NULL };
		expect_start_fails(a, 2, "--op-timeout-ms");
		expect_start_fails(a, 2, "\"abc\" is not an integer");
	}
	{
		const char *a[] = { "--config", "/dev/null", "--op-timeout-ms", "5", NULL };
		expect_start_fails(a, 2, "configuration error");
	}
	{
		const char *a[] = { "--config", "/dev/null", "--op-timeout-ms", NULL };
		expect_start_fails(a, 2, "needs a value");
	}
	{
		const char *a[] = { "--config", "/dev/null", "--bogus", NULL };
		expect_start_fails(a, 2, "unknown option '--bogus'");
	}
	{
		const char *a[] = { "--config", "/dev/null", "stray", NULL };
		expect_start_fails(a, 2, "unexpected argument 'stray'");
	}
	ck_assert_int_ge(fd, 0);
	close(fd);
	write_file(cfg, "log_level = info\nbogus_key = 3\n");
	{
		const char *a[] = { "--config", cfg, NULL };
		expect_start_fails(a, 2, "unknown parameter \"bogus_key\"");
		expect_start_fails(a, 2, ":2:"); /* the line number */
	}
	write_file(cfg, "max_frame = lots\n");
	{
		const char *a[] = { "--config", cfg, NULL };
		expect_start_fails(a, 2, "max_frame");
	}
	{
		const char *a[] = { "--config", "/nonexistent/r2ccld.conf", NULL };
		expect_start_fails(a, 2, "/nonexistent/r2ccld.conf");
	}
	{
		const char *a[] = { "--config", "/dev/null", "--log-level", "loud", NULL };
		expect_start_fails(a, 2, "\"loud\" is not one of");
	}
	{
		const char *a[] = { "--config", "/dev/null", "--socket-mode", "999", NULL };
		expect_start_fails(a, 2, "socket_mode");
	}
	/* through the environment too */
	setenv("R2CCL_OP_TIMEOUT_MS", "soon", 1);
	{
		const char *a[] = { "--config", "/dev/null", NULL };
		expect_start_fails(a, 2, "\"soon\"");
	}
	unsetenv("R2CCL_OP_TIMEOUT_MS");
	unlink(cfg);
}
END_TEST

START_TEST(check_config)
{
	char dir[] = "/tmp/r2ccl-check-XXXXXX", sock[128], out[16384];
	int rc;

	th_temp_path(dir, "s", sock, sizeof(sock));
	{
		const char *argv[] = { daemon_bin(), "--check-config", "--socket", sock,
				       "--config", "/dev/null", "--op-timeout-ms", "1234", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
	}
	ck_assert_msg(rc == 0, "exit %d:\n%.3000s", rc, out);
	ck_assert_msg(strstr(out, "op_timeout_ms = 1234 ms [cli]"), "%.3000s", out);
	ck_assert_msg(strstr(out, "max_frame = 1048576 bytes [default]"), "%.3000s", out);
	ck_assert_msg(strstr(out, "bootstrap_timeout_ms = 30000 ms [default]"), "%.3000s", out);
	ck_assert_msg(access(sock, F_OK) != 0, "--check-config created the socket");
	rmdir(dir);
}
END_TEST

START_TEST(env_precedence)
{
	char cfg[] = "/tmp/r2ccl-cfg-XXXXXX", out[16384];
	int fd = mkstemp(cfg);
	struct rank r[2];

	ck_assert_int_ge(fd, 0);
	close(fd);
	write_file(cfg, "op_timeout_ms = 777\nmax_outq = 1M\n");

	/* a running daemon: env says 4321, the command line 1234 */
	setenv("R2CCL_OP_TIMEOUT_MS", "4321", 1);
	setenv("R2CCL_MAX_OUTQ", "2M", 1);
	{
		const char *args[] = { "--config", cfg, "--op-timeout-ms", "1234", NULL };
		th_start(&D, args);
	}
	unsetenv("R2CCL_OP_TIMEOUT_MS");
	unsetenv("R2CCL_MAX_OUTQ");
	th_expect_log(&D, "op_timeout_ms = 1234 ms [cli]", 1);
	th_expect_log(&D, "max_outq = 2097152 bytes [env]", 1);
	ck_assert_int_eq(th_log_count(&D, "op_timeout_ms = 4321"), 0);
	pair_setup(r, 1024);
	pair_check(r);
	pair_free(r);
	th_stop_ok(&D);

	/* --check-config: env over file, file over default */
	{
		const char *argv[] = { daemon_bin(), "--check-config", "--socket", "/tmp/unused.sock",
				       "--config", cfg, NULL };
		setenv("R2CCL_OP_TIMEOUT_MS", "4321", 1);
		ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 0);
		unsetenv("R2CCL_OP_TIMEOUT_MS");
		ck_assert_msg(strstr(out, "op_timeout_ms = 4321 ms [env]"), "%.3000s", out);
		ck_assert_msg(strstr(out, "max_outq = 1048576 bytes [file]"), "%.3000s", out);
		ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 0);
		ck_assert_msg(strstr(out, "op_timeout_ms = 777 ms [file]"), "%.3000s", out);
	}
	unlink(cfg);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* r2cclctl                                                                 */

START_TEST(ctl_status)
{
	char out[65536];
	struct rank r[2];
	int rc;

	th_start(&D, NULL);
	pair_setup(r, 1024);
	pair_check(r);
	{
		const char *argv[] = { ctl_bin(), "--socket", D.socket, "status", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 0, "status: exit %d:\n%.3000s", rc, out);
		ck_assert_msg(strstr(out, "Sessions:"), "%.3000s", out);
		ck_assert_msg(strstr(out, "lifecycle"), "no client name in:\n%.3000s", out);
		ck_assert_msg(strstr(out, "Communicators:"), "%.3000s", out);
		ck_assert_msg(strstr(out, "ready"), "no ready communicator in:\n%.3000s", out);
	}
	{
		const char *argv[] = { ctl_bin(), "--socket", D.socket, "--json", "status", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 0, "--json status: exit %d:\n%.3000s", rc, out);
		ck_assert_msg(strstr(out, "\"schema_version\": 1"), "%.3000s", out);
		ck_assert_msg(strstr(out, "\"client_name\": \"lifecycle\""), "%.3000s", out);
		ck_assert_msg(strstr(out, "\"state\": \"ready\""), "%.3000s", out);
		ck_assert_msg(strstr(out, "\"nranks\": 2"), "%.3000s", out);
	}
	{
		/* R2CCL_SOCKET (set by the harness) is the default socket */
		const char *argv[] = { ctl_bin(), "status", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 0, "status via R2CCL_SOCKET: exit %d:\n%.3000s", rc, out);
	}
	{
		const char *argv[] = { ctl_bin(), "--socket", D.socket, "frobnicate", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 2, "bad command: exit %d:\n%.3000s", rc, out);
	}
	{
		const char *argv[] = { ctl_bin(), "--socket", D.socket, "--no-such-flag", "status",
				       NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 2, "bad option: exit %d:\n%.3000s", rc, out);
	}
	{
		const char *argv[] = { ctl_bin(), "--socket", D.socket, NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 2, "no command: exit %d:\n%.3000s", rc, out);
	}
	pair_free(r);
	th_stop_ok(&D);
}
END_TEST

/* The number of communicators `r2cclctl --json status` lists with mode. */
static int comms_in_mode(const char *mode)
{
	const char *argv[] = { ctl_bin(), "--socket", D.socket, "--json", "status", NULL };
	char out[65536], needle[64];
	int rc = th_run(argv, out, sizeof(out), 10000), n = 0;

	ck_assert_msg(rc == 0, "--json status: exit %d:\n%.3000s", rc, out);
	snprintf(needle, sizeof(needle), "\"mode\": \"%s\"", mode);
	for (const char *p = strstr(out, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* Per-communicator mode (r2ccl_comm_config_t, the client's R2CCL_MODE) over
 * the daemon's default; ranks that disagree fail with a mismatch. */
START_TEST(comm_mode)
{
	struct rank a[2], b[2], c[2], m[2];

	th_start(&D, NULL); /* its default: balance */
	pair_setup(a, 256);
	pair_check(a);
	ck_assert_int_eq(comms_in_mode("balance"), 1);
	ck_assert_int_eq(comms_in_mode("hotrepair"), 0);

	pair_connect(b, 256);
	b[0].mode = b[1].mode = R2CCL_MODE_HOTREPAIR;
	run2(th_init, b);
	for (int i = 0; i < 2; i++)
		ck_assert_msg(b[i].ret == 0, "init rank %d: %s", i, r2ccl_strerror(b[i].ret));
	pair_check(b);
	ck_assert_int_eq(comms_in_mode("hotrepair"), 1);

	/* DEFAULT takes this process's R2CCL_MODE */
	setenv("R2CCL_MODE", "hotrepair", 1);
	pair_setup(c, 256);
	pair_check(c);
	ck_assert_int_eq(comms_in_mode("hotrepair"), 2);
	ck_assert_int_eq(comms_in_mode("balance"), 1);
	setenv("R2CCL_MODE", "sideways", 1);
	pair_connect(m, 256);
	ck_assert_int_eq(r2ccl_comm_init_rank(m[0].cl, &m[0].comm, 2, &m[0].id, 0), -EINVAL);
	unsetenv("R2CCL_MODE");
	m[0].mode = (r2ccl_mode_t)7;
	th_init(&m[0]);
	ck_assert_int_eq(m[0].ret, -EINVAL);

	/* ranks that disagree: both learn it at once */
	m[0].mode = R2CCL_MODE_HOTREPAIR;
	m[1].mode = R2CCL_MODE_BALANCE;
	run2(th_init, m);
	for (int i = 0; i < 2; i++)
		ck_assert_msg(m[i].ret == R2CCL_E_MISMATCH, "rank %d: %d (%s)", i, m[i].ret,
			      r2ccl_strerror(m[i].ret));
	ck_assert_int_ge(th_wait_log(&D, "asks for mode", 1, TH_LOG_WAIT_MS), 1);
	pair_free(m);

	/* the others are untouched */
	pair_check(a);
	pair_check(b);
	pair_check(c);
	pair_free(a);
	pair_free(b);
	pair_free(c);
	th_stop_ok(&D);
}
END_TEST

START_TEST(ctl_no_daemon)
{
	char dir[] = "/tmp/r2ccl-ctl-XXXXXX", sock[128], out[8192];
	int rc;

	th_temp_path(dir, "none.sock", sock, sizeof(sock));
	{
		const char *argv[] = { ctl_bin(), "--socket", sock, "status", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 3, "no daemon: exit %d:\n%.3000s", rc, out);
	}
	{
		const char *argv[] = { ctl_bin(), "--socket", sock, "--json", "status", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 3, "no daemon (--json): exit %d:\n%.3000s", rc, out);
		ck_assert_msg(strstr(out, "\"schema_version\": 1"), "%.3000s", out);
	}
	/* a stale socket file (its daemon was killed) */
	th_start(&D, NULL);
	ck_assert_int_eq(th_daemon_stop(&D, SIGKILL, 5000), 128 + SIGKILL);
	{
		const char *argv[] = { ctl_bin(), "--socket", D.socket, "status", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 3, "stale socket: exit %d:\n%.3000s", rc, out);
	}
	th_daemon_cleanup(&D);
	rmdir(dir);
}
END_TEST

/* A socket that listens and never accepts, its backlog full (a stalled
 * daemon): r2ccl_connect gives up after its timeout_ms with -ETIMEDOUT and
 * says why. Before 2026-12-07 its connect() waited without a limit. */
START_TEST(connect_backlog_full)
{
	char dir[] = "/tmp/r2ccl-bl-XXXXXX", sock[100];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	r2ccl_client_t *cl = NULL;
	int lfd, filler;

	th_temp_path(dir, "stalled.sock", sock, sizeof(sock));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 0), 0);
	/* backlog 0 takes one connection; the next one waits */
	filler = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(filler, 0);
	ck_assert_int_eq(connect(filler, (struct sockaddr *)&sa, sizeof(sa)), 0);
	o.socket_path = sock;
	o.timeout_ms = 300;
	double t0 = th_now_ms();
	int r = r2ccl_connect(&o, &cl);
	double ms = th_now_ms() - t0;
	ck_assert_msg(r == -ETIMEDOUT, "connect: %d (%s)", r, r2ccl_strerror(r));
	ck_assert_ptr_null(cl);
	ck_assert_msg(strstr(r2ccl_last_error(), "did not accept"), "%s", r2ccl_last_error());
	ck_assert_msg(ms >= 250 && ms < 20000, "gave up after %.0f ms", ms);
	close(filler);
	close(lfd);
	unlink(sock);
	rmdir(dir);
}
END_TEST

/* r2cclctl as user nobody sees only its own tenant */
START_TEST(ctl_non_root)
{
	char out[65536];
	struct rank r[2];
	int pfd[2], st;
	size_t got = 0;
	pid_t pid;

	if (getuid() != 0) {
		fprintf(stderr, "ctl_non_root: not root, skipped\n");
		return;
	}
	th_start(&D, NULL);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	pair_setup(r, 1024);
	pair_check(r);
	ck_assert_int_eq(pipe(pfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		const char *argv[] = { ctl_bin(), "--socket", D.socket, "--json", "status", NULL };
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(120);
		execv(argv[0], (char *const *)argv);
		_exit(121);
	}
	close(pfd[1]);
	for (;;) {
		ssize_t n = read(pfd[0], out + got, sizeof(out) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	out[got] = 0;
	close(pfd[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d:\n%.3000s", st, out);
	ck_assert_msg(strstr(out, "\"uid\": 65534"), "its own session missing:\n%.3000s", out);
	/* root's sessions (uid 0, the two ranks) and communicator are not shown */
	ck_assert_msg(!strstr(out, "\"uid\": 0,"), "a non-root client sees root's sessions:\n%.3000s",
		      out);
	ck_assert_msg(!strstr(out, "\"client_name\": \"lifecycle\""),
		      "a non-root client sees another user's clients:\n%.3000s", out);
	pair_free(r);
	th_stop_ok(&D);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* a second daemon                                                          */

START_TEST(second_daemon_refused)
{
	char out[16384];
	struct rank r[2];
	struct stat st1, st2;
	int rc;

	th_start(&D, NULL);
	pair_setup(r, 1024);
	pair_check(r);
	ck_assert_int_eq(stat(D.socket, &st1), 0);
	{
		const char *argv[] = { daemon_bin(), "--socket", D.socket, "--config", "/dev/null",
				       NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
	}
	ck_assert_msg(rc != 0 && rc != -1, "second daemon: exit %d:\n%.3000s", rc, out);
	ck_assert_msg(strstr(out, "already"), "no 'already' in:\n%.3000s", out);
	/* the first one's socket is the same file and still serves */
	ck_assert_int_eq(stat(D.socket, &st2), 0);
	ck_assert_int_eq(st1.st_ino, st2.st_ino);
	pair_check(r);
	{
		r2ccl_client_t *cl;
		ck_assert_int_eq(r2ccl_connect(NULL, &cl), 0);
		r2ccl_disconnect(cl);
	}
	pair_free(r);
	th_stop_ok(&D);
}
END_TEST

/* The tests in the order they run. */
TH_MAIN("lifecycle", 90, sigterm_idle, sigint_idle,
	sigterm_in_flight, sigterm_pending_op, sigkill_under_client, fatal_signal, sighup_reload,
	bad_config_at_start, check_config, env_precedence, ctl_status, comm_mode, ctl_no_daemon,
	connect_backlog_full, ctl_non_root, second_daemon_refused)
