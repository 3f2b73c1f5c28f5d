/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench's rank process: connect, join the communicator, allocate the
 * buffers, then for every size time the operation out-of-place and in place
 * and check its results; rank 0 prints the table.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "gpumem.h"
#include "r2ccl.h"

struct rank_ctx {
	const struct bench_opts *o;
	int rank, n;
	r2ccl_client_t *client;
	r2ccl_comm_t *comm;
	uint8_t *sendbuf, *recvbuf, *scratch;
	size_t sendcap, recvcap;
	/* --gpu: sendbuf/recvbuf are host mirrors of these GPU buffers */
	uint8_t *gsend, *grecv;
	void *stream;
	FILE *trace;
	uint64_t *t_start, *t_end;
};

static void rank_fail(const struct rank_ctx *c, const char *what, int err)
{
	fprintf(stderr, "r2ccl-bench: rank %d: %s: %s (%d)\n", c->rank, what, r2ccl_strerror(err),
		err);
}

static int barrier(struct rank_ctx *c)
{
	int32_t *b = (int32_t *)c->scratch;
	b[0] = 1;
	return r2ccl_allreduce(c->comm, b, b, 1, R2CCL_INT32, R2CCL_SUM);
}

/* --gpu: one stream-ordered call, then the stream and the async error. */
#define GPU_CALL(fn, ...)                                                           \
	do {                                                                        \
		int e_ = fn##_stream(__VA_ARGS__, c->stream), ae_ = 0;              \
		if (!e_)                                                            \
			e_ = bgpu_sync() ? -EIO : 0;                                \
		if (!e_ && !(e_ = r2ccl_comm_get_async_error(c->comm, &ae_)))       \
			e_ = ae_;                                                   \
		return e_;                                                          \
	} while (0)
#define CALL(fn, ...)                                      \
	do {                                               \
		if (c->stream)                             \
			GPU_CALL(fn, __VA_ARGS__);         \
		return fn(__VA_ARGS__);                    \
	} while (0)

/* A send or receive of the ring of run_once. */
static int p2p(struct rank_ctx *c, bool send, uint8_t *buf, size_t count, int peer)
{
	if (send)
		CALL(r2ccl_send, c->comm, buf, count, c->o->dtype, peer);
	CALL(r2ccl_recv, c->comm, buf, count, c->o->dtype, peer);
}

/* Runs one operation of the step described by s (in place or not). */
static int run_once(struct rank_ctx *c, const struct bench_sizes *s, int in_place)
{
	const struct bench_opts *o = c->o;
	size_t es = bench_type_size(o->dtype);
	uint8_t *rbase = c->stream ? c->grecv : c->recvbuf;
	uint8_t *sb = in_place ? rbase : (c->stream ? c->gsend : c->sendbuf), *rb = rbase;
	int r = c->rank, n = c->n;

	switch (o->op) {
	case BOP_ALLREDUCE:
		CALL(r2ccl_allreduce, c->comm, sb, rb, s->count, o->dtype, o->redop);
	case BOP_ALLGATHER:
		if (in_place)
			sb = rb + (size_t)r * s->count * es;
		CALL(r2ccl_allgather, c->comm, sb, rb, s->count, o->dtype);
	case BOP_REDUCESCATTER:
		if (in_place) {
			sb = rb;
			rb = rb + (size_t)r * s->count * es;
		}
		CALL(r2ccl_reducescatter, c->comm, sb, rb, s->count, o->dtype, o->redop);
	case BOP_BROADCAST:
		CALL(r2ccl_broadcast, c->comm, sb, rb, s->count, o->dtype, o->root);
	case BOP_REDUCE:
		CALL(r2ccl_reduce, c->comm, sb, rb, s->count, o->dtype, o->redop, o->root);
	case BOP_SENDRECV: {
		/* Blocking send/recv round a ring: even ranks send first, odd ranks
		 * receive first. With n odd, ranks n-1 and 0 both send first; rank 0's
		 * send to rank 1 (which receives first) completes, then rank 0
		 * receives from n-1, so the chain unwinds: no cycle, no deadlock.
		 * In place (sb == rb) the odd ranks overwrite their data before
		 * sending it, so in-place sendrecv is timed but not checked, as in
		 * nccl-tests. */
		int to = (r + 1) % n, from = (r - 1 + n) % n, err;
		if (r % 2 == 0) {
			err = p2p(c, true, sb, s->count, to);
			if (!err)
				err = p2p(c, false, rb, s->count, from);
		} else {
			err = p2p(c, false, rb, s->count, from);
			if (!err)
				err = p2p(c, true, sb, s->count, to);
		}
		return err;
	}
	default:
		return -EINVAL;
	}
}

/* Fills the inputs of one step; recv buffers get zeros (never a valid result:
 * every expected value is >= 1). */
static void fill_inputs(struct rank_ctx *c, const struct pattern *p, const struct bench_sizes *s,
			int in_place)
{
	const struct bench_opts *o = c->o;
	size_t es = bench_type_size(o->dtype);
	int r = c->rank;
	memset(c->recvbuf, 0, s->recv_bytes > s->send_bytes ? s->recv_bytes : s->send_bytes);
	uint8_t *in = in_place ? c->recvbuf : c->sendbuf;
	switch (o->op) {
	case BOP_ALLGATHER:
		if (in_place)
			in += (size_t)r * s->count * es;
		bench_fill(p, in, s->count, r, 0);
		break;
	case BOP_REDUCESCATTER:
		bench_fill(p, in, s->count * (size_t)c->n, r, 0);
		break;
	case BOP_BROADCAST:
		if (r == o->root || !in_place)
			bench_fill(p, in, s->count, r, 0);
		break;
	default:
		bench_fill(p, in, s->count, r, 0);
		break;
	}
	if (c->stream) {
		size_t rl = s->recv_bytes > s->send_bytes ? s->recv_bytes : s->send_bytes;
		if (bgpu_h2d(c->grecv, c->recvbuf, rl) ||
		    (!in_place && bgpu_h2d(c->gsend, c->sendbuf, s->send_bytes)))
			fprintf(stderr, "r2ccl-bench: rank %d: copy to the GPU failed\n", r);
	}
}

static long long check_outputs(struct rank_ctx *c, const struct pattern *p,
			       const struct bench_sizes *s, int in_place, size_t size)
{
	const struct bench_opts *o = c->o;
	size_t es = bench_type_size(o->dtype);
	int r = c->rank, n = c->n;
	char what[96];
	snprintf(what, sizeof(what), "%s %zu B %s", bench_op_name(o->op), size,
		 in_place ? "in-place" : "out-of-place");
	struct checker ck = { .p = p, .rank = r, .what = what, .wrong = 0 };
	const uint8_t *rb = c->recvbuf;

	if (c->stream &&
	    bgpu_d2h(c->recvbuf, c->grecv,
		     s->recv_bytes > s->send_bytes ? s->recv_bytes : s->send_bytes)) {
		fprintf(stderr, "r2ccl-bench: rank %d: copy from the GPU failed\n", r);
		return (long long)s->count;
	}

	switch (o->op) {
	case BOP_ALLREDUCE:
		bench_check_reduced(&ck, rb, s->count, 0);
		break;
	case BOP_ALLGATHER:
		for (int k = 0; k < n; k++)
			bench_check_copied(&ck, rb + (size_t)k * s->count * es, s->count, k, 0);
		break;
	case BOP_REDUCESCATTER:
		if (in_place)
			rb += (size_t)r * s->count * es;
		bench_check_reduced(&ck, rb, s->count, (uint64_t)r * s->count);
		break;
	case BOP_BROADCAST:
		bench_check_copied(&ck, rb, s->count, o->root, 0);
		break;
	case BOP_REDUCE:
		if (r == o->root)
			bench_check_reduced(&ck, rb, s->count, 0);
		break;
	case BOP_SENDRECV:
		if (!in_place)
			bench_check_copied(&ck, rb, s->count, (r - 1 + n) % n, 0);
		break;
	default:
		break;
	}
	if (ck.wrong > 3)
		fprintf(stderr, "r2ccl-bench: rank %d: %s: %lld wrong elements in all\n", r, what,
			ck.wrong);
	return ck.wrong;
}

/* Buffer capacities: the largest step. */
static void rank_capacities(struct rank_ctx *c, const size_t *sizes, int nsizes)
{
	size_t es = bench_type_size(c->o->dtype);

	for (int i = 0; i < nsizes; i++) {
		struct bench_sizes s;
		bench_step_sizes(c->o->op, sizes[i], es, c->n, &s);
		if (s.send_bytes > c->sendcap)
			c->sendcap = s.send_bytes;
		if (s.send_bytes > c->recvcap)
			c->recvcap = s.send_bytes; /* in-place reducescatter */
		if (s.recv_bytes > c->recvcap)
			c->recvcap = s.recv_bytes;
	}
	c->sendcap += 64;
	c->recvcap += 64;
}

/* Connects to r2ccld (c->client); 0 or EXIT_WRONG after saying why. */
static int rank_connect(struct rank_ctx *c)
{
	const struct bench_opts *o = c->o;
	r2ccl_connect_opts_t copts = R2CCL_CONNECT_OPTS_INITIALIZER;
	char name[64];
	int err;

	copts.socket_path = o->socket_path;
	copts.timeout_ms = o->timeout_ms;
	snprintf(name, sizeof(name), "r2ccl-bench rank %d", c->rank);
	copts.client_name = name;
	err = r2ccl_connect(&copts, &c->client);
	if (err) {
		const char *path = o->socket_path ? o->socket_path : getenv("R2CCL_SOCKET");
		fprintf(stderr, "r2ccl-bench: rank %d: cannot connect to r2ccld at %s: %s\n", c->rank,
			path ? path : R2CCL_DEFAULT_SOCKET, r2ccl_strerror(err));
		return EXIT_WRONG;
	}
	return 0;
}

/* --gpu: the GPU buffers (registered) and their host mirrors, the stream. */
static int rank_gpu_buffers(struct rank_ctx *c)
{
	const struct bench_opts *o = c->o;
	char msg[160];
	int ord, err;

	if (bgpu_open(o->gpu_dev >= 0 ? o->gpu_dev : c->rank - o->first_rank, &ord, msg,
		      sizeof(msg))) {
		fprintf(stderr, "r2ccl-bench: rank %d: --gpu: %s\n", c->rank, msg);
		return EXIT_WRONG;
	}
	if (!(c->sendbuf = malloc(c->sendcap)) || !(c->recvbuf = malloc(c->recvcap)) ||
	    bgpu_alloc((void **)&c->gsend, c->sendcap) ||
	    bgpu_alloc((void **)&c->grecv, c->recvcap)) {
		fprintf(stderr, "r2ccl-bench: rank %d: out of host or GPU %d memory\n", c->rank, ord);
		return EXIT_WRONG;
	}
	if ((err = r2ccl_mem_register_gpu(c->client, c->gsend, c->sendcap)) ||
	    (err = r2ccl_mem_register_gpu(c->client, c->grecv, c->recvcap))) {
		rank_fail(c, "r2ccl_mem_register_gpu", err);
		return EXIT_WRONG;
	}
	c->stream = bgpu_stream();
	if (c->rank == 0)
		printf("# GPU buffers on GPU %d (rank 0), stream-ordered calls\n", ord);
	return 0;
}

/* The send and receive buffers, the scratch, the timestamps, the trace. */
static int rank_buffers(struct rank_ctx *c)
{
	const struct bench_opts *o = c->o;
	int err, rc;

	if (o->gpu) {
		if ((rc = rank_gpu_buffers(c)))
			return rc;
	} else if ((err = r2ccl_mem_alloc(c->client, c->sendcap, (void **)&c->sendbuf)) ||
		   (err = r2ccl_mem_alloc(c->client, c->recvcap, (void **)&c->recvbuf))) {
		rank_fail(c, "r2ccl_mem_alloc", err);
		return EXIT_WRONG;
	}
	if ((err = r2ccl_mem_alloc(c->client, 4096, (void **)&c->scratch))) {
		rank_fail(c, "r2ccl_mem_alloc", err);
		return EXIT_WRONG;
	}
	c->t_start = calloc((size_t)o->iters + 1, sizeof(uint64_t));
	c->t_end = calloc((size_t)o->iters + 1, sizeof(uint64_t));
	if (!c->t_start || !c->t_end)
		return EXIT_WRONG;
	if (o->trace_file && (c->rank == 0 || o->trace_all)) {
		char path[PATH_MAX];
		if (o->trace_all)
			snprintf(path, sizeof(path), "%s.%d", o->trace_file, c->rank);
		else
			snprintf(path, sizeof(path), "%s", o->trace_file);
		c->trace = fopen(path, "w");
		if (!c->trace) {
			fprintf(stderr, "r2ccl-bench: rank %d: cannot open %s: %s\n", c->rank, path,
				strerror(errno));
			return EXIT_WRONG;
		}
		fprintf(c->trace, "iteration,start_us,end_us,size,in_place\n");
	}
	return 0;
}

static uint64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* p50 and p99 of the timed iterations (t_end - t_start) into row */
static void rank_pct(const struct rank_ctx *c, int ip, struct bench_row *row)
{
	int n = c->o->iters;
	double *d = n > 0 ? malloc((size_t)n * sizeof(*d)) : NULL;

	row->p50_us[ip] = row->p99_us[ip] = 0;
	if (!d)
		return;
	for (int it = 0; it < n; it++)
		d[it] = (double)(c->t_end[it] - c->t_start[it]);
	qsort(d, (size_t)n, sizeof(*d), cmp_double);
	row->p50_us[ip] = d[n / 2];
	row->p99_us[ip] = d[n * 99 / 100];
	free(d);
}

/* The timed iterations of one step (after the warm-up and a barrier): the
 * average time in *us. 0 or EXIT_WRONG. */
static int rank_time(struct rank_ctx *c, const struct bench_sizes *s, int ip, double *us)
{
	const struct bench_opts *o = c->o;
	int err;

	for (int w = 0; w < o->warmup; w++)
		if ((err = run_once(c, s, ip))) {
			rank_fail(c, "warm-up", err);
			return EXIT_WRONG;
		}
	if ((err = barrier(c))) {
		rank_fail(c, "barrier", err);
		return EXIT_WRONG;
	}
	double t0 = bench_now_us();
	for (int it = 0; it < o->iters; it++) {
		c->t_start[it] = mono_us();
		if ((err = run_once(c, s, ip))) {
			rank_fail(c, bench_op_name(o->op), err);
			return EXIT_WRONG;
		}
		c->t_end[it] = mono_us();
	}
	*us = o->iters > 0 ? (bench_now_us() - t0) / o->iters : 0;
	if (c->trace)
		for (int it = 0; it < o->iters; it++)
			fprintf(c->trace, "%d,%" PRIu64 ",%" PRIu64 ",%zu,%d\n", it, c->t_start[it],
				c->t_end[it], s->size, ip);
	return 0;
}

/* One more run with fresh inputs, its outputs checked: the wrong elements of
 * every rank in *wrong. 0 or EXIT_WRONG. */
static int rank_check(struct rank_ctx *c, const struct pattern *pat, const struct bench_sizes *s,
		      int ip, long long *wrong)
{
	int64_t *w = (int64_t *)(c->scratch + 64);
	int err;

	fill_inputs(c, pat, s, ip);
	if ((err = run_once(c, s, ip))) {
		rank_fail(c, "check run", err);
		return EXIT_WRONG;
	}
	*w = check_outputs(c, pat, s, ip, s->size);
	if ((err = r2ccl_allreduce(c->comm, w, w, 1, R2CCL_INT64, R2CCL_SUM))) {
		rank_fail(c, "gathering the wrong counts", err);
		return EXIT_WRONG;
	}
	*wrong = *w;
	return 0;
}

/* One direction (ip: out-of-place 0, in place 1) of a step into row. */
static int rank_measure(struct rank_ctx *c, const struct pattern *pat,
			const struct bench_sizes *s, int ip, struct bench_row *row)
{
	const struct bench_opts *o = c->o;
	double us;
	int rc;

	if (o->check)
		fill_inputs(c, pat, s, ip);
	if ((rc = rank_time(c, s, ip, &us)))
		return rc;
	if (o->pct)
		rank_pct(c, ip, row);
	row->time_us[ip] = us;
	row->algbw[ip] = us > 0 ? (double)s->size / (us * 1e-6) / 1e9 : 0;
	row->busbw[ip] = row->algbw[ip] * bench_bus_factor(o->op, c->n);
	row->wrong[ip] = -1;
	if (o->check && !(o->op == BOP_SENDRECV && ip))
		return rank_check(c, pat, s, ip, &row->wrong[ip]);
	return 0;
}

/* Every size, out-of-place then in place; rank 0 prints the table. */
static int rank_run(struct rank_ctx *c, const size_t *sizes, int nsizes, struct shared_page *sh)
{
	const struct bench_opts *o = c->o;
	size_t es = bench_type_size(o->dtype);
	long long failed_checks = 0;
	double bw_sum = 0;
	int bw_count = 0, rc;
	struct pattern pat;

	bench_pattern_init(&pat, o->dtype, o->redop, c->n,
			   o->op == BOP_ALLREDUCE || o->op == BOP_REDUCESCATTER ||
				   o->op == BOP_REDUCE);
	if (c->rank == 0)
		bench_print_header(o, sh);
	for (int si = 0; si < nsizes; si++) {
		struct bench_sizes s;
		struct bench_row row = { 0 };
		bench_step_sizes(o->op, sizes[si], es, c->n, &s);
		row.size = s.size;
		row.count = s.count;
		for (int ip = 0; ip < 2; ip++) {
			if ((rc = rank_measure(c, &pat, &s, ip, &row)))
				return rc;
			if (row.wrong[ip] > 0)
				failed_checks++;
			bw_sum += row.busbw[ip];
			bw_count++;
		}
		if (c->rank == 0) {
			bench_print_row(o, &row);
			if (sh->nrows < BENCH_MAX_SIZES)
				sh->rows[sh->nrows++] = row;
		}
	}
	if (c->rank == 0)
		bench_print_summary(failed_checks, bw_sum, bw_count);
	return failed_checks ? EXIT_RANK_WRONG : 0;
}

/* Leaves the communicator (aborts it after a failure) and frees everything. */
static void rank_cleanup(struct rank_ctx *c, int rc)
{
	int err;

	if (c->trace)
		fclose(c->trace);
	free(c->t_start);
	free(c->t_end);
	if (rc && rc != EXIT_RANK_WRONG && c->comm)
		r2ccl_comm_abort(c->comm);
	else if (c->comm && (err = r2ccl_comm_destroy(c->comm)))
		rank_fail(c, "r2ccl_comm_destroy", err);
	if (c->o->gpu) {
		if (c->client && c->gsend)
			r2ccl_mem_deregister_gpu(c->client, c->gsend);
		if (c->client && c->grecv)
			r2ccl_mem_deregister_gpu(c->client, c->grecv);
		bgpu_free(c->gsend);
		bgpu_free(c->grecv);
		bgpu_close();
		free(c->sendbuf);
		free(c->recvbuf);
		c->sendbuf = c->recvbuf = NULL;
	}
	if (c->client) {
		if (c->sendbuf)
			r2ccl_mem_free(c->client, c->sendbuf);
		if (c->recvbuf)
			r2ccl_mem_free(c->client, c->recvbuf);
		if (c->scratch)
			r2ccl_mem_free(c->client, c->scratch);
		r2ccl_disconnect(c->client);
	}
}

int bench_rank_main(const struct bench_opts *o, int rank, const r2ccl_unique_id_t *uid,
		    struct shared_page *sh)
{
	struct rank_ctx c = { .o = o, .rank = rank, .n = o->nranks };
	size_t sizes[BENCH_MAX_SIZES];
	int nsizes = bench_size_list(o, sizes, BENCH_MAX_SIZES);
	int err, rc;

	rank_capacities(&c, sizes, nsizes);
	if (rank_connect(&c))
		return EXIT_WRONG;
	err = r2ccl_comm_init_rank(c.client, &c.comm, c.n, uid, rank);
	if (err) {
		rank_fail(&c, "r2ccl_comm_init_rank", err);
		rc = EXIT_WRONG;
		goto out;
	}
	rc = rank_buffers(&c);
	if (!rc)
		rc = rank_run(&c, sizes, nsizes, sh);
	if (rc && rc != EXIT_RANK_WRONG)
		goto out;
	/* Everybody done before anybody destroys: a rank's last send/recv may still
	 * be in flight on others (the daemon fails a communicator a rank left). */
	if ((err = barrier(&c))) {
		rank_fail(&c, "final barrier", err);
		rc = EXIT_WRONG;
	}
out:
	rank_cleanup(&c, rc);
	return rc;
}
