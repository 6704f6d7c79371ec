/* A module plugin written from attncheck/plugin.h (attncheck_module_problem) and docs/module.md alone, in C99 with
 * double arithmetic, with one module mistake chosen at build time (docs/module.md's diagnosis tags):
 *   (none)                 the module as plugin.h describes it: projections in the declared packing, heads split
 *                          head-major, attention, heads merged, Wo and its bias
 *   MODULE_BUG_QKV_ORDER   a packed weight split with the other packing's row order (packed <-> interleaved)
 *   MODULE_BUG_HEAD_SPLIT  heads split and merged with a bare view: [B, L, H*D] read as [B, H, L, D], no transpose
 *   MODULE_BUG_OUT_BIAS    Wo's bias left out
 * It runs modules only: attention problems are declined in supports(). Built with MODULE_NO_ENTRY it lists "module"
 * but leaves the vtable's run_module NULL, which the host refuses at load. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attncheck/plugin.h"

#if defined(MODULE_BUG_QKV_ORDER)
#define MODULE_NAME "module-plugin-qkv-order"
#elif defined(MODULE_BUG_HEAD_SPLIT)
#define MODULE_NAME "module-plugin-head-split"
#elif defined(MODULE_BUG_OUT_BIAS)
#define MODULE_NAME "module-plugin-out-bias"
#else
#define MODULE_NAME "module-plugin"
#endif

typedef union {
  float f;
  uint32_t u;
} bits32;

static double f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double s = (h & 0x8000u) ? -1.0 : 1.0;
  if (e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp((double)m, -24);
  return s * ldexp((double)(m | 1024), e - 25);
}

/* float rounded to fp16 (nearest even), as bits. */
static uint16_t f16_bits(float f) {
  bits32 b;
  uint32_t sign, a, r;
  b.f = f;
  sign = (b.u >> 16) & 0x8000u, a = b.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) return (uint16_t)(sign | (uint32_t)nearbyintf(fabsf(f) * 16777216.0f));
  r = a - 0x38000000u;
  return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

static double bf16_value(uint16_t h) {
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

static double load(const void* p, int32_t dtype, int64_t off) {
  switch (dtype) {
    case ATTNCHECK_DTYPE_F64: return ((const double*)p)[off];
    case ATTNCHECK_DTYPE_F32: return ((const float*)p)[off];
    case ATTNCHECK_DTYPE_F16: return f16_value(((const uint16_t*)p)[off]);
    default: return bf16_value(((const uint16_t*)p)[off]);
  }
}

static void store(void* p, int32_t dtype, int64_t off, double x) {
  switch (dtype) {
    case ATTNCHECK_DTYPE_F64: ((double*)p)[off] = x; break;
    case ATTNCHECK_DTYPE_F32: ((float*)p)[off] = (float)x; break;
    case ATTNCHECK_DTYPE_F16: ((uint16_t*)p)[off] = f16_bits((float)x); break;
    default: ((uint16_t*)p)[off] = bf16_bits((float)x);
  }
}

/* The row of wqkv that holds dim d of head h of projection `which` (0 q, 1 k, 2 v), in packing pk. */
static int64_t packed_row(const attncheck_module_problem* m, int32_t pk, int which, int64_t h, int64_t d) {
  const attncheck_problem* a = m->attn;
  const int64_t G = a->Hq / a->Hkv, block = G * a->Dqk + a->Dqk + a->Dv;
  if (pk == ATTNCHECK_PACKING_PACKED) {
    if (which == 0) return h * a->Dqk + d;
    if (which == 1) return a->Hq * a->Dqk + h * a->Dqk + d;
    return a->Hq * a->Dqk + a->Hkv * a->Dqk + h * a->Dv + d;
  }
  if (which == 0) return (h / G) * block + (h % G) * a->Dqk + d;
  if (which == 1) return h * block + G * a->Dqk + d;
  return h * block + G * a->Dqk + a->Dqk + d;
}

/* One projection into heads: out[((b*H + h)*L + l)*D + d] = x_l . W[row] + bias[row] for row of (h, d). */
static void project(const attncheck_module_problem* m, int which, double* out) {
  const attncheck_problem* a = m->attn;
  const int cross = m->d_in2 > 0 && which > 0;
  const void* x = cross ? m->x2 : m->x;
  const int64_t* xs = cross ? m->x2_strides : m->x_strides;
  const int64_t L = which == 0 ? a->Lq : a->Lk, in = cross ? m->d_in2 : m->d_in;
  const int64_t H = which == 0 ? a->Hq : a->Hkv, D = which == 2 ? a->Dv : a->Dqk;
  const void *w = m->wqkv, *bias = m->bqkv;
  const int64_t *ws = m->wqkv_strides, *bs = m->bqkv_strides;
  int32_t pk = m->packing;
  int64_t b, l, h, d, e;
  if (pk == ATTNCHECK_PACKING_SEPARATE) {
    w = which == 0 ? m->wq : which == 1 ? m->wk : m->wv;
    ws = which == 0 ? m->wq_strides : which == 1 ? m->wk_strides : m->wv_strides;
    bias = which == 0 ? m->bq : which == 1 ? m->bk : m->bv;
    bs = which == 0 ? m->bq_strides : which == 1 ? m->bk_strides : m->bv_strides;
  }
#ifdef MODULE_BUG_QKV_ORDER
  if (pk != ATTNCHECK_PACKING_SEPARATE)
    pk = pk == ATTNCHECK_PACKING_PACKED ? ATTNCHECK_PACKING_INTERLEAVED : ATTNCHECK_PACKING_PACKED;
#endif
  for (b = 0; b < a->B; ++b)
    for (l = 0; l < L; ++l)
      for (h = 0; h < H; ++h)
        for (d = 0; d < D; ++d) {
          const int64_t row = pk == ATTNCHECK_PACKING_SEPARATE ? h * D + d : packed_row(m, pk, which, h, d);
          double acc = m->qkv_bias ? load(bias, a->dtype, row * bs[0]) : 0.0;
          int64_t dst = ((b * H + h) * L + l) * D + d;
#ifdef MODULE_BUG_HEAD_SPLIT
          dst = b * H * L * D + l * H * D + h * D + d; /* [B, L, H*D] memory read as [B, H, L, D] */
#endif
          for (e = 0; e < in; ++e)
            acc += load(x, a->dtype, b * xs[0] + l * xs[1] + e * xs[2]) * load(w, a->dtype, row * ws[0] + e * ws[1]);
          out[dst] = acc;
        }
}

/* Whether key j is visible to query i of batch b (causal, window, key padding, boolean mask). */
static int visible(const attncheck_problem* a, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t diag = i + a->diagonal_offset[b];
  if (a->causal && j > diag) return 0;
  if (a->window_left >= 0 && j < diag - a->window_left) return 0;
  if (a->window_right >= 0 && j > diag + a->window_right) return 0;
  if (a->key_lengths && j >= a->key_lengths[b]) return 0;
  if (a->mask &&
      !a->mask[b * a->mask_strides[0] + h * a->mask_strides[1] + i * a->mask_strides[2] + j * a->mask_strides[3]])
    return 0;
  return 1;
}

static int32_t module_supports(const attncheck_module_problem* m, char* reason, size_t n) {
  if (m->attn->fill != ATTNCHECK_FILL_NEG_INF) {
    snprintf(reason, n, "module-plugin: a finite mask fill is not implemented");
    return 0;
  }
  if (m->attn->next) { /* only the case name may be chained: no sinks, scores, KV cache, ... */
    const attncheck_extension* e = m->attn->next;
    for (; e; e = e->next)
      if (e->tag != ATTNCHECK_EXT_CASE_NAME) {
        snprintf(reason, n, "module-plugin: attention extension %u not implemented", (unsigned)e->tag);
        return 0;
      }
  }
  return 1;
}

static int32_t module_run(const attncheck_module_problem* m, char* err, size_t n) {
  const attncheck_problem* a = m->attn;
  const int64_t B = a->B, Hq = a->Hq, Lq = a->Lq, Lk = a->Lk, Dqk = a->Dqk, Dv = a->Dv, G = a->Hq / a->Hkv;
  const int64_t HD = Hq * Dv;
  double* q = malloc(sizeof(double) * (size_t)(B * Hq * Lq * Dqk));
  double* k = malloc(sizeof(double) * (size_t)(B * a->Hkv * Lk * Dqk));
  double* v = malloc(sizeof(double) * (size_t)(B * a->Hkv * Lk * Dv));
  double* merged = calloc((size_t)(B * Lq * HD), sizeof(double));
  double *p = malloc(sizeof(double) * (size_t)Lk), *wsum = calloc((size_t)(B * Lq * Lk), sizeof(double));
  int64_t b, h, i, j, d, c;
  if (!q || !k || !v || !merged || !p || !wsum) {
    free(q), free(k), free(v), free(merged), free(p), free(wsum);
    snprintf(err, n, "module-plugin: out of memory");
    return ATTNCHECK_STATUS_ERROR;
  }
  project(m, 0, q), project(m, 1, k), project(m, 2, v);
  for (b = 0; b < B; ++b)
    for (h = 0; h < Hq; ++h)
      for (i = 0; i < Lq; ++i) {
        const double* qi = q + ((b * Hq + h) * Lq + i) * Dqk;
        const int64_t kvh = h / G;
        double mx = -INFINITY, total = 0.0;
        for (j = 0; j < Lk; ++j) {
          const double* kj = k + ((b * a->Hkv + kvh) * Lk + j) * Dqk;
          double s = 0.0;
          for (d = 0; d < Dqk; ++d) s += qi[d] * kj[d];
          s *= a->scale;
          if (a->softcap > 0) s = a->softcap * tanh(s / a->softcap);
          if (a->bias)
            s +=
                load(a->bias, a->bias_dtype,
                     b * a->bias_strides[0] + h * a->bias_strides[1] + i * a->bias_strides[2] + j * a->bias_strides[3]);
          p[j] = visible(a, b, h, i, j) ? s : -INFINITY;
          if (p[j] > mx) mx = p[j];
        }
        for (j = 0; j < Lk; ++j) total += p[j] = mx == -INFINITY ? 0.0 : exp(p[j] - mx);
        for (j = 0; j < Lk; ++j) {
          if (total > 0)
            p[j] /= total;
          else if (a->fully_masked == ATTNCHECK_FULLY_MASKED_UNIFORM)
            p[j] = 1.0 / (double)Lk;
          else
            p[j] = a->fully_masked == ATTNCHECK_FULLY_MASKED_NAN ? NAN : 0.0;
          if (m->weights && !m->average_weights)
            store(m->weights, a->stat_dtype,
                  b * m->weights_strides[0] + h * m->weights_strides[1] + i * m->weights_strides[2] +
                      j * m->weights_strides[3],
                  p[j]);
          wsum[(b * Lq + i) * Lk + j] += p[j] / (double)Hq;
          if (a->dropout_p > 0) /* the weights output is before dropout; the output after it */
            p[j] = a->keep[b * a->keep_strides[0] + h * a->keep_strides[1] + i * a->keep_strides[2] +
                           j * a->keep_strides[3]]
                       ? p[j] / (1.0 - a->dropout_p)
                       : 0.0;
        }
        for (d = 0; d < Dv; ++d) {
          double o = 0.0;
          int64_t dst = (b * Lq + i) * HD + h * Dv + d;
#ifdef MODULE_BUG_HEAD_SPLIT
          dst = ((b * Hq + h) * Lq + i) * Dv + d; /* [B, Hq, Lq, Dv] memory read as [B, Lq, Hq*Dv] */
#endif
          for (j = 0; j < Lk; ++j) o += p[j] * v[((b * a->Hkv + kvh) * Lk + j) * Dv + d];
          merged[dst] = o;
        }
      }
  if (m->weights && m->average_weights)
    for (b = 0; b < B; ++b)
      for (i = 0; i < Lq; ++i)
        for (j = 0; j < Lk; ++j)
          store(m->weights, a->stat_dtype,
                b * m->weights_strides[0] + i * m->weights_strides[2] + j * m->weights_strides[3],
                wsum[(b * Lq + i) * Lk + j]);
  for (b = 0; b < B; ++b)
    for (i = 0; i < Lq; ++i)
      for (c = 0; c < m->d_out; ++c) {
        double acc = 0.0;
#ifndef MODULE_BUG_OUT_BIAS
        if (m->out_bias) acc = load(m->bo, a->dtype, c * m->bo_strides[0]);
#endif
        for (d = 0; d < HD; ++d)
          acc += merged[(b * Lq + i) * HD + d] * load(m->wo, a->dtype, c * m->wo_strides[0] + d * m->wo_strides[1]);
        store(m->y, a->dtype, b * m->y_strides[0] + i * m->y_strides[1] + c * m->y_strides[2], acc);
      }
  free(q), free(k), free(v), free(merged), free(p), free(wsum);
  return ATTNCHECK_STATUS_OK;
}

static int32_t module_capabilities(attncheck_capabilities* c, char* err, size_t n) {
  (void)err, (void)n;
  memset(c, 0, sizeof *c);
  c->dtypes = 1u << ATTNCHECK_DTYPE_F32;
  c->layouts = 1u << ATTNCHECK_LAYOUT_BHSD;
  c->alignments = 1u << ATTNCHECK_ALIGN_TOP_LEFT;
  c->fully_masked = 1u << ATTNCHECK_FULLY_MASKED_ZERO;
  c->head_dim_multiple = 1;
  c->notes = "runs attention modules only";
  return ATTNCHECK_STATUS_OK;
}

static int32_t module_only(const attncheck_problem* p, char* reason, size_t n) {
  (void)p;
  snprintf(reason, n, "this plugin runs attention modules only");
  return 0;
}

static int32_t no_attention(const attncheck_problem* p, char* err, size_t n) {
  (void)p;
  snprintf(err, n, "this plugin runs attention modules only");
  return ATTNCHECK_STATUS_ERROR;
}

static const char* const module_features[] = {"module", NULL};

static const attncheck_plugin module_vtable = {ATTNCHECK_PLUGIN_ABI_VERSION,
                                               MODULE_NAME,
                                               "attention module in C99 double (tests/module/module_plugin.c)",
                                               module_capabilities,
                                               NULL,
                                               module_only,
                                               no_attention,
                                               sizeof(attncheck_plugin),
                                               module_features,
                                               NULL,
                                               NULL,
                                               NULL, /* no merge */
#ifdef MODULE_NO_ENTRY
                                               module_supports,
                                               NULL};
#else
                                               module_supports,
                                               module_run};
#endif

ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void) { return &module_vtable; }
