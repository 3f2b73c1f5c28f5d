// SPDX-License-Identifier: MIT
/*
 * Integration test: the reason of a failure that crosses daemons. Two r2ccld
 * of this host act as two hosts (joined over its NIC, no root needed): rank 1
 * on the second is killed while rank 0 on the first waits in an AllReduce;
 * rank 0 gets R2CCL_E_PEER_GONE and r2ccl_last_error() names the rank and
 * its host, and the first daemon lists the failure in `r2cclctl events`.
 * Exits 77 on a host without a NIC that has an IPv4 address.
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

static struct th_daemon A, B;

static void kill_daemons_at_exit(void)
{
	if (A.pid > 0)
		th_daemon_stop(&A, SIGKILL, 1000);
	if (B.pid > 0)
		th_daemon_stop(&B, SIGKILL, 1000);
	th_daemon_cleanup(&A);
	th_daemon_cleanup(&B);
}

static r2ccl_client_t *connect_to(const struct th_daemon *d)
{
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	r2ccl_client_t *c = NULL;

	o.socket_path = d->socket;
	if (r2ccl_connect(&o, &c) < 0)
		return NULL;
	return c;
}

static void *killer(void *arg)
{
	usleep(300 * 1000);
	kill(*(pid_t *)arg, SIGKILL);
	return NULL;
}

START_TEST(peer_gone_on_another_daemon)
{
	const char *ctl = getenv("R2CCLCTL");
	r2ccl_client_t *c;
	r2ccl_comm_t *comm = NULL;
	r2ccl_unique_id_t id;
	char why[256], out[16384];
	float *buf;
	int pfd[2], r, st;
	pthread_t t;
	pid_t pid;
	char b;

	ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
	atexit(kill_daemons_at_exit);
	/* the two daemons share the harness's cluster key (peer_auth) */
	ck_assert_int_eq(th_daemon_start(&A, NULL), 0);
	ck_assert_int_eq(th_daemon_start(&B, NULL), 0);
	c = connect_to(&A);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(r2ccl_mem_alloc(c, 4096, (void **)&buf), 0);
	ck_assert_int_eq(r2ccl_get_unique_id(c, &id), 0);
	ck_assert_int_eq(pipe(pfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) { /* rank 1, on the second daemon */
		r2ccl_client_t *c1 = connect_to(&B);
		r2ccl_comm_t *comm1;

		close(pfd[0]);
		if (!c1 || r2ccl_comm_init_rank(c1, &comm1, 2, &id, 1) != 0)
			_exit(1);
		if (write(pfd[1], "j", 1) != 1)
			_exit(2);
		pause(); /* killed here */
		_exit(3);
	}
	close(pfd[1]);
	r = r2ccl_comm_init_rank(c, &comm, 2, &id, 0);
	ck_assert_msg(r == 0, "init across daemons: %s (%s)", r2ccl_strerror(r),
		      r2ccl_last_error());
	ck_assert_int_eq(read(pfd[0], &b, 1), 1);
	close(pfd[0]);
	ck_assert_int_eq(pthread_create(&t, NULL, killer, &pid), 0);
	r = r2ccl_allreduce(comm, buf, buf, 16, R2CCL_FLOAT32, R2CCL_SUM);
	snprintf(why, sizeof(why), "%s", r2ccl_last_error());
	pthread_join(t, NULL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st), "rank 1 was not killed: status %#x", st);
	ck_assert_msg(r == R2CCL_E_PEER_GONE, "%s (%s)", r2ccl_strerror(r), why);
	ck_assert_msg(strstr(why, "rank 1 on host") && strstr(why, "died"), "reason: \"%s\"", why);
	{
		const char *argv[] = { ctl, "--socket", A.socket, "events", NULL };
		int rc = th_run(argv, out, sizeof(out), 10000);
		ck_assert_msg(rc == 0, "events: exit %d:\n%.3000s", rc, out);
	}
	ck_assert_msg(strstr(out, "comm_failed") && strstr(out, "rank 1 on host"), "%.3000s", out);
	ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
	r2ccl_disconnect(c);
	ck_assert_int_eq(th_daemon_stop(&A, SIGTERM, 15000), 0);
	ck_assert_int_eq(th_daemon_stop(&B, SIGTERM, 15000), 0);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { peer_gone_on_another_daemon };

	/* the daemons need a rail: a NIC with an IPv4 address (not loopback) */
	if (system("ip -4 -o addr show scope global 2>/dev/null | grep -q .") != 0) {
		printf("no NIC with an IPv4 address: skipped\n");
		return 77;
	}
	return th_run_suite(th_suite("reasons_hosts", 60, tests, 1));
}
