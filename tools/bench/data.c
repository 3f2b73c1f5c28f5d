/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench's data: the inputs every rank writes (a pattern whose every
 * result is exact in every type) and the checker of the outputs.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

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

/* ------------------------------------------------------------ data pattern */

static inline uint32_t mix(uint64_t g, int rank)
{
	uint32_t x = (uint32_t)(g * 2654435761u) ^ ((uint32_t)rank * 0x9E3779B9u) ^
		     (uint32_t)(g >> 32);
	x ^= x >> 15;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	return x;
}

void bench_pattern_init(struct pattern *p, r2ccl_dtype_t t, r2ccl_redop_t op, int n, bool reduce)
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
void bench_fill(const struct pattern *p, void *buf, size_t count, int rank, uint64_t g0)
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
		if (bench_type_is_float(p->t)) {
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

static void check_elem(struct checker *c, const void *buf, size_t j, const void *exp, double dexp)
{
	size_t es = bench_type_size(c->p->t);
	const uint8_t *got = (const uint8_t *)buf + j * es;
	if (!memcmp(got, exp, es))
		return;
	if (c->p->reduce && c->p->op == R2CCL_AVG && bench_type_is_float(c->p->t)) {
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
void bench_check_reduced(struct checker *c, const void *buf, size_t count, uint64_t g0)
{
	uint8_t exp[8];
	double d;
	for (size_t j = 0; j < count; j++) {
		expected_reduced(c->p, g0 + j, exp, &d);
		check_elem(c, buf, j, exp, d);
	}
}

/* Rank src's copy values at global indices g0.. in buf[0..count). */
void bench_check_copied(struct checker *c, const void *buf, size_t count, int src, uint64_t g0)
{
	uint8_t exp[8];
	for (size_t j = 0; j < count; j++) {
		int64_t v = in_value(c->p, src, g0 + j);
		store_i(exp, 0, c->p->t, v);
		check_elem(c, buf, j, exp, (double)v);
	}
}
