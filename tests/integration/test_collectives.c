/* SPDX-License-Identifier: MIT */
/*
 * Integration: every collective through libr2ccl against a real r2ccld, with
 * 1, 2, 3 and 8 ranks, in and out of place, from 0 elements to 64 MB,
 * checking every element (and that nothing outside the buffers and nothing
 * in an out-of-place send buffer is written).
 *
 * Each test case starts its own daemon (harness), gets a unique id on its own
 * connection and forks one process per rank (or one process per two ranks,
 * one thread each, for the "two ranks per process" case). Ranks report the
 * first mismatch into a MAP_SHARED page and through their exit status; an
 * alarm() in every rank process stops a hang. At the end the daemon is stopped
 * with SIGTERM and must exit 0 (and its log must hold no sanitizer report).
 *
 * Inputs are chosen so that every expected value is exact and computed by
 * tests/lib/expect.c (shared with tests/cluster/cluster_client.c),
 * independently of the daemon's reduction code:
 *  - integers: random bits over the whole type (sums and products wrap
 *    modulo the width; computed in uint64 and truncated). avg divides the
 *    wrapped sum by n with C division (signed types truncate toward zero), as
 *    common/reduce.h documents;
 *  - floats: small integers (sum/avg: -8..8, prod: +-1, +-2, min/max:
 *    -100..100), so every partial result is exact even in bfloat16; the exact
 *    result is rounded once (float32: (float)sum / (float)n for avg; float64
 *    in double; half types: float32 result, then r2_float_to_half/bf16, which
 *    round to nearest even);
 *  - copies (allgather, broadcast, send/recv): random bit patterns (NaN
 *    payloads included: copies must be bit exact).
 * Large operations (float32 and int32 sums, 4-byte copies) use closed-form
 * patterns so that checking 64 MB per rank stays cheap.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "expect.h"
#include "harness.h"
#include "r2ccl.h"

#define CHILD_ALARM_S 150 /* a rank process never lives longer than this */
#define CASE_TIMEOUT_S 300
#define BIG_BYTES ((size_t)64 << 20)
#define BIG_F32 (BIG_BYTES / 4)        /* 16M float32 elements */
#define MEG1 (((size_t)1 << 20) + 1)   /* 1M + 1 elements */
#define MAX_PROCS 8

static const int nranks_of[] = { 1, 2, 3, 8 };
#define N_NRANKS ((int)(sizeof(nranks_of) / sizeof(nranks_of[0])))

static const r2ccl_dtype_t all_dtypes[] = {
	R2CCL_INT8,  R2CCL_UINT8,   R2CCL_INT32,    R2CCL_UINT32,  R2CCL_INT64,
	R2CCL_UINT64, R2CCL_FLOAT16, R2CCL_BFLOAT16, R2CCL_FLOAT32, R2CCL_FLOAT64,
};
static const r2ccl_redop_t all_redops[] = { R2CCL_SUM, R2CCL_PROD, R2CCL_MIN, R2CCL_MAX,
					    R2CCL_AVG };
static const size_t matrix_counts[] = { 1, 7, 1000, 1001 };
#define MATRIX_MAX_COUNT 1001
static const r2ccl_dtype_t copy_dtypes[] = { R2CCL_INT8, R2CCL_FLOAT16, R2CCL_BFLOAT16,
					     R2CCL_INT32, R2CCL_FLOAT32, R2CCL_UINT64,
					     R2CCL_FLOAT64 };

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Shared state between the test process and its rank processes              */
/* ------------------------------------------------------------------------ */

struct shared {
	r2ccl_unique_id_t id[2];
	struct ex_failures f; /* all ranks' */
	uint64_t ops, elems; /* rank 0's operations and checked elements */
};

static struct shared *sh;

/* One rank (a process, or a thread of one). */
struct rk {
	struct ex_rank x; /* n, client, operations, elements checked, broken */
	int rank;        /* rank in comm */
	int rank2;       /* rank in comm2 (n - 1 - rank) */
	r2ccl_comm_t *comm;
	r2ccl_comm_t *comm2;
	int fails;
};

#define RK(xp) ((struct rk *)(void *)((char *)(xp) - offsetof(struct rk, x)))

/* Every failure, the checks' (tests/lib/expect.c) and the test's own. */
#define rfail(k, ...) ex_failf(&(k)->x, __VA_ARGS__)

static void on_fail(struct ex_rank *x, const char *msg)
{
	struct rk *k = RK(x);

	k->fails++;
	ex_record(&sh->f, k->x.n, k->rank, msg);
	if (k->fails <= 3)
		fprintf(stderr, "  FAIL nranks=%d rank=%d: %s\n", k->x.n, k->rank, msg);
}

static int balloc(struct rk *k, struct buf *b, size_t cap)
{
	int r = ex_balloc(&k->x, b, cap);

	if (r) {
		rfail(k, "r2ccl_mem_alloc(%zu): %s", cap + 2 * GUARD, r2ccl_strerror(r));
		k->x.broken = true;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Running ranks: processes (and threads), the daemon, the verdict           */
/* ------------------------------------------------------------------------ */

typedef void (*rank_fn)(struct rk *k, const void *arg);

struct job {
	int n;       /* ranks */
	int rpp;     /* ranks per process */
	int ncomms;  /* 1, or 2 (comm2: the same ranks in reverse order) */
	rank_fn fn;
	const void *arg;
};

struct thr {
	const struct job *j;
	int rank;
	int fails;
	pthread_t t;
};

static int rank_main(const struct job *j, int rank)
{
	struct rk k = { .x = { .n = j->n, .fail = on_fail }, .rank = rank,
			 .rank2 = j->n - 1 - rank };
	int r, v = -1;

	r = r2ccl_connect(NULL, &k.x.cl);
	if (r) {
		rfail(&k, "r2ccl_connect: %s", r2ccl_strerror(r));
		return k.fails;
	}
	r = r2ccl_comm_init_rank(k.x.cl, &k.comm, j->n, &sh->id[0], rank);
	if (r) {
		rfail(&k, "r2ccl_comm_init_rank(%d of %d): %s", rank, j->n, r2ccl_strerror(r));
		goto out;
	}
	if (r2ccl_comm_count(k.comm, &v) || v != j->n)
		rfail(&k, "r2ccl_comm_count: %d, expected %d", v, j->n);
	if (r2ccl_comm_user_rank(k.comm, &v) || v != rank)
		rfail(&k, "r2ccl_comm_user_rank: %d, expected %d", v, rank);
	if (j->ncomms > 1) {
		r = r2ccl_comm_init_rank(k.x.cl, &k.comm2, j->n, &sh->id[1], k.rank2);
		if (r) {
			rfail(&k, "r2ccl_comm_init_rank (second comm, rank %d): %s", k.rank2,
			     r2ccl_strerror(r));
			goto out;
		}
	}
	j->fn(&k, j->arg);
	if (rank == 0) {
		sh->ops = k.x.seq;
		sh->elems = k.x.elems;
	}
out:
	if (k.comm2 && (r = r2ccl_comm_destroy(k.comm2)))
		rfail(&k, "r2ccl_comm_destroy (second): %s", r2ccl_strerror(r));
	if (k.comm && (r = r2ccl_comm_destroy(k.comm)))
		rfail(&k, "r2ccl_comm_destroy: %s", r2ccl_strerror(r));
	if ((r = r2ccl_client_check(k.x.cl)))
		rfail(&k, "r2ccl_client_check at the end: %s", r2ccl_strerror(r));
	r2ccl_disconnect(k.x.cl);
	return k.fails;
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;

	t->fails = rank_main(t->j, t->rank);
	return NULL;
}

static int proc_main(const struct job *j, int p)
{
	struct thr t[MAX_PROCS];
	int fails = 0;

	alarm(CHILD_ALARM_S);
	if (j->rpp == 1)
		return rank_main(j, p) ? 1 : 0;
	for (int i = 0; i < j->rpp; i++) {
		t[i].j = j;
		t[i].rank = p * j->rpp + i;
		t[i].fails = 0;
		if (pthread_create(&t[i].t, NULL, thr_main, &t[i])) {
			fprintf(stderr, "pthread_create failed\n");
			_exit(3);
		}
	}
	for (int i = 0; i < j->rpp; i++) {
		pthread_join(t[i].t, NULL);
		fails += t[i].fails;
	}
	return fails ? 1 : 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void dump_log_tail(const struct th_daemon *d)
{
	char cmd[400];

	fprintf(stderr, "--- tail of the daemon's log (%s) ---\n", d->log);
	snprintf(cmd, sizeof(cmd), "tail -n 30 '%s' >&2", d->log);
	if (system(cmd) < 0)
		(void)0;
}

/* Runs fn on n ranks (rpp per process) against a fresh daemon; asserts. */
static void run_ranks(const char *name, int n, int rpp, int ncomms, rank_fn fn, const void *arg)
{
	static const char *const dargs[] = { NULL };
	struct job j = { .n = n, .rpp = rpp, .ncomms = ncomms, .fn = fn, .arg = arg };
	struct th_daemon d;
	r2ccl_client_t *pc = NULL;
	pid_t pids[MAX_PROCS];
	int nprocs = n / rpp, bad_exit = 0, r, dst, sanitizer;
	char why[512] = "";
	double t0 = now_s();

	ck_assert(n % rpp == 0 && nprocs <= MAX_PROCS && ncomms <= 2);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	ck_assert_int_eq(th_daemon_start(&d, dargs), 0);

	r = r2ccl_connect(NULL, &pc);
	if (r == 0)
		for (int c = 0; c < ncomms && r == 0; c++)
			r = r2ccl_get_unique_id(pc, &sh->id[c]);
	if (r) {
		th_daemon_stop(&d, SIGKILL, 1000);
		th_daemon_cleanup(&d);
		ck_abort_msg("%s: connect/get_unique_id: %s", name, r2ccl_strerror(r));
	}

	fflush(NULL);
	for (int p = 0; p < nprocs; p++) {
		pids[p] = fork();
		if (pids[p] == 0)
			_exit(proc_main(&j, p));
		if (pids[p] < 0) {
			nprocs = p;
			snprintf(why, sizeof(why), "fork failed");
			bad_exit++;
			break;
		}
	}
	for (int p = 0; p < nprocs; p++) {
		int st = 0;
		while (waitpid(pids[p], &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			bad_exit++;
			if (!why[0]) {
				if (WIFSIGNALED(st))
					snprintf(why, sizeof(why), "process %d (rank %d) killed by signal %d%s",
						 p, p * rpp, WTERMSIG(st),
						 WTERMSIG(st) == SIGALRM ? " (hung: alarm)" : "");
				else
					snprintf(why, sizeof(why), "process %d (rank %d) exited %d", p,
						 p * rpp, WEXITSTATUS(st));
			}
		}
	}
	r = r2ccl_client_check(pc);
	r2ccl_disconnect(pc);
	sanitizer = th_log_count(&d, "runtime error") + th_log_count(&d, "Sanitizer");
	dst = th_daemon_stop(&d, SIGTERM, 20000);
	fprintf(stderr, "[collectives] %-30s nranks=%d: %6.2f s (rank 0: %" PRIu64
		" ops, %" PRIu64 " elements checked)\n",
		name, n, now_s() - t0, sh->ops, sh->elems);
	if (bad_exit || sh->f.nfail || dst != 0 || sanitizer || r)
		dump_log_tail(&d);
	th_daemon_cleanup(&d);

	ck_assert_msg(sh->f.nfail == 0, "%s nranks=%d: %d failure(s); first: %s", name, n, sh->f.nfail,
		      sh->f.first);
	ck_assert_msg(bad_exit == 0, "%s nranks=%d: %s", name, n, why);
	ck_assert_msg(r == 0, "%s nranks=%d: the parent's session broke: %s", name, n,
		      r2ccl_strerror(r));
	ck_assert_msg(sanitizer == 0, "%s nranks=%d: sanitizer report in the daemon's log", name,
		      n);
	ck_assert_msg(dst == 0, "%s nranks=%d: r2ccld exited %d on SIGTERM (expected 0)", name, n,
		      dst);
	munmap(sh, sizeof(*sh));
	sh = NULL;
}

/* ------------------------------------------------------------------------ */
/* Rank bodies                                                               */
/* ------------------------------------------------------------------------ */

/* every dtype x every redop x small counts, in and out of place */
static void body_red_matrix(struct rk *k, const void *arg)
{
	const enum kind kind = *(const enum kind *)arg;
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->x.n;
	struct buf sb, rb;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap))
		return;
	for (size_t t = 0; t < ARRAY_LEN(all_dtypes); t++)
		for (size_t o = 0; o < ARRAY_LEN(all_redops); o++)
			for (size_t c = 0; c < ARRAY_LEN(matrix_counts); c++)
				for (int ip = 0; ip < 2; ip++) {
					/* reduce: every root for the smaller counts, one otherwise */
					int r0 = 0, r1 = kind == K_REDUCE ? k->x.n : 1;
					if (kind == K_REDUCE && matrix_counts[c] >= 1000) {
						r0 = (int)((t + o + c + (size_t)ip) % (size_t)k->x.n);
						r1 = r0 + 1;
					}
					for (int root = r0; root < r1; root++)
						ex_coll(&k->x, k->comm, k->rank, kind, all_dtypes[t],
						     all_redops[o], matrix_counts[c], ip, root, &sb,
						     &rb);
				}
	ex_bfree(&k->x, &sb);
	ex_bfree(&k->x, &rb);
}

/* every dtype with sum, max and avg over several of the daemon's parts
 * (256 KiB) and blocks: 300007 elements (reducescatter: 300007 in all) */
#define LARGE_COUNT 300007
static void body_red_large(struct rk *k, const void *arg)
{
	static const r2ccl_redop_t ops[] = { R2CCL_SUM, R2CCL_MAX, R2CCL_AVG };
	const enum kind kind = *(const enum kind *)arg;
	const size_t count = kind == K_REDUCESCATTER ? LARGE_COUNT / (size_t)k->x.n : LARGE_COUNT;
	const size_t cap = (size_t)LARGE_COUNT * 8;
	struct buf sb, rb;
	int i = 0;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap))
		return;
	for (size_t t = 0; t < ARRAY_LEN(all_dtypes); t++)
		for (size_t o = 0; o < ARRAY_LEN(ops); o++, i++)
			ex_coll(&k->x, k->comm, k->rank, kind, all_dtypes[t], ops[o], count, i & 1,
			     k->x.n - 1, &sb, &rb);
	ex_bfree(&k->x, &sb);
	ex_bfree(&k->x, &rb);
}

/* copies with several types: allgather and broadcast (every root) */
static void body_copy_matrix(struct rk *k, const void *arg)
{
	const enum kind kind = *(const enum kind *)arg;
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->x.n;
	struct buf sb, rb;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap))
		return;
	for (size_t t = 0; t < ARRAY_LEN(copy_dtypes); t++)
		for (size_t c = 0; c < ARRAY_LEN(matrix_counts); c++)
			for (int ip = 0; ip < 2; ip++)
				for (int root = 0; root < (kind == K_BROADCAST ? k->x.n : 1); root++)
					ex_coll(&k->x, k->comm, k->rank, kind, copy_dtypes[t], R2CCL_SUM,
					     matrix_counts[c], ip, root, &sb, &rb);
	ex_bfree(&k->x, &sb);
	ex_bfree(&k->x, &rb);
}

/* the size sweep of one collective */
struct sizes_arg {
	enum kind kind;
	const r2ccl_dtype_t *dts;
	int ndts;
};

static void size_list(int n, enum kind kind, size_t out[6])
{
	out[0] = 0;
	out[1] = 1;
	out[2] = 3;
	out[3] = 1000 + (size_t)n - 1; /* not divisible by n (n > 1) */
	out[4] = MEG1;
	/* 64 MB: allgather's total receive, reducescatter's total send buffer */
	out[5] = (kind == K_ALLGATHER || kind == K_REDUCESCATTER) ? BIG_F32 / (size_t)n : BIG_F32;
}

static void body_sizes(struct rk *k, const void *arg)
{
	const struct sizes_arg *a = arg;
	const size_t n = (size_t)k->x.n;
	size_t sizes[6], scap, rcap;
	struct buf sb, rb;

	size_list(k->x.n, a->kind, sizes);
	switch (a->kind) {
	case K_ALLGATHER:
		scap = (BIG_F32 / n) * 4;
		rcap = n * (BIG_F32 / n) * 4;
		break;
	case K_REDUCESCATTER:
		scap = n * (BIG_F32 / n) * 4;
		rcap = (BIG_F32 / n) * 4;
		break;
	default:
		scap = rcap = BIG_BYTES;
		break;
	}
	/* 1M+1 per rank may exceed 64 MB / n for allgather / reducescatter */
	if (n * MEG1 * 4 > scap && a->kind == K_REDUCESCATTER)
		scap = n * MEG1 * 4;
	if (n * MEG1 * 4 > rcap && a->kind == K_ALLGATHER)
		rcap = n * MEG1 * 4;
	if (MEG1 * 4 > scap)
		scap = MEG1 * 4;
	if (MEG1 * 4 > rcap)
		rcap = MEG1 * 4;
	if (balloc(k, &sb, scap) || balloc(k, &rb, rcap))
		return;
	for (int t = 0; t < a->ndts; t++)
		for (int s = 0; s < 6; s++)
			for (int ip = 0; ip < 2; ip++) {
				int r0 = 0, r1 = 1;
				if (a->kind == K_BROADCAST || a->kind == K_REDUCE) {
					/* every root for small sizes, the last (non-zero) for big */
					if (sizes[s] < MEG1) {
						r1 = k->x.n;
					} else {
						r0 = k->x.n - 1;
						r1 = k->x.n;
					}
				}
				for (int root = r0; root < r1; root++)
					ex_coll(&k->x, k->comm, k->rank, a->kind, a->dts[t], R2CCL_SUM,
					     sizes[s], ip, root, &sb, &rb);
			}
	ex_bfree(&k->x, &sb);
	ex_bfree(&k->x, &rb);
}

static void body_sendrecv(struct rk *k, const void *arg)
{
	static const size_t counts[] = { 0, 1, 7, 1000, 1001, MEG1 };
	struct buf sb, rb;

	if (k->x.n < 2)
		return; /* a ring needs two ranks */
	if (balloc(k, &sb, MEG1 * 8) || balloc(k, &rb, MEG1 * 8))
		return;
	for (size_t t = 0; t < ARRAY_LEN(copy_dtypes); t++)
		for (size_t c = 0; c < ARRAY_LEN(counts); c++)
			/* twice in a row: the n-th send pairs with the n-th recv */
			for (int rep = 0; rep < 2; rep++)
				ex_sendrecv_ring(&k->x, k->comm, k->rank, copy_dtypes[t], counts[c], &sb,
					      &rb);
	/* 64 MB once, float32 */
	ex_bfree(&k->x, &sb);
	ex_bfree(&k->x, &rb);
	if (balloc(k, &sb, BIG_BYTES) || balloc(k, &rb, BIG_BYTES))
		return;
	ex_sendrecv_ring(&k->x, k->comm, k->rank, R2CCL_FLOAT32, BIG_F32, &sb, &rb);
	ex_bfree(&k->x, &sb);
	ex_bfree(&k->x, &rb);
}

/* A mix of every op on one communicator (comm, rank in it). */
static void mixed_ops(struct rk *k, r2ccl_comm_t *comm, int rank, int round, struct buf *sb,
		      struct buf *rb)
{
	const int n = k->x.n;

	ex_coll(&k->x, comm, rank, K_ALLREDUCE, R2CCL_INT32, R2CCL_SUM, 1001, round & 1, 0, sb, rb);
	ex_coll(&k->x, comm, rank, K_ALLGATHER, R2CCL_FLOAT16, R2CCL_SUM, 7, false, 0, sb, rb);
	ex_coll(&k->x, comm, rank, K_REDUCESCATTER, R2CCL_BFLOAT16, R2CCL_MAX, 1000, round & 1, 0, sb,
	     rb);
	ex_coll(&k->x, comm, rank, K_BROADCAST, R2CCL_FLOAT64, R2CCL_SUM, 1001, false, (round + 1) % n,
	     sb, rb);
	ex_coll(&k->x, comm, rank, K_REDUCE, R2CCL_UINT8, R2CCL_PROD, 1000, true, (n - 1 + round) % n,
	     sb, rb);
	ex_coll(&k->x, comm, rank, K_ALLREDUCE, R2CCL_FLOAT32, R2CCL_AVG, 1000, true, 0, sb, rb);
	if (n > 1)
		ex_sendrecv_ring(&k->x, comm, rank, R2CCL_INT64, 333, sb, rb);
}

/* two communicators over the same processes (the second in reverse rank
 * order), their operations interleaved */
static void body_two_comms(struct rk *k, const void *arg)
{
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->x.n;
	struct buf sb, rb, sb2, rb2;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap) || balloc(k, &sb2, cap) ||
	    balloc(k, &rb2, cap))
		return;
	for (int round = 0; round < 3; round++) {
		mixed_ops(k, k->comm, k->rank, round, &sb, &rb);
		mixed_ops(k, k->comm2, k->rank2, round, &sb2, &rb2);
		/* and op by op */
		ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, R2CCL_INT64, R2CCL_MIN, 1001, false, 0, &sb,
		     &rb);
		ex_coll(&k->x, k->comm2, k->rank2, K_ALLREDUCE, R2CCL_INT64, R2CCL_MAX, 1001, false, 0,
		     &sb2, &rb2);
		ex_coll(&k->x, k->comm2, k->rank2, K_ALLGATHER, R2CCL_INT8, R2CCL_SUM, 1000, true, 0, &sb2,
		     &rb2);
		ex_coll(&k->x, k->comm, k->rank, K_ALLGATHER, R2CCL_INT8, R2CCL_SUM, 1000, true, 0, &sb,
		     &rb);
	}
	ex_bfree(&k->x, &sb);
	ex_bfree(&k->x, &rb);
	ex_bfree(&k->x, &sb2);
	ex_bfree(&k->x, &rb2);
}

/* mixed_ops, then every type x redop; the send and receive buffers are two
 * halves of one allocation (with guards between them) */
static void body_mixed(struct rk *k, const void *arg)
{
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->x.n;
	struct buf whole, sb, rb;

	if (balloc(k, &whole, 2 * cap + 2 * GUARD))
		return;
	sb.p = whole.p;
	sb.cap = cap;
	rb.p = whole.p + cap + 2 * GUARD;
	rb.cap = cap;
	for (int round = 0; round < 3; round++)
		mixed_ops(k, k->comm, k->rank, round, &sb, &rb);
	for (size_t t = 0; t < ARRAY_LEN(all_dtypes); t++)
		for (size_t o = 0; o < ARRAY_LEN(all_redops); o++)
			ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, all_dtypes[t], all_redops[o], 1001,
			     o & 1, 0, &sb, &rb);
	ex_bfree(&k->x, &whole);
}

/* ------------------------------------------------------------------------ */
/* Test cases: one per (op family, nranks)                                   */
/* ------------------------------------------------------------------------ */

static const enum kind k_allreduce = K_ALLREDUCE, k_reducescatter = K_REDUCESCATTER,
		       k_reduce = K_REDUCE, k_allgather = K_ALLGATHER, k_broadcast = K_BROADCAST;

START_TEST(allreduce_types)
{
	run_ranks("allreduce types x redops", nranks_of[_i], 1, 1, body_red_matrix, &k_allreduce);
}
END_TEST

START_TEST(reducescatter_types)
{
	run_ranks("reducescatter types x redops", nranks_of[_i], 1, 1, body_red_matrix,
		  &k_reducescatter);
}
END_TEST

START_TEST(reduce_types)
{
	run_ranks("reduce types x redops", nranks_of[_i], 1, 1, body_red_matrix, &k_reduce);
}
END_TEST

START_TEST(allreduce_large_types)
{
	run_ranks("allreduce large, every type", nranks_of[_i], 1, 1, body_red_large,
		  &k_allreduce);
}
END_TEST

START_TEST(reducescatter_large_types)
{
	run_ranks("reducescatter large, every type", nranks_of[_i], 1, 1, body_red_large,
		  &k_reducescatter);
}
END_TEST

START_TEST(reduce_large_types)
{
	run_ranks("reduce large, every type", nranks_of[_i], 1, 1, body_red_large, &k_reduce);
}
END_TEST

START_TEST(allgather_types)
{
	run_ranks("allgather types", nranks_of[_i], 1, 1, body_copy_matrix, &k_allgather);
}
END_TEST

START_TEST(broadcast_types)
{
	run_ranks("broadcast types x roots", nranks_of[_i], 1, 1, body_copy_matrix, &k_broadcast);
}
END_TEST

static const r2ccl_dtype_t f32_i32[] = { R2CCL_FLOAT32, R2CCL_INT32 };
static const r2ccl_dtype_t f32_only[] = { R2CCL_FLOAT32 };

START_TEST(allreduce_sizes)
{
	const struct sizes_arg a = { K_ALLREDUCE, f32_i32, 2 };
	run_ranks("allreduce sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(allgather_sizes)
{
	const struct sizes_arg a = { K_ALLGATHER, f32_only, 1 };
	run_ranks("allgather sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(reducescatter_sizes)
{
	const struct sizes_arg a = { K_REDUCESCATTER, f32_i32, 2 };
	run_ranks("reducescatter sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(broadcast_sizes)
{
	const struct sizes_arg a = { K_BROADCAST, f32_only, 1 };
	run_ranks("broadcast sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(reduce_sizes)
{
	const struct sizes_arg a = { K_REDUCE, f32_only, 1 };
	run_ranks("reduce sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(sendrecv)
{
	run_ranks("send/recv ring", nranks_of[_i], 1, 1, body_sendrecv, NULL);
}
END_TEST

START_TEST(two_comms)
{
	run_ranks("two communicators", nranks_of[_i], 1, 2, body_two_comms, NULL);
}
END_TEST

/* 2, 4, 8 ranks in 1, 2, 4 processes: two ranks (threads, one session
 * each) per process */
START_TEST(two_ranks_per_process)
{
	static const int n[] = { 2, 4, 8 };
	run_ranks("two ranks per process", n[_i], 2, 1, body_mixed, NULL);
}
END_TEST

static Suite *collectives_suite(void)
{
	Suite *s = suite_create("collectives");
	struct {
		const char *name;
		const TTest *test;
		int n;
	} cases[] = {
		{ "allreduce_types", allreduce_types, N_NRANKS },
		{ "reducescatter_types", reducescatter_types, N_NRANKS },
		{ "reduce_types", reduce_types, N_NRANKS },
		{ "allreduce_large_types", allreduce_large_types, N_NRANKS },
		{ "reducescatter_large_types", reducescatter_large_types, N_NRANKS },
		{ "reduce_large_types", reduce_large_types, N_NRANKS },
		{ "allgather_types", allgather_types, N_NRANKS },
		{ "broadcast_types", broadcast_types, N_NRANKS },
		{ "allreduce_sizes", allreduce_sizes, N_NRANKS },
		{ "allgather_sizes", allgather_sizes, N_NRANKS },
		{ "reducescatter_sizes", reducescatter_sizes, N_NRANKS },
		{ "broadcast_sizes", broadcast_sizes, N_NRANKS },
		{ "reduce_sizes", reduce_sizes, N_NRANKS },
		{ "sendrecv", sendrecv, N_NRANKS },
		{ "two_comms", two_comms, N_NRANKS },
		{ "two_ranks_per_process", two_ranks_per_process, 3 },
	};

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		TCase *tc = tcase_create(cases[i].name);
		tcase_set_timeout(tc, CASE_TIMEOUT_S);
		tcase_add_loop_test(tc, cases[i].test, 0, cases[i].n);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	return th_run_suite(collectives_suite());
}
