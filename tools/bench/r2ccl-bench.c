/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench: nccl-tests for R2CCL.
 *
 *   r2ccl-bench OP [nccl-tests flags] [--local-ranks K] [--nranks N --first-rank R
 *               --uid-file PATH] [--peer mpi|mpi-tcp|gloo] ...
 *
 * Process model: the bench forks K rank processes (this host's ranks
 * first_rank .. first_rank+K-1); each connects to r2ccld on its own, joins the
 * communicator and runs the sizes. The parent creates the unique id when it
 * holds rank 0 (and writes it to --uid-file for the other hosts) or waits for
 * the uid file otherwise, and passes the id to its children through one pipe
 * each. The process holding rank 0 prints the table in nccl-tests' columns;
 * after the children exit, the parent runs the peer (--peer), prints its table
 * and the ratio table, and exits non-zero if any value was wrong or any rank
 * failed. `r2ccl-bench --help` documents every flag.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "gpumem.h"
#include "r2ccl.h"

#define EXIT_WRONG 1 /* wrong values, or a rank failed */
#define EXIT_USAGE 2
#define EXIT_RANK_WRONG 4 /* a rank's status: it ran, and some values were wrong */

/* ---------------------------------------------------------------- names */

static const char *const op_names[BOP_COUNT] = {
	"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv",
};

const char *bench_op_name(enum bench_op op)
{
	return (unsigned)op < BOP_COUNT ? op_names[op] : "?";
}

static const struct {
	const char *name;
	r2ccl_dtype_t t;
} type_names[] = {
	/* the first name of each type is what the table prints (nccl-tests) */
	{ "int8", R2CCL_INT8 },       { "uint8", R2CCL_UINT8 },      { "int32", R2CCL_INT32 },
	{ "uint32", R2CCL_UINT32 },   { "int64", R2CCL_INT64 },      { "uint64", R2CCL_UINT64 },
	{ "half", R2CCL_FLOAT16 },    { "bfloat16", R2CCL_BFLOAT16 }, { "float", R2CCL_FLOAT32 },
	{ "double", R2CCL_FLOAT64 },
	/* aliases: r2ccl's names, nccl's older ones, common short forms */
	{ "char", R2CCL_INT8 },       { "int", R2CCL_INT32 },        { "uint", R2CCL_UINT32 },
	{ "float16", R2CCL_FLOAT16 }, { "fp16", R2CCL_FLOAT16 },     { "f16", R2CCL_FLOAT16 },
	{ "bf16", R2CCL_BFLOAT16 },   { "float32", R2CCL_FLOAT32 },  { "fp32", R2CCL_FLOAT32 },
	{ "f32", R2CCL_FLOAT32 },     { "float64", R2CCL_FLOAT64 },  { "fp64", R2CCL_FLOAT64 },
	{ "f64", R2CCL_FLOAT64 },
};

const char *bench_type_name(r2ccl_dtype_t t)
{
	for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
		if (type_names[i].t == t)
			return type_names[i].name;
	return "?";
}

static int parse_type(const char *s, r2ccl_dtype_t *t)
{
	for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
		if (!strcasecmp(s, type_names[i].name)) {
			*t = type_names[i].t;
			return 0;
		}
	return -1;
}

static const char *const redop_names[R2CCL_NUM_OPS] = { "sum", "prod", "min", "max", "avg" };

const char *bench_redop_name(r2ccl_redop_t op)
{
	return (unsigned)op < R2CCL_NUM_OPS ? redop_names[op] : "?";
}

bool bench_op_has_redop(enum bench_op op)
{
	return op == BOP_ALLREDUCE || op == BOP_REDUCESCATTER || op == BOP_REDUCE;
}

bool bench_op_has_root(enum bench_op op) { return op == BOP_BROADCAST || op == BOP_REDUCE; }

double bench_bus_factor(enum bench_op op, int n)
{
	switch (op) {
	case BOP_ALLREDUCE:
		return n > 0 ? 2.0 * (n - 1) / n : 0;
	case BOP_ALLGATHER:
	case BOP_REDUCESCATTER:
		return n > 0 ? (double)(n - 1) / n : 0;
	default:
		return 1.0;
	}
}

static size_t type_size(r2ccl_dtype_t t)
{
	switch (t) {
	case R2CCL_INT8:
	case R2CCL_UINT8:
		return 1;
	case R2CCL_FLOAT16:
	case R2CCL_BFLOAT16:
		return 2;
	case R2CCL_INT32:
	case R2CCL_UINT32:
	case R2CCL_FLOAT32:
		return 4;
	case R2CCL_INT64:
	case R2CCL_UINT64:
	case R2CCL_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

static bool type_is_float(r2ccl_dtype_t t)
{
	return t == R2CCL_FLOAT16 || t == R2CCL_BFLOAT16 || t == R2CCL_FLOAT32 ||
	       t == R2CCL_FLOAT64;
}

/* ------------------------------------------------------ sizes and format */

void bench_step_sizes(enum bench_op op, size_t loop_bytes, size_t es, int n,
		      struct bench_sizes *s)
{
	size_t count = loop_bytes / es;
	switch (op) {
	case BOP_ALLGATHER: /* count = per-rank send count; size = recv bytes */
		s->count = count / (size_t)n;
		s->send_bytes = s->count * es;
		s->recv_bytes = s->count * (size_t)n * es;
		break;
	case BOP_REDUCESCATTER: /* count = per-rank recv count; size = send bytes */
		s->count = count / (size_t)n;
		s->send_bytes = s->count * (size_t)n * es;
		s->recv_bytes = s->count * es;
		break;
	default:
		s->count = count;
		s->send_bytes = s->recv_bytes = count * es;
		break;
	}
	s->size = s->send_bytes > s->recv_bytes ? s->send_bytes : s->recv_bytes;
}

int bench_size_list(const struct bench_opts *o, size_t *sizes, int max)
{
	int n = 0;
	for (size_t sz = o->minbytes; sz <= o->maxbytes && n < max;) {
		sizes[n++] = sz;
		size_t next = o->stepfactor > 1 ? sz * o->stepfactor : sz + o->stepbytes;
		if (next <= sz) /* overflow, or minbytes 0 with a factor */
			break;
		sz = next;
	}
	return n;
}

void bench_format_time(char *buf, size_t len, double us)
{
	if (us >= 10000.0)
		snprintf(buf, len, "%7.0f", us);
	else if (us >= 100.0)
		snprintf(buf, len, "%7.1f", us);
	else
		snprintf(buf, len, "%7.2f", us);
}

/* "8", "64M", "1.5K", "1G", "64MB", "64MiB": binary multiples, like nccl-tests. */
static int parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || v < 0 || !isfinite(v))
		return -1;
	double mult = 1;
	switch (*end) {
	case 'k': case 'K': mult = 1024.0; end++; break;
	case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (mult > 1 && *end == 'i')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return -1;
	v *= mult;
	if (v >= 18446744073709551615.0)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (end == s || *end || errno || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

/* ------------------------------------------------- half / bfloat16 (exact) */

static uint16_t f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t e = (x >> 23) & 0xff, m = x & 0x7fffffu;
	if (e == 0xff)
		return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
	int ue = (int)e - 127 + 15;
	if (ue >= 0x1f)
		return (uint16_t)(sign | 0x7c00u);
	if (ue <= 0) {
		if (ue < -10)
			return (uint16_t)sign;
		m |= 0x800000u;
		uint32_t shift = (uint32_t)(14 - ue);
		uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
	uint32_t h = ((uint32_t)ue << 10) | (m >> 13), rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; /* may carry into the exponent: still correct (up to inf) */
	return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
	if (e == 0) {
		if (!m) {
			x = sign;
		} else {
			e = 127 - 15 + 1;
			while (!(m & 0x400u)) {
				m <<= 1;
				e--;
			}
			x = sign | (e << 23) | ((m & 0x3ffu) << 13);
		}
	} else if (e == 0x1f) {
		x = sign | 0x7f800000u | (m << 13);
	} else {
		x = sign | ((e + 127 - 15) << 23) | (m << 13);
	}
	float f;
	memcpy(&f, &x, 4);
	return f;
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h)
{
	uint32_t x = (uint32_t)h << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

/* --------------------------------------------------- element access */

static void store_i(void *buf, size_t j, r2ccl_dtype_t t, int64_t v)
{
	switch (t) {
	case R2CCL_INT8: ((int8_t *)buf)[j] = (int8_t)v; break;
	case R2CCL_UINT8: ((uint8_t *)buf)[j] = (uint8_t)v; break;
	case R2CCL_INT32: ((int32_t *)buf)[j] = (int32_t)v; break;
	case R2CCL_UINT32: ((uint32_t *)buf)[j] = (uint32_t)v; break;
	case R2CCL_INT64: ((int64_t *)buf)[j] = v; break;
	case R2CCL_UINT64: ((uint64_t *)buf)[j] = (uint64_t)v; break;
	case R2CCL_FLOAT16: ((uint16_t *)buf)[j] = f32_to_f16((float)v); break;
	case R2CCL_BFLOAT16: ((uint16_t *)buf)[j] = f32_to_bf16((float)v); break;
	case R2CCL_FLOAT32: ((float *)buf)[j] = (float)v; break;
	case R2CCL_FLOAT64: ((double *)buf)[j] = (double)v; break;
	default: break;
	}
}

static void store_d(void *buf, size_t j, r2ccl_dtype_t t, double v)
{
	switch (t) {
	case R2CCL_FLOAT16: ((uint16_t *)buf)[j] = f32_to_f16((float)v); break;
	case R2CCL_BFLOAT16: ((uint16_t *)buf)[j] = f32_to_bf16((float)v); break;
	case R2CCL_FLOAT32: ((float *)buf)[j] = (float)v; break;
	case R2CCL_FLOAT64: ((double *)buf)[j] = v; break;
	default: store_i(buf, j, t, (int64_t)v); break;
	}
}

static double load_d(const void *buf, size_t j, r2ccl_dtype_t t)
{
	switch (t) {
	case R2CCL_INT8: return ((const int8_t *)buf)[j];
	case R2CCL_UINT8: return ((const uint8_t *)buf)[j];
	case R2CCL_INT32: return ((const int32_t *)buf)[j];
	case R2CCL_UINT32: return ((const uint32_t *)buf)[j];
	case R2CCL_INT64: return (double)((const int64_t *)buf)[j];
	case R2CCL_UINT64: return (double)((const uint64_t *)buf)[j];
	case R2CCL_FLOAT16: return f16_to_f32(((const uint16_t *)buf)[j]);
	case R2CCL_BFLOAT16: return bf16_to_f32(((const uint16_t *)buf)[j]);
	case R2CCL_FLOAT32: return ((const float *)buf)[j];
	case R2CCL_FLOAT64: return ((const double *)buf)[j];
	default: return 0;
	}
}

/* ------------------------------------------------------------ data pattern
 *
 * Every input element is a small positive integer, a hash of (rank, global
 * element index g), so that every result is exact in every type whatever the
 * order of the reduction:
 *  - reductions (sum, min, max, avg): 1..M with M = min(5, L/nranks), L the
 *    largest integer every partial sum may reach exactly: int8 127, uint8 255,
 *    bfloat16 256, half 2048 (others: 5). Beyond L ranks the values are all 1
 *    and integer sums wrap as the checker expects (two's complement).
 *  - prod: 1 or 2, and 2 only on ranks 0..5 (products <= 2^6 = 64).
 *  - copies (allgather, broadcast, sendrecv): 1..101.
 * avg on floats is compared with a relative tolerance of 2 units in the last
 * place of the type (the division is the only rounding); everything else must
 * match bit for bit.
 */
struct pattern {
	r2ccl_dtype_t t;
	r2ccl_redop_t op;
	int n;
	uint32_t m; /* reduction values are 1..m */
	bool reduce;
};

static inline uint32_t mix(uint64_t g, int rank)
{
	uint32_t x = (uint32_t)(g * 2654435761u) ^ ((uint32_t)rank * 0x9E3779B9u) ^
		     (uint32_t)(g >> 32);
	x ^= x >> 15;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	return x;
}

static void pattern_init(struct pattern *p, r2ccl_dtype_t t, r2ccl_redop_t op, int n, bool reduce)
{
	uint32_t lim;
	switch (t) {
	case R2CCL_INT8: lim = 127; break;
	case R2CCL_UINT8: lim = 255; break;
	case R2CCL_BFLOAT16: lim = 256; break;
	case R2CCL_FLOAT16: lim = 2048; break;
	default: lim = 1u << 20; break;
	}
	p->t = t;
	p->op = op;
	p->n = n;
	p->reduce = reduce;
	p->m = lim / (uint32_t)n;
	if (p->m > 5)
		p->m = 5;
	if (p->m < 1)
		p->m = 1;
}

static inline int64_t in_value(const struct pattern *p, int rank, uint64_t g)
{
	uint32_t x = mix(g, rank);
	if (!p->reduce)
		return x % 101 + 1;
	if (p->op == R2CCL_PROD)
		return (rank < 6 && x % 3 == 0) ? 2 : 1;
	return x % p->m + 1;
}

/* Fills count elements of buf with rank's inputs for global indices g0.. */
static void fill(const struct pattern *p, void *buf, size_t count, int rank, uint64_t g0)
{
	for (size_t j = 0; j < count; j++)
		store_i(buf, j, p->t, in_value(p, rank, g0 + j));
}

/* The expected result of the reduction over all ranks at global index g,
 * written into out (one element of type p->t); *dv gets it as a double. */
static void expected_reduced(const struct pattern *p, uint64_t g, void *out, double *dv)
{
	int64_t acc = in_value(p, 0, g);
	for (int k = 1; k < p->n; k++) {
		int64_t v = in_value(p, k, g);
		switch (p->op) {
		case R2CCL_PROD: acc *= v; break;
		case R2CCL_MIN: acc = v < acc ? v : acc; break;
		case R2CCL_MAX: acc = v > acc ? v : acc; break;
		default: acc += v; break;
		}
	}
	if (p->op == R2CCL_AVG) {
		if (type_is_float(p->t)) {
			*dv = (double)acc / p->n;
			store_d(out, 0, p->t, *dv);
			return;
		}
		/* integer sum in the type (it may wrap), then C division */
		int64_t s;
		uint8_t tmp[8];
		store_i(tmp, 0, p->t, acc);
		s = (int64_t)load_d(tmp, 0, p->t);
		acc = s / p->n;
	}
	store_i(out, 0, p->t, acc);
	*dv = load_d(out, 0, p->t);
}

struct checker {
	const struct pattern *p;
	int rank; /* checking rank (for messages) */
	const char *what;
	long long wrong;
};

static void check_elem(struct checker *c, const void *buf, size_t j, const void *exp, double dexp)
{
	size_t es = type_size(c->p->t);
	const uint8_t *got = (const uint8_t *)buf + j * es;
	if (!memcmp(got, exp, es))
		return;
	if (c->p->reduce && c->p->op == R2CCL_AVG && type_is_float(c->p->t)) {
		double g = load_d(buf, j, c->p->t);
		double ulp = c->p->t == R2CCL_FLOAT16 ? 0x1p-10 :
			     c->p->t == R2CCL_BFLOAT16 ? 0x1p-7 :
			     c->p->t == R2CCL_FLOAT32 ? 0x1p-23 : 0x1p-52;
		if (fabs(g - dexp) <= 2 * ulp * fabs(dexp))
			return;
	}
	if (c->wrong < 3)
		fprintf(stderr, "r2ccl-bench: rank %d: %s: element %zu is %g, expected %g\n",
			c->rank, c->what, j, load_d(buf, j, c->p->t), dexp);
	c->wrong++;
}

/* Reduced values at global indices g0.. in buf[0..count). */
static void check_reduced(struct checker *c, const void *buf, size_t count, uint64_t g0)
{
	uint8_t exp[8];
	double d;
	for (size_t j = 0; j < count; j++) {
		expected_reduced(c->p, g0 + j, exp, &d);
		check_elem(c, buf, j, exp, d);
	}
}

/* Rank src's copy values at global indices g0.. in buf[0..count). */
static void check_copied(struct checker *c, const void *buf, size_t count, int src, uint64_t g0)
{
	uint8_t exp[8];
	for (size_t j = 0; j < count; j++) {
		int64_t v = in_value(c->p, src, g0 + j);
		store_i(exp, 0, c->p->t, v);
		check_elem(c, buf, j, exp, (double)v);
	}
}

/* ------------------------------------------------------------ shared page */

#define MAX_LOCAL 1024

struct shared_page {
	int nrows;
	struct bench_row rows[BENCH_MAX_SIZES];
	pid_t pids[MAX_LOCAL];
	char host[256];
};

/* ------------------------------------------------------------ rank process */

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

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

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
	size_t es = type_size(o->dtype);
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
	size_t es = type_size(o->dtype);
	int r = c->rank;
	memset(c->recvbuf, 0, s->recv_bytes > s->send_bytes ? s->recv_bytes : s->send_bytes);
	uint8_t *in = in_place ? c->recvbuf : c->sendbuf;
	switch (o->op) {
	case BOP_ALLGATHER:
		if (in_place)
			in += (size_t)r * s->count * es;
		fill(p, in, s->count, r, 0);
		break;
	case BOP_REDUCESCATTER:
		fill(p, in, s->count * (size_t)c->n, r, 0);
		break;
	case BOP_BROADCAST:
		if (r == o->root || !in_place)
			fill(p, in, s->count, r, 0);
		break;
	default:
		fill(p, in, s->count, r, 0);
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
	size_t es = type_size(o->dtype);
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
		check_reduced(&ck, rb, s->count, 0);
		break;
	case BOP_ALLGATHER:
		for (int k = 0; k < n; k++)
			check_copied(&ck, rb + (size_t)k * s->count * es, s->count, k, 0);
		break;
	case BOP_REDUCESCATTER:
		if (in_place)
			rb += (size_t)r * s->count * es;
		check_reduced(&ck, rb, s->count, (uint64_t)r * s->count);
		break;
	case BOP_BROADCAST:
		check_copied(&ck, rb, s->count, o->root, 0);
		break;
	case BOP_REDUCE:
		if (r == o->root)
			check_reduced(&ck, rb, s->count, 0);
		break;
	case BOP_SENDRECV:
		if (!in_place)
			check_copied(&ck, rb, s->count, (r - 1 + n) % n, 0);
		break;
	default:
		break;
	}
	if (ck.wrong > 3)
		fprintf(stderr, "r2ccl-bench: rank %d: %s: %lld wrong elements in all\n", r, what,
			ck.wrong);
	return ck.wrong;
}

static void print_header(const struct bench_opts *o, const struct shared_page *sh)
{
	printf("# r2ccl-bench %s (libr2ccl header %s)  op: %s\n", R2CCL_VERSION_STRING,
	       R2CCL_VERSION_STRING, bench_op_name(o->op));
	printf("# nRanks %d localRanks %d firstRank %d minBytes %zu maxBytes %zu step: ", o->nranks,
	       o->local_ranks, o->first_rank, o->minbytes, o->maxbytes);
	if (o->stepfactor > 1)
		printf("%lu(factor)", o->stepfactor);
	else
		printf("%zu(bytes)", o->stepbytes);
	printf(" warmup iters: %d iters: %d validation: %d\n", o->warmup, o->iters, o->check);
	printf("# time: rank 0's average over iters, after warmup and a barrier; GB/s = 1e9 B/s\n");
	printf("#\n# Using ranks\n");
	for (int i = 0; i < o->local_ranks; i++)
		printf("#  Rank %2d Pid %6d on %s\n", o->first_rank + i, (int)sh->pids[i], sh->host);
	if (o->nranks > o->local_ranks)
		printf("#  (ranks of other hosts not listed)\n");
	printf("#\n");
	printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
	       "", "", "", "", "");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
	       "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
	       "#wrong");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
	       "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
	       "");
	fflush(stdout);
}

static void print_row(const struct bench_opts *o, const struct bench_row *row)
{
	const char *redop = bench_op_has_redop(o->op) || o->op == BOP_SENDRECV ?
				    bench_redop_name(o->redop) : "none";
	/* nccl-tests prints the op for sendrecv although it is unused */
	printf("%12zu  %12zu  %8s  %6s  %6i", row->size, row->count, bench_type_name(o->dtype), redop,
	       bench_op_has_root(o->op) ? o->root : -1);
	for (int ip = 0; ip < 2; ip++) {
		char ts[32], ws[32];
		bench_format_time(ts, sizeof(ts), row->time_us[ip]);
		if (row->wrong[ip] < 0)
			snprintf(ws, sizeof(ws), "%5s", "N/A");
		else
			snprintf(ws, sizeof(ws), "%5lld", row->wrong[ip]);
		printf("  %7s  %6.2f  %6.2f  %5s", ts, row->algbw[ip], row->busbw[ip], ws);
	}
	printf("\n");
	fflush(stdout);
}

static int rank_main(const struct bench_opts *o, int rank, const r2ccl_unique_id_t *uid,
		     struct shared_page *sh)
{
	struct rank_ctx c = { .o = o, .rank = rank, .n = o->nranks };
	size_t sizes[BENCH_MAX_SIZES];
	int nsizes = bench_size_list(o, sizes, BENCH_MAX_SIZES);
	size_t es = type_size(o->dtype);
	int err, rc = 0;
	long long failed_checks = 0;
	double bw_sum = 0;
	int bw_count = 0;
	char name[64];

	/* buffer capacities: the largest step */
	for (int i = 0; i < nsizes; i++) {
		struct bench_sizes s;
		bench_step_sizes(o->op, sizes[i], es, c.n, &s);
		if (s.send_bytes > c.sendcap)
			c.sendcap = s.send_bytes;
		if (s.send_bytes > c.recvcap)
			c.recvcap = s.send_bytes; /* in-place reducescatter */
		if (s.recv_bytes > c.recvcap)
			c.recvcap = s.recv_bytes;
	}
	c.sendcap += 64;
	c.recvcap += 64;

	r2ccl_connect_opts_t copts = R2CCL_CONNECT_OPTS_INITIALIZER;
	copts.socket_path = o->socket_path;
	copts.timeout_ms = o->timeout_ms;
	snprintf(name, sizeof(name), "r2ccl-bench rank %d", rank);
	copts.client_name = name;
	err = r2ccl_connect(&copts, &c.client);
	if (err) {
		const char *path = o->socket_path ? o->socket_path : getenv("R2CCL_SOCKET");
		fprintf(stderr, "r2ccl-bench: rank %d: cannot connect to r2ccld at %s: %s\n", rank,
			path ? path : R2CCL_DEFAULT_SOCKET, r2ccl_strerror(err));
		return EXIT_WRONG;
	}
	err = r2ccl_comm_init_rank(c.client, &c.comm, c.n, uid, rank);
	if (err) {
		rank_fail(&c, "r2ccl_comm_init_rank", err);
		rc = EXIT_WRONG;
		goto out;
	}
	if (o->gpu) {
		char msg[160];
		int ord;
		if (bgpu_open(o->gpu_dev >= 0 ? o->gpu_dev : rank - o->first_rank, &ord, msg,
			      sizeof(msg))) {
			fprintf(stderr, "r2ccl-bench: rank %d: --gpu: %s\n", rank, msg);
			rc = EXIT_WRONG;
			goto out;
		}
		if (!(c.sendbuf = malloc(c.sendcap)) || !(c.recvbuf = malloc(c.recvcap)) ||
		    bgpu_alloc((void **)&c.gsend, c.sendcap) ||
		    bgpu_alloc((void **)&c.grecv, c.recvcap)) {
			fprintf(stderr, "r2ccl-bench: rank %d: out of host or GPU %d memory\n", rank,
				ord);
			rc = EXIT_WRONG;
			goto out;
		}
		if ((err = r2ccl_mem_register_gpu(c.client, c.gsend, c.sendcap)) ||
		    (err = r2ccl_mem_register_gpu(c.client, c.grecv, c.recvcap))) {
			rank_fail(&c, "r2ccl_mem_register_gpu", err);
			rc = EXIT_WRONG;
			goto out;
		}
		c.stream = bgpu_stream();
		if (rank == 0)
			printf("# GPU buffers on GPU %d (rank 0), stream-ordered calls\n", ord);
	} else if ((err = r2ccl_mem_alloc(c.client, c.sendcap, (void **)&c.sendbuf)) ||
		   (err = r2ccl_mem_alloc(c.client, c.recvcap, (void **)&c.recvbuf))) {
		rank_fail(&c, "r2ccl_mem_alloc", err);
		rc = EXIT_WRONG;
		goto out;
	}
	if ((err = r2ccl_mem_alloc(c.client, 4096, (void **)&c.scratch))) {
		rank_fail(&c, "r2ccl_mem_alloc", err);
		rc = EXIT_WRONG;
		goto out;
	}
	c.t_start = calloc((size_t)o->iters + 1, sizeof(uint64_t));
	c.t_end = calloc((size_t)o->iters + 1, sizeof(uint64_t));
	if (!c.t_start || !c.t_end) {
		rc = EXIT_WRONG;
		goto out;
	}
	if (o->trace_file && (rank == 0 || o->trace_all)) {
		char path[PATH_MAX];
		if (o->trace_all)
			snprintf(path, sizeof(path), "%s.%d", o->trace_file, rank);
		else
			snprintf(path, sizeof(path), "%s", o->trace_file);
		c.trace = fopen(path, "w");
		if (!c.trace) {
			fprintf(stderr, "r2ccl-bench: rank %d: cannot open %s: %s\n", rank, path,
				strerror(errno));
			rc = EXIT_WRONG;
			goto out;
		}
		fprintf(c.trace, "iteration,start_us,end_us,size,in_place\n");
	}

	struct pattern pat;
	pattern_init(&pat, o->dtype, o->redop, c.n,
		     o->op == BOP_ALLREDUCE || o->op == BOP_REDUCESCATTER || o->op == BOP_REDUCE);

	if (rank == 0)
		print_header(o, sh);

	for (int si = 0; si < nsizes; si++) {
		struct bench_sizes s;
		struct bench_row row = { 0 };
		bench_step_sizes(o->op, sizes[si], es, c.n, &s);
		row.size = s.size;
		row.count = s.count;
		for (int ip = 0; ip < 2; ip++) {
			if (o->check)
				fill_inputs(&c, &pat, &s, ip);
			for (int w = 0; w < o->warmup; w++)
				if ((err = run_once(&c, &s, ip))) {
					rank_fail(&c, "warm-up", err);
					rc = EXIT_WRONG;
					goto out;
				}
			if ((err = barrier(&c))) {
				rank_fail(&c, "barrier", err);
				rc = EXIT_WRONG;
				goto out;
			}
			double t0 = now_us();
			for (int it = 0; it < o->iters; it++) {
				struct timespec ts;
				clock_gettime(CLOCK_MONOTONIC, &ts);
				c.t_start[it] = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
				if ((err = run_once(&c, &s, ip))) {
					rank_fail(&c, bench_op_name(o->op), err);
					rc = EXIT_WRONG;
					goto out;
				}
				clock_gettime(CLOCK_MONOTONIC, &ts);
				c.t_end[it] = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
			}
			double us = o->iters > 0 ? (now_us() - t0) / o->iters : 0;
			if (c.trace)
				for (int it = 0; it < o->iters; it++)
					fprintf(c.trace, "%d,%" PRIu64 ",%" PRIu64 ",%zu,%d\n", it,
						c.t_start[it], c.t_end[it], s.size, ip);
			row.time_us[ip] = us;
			row.algbw[ip] = us > 0 ? (double)s.size / (us * 1e-6) / 1e9 : 0;
			row.busbw[ip] = row.algbw[ip] * bench_bus_factor(o->op, c.n);
			row.wrong[ip] = -1;
			if (o->check && !(o->op == BOP_SENDRECV && ip)) {
				fill_inputs(&c, &pat, &s, ip);
				if ((err = run_once(&c, &s, ip))) {
					rank_fail(&c, "check run", err);
					rc = EXIT_WRONG;
					goto out;
				}
				int64_t *w = (int64_t *)(c.scratch + 64);
				*w = check_outputs(&c, &pat, &s, ip, s.size);
				if ((err = r2ccl_allreduce(c.comm, w, w, 1, R2CCL_INT64, R2CCL_SUM))) {
					rank_fail(&c, "gathering the wrong counts", err);
					rc = EXIT_WRONG;
					goto out;
				}
				row.wrong[ip] = *w;
				if (*w)
					failed_checks++;
			}
			bw_sum += row.busbw[ip];
			bw_count++;
		}
		if (rank == 0) {
			print_row(o, &row);
			if (sh->nrows < BENCH_MAX_SIZES)
				sh->rows[sh->nrows++] = row;
		}
	}
	if (rank == 0) {
		printf("# %-20s : %lld %s\n", "Out of bounds values", failed_checks,
		       failed_checks ? "FAILED" : "OK");
		printf("# %-20s : %g \n", "Avg bus bandwidth", bw_count ? bw_sum / bw_count : 0.0);
		printf("#\n");
		fflush(stdout);
	}
	if (failed_checks)
		rc = EXIT_RANK_WRONG;
	/* Everybody done before anybody destroys: a rank's last send/recv may still
	 * be in flight on others (the daemon fails a communicator a rank left). */
	if ((err = barrier(&c))) {
		rank_fail(&c, "final barrier", err);
		rc = EXIT_WRONG;
	}
out:
	if (c.trace)
		fclose(c.trace);
	free(c.t_start);
	free(c.t_end);
	if (rc && rc != EXIT_RANK_WRONG && c.comm)
		r2ccl_comm_abort(c.comm);
	else if (c.comm && (err = r2ccl_comm_destroy(c.comm)))
		rank_fail(&c, "r2ccl_comm_destroy", err);
	if (o->gpu) {
		if (c.client && c.gsend)
			r2ccl_mem_deregister_gpu(c.client, c.gsend);
		if (c.client && c.grecv)
			r2ccl_mem_deregister_gpu(c.client, c.grecv);
		bgpu_free(c.gsend);
		bgpu_free(c.grecv);
		bgpu_close();
		free(c.sendbuf);
		free(c.recvbuf);
		c.sendbuf = c.recvbuf = NULL;
	}
	if (c.client) {
		if (c.sendbuf)
			r2ccl_mem_free(c.client, c.sendbuf);
		if (c.recvbuf)
			r2ccl_mem_free(c.client, c.recvbuf);
		if (c.scratch)
			r2ccl_mem_free(c.client, c.scratch);
		r2ccl_disconnect(c.client);
	}
	return rc;
}

/* ----------------------------------------------------------- unique id */

static void uid_to_hex(const r2ccl_unique_id_t *id, char *hex)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = (const unsigned char *)id->internal;
	for (int i = 0; i < R2CCL_UNIQUE_ID_BYTES; i++) {
		hex[2 * i] = digits[b[i] >> 4];
		hex[2 * i + 1] = digits[b[i] & 15];
	}
	hex[2 * R2CCL_UNIQUE_ID_BYTES] = 0;
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static int uid_from_hex(const char *hex, r2ccl_unique_id_t *id)
{
	for (int i = 0; i < R2CCL_UNIQUE_ID_BYTES; i++) {
		int hi = hexval(hex[2 * i]), lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		id->internal[i] = (char)(hi << 4 | lo);
	}
	return 0;
}

/* Writes the id as one line of hex to path, atomically (temp file + rename). */
static int uid_write(const char *path, const r2ccl_unique_id_t *id)
{
	char tmp[PATH_MAX], hex[2 * R2CCL_UNIQUE_ID_BYTES + 1];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	uid_to_hex(id, hex);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%s\n", hex);
	if (fflush(f) || fsync(fileno(f))) {
		int e = -errno;
		fclose(f);
		unlink(tmp);
		return e;
	}
	fclose(f);
	if (rename(tmp, path)) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	return 0;
}

/* Waits up to timeout_s for path to hold an id. */
static int uid_wait(const char *path, double timeout_s, r2ccl_unique_id_t *id)
{
	double deadline = now_us() + timeout_s * 1e6;
	for (;;) {
		FILE *f = fopen(path, "r");
		if (f) {
			char line[2 * R2CCL_UNIQUE_ID_BYTES + 8] = { 0 };
			bool ok = fgets(line, sizeof(line), f) && strlen(line) >= 2 * R2CCL_UNIQUE_ID_BYTES &&
				  !uid_from_hex(line, id);
			fclose(f);
			if (ok)
				return 0;
		} else if (errno != ENOENT) {
			return -errno;
		}
		if (now_us() > deadline)
			return -ETIMEDOUT;
		usleep(50 * 1000);
	}
}

/* ----------------------------------------------------------------- usage */

static void usage(FILE *f)
{
	fprintf(f,
"usage: r2ccl-bench OP [options]\n"
"  OP: allreduce allgather reducescatter broadcast reduce sendrecv\n"
"nccl-tests flags (sizes take K/M/G suffixes, binary):\n"
"  -b, --minbytes N       smallest size (default 8)\n"
"  -e, --maxbytes N       largest size (default 64M)\n"
"  -f, --stepfactor F     multiply the size by F each step (default 2)\n"
"  -i, --stepbytes N      add N each step when F is 1 (default 1M)\n"
"  -n, --iters N          timed iterations per size (default 20)\n"
"  -w, --warmup_iters N   warm-up iterations per size (default 5)\n"
"  -c, --check 0|1        check every result element on every rank (default 1)\n"
"  -d, --datatype T       int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double\n"
"                         (also float16 float32 float64 bf16 char int); default float\n"
"  -o, --op OP            sum prod min max avg (default sum)\n"
"  -r, --root R           root of broadcast and reduce (default 0)\n"
"ranks:\n"
"  --local-ranks K        K rank processes on this host (default 1, or N without --uid-file)\n"
"  --nranks N             ranks in the communicator, all hosts (default K)\n"
"  --first-rank R         this host's ranks are R..R+K-1 (default 0)\n"
"  --uid-file PATH        several hosts: the host with rank 0 writes the unique id to PATH\n"
"                         (temp file + rename), the others wait for it; use a fresh path\n"
"                         (rank 0's host removes it at a successful end)\n"
"  --uid-timeout S        how long to wait for the uid file (default 60)\n"
"  --socket PATH          r2ccld's socket (default $R2CCL_SOCKET, else %s)\n"
"  --connect-timeout MS   r2ccl_connect timeout (default: the library's)\n"
"output:\n"
"  --trace FILE           rank 0 writes one CSV line per timed iteration:\n"
"                         iteration,start_us,end_us,size,in_place (CLOCK_MONOTONIC us)\n"
"  --trace-all            every rank writes FILE.<rank> instead\n"
"peers (run on the same sizes after R2CCL, then a ratio table r2ccl/peer busbw):\n"
"  --peer mpi|mpi-tcp|gloo  OpenMPI shared memory, OpenMPI tcp btl, Gloo over TCP\n"
"  --peer-addr ADDR       Gloo: this host's address (default 127.0.0.1)\n"
"  --peer-store DIR       Gloo: rendezvous directory shared by all hosts (default: a temp\n"
"                         directory; with --uid-file, one next to the uid file)\n"
"  --peer-timeout S       kill the peer run after S seconds (default 600)\n"
"  --gpu[=D]              GPU buffers (cuMemAlloc, registered with r2ccl_mem_register_gpu),\n"
"                         stream-ordered calls, the stream synchronized after each; GPU D,\n"
"                         else local rank index, modulo the GPU count\n"
"  --calibrate FILE       sendrecv between 2 ranks (2 hosts): fit the planner's cost model\n"
"                         T = alpha + size/bw to the one-way times, print it, write\n"
"                         cost_alpha_us for r2ccld's configuration to FILE\n"
"The table has nccl-tests' columns; time is rank 0's average in us; algbw = size/time and\n"
"busbw = algbw * (allreduce 2(n-1)/n, allgather/reducescatter (n-1)/n, others 1), in GB/s\n"
"(1e9 B/s). '# Out of bounds values' counts the results with wrong elements. Exit status:\n"
"0 ok, 1 wrong values or a failed rank, 2 usage.\n",
		R2CCL_DEFAULT_SOCKET);
}

enum {
	OPT_LOCAL_RANKS = 1000,
	OPT_NRANKS,
	OPT_FIRST_RANK,
	OPT_UID_FILE,
	OPT_UID_TIMEOUT,
	OPT_TRACE,
	OPT_TRACE_ALL,
	OPT_SOCKET,
	OPT_PEER,
	OPT_PEER_ADDR,
	OPT_PEER_STORE,
	OPT_PEER_TIMEOUT,
	OPT_GPU,
	OPT_CALIBRATE,
	OPT_CONNECT_TIMEOUT,
};

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longopts[] = {
		{ "minbytes", required_argument, 0, 'b' },
		{ "maxbytes", required_argument, 0, 'e' },
		{ "stepbytes", required_argument, 0, 'i' },
		{ "stepfactor", required_argument, 0, 'f' },
		{ "iters", required_argument, 0, 'n' },
		{ "warmup_iters", required_argument, 0, 'w' },
		{ "check", required_argument, 0, 'c' },
		{ "datatype", required_argument, 0, 'd' },
		{ "op", required_argument, 0, 'o' },
		{ "root", required_argument, 0, 'r' },
		{ "local-ranks", required_argument, 0, OPT_LOCAL_RANKS },
		{ "nranks", required_argument, 0, OPT_NRANKS },
		{ "first-rank", required_argument, 0, OPT_FIRST_RANK },
		{ "uid-file", required_argument, 0, OPT_UID_FILE },
		{ "uid-timeout", required_argument, 0, OPT_UID_TIMEOUT },
		{ "trace", required_argument, 0, OPT_TRACE },
		{ "trace-all", no_argument, 0, OPT_TRACE_ALL },
		{ "socket", required_argument, 0, OPT_SOCKET },
		{ "connect-timeout", required_argument, 0, OPT_CONNECT_TIMEOUT },
		{ "peer", required_argument, 0, OPT_PEER },
		{ "peer-addr", required_argument, 0, OPT_PEER_ADDR },
		{ "peer-store", required_argument, 0, OPT_PEER_STORE },
		{ "peer-timeout", required_argument, 0, OPT_PEER_TIMEOUT },
		{ "gpu", optional_argument, 0, OPT_GPU },
		{ "calibrate", required_argument, 0, OPT_CALIBRATE },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	long v;
	double d;
	int c, have_k = 0, have_n = 0;

	*o = (struct bench_opts){
		.op = BOP_COUNT,
		.minbytes = 8,
		.maxbytes = 64u << 20,
		.stepbytes = 1u << 20,
		.stepfactor = 2,
		.iters = 20,
		.warmup = 5,
		.check = 1,
		.dtype = R2CCL_FLOAT32,
		.redop = R2CCL_SUM,
		.root = 0,
		.local_ranks = 1,
		.nranks = 1,
		.first_rank = 0,
		.uid_timeout_s = 60,
		.peer_timeout_s = 600,
	};
#define BAD(...)                                                   \
	do {                                                       \
		fprintf(stderr, "r2ccl-bench: " __VA_ARGS__);      \
		fprintf(stderr, " (r2ccl-bench --help)\n");        \
		return -1;                                         \
	} while (0)

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":b:e:i:f:n:w:c:d:o:r:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (parse_size(optarg, &o->minbytes))
				BAD("invalid size for -b: '%s'", optarg);
			break;
		case 'e':
			if (parse_size(optarg, &o->maxbytes))
				BAD("invalid size for -e: '%s'", optarg);
			break;
		case 'i':
			if (parse_size(optarg, &o->stepbytes) || !o->stepbytes)
				BAD("invalid size for -i: '%s'", optarg);
			break;
		case 'f':
			if (parse_int(optarg, 1, 1 << 20, &v))
				BAD("invalid step factor '%s'", optarg);
			o->stepfactor = (unsigned long)v;
			break;
		case 'n':
			if (parse_int(optarg, 1, 100000000, &v))
				BAD("invalid iteration count '%s'", optarg);
			o->iters = (int)v;
			break;
		case 'w':
			if (parse_int(optarg, 0, 100000000, &v))
				BAD("invalid warm-up count '%s'", optarg);
			o->warmup = (int)v;
			break;
		case 'c':
			if (parse_int(optarg, 0, 1000, &v))
				BAD("invalid value for -c: '%s'", optarg);
			o->check = v > 0;
			break;
		case 'd':
			if (parse_type(optarg, &o->dtype))
				BAD("unknown data type '%s'", optarg);
			break;
		case 'o': {
			int k;
			for (k = 0; k < R2CCL_NUM_OPS; k++)
				if (!strcasecmp(optarg, redop_names[k]))
					break;
			if (k == R2CCL_NUM_OPS)
				BAD("unknown reduction '%s'", optarg);
			o->redop = (r2ccl_redop_t)k;
			break;
		}
		case 'r':
			if (parse_int(optarg, 0, INT_MAX, &v))
				BAD("invalid root '%s'", optarg);
			o->root = (int)v;
			break;
		case OPT_LOCAL_RANKS:
			if (parse_int(optarg, 1, MAX_LOCAL, &v))
				BAD("invalid --local-ranks '%s' (1..%d)", optarg, MAX_LOCAL);
			o->local_ranks = (int)v;
			have_k = 1;
			break;
		case OPT_NRANKS:
			if (parse_int(optarg, 1, 1 << 20, &v))
				BAD("invalid --nranks '%s'", optarg);
			o->nranks = (int)v;
			have_n = 1;
			break;
		case OPT_FIRST_RANK:
			if (parse_int(optarg, 0, 1 << 20, &v))
				BAD("invalid --first-rank '%s'", optarg);
			o->first_rank = (int)v;
			break;
		case OPT_UID_FILE:
			o->uid_file = optarg;
			break;
		case OPT_UID_TIMEOUT:
			if (parse_double(optarg, 0, 1e7, &d))
				BAD("invalid --uid-timeout '%s'", optarg);
			o->uid_timeout_s = d;
			break;
		case OPT_TRACE:
			o->trace_file = optarg;
			break;
		case OPT_TRACE_ALL:
			o->trace_all = true;
			break;
		case OPT_SOCKET:
			o->socket_path = optarg;
			break;
		case OPT_CONNECT_TIMEOUT:
			if (parse_int(optarg, 1, INT_MAX, &v))
				BAD("invalid --connect-timeout '%s'", optarg);
			o->timeout_ms = (int)v;
			break;
		case OPT_PEER:
			if (strcmp(optarg, "mpi") && strcmp(optarg, "mpi-tcp") && strcmp(optarg, "gloo"))
				BAD("unknown peer '%s' (mpi, mpi-tcp, gloo)", optarg);
			o->peer = optarg;
			break;
		case OPT_PEER_ADDR:
			o->peer_addr = optarg;
			break;
		case OPT_PEER_STORE:
			o->peer_store = optarg;
			break;
		case OPT_PEER_TIMEOUT:
			if (parse_double(optarg, 1, 1e7, &d))
				BAD("invalid --peer-timeout '%s'", optarg);
			o->peer_timeout_s = d;
			break;
		case OPT_CALIBRATE:
			o->calibrate_file = optarg;
			break;
		case OPT_GPU:
			o->gpu = true;
			o->gpu_dev = -1;
			if (optarg && parse_int(optarg, 0, 1023, &v))
				BAD("invalid --gpu device '%s'", optarg);
			if (optarg)
				o->gpu_dev = (int)v;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case ':':
			BAD("option %s needs a value", argv[optind - 1]);
		default:
			BAD("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		BAD("missing OP");
	if (optind + 1 < argc)
		BAD("unexpected argument '%s'", argv[optind + 1]);
	for (int k = 0; k < BOP_COUNT; k++)
		if (!strcasecmp(argv[optind], op_names[k]))
			o->op = (enum bench_op)k;
	if (o->op == BOP_COUNT)
		BAD("unknown OP '%s'", argv[optind]);

	if (!have_k && have_n && !o->uid_file)
		o->local_ranks = o->nranks;
	if (!have_n)
		o->nranks = o->first_rank + o->local_ranks;
	if (o->first_rank + o->local_ranks > o->nranks)
		BAD("ranks %d..%d do not fit in --nranks %d", o->first_rank,
		    o->first_rank + o->local_ranks - 1, o->nranks);
	if (o->local_ranks < o->nranks && !o->uid_file)
		BAD("%d of %d ranks on this host: the other hosts need --uid-file", o->local_ranks,
		    o->nranks);
	if (o->minbytes > o->maxbytes)
		BAD("-b %zu is larger than -e %zu", o->minbytes, o->maxbytes);
	if (bench_op_has_root(o->op) && o->root >= o->nranks)
		BAD("root %d is not a rank of %d", o->root, o->nranks);
	if (o->op == BOP_SENDRECV && o->nranks < 2)
		BAD("sendrecv needs at least 2 ranks (send and recv are blocking)");
	if (o->peer && !strncmp(o->peer, "mpi", 3) && o->nranks != o->local_ranks)
		BAD("--peer %s runs on one host only (mpirun -np K)", o->peer);
	if (o->calibrate_file && (o->op != BOP_SENDRECV || o->nranks != 2))
		BAD("--calibrate times the sendrecv ping-pong of exactly 2 ranks (sendrecv --nranks 2)");
	if (!o->peer_addr)
		o->peer_addr = "127.0.0.1";
	return 0;
#undef BAD
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
	struct bench_opts o;
	if (parse_args(argc, argv, &o))
		return EXIT_USAGE;
	setvbuf(stdout, NULL, _IOLBF, 0);

	int k = o.local_ranks;
	struct shared_page *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("r2ccl-bench: mmap");
		return EXIT_WRONG;
	}
	memset(sh, 0, sizeof(*sh));
	gethostname(sh->host, sizeof(sh->host) - 1);

	/* Fork the ranks first, so they do not inherit the parent's session. */
	int *wfd = calloc((size_t)k, sizeof(int));
	pid_t *pids = calloc((size_t)k, sizeof(pid_t));
	if (!wfd || !pids)
		return EXIT_WRONG;
	fflush(NULL);
	for (int i = 0; i < k; i++) {
		int p[2];
		if (pipe(p)) {
			perror("r2ccl-bench: pipe");
			return EXIT_WRONG;
		}
		pid_t pid = fork();
		if (pid < 0) {
			perror("r2ccl-bench: fork");
			return EXIT_WRONG;
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(p[1]);
			for (int j = 0; j < i; j++)
				close(wfd[j]);
			r2ccl_unique_id_t id;
			size_t got = 0;
			while (got < sizeof(id)) {
				ssize_t r = read(p[0], (char *)&id + got, sizeof(id) - got);
				if (r < 0 && errno == EINTR)
					continue;
				if (r <= 0)
					_exit(EXIT_WRONG); /* the parent failed; it says why */
				got += (size_t)r;
			}
			close(p[0]);
			_exit(rank_main(&o, o.first_rank + i, &id, sh));
		}
		close(p[0]);
		wfd[i] = p[1];
		pids[i] = pid;
		sh->pids[i] = pid;
	}
	signal(SIGPIPE, SIG_IGN);

	/* The unique id. */
	r2ccl_unique_id_t id;
	r2ccl_client_t *client = NULL;
	int err, rc = 0;
	char uid_hex[2 * R2CCL_UNIQUE_ID_BYTES + 1] = "";
	if (o.first_rank == 0) {
		r2ccl_connect_opts_t copts = R2CCL_CONNECT_OPTS_INITIALIZER;
		copts.socket_path = o.socket_path;
		copts.timeout_ms = o.timeout_ms;
		copts.client_name = "r2ccl-bench";
		err = r2ccl_connect(&copts, &client);
		if (err) {
			const char *path = o.socket_path ? o.socket_path : getenv("R2CCL_SOCKET");
			fprintf(stderr, "r2ccl-bench: cannot connect to r2ccld at %s: %s\n",
				path ? path : R2CCL_DEFAULT_SOCKET, r2ccl_strerror(err));
			rc = EXIT_WRONG;
		} else if ((err = r2ccl_get_unique_id(client, &id))) {
			fprintf(stderr, "r2ccl-bench: r2ccl_get_unique_id: %s\n", r2ccl_strerror(err));
			rc = EXIT_WRONG;
		} else if (o.uid_file && (err = uid_write(o.uid_file, &id))) {
			fprintf(stderr, "r2ccl-bench: cannot write %s: %s\n", o.uid_file, strerror(-err));
			rc = EXIT_WRONG;
		}
	} else {
		err = uid_wait(o.uid_file, o.uid_timeout_s, &id);
		if (err == -ETIMEDOUT) {
			fprintf(stderr,
				"r2ccl-bench: no unique id in %s after %g s (is the host with rank 0 running?)\n",
				o.uid_file, o.uid_timeout_s);
			rc = EXIT_WRONG;
		} else if (err) {
			fprintf(stderr, "r2ccl-bench: cannot read %s: %s\n", o.uid_file, strerror(-err));
			rc = EXIT_WRONG;
		}
	}
	if (!rc)
		uid_to_hex(&id, uid_hex);
	for (int i = 0; i < k; i++) {
		if (!rc && write(wfd[i], &id, sizeof(id)) != (ssize_t)sizeof(id))
			fprintf(stderr, "r2ccl-bench: rank %d did not take its id\n", o.first_rank + i);
		close(wfd[i]); /* on failure: EOF, the child exits */
	}

	/* Wait for the ranks; once one fails, give the others 30 s to notice. */
	int left = k, failed = 0;
	double kill_at = 0;
	while (left > 0) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0) {
			for (int i = 0; i < k; i++)
				if (pids[i] == pid) {
					pids[i] = 0;
					left--;
					int bad = !WIFEXITED(st) || WEXITSTATUS(st);
					if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_RANK_WRONG) {
						rc = EXIT_WRONG; /* the table says it */
						continue;
					}
					if (bad && !rc) /* rc: the parent already said why */
						fprintf(stderr, "r2ccl-bench: rank %d %s %d\n", o.first_rank + i,
							WIFEXITED(st) ? "exited with status" : "killed by signal",
							WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
					if (bad && !failed) {
						failed = 1;
						kill_at = now_us() + 30e6;
					}
				}
			continue;
		}
		if (pid < 0 && errno != EINTR)
			break;
		if (failed && now_us() > kill_at) {
			for (int i = 0; i < k; i++)
				if (pids[i] > 0) {
					fprintf(stderr, "r2ccl-bench: killing rank %d\n", o.first_rank + i);
					kill(pids[i], SIGKILL);
				}
			kill_at = now_us() + 3600e6;
		}
		usleep(20 * 1000);
	}
	if (failed)
		rc = EXIT_WRONG;
	r2ccl_disconnect(client);
	if (o.first_rank == 0 && o.uid_file && !rc)
		unlink(o.uid_file); /* every rank joined: nobody needs it any more */

	if (o.calibrate_file && o.first_rank == 0 && !rc && bench_calibrate(&o, sh->rows, sh->nrows))
		rc = EXIT_WRONG;
	if (o.peer && uid_hex[0]) {
		size_t sizes[BENCH_MAX_SIZES];
		int nsizes = bench_size_list(&o, sizes, BENCH_MAX_SIZES);
		struct peer_row prow[BENCH_MAX_SIZES];
		char desc[256];
		int np = peer_run(&o, sizes, nsizes, uid_hex, prow, BENCH_MAX_SIZES, desc, sizeof(desc));
		if (np < 0) {
			fprintf(stderr, "r2ccl-bench: peer %s failed: %s\n", o.peer, desc);
			rc = EXIT_WRONG;
		} else if (o.first_rank == 0) {
			peer_print(&o, desc, prow, np, sh->rows, sh->nrows);
		}
	}
	free(wfd);
	free(pids);
	return rc;
}
