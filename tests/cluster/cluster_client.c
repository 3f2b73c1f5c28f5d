/* SPDX-License-Identifier: MIT */
/*
 * cluster_client: the rank side of the cluster tests (tests/cluster/).
 *
 * Run on every host of a simulated cluster (cluster.sh run), against that
 * host's r2ccld ($R2CCL_SOCKET). The process forks --local-ranks K rank
 * processes, ranks first_rank .. first_rank+K-1 of --nranks N. The host that
 * holds rank 0 creates the unique id (r2ccl_get_unique_id) and writes it as
 * one line of hex, atomically (temp file + rename), to --uid-file (default
 * $R2CCL_CLUSTER_DIR/uid; use a fresh path for every run); the other hosts
 * wait for it (bounded by --uid-timeout). The format is r2ccl-bench's.
 *
 * Every rank runs the same sequence of operations (--ops selects the kinds):
 * allreduce, allgather, reducescatter, broadcast and reduce (roots 0 and
 * n-1), and a send/recv ring (even ranks send first), for float32 sum, int32
 * max, float16 sum, int8 min, float64 avg, uint64 prod (reductions) and
 * int8/float16/float32/uint64 (copies); counts 1, 7 and ~1000 (never a
 * multiple of n), in and out of place; then, if --max-bytes allows, 1M+3
 * elements, and one 64 MB float32 allreduce and allgather. Every element of
 * every result (and of every out-of-place send buffer, and guard bytes around
 * each buffer) is checked against an expectation computed independently of
 * the daemon, with the inputs and the documented semantics of
 * tests/lib/expect.h (shared with tests/integration/test_collectives.c):
 * integers wrap, avg divides the wrapped sum with C division, floats are small
 * integers so results are exact, copies are bit exact.
 *
 * --loop N: instead, N float32-sum allreduces of --max-bytes each (checked),
 * stopping at the first error (the peer-killed test).
 * --uid-read-only: every host (also rank 0's) reads the id from the uid file
 * (bootstrap tests with a wrong id).
 *
 * Output: failures (with the r2ccl error text and code and the wall-clock
 * time, "epoch=S.mmm") on stderr, and one summary line per host:
 *   cluster_client: PASS|FAIL ranks A..B of N: O ops, E elements checked, ...
 * Exit: 0 every element exact; 1 a wrong element; 2 an r2ccl call failed;
 * 3 usage or setup error (uid file); 4 a rank process died (signal, alarm).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
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
#include "r2ccl.h"
#include "uidfile.h"

#define MEG3 (((size_t)1 << 20) + 3)
#define BIG_BYTES ((size_t)64 << 20)
#define MAX_LOCAL 64

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static double epoch_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Shared between the host process and its rank processes. */
struct rank_res {
	uint64_t ops, elems;
	int fails;     /* wrong elements / guard bytes / call failures */
	int err;       /* first r2ccl error code (0: none) */
	double err_at; /* epoch of the first error */
	int done;
};

struct shared {
	struct ex_failures f; /* all ranks' */
	struct rank_res res[MAX_LOCAL];
};

static struct shared *sh;

/* One rank. */
struct rk {
	struct ex_rank x; /* n, client, operations, elements checked, broken */
	int rank;        /* rank in comm */
	int li;          /* local index */
	r2ccl_comm_t *comm;
	int fails;
	int err;         /* first r2ccl error code */
	double err_at;
};

#define RK(xp) ((struct rk *)(void *)((char *)(xp) - offsetof(struct rk, x)))

/* Every failure, the checks' (tests/lib/expect.c) and the test's own. */
#define rfail(k, ...) ex_failf(&(k)->x, __VA_ARGS__)

static void rerr(struct rk *k, int e)
{
	if (!k->err) {
		k->err = e;
		k->err_at = epoch_s();
	}
}

static void on_fail(struct ex_rank *x, const char *msg)
{
	struct rk *k = RK(x);

	k->fails++;
	ex_record(&sh->f, k->x.n, k->rank, msg);
	if (k->fails <= 3)
		fprintf(stderr, "cluster_client: FAIL nranks=%d rank=%d epoch=%.3f: %s\n", k->x.n,
			k->rank, epoch_s(), msg);
}

static void on_err(struct ex_rank *x, int code)
{
	rerr(RK(x), code);
}

static int balloc(struct rk *k, struct buf *b, size_t cap)
{
	int r = ex_balloc(&k->x, b, cap);

	if (r) {
		rerr(k, r);
		rfail(k, "r2ccl_mem_alloc(%zu): %s (%d)", cap + 2 * GUARD, r2ccl_strerror(r), r);
		k->x.broken = true;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The sequence every rank runs                                              */
/* ------------------------------------------------------------------------ */

enum { OP_ALLREDUCE = 1, OP_ALLGATHER = 2, OP_REDUCESCATTER = 4, OP_BROADCAST = 8,
       OP_REDUCE = 16, OP_SENDRECV = 32, OP_ALL = 63 };

struct copts {
	int nranks, first_rank, local;
	const char *uid_file;
	double uid_timeout_s;
	bool uid_read_only;
	unsigned ops;
	size_t max_bytes;
	int loop;
	int timeout_s;
	int conn_timeout_ms;
};

static const struct { r2ccl_dtype_t dt; r2ccl_redop_t op; } red_pairs[] = {
	{ R2CCL_FLOAT32, R2CCL_SUM }, { R2CCL_INT32, R2CCL_MAX },  { R2CCL_FLOAT16, R2CCL_SUM },
	{ R2CCL_INT8, R2CCL_MIN },    { R2CCL_FLOAT64, R2CCL_AVG }, { R2CCL_UINT64, R2CCL_PROD },
	{ R2CCL_BFLOAT16, R2CCL_MAX }, { R2CCL_UINT32, R2CCL_AVG }, { R2CCL_INT64, R2CCL_SUM },
};
static const r2ccl_dtype_t copy_types[] = { R2CCL_INT8, R2CCL_FLOAT16, R2CCL_FLOAT32,
					    R2CCL_UINT64 };

/* ~1000 elements, never a multiple of n (n > 1) */
static size_t odd_count(int n)
{
	size_t c = 1000 + (size_t)n - 1;
	while (n > 1 && c % (size_t)n == 0)
		c++;
	return c;
}

static size_t buf_cap(const struct copts *o, int n)
{
	size_t cap = (size_t)n * (odd_count(n) + 8) * 8;
	if (o->max_bytes >= MEG3 * 8) {
		size_t m = MEG3 * 8 > (size_t)n * MEG3 * 4 ? MEG3 * 8 : (size_t)n * MEG3 * 4;
		if (m > cap)
			cap = m;
	}
	if (o->max_bytes >= BIG_BYTES && cap < BIG_BYTES)
		cap = BIG_BYTES;
	if (o->loop && cap < o->max_bytes)
		cap = o->max_bytes;
	return cap;
}

static void body_all(struct rk *k, const struct copts *o, struct buf *sb, struct buf *rb)
{
	const int n = k->x.n, last = n - 1;
	const size_t counts[] = { 1, 7, odd_count(n) };

	/* small: every kind, type/op, count, in and out of place */
	for (size_t c = 0; c < ARRAY_LEN(counts); c++)
		for (int ip = 0; ip < 2; ip++) {
			for (size_t p = 0; p < ARRAY_LEN(red_pairs); p++) {
				r2ccl_dtype_t dt = red_pairs[p].dt;
				r2ccl_redop_t op = red_pairs[p].op;
				if (o->ops & OP_ALLREDUCE)
					ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, dt, op, counts[c], ip, 0, sb, rb);
				if (o->ops & OP_REDUCESCATTER)
					ex_coll(&k->x, k->comm, k->rank, K_REDUCESCATTER, dt, op, counts[c], ip, 0, sb, rb);
				if (o->ops & OP_REDUCE) {
					ex_coll(&k->x, k->comm, k->rank, K_REDUCE, dt, op, counts[c], ip, 0, sb, rb);
					if (last != 0)
						ex_coll(&k->x, k->comm, k->rank, K_REDUCE, dt, op, counts[c], ip, last, sb, rb);
				}
			}
			for (size_t t = 0; t < ARRAY_LEN(copy_types); t++) {
				r2ccl_dtype_t dt = copy_types[t];
				if (o->ops & OP_ALLGATHER)
					ex_coll(&k->x, k->comm, k->rank, K_ALLGATHER, dt, R2CCL_SUM, counts[c], ip, 0, sb, rb);
				if (o->ops & OP_BROADCAST) {
					ex_coll(&k->x, k->comm, k->rank, K_BROADCAST, dt, R2CCL_SUM, counts[c], ip, 0, sb, rb);
					if (last != 0)
						ex_coll(&k->x, k->comm, k->rank, K_BROADCAST, dt, R2CCL_SUM, counts[c], ip, last, sb, rb);
				}
				if ((o->ops & OP_SENDRECV) && !ip && n > 1)
					ex_sendrecv_ring(&k->x, k->comm, k->rank, dt, counts[c], sb, rb);
			}
		}

	/* 1M+3 elements (several chunks per rail, uneven split) */
	if (o->max_bytes >= MEG3 * 8) {
		const size_t rs = MEG3 / (size_t)n + 1;
		if (o->ops & OP_ALLREDUCE) {
			ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, R2CCL_FLOAT32, R2CCL_SUM, MEG3, false, 0, sb, rb);
			ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, R2CCL_INT32, R2CCL_MAX, MEG3, true, 0, sb, rb);
			ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, R2CCL_FLOAT64, R2CCL_AVG, MEG3, false, 0, sb, rb);
		}
		if (o->ops & OP_REDUCESCATTER) {
			ex_coll(&k->x, k->comm, k->rank, K_REDUCESCATTER, R2CCL_FLOAT32, R2CCL_SUM, rs, false, 0, sb, rb);
			ex_coll(&k->x, k->comm, k->rank, K_REDUCESCATTER, R2CCL_INT8, R2CCL_MIN, rs, true, 0, sb, rb);
		}
		if (o->ops & OP_REDUCE) {
			ex_coll(&k->x, k->comm, k->rank, K_REDUCE, R2CCL_FLOAT32, R2CCL_SUM, MEG3, false, last, sb, rb);
			ex_coll(&k->x, k->comm, k->rank, K_REDUCE, R2CCL_UINT64, R2CCL_PROD, MEG3, true, 0, sb, rb);
		}
		if (o->ops & OP_ALLGATHER) {
			ex_coll(&k->x, k->comm, k->rank, K_ALLGATHER, R2CCL_FLOAT32, R2CCL_SUM, MEG3, false, 0, sb, rb);
			ex_coll(&k->x, k->comm, k->rank, K_ALLGATHER, R2CCL_FLOAT16, R2CCL_SUM, MEG3, true, 0, sb, rb);
		}
		if (o->ops & OP_BROADCAST) {
			ex_coll(&k->x, k->comm, k->rank, K_BROADCAST, R2CCL_FLOAT32, R2CCL_SUM, MEG3, true, 0, sb, rb);
			ex_coll(&k->x, k->comm, k->rank, K_BROADCAST, R2CCL_UINT64, R2CCL_SUM, MEG3, false, last, sb, rb);
		}
		if ((o->ops & OP_SENDRECV) && n > 1) {
			ex_sendrecv_ring(&k->x, k->comm, k->rank, R2CCL_FLOAT32, MEG3, sb, rb);
			ex_sendrecv_ring(&k->x, k->comm, k->rank, R2CCL_INT8, MEG3, sb, rb);
		}
	}

	/* 64 MB float32: allreduce (16M elements), allgather (64 MB gathered) */
	if (o->max_bytes >= BIG_BYTES) {
		if (o->ops & OP_ALLREDUCE)
			ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, R2CCL_FLOAT32, R2CCL_SUM, BIG_BYTES / 4,
			     false, 0, sb, rb);
		if (o->ops & OP_ALLGATHER)
			ex_coll(&k->x, k->comm, k->rank, K_ALLGATHER, R2CCL_FLOAT32, R2CCL_SUM,
			     BIG_BYTES / 4 / (size_t)n, true, 0, sb, rb);
	}
}

static void body_loop(struct rk *k, const struct copts *o, struct buf *sb, struct buf *rb)
{
	size_t count = o->max_bytes / 4;
	double t0 = mono_s();

	for (int i = 0; i < o->loop && !k->x.broken; i++) {
		ex_coll(&k->x, k->comm, k->rank, K_ALLREDUCE, R2CCL_FLOAT32, R2CCL_SUM, count, false, 0, sb,
		     rb);
		if (k->rank == 0 && (i == 0 || (i + 1) % 10 == 0))
			fprintf(stderr, "cluster_client: loop %d of %d done (%.1f s) epoch=%.3f\n", i + 1,
				o->loop, mono_s() - t0, epoch_s());
	}
}

static int rank_main(const struct copts *o, int li, const r2ccl_unique_id_t *id)
{
	struct rk k = { .x = { .n = o->nranks, .fail = on_fail, .err = on_err },
			 .rank = o->first_rank + li, .li = li };
	r2ccl_connect_opts_t copts = R2CCL_CONNECT_OPTS_INITIALIZER;
	struct buf sb = { 0 }, rb = { 0 };
	struct rank_res *res = &sh->res[li];
	double t0 = mono_s();
	int r, v = -1;

	copts.timeout_ms = o->conn_timeout_ms;
	copts.client_name = "cluster_client";
	r = r2ccl_connect(&copts, &k.x.cl);
	if (r) {
		rerr(&k, r);
		rfail(&k, "r2ccl_connect: %s (%d)", r2ccl_strerror(r), r);
		goto done;
	}
	r = r2ccl_comm_init_rank(k.x.cl, &k.comm, o->nranks, id, k.rank);
	if (r) {
		rerr(&k, r);
		rfail(&k, "r2ccl_comm_init_rank(rank %d of %d): %s (%d) after %.2f s", k.rank,
		      o->nranks, r2ccl_strerror(r), r, mono_s() - t0);
		k.comm = NULL;
		goto out;
	}
	if (r2ccl_comm_count(k.comm, &v) || v != o->nranks)
		rfail(&k, "r2ccl_comm_count: %d, expected %d", v, o->nranks);
	if (r2ccl_comm_user_rank(k.comm, &v) || v != k.rank)
		rfail(&k, "r2ccl_comm_user_rank: %d, expected %d", v, k.rank);
	{
		size_t cap = buf_cap(o, o->nranks);
		if (balloc(&k, &sb, cap) == 0 && balloc(&k, &rb, cap) == 0) {
			if (o->loop)
				body_loop(&k, o, &sb, &rb);
			else
				body_all(&k, o, &sb, &rb);
		}
	}
	if (!k.x.broken) {
		ex_bfree(&k.x, &sb);
		ex_bfree(&k.x, &rb);
	}
	if (k.comm) {
		r = k.x.broken ? r2ccl_comm_abort(k.comm) : r2ccl_comm_destroy(k.comm);
		if (r && !k.x.broken) {
			rerr(&k, r);
			rfail(&k, "r2ccl_comm_destroy: %s (%d)", r2ccl_strerror(r), r);
		}
	}
out:
	if (!k.x.broken && (r = r2ccl_client_check(k.x.cl))) {
		rerr(&k, r);
		rfail(&k, "r2ccl_client_check at the end: %s (%d)", r2ccl_strerror(r), r);
	}
	r2ccl_disconnect(k.x.cl);
done:
	res->ops = k.x.seq;
	res->elems = k.x.elems;
	res->fails = k.fails;
	res->err = k.err;
	res->err_at = k.err_at;
	res->done = 1;
	if (k.err)
		fprintf(stderr, "cluster_client: rank %d: error %d (%s) epoch=%.3f\n", k.rank, k.err,
			r2ccl_strerror(k.err), k.err_at);
	return k.err ? 2 : k.fails ? 1 : 0;
}

/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
"Usage: cluster_client [--nranks N] [--first-rank R] [--local-ranks K] [--uid-file PATH]\n"
"         [--uid-timeout S] [--uid-read-only] [--ops LIST] [--max-bytes B] [--loop N]\n"
"         [--timeout S] [--connect-timeout-ms MS]\n"
"  --nranks N          ranks in all (default $R2CCL_NHOSTS * K)\n"
"  --first-rank R      first rank of this host (default $R2CCL_HOST_INDEX * K)\n"
"  --local-ranks K     rank processes on this host (default 1)\n"
"  --uid-file PATH     unique id file (default $R2CCL_CLUSTER_DIR/uid); fresh per run\n"
"  --uid-timeout S     wait for the uid file at most S seconds (default 30)\n"
"  --uid-read-only     every host reads the id (none creates it)\n"
"  --ops LIST          comma list of allreduce,allgather,reducescatter,broadcast,reduce,\n"
"                      sendrecv, or all (default)\n"
"  --max-bytes B       largest buffer (K/M/G suffixes; default 64M): >= 8.4M adds the\n"
"                      1M+3-element ops, >= 64M the 64 MB ones\n"
"  --loop N            N float32-sum allreduces of --max-bytes instead\n"
"  --timeout S         a rank process never lives longer (default 300)\n");
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int parse_ops(const char *s, unsigned *out)
{
	static const struct { const char *n; unsigned m; } names[] = {
		{ "allreduce", OP_ALLREDUCE }, { "allgather", OP_ALLGATHER },
		{ "reducescatter", OP_REDUCESCATTER }, { "broadcast", OP_BROADCAST },
		{ "reduce", OP_REDUCE }, { "sendrecv", OP_SENDRECV }, { "all", OP_ALL },
	};
	char buf[256], *save = NULL, *t;

	snprintf(buf, sizeof(buf), "%s", s);
	*out = 0;
	for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t i;
		for (i = 0; i < ARRAY_LEN(names); i++)
			if (!strcmp(t, names[i].n))
				break;
		if (i == ARRAY_LEN(names))
			return -1;
		*out |= names[i].m;
	}
	return *out ? 0 : -1;
}

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

int main(int argc, char **argv)
{
	enum { O_NRANKS = 256, O_FIRST, O_LOCAL, O_UID, O_UIDT, O_UIDRO, O_OPS, O_MAXB, O_LOOP,
	       O_TIMEOUT, O_CTO };
	static const struct option lo[] = {
		{ "nranks", required_argument, 0, O_NRANKS },
		{ "first-rank", required_argument, 0, O_FIRST },
		{ "local-ranks", required_argument, 0, O_LOCAL },
		{ "uid-file", required_argument, 0, O_UID },
		{ "uid-timeout", required_argument, 0, O_UIDT },
		{ "uid-read-only", no_argument, 0, O_UIDRO },
		{ "ops", required_argument, 0, O_OPS },
		{ "max-bytes", required_argument, 0, O_MAXB },
		{ "loop", required_argument, 0, O_LOOP },
		{ "timeout", required_argument, 0, O_TIMEOUT },
		{ "connect-timeout-ms", required_argument, 0, O_CTO },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	struct copts o = { .nranks = -1, .first_rank = -1, .local = 1, .uid_timeout_s = 30,
			   .ops = OP_ALL, .max_bytes = BIG_BYTES, .timeout_s = 300,
			   .conn_timeout_ms = 0 };
	char uid_default[PATH_MAX];
	int c;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_NRANKS: o.nranks = atoi(optarg); break;
		case O_FIRST: o.first_rank = atoi(optarg); break;
		case O_LOCAL: o.local = atoi(optarg); break;
		case O_UID: o.uid_file = optarg; break;
		case O_UIDT: o.uid_timeout_s = atof(optarg); break;
		case O_UIDRO: o.uid_read_only = true; break;
		case O_OPS:
			if (parse_ops(optarg, &o.ops)) {
				fprintf(stderr, "cluster_client: bad --ops '%s'\n", optarg);
				return 3;
			}
			break;
		case O_MAXB:
			if (parse_size(optarg, &o.max_bytes) || o.max_bytes < 4) {
				fprintf(stderr, "cluster_client: bad --max-bytes '%s'\n", optarg);
				return 3;
			}
			break;
		case O_LOOP: o.loop = atoi(optarg); break;
		case O_TIMEOUT: o.timeout_s = atoi(optarg); break;
		case O_CTO: o.conn_timeout_ms = atoi(optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 3;
		}
	}
	if (optind < argc || o.local < 1 || o.local > MAX_LOCAL || o.timeout_s < 1) {
		usage(stderr);
		return 3;
	}
	if (o.nranks < 0)
		o.nranks = env_int("R2CCL_NHOSTS", 1) * o.local;
	if (o.first_rank < 0)
		o.first_rank = env_int("R2CCL_HOST_INDEX", 0) * o.local;
	if (o.nranks < 1 || o.first_rank < 0 || o.first_rank + o.local > o.nranks) {
		fprintf(stderr, "cluster_client: ranks %d..%d do not fit --nranks %d\n", o.first_rank,
			o.first_rank + o.local - 1, o.nranks);
		return 3;
	}
	if (!o.uid_file && getenv("R2CCL_CLUSTER_DIR")) {
		snprintf(uid_default, sizeof(uid_default), "%s/uid", getenv("R2CCL_CLUSTER_DIR"));
		o.uid_file = uid_default;
	}
	if (!o.uid_file && o.local < o.nranks) {
		fprintf(stderr, "cluster_client: several hosts need --uid-file (or R2CCL_CLUSTER_DIR)\n");
		return 3;
	}

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("mmap");
		return 3;
	}
	memset(sh, 0, sizeof(*sh));
	signal(SIGPIPE, SIG_IGN);
	alarm((unsigned)o.timeout_s + 30); /* the host process too is bounded */

	/* The unique id. */
	r2ccl_unique_id_t id;
	r2ccl_client_t *client = NULL;
	double t0 = mono_s();
	int err;
	if (o.first_rank == 0 && !o.uid_read_only) {
		r2ccl_connect_opts_t copts = R2CCL_CONNECT_OPTS_INITIALIZER;
		copts.timeout_ms = o.conn_timeout_ms;
		copts.client_name = "cluster_client";
		err = r2ccl_connect(&copts, &client);
		if (err) {
			fprintf(stderr, "cluster_client: cannot connect to r2ccld at %s: %s (%d)\n",
				getenv("R2CCL_SOCKET") ? getenv("R2CCL_SOCKET") : R2CCL_DEFAULT_SOCKET,
				r2ccl_strerror(err), err);
			return 2;
		}
		err = r2ccl_get_unique_id(client, &id);
		if (err) {
			fprintf(stderr, "cluster_client: r2ccl_get_unique_id: %s (%d)\n",
				r2ccl_strerror(err), err);
			r2ccl_disconnect(client);
			return 2;
		}
		if (o.uid_file && o.local < o.nranks && (err = r2_uid_write(o.uid_file, &id))) {
			fprintf(stderr, "cluster_client: cannot write %s: %s\n", o.uid_file,
				strerror(-err));
			r2ccl_disconnect(client);
			return 3;
		}
	} else {
		err = r2_uid_wait(o.uid_file, o.uid_timeout_s, &id);
		if (err) {
			fprintf(stderr, "cluster_client: %s: %s\n", o.uid_file,
				err == -ETIMEDOUT ? "no unique id (is the host with rank 0 running?)"
				: err == -EINVAL  ? "not a unique id"
						  : strerror(-err));
			return 3;
		}
	}

	/* The rank processes. */
	pid_t pids[MAX_LOCAL];
	int died = 0;
	fflush(NULL);
	for (int i = 0; i < o.local; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			alarm((unsigned)o.timeout_s);
			_exit(rank_main(&o, i, &id));
		}
		if (pids[i] < 0) {
			perror("fork");
			died++;
		}
	}
	for (int i = 0; i < o.local; i++) {
		int st = 0;
		if (pids[i] <= 0)
			continue;
		while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st)) {
			died++;
			fprintf(stderr, "cluster_client: rank %d killed by signal %d%s\n",
				o.first_rank + i, WTERMSIG(st),
				WTERMSIG(st) == SIGALRM ? " (hung: --timeout)" : "");
		}
	}
	if (client)
		r2ccl_disconnect(client);
	if (o.first_rank == 0 && o.uid_file && !o.uid_read_only && o.local < o.nranks &&
	    !sh->f.nfail && !died)
		unlink(o.uid_file); /* every rank joined */

	uint64_t ops = 0, elems = 0;
	int fails = 0, errs = 0;
	for (int i = 0; i < o.local; i++) {
		ops += sh->res[i].ops;
		elems += sh->res[i].elems;
		fails += sh->res[i].fails;
		errs += sh->res[i].err != 0;
		if (!sh->res[i].done && !died)
			died++;
	}
	bool pass = !fails && !errs && !died;
	printf("cluster_client: %s ranks %d..%d of %d: %" PRIu64 " ops, %" PRIu64
	       " elements checked, %d failures, %d rank errors, %.2f s\n",
	       pass ? "PASS" : "FAIL", o.first_rank, o.first_rank + o.local - 1, o.nranks, ops, elems,
	       fails, errs, mono_s() - t0);
	if (!pass && sh->f.first[0])
		printf("cluster_client: first failure: %s\n", sh->f.first);
	fflush(stdout);
	return pass ? 0 : died ? 4 : errs ? 2 : 1;
}
