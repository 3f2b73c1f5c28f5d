/* SPDX-License-Identifier: MIT */
/*
 * Reduction kernels (CPU). See reduce.h for the semantics.
 *
 * Design (this is the daemon's hot loop):
 *  - One plain loop per (type, op, input count 2/3/4), written so that GCC
 *    vectorizes it at -O3 (generic x86-64: SSE2), and cloned for AVX2 with
 *    target_clones (picked at load time through an ifunc).
 *  - out may alias any input exactly. The kernels therefore use no restrict
 *    qualifiers (that would be UB when out == in[k]); "GCC ivdep" tells the
 *    vectorizer there is no loop-carried dependence, which holds since every
 *    iteration reads element i of each input before it writes element i.
 *  - Work goes in blocks of R2_BLOCK_BYTES so that, for nin > 4 and for AVG,
 *    the partial result stays in L1 between the passes. For nin > 4 the
 *    partial result lives in a stack buffer and out is written only by the
 *    last pass, after every input of the block has been read (aliasing).
 *  - Float sums/products fold the inputs in order ((in0 op in1) op in2) ...,
 *    so the result does not depend on nin's kernel split or on the ISA.
 *  - float16/bfloat16: each block is widened into a float32 buffer, reduced
 *    there and rounded (nearest even) once when stored. float16 uses F16C
 *    when the CPU has it (AVX+F16C), else vectorizable software conversions.
 *  - Integers: sum/prod in the unsigned type (wraps, no UB); AVG divides the
 *    wrapped sum, truncating toward zero, through double where that is exact.
 */
#include "reduce.h"

#include <errno.h>
#include <string.h>

/* R2_REDUCE_GENERIC: portable code only (no clones, no intrinsics); used to
 * test the fallbacks on machines that have AVX2/F16C. */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(R2_REDUCE_GENERIC)
#include <cpuid.h>
#include <immintrin.h>
#define R2_X86 1
#ifndef R2_REDUCE_NO_CLONES
#define R2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define R2_CLONES
#endif
#else
#define R2_X86 0
#define R2_CLONES
#endif

#ifndef R2_BLOCK_BYTES
#define R2_BLOCK_BYTES 16384
#endif

#define R2_IVDEP _Pragma("GCC ivdep")

/* ------------------------------------------------------------------------ */
/* Scalar conversions                                                       */
/* ------------------------------------------------------------------------ */

static inline uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Branch-free (vectorizable) IEEE half <-> single, after M. Dukhan's FP16
 * library. Exact for every half; float->half rounds to nearest even through
 * the FPU (default rounding mode), overflows to inf, keeps NaN a NaN. */
static inline float h2f_inl(uint16_t h)
{
	const uint32_t w = (uint32_t)h << 16;
	const uint32_t sign = w & 0x80000000u;
	const uint32_t two_w = w + w;
	const float normalized = u2f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
	const float denormalized = u2f((two_w >> 17) | (126u << 23)) - 0.5f;
	/* Masks, not ?:, so that GCC if-converts (and vectorizes) the loop. */
	const uint32_t m = (uint32_t)0 - (uint32_t)(two_w < (1u << 27));
	const uint32_t bits = (f2u(denormalized) & m) | (f2u(normalized) & ~m);
	return u2f(sign | bits);
}

static inline uint16_t f2h_inl(float f)
{
	float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
	const uint32_t w = f2u(f);
	const uint32_t shl1_w = w + w;
	const uint32_t sign = w & 0x80000000u;
	uint32_t bias = shl1_w & 0xFF000000u;
	bias = bias < 0x71000000u ? 0x71000000u : bias;
	base = u2f((bias >> 1) + 0x07800000u) + base;
	const uint32_t bits = f2u(base);
	const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
	const uint32_t mant_bits = bits & 0x00000FFFu;
	const uint32_t nonsign = exp_bits + mant_bits;
	const uint32_t m = (uint32_t)0 - (uint32_t)(shl1_w > 0xFF000000u);
	return (uint16_t)((sign >> 16) | (0x7E00u & m) | (nonsign & ~m));
}

static inline float b2f_inl(uint16_t h)
{
	return u2f((uint32_t)h << 16);
}

static inline uint16_t f2b_inl(float f)
{
	const uint32_t u = f2u(f);
	const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
	const uint32_t nan = (u >> 16) | 0x0040u; /* quiet, keeps the sign */
	return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

float r2_half_to_float(uint16_t h) { return h2f_inl(h); }
uint16_t r2_float_to_half(float f) { return f2h_inl(f); }
float r2_bf16_to_float(uint16_t h) { return b2f_inl(h); }
uint16_t r2_float_to_bf16(float f) { return f2b_inl(f); }

/* ------------------------------------------------------------------------ */
/* Element ops                                                              */
/* ------------------------------------------------------------------------ */

/* T: storage type, U: arithmetic type (unsigned for integers). MIN/MAX:
 * b wins if it is strictly better or NaN; b != b folds away for integers. */
#define OP_SUM(T, U, a, b) ((T)((U)(a) + (U)(b)))
#define OP_PROD(T, U, a, b) ((T)((U)(a) * (U)(b)))
#define OP_MIN(T, U, a, b) ((((b) < (a)) | ((b) != (b))) ? (b) : (a))
#define OP_MAX(T, U, a, b) ((((b) > (a)) | ((b) != (b))) ? (b) : (a))

typedef void (*kern2_fn)(void *out, const void *a, const void *b, size_t n);
typedef void (*kern3_fn)(void *out, const void *a, const void *b, const void *c, size_t n);
typedef void (*kern4_fn)(void *out, const void *a, const void *b, const void *c,
			 const void *d, size_t n);
typedef void (*div_fn)(void *out, size_t n, int div);

struct kern {
	kern2_fn k2;
	kern3_fn k3;
	kern4_fn k4;
};

#define DEF_KERNELS(NAME, T, U, OPM)                                                        \
	R2_CLONES static void NAME##_2(void *vo, const void *va, const void *vb, size_t n)   \
	{                                                                                    \
		T *o = vo;                                                                   \
		const T *a = va, *b = vb;                                                    \
		R2_IVDEP for (size_t i = 0; i < n; i++) o[i] = OPM(T, U, a[i], b[i]);       \
	}                                                                                    \
	R2_CLONES static void NAME##_3(void *vo, const void *va, const void *vb,            \
				       const void *vc, size_t n)                             \
	{                                                                                    \
		T *o = vo;                                                                   \
		const T *a = va, *b = vb, *c = vc;                                           \
		R2_IVDEP for (size_t i = 0; i < n; i++)                                      \
		{                                                                            \
			T x = OPM(T, U, a[i], b[i]);                                         \
			o[i] = OPM(T, U, x, c[i]);                                           \
		}                                                                            \
	}                                                                                    \
	R2_CLONES static void NAME##_4(void *vo, const void *va, const void *vb,            \
				       const void *vc, const void *vd, size_t n)             \
	{                                                                                    \
		T *o = vo;                                                                   \
		const T *a = va, *b = vb, *c = vc, *d = vd;                                  \
		R2_IVDEP for (size_t i = 0; i < n; i++)                                      \
		{                                                                            \
			T x = OPM(T, U, a[i], b[i]);                                         \
			T y = OPM(T, U, x, c[i]);                                            \
			o[i] = OPM(T, U, y, d[i]);                                           \
		}                                                                            \
	}

#define DEF_TYPE(TN, T, U)                         \
	DEF_KERNELS(TN##_sum, T, U, OP_SUM)        \
	DEF_KERNELS(TN##_prod, T, U, OP_PROD)      \
	DEF_KERNELS(TN##_min, T, U, OP_MIN)        \
	DEF_KERNELS(TN##_max, T, U, OP_MAX)        \
	static const struct kern TN##_kern[4] = {  \
		{ TN##_sum_2, TN##_sum_3, TN##_sum_4 },     \
		{ TN##_prod_2, TN##_prod_3, TN##_prod_4 },  \
		{ TN##_min_2, TN##_min_3, TN##_min_4 },     \
		{ TN##_max_2, TN##_max_3, TN##_max_4 },     \
	};

DEF_TYPE(i8, int8_t, uint8_t)
DEF_TYPE(u8, uint8_t, uint8_t)
DEF_TYPE(i32, int32_t, uint32_t)
DEF_TYPE(u32, uint32_t, uint32_t)
DEF_TYPE(i64, int64_t, uint64_t)
DEF_TYPE(u64, uint64_t, uint64_t)
DEF_TYPE(f32, float, float)
DEF_TYPE(f64, double, double)

/* AVG division, in place. The usual rank counts get loops with a constant
 * divisor, which GCC vectorizes (shifts / multiply-high for integers, an
 * exact multiply for floats and powers of two). Otherwise GEN(x, div) runs;
 * for integers up to 32 bits it is (double)x / n truncated, which is exact
 * for |x| < 2^32 (the rounding error stays below 1/n, the distance to the
 * next integer). */
#define DIV_CASE(T, C)                                                       \
	case C:                                                              \
		for (size_t i = 0; i < n; i++) o[i] = (T)(o[i] / (T)(C));    \
		break;
#define DEF_DIV(TN, T, GEN)                                                  \
	R2_CLONES static void TN##_div(void *vo, size_t n, int div)          \
	{                                                                    \
		T *o = vo;                                                   \
		switch (div) {                                               \
		DIV_CASE(T, 2) DIV_CASE(T, 3) DIV_CASE(T, 4) DIV_CASE(T, 5)  \
		DIV_CASE(T, 6) DIV_CASE(T, 7) DIV_CASE(T, 8) DIV_CASE(T, 16) \
		default:                                                     \
			for (size_t i = 0; i < n; i++) o[i] = GEN(T, o[i], div); \
		}                                                            \
	}
#define GEN_VIA_DOUBLE(T, x, d) ((T)((double)(x) / (double)(d)))
#define GEN_PLAIN(T, x, d) ((T)((x) / (T)(d)))
DEF_DIV(i8, int8_t, GEN_VIA_DOUBLE)
DEF_DIV(u8, uint8_t, GEN_VIA_DOUBLE)
DEF_DIV(i32, int32_t, GEN_VIA_DOUBLE)
DEF_DIV(u32, uint32_t, GEN_VIA_DOUBLE)
DEF_DIV(i64, int64_t, GEN_PLAIN)
DEF_DIV(u64, uint64_t, GEN_PLAIN)
DEF_DIV(f32, float, GEN_PLAIN)
DEF_DIV(f64, double, GEN_PLAIN)

/* ------------------------------------------------------------------------ */
/* Half types: widen a block to float32, reduce there, round once on store   */
/* ------------------------------------------------------------------------ */

#define HBLOCK (R2_BLOCK_BYTES / sizeof(float))

/* acc[i] = OP(acc[i], cvt(a[i])) [, cvt(b[i])] for one op, one half type. */
#define DEF_HACC(NAME, CVT, OPM)                                                     \
	R2_CLONES static void NAME(float *acc, const uint16_t *a, size_t n)          \
	{                                                                            \
		R2_IVDEP for (size_t i = 0; i < n; i++)                              \
		{                                                                    \
			const float x = acc[i], y = CVT(a[i]);                       \
			acc[i] = OPM(float, float, x, y);                            \
		}                                                                    \
	}                                                                            \
	R2_CLONES static void NAME##2(float *acc, const uint16_t *a, const uint16_t *b, \
				       size_t n)                                     \
	{                                                                            \
		R2_IVDEP for (size_t i = 0; i < n; i++)                              \
		{                                                                    \
			const float x = acc[i], y = CVT(a[i]), z = CVT(b[i]);        \
			const float t = OPM(float, float, x, y);                     \
			acc[i] = OPM(float, float, t, z);                            \
		}                                                                    \
	}

typedef void (*hacc_fn)(float *acc, const uint16_t *a, size_t n);
typedef void (*hacc2_fn)(float *acc, const uint16_t *a, const uint16_t *b, size_t n);

struct hkern {
	void (*load)(float *acc, const uint16_t *a, size_t n);
	void (*store)(uint16_t *out, const float *acc, size_t n, int div);
	hacc_fn acc[4];
	hacc2_fn acc2[4];
};

#define DEF_HTYPE(TN, CVT, RND)                                                       \
	R2_CLONES static void TN##_load(float *acc, const uint16_t *a, size_t n)      \
	{                                                                             \
		for (size_t i = 0; i < n; i++) acc[i] = CVT(a[i]);                    \
	}                                                                             \
	R2_CLONES static void TN##_store(uint16_t *out, const float *acc, size_t n, int div) \
	{                                                                             \
		if (div) {                                                            \
			const float d = (float)div;                                   \
			for (size_t i = 0; i < n; i++) out[i] = RND(acc[i] / d);      \
		} else {                                                              \
			for (size_t i = 0; i < n; i++) out[i] = RND(acc[i]);          \
		}                                                                     \
	}                                                                             \
	DEF_HACC(TN##_acc_sum, CVT, OP_SUM)                                           \
	DEF_HACC(TN##_acc_prod, CVT, OP_PROD)                                         \
	DEF_HACC(TN##_acc_min, CVT, OP_MIN)                                           \
	DEF_HACC(TN##_acc_max, CVT, OP_MAX)                                           \
	static const struct hkern TN##_hkern = {                                      \
		TN##_load, TN##_store,                                                \
		{ TN##_acc_sum, TN##_acc_prod, TN##_acc_min, TN##_acc_max },          \
		{ TN##_acc_sum2, TN##_acc_prod2, TN##_acc_min2, TN##_acc_max2 },      \
	};

DEF_HTYPE(f16, h2f_inl, f2h_inl)
DEF_HTYPE(bf16, b2f_inl, f2b_inl)

#if R2_X86
/* float16 with F16C (+AVX): 8 lanes; tails go through the software path,
 * which rounds identically (nearest even). */
#define F16C_TGT __attribute__((target("avx,f16c")))

F16C_TGT static void f16c_load(float *acc, const uint16_t *a, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))));
	for (; i < n; i++) acc[i] = h2f_inl(a[i]);
}

F16C_TGT static void f16c_store(uint16_t *out, const float *acc, size_t n, int div)
{
	size_t i = 0;
	const float d = (float)(div ? div : 1);
	const __m256 vd = _mm256_set1_ps(d);
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(acc + i);
		if (div) v = _mm256_div_ps(v, vd);
		_mm_storeu_si128((__m128i *)(out + i),
				 _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	}
	for (; i < n; i++) out[i] = f2h_inl(div ? acc[i] / d : acc[i]);
}

/* Vector forms of OP_*: min/max pick b if b < a (resp. >) or b is NaN. */
#define V_SUM(x, y) _mm256_add_ps(x, y)
#define V_PROD(x, y) _mm256_mul_ps(x, y)
#define V_MIN(x, y) _mm256_blendv_ps(_mm256_min_ps(y, x), y, _mm256_cmp_ps(y, y, _CMP_UNORD_Q))
#define V_MAX(x, y) _mm256_blendv_ps(_mm256_max_ps(y, x), y, _mm256_cmp_ps(y, y, _CMP_UNORD_Q))

#define LDH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))

#define DEF_VACC(TGT, LD, CVT, NAME, VOP, OPM)                                                \
	TGT static void NAME(float *acc, const uint16_t *a, size_t n)               \
	{                                                                                \
		size_t i = 0;                                                            \
		for (; i + 8 <= n; i += 8)                                               \
			_mm256_storeu_ps(acc + i, VOP(_mm256_loadu_ps(acc + i), LD(a + i))); \
		for (; i < n; i++) {                                                     \
			const float x = acc[i], y = CVT(a[i]);                       \
			acc[i] = OPM(float, float, x, y);                                \
		}                                                                        \
	}                                                                                \
	TGT static void NAME##2(float *acc, const uint16_t *a, const uint16_t *b,   \
				     size_t n)                                           \
	{                                                                                \
		size_t i = 0;                                                            \
		for (; i + 8 <= n; i += 8) {                                             \
			__m256 t = VOP(_mm256_loadu_ps(acc + i), LD(a + i));            \
			_mm256_storeu_ps(acc + i, VOP(t, LD(b + i)));                   \
		}                                                                        \
		for (; i < n; i++) {                                                     \
			const float x = acc[i], y = CVT(a[i]), z = CVT(b[i]);    \
			const float t = OPM(float, float, x, y);                         \
			acc[i] = OPM(float, float, t, z);                                \
		}                                                                        \
	}

DEF_VACC(F16C_TGT, LDH, h2f_inl, f16c_acc_sum, V_SUM, OP_SUM)
DEF_VACC(F16C_TGT, LDH, h2f_inl, f16c_acc_prod, V_PROD, OP_PROD)
DEF_VACC(F16C_TGT, LDH, h2f_inl, f16c_acc_min, V_MIN, OP_MIN)
DEF_VACC(F16C_TGT, LDH, h2f_inl, f16c_acc_max, V_MAX, OP_MAX)

static const struct hkern f16c_hkern = {
	f16c_load, f16c_store,
	{ f16c_acc_sum, f16c_acc_prod, f16c_acc_min, f16c_acc_max },
	{ f16c_acc_sum2, f16c_acc_prod2, f16c_acc_min2, f16c_acc_max2 },
};

/* bfloat16 with AVX2: widening is a shift; rounding as f2b_inl. */
#define AVX2_TGT __attribute__((target("avx2")))
#define LDB(p) _mm256_castsi256_ps(_mm256_slli_epi32(                        \
	_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))

AVX2_TGT static inline __m128i avx2_f2b(__m256 v)
{
	const __m256i u = _mm256_castps_si256(v);
	const __m256i one = _mm256_set1_epi32(1);
	const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
	const __m256i rnd = _mm256_srli_epi32(
		_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
	const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
	const __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
						 _mm256_set1_epi32(0x7F800000));
	const __m256i r = _mm256_blendv_epi8(rnd, nan, isnan); /* all < 0x10000 */
	const __m256i p = _mm256_packus_epi32(r, r);            /* per 128-bit lane */
	return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

AVX2_TGT static void bf16v_load(float *acc, const uint16_t *a, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, LDB(a + i));
	for (; i < n; i++) acc[i] = b2f_inl(a[i]);
}

AVX2_TGT static void bf16v_store(uint16_t *out, const float *acc, size_t n, int div)
{
	size_t i = 0;
	const float d = (float)(div ? div : 1);
	const __m256 vd = _mm256_set1_ps(d);
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(acc + i);
		if (div) v = _mm256_div_ps(v, vd);
		_mm_storeu_si128((__m128i *)(out + i), avx2_f2b(v));
	}
	for (; i < n; i++) out[i] = f2b_inl(div ? acc[i] / d : acc[i]);
}

DEF_VACC(AVX2_TGT, LDB, b2f_inl, bf16v_acc_sum, V_SUM, OP_SUM)
DEF_VACC(AVX2_TGT, LDB, b2f_inl, bf16v_acc_prod, V_PROD, OP_PROD)
DEF_VACC(AVX2_TGT, LDB, b2f_inl, bf16v_acc_min, V_MIN, OP_MIN)
DEF_VACC(AVX2_TGT, LDB, b2f_inl, bf16v_acc_max, V_MAX, OP_MAX)

static const struct hkern bf16v_hkern = {
	bf16v_load, bf16v_store,
	{ bf16v_acc_sum, bf16v_acc_prod, bf16v_acc_min, bf16v_acc_max },
	{ bf16v_acc_sum2, bf16v_acc_prod2, bf16v_acc_min2, bf16v_acc_max2 },
};

static const struct hkern *bf16_pick(void)
{
	static const struct hkern *picked;
	const struct hkern *k = __atomic_load_n(&picked, __ATOMIC_RELAXED);
	if (!k) {
		__builtin_cpu_init();
		k = __builtin_cpu_supports("avx2") ? &bf16v_hkern : &bf16_hkern;
		__atomic_store_n(&picked, k, __ATOMIC_RELAXED);
	}
	return k;
}

static const struct hkern *f16_pick(void)
{
	static const struct hkern *picked;
	const struct hkern *k = __atomic_load_n(&picked, __ATOMIC_RELAXED);
	if (!k) {
		unsigned a, b, c, dx;
		/* CPUID rather than __builtin_cpu_supports("f16c"), which clang 14
		 * (the fuzzing build, tests/fuzz/) does not know */
		int f16c = __get_cpuid(1, &a, &b, &c, &dx) && (c & bit_AVX) && (c & bit_F16C);
		k = f16c ? &f16c_hkern : &f16_hkern;
		__atomic_store_n(&picked, k, __ATOMIC_RELAXED);
	}
	return k;
}
#else
static const struct hkern *f16_pick(void) { return &f16_hkern; }
static const struct hkern *bf16_pick(void) { return &bf16_hkern; }
#endif

/* ------------------------------------------------------------------------ */
/* Drivers                                                                  */
/* ------------------------------------------------------------------------ */

static void reduce_half(const struct hkern *hk, int opi, uint16_t *out,
			const void *const *in, int nin, size_t count, int div)
{
	float acc[HBLOCK] __attribute__((aligned(64)));
	for (size_t off = 0; off < count; off += HBLOCK) {
		const size_t len = count - off < HBLOCK ? count - off : HBLOCK;
		hk->load(acc, (const uint16_t *)in[0] + off, len);
		int k = 1;
		for (; k + 2 <= nin; k += 2)
			hk->acc2[opi](acc, (const uint16_t *)in[k] + off,
				      (const uint16_t *)in[k + 1] + off, len);
		if (k < nin) hk->acc[opi](acc, (const uint16_t *)in[k] + off, len);
		hk->store(out + off, acc, len, div);
	}
}

static void reduce_plain(const struct kern *k, div_fn dv, size_t esz, void *out,
			 const void *const *in, int nin, size_t count, int div)
{
	unsigned char tmp[R2_BLOCK_BYTES] __attribute__((aligned(64)));
	const size_t blk = R2_BLOCK_BYTES / esz;

	if (nin <= 4 && !div) { /* single streaming pass, nothing to keep hot */
		switch (nin) {
		case 1:
			if (out != in[0]) memmove(out, in[0], count * esz);
			break;
		case 2: k->k2(out, in[0], in[1], count); break;
		case 3: k->k3(out, in[0], in[1], in[2], count); break;
		case 4: k->k4(out, in[0], in[1], in[2], in[3], count); break;
		}
		return;
	}
	for (size_t off = 0; off < count; off += blk) {
		const size_t len = count - off < blk ? count - off : blk;
		const size_t bo = off * esz;
#define P(j) ((const unsigned char *)in[j] + bo)
		unsigned char *o = (unsigned char *)out + bo;
		const void *acc = P(0);
		int j = 1;
		if (nin > 4) {
			k->k4(tmp, P(0), P(1), P(2), P(3), len);
			acc = tmp;
			j = 4;
			while (nin - j > 3) {
				k->k4(tmp, tmp, P(j), P(j + 1), P(j + 2), len);
				j += 3;
			}
		}
		switch (nin - j) { /* last pass: the only one that writes out */
		case 0:
			if (o != acc) memmove(o, acc, len * esz);
			break;
		case 1: k->k2(o, acc, P(j), len); break;
		case 2: k->k3(o, acc, P(j), P(j + 1), len); break;
		case 3: k->k4(o, acc, P(j), P(j + 1), P(j + 2), len); break;
		}
#undef P
		if (div) dv(o, len, div);
	}
}

static int plain_tables(r2ccl_dtype_t dtype, const struct kern **k, div_fn *dv, size_t *esz)
{
	switch (dtype) {
	case R2CCL_INT8: *k = i8_kern; *dv = i8_div; *esz = 1; return 0;
	case R2CCL_UINT8: *k = u8_kern; *dv = u8_div; *esz = 1; return 0;
	case R2CCL_INT32: *k = i32_kern; *dv = i32_div; *esz = 4; return 0;
	case R2CCL_UINT32: *k = u32_kern; *dv = u32_div; *esz = 4; return 0;
	case R2CCL_INT64: *k = i64_kern; *dv = i64_div; *esz = 8; return 0;
	case R2CCL_UINT64: *k = u64_kern; *dv = u64_div; *esz = 8; return 0;
	case R2CCL_FLOAT32: *k = f32_kern; *dv = f32_div; *esz = 4; return 0;
	case R2CCL_FLOAT64: *k = f64_kern; *dv = f64_div; *esz = 8; return 0;
	default: return -EINVAL;
	}
}

/* div: 0 = no AVG division. */
static int reduce_any(void *out, const void *const *in, int nin, size_t count,
		      r2ccl_dtype_t dtype, int opi, int div)
{
	if (dtype == R2CCL_FLOAT16 || dtype == R2CCL_BFLOAT16) {
		if (nin == 1 && !div) {
			if (out != in[0]) memmove(out, in[0], count * 2);
			return 0;
		}
		reduce_half(dtype == R2CCL_FLOAT16 ? f16_pick() : bf16_pick(), opi, out, in, nin,
			    count, div);
		return 0;
	}
	const struct kern *k;
	div_fn dv;
	size_t esz;
	if (plain_tables(dtype, &k, &dv, &esz)) return -EINVAL;
	reduce_plain(&k[opi], dv, esz, out, in, nin, count, div);
	return 0;
}

int r2_reduce(void *out, const void *const *in, int nin, size_t count, r2ccl_dtype_t dtype,
	      r2ccl_redop_t op, int avg_div)
{
	if ((unsigned)dtype >= R2CCL_NUM_DTYPES || (unsigned)op >= R2CCL_NUM_OPS || nin < 1 ||
	    (count && (!out || !in)))
		return -EINVAL;
	if (op == R2CCL_AVG && avg_div < 1) return -EINVAL;
	if (!count) return 0;
	for (int k = 0; k < nin; k++)
		if (!in[k]) return -EINVAL;
	if (op == R2CCL_AVG)
		return reduce_any(out, in, nin, count, dtype, R2CCL_SUM, avg_div == 1 ? 0 : avg_div);
	return reduce_any(out, in, nin, count, dtype, (int)op, 0);
}

int r2_reduce_acc(void *out, const void *in, size_t count, r2ccl_dtype_t dtype,
		  r2ccl_redop_t op)
{
	if ((unsigned)dtype >= R2CCL_NUM_DTYPES || (unsigned)op >= R2CCL_NUM_OPS ||
	    (count && (!out || !in)))
		return -EINVAL;
	if (!count) return 0;
	const void *ins[2] = { out, in };
	return reduce_any(out, ins, 2, count, dtype, op == R2CCL_AVG ? R2CCL_SUM : (int)op, 0);
}

int r2_reduce_finish_avg(void *out, size_t count, r2ccl_dtype_t dtype, r2ccl_redop_t op, int n)
{
	if ((unsigned)dtype >= R2CCL_NUM_DTYPES || (unsigned)op >= R2CCL_NUM_OPS ||
	    (count && !out))
		return -EINVAL;
	if (op != R2CCL_AVG) return 0;
	if (n < 1) return -EINVAL;
	if (!count || n == 1) return 0;
	const void *ins[1] = { out };
	return reduce_any(out, ins, 1, count, dtype, R2CCL_SUM, n);
}
