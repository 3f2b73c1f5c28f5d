// SPDX-License-Identifier: MIT
/*
 * Integration tests: misuse of the client library gives an error code and a
 * reason, never a crash or a disturbed session (issue 24): a second destroy,
 * use after destroy, use after disconnect (of communicators and of memory),
 * and handles used in a forked child. The suite also runs under ASan
 * (tools/run-tests.sh), which turns any read after free into a failure.
 */
#include <check.h>
#include <errno.h>
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

static void start_daemon(void)
{
	atexit(kill_daemon_at_exit);
	ck_assert_msg(th_daemon_start(&D, NULL) == 0, "r2ccld did not start");
}

static void stop_daemon_ok(void)
{
	th_daemon_stop_ok(&D);
}

/* A one-rank communicator: formed at once, runs collectives alone. */
static r2ccl_comm_t *one_rank_comm(r2ccl_client_t *c)
{
	r2ccl_unique_id_t id;
	r2ccl_comm_t *comm = NULL;

	ck_assert_int_eq(r2ccl_get_unique_id(c, &id), 0);
	ck_assert_int_eq(r2ccl_comm_init_rank(c, &comm, 1, &id, 0), 0);
	ck_assert_ptr_nonnull(comm);
	return comm;
}

static r2ccl_client_t *connect_ok(void)
{
	r2ccl_client_t *c = NULL;
	int r = r2ccl_connect(NULL, &c);

	ck_assert_msg(r == 0, "connect: %s (%s)", r2ccl_strerror(r), r2ccl_last_error());
	return c;
}

/* An AllReduce of 4 floats on comm that must succeed (sum over one rank). */
static void allreduce_ok(r2ccl_client_t *c, r2ccl_comm_t *comm)
{
	float *buf;

	ck_assert_int_eq(r2ccl_mem_alloc(c, 4 * sizeof(float), (void **)&buf), 0);
	for (int i = 0; i < 4; i++)
		buf[i] = (float)i + 0.5f;
	ck_assert_int_eq(r2ccl_allreduce(comm, buf, buf, 4, R2CCL_FLOAT32, R2CCL_SUM), 0);
	for (int i = 0; i < 4; i++)
		ck_assert(buf[i] == (float)i + 0.5f);
	ck_assert_int_eq(r2ccl_mem_free(c, buf), 0);
}

START_TEST(destroy_twice)
{
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	int n;

	start_daemon();
	c = connect_ok();
	comm = one_rank_comm(c);
	allreduce_ok(c, comm);
	ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
	ck_assert_str_eq(r2ccl_last_error(), "");
	/* the second destroy, and every other use, is refused */
	ck_assert_int_eq(r2ccl_comm_destroy(comm), -EBADF);
	ck_assert_msg(strstr(r2ccl_last_error(), "destroyed"), "%s", r2ccl_last_error());
	ck_assert_int_eq(r2ccl_comm_abort(comm), -EBADF);
	ck_assert_int_eq(r2ccl_comm_count(comm, &n), -EBADF);
	ck_assert_int_eq(r2ccl_comm_user_rank(comm, &n), -EBADF);
	ck_assert_int_eq(r2ccl_comm_trigger_rebalance(comm), -EBADF);
	ck_assert_int_eq(r2ccl_allreduce(comm, NULL, NULL, 1, R2CCL_FLOAT32, R2CCL_SUM), -EBADF);
	ck_assert_int_eq(r2ccl_broadcast(comm, NULL, NULL, 1, R2CCL_FLOAT32, 5), -EBADF);
	ck_assert_int_eq(r2ccl_send(comm, NULL, 1, R2CCL_FLOAT32, 0), -EBADF);
	ck_assert_int_eq(r2ccl_allreduce_stream(comm, NULL, NULL, 1, R2CCL_FLOAT32, R2CCL_SUM,
						NULL),
			 -EBADF);
	ck_assert_int_eq(r2ccl_comm_get_async_error(comm, &n), -EBADF);
	/* the client is still fine */
	ck_assert_int_eq(r2ccl_client_check(c), 0);
	comm = one_rank_comm(c);
	allreduce_ok(c, comm);
	ck_assert_int_eq(r2ccl_comm_abort(comm), 0);
	ck_assert_int_eq(r2ccl_comm_abort(comm), -EBADF);
	ck_assert_msg(strstr(r2ccl_last_error(), "aborted"), "%s", r2ccl_last_error());
	r2ccl_disconnect(c);
	stop_daemon_ok();
}
END_TEST

START_TEST(use_after_disconnect)
{
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	void *buf, *p = NULL;
	int n;

	start_daemon();
	c = connect_ok();
	comm = one_rank_comm(c);
	ck_assert_int_eq(r2ccl_mem_alloc(c, 4096, &buf), 0);
	r2ccl_disconnect(c);
	/* the communicator left alive is released with its client */
	ck_assert_int_eq(r2ccl_comm_destroy(comm), -EBADF);
	ck_assert_msg(strstr(r2ccl_last_error(), "r2ccl_disconnect"), "%s", r2ccl_last_error());
	ck_assert_int_eq(r2ccl_comm_count(comm, &n), -EBADF);
	ck_assert_int_eq(r2ccl_allreduce(comm, buf, buf, 1, R2CCL_FLOAT32, R2CCL_SUM), -EBADF);
	/* so is the memory: freeing it is refused, not a double munmap */
	ck_assert_int_eq(r2ccl_mem_free(c, buf), -EBADF);
	ck_assert_msg(strstr(r2ccl_last_error(), "disconnected"), "%s", r2ccl_last_error());
	ck_assert_int_eq(r2ccl_mem_alloc(c, 4096, &p), -EBADF);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(r2ccl_get_unique_id(c, &id), -EBADF);
	ck_assert_int_eq(r2ccl_comm_init_rank(c, &comm, 1, &id, 0), -EBADF);
	ck_assert_int_eq(r2ccl_client_check(c), -EBADF);
	ck_assert_int_eq(r2ccl_mem_register_gpu(c, buf, 4096), -EBADF);
	ck_assert_int_eq(r2ccl_mem_deregister_gpu(c, buf), -EBADF);
	r2ccl_disconnect(c); /* a second disconnect does nothing */
	r2ccl_disconnect(NULL);

	/* the daemon saw an ordinary session end and serves the next one */
	c = connect_ok();
	comm = one_rank_comm(c);
	allreduce_ok(c, comm);
	ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
	r2ccl_disconnect(c);
	stop_daemon_ok();
}
END_TEST

/* What a forked child gets from its parent's handles: 0 if all as
 * expected, else the number of the failed check (the exit status). */
static int child_checks(r2ccl_client_t *c, r2ccl_comm_t *comm, float *buf)
{
	r2ccl_unique_id_t id;
	void *p;
	int n;

	if (r2ccl_allreduce(comm, buf, buf, 4, R2CCL_FLOAT32, R2CCL_SUM) != R2CCL_E_FORKED)
		return 1;
	if (!strstr(r2ccl_last_error(), "fork"))
		return 2;
	if (r2ccl_get_unique_id(c, &id) != R2CCL_E_FORKED)
		return 3;
	if (r2ccl_mem_alloc(c, 64, &p) != R2CCL_E_FORKED)
		return 4;
	if (r2ccl_mem_free(c, buf) != R2CCL_E_FORKED)
		return 5;
	if (r2ccl_comm_count(comm, &n) != R2CCL_E_FORKED)
		return 6;
	if (r2ccl_client_check(c) != R2CCL_E_FORKED)
		return 7;
	/* the inherited buffer is still mapped in the child (copy of the mapping) */
	if (buf[1] != 1.5f)
		return 8;
	/* release the child's copies; the parent's session must not notice */
	if (r2ccl_comm_destroy(comm) != 0)
		return 9;
	if (r2ccl_comm_destroy(comm) != -EBADF)
		return 10;
	r2ccl_disconnect(c);
	if (r2ccl_client_check(c) != -EBADF)
		return 11;
	/* the child connects on its own */
	if (r2ccl_connect(NULL, &c) != 0)
		return 12;
	if (r2ccl_get_unique_id(c, &id) != 0 || r2ccl_comm_init_rank(c, &comm, 1, &id, 0) != 0)
		return 13;
	if (r2ccl_mem_alloc(c, 4 * sizeof(float), &p) != 0)
		return 14;
	((float *)p)[0] = 2.0f;
	if (r2ccl_allreduce(comm, p, p, 1, R2CCL_FLOAT32, R2CCL_SUM) != 0 || ((float *)p)[0] != 2.0f)
		return 15;
	if (r2ccl_comm_destroy(comm) != 0)
		return 16;
	r2ccl_disconnect(c);
	return 0;
}

START_TEST(forked_child)
{
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	float *buf;
	pid_t pid;
	int st;

	start_daemon();
	c = connect_ok();
	comm = one_rank_comm(c);
	ck_assert_int_eq(r2ccl_mem_alloc(c, 4 * sizeof(float), (void **)&buf), 0);
	for (int i = 0; i < 4; i++)
		buf[i] = (float)i + 0.5f;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(child_checks(c, comm, buf));
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "child: status %#x (exit %d is the failed check)", st, WEXITSTATUS(st));
	/* the parent's session, communicator and memory are untouched */
	ck_assert_int_eq(r2ccl_client_check(c), 0);
	ck_assert_int_eq(r2ccl_allreduce(comm, buf, buf, 4, R2CCL_FLOAT32, R2CCL_SUM), 0);
	ck_assert(buf[3] == 3.5f);
	ck_assert_int_eq(r2ccl_mem_free(c, buf), 0);
	ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
	r2ccl_disconnect(c);
	ck_assert_int_eq(th_log_count(&D, "protocol"), 0);
	stop_daemon_ok();
}
END_TEST

START_TEST(bad_buffers_say_why)
{
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	char *buf;
	char stack[16];

	start_daemon();
	c = connect_ok();
	comm = one_rank_comm(c);
	ck_assert_int_eq(r2ccl_mem_alloc(c, 4096, (void **)&buf), 0);
	ck_assert_int_eq(r2ccl_allreduce(comm, stack, stack, 4, R2CCL_FLOAT32, R2CCL_SUM),
			 R2CCL_E_BAD_BUFFER);
	ck_assert_msg(strstr(r2ccl_last_error(), "not in a buffer of r2ccl_mem_alloc"), "%s",
		      r2ccl_last_error());
	ck_assert_int_eq(r2ccl_allreduce(comm, buf, buf, 2048, R2CCL_FLOAT32, R2CCL_SUM),
			 R2CCL_E_BAD_BUFFER);
	ck_assert_msg(strstr(r2ccl_last_error(), "8192 bytes"), "%s", r2ccl_last_error());
	ck_assert_int_eq(r2ccl_mem_free(c, buf), 0);
	ck_assert_int_eq(r2ccl_mem_free(c, buf), R2CCL_E_BAD_BUFFER);
	ck_assert_msg(strstr(r2ccl_last_error(), "freed already"), "%s", r2ccl_last_error());
	ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
	r2ccl_disconnect(c);
	stop_daemon_ok();
}
END_TEST

TH_MAIN("misuse", 60, destroy_twice, use_after_disconnect, forked_child, bad_buffers_say_why)
