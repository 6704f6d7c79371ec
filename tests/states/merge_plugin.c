/* A merge plugin written from attncheck/plugin.h (attncheck_merge_problem) and docs/states.md alone, in C99 fp32,
 * with one mistake chosen at build time, the same ones as merge_worker.py:
 *   (none)              the merge as docs/states.md defines it, under any declared convention
 *   MERGE_BUG_NAN       empty states get weight 0 but their O is still multiplied in; 0/0 for a row of empty states
 *   MERGE_BUG_SENTINEL  the declared empty lse (+inf, a finite sentinel) used as a real lse
 *   MERGE_BUG_LAYOUT    lse/max/sum read and written as contiguous [N,B,H,L], ignoring the strides
 *   MERGE_BUG_UNNORMALISED  normalised O summed without dividing by the weights' sum; unnormalised sums taken as 1
 *   MERGE_BUG_SPLIT     the last state is left out
 *   MERGE_BUG_BASE      exp/log in base e whatever base the states declare
 * It merges only: attention problems are declined in supports(). Built with MERGE_NO_ENTRY it lists "merge" but
 * leaves the vtable's merge NULL, which the host refuses at load. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attncheck/plugin.h"

#if defined(MERGE_BUG_NAN)
#define MERGE_NAME "merge-plugin-nan"
#elif defined(MERGE_BUG_SENTINEL)
#define MERGE_NAME "merge-plugin-sentinel"
#elif defined(MERGE_BUG_LAYOUT)
#define MERGE_NAME "merge-plugin-layout"
#elif defined(MERGE_BUG_UNNORMALISED)
#define MERGE_NAME "merge-plugin-unnormalised"
#elif defined(MERGE_BUG_SPLIT)
#define MERGE_NAME "merge-plugin-split"
#elif defined(MERGE_BUG_BASE)
#define MERGE_NAME "merge-plugin-base"
#else
#define MERGE_NAME "merge-plugin"
#endif

typedef union {
  float f;
  uint32_t u;
} bits32;

static float f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float s = (h & 0x8000u) ? -1.0f : 1.0f;
  if (e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexpf((float)m, -24);
  return s * ldexpf((float)(m | 1024), e - 25);
}

/* float rounded to fp16 (nearest even), as bits. */
static uint16_t f16_bits(float f) {
  bits32 b;
  uint32_t sign, a, r;
  b.f = f;
  sign = (b.u >> 16) & 0x8000u, a = b.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
  if (a < 0x38800000u) return (uint16_t)(sign | (uint32_t)nearbyintf(fabsf(f) * 16777216.0f)); /* subnormal */
  r = a - 0x38000000u; /* exponent bias 127 -> 15 */
  return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

static float bf16_value(uint16_t h) {
  bits32 b;
  b.u = (uint32_t)h << 16;
  return b.f;
}

static uint16_t bf16_bits(float f) {
  bits32 b;
  b.f = f;
  if (isnan(f)) return (uint16_t)((b.u >> 16) | 0x40u);
  return (uint16_t)((b.u + 0x7fffu + ((b.u >> 16) & 1u)) >> 16);
}

static float load_o(const attncheck_merge_problem* m, int64_t off) {
  if (m->dtype == ATTNCHECK_DTYPE_F16) return f16_value(((const uint16_t*)m->o_in)[off]);
  if (m->dtype == ATTNCHECK_DTYPE_BF16) return bf16_value(((const uint16_t*)m->o_in)[off]);
  return ((const float*)m->o_in)[off];
}

static void store_o(const attncheck_merge_problem* m, int64_t off, float x) {
  if (m->dtype == ATTNCHECK_DTYPE_F16)
    ((uint16_t*)m->o_out)[off] = f16_bits(x);
  else if (m->dtype == ATTNCHECK_DTYPE_BF16)
    ((uint16_t*)m->o_out)[off] = bf16_bits(x);
  else
    ((float*)m->o_out)[off] = x;
}

/* Offset of stat element (n, b, h, i) of an input, (b, h, i) of an output (n < 0). */
static int64_t stat_at(const attncheck_merge_problem* m, const int64_t* s, int64_t n, int64_t b, int64_t h, int64_t i) {
#ifdef MERGE_BUG_LAYOUT
  (void)s;
  return ((n < 0 ? 0 : n) * m->B * m->H + b * m->H + h) * m->L + i;
#else
  (void)m;
  return n < 0 ? b * s[0] + h * s[1] + i * s[2] : n * s[0] + b * s[1] + h * s[2] + i * s[3];
#endif
}

static float ex(const attncheck_merge_problem* m, float x) {
#ifndef MERGE_BUG_BASE
  if (m->lse_base == ATTNCHECK_LSE_BASE_2) return exp2f(x);
#else
  (void)m;
#endif
  return expf(x);
}

static float lg(const attncheck_merge_problem* m, float x) {
#ifndef MERGE_BUG_BASE
  if (m->lse_base == ATTNCHECK_LSE_BASE_2) return log2f(x);
#else
  (void)m;
#endif
  return logf(x);
}

static int32_t merge_states(const attncheck_merge_problem* m, char* err, size_t err_size) {
  const int norm = m->form == ATTNCHECK_STATE_NORMALISED;
  const float sentinel = m->empty_lse == ATTNCHECK_EMPTY_NEG_INF   ? -INFINITY
                         : m->empty_lse == ATTNCHECK_EMPTY_POS_INF ? INFINITY
                                                                   : (float)m->sentinel;
  const float* xs = norm ? m->lse_in : m->max_in;
  const int64_t* xs_s = norm ? m->lse_in_strides : m->max_in_strides;
  float* xo = norm ? m->lse_out : m->max_out;
  const int64_t* xo_s = norm ? m->lse_out_strides : m->max_out_strides;
  float x[64], l[64], acc[1024];
  int empty[64];
  int64_t b, h, i, n, d, N = m->N;
#ifdef MERGE_BUG_SPLIT
  N = m->N - 1;
#endif
  if (m->N > 64 || m->D > 1024) {
    snprintf(err, err_size, "N = %lld, D = %lld: at most 64 states of 1024 values", (long long)m->N, (long long)m->D);
    return ATTNCHECK_STATUS_ERROR;
  }
  for (b = 0; b < m->B; ++b)
    for (h = 0; h < m->H; ++h)
      for (i = 0; i < m->L; ++i) {
        float X = -INFINITY, S = 0.0f;
        int any = 0;
        for (n = 0; n < N; ++n) {
          x[n] = xs[stat_at(m, xs_s, n, b, h, i)];
#ifdef MERGE_BUG_UNNORMALISED
          l[n] = 1.0f;
#else
          l[n] = norm ? 1.0f : m->sum_in[stat_at(m, m->sum_in_strides, n, b, h, i)];
#endif
          empty[n] = x[n] == sentinel || l[n] == 0.0f;
#ifdef MERGE_BUG_SENTINEL
          empty[n] = 0;
#endif
          if (!empty[n]) X = any ? fmaxf(X, x[n]) : x[n], any = 1;
        }
        for (d = 0; d < m->D; ++d) acc[d] = 0.0f;
        for (n = 0; n < N; ++n) {
#ifdef MERGE_BUG_NAN
          /* An empty state's lse taken as -inf, so its weight is 0 (NaN when every state is empty), then 0 * O:
           * a NaN in an empty state's O leaks. */
          const float w = ex(m, (empty[n] ? -INFINITY : x[n]) - X);
#else
          float w;
          if (empty[n]) continue;
          w = ex(m, x[n] - X);
#endif
          S += w * l[n];
          for (d = 0; d < m->D; ++d) {
            const int64_t* s = m->o_in_strides;
            acc[d] += w * load_o(m, n * s[0] + b * s[1] + h * s[2] + i * s[3] + d * s[4]);
          }
        }
#ifdef MERGE_BUG_NAN
        any = 1; /* no special case for a row of empty states: 0/0 */
#endif
        if (norm)
          xo[stat_at(m, xo_s, -1, b, h, i)] = any ? X + lg(m, S) : sentinel;
        else {
          xo[stat_at(m, xo_s, -1, b, h, i)] = any ? X : sentinel;
          m->sum_out[stat_at(m, m->sum_out_strides, -1, b, h, i)] = any ? S : 0.0f;
        }
        for (d = 0; d < m->D; ++d) {
          const int64_t* s = m->o_out_strides;
          float o = acc[d];
#ifndef MERGE_BUG_UNNORMALISED
          if (norm) o = acc[d] / S;
#endif
          store_o(m, b * s[0] + h * s[1] + i * s[2] + d * s[3], any ? o : 0.0f);
        }
      }
  return ATTNCHECK_STATUS_OK;
}

static int32_t merge_capabilities(attncheck_capabilities* c, char* err, size_t err_size) {
  (void)err, (void)err_size;
  memset(c, 0, sizeof *c);
  c->dtypes = 1u << ATTNCHECK_DTYPE_F32;
  c->layouts = 1u << ATTNCHECK_LAYOUT_BHSD;
  c->alignments = 1u << ATTNCHECK_ALIGN_TOP_LEFT;
  c->fully_masked = 1u << ATTNCHECK_FULLY_MASKED_ZERO;
  c->head_dim_multiple = 1;
  c->notes = "merges attention states only";
  return ATTNCHECK_STATUS_OK;
}

static int32_t merge_only(const attncheck_problem* p, char* reason, size_t reason_size) {
  (void)p;
  snprintf(reason, reason_size, "this plugin merges attention states only");
  return 0;
}

static int32_t no_attention(const attncheck_problem* p, char* err, size_t err_size) {
  (void)p;
  snprintf(err, err_size, "this plugin merges attention states only");
  return ATTNCHECK_STATUS_ERROR;
}

static const char* const merge_features[] = {"merge", NULL};

static const attncheck_plugin merge_vtable = {ATTNCHECK_PLUGIN_ABI_VERSION,
                                              MERGE_NAME,
                                              "fp32 merge of attention states (tests/states/merge_plugin.c)",
                                              merge_capabilities,
                                              NULL,
                                              merge_only,
                                              no_attention,
                                              sizeof(attncheck_plugin),
                                              merge_features,
                                              NULL,
#ifdef MERGE_NO_ENTRY
                                              NULL,
                                              NULL,
                                              NULL,
                                              NULL};
#else
                                              NULL,
                                              merge_states,
                                              NULL,
                                              NULL};
#endif

ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void) { return &merge_vtable; }
