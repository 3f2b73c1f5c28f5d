/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench's vocabulary: the operations, types and reductions by name,
 * each step's sizes as nccl-tests computes them, the time format, the clock.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "bench.h"

/* ---------------------------------------------------------------- names */

static const char *const op_names[BOP_COUNT] = {
	"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv",
};

enum bench_op bench_parse_op(const char *s)
{
	for (int k = 0; k < BOP_COUNT; k++)
		if (!strcasecmp(s, op_names[k]))
			return (enum bench_op)k;
	return BOP_COUNT;
}

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

int bench_parse_type(const char *s, r2ccl_dtype_t *t)
{
	for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
		if (!strcasecmp(s, type_names[i].name)) {
			*t = type_names[i].t;
			return 0;
		}
	return -1;
}

static const char *const redop_names[R2CCL_NUM_OPS] = { "sum", "prod", "min", "max", "avg" };

int bench_parse_redop(const char *s, r2ccl_redop_t *op)
{
	for (int k = 0; k < R2CCL_NUM_OPS; k++)
		if (!strcasecmp(s, redop_names[k])) {
			*op = (r2ccl_redop_t)k;
			return 0;
		}
	return -1;
}

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

size_t bench_type_size(r2ccl_dtype_t t)
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

bool bench_type_is_float(r2ccl_dtype_t t)
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

double bench_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}
