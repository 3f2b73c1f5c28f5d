/* SPDX-License-Identifier: MIT */
/*
 * A communicator's GPU state (libclient/gpu_comm.c) is freed when the
 * communicator is destroyed, not kept until r2ccl_disconnect; and not
 * before the stream is past its operations. Runs without a GPU: libr2ccl
 * (built with CUDA) loads the fake driver of tests/nccl/fake_libcuda.c
 * (LD_LIBRARY_PATH, set by meson), whose counters say how many host ranges
 * are registered and how many events live, and whose "stream" can be held
 * back (a GPU behind). The daemon is a real r2ccld; the operations are
 * stream-ordered AllReduces of count 0 on a one-rank communicator (no
 * buffer: the sync slot alone). Exits 77 where libr2ccl has no CUDA support
 * or the fake is not the libcuda.so.1 found.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "r2ccl.h"

static void (*fake_hold)(int);
static void (*fake_run)(void);
static void (*fake_counts)(int *, int *, int *, int *);

static int nfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static int registered(void)
{
	int reg, ev, blocked, held;

	fake_counts(&reg, &ev, &blocked, &held);
	return reg;
}

static r2ccl_comm_t *comm_new(r2ccl_client_t *c)
{
	r2ccl_unique_id_t id;
	r2ccl_comm_t *comm;

	ck_assert_int_eq(r2ccl_get_unique_id(c, &id), 0);
	ck_assert_int_eq(r2ccl_comm_init_rank(c, &comm, 1, &id, 0), 0);
	return comm;
}

static void stream_op(r2ccl_comm_t *comm)
{
	int r = r2ccl_allreduce_stream(comm, NULL, NULL, 0, R2CCL_FLOAT32, R2CCL_SUM, (void *)1);

	ck_assert_msg(r == 0, "r2ccl_allreduce_stream: %s (%s)", r2ccl_strerror(r),
		      r2ccl_last_error());
}

/* 200 communicators on one client, each with a stream-ordered operation,
 * each destroyed: the client's descriptors, the host ranges registered with
 * CUDA and the events do not grow, and neither do the daemon's
 * descriptors (its references to the slots go with the operations). */
START_TEST(test_churn)
{
	struct th_daemon d;
	r2ccl_client_t *c;
	int fd0, dfd0, reg, ev, blocked, held, dfd = -1;

	th_start(&d, NULL);
	ck_assert_int_eq(r2ccl_connect(NULL, &c), 0);
	r2ccl_comm_destroy(comm_new(c)); /* whatever a first communicator sets up once */
	fd0 = nfds();
	dfd0 = th_daemon_nfds(&d);
	for (int i = 0; i < 200; i++) {
		r2ccl_comm_t *comm = comm_new(c);
		stream_op(comm);
		ck_assert_int_eq(registered(), 1);
		ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
		fake_counts(&reg, &ev, &blocked, &held);
		ck_assert_msg(reg == 0 && ev == 0,
			      "after destroy %d: %d host ranges registered, %d events", i, reg, ev);
	}
	ck_assert_int_eq(nfds(), fd0);
	for (int k = 0; k < 100 && (dfd = th_daemon_nfds(&d)) > dfd0; k++)
		usleep(100000); /* operations the daemon still ends */
	ck_assert_msg(dfd <= dfd0, "the daemon holds %d descriptors, %d before", dfd, dfd0);
	r2ccl_disconnect(c);
	th_stop_ok(&d);
}
END_TEST

/* A stream behind: the state of a destroyed communicator stays while its
 * stream has not run its operation, whose wait the destroy released (the
 * stream goes on: no wait is left unsatisfied); it goes at the next GPU call
 * once the stream has run. */
START_TEST(test_retired_until_stream_passes)
{
	struct th_daemon d;
	r2ccl_client_t *c;
	r2ccl_comm_t *a, *b;
	int reg, ev, blocked0, blocked, held;

	th_start(&d, NULL);
	ck_assert_int_eq(r2ccl_connect(NULL, &c), 0);
	a = comm_new(c);
	fake_counts(&reg, &ev, &blocked0, &held);
	fake_hold(1);
	stream_op(a);
	fake_counts(&reg, &ev, &blocked, &held);
	ck_assert_int_eq(held, 3); /* ready, the wait for done, passed */
	ck_assert_int_eq(r2ccl_comm_destroy(a), 0);
	ck_assert_int_eq(registered(), 1); /* the stream has not passed it */
	fake_hold(0);
	fake_run();
	fake_counts(&reg, &ev, &blocked, &held);
	ck_assert_msg(blocked == blocked0, "the stream's wait was not released by the destroy");
	ck_assert_int_eq(reg, 1); /* freed at the next GPU call */
	b = comm_new(c);
	stream_op(b);
	ck_assert_int_eq(registered(), 1); /* b's only */
	ck_assert_int_eq(r2ccl_comm_destroy(b), 0);
	ck_assert_int_eq(registered(), 0);
	r2ccl_disconnect(c);
	th_stop_ok(&d);
}
END_TEST

/* r2ccl_disconnect drops a destroyed communicator's state its stream has
 * not passed yet (as before: the memory goes with the client). */
START_TEST(test_disconnect_drops_retired)
{
	struct th_daemon d;
	r2ccl_client_t *c;
	r2ccl_comm_t *a;

	th_start(&d, NULL);
	ck_assert_int_eq(r2ccl_connect(NULL, &c), 0);
	a = comm_new(c);
	fake_hold(1);
	stream_op(a);
	ck_assert_int_eq(r2ccl_comm_destroy(a), 0);
	ck_assert_int_eq(registered(), 1);
	r2ccl_disconnect(c);
	ck_assert_int_eq(registered(), 0);
	/* the held operations are never run: their memory is unmapped */
	th_stop_ok(&d);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { test_churn, test_retired_until_stream_passes,
				       test_disconnect_drops_retired };
	void *h;

	if (!R2C_TEST_CUDA) {
		printf("SKIP: libr2ccl was built without CUDA\n");
		return 77;
	}
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	*(void **)&fake_hold = h ? dlsym(h, "fake_cuda_hold") : NULL;
	*(void **)&fake_run = h ? dlsym(h, "fake_cuda_run") : NULL;
	*(void **)&fake_counts = h ? dlsym(h, "fake_cuda_counts") : NULL;
	if (!fake_hold || !fake_run || !fake_counts) {
		printf("SKIP: the libcuda.so.1 found is not tests/nccl/fake_libcuda.c "
		       "(LD_LIBRARY_PATH)\n");
		return 77;
	}
	return th_run_suite(th_suite("gpu_release", 120, tests, sizeof(tests) / sizeof(tests[0])));
}
