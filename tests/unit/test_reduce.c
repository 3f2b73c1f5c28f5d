/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/reduce.c, against an independent scalar reference.
 *
 *   test_reduce          run the suite (Check, fork mode)
 *   test_reduce --bench  print float32 sum throughput (4 and 2 inputs, 16 MB)
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h"

/* ------------------------------------------------------------------------ */
/* Independent reference conversions (integer arithmetic, explicit RNE)      */
/* ------------------------------------------------------------------------ */

static uint32_t fbits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bitsf(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static float ref_h2f(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float s = (h & 0x8000) ? -1.0f : 1.0f;
	if (e == 0x1f) return m ? NAN : s * INFINITY;
	if (e == 0) return s * ldexpf((float)m, -24);
	return s * ldexpf((float)(m | 0x400), e - 25);
}

/* Round the magnitude bits (value = mant * 2^shift, mant has 24 bits)
 * to a half, nearest even, by integer arithmetic. */
static uint16_t ref_f2h(float f)
{
	uint32_t u = fbits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
	if (e == 0xff) return sign | (m ? 0x7e00 : 0x7c00);
	if (e == 0 && m == 0) return sign;
	/* value = M * 2^(E), M integer */
	uint64_t M = e ? (m | 0x800000u) : m;
	int E = e ? (int)e - 150 : -149;
	/* target: half units of 2^-24 (denormal step); normal halves need their
	 * own step 2^(exp-10). Find the half exponent first. */
	int top = 63 - __builtin_clzll(M) + E; /* floor(log2(value)) */
	int step = top < -14 ? -24 : top - 10; /* log2 of the half ulp here */
	int sh = step - E;                     /* bits to drop */
	uint64_t q;
	if (sh <= 0) {
		q = M << -sh;
	} else if (sh >= 64) {
		q = 0;
	} else {
		q = M >> sh;
		uint64_t rem = M & ((1ull << sh) - 1), half = 1ull << (sh - 1);
		if (rem > half || (rem == half && (q & 1))) q++;
	}
	/* q is in units of 2^step; encode */
	if (step == -24) { /* denormal range (q may carry into the first normal) */
		return sign | (uint16_t)q; /* q <= 0x400 encodes 2^-14 correctly */
	}
	int hexp = step + 10 + 15; /* biased exponent for q in [1024, 2048] */
	if (q == 2048) {
		q = 1024;
		hexp++;
	}
	if (hexp >= 31) return sign | 0x7c00;
	return sign | (uint16_t)(hexp << 10) | (uint16_t)(q & 0x3ff);
}

static float ref_b2f(uint16_t h)
{
	return bitsf((uint32_t)h << 16);
}

static uint16_t ref_f2b(float f)
{
	if (isnan(f)) return 0x7fc0 | (uint16_t)((fbits(f) >> 16) & 0x8000);
	uint32_t u = fbits(f);
	uint32_t lo = u & 0xffff, hi = u >> 16;
	if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) hi++;
	return (uint16_t)hi;
}

/* ------------------------------------------------------------------------ */
/* Reference reduction, value by value                                       */
/* ------------------------------------------------------------------------ */

static const size_t dsize[R2CCL_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };
static const char *dname[R2CCL_NUM_DTYPES] = { "int8", "uint8", "int32", "uint32", "int64",
					       "uint64", "f16", "bf16", "f32", "f64" };
static const char *oname[R2CCL_NUM_OPS] = { "sum", "prod", "min", "max", "avg" };

static int is_int(r2ccl_dtype_t t) { return t <= R2CCL_UINT64; }
static int is_signed(r2ccl_dtype_t t)
{
	return t == R2CCL_INT8 || t == R2CCL_INT32 || t == R2CCL_INT64;
}

/* Integer element as raw uint64 / sign-extended int64. */
static uint64_t get_u(const void *p, r2ccl_dtype_t t, size_t i)
{
	switch (t) {
	case R2CCL_INT8: return (uint64_t)(int64_t)((const int8_t *)p)[i];
	case R2CCL_UINT8: return ((const uint8_t *)p)[i];
	case R2CCL_INT32: return (uint64_t)(int64_t)((const int32_t *)p)[i];
	case R2CCL_UINT32: return ((const uint32_t *)p)[i];
	case R2CCL_INT64: return (uint64_t)((const int64_t *)p)[i];
	default: return ((const uint64_t *)p)[i];
	}
}

static uint64_t wrap(uint64_t v, r2ccl_dtype_t t)
{
	switch (dsize[t]) {
	case 1: return is_signed(t) ? (uint64_t)(int64_t)(int8_t)(uint8_t)v : (uint8_t)v;
	case 4: return is_signed(t) ? (uint64_t)(int64_t)(int32_t)(uint32_t)v : (uint32_t)v;
	default: return v;
	}
}

static double get_f(const void *p, r2ccl_dtype_t t, size_t i)
{
	switch (t) {
	case R2CCL_FLOAT16: return ref_h2f(((const uint16_t *)p)[i]);
	case R2CCL_BFLOAT16: return ref_b2f(((const uint16_t *)p)[i]);
	case R2CCL_FLOAT32: return ((const float *)p)[i];
	default: return ((const double *)p)[i];
	}
}

/* min/max: the later operand replaces the running value only if strictly
 * better or NaN (so NaN sticks once seen, and ties keep the first). */
#define REF_STEP(acc, v, op)                                                      \
	do {                                                                      \
		if (op == R2CCL_SUM || op == R2CCL_AVG) acc = acc + v;            \
		else if (op == R2CCL_PROD) acc = acc * v;                         \
		else if (op == R2CCL_MIN) { if (v < acc || v != v) acc = v; }     \
		else { if (v > acc || v != v) acc = v; }                          \
	} while (0)

/* Writes element i of the reference result into ref (same layout as out). */
static void ref_elem(void *ref, const void *const *in, int nin, size_t i, r2ccl_dtype_t t,
		     r2ccl_redop_t op, int div)
{
	if (is_int(t)) {
		uint64_t acc = get_u(in[0], t, i);
		for (int k = 1; k < nin; k++) {
			uint64_t v = get_u(in[k], t, i);
			if (op == R2CCL_SUM || op == R2CCL_AVG) acc = wrap(acc + v, t);
			else if (op == R2CCL_PROD) acc = wrap(acc * v, t);
			else if (is_signed(t)) {
				int64_t a = (int64_t)acc, b = (int64_t)v;
				if (op == R2CCL_MIN ? b < a : b > a) acc = v;
			} else {
				if (op == R2CCL_MIN ? v < acc : v > acc) acc = v;
			}
		}
		if (op == R2CCL_AVG) {
			if (is_signed(t)) acc = (uint64_t)((int64_t)acc / (int64_t)div);
			else acc = acc / (uint64_t)div;
		}
		switch (dsize[t]) {
		case 1: ((uint8_t *)ref)[i] = (uint8_t)acc; break;
		case 4: ((uint32_t *)ref)[i] = (uint32_t)acc; break;
		default: ((uint64_t *)ref)[i] = acc; break;
		}
		return;
	}
	if (t == R2CCL_FLOAT64) {
		double acc = get_f(in[0], t, i);
		for (int k = 1; k < nin; k++) {
			double v = get_f(in[k], t, i);
			REF_STEP(acc, v, op);
		}
		if (op == R2CCL_AVG) acc /= (double)div;
		((double *)ref)[i] = acc;
		return;
	}
	float acc = (float)get_f(in[0], t, i);
	for (int k = 1; k < nin; k++) {
		float v = (float)get_f(in[k], t, i);
		REF_STEP(acc, v, op);
	}
	if (op == R2CCL_AVG) acc /= (float)div;
	if (t == R2CCL_FLOAT32) ((float *)ref)[i] = acc;
	else if (t == R2CCL_FLOAT16) ((uint16_t *)ref)[i] = ref_f2h(acc);
	else ((uint16_t *)ref)[i] = ref_f2b(acc);
}

/* Compare out with ref: integers bit-exact; floats bit-exact, or both NaN. */
static int elem_equal(const void *a, const void *b, size_t i, r2ccl_dtype_t t)
{
	if (is_int(t)) return memcmp((const char *)a + i * dsize[t], (const char *)b + i * dsize[t],
				     dsize[t]) == 0;
	double x = get_f(a, t, i), y = get_f(b, t, i);
	if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
	return memcmp((const char *)a + i * dsize[t], (const char *)b + i * dsize[t], dsize[t]) == 0;
}

static void check_against_ref(const void *out, const void *const *in, int nin, size_t count,
			      r2ccl_dtype_t t, r2ccl_redop_t op, int div, const char *what)
{
	char *ref = malloc(count * dsize[t] + 8);
	for (size_t i = 0; i < count; i++) {
		ref_elem(ref, in, nin, i, t, op, div);
		if (!elem_equal(out, ref, i, t)) {
			double x = is_int(t) ? (double)(int64_t)get_u(out, t, i) : get_f(out, t, i);
			double y = is_int(t) ? (double)(int64_t)get_u(ref, t, i) : get_f(ref, t, i);
			ck_abort_msg("%s: %s %s nin=%d count=%zu: element %zu is %.17g, want %.17g", what,
				     dname[t], oname[op], nin, count, i, x, y);
		}
	}
	free(ref);
}

/* ------------------------------------------------------------------------ */
/* Data                                                                     */
/* ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* Fill with values suited to the op: integers full range (wrap), floats a
 * moderate range so products of 8 inputs stay mostly finite. */
static void fill(void *p, size_t count, r2ccl_dtype_t t, r2ccl_redop_t op)
{
	for (size_t i = 0; i < count; i++) {
		uint64_t r = rnd();
		double f = ((double)(r >> 11) / 9007199254740992.0) * 8.0 - 4.0; /* [-4, 4) */
		if (op == R2CCL_PROD) f = ((double)(r >> 11) / 9007199254740992.0) * 3.0 - 1.5;
		switch (t) {
		case R2CCL_INT8: case R2CCL_UINT8: ((uint8_t *)p)[i] = (uint8_t)r; break;
		case R2CCL_INT32: case R2CCL_UINT32: ((uint32_t *)p)[i] = (uint32_t)r; break;
		case R2CCL_INT64: case R2CCL_UINT64: ((uint64_t *)p)[i] = r; break;
		case R2CCL_FLOAT16: ((uint16_t *)p)[i] = ref_f2h((float)f); break;
		case R2CCL_BFLOAT16: ((uint16_t *)p)[i] = ref_f2b((float)f); break;
		case R2CCL_FLOAT32: ((float *)p)[i] = (float)f; break;
		default: ((double *)p)[i] = f; break;
		}
	}
}

/* Buffers are deliberately only element-aligned: offset by one element
 * from a 64-byte boundary. */
struct bufs {
	void *raw[9];
	void *in[8];
	void *out;
};

static void bufs_alloc(struct bufs *b, int nin, size_t count, r2ccl_dtype_t t, r2ccl_redop_t op)
{
	for (int k = 0; k <= nin; k++) {
		size_t sz = (count + 2) * dsize[t] + 64;
		ck_assert(posix_memalign(&b->raw[k], 64, sz) == 0);
		memset(b->raw[k], 0xA5, sz);
		void *p = (char *)b->raw[k] + dsize[t];
		if (k < nin) {
			b->in[k] = p;
			fill(p, count, t, op);
		} else {
			b->out = p;
		}
	}
}

static void bufs_free(struct bufs *b, int nin)
{
	for (int k = 0; k <= nin; k++) free(b->raw[k]);
}

/* ------------------------------------------------------------------------ */
/* Conversions                                                              */
/* ------------------------------------------------------------------------ */

START_TEST(test_half_to_float_exhaustive)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float a = r2_half_to_float((uint16_t)h), b = ref_h2f((uint16_t)h);
		if (isnan(b)) {
			ck_assert_msg(isnan(a), "h=%04x", h);
			ck_assert_msg((fbits(a) >> 31) == (h >> 15), "h=%04x sign", h);
		} else {
			ck_assert_msg(fbits(a) == fbits(b), "h=%04x: %a vs %a", h, a, b);
			/* round trip */
			ck_assert_msg(r2_float_to_half(a) == h, "h=%04x roundtrip", h);
			ck_assert_msg(ref_f2h(a) == h, "ref roundtrip %04x", h);
		}
	}
}
END_TEST

START_TEST(test_bf16_exhaustive)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float a = r2_bf16_to_float((uint16_t)h);
		ck_assert(fbits(a) == fbits(ref_b2f((uint16_t)h)));
		if (isnan(a)) {
			uint16_t r = r2_float_to_bf16(a);
			ck_assert_msg(isnan(ref_b2f(r)), "bf %04x", h);
		} else {
			ck_assert_msg(r2_float_to_bf16(a) == h, "bf %04x roundtrip", h);
		}
	}
}
END_TEST

static void check_f2h(float f)
{
	uint16_t a = r2_float_to_half(f), b = ref_f2h(f);
	if (isnan(f)) {
		ck_assert_msg(isnan(ref_h2f(a)), "nan %a -> %04x", f, a);
		return;
	}
	ck_assert_msg(a == b, "f2h(%a) = %04x want %04x", f, a, b);
	uint16_t c = r2_float_to_bf16(f), d = ref_f2b(f);
	ck_assert_msg(c == d, "f2bf(%a) = %04x want %04x", f, c, d);
}

START_TEST(test_float_to_half_rounding)
{
	/* every half, and the midpoints and neighbours between consecutive ones */
	for (uint32_t h = 0; h < 0x7c00; h++) {
		float lo = ref_h2f((uint16_t)h), hi = ref_h2f((uint16_t)(h + 1));
		float mid = (float)(((double)lo + (double)hi) / 2);
		for (int s = 0; s < 2; s++) {
			float sg = s ? -1.0f : 1.0f;
			check_f2h(sg * lo);
			check_f2h(sg * mid);
			check_f2h(sg * nextafterf(mid, 0));
			check_f2h(sg * nextafterf(mid, INFINITY));
		}
	}
	/* random bit patterns (all exponents, NaNs, float denormals) */
	for (int i = 0; i < 2000000; i++) check_f2h(bitsf((uint32_t)rnd()));
	/* named cases */
	ck_assert_uint_eq(r2_float_to_half(65504.0f), 0x7bff);
	ck_assert_uint_eq(r2_float_to_half(65519.0f), 0x7bff);
	ck_assert_uint_eq(r2_float_to_half(65520.0f), 0x7c00); /* tie -> even -> inf */
	ck_assert_uint_eq(r2_float_to_half(1e10f), 0x7c00);
	ck_assert_uint_eq(r2_float_to_half(-INFINITY), 0xfc00);
	ck_assert_uint_eq(r2_float_to_half(-0.0f), 0x8000);
	ck_assert_uint_eq(r2_float_to_half(0x1p-24f), 0x0001);    /* smallest denormal */
	ck_assert_uint_eq(r2_float_to_half(0x1p-25f), 0x0000);    /* tie -> even (0) */
	ck_assert_uint_eq(r2_float_to_half(0x1.8p-24f), 0x0002);  /* tie -> even (2) */
	ck_assert_uint_eq(r2_float_to_half(0x1.8p-25f), 0x0001);
	ck_assert_uint_eq(r2_float_to_half(0x1.ff8p-15f), 0x03ff); /* largest denormal */
	ck_assert_uint_eq(r2_float_to_half(0x1.ffcp-15f), 0x0400); /* tie: carries to normal */
	ck_assert_uint_eq(r2_float_to_half(0x1.ffap-15f), 0x03ff);
	ck_assert_uint_eq(r2_float_to_half(1.0f + 0x1p-11f), 0x3c00); /* tie -> even */
	ck_assert_uint_eq(r2_float_to_half(1.0f + 0x1.8p-10f), 0x3c02);
	ck_assert(isnan(r2_half_to_float(r2_float_to_half(NAN))));
	ck_assert_uint_eq(r2_float_to_bf16(1.0f + 0x1p-8f), 0x3f80); /* tie -> even */
	ck_assert_uint_eq(r2_float_to_bf16(1.0f + 0x1.8p-7f), 0x3f82);
	ck_assert_uint_eq(r2_float_to_bf16(0x1.ffp127f), 0x7f80);  /* overflow -> inf */
	ck_assert(isnan(r2_bf16_to_float(r2_float_to_bf16(NAN))));
	ck_assert(isnan(r2_bf16_to_float(r2_float_to_bf16(bitsf(0x7f800001)))));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The full matrix                                                          */
/* ------------------------------------------------------------------------ */

static const int nins[] = { 1, 2, 3, 4, 8 };
static const size_t counts[] = { 0, 1, 7, 1000, 4097, 20011 };

/* _i: dtype */
START_TEST(test_matrix)
{
	r2ccl_dtype_t t = (r2ccl_dtype_t)_i;
	for (int op = 0; op < R2CCL_NUM_OPS; op++)
		for (size_t ni = 0; ni < sizeof(nins) / sizeof(nins[0]); ni++)
			for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
				int nin = nins[ni];
				size_t count = counts[ci];
				struct bufs b;
				bufs_alloc(&b, nin, count, t, (r2ccl_redop_t)op);
				int rc = r2_reduce(b.out, (const void *const *)b.in, nin, count, t,
						   (r2ccl_redop_t)op, nin);
				ck_assert_int_eq(rc, 0);
				check_against_ref(b.out, (const void *const *)b.in, nin, count, t,
						  (r2ccl_redop_t)op, nin, "matrix");
				/* nothing written past the end */
				const unsigned char *tail =
					(const unsigned char *)b.out + count * dsize[t];
				for (size_t j = 0; j < dsize[t]; j++) ck_assert_uint_eq(tail[j], 0xA5);
				bufs_free(&b, nin);
			}
}
END_TEST

/* avg with a divisor other than nin (partial reduction of a larger group) */
START_TEST(test_avg_div_not_nin)
{
	for (int t = 0; t < R2CCL_NUM_DTYPES; t++) {
		struct bufs b;
		bufs_alloc(&b, 3, 5000, t, R2CCL_AVG);
		ck_assert_int_eq(r2_reduce(b.out, (const void *const *)b.in, 3, 5000, t, R2CCL_AVG, 7), 0);
		check_against_ref(b.out, (const void *const *)b.in, 3, 5000, t, R2CCL_AVG, 7, "div7");
		ck_assert_int_eq(r2_reduce(b.out, (const void *const *)b.in, 3, 5000, t, R2CCL_AVG, 1), 0);
		check_against_ref(b.out, (const void *const *)b.in, 3, 5000, t, R2CCL_AVG, 1, "div1");
		/* divisors without a specialised loop */
		const int odd[] = { 9, 12, 1000003 };
		for (int j = 0; j < 3; j++) {
			ck_assert_int_eq(r2_reduce(b.out, (const void *const *)b.in, 3, 5000, t,
						   R2CCL_AVG, odd[j]), 0);
			check_against_ref(b.out, (const void *const *)b.in, 3, 5000, t, R2CCL_AVG,
					  odd[j], "odd div");
		}
		bufs_free(&b, 3);
	}
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Aliasing                                                                 */
/* ------------------------------------------------------------------------ */

START_TEST(test_alias)
{
	r2ccl_dtype_t t = (r2ccl_dtype_t)_i;
	const int alias_nins[] = { 1, 2, 3, 4, 5, 8 };
	const size_t count = 9001;
	for (int op = 0; op < R2CCL_NUM_OPS; op++)
		for (size_t ni = 0; ni < sizeof(alias_nins) / sizeof(alias_nins[0]); ni++)
			for (int which = 0; which < 3; which++) {
				int nin = alias_nins[ni];
				int k = which == 0 ? 0 : which == 1 ? nin - 1 : nin / 2;
				struct bufs b;
				bufs_alloc(&b, nin, count, t, (r2ccl_redop_t)op);
				/* keep a pristine copy of the inputs for the reference */
				void *copy[8];
				for (int j = 0; j < nin; j++) {
					copy[j] = malloc(count * dsize[t]);
					memcpy(copy[j], b.in[j], count * dsize[t]);
				}
				ck_assert_int_eq(r2_reduce(b.in[k], (const void *const *)b.in, nin, count,
							   t, (r2ccl_redop_t)op, nin), 0);
				check_against_ref(b.in[k], (const void *const *)copy, nin, count, t,
						  (r2ccl_redop_t)op, nin, which ? "alias last/mid" : "alias first");
				for (int j = 0; j < nin; j++) free(copy[j]);
				bufs_free(&b, nin);
			}
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Accumulating form                                                        */
/* ------------------------------------------------------------------------ */

START_TEST(test_acc_matches_reduce)
{
	r2ccl_dtype_t t = (r2ccl_dtype_t)_i;
	const size_t count = 5003;
	for (int op = 0; op < R2CCL_NUM_OPS; op++)
		for (int nin = 1; nin <= 8; nin++) {
			struct bufs b;
			bufs_alloc(&b, nin, count, t, (r2ccl_redop_t)op);
			char *acc = malloc(count * dsize[t] + 1) ;
			char *accp = acc + 1; /* odd address: fine for 1-byte types only */
			if (dsize[t] > 1) accp = acc;
			memcpy(accp, b.in[0], count * dsize[t]);
			for (int k = 1; k < nin; k++)
				ck_assert_int_eq(r2_reduce_acc(accp, b.in[k], count, t, (r2ccl_redop_t)op), 0);
			ck_assert_int_eq(r2_reduce_finish_avg(accp, count, t, (r2ccl_redop_t)op, nin), 0);
			if (t != R2CCL_FLOAT16 && t != R2CCL_BFLOAT16) {
				/* same fold order: bit-identical to the one-shot form */
				ck_assert_int_eq(r2_reduce(b.out, (const void *const *)b.in, nin, count, t,
							   (r2ccl_redop_t)op, nin), 0);
				for (size_t i = 0; i < count; i++)
					ck_assert_msg(elem_equal(accp, b.out, i, t), "%s %s nin=%d i=%zu",
						      dname[t], oname[op], nin, i);
			} else {
				/* half types round after every step of the pipeline */
				uint16_t *o = (uint16_t *)accp;
				for (size_t i = 0; i < count; i++) {
					float (*cv)(uint16_t) = t == R2CCL_FLOAT16 ? ref_h2f : ref_b2f;
					uint16_t (*rd)(float) = t == R2CCL_FLOAT16 ? ref_f2h : ref_f2b;
					uint16_t r = ((uint16_t *)b.in[0])[i];
					for (int k = 1; k < nin; k++) {
						float a = cv(r), v = cv(((uint16_t *)b.in[k])[i]);
						REF_STEP(a, v, op);
						r = rd(a);
					}
					if (op == R2CCL_AVG) r = rd(cv(r) / (float)nin);
					ck_assert_msg(o[i] == r || (isnan(cv(o[i])) && isnan(cv(r))),
						      "%s %s nin=%d i=%zu: %04x want %04x", dname[t],
						      oname[op], nin, i, o[i], r);
				}
			}
			/* finish_avg is a no-op for other ops */
			if (op != R2CCL_AVG) {
				memcpy(b.out, accp, count * dsize[t]);
				ck_assert_int_eq(r2_reduce_finish_avg(accp, count, t, (r2ccl_redop_t)op, 3), 0);
				ck_assert(memcmp(b.out, accp, count * dsize[t]) == 0);
			}
			free(acc);
			bufs_free(&b, nin);
		}
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Special values                                                           */
/* ------------------------------------------------------------------------ */

/* Reduce nin scalar floats given as doubles in the given float dtype; the
 * element is put at every position of a 37-long vector so that both the
 * vector body and the scalar tail see it. Returns element 0 as double and
 * checks all elements are identical. */
static double red_f(r2ccl_dtype_t t, r2ccl_redop_t op, int nin, const double *v)
{
	enum { N = 37 };
	unsigned char bufs[8][N * 8], out[N * 8];
	const void *in[8];
	for (int k = 0; k < nin; k++) {
		for (int i = 0; i < N; i++) {
			switch (t) {
			case R2CCL_FLOAT16: ((uint16_t *)bufs[k])[i] = ref_f2h((float)v[k]); break;
			case R2CCL_BFLOAT16: ((uint16_t *)bufs[k])[i] = ref_f2b((float)v[k]); break;
			case R2CCL_FLOAT32: ((float *)bufs[k])[i] = (float)v[k]; break;
			default: ((double *)bufs[k])[i] = v[k]; break;
			}
		}
		in[k] = bufs[k];
	}
	ck_assert_int_eq(r2_reduce(out, in, nin, N, t, op, nin), 0);
	for (int i = 1; i < N; i++)
		ck_assert(memcmp(out, out + i * dsize[t], dsize[t]) == 0);
	return get_f(out, t, 0);
}

static int signbit_of(double x) { return signbit(x) != 0; }

START_TEST(test_float_specials)
{
	const r2ccl_dtype_t fts[] = { R2CCL_FLOAT16, R2CCL_BFLOAT16, R2CCL_FLOAT32, R2CCL_FLOAT64 };
	for (size_t ti = 0; ti < 4; ti++) {
		r2ccl_dtype_t t = fts[ti];
		/* NaN propagates through min/max whatever its position */
		for (int nin = 1; nin <= 8; nin++)
			for (int pos = 0; pos < nin; pos++) {
				double v[8];
				for (int k = 0; k < nin; k++) v[k] = k - 2.5;
				v[pos] = NAN;
				ck_assert_msg(isnan(red_f(t, R2CCL_MIN, nin, v)), "%s min nan pos %d/%d",
					      dname[t], pos, nin);
				ck_assert_msg(isnan(red_f(t, R2CCL_MAX, nin, v)), "%s max nan pos %d/%d",
					      dname[t], pos, nin);
				ck_assert(isnan(red_f(t, R2CCL_SUM, nin, v)));
				ck_assert(isnan(red_f(t, R2CCL_PROD, nin, v)));
				ck_assert(isnan(red_f(t, R2CCL_AVG, nin, v)));
			}
		/* infinities */
		double v[4] = { INFINITY, -INFINITY, 1, 2 };
		ck_assert(isnan(red_f(t, R2CCL_SUM, 2, v)));
		ck_assert(isnan(red_f(t, R2CCL_AVG, 4, v)));
		ck_assert(red_f(t, R2CCL_MIN, 4, v) == -INFINITY);
		ck_assert(red_f(t, R2CCL_MAX, 4, v) == INFINITY);
		ck_assert(red_f(t, R2CCL_PROD, 2, v) == -INFINITY);
		double z[2] = { INFINITY, 0 };
		ck_assert(isnan(red_f(t, R2CCL_PROD, 2, z)));
		/* signed zeros */
		double nz[3] = { -0.0, -0.0, -0.0 };
		double r = red_f(t, R2CCL_SUM, 3, nz);
		ck_assert(r == 0 && signbit_of(r));
		r = red_f(t, R2CCL_AVG, 3, nz);
		ck_assert(r == 0 && signbit_of(r));
		double mz[2] = { -0.0, 0.0 };
		r = red_f(t, R2CCL_SUM, 2, mz);
		ck_assert(r == 0 && !signbit_of(r)); /* -0 + +0 = +0 */
		r = red_f(t, R2CCL_MIN, 2, mz);
		ck_assert(r == 0);
		double pm[2] = { -0.0, 3.0 };
		r = red_f(t, R2CCL_PROD, 2, pm);
		ck_assert(r == 0 && signbit_of(r));
		double mn[2] = { -1.0, -5.0 };
		ck_assert(red_f(t, R2CCL_MIN, 2, mn) == -5.0);
		ck_assert(red_f(t, R2CCL_MAX, 2, mn) == -1.0);
	}
	/* half: overflow to inf, denormals */
	double big[2] = { 60000.0, 60000.0 };
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_SUM, 2, big) == INFINITY);
	double nbig[2] = { -60000.0, -60000.0 };
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_SUM, 2, nbig) == -INFINITY);
	/* avg of the same: the float32 sum 120000 does not overflow before /2 */
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_AVG, 2, big) == 60000.0);
	double den[3] = { 0x1p-24, 0x1p-24, 0x1p-24 };
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_SUM, 3, den) == 0x3p-24);
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_MIN, 3, den) == 0x1p-24);
	/* avg of 3 smallest denormals: 3*2^-24/3 = 2^-24 */
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_AVG, 3, den) == 0x1p-24);
	/* 2^-24 * 0.5 rounds to 0 (tie, even); *0.75 rounds to 2^-24 */
	double hp[2] = { 0x1p-24, 0.5 };
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_PROD, 2, hp) == 0.0);
	double hq[2] = { 0x1p-24, 0.75 };
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_PROD, 2, hq) == 0x1p-24);
	double dn[2] = { 0x1.ff8p-15, 0x1p-24 }; /* largest denormal + smallest: 2^-14 */
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_SUM, 2, dn) == 0x1p-14);
	/* accumulation in float32, rounded once: 2048 + 1 + 1 = 2050 in half
	 * (stepwise half rounding would give 2048 twice: tie to even) */
	double acc3[3] = { 2048, 1, 1 };
	ck_assert(red_f(R2CCL_FLOAT16, R2CCL_SUM, 3, acc3) == 2050);
	/* bf16: 256 + 1 + 1 = 258 (once), 256 stepwise */
	double bacc[3] = { 256, 1, 1 };
	ck_assert(red_f(R2CCL_BFLOAT16, R2CCL_SUM, 3, bacc) == 258);
	double bbig[2] = { 0x1.fep127, 0x1.fep127 };
	ck_assert(red_f(R2CCL_BFLOAT16, R2CCL_SUM, 2, bbig) == INFINITY);
	double fden[2] = { 0x1p-149, 0x1p-149 };
	ck_assert(red_f(R2CCL_FLOAT32, R2CCL_SUM, 2, fden) == 0x1p-148);
}
END_TEST

START_TEST(test_int_specials)
{
	/* wrap on sum and prod, signed */
	int8_t a8[3] = { 127, 1, 0 }, b8[3] = { 1, 127, -128 }, o8[3];
	const void *in8[2] = { a8, b8 };
	r2_reduce(o8, in8, 2, 3, R2CCL_INT8, R2CCL_SUM, 2);
	ck_assert_int_eq(o8[0], -128);
	ck_assert_int_eq(o8[1], -128);
	ck_assert_int_eq(o8[2], -128);
	int8_t c8[3] = { -128, -1, 16 }, d8[3] = { -1, -128, 16 };
	const void *inp8[2] = { c8, d8 };
	r2_reduce(o8, inp8, 2, 3, R2CCL_INT8, R2CCL_PROD, 2);
	ck_assert_int_eq(o8[0], -128); /* 128 wraps */
	ck_assert_int_eq(o8[1], -128);
	ck_assert_int_eq(o8[2], 0);    /* 256 wraps */

	int32_t a32[2] = { INT32_MAX, INT32_MIN }, b32[2] = { 1, -1 }, o32[2];
	const void *in32[2] = { a32, b32 };
	r2_reduce(o32, in32, 2, 2, R2CCL_INT32, R2CCL_SUM, 2);
	ck_assert_int_eq(o32[0], INT32_MIN);
	ck_assert_int_eq(o32[1], INT32_MAX);
	int32_t p32[2] = { 65536, INT32_MIN }, q32[2] = { 65536, -1 };
	const void *inq32[2] = { p32, q32 };
	r2_reduce(o32, inq32, 2, 2, R2CCL_INT32, R2CCL_PROD, 2);
	ck_assert_int_eq(o32[0], 0);
	ck_assert_int_eq(o32[1], INT32_MIN);

	int64_t a64[2] = { INT64_MAX, INT64_MIN }, b64[2] = { 1, -1 }, o64[2];
	const void *in64[2] = { a64, b64 };
	r2_reduce(o64, in64, 2, 2, R2CCL_INT64, R2CCL_SUM, 2);
	ck_assert(o64[0] == INT64_MIN && o64[1] == INT64_MAX);
	int64_t p64[2] = { INT64_MIN, (int64_t)1 << 32 }, q64[2] = { -1, (int64_t)1 << 32 };
	const void *inq64[2] = { p64, q64 };
	r2_reduce(o64, inq64, 2, 2, R2CCL_INT64, R2CCL_PROD, 2);
	ck_assert(o64[0] == INT64_MIN && o64[1] == 0);

	uint8_t u8a[1] = { 255 }, u8b[1] = { 2 }, u8o[1];
	const void *inu8[2] = { u8a, u8b };
	r2_reduce(u8o, inu8, 2, 1, R2CCL_UINT8, R2CCL_SUM, 2);
	ck_assert_uint_eq(u8o[0], 1);
	r2_reduce(u8o, inu8, 2, 1, R2CCL_UINT8, R2CCL_PROD, 2);
	ck_assert_uint_eq(u8o[0], 254);
	r2_reduce(u8o, inu8, 2, 1, R2CCL_UINT8, R2CCL_AVG, 2); /* (255+2) wraps to 1, /2 = 0 */
	ck_assert_uint_eq(u8o[0], 0);

	/* avg truncates toward zero */
	int32_t x[6] = { -7, 7, -1, 1, -8, INT32_MIN }, y[6] = { 0, 0, 0, 0, 0, 0 };
	const void *inxy[2] = { x, y };
	r2_reduce(o32, inxy, 2, 2, R2CCL_INT32, R2CCL_AVG, 2);
	int32_t o6[6];
	r2_reduce(o6, inxy, 2, 6, R2CCL_INT32, R2CCL_AVG, 2);
	ck_assert_int_eq(o6[0], -3);
	ck_assert_int_eq(o6[1], 3);
	ck_assert_int_eq(o6[2], 0);
	ck_assert_int_eq(o6[3], 0);
	ck_assert_int_eq(o6[4], -4);
	ck_assert_int_eq(o6[5], INT32_MIN / 2);
	int8_t x8[3] = { -7, -128, 127 }, y8[3] = { 0, 0, 0 }, o83[3];
	const void *inx8[2] = { x8, y8 };
	r2_reduce(o83, inx8, 2, 3, R2CCL_INT8, R2CCL_AVG, 2);
	ck_assert_int_eq(o83[0], -3);
	ck_assert_int_eq(o83[1], -64);
	ck_assert_int_eq(o83[2], 63);
	int64_t x64[2] = { -7, INT64_MIN + 1 }, y64[2] = { 0, 0 }, o642[2];
	const void *inx64[2] = { x64, y64 };
	r2_reduce(o642, inx64, 2, 2, R2CCL_INT64, R2CCL_AVG, 2);
	ck_assert(o642[0] == -3 && o642[1] == (INT64_MIN + 1) / 2);
	/* -7 - 7 - 7 over 3 inputs / 4 = -21/4 = -5 */
	int32_t m1[1] = { -7 }, m2[1] = { -7 }, m3[1] = { -7 }, mo[1];
	const void *inm[3] = { m1, m2, m3 };
	r2_reduce(mo, inm, 3, 1, R2CCL_INT32, R2CCL_AVG, 4);
	ck_assert_int_eq(mo[0], -5);
	uint32_t ub[1] = { UINT32_MAX }, uz[1] = { 0 }, uo[1];
	const void *inub[2] = { ub, uz };
	r2_reduce(uo, inub, 2, 1, R2CCL_UINT32, R2CCL_AVG, 2);
	ck_assert_uint_eq(uo[0], UINT32_MAX / 2);
	/* min/max on signed vs unsigned interpretations */
	int8_t s1[1] = { -1 }, s2[1] = { 1 }, so[1];
	const void *ins[2] = { s1, s2 };
	r2_reduce(so, ins, 2, 1, R2CCL_INT8, R2CCL_MIN, 2);
	ck_assert_int_eq(so[0], -1);
	r2_reduce(so, ins, 2, 1, R2CCL_UINT8, R2CCL_MIN, 2);
	ck_assert_int_eq(so[0], 1);
}
END_TEST

START_TEST(test_bad_args)
{
	float a[4] = { 0 }, o[4];
	const void *in[1] = { a };
	ck_assert_int_eq(r2_reduce(o, in, 1, 4, R2CCL_NUM_DTYPES, R2CCL_SUM, 1), -EINVAL);
	ck_assert_int_eq(r2_reduce(o, in, 1, 4, (r2ccl_dtype_t)-1, R2CCL_SUM, 1), -EINVAL);
	ck_assert_int_eq(r2_reduce(o, in, 1, 4, R2CCL_FLOAT32, R2CCL_NUM_OPS, 1), -EINVAL);
	ck_assert_int_eq(r2_reduce(o, in, 0, 4, R2CCL_FLOAT32, R2CCL_SUM, 1), -EINVAL);
	ck_assert_int_eq(r2_reduce(o, in, 1, 4, R2CCL_FLOAT32, R2CCL_AVG, 0), -EINVAL);
	ck_assert_int_eq(r2_reduce_acc(o, a, 4, R2CCL_NUM_DTYPES, R2CCL_SUM), -EINVAL);
	ck_assert_int_eq(r2_reduce_acc(o, a, 4, R2CCL_FLOAT32, R2CCL_NUM_OPS), -EINVAL);
	ck_assert_int_eq(r2_reduce_finish_avg(o, 4, R2CCL_NUM_DTYPES, R2CCL_AVG, 2), -EINVAL);
	ck_assert_int_eq(r2_reduce_finish_avg(o, 4, R2CCL_FLOAT32, R2CCL_AVG, 0), -EINVAL);
	ck_assert_int_eq(r2_reduce(o, in, 1, 0, R2CCL_FLOAT32, R2CCL_SUM, 1), 0);
	ck_assert_int_eq(r2_reduce(NULL, NULL, 1, 0, R2CCL_FLOAT32, R2CCL_SUM, 1), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Benchmark (not part of the test)                                          */
/* ------------------------------------------------------------------------ */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bench_one(r2ccl_dtype_t t, r2ccl_redop_t op, int nin, size_t bytes, int inplace)
{
	size_t count = bytes / dsize[t];
	void *in[8], *out;
	for (int k = 0; k < nin; k++) {
		if (posix_memalign(&in[k], 4096, bytes)) abort();
		fill(in[k], count, t, op);
	}
	if (posix_memalign(&out, 4096, bytes)) abort();
	memset(out, 0, bytes);
	void *dst = inplace ? in[0] : out;
	double best = 1e30, total = 0;
	int iters = 0;
	for (int rep = 0; rep < 3; rep++) /* warm-up */
		r2_reduce(dst, (const void *const *)in, nin, count, t, op, nin);
	while (total < 1.0 || iters < 10) {
		double t0 = now();
		r2_reduce(dst, (const void *const *)in, nin, count, t, op, nin);
		double dt = now() - t0;
		total += dt;
		iters++;
		if (dt < best) best = dt;
	}
	double mean = total / iters;
	printf("%-5s %-4s nin=%d %zu MB%s: %7.3f ms best, %7.3f ms mean; "
	       "%6.2f GB/s per buffer, %6.2f GB/s memory traffic (%d in + 1 out)\n",
	       dname[t], oname[op], nin, bytes >> 20, inplace ? " in-place" : "", best * 1e3,
	       mean * 1e3, (double)bytes / best / 1e9, (double)bytes * (nin + 1) / best / 1e9, nin);
	for (int k = 0; k < nin; k++) free(in[k]);
	free(out);
}

static int bench(void)
{
	const size_t mb16 = 16u << 20;
	bench_one(R2CCL_FLOAT32, R2CCL_SUM, 4, mb16, 0);
	bench_one(R2CCL_FLOAT32, R2CCL_SUM, 2, mb16, 0);
	bench_one(R2CCL_FLOAT32, R2CCL_SUM, 4, mb16, 1);
	bench_one(R2CCL_FLOAT32, R2CCL_SUM, 8, mb16, 0);
	bench_one(R2CCL_FLOAT32, R2CCL_MAX, 4, mb16, 0);
	bench_one(R2CCL_FLOAT32, R2CCL_AVG, 4, mb16, 0);
	bench_one(R2CCL_FLOAT64, R2CCL_SUM, 4, mb16, 0);
	bench_one(R2CCL_INT32, R2CCL_SUM, 4, mb16, 0);
	bench_one(R2CCL_INT32, R2CCL_AVG, 4, mb16, 0);
	bench_one(R2CCL_FLOAT16, R2CCL_SUM, 4, mb16, 0);
	bench_one(R2CCL_BFLOAT16, R2CCL_SUM, 4, mb16, 0);
	return 0;
}

/* ------------------------------------------------------------------------ */

static Suite *reduce_suite(void)
{
	Suite *s = suite_create("reduce");
	TCase *tc = tcase_create("conversions");
	tcase_add_test(tc, test_half_to_float_exhaustive);
	tcase_add_test(tc, test_bf16_exhaustive);
	tcase_add_test(tc, test_float_to_half_rounding);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);

	tc = tcase_create("reduce");
	tcase_add_loop_test(tc, test_matrix, 0, R2CCL_NUM_DTYPES);
	tcase_add_test(tc, test_avg_div_not_nin);
	tcase_add_loop_test(tc, test_alias, 0, R2CCL_NUM_DTYPES);
	tcase_add_loop_test(tc, test_acc_matches_reduce, 0, R2CCL_NUM_DTYPES);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);

	tc = tcase_create("specials");
	tcase_add_test(tc, test_float_specials);
	tcase_add_test(tc, test_int_specials);
	tcase_add_test(tc, test_bad_args);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench();
	SRunner *sr = srunner_create(reduce_suite());
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
