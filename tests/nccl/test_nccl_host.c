/* SPDX-License-Identifier: MIT */
/*
 * Integration: the NCCL API (libnccl.so.2) against a real r2ccld, on host
 * memory from ncclMemAlloc (no GPU here), 2 and 4 ranks in their own
 * processes: every collective with exact results, grouped Send/Recv in
 * crossed order, AlltoAll, Gather/Scatter, PreMulSum, CommSplit,
 * nonblocking creation, Finalize; and bad use: unregistered host memory,
 * a count overflow, mismatched ranks, the device API, a daemon that is not
 * running.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"

#define NCHECK(call)                                                                     \
	do {                                                                             \
		ncclResult_t r_ = (call);                                                \
		if (r_ != ncclSuccess) {                                                 \
			fprintf(stderr, "rank %d line %d: %s: %s (%s)\n", rank, __LINE__, \
				#call, ncclGetErrorString(r_), ncclGetLastError(NULL));  \
			_exit(10);                                                       \
		}                                                                        \
	} while (0)
#define EXPECT(cond)                                                                      \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "rank %d line %d: expected %s\n", rank, __LINE__, \
				#cond);                                                   \
			_exit(11);                                                        \
		}                                                                         \
	} while (0)

static int rank;

static uint16_t f2bf(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16); /* exact for the small integers used */
}

static float bf2f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void collectives(ncclComm_t comm, int n)
{
	const size_t N = 100003; /* odd, past one staging chunk of small types */
	float *f, *fo;
	int64_t *l, *lo;
	int32_t *g, *go;
	uint16_t *b;
	int8_t *c;
	void *p;

	NCHECK(ncclMemAlloc(&p, N * 8 * (size_t)n));
	f = p;
	NCHECK(ncclMemAlloc(&p, N * 8 * (size_t)n));
	fo = p;
	l = (int64_t *)f;
	lo = (int64_t *)fo;
	g = (int32_t *)f;
	go = (int32_t *)fo;
	b = (uint16_t *)f;
	c = (int8_t *)f;

	/* AllReduce float32 sum, out of place: x = rank + i%7 */
	for (size_t i = 0; i < N; i++)
		f[i] = (float)(rank + (int)(i % 7));
	NCHECK(ncclAllReduce(f, fo, N, ncclFloat32, ncclSum, comm, NULL));
	for (size_t i = 0; i < N; i++)
		EXPECT(fo[i] == (float)(n * (n - 1) / 2 + n * (int)(i % 7)));
	EXPECT(f[5] == (float)(rank + 5)); /* input untouched */
	/* in place, max, int64 */
	for (size_t i = 0; i < N; i++)
		l[i] = (int64_t)i * (rank + 1) - 1000000000000LL * rank;
	NCHECK(ncclAllReduce(l, l, N, ncclInt64, ncclMax, comm, NULL));
	for (size_t i = 0; i < N; i++) {
		int64_t m = INT64_MIN;
		for (int r = 0; r < n; r++) {
			int64_t v = (int64_t)i * (r + 1) - 1000000000000LL * r;
			m = v > m ? v : m;
		}
		EXPECT(l[i] == m);
	}
	/* avg of int32 (sum / n, truncated) */
	for (size_t i = 0; i < N; i++)
		g[i] = (int32_t)(i % 100) * (rank + 1);
	NCHECK(ncclAllReduce(g, go, N, ncclInt32, ncclAvg, comm, NULL));
	for (size_t i = 0; i < N; i++)
		EXPECT(go[i] == (int32_t)(i % 100) * (n * (n + 1) / 2) / n);
	/* bfloat16 product of +-1/2 */
	for (size_t i = 0; i < N; i++)
		b[i] = f2bf((i + (size_t)rank) % 3 ? 1.0f : -2.0f);
	NCHECK(ncclAllReduce(b, b, N, ncclBfloat16, ncclProd, comm, NULL));
	for (size_t i = 0; i < N; i++) {
		float e = 1;
		for (int r = 0; r < n; r++)
			e *= (i + (size_t)r) % 3 ? 1.0f : -2.0f;
		EXPECT(bf2f(b[i]) == e);
	}
	/* PreMulSum: sum of 0.5 * x */
	{
		float s = 0.5f;
		ncclRedOp_t op;
		NCHECK(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, ncclScalarHostImmediate,
						comm));
		for (size_t i = 0; i < N; i++)
			f[i] = (float)(2 * rank + (int)(i % 5));
		NCHECK(ncclAllReduce(f, fo, N, ncclFloat32, op, comm, NULL));
		for (size_t i = 0; i < N; i++)
			EXPECT(fo[i] == (float)(n * (n - 1) / 2) + 0.5f * (float)(n * (int)(i % 5)));
		NCHECK(ncclRedOpDestroy(op, comm));
		EXPECT(ncclRedOpDestroy(op, comm) == ncclInvalidArgument);
	}
	/* A call that fails its checks inside a group fails the group: its
	 * ncclGroupEnd returns that error and runs none of its operations (as
	 * NCCL does; before 2026-12-07 the others ran). Every rank errs alike. */
	for (size_t i = 0; i < N; i++) {
		f[i] = 1.0f;
		fo[i] = -1.0f;
	}
	NCHECK(ncclGroupStart());
	NCHECK(ncclAllReduce(f, fo, N, ncclFloat32, ncclSum, comm, NULL));
	EXPECT(ncclBroadcast(f, fo + N, N, ncclFloat32, n, comm, NULL) == ncclInvalidArgument);
	EXPECT(ncclGroupEnd() == ncclInvalidArgument);
	for (size_t i = 0; i < N; i++)
		EXPECT(fo[i] == -1.0f);
	NCHECK(ncclGroupStart()); /* the next group runs */
	NCHECK(ncclAllReduce(f, fo, N, ncclFloat32, ncclSum, comm, NULL));
	NCHECK(ncclGroupEnd());
	for (size_t i = 0; i < N; i++)
		EXPECT(fo[i] == (float)n);
	/* PreMulSum operators destroyed inside a group, right after the call
	 * that uses them (PyTorch's coalesced collectives: ncclRedOpRAII ends
	 * with the lambda, before ncclGroupEnd); the second one gets the slot
	 * of the first. Each call keeps its own factor: 0.5, then 0.25 (before
	 * 2026-12-07 both ran with 0.25) */
	{
		float s0 = 0.5f, s1 = 0.25f;
		ncclRedOp_t op0, op1;
		for (size_t i = 0; i < N; i++)
			f[i] = (float)(4 * rank + 4 * (int)(i % 5));
		NCHECK(ncclGroupStart());
		NCHECK(ncclRedOpCreatePreMulSum(&op0, &s0, ncclFloat32, ncclScalarHostImmediate,
						comm));
		NCHECK(ncclAllReduce(f, fo, N, ncclFloat32, op0, comm, NULL));
		NCHECK(ncclRedOpDestroy(op0, comm));
		NCHECK(ncclRedOpCreatePreMulSum(&op1, &s1, ncclFloat32, ncclScalarHostImmediate,
						comm));
		EXPECT(op1 == op0); /* the slot of the one destroyed */
		NCHECK(ncclAllReduce(f, fo + N, N, ncclFloat32, op1, comm, NULL));
		NCHECK(ncclRedOpDestroy(op1, comm));
		NCHECK(ncclGroupEnd());
		for (size_t i = 0; i < N; i++) {
			float sum = (float)(4 * (n * (n - 1) / 2) + 4 * n * (int)(i % 5));
			EXPECT(fo[i] == 0.5f * sum);
			EXPECT(fo[N + i] == 0.25f * sum);
		}
	}
	/* PreMulSum on bfloat16 (issue 19: PyTorch's bf16 premul gave 0): a
	 * bfloat16 scalar, immediate and by pointer (ncclScalarDevice on host
	 * memory), gives 0.5 * sum exactly; a float's bytes given as the
	 * bfloat16 scalar (what PyTorch <= 2.11 passes: pytorch/pytorch#190745)
	 * are read as NCCL reads them, the first 2 bytes: 0.5f's are 0x0000, a
	 * zero factor */
	{
		uint16_t hs = f2bf(0.5f), *ds;
		float wrong = 0.5f;
		ncclRedOp_t op, opd, opw;
		void *v;

		NCHECK(ncclMemAlloc(&v, 64));
		ds = v;
		*ds = f2bf(0.5f);
		NCHECK(ncclRedOpCreatePreMulSum(&op, &hs, ncclBfloat16, ncclScalarHostImmediate,
						comm));
		hs = f2bf(8.0f); /* immediate: read when the operator was made */
		NCHECK(ncclRedOpCreatePreMulSum(&opd, ds, ncclBfloat16, ncclScalarDevice, comm));
		NCHECK(ncclRedOpCreatePreMulSum(&opw, &wrong, ncclBfloat16,
						ncclScalarHostImmediate, comm));
		for (size_t i = 0; i < N; i++)
			b[i] = f2bf((float)((int)(i % 9) - 4 + rank));
		NCHECK(ncclAllReduce(b, b + N, N, ncclBfloat16, op, comm, NULL));
		for (size_t i = 0; i < N; i++)
			EXPECT(bf2f(b[N + i]) ==
			       0.5f * (float)(n * ((int)(i % 9) - 4) + n * (n - 1) / 2));
		*ds = f2bf(0.25f); /* by pointer: read when the operation runs */
		NCHECK(ncclAllReduce(b, b + N, N, ncclBfloat16, opd, comm, NULL));
		for (size_t i = 0; i < N; i++)
			EXPECT(bf2f(b[N + i]) ==
			       0.25f * (float)(n * ((int)(i % 9) - 4) + n * (n - 1) / 2));
		NCHECK(ncclAllReduce(b, b + N, N, ncclBfloat16, opw, comm, NULL));
		for (size_t i = 0; i < N; i++)
			EXPECT(bf2f(b[N + i]) == 0.0f);
		NCHECK(ncclRedOpDestroy(op, comm));
		NCHECK(ncclRedOpDestroy(opd, comm));
		NCHECK(ncclRedOpDestroy(opw, comm));
		NCHECK(ncclMemFree(v));
	}
	/* AllGather int32 */
	for (size_t i = 0; i < N; i++)
		g[i] = rank * 1000000 + (int32_t)i;
	NCHECK(ncclAllGather(g, go, N, ncclInt32, comm, NULL));
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < N; i++)
			EXPECT(go[(size_t)r * N + i] == r * 1000000 + (int32_t)i);
	/* ReduceScatter float32 sum: block r of rank q holds q + r */
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < N; i++)
			f[(size_t)r * N + i] = (float)(rank + r) + (float)(i % 3);
	NCHECK(ncclReduceScatter(f, fo, N, ncclFloat32, ncclSum, comm, NULL));
	for (size_t i = 0; i < N; i++)
		EXPECT(fo[i] == (float)(n * (n - 1) / 2 + n * rank + n * (int)(i % 3)));
	/* Broadcast int8 from the last rank; Bcast in place from 0 */
	for (size_t i = 0; i < N; i++)
		c[i] = (int8_t)(rank == n - 1 ? (int)(i * 7) : -1);
	NCHECK(ncclBroadcast(c, go, N, ncclInt8, n - 1, comm, NULL));
	for (size_t i = 0; i < N; i++)
		EXPECT(((int8_t *)go)[i] == (int8_t)(i * 7));
	for (size_t i = 0; i < N; i++)
		g[i] = rank == 0 ? (int32_t)i : 0;
	NCHECK(ncclBcast(g, N, ncclInt32, 0, comm, NULL));
	for (size_t i = 0; i < N; i++)
		EXPECT(g[i] == (int32_t)i);
	/* Reduce int64 sum to rank 1 */
	for (size_t i = 0; i < N; i++)
		l[i] = (int64_t)(rank + 1) << 40 | (int64_t)i;
	memset(lo, 0, N * 8);
	NCHECK(ncclReduce(l, lo, N, ncclInt64, ncclSum, 1, comm, NULL));
	for (size_t i = 0; i < N && rank == 1; i++)
		EXPECT(lo[i] == ((int64_t)(n * (n + 1) / 2) << 40) + (int64_t)n * (int64_t)i);
	for (size_t i = 0; i < N && rank != 1; i++)
		EXPECT(lo[i] == 0);
	NCHECK(ncclMemFree(f));
	NCHECK(ncclMemFree(fo));
}

static void transfers(ncclComm_t comm, int n)
{
	const size_t N = 4099;
	int32_t *s, *r;
	void *p;
	int next = (rank + 1) % n, prev = (rank + n - 1) % n;

	NCHECK(ncclMemAlloc(&p, N * 4 * (size_t)n));
	s = p;
	NCHECK(ncclMemAlloc(&p, N * 4 * (size_t)n));
	r = p;
	/* a ring, every rank sending first: deadlocks without the group's order */
	for (size_t i = 0; i < N; i++)
		s[i] = rank * 100000 + (int32_t)i;
	NCHECK(ncclGroupStart());
	NCHECK(ncclSend(s, N, ncclInt32, next, comm, NULL));
	NCHECK(ncclRecv(r, N, ncclInt32, prev, comm, NULL));
	NCHECK(ncclGroupEnd());
	for (size_t i = 0; i < N; i++)
		EXPECT(r[i] == prev * 100000 + (int32_t)i);
	/* the same with receives first on odd ranks only, and a self pair */
	NCHECK(ncclGroupStart());
	if (rank % 2)
		NCHECK(ncclRecv(r, N, ncclInt32, prev, comm, NULL));
	NCHECK(ncclSend(s, N, ncclInt32, rank, comm, NULL));
	NCHECK(ncclSend(s, N, ncclInt32, next, comm, NULL));
	NCHECK(ncclRecv(r + N, N, ncclInt32, rank, comm, NULL));
	if (!(rank % 2))
		NCHECK(ncclRecv(r, N, ncclInt32, prev, comm, NULL));
	NCHECK(ncclGroupEnd());
	for (size_t i = 0; i < N; i++) {
		EXPECT(r[i] == prev * 100000 + (int32_t)i);
		EXPECT(r[N + i] == rank * 100000 + (int32_t)i);
	}
	/* AlltoAll: block q of rank p's input goes to block p of rank q */
	for (int q = 0; q < n; q++)
		for (size_t i = 0; i < N; i++)
			s[(size_t)q * N + i] = rank * 1000 + q * 10 + (int32_t)(i % 10) * 100000;
	NCHECK(ncclAlltoAll(s, r, N, ncclInt32, comm, NULL));
	for (int q = 0; q < n; q++)
		for (size_t i = 0; i < N; i++)
			EXPECT(r[(size_t)q * N + i] ==
			       q * 1000 + rank * 10 + (int32_t)(i % 10) * 100000);
	/* Gather to the last rank, then Scatter it back from there */
	for (size_t i = 0; i < N; i++)
		s[i] = rank * 7 + (int32_t)i;
	NCHECK(ncclGather(s, r, N, ncclInt32, n - 1, comm, NULL));
	for (int q = 0; q < n && rank == n - 1; q++)
		for (size_t i = 0; i < N; i++)
			EXPECT(r[(size_t)q * N + i] == q * 7 + (int32_t)i);
	NCHECK(ncclScatter(r, s, N, ncclInt32, n - 1, comm, NULL));
	for (size_t i = 0; i < N && rank != n - 1; i++)
		EXPECT(s[i] == rank * 7 + (int32_t)i);
	NCHECK(ncclMemFree(s));
	NCHECK(ncclMemFree(r));
}

static void bad_use(ncclComm_t comm, int n)
{
	int32_t *heap = malloc(64);
	void *p;

	/* host memory the library never saw */
	EXPECT(ncclAllReduce(heap, heap, 16, ncclInt32, ncclSum, comm, NULL) ==
	       ncclInvalidArgument);
	EXPECT(strstr(ncclGetLastError(comm), "ncclMemAlloc") != NULL);
	/* registered, it works (staged) */
	{
		void *h;
		for (int i = 0; i < 16; i++)
			heap[i] = rank;
		NCHECK(ncclCommRegister(comm, heap, 64, &h));
		NCHECK(ncclAllReduce(heap, heap, 16, ncclInt32, ncclSum, comm, NULL));
		EXPECT(heap[3] == n * (n - 1) / 2);
		NCHECK(ncclCommDeregister(comm, h));
		EXPECT(ncclAllReduce(heap, heap, 16, ncclInt32, ncclSum, comm, NULL) ==
		       ncclInvalidArgument);
		/* a window is a registration too */
		ncclWindow_t w = NULL;
		NCHECK(ncclCommWindowRegister(comm, heap, 64, &w, NCCL_WIN_COLL_SYMMETRIC));
		EXPECT(w != NULL);
		NCHECK(ncclAllReduce(heap, heap, 16, ncclInt32, ncclSum, comm, NULL));
		NCHECK(ncclCommWindowDeregister(comm, w));
		EXPECT(ncclCommWindowRegister(comm, heap, 0, &w, 0) == ncclInvalidArgument);
	}
	NCHECK(ncclMemAlloc(&p, 4096));
	/* a count whose bytes overflow */
	EXPECT(ncclAllGather(p, p, SIZE_MAX / 2, ncclInt32, comm, NULL) == ncclInvalidArgument);
	EXPECT(strstr(ncclGetLastError(comm), "overflow") != NULL);
	/* a bad peer, a bad type, float8 reductions */
	EXPECT(ncclSend(p, 1, ncclInt32, n, comm, NULL) == ncclInvalidArgument);
	EXPECT(ncclAllReduce(p, p, 1, (ncclDataType_t)42, ncclSum, comm, NULL) ==
	       ncclInvalidArgument);
	EXPECT(ncclAllReduce(p, p, 1, ncclFloat8e4m3, ncclSum, comm, NULL) == ncclInvalidArgument);
	/* the device API */
	EXPECT(ncclDevCommCreate(comm, NULL, NULL) == ncclInvalidUsage);
	EXPECT(strstr(ncclGetLastError(comm), "device API") != NULL);
	EXPECT(ncclDevCommDestroy(comm, NULL) == ncclInvalidUsage);
	/* no GPU here */
	{
		int dev = 5;
		EXPECT(ncclCommCuDevice(comm, &dev) == ncclInvalidUsage);
	}
	NCHECK(ncclMemFree(p));
	free(heap);
}

/* A nonblocking communicator's creation answers ncclInProgress: poll. */
static void wait_ready(ncclComm_t comm, ncclResult_t r)
{
	ncclResult_t st = r;

	if (r != ncclInProgress)
		NCHECK(r);
	while (st == ncclInProgress) {
		NCHECK(ncclCommGetAsyncError(comm, &st));
		usleep(1000);
	}
	NCHECK(st);
}

static void split_and_more(ncclComm_t comm, int n)
{
	ncclComm_t sub = NULL;
	ncclResult_t r;
	int32_t *x;
	void *p;
	int cnt = 0, me = -1;

	/* even and odd ranks, ordered by descending rank */
	/* the new communicator inherits the parent's blocking mode */
	wait_ready(sub, ncclCommSplit(comm, rank % 2, -rank, &sub, NULL));
	EXPECT(sub != NULL);
	NCHECK(ncclCommCount(sub, &cnt));
	NCHECK(ncclCommUserRank(sub, &me));
	EXPECT(cnt == (n - rank % 2 + 1) / 2);
	EXPECT(me == (cnt - 1) - rank / 2);
	NCHECK(ncclMemAlloc(&p, 64));
	x = p;
	x[0] = rank;
	NCHECK(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, sub, NULL));
	{
		int e = 0;
		for (int q = rank % 2; q < n; q += 2)
			e += q;
		EXPECT(x[0] == e);
	}
	/* the R2CCL extension: re-plan now */
	NCHECK(ncclCommTriggerRebalance(sub));
	EXPECT(ncclCommTriggerRebalance(NULL) == ncclInvalidArgument);
	NCHECK(ncclCommFinalize(sub));
	NCHECK(ncclCommDestroy(sub));
	/* NOCOLOR: no communicator */
	sub = (ncclComm_t)1;
	r = ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &sub, NULL);
	EXPECT(rank == 0 ? sub == NULL && r == ncclSuccess : sub != NULL);
	if (sub) {
		wait_ready(sub, r);
		x[0] = 1;
		NCHECK(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, sub, NULL));
		EXPECT(x[0] == n - 1);
		NCHECK(ncclCommDestroy(sub));
	}
	NCHECK(ncclMemFree(p));
}

static void mismatch(ncclComm_t comm, int n)
{
	void *p;
	ncclResult_t r;

	(void)n;
	NCHECK(ncclMemAlloc(&p, 4096));
	/* rank 0 reduces 4 elements, the others 5 */
	r = ncclAllReduce(p, p, rank == 0 ? 4 : 5, ncclInt32, ncclSum, comm, NULL);
	EXPECT(r == ncclInvalidUsage);
	EXPECT(strstr(ncclGetLastError(comm), "ncclAllReduce") != NULL);
	NCHECK(ncclMemFree(p));
}

static void run_rank(const ncclUniqueId *id, int n, bool nonblocking)
{
	ncclComm_t comm;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclResult_t r, st;
	int v = 0;

	alarm(120);
	NCHECK(ncclGetVersion(&v));
	EXPECT(v == 22809);
	cfg.blocking = nonblocking ? 0 : 1;
	cfg.commName = "nccl-host-test";
	r = ncclCommInitRankConfig(&comm, n, *id, rank, &cfg);
	EXPECT(nonblocking ? r == ncclInProgress : r == ncclSuccess);
	wait_ready(comm, r);
	collectives(comm, n);
	transfers(comm, n);
	bad_use(comm, n);
	split_and_more(comm, n);
	NCHECK(ncclCommGetAsyncError(comm, &st));
	EXPECT(st == ncclSuccess);
	mismatch(comm, n);
	NCHECK(ncclCommDestroy(comm));
	_exit(0);
}

static void run_ranks(int n, bool nonblocking)
{
	struct th_daemon d;
	ncclUniqueId id;
	pid_t pids[8];

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	rank = -1;
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	for (int r = 0; r < n; r++) {
		pids[r] = fork();
		ck_assert_int_ge(pids[r], 0);
		if (pids[r] == 0) {
			rank = r;
			run_rank(&id, n, nonblocking);
		}
	}
	for (int r = 0; r < n; r++) {
		int st = 0;
		waitpid(pids[r], &st, 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "rank %d: status %#x (see the log above)", r, st);
	}
	ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
	th_daemon_cleanup(&d);
}

START_TEST(two_ranks)
{
	run_ranks(2, false);
}
END_TEST

START_TEST(four_ranks_nonblocking)
{
	run_ranks(4, true);
}
END_TEST

static void *abort_later(void *arg)
{
	usleep(300000);
	ncclCommAbort(arg);
	return NULL;
}

/* Rank 0 waits in an AllReduce rank 1 never joins; ncclCommAbort from
 * another thread must release it at once (not after the op timeout, 30
 * s). Rank 1 stays (blocked on a pipe) until rank 0 has exited, so only
 * the abort can release rank 0. */
START_TEST(abort_releases_waiter)
{
	struct th_daemon d;
	ncclUniqueId id;
	pid_t pids[2];
	int hold[2];

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	ck_assert_int_eq(pipe(hold), 0);
	for (int r = 0; r < 2; r++) {
		pids[r] = fork();
		ck_assert_int_ge(pids[r], 0);
		if (pids[r] == 0) {
			ncclComm_t comm;
			pthread_t t;
			void *p;
			double t0;
			ncclResult_t res;
			char c;

			rank = r;
			alarm(60);
			NCHECK(ncclCommInitRank(&comm, 2, id, r));
			NCHECK(ncclMemAlloc(&p, 4096));
			if (r == 1) {
				close(hold[1]);
				/* EOF once rank 0 and the parent closed theirs */
				while (read(hold[0], &c, 1) < 0 && errno == EINTR)
					;
				_exit(0);
			}
			pthread_create(&t, NULL, abort_later, comm);
			t0 = th_now_ms();
			res = ncclAllReduce(p, p, 16, ncclFloat32, ncclSum, comm, NULL);
			EXPECT(res != ncclSuccess);
			EXPECT(th_now_ms() - t0 < 15000);
			pthread_join(t, NULL);
			_exit(0);
		}
	}
	close(hold[0]);
	close(hold[1]);
	for (int r = 0; r < 2; r++) {
		int st = 0;
		waitpid(pids[r], &st, 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status %#x", r, st);
	}
	ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
	th_daemon_cleanup(&d);
}
END_TEST

/* One thread, three ranks (ncclCommInitAll), operations in groups over the
 * three communicators: each runs on its own thread inside ncclGroupEnd. */
START_TEST(init_all_one_thread)
{
	struct th_daemon d;
	ncclComm_t c[3];
	int32_t *b[3];

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	rank = 0;
	ck_assert_int_eq(ncclCommInitAll(c, 3, NULL), ncclSuccess);
	for (int r = 0; r < 3; r++) {
		int cnt, me;
		void *p;
		ck_assert_int_eq(ncclCommCount(c[r], &cnt), ncclSuccess);
		ck_assert_int_eq(ncclCommUserRank(c[r], &me), ncclSuccess);
		ck_assert_int_eq(cnt, 3);
		ck_assert_int_eq(me, r);
		/* no GPU: the device of ncclCommInitAll's list (NULL: 0, 1, 2) */
		ck_assert_int_eq(ncclCommCuDevice(c[r], &cnt), ncclSuccess);
		ck_assert_int_eq(cnt, r);
		ck_assert_int_eq(ncclMemAlloc(&p, 3 * 4096 * 4), ncclSuccess);
		b[r] = p;
		for (int i = 0; i < 4096; i++)
			b[r][i] = r * 10 + i;
	}
	ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		ck_assert_int_eq(ncclAllReduce(b[r], b[r], 4096, ncclInt32, ncclSum, c[r], NULL),
				 ncclSuccess);
	ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < 4096; i++)
			ck_assert_int_eq(b[r][i], 30 + 3 * i);
	/* every rank sends to the next one, all in one group, sends first */
	ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		ck_assert_int_eq(ncclSend(b[r], 16, ncclInt32, (r + 1) % 3, c[r], NULL), ncclSuccess);
	for (int r = 0; r < 3; r++) {
		b[r][4096] = -1;
		ck_assert_int_eq(ncclRecv(b[r] + 4096, 16, ncclInt32, (r + 2) % 3, c[r], NULL),
				 ncclSuccess);
	}
	ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		ck_assert_int_eq(b[r][4096 + 5], 30 + 15);
	for (int r = 0; r < 3; r++) {
		ck_assert_int_eq(ncclCommDestroy(c[r]), ncclSuccess);
		ck_assert_int_eq(ncclMemFree(b[r]), ncclSuccess);
	}
	ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
	th_daemon_cleanup(&d);
}
END_TEST

/* Three ranks; rank 2's process dies; ranks 0 and 1 shrink it away and go
 * on with the new communicator. */
START_TEST(shrink_after_death)
{
	struct th_daemon d;
	ncclUniqueId id;
	pid_t pids[3];

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	for (int r = 0; r < 3; r++) {
		pids[r] = fork();
		ck_assert_int_ge(pids[r], 0);
		if (pids[r] == 0) {
			ncclComm_t comm, sub = NULL;
			int excl = 2, cnt = 0;
			int32_t *x;
			void *p;

			rank = r;
			alarm(60);
			NCHECK(ncclCommInitRank(&comm, 3, id, r));
			NCHECK(ncclMemAlloc(&p, 4096));
			x = p;
			x[0] = r;
			NCHECK(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, comm, NULL));
			EXPECT(x[0] == 3);
			if (r == 2)
				_exit(0); /* gone: its session closes */
			usleep(300000);
			NCHECK(ncclCommShrink(comm, &excl, 1, &sub, NULL, NCCL_SHRINK_ABORT));
			NCHECK(ncclCommCount(sub, &cnt));
			EXPECT(cnt == 2);
			x[0] = r + 1;
			NCHECK(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, sub, NULL));
			EXPECT(x[0] == 3);
			NCHECK(ncclCommDestroy(sub));
			NCHECK(ncclCommAbort(comm));
			_exit(0);
		}
	}
	for (int r = 0; r < 3; r++) {
		int st = 0;
		waitpid(pids[r], &st, 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status %#x", r, st);
	}
	ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
	th_daemon_cleanup(&d);
}
END_TEST

/* The daemon dies mid-job: the rank waiting in an AllReduce and the rank
 * calling one later both get ncclSystemError (not a hang), with a message.
 * The parent kills the daemon once both ranks are ready (a byte each on a
 * pipe); rank 1 calls its AllReduce after that (the pipe closed). */
START_TEST(daemon_dies)
{
	struct th_daemon d;
	ncclUniqueId id;
	pid_t pids[2];
	int ready[2], go[2];
	char c[2];

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	for (int r = 0; r < 2; r++) {
		pids[r] = fork();
		ck_assert_int_ge(pids[r], 0);
		if (pids[r] == 0) {
			ncclComm_t comm;
			ncclResult_t res;
			void *p;
			double t0;

			rank = r;
			alarm(60);
			NCHECK(ncclCommInitRank(&comm, 2, id, r));
			NCHECK(ncclMemAlloc(&p, 4096));
			/* only the ends it uses: a rank that fails closes its
			 * ready end as it exits, and the parent sees EOF */
			close(go[1]);
			close(ready[0]);
			EXPECT(write(ready[1], "r", 1) == 1);
			close(ready[1]);
			if (r == 1) /* until the daemon was killed */
				while (read(go[0], c, 1) < 0 && errno == EINTR)
					;
			close(go[0]);
			t0 = th_now_ms();
			res = ncclAllReduce(p, p, 16, ncclFloat32, ncclSum, comm, NULL);
			EXPECT(res == ncclSystemError || res == ncclRemoteError);
			EXPECT(strlen(ncclGetLastError(comm)) > 0);
			EXPECT(th_now_ms() - t0 < 5000);
			fprintf(stderr, "rank %d: %s: %s\n", r, ncclGetErrorString(res),
				ncclGetLastError(comm));
			ncclCommAbort(comm);
			_exit(0);
		}
	}
	close(ready[1]);
	close(go[0]);
	/* both ranks ready (rank 0 then in its AllReduce, or about to be) */
	for (size_t got = 0; got < 2;) {
		ssize_t k = read(ready[0], c, 2 - got);
		ck_assert_msg(k > 0 || (k < 0 && errno == EINTR), "a rank failed before its AllReduce");
		got += k > 0 ? (size_t)k : 0;
	}
	close(ready[0]);
	usleep(200000); /* rank 0 into its wait */
	kill(d.pid, SIGKILL);
	close(go[1]);
	for (int r = 0; r < 2; r++) {
		int st = 0;
		waitpid(pids[r], &st, 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status %#x", r, st);
	}
	th_daemon_stop(&d, SIGKILL, 5000);
	th_daemon_cleanup(&d);
}
END_TEST

/* A nonblocking creation whose other rank never comes: ncclCommAbort must
 * end it at once (PyTorch's watchdog does this), not after the bootstrap
 * timeout. */
START_TEST(abort_releases_init)
{
	struct th_daemon d;
	ncclUniqueId id;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclComm_t comm = NULL;
	ncclResult_t st = ncclSuccess;
	double t0;

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	cfg.blocking = 0;
	ck_assert_int_eq(ncclCommInitRankConfig(&comm, 2, id, 0, &cfg), ncclInProgress);
	usleep(300000);
	ck_assert_int_eq(ncclCommGetAsyncError(comm, &st), ncclSuccess);
	ck_assert_int_eq(st, ncclInProgress);
	t0 = th_now_ms();
	ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
	/* the bootstrap timeout is 30 s: well under it means the abort did it */
	ck_assert_msg(th_now_ms() - t0 < 15000, "abort took %.0f ms", th_now_ms() - t0);
	ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
	th_daemon_cleanup(&d);
}
END_TEST

/* ---- what PyTorch does with the library, on host memory (issue 19: every
 * python process aborted at exit in glibc's tcache_thread_shutdown) ---- */

static atomic_int watch_stop, watch_bad;

/* PyTorch's watchdog: ncclCommGetAsyncError and ncclGetLastError in a loop
 * while other threads run collectives */
static void *watchdog(void *arg)
{
	ncclComm_t c = arg;

	while (!atomic_load(&watch_stop)) {
		ncclResult_t e = ncclSuccess;
		if (ncclCommGetAsyncError(c, &e) != ncclSuccess || e != ncclSuccess)
			atomic_store(&watch_bad, 1);
		(void)strlen(ncclGetLastError(c));
		usleep(500);
	}
	return NULL;
}

struct tjob {
	ncclComm_t comm, sub;
	int n, nsub;
	int ok;
};

/* One operation, one refused call and its text, from a thread that then
 * exits (its thread-local state goes with it). */
static void *op_thread(void *arg)
{
	struct tjob *j = arg;
	int32_t *p;
	void *v;

	if (ncclMemAlloc(&v, 4096 * 4) != ncclSuccess)
		return NULL;
	p = v;
	for (int i = 0; i < 4096; i++)
		p[i] = i + rank;
	if (ncclAllReduce(p, p, 4096, ncclInt32, ncclSum, j->comm, NULL) != ncclSuccess)
		return NULL;
	for (int i = 0; i < 4096; i++)
		if (p[i] != j->n * i + j->n * (j->n - 1) / 2)
			return NULL;
	if (ncclAllReduce(p, p, 16, (ncclDataType_t)99, ncclSum, j->comm, NULL) !=
	    ncclInvalidArgument || !strstr(ncclGetLastError(NULL), "data type 99"))
		return NULL;
	ncclMemFree(v);
	j->ok = 1;
	return NULL;
}

/* A group over two communicators (each share runs on a thread of its own
 * inside ncclGroupEnd), from a thread. */
static void *group_thread(void *arg)
{
	struct tjob *j = arg;
	int64_t *a, *b;
	void *v;

	if (ncclMemAlloc(&v, 2 * 1000 * 8) != ncclSuccess)
		return NULL;
	a = v;
	b = a + 1000;
	for (int i = 0; i < 1000; i++)
		a[i] = b[i] = i * (rank + 1);
	ncclGroupStart();
	ncclAllReduce(a, a, 1000, ncclInt64, ncclSum, j->comm, NULL);
	ncclAllReduce(b, b, 1000, ncclInt64, ncclMax, j->sub, NULL);
	if (ncclGroupEnd() != ncclSuccess)
		return NULL;
	for (int i = 0; i < 1000; i++)
		if (a[i] != (int64_t)i * j->n * (j->n + 1) / 2 || b[i] != (int64_t)i * j->nsub)
			return NULL;
	ncclMemFree(v);
	j->ok = 1;
	return NULL;
}

static void *abort_thread(void *arg)
{
	ncclCommAbort(arg);
	return NULL;
}

/* Other threads' allocations and exits after the communicators are gone:
 * a chunk the library freed twice, or wrote after freeing, makes glibc
 * abort here (malloc's or tcache_thread_shutdown's checks), and ASan says
 * where. */
static void *churn_thread(void *arg)
{
	void *p[64];

	(void)arg;
	for (int round = 0; round < 20; round++) {
		for (int k = 0; k < 64; k++)
			p[k] = malloc(16 + 16 * (size_t)k);
		for (int k = 0; k < 64; k++)
			free(p[k]);
	}
	return NULL;
}

static void torch_like_rank(ncclUniqueId id, int n)
{
	struct tjob j = { .n = n };
	pthread_t w, t;

	NCHECK(ncclCommInitRank(&j.comm, n, id, rank));
	pthread_create(&w, NULL, watchdog, j.comm);
	for (int k = 0; k < 3; k++) { /* one after the other: same order on every rank */
		j.ok = 0;
		pthread_create(&t, NULL, op_thread, &j);
		pthread_join(t, NULL);
		EXPECT(j.ok);
	}
	/* the last rank alone (PyTorch's new_group of others); then a group
	 * over both of the other ranks' communicators */
	NCHECK(ncclCommSplit(j.comm, rank < n - 1 ? 0 : NCCL_SPLIT_NOCOLOR, rank, &j.sub, NULL));
	EXPECT((rank < n - 1) == (j.sub != NULL));
	if (j.sub) {
		NCHECK(ncclCommCount(j.sub, &j.nsub));
		EXPECT(j.nsub == n - 1);
		j.ok = 0;
		pthread_create(&t, NULL, group_thread, &j);
		pthread_join(t, NULL);
		EXPECT(j.ok);
	} else {
		/* its part of the group's collective on the parent */
		int64_t *a;
		void *v;
		NCHECK(ncclMemAlloc(&v, 1000 * 8));
		a = v;
		for (int i = 0; i < 1000; i++)
			a[i] = i * (rank + 1);
		NCHECK(ncclAllReduce(a, a, 1000, ncclInt64, ncclSum, j.comm, NULL));
		EXPECT(a[7] == 7LL * n * (n + 1) / 2);
		NCHECK(ncclMemFree(v));
	}
	atomic_store(&watch_stop, 1);
	pthread_join(w, NULL);
	EXPECT(!atomic_load(&watch_bad));
	/* PyTorch's end: the subgroup destroyed, the world aborted, from
	 * threads of their own */
	if (j.sub)
		NCHECK(ncclCommDestroy(j.sub));
	pthread_create(&t, NULL, abort_thread, j.comm);
	pthread_join(t, NULL);
	for (int k = 0; k < 4; k++) {
		pthread_t c[4];
		for (int i = 0; i < 4; i++)
			pthread_create(&c[i], NULL, churn_thread, NULL);
		for (int i = 0; i < 4; i++)
			pthread_join(c[i], NULL);
	}
	exit(0); /* exit() runs the library's and libc's exit handlers too */
}

START_TEST(torch_like_threads)
{
	struct th_daemon d;
	ncclUniqueId id;
	pid_t pids[3];

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	for (int r = 0; r < 3; r++) {
		pids[r] = fork();
		ck_assert_int_ge(pids[r], 0);
		if (pids[r] == 0) {
			rank = r;
			alarm(120);
			torch_like_rank(id, 3);
		}
	}
	for (int r = 0; r < 3; r++) {
		int st = 0;
		waitpid(pids[r], &st, 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status %#x", r, st);
	}
	ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
	th_daemon_cleanup(&d);
}
END_TEST

struct bad_group {
	ncclComm_t *c;
	ncclResult_t res;
	char text[256];
};

static void *bad_group_thread(void *arg)
{
	struct bad_group *bg = arg;
	static float a[64], b[64];

	bg->res = ncclGroupStart();
	if (bg->res == ncclSuccess)
		bg->res = ncclAllReduce(a, a, 64, ncclFloat32, ncclSum, bg->c[0], NULL);
	if (bg->res == ncclSuccess)
		bg->res = ncclAllReduce(b, b, 64, ncclFloat32, ncclSum, bg->c[1], NULL);
	if (bg->res == ncclSuccess && ncclGetLastError(NULL)[0])
		bg->res = ncclInternalError; /* the thread's text must start empty */
	if (bg->res == ncclSuccess)
		bg->res = ncclGroupEnd();
	snprintf(bg->text, sizeof(bg->text), "%s", ncclGetLastError(NULL));
	return NULL;
}

/* A failure on a thread of the library's (a communicator created inside
 * ncclCommInitAll's group) reaches the caller's ncclGetLastError: issue 19's
 * "ncclCommInitAll(comm, 2, devs): invalid usage ()" had an empty text. */
START_TEST(init_all_error_text)
{
	struct th_daemon d;
	ncclComm_t c[2] = { NULL, NULL };

	ck_assert_int_eq(th_daemon_start(&d, NULL), 0);
	setenv("R2CCL_MODE", "no-such-mode", 1); /* refused by libr2ccl in each rank's thread */
	ck_assert_int_eq(ncclCommInitAll(c, 2, NULL), ncclInvalidArgument);
	ck_assert_ptr_null(c[0]);
	ck_assert_ptr_null(c[1]);
	ck_assert_msg(strstr(ncclGetLastError(NULL), "R2CCL_MODE"), "last error: \"%s\"",
		      ncclGetLastError(NULL));
	unsetenv("R2CCL_MODE");
	/* a group over two communicators whose shares fail on their threads
	 * (host memory neither registered nor from ncclMemAlloc), called from a
	 * fresh thread: its last error is empty until the group's text */
	ck_assert_int_eq(ncclCommInitAll(c, 2, NULL), ncclSuccess);
	{
		struct bad_group bg = { .c = c };
		pthread_t t;

		pthread_create(&t, NULL, bad_group_thread, &bg);
		pthread_join(t, NULL);
		ck_assert_int_eq(bg.res, ncclInvalidArgument);
		ck_assert_msg(strstr(bg.text, "neither GPU memory nor host memory"),
			      "the group's last error: \"%s\"", bg.text);
	}
	ck_assert_int_eq(ncclCommDestroy(c[0]), ncclSuccess);
	ck_assert_int_eq(ncclCommDestroy(c[1]), ncclSuccess);
	ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 20000), 0);
	th_daemon_cleanup(&d);
}
END_TEST

START_TEST(no_daemon)
{
	ncclUniqueId id;

	setenv("R2CCL_SOCKET", "/tmp/r2ccl-nccl-test-nonexistent.sock", 1);
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSystemError);
	ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "/tmp/r2ccl-nccl-test-nonexistent.sock"));
	memset(&id, 0, sizeof(id));
	ncclComm_t c = NULL;
	ck_assert_int_eq(ncclCommInitRank(&c, 2, id, 0), ncclSystemError);
	ck_assert_ptr_null(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nccl-host");
	TCase *t = tcase_create("all");
	SRunner *sr;
	int failed;

	tcase_set_timeout(t, 300);
	tcase_add_test(t, no_daemon);
	tcase_add_test(t, two_ranks);
	tcase_add_test(t, four_ranks_nonblocking);
	tcase_add_test(t, abort_releases_waiter);
	tcase_add_test(t, init_all_one_thread);
	tcase_add_test(t, shrink_after_death);
	tcase_add_test(t, daemon_dies);
	tcase_add_test(t, abort_releases_init);
	tcase_add_test(t, torch_like_threads);
	tcase_add_test(t, init_all_error_text);
	suite_add_tcase(s, t);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
