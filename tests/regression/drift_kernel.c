/* Test kernels for baseline comparison (tests/regression): fp32 attention through the C plugin ABI, built in
 * variants that all pass plain `verify` but differ in accuracy. Two families, each variant keeping its family's
 * name so that a report of one variant compares with a report of the family's base:
 *   drift-wide (DRIFT_WIDE): computes in double and rounds the outputs to fp32 once. Variants: DRIFT_FP32_WORK (the
 *     same loops in float: fp64 -> fp32 working precision), DRIFT_TRUNCATE (outputs truncated toward zero instead
 *     of rounded), DRIFT_NO_CAUSAL (causal support lost).
 *   drift-fp32: computes in float as a fused kernel does. Variants: DRIFT_ORDER=1 (keys summed in reverse),
 *     DRIFT_ORDER=2 (keys summed in blocks of 16, then the blocks), DRIFT_FAST_EXP (an exp good to 20 bits),
 *     DRIFT_RCP_BITS=n (1/sum with its n lowest significand bits cleared: an approximate reciprocal); and at run
 *     time DRIFT_SPLITS=n (keys split into n chunks reduced separately and merged, as a kernel that splits a row
 *     across threads does).
 * Supported: fp32, BHSD/BSHD, GQA, causal (every alignment), key padding, boolean masks, windows; nothing else. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attncheck/plugin.h"

#ifdef DRIFT_WIDE
#define DRIFT_NAME "drift-wide"
#ifdef DRIFT_FP32_WORK
typedef float acc_t;
#else
typedef double acc_t;
#endif
#else
#define DRIFT_NAME "drift-fp32"
typedef float acc_t;
#endif
#ifndef DRIFT_ORDER
#define DRIFT_ORDER 0
#endif

enum { MAX_KEYS = 4096, BLOCK = 16 };

static int32_t drift_capabilities(attncheck_capabilities* c, char* err, size_t err_size) {
  (void)err, (void)err_size;
  memset(c, 0, sizeof *c);
  c->dtypes = 1u << ATTNCHECK_DTYPE_F32;
  c->layouts = (1u << ATTNCHECK_LAYOUT_BHSD) | (1u << ATTNCHECK_LAYOUT_BSHD);
  c->alignments =
      (1u << ATTNCHECK_ALIGN_TOP_LEFT) | (1u << ATTNCHECK_ALIGN_BOTTOM_RIGHT) | (1u << ATTNCHECK_ALIGN_EXPLICIT);
  c->fully_masked = (1u << ATTNCHECK_FULLY_MASKED_NAN) | (1u << ATTNCHECK_FULLY_MASKED_ZERO);
  c->gqa = c->cross = c->dqk_ne_dv = c->causal = c->per_batch_offsets = c->key_padding = c->bool_mask = c->window = 1;
#ifdef DRIFT_NO_CAUSAL
  c->causal = 0;
#endif
  c->weights_out = c->lse_out = 1;
  c->head_dim_multiple = 1;
  c->notes = "regression test kernel";
  return ATTNCHECK_STATUS_OK;
}

static int32_t drift_supports(const attncheck_problem* p, char* reason, size_t reason_size) {
  if (p->Lk > MAX_KEYS) {
    snprintf(reason, reason_size, "Lk=%lld > %d", (long long)p->Lk, MAX_KEYS);
    return 0;
  }
  return 1;
}

static int visible(const attncheck_problem* p, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t diag = i + p->diagonal_offset[b];
  if (p->causal && j > diag) return 0;
  if (p->key_lengths && j >= p->key_lengths[b]) return 0;
  if (p->window_left >= 0 && j < diag - p->window_left) return 0;
  if (p->window_right >= 0 && j > diag + p->window_right) return 0;
  if (p->mask &&
      !p->mask[b * p->mask_strides[0] + h * p->mask_strides[1] + i * p->mask_strides[2] + j * p->mask_strides[3]])
    return 0;
  return 1;
}

static acc_t exp_of(acc_t x) {
#ifdef DRIFT_FAST_EXP
  /* An exp good to 20 significant bits, as approximate exp units deliver: expf rounded to nearest at 20 bits, so
   * every result is off by up to 8 ulps (4 on average) where expf stays within 1. (A degree-4 polynomial with errors
   * up to 22 ulps fails plain verify; a 2-ulp one is not detectable.) */
  union {
    float f;
    uint32_t u;
  } b;
  b.f = expf((float)x);
  b.u = (b.u + 0x8u) & ~0xFu;
  return b.f;
#elif defined(DRIFT_WIDE) && !defined(DRIFT_FP32_WORK)
  return exp(x);
#else
  return expf(x);
#endif
}

static acc_t reciprocal(acc_t s) {
  acc_t r = (acc_t)1 / s;
#ifdef DRIFT_RCP_BITS
  union {
    float f;
    uint32_t u;
  } b;
  b.f = (float)r;
  b.u &= ~((1u << DRIFT_RCP_BITS) - 1u);
  r = b.f;
#endif
  return r;
}

/* The one rounding to the output dtype: to nearest, or (DRIFT_TRUNCATE) toward zero. */
static float to_out(acc_t x) {
  float f = (float)x;
#ifdef DRIFT_TRUNCATE
  if (isfinite(x) && fabs((double)f) > fabs((double)x)) f = nextafterf(f, 0.0f);
#endif
  return f;
}

/* Sum of t[idx[0..n)] in the variant's order. */
static acc_t sum_of(const acc_t* t, const int64_t* idx, int64_t n) {
  acc_t s = 0;
  if (DRIFT_ORDER == 1) {
    for (int64_t k = n; k-- > 0;) s += t[idx[k]];
  } else if (DRIFT_ORDER == 2) {
    for (int64_t k0 = 0; k0 < n; k0 += BLOCK) {
      acc_t part = 0;
      for (int64_t k = k0; k < n && k < k0 + BLOCK; ++k) part += t[idx[k]];
      s += part;
    }
  } else {
    for (int64_t k = 0; k < n; ++k) s += t[idx[k]];
  }
  return s;
}

static int32_t drift_run(const attncheck_problem* p, char* err, size_t err_size) {
  if (p->dtype != ATTNCHECK_DTYPE_F32) {
    snprintf(err, err_size, "dtype %d: fp32 only", (int)p->dtype);
    return ATTNCHECK_STATUS_ERROR;
  }
  const char* env = getenv("DRIFT_SPLITS");
  const int64_t splits = env && atoi(env) > 0 ? atoi(env) : 1;
  const float *q = (const float*)p->q, *k = (const float*)p->k, *v = (const float*)p->v;
  const int64_t *qs = p->q_strides, *ks = p->k_strides, *vs = p->v_strides, *os = p->out_strides;
  static acc_t score[MAX_KEYS], term[MAX_KEYS];
  static int64_t idx[MAX_KEYS];
  const int64_t group = p->Hq / p->Hkv;
  for (int64_t b = 0; b < p->B; ++b)
    for (int64_t h = 0; h < p->Hq; ++h)
      for (int64_t i = 0; i < p->Lq; ++i) {
        const int64_t kh = h / group;
        int64_t n = 0;
        for (int64_t j = 0; j < p->Lk; ++j) {
          if (!visible(p, b, h, i, j)) continue;
          acc_t dot = 0;
          for (int64_t d = 0; d < p->Dqk; ++d)
            dot += (acc_t)q[b * qs[0] + h * qs[1] + i * qs[2] + d * qs[3]] *
                   (acc_t)k[b * ks[0] + kh * ks[1] + j * ks[2] + d * ks[3]];
          score[j] = dot * (acc_t)p->scale;
          idx[n++] = j;
        }
        float* out = (float*)p->out;
        if (n == 0) { /* fully masked row: the problem's policy */
          const float fill = p->fully_masked == ATTNCHECK_FULLY_MASKED_NAN ? NAN : 0.0f;
          for (int64_t d = 0; d < p->Dv; ++d) out[b * os[0] + h * os[1] + i * os[2] + d * os[3]] = fill;
          if (p->lse)
            ((float*)p->lse)[b * p->lse_strides[0] + h * p->lse_strides[1] + i * p->lse_strides[2]] = -INFINITY;
          if (p->weights)
            for (int64_t j = 0; j < p->Lk; ++j)
              ((float*)p->weights)[b * p->weights_strides[0] + h * p->weights_strides[1] + i * p->weights_strides[2] +
                                   j * p->weights_strides[3]] = fill;
          continue;
        }
        /* Each of `splits` chunks of the visible keys has its own max m_c; the chunks merge by rescaling with
         * exp(m_c - m), as split-K kernels do. One chunk is the plain two-pass softmax. */
        acc_t m = -INFINITY, sum = 0, cm[64], cscale[64];
        const int64_t nc = splits < 64 ? splits : 64, per = (n + nc - 1) / nc;
        for (int64_t c = 0; c < nc; ++c) {
          cm[c] = -INFINITY;
          for (int64_t t = c * per; t < n && t < (c + 1) * per; ++t)
            cm[c] = score[idx[t]] > cm[c] ? score[idx[t]] : cm[c];
          if (cm[c] > m) m = cm[c];
        }
        for (int64_t c = 0; c < nc; ++c) {
          const int64_t t0 = c * per, t1 = (c + 1) * per < n ? (c + 1) * per : n;
          if (t0 >= t1) {
            cscale[c] = 0;
            continue;
          }
          for (int64_t t = t0; t < t1; ++t) term[idx[t]] = exp_of(score[idx[t]] - cm[c]);
          cscale[c] = exp_of(cm[c] - m);
          sum += sum_of(term, idx + t0, t1 - t0) * cscale[c];
        }
        const acc_t r = reciprocal(sum);
        if (p->lse)
          ((float*)p->lse)[b * p->lse_strides[0] + h * p->lse_strides[1] + i * p->lse_strides[2]] =
              to_out(m + (acc_t)log((double)sum));
        if (p->weights) {
          float* w = (float*)p->weights;
          const int64_t* ws = p->weights_strides;
          for (int64_t j = 0; j < p->Lk; ++j) w[b * ws[0] + h * ws[1] + i * ws[2] + j * ws[3]] = 0.0f;
          for (int64_t c = 0; c < nc; ++c)
            for (int64_t t = c * per; t < n && t < (c + 1) * per; ++t)
              w[b * ws[0] + h * ws[1] + i * ws[2] + idx[t] * ws[3]] = to_out(term[idx[t]] * cscale[c] * r);
        }
        for (int64_t d = 0; d < p->Dv; ++d) {
          acc_t acc = 0;
          for (int64_t c = 0; c < nc; ++c) {
            const int64_t t0 = c * per, t1 = (c + 1) * per < n ? (c + 1) * per : n;
            if (t0 >= t1) continue;
            static acc_t pv[MAX_KEYS];
            for (int64_t t = t0; t < t1; ++t)
              pv[idx[t]] = term[idx[t]] * (acc_t)v[b * vs[0] + kh * vs[1] + idx[t] * vs[2] + d * vs[3]];
            acc += sum_of(pv, idx + t0, t1 - t0) * cscale[c];
          }
          out[b * os[0] + h * os[1] + i * os[2] + d * os[3]] = to_out(acc * r);
        }
      }
  return ATTNCHECK_STATUS_OK;
}

static int32_t drift_declarations(attncheck_declarations* d, char* err, size_t err_size) {
  (void)err, (void)err_size;
  d->deterministic = 1;
  d->fully_masked_policy = -1;
  return ATTNCHECK_STATUS_OK;
}

static const char* const drift_features[] = {NULL};

static const attncheck_plugin drift_vtable = {ATTNCHECK_PLUGIN_ABI_VERSION,
                                              DRIFT_NAME,
                                              "regression test kernel (tests/regression/drift_kernel.c)",
                                              drift_capabilities,
                                              NULL,
                                              drift_supports,
                                              drift_run,
                                              sizeof(attncheck_plugin),
                                              drift_features,
                                              drift_declarations,
                                              NULL,
                                              NULL,
                                              NULL,
                                              NULL};

ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void) { return &drift_vtable; }
