/* The element formats the example plugin reads and writes, in plain C99: fp32, the 8-bit codes of fp8 inputs
 * (OCP FP8: e4m3 has no infinities and S.1111.111 is NaN; e5m2 is IEEE-like) and bf16 (the output of an fp8
 * problem). Included by example_plugin.c only. */
#ifndef EXAMPLE_FORMATS_H
#define EXAMPLE_FORMATS_H

#include <math.h>
#include <stdint.h>

#include "attncheck/plugin.h"

/* float rounded to bf16 (nearest even), as bits; NaN and infinities stay what they are. */
static uint16_t bf16_bits(float f) {
  union {
    float f;
    uint32_t u;
  } b;
  b.f = f;
  if (isnan(f)) return (uint16_t)((b.u >> 16) | 0x40u);
  return (uint16_t)((b.u + 0x7fffu + ((b.u >> 16) & 1u)) >> 16);
}

#ifdef ATTNCHECK_EXT_FP8
/* The value of an fp8 code (exact in float). */
static float fp8_value(uint8_t c, int32_t dtype) {
  const int e5 = dtype == ATTNCHECK_DTYPE_E5M2, mbits = e5 ? 2 : 3, bias = e5 ? 15 : 7;
  const int e = (c & 0x7f) >> mbits, m = c & ((1 << mbits) - 1);
  const float s = (c & 0x80) ? -1.0f : 1.0f;
  if (e5 && e == 31) return m ? NAN : s * INFINITY;
  if (!e5 && e == 15 && m == 7) return NAN;
  if (e == 0) return s * ldexpf((float)m, 1 - bias - mbits); /* subnormal */
  return s * ldexpf((float)(m | (1 << mbits)), e - bias - mbits);
}
#endif

#ifdef ATTNCHECK_EXT_KV_QUANT
/* An f16 or bf16 scale's value (exact in float). */
static float half_value(uint16_t h, int32_t dtype) {
  union {
    float f;
    uint32_t u;
  } b;
  if (dtype == ATTNCHECK_DTYPE_BF16) {
    b.u = (uint32_t)h << 16;
    return b.f;
  }
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float s = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexpf((float)m, -24);
  return s * ldexpf((float)(m | 0x400), e - 25);
}
/* Element `off` of a scale tensor in `dtype` (f32, f16 or bf16). */
static float scale_value(const void* base, int64_t off, int32_t dtype) {
  if (dtype == ATTNCHECK_DTYPE_F32) return ((const float*)base)[off];
  return half_value(((const uint16_t*)base)[off], dtype);
}
/* The value of a quantized cache's code (int8, or fp8), before its scale. */
static float code_value(const void* base, int64_t off, int32_t codes) {
  if (codes == ATTNCHECK_DTYPE_I8) return (float)((const int8_t*)base)[off];
  return fp8_value(((const uint8_t*)base)[off], codes);
}
#endif

/* Element `off` of an input tensor (q, k, v, past) as float: fp32, or an fp8 code's value (descale not applied). */
static float load(const attncheck_problem* p, const void* base, int64_t off) {
#ifdef ATTNCHECK_EXT_FP8
  if (p->dtype == ATTNCHECK_DTYPE_E4M3 || p->dtype == ATTNCHECK_DTYPE_E5M2)
    return fp8_value(((const uint8_t*)base)[off], p->dtype);
#else
  (void)p;
#endif
  return ((const float*)base)[off];
}

/* Bytes of one q, k or v element. */
static int64_t element_size(const attncheck_problem* p) { return p->dtype == ATTNCHECK_DTYPE_F32 ? 4 : 1; }

#endif
