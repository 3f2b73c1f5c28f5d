/* SPDX-License-Identifier: MIT */
/*
 * Reduction kernels (CPU): every type and op of r2ccl.h.
 *
 * Semantics (documented in docs/architecture.md, "Reductions"):
 *  - Integers wrap (two's complement for signed) on sum/prod overflow.
 *  - avg = sum over n inputs, then divided by n: integers truncate toward zero
 *    (C division), floats divide once at the end.
 *  - float16/bfloat16 are accumulated in float32 and rounded to nearest even
 *    once per output element (what NCCL does for its multi-input reductions).
 *  - min/max: NaN propagates (if any input is NaN, the result is NaN);
 *    +-inf compare as usual; sum of +inf and -inf is NaN (IEEE).
 */
#ifndef R2CCL_REDUCE_H
#define R2CCL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "r2ccl.h"

/* out[i] = op(in[0][i], ..., in[nin-1][i]) for i < count; then, for AVG, the
 * division by avg_div (the rank count; pass nin for a one-shot reduction).
 * out may alias any input. nin >= 1. Returns 0 or -EINVAL (bad type/op). */
int r2_reduce(void *out, const void *const *in, int nin, size_t count, r2ccl_dtype_t dtype,
	      r2ccl_redop_t op, int avg_div);

/* Accumulating form for pipelines: out[i] = op(out[i], in[i]); no AVG
 * division (AVG accumulates as SUM); finish with r2_reduce_finish_avg. */
int r2_reduce_acc(void *out, const void *in, size_t count, r2ccl_dtype_t dtype,
		  r2ccl_redop_t op);
/* For AVG: out[i] /= n (integers truncate). No-op for other ops. */
int r2_reduce_finish_avg(void *out, size_t count, r2ccl_dtype_t dtype, r2ccl_redop_t op, int n);

/* Scalar conversions, exposed for tests and for the engine. */
float r2_half_to_float(uint16_t h);
uint16_t r2_float_to_half(float f);   /* round to nearest even, NaN stays NaN */
float r2_bf16_to_float(uint16_t h);
uint16_t r2_float_to_bf16(float f);   /* round to nearest even, NaN stays NaN */

#endif
