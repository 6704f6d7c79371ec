/* Test-only plugins that are right within tolerance but break an invariance promise (docs/invariance.md), one per
 * macro: VARIANT_RANDOM_ORDER sums the keys of every row starting at a key that changes on each call (a scheduler
 * that claims work in arrival order); VARIANT_BATCH_SPLIT splits the keys into max(1, 4 / B) chunks merged at the end,
 * so the summation order follows the batch size (split-KV decoding chosen from the batch); VARIANT_PADDING_MAX takes
 * each row's running max over the keys up to the longest sequence in the batch, reading its own padded slots up to a
 * neighbour's length (the shift cancels in exact arithmetic, not in rounding). Each declares deterministic and
 * batch_invariant, as a kernel that believes it is would. fp32, both layouts, GQA, causal, key padding, lse, weights,
 * the zero policy. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attncheck/plugin.h"

#if defined(VARIANT_RANDOM_ORDER)
#define VARIANT_NAME "variant-random-order"
#elif defined(VARIANT_BATCH_SPLIT)
#define VARIANT_NAME "variant-batch-split"
#elif defined(VARIANT_PADDING_MAX)
#define VARIANT_NAME "variant-padding-max"
#else
#error "define VARIANT_RANDOM_ORDER, VARIANT_BATCH_SPLIT or VARIANT_PADDING_MAX"
#endif

#define MAX_KEYS 4096

static int32_t caps(attncheck_capabilities* c, char* err, size_t n) {
  (void)err, (void)n;
  memset(c, 0, sizeof *c);
  c->dtypes = 1u << ATTNCHECK_DTYPE_F32;
  c->layouts = (1u << ATTNCHECK_LAYOUT_BHSD) | (1u << ATTNCHECK_LAYOUT_BSHD);
  c->alignments = (1u << ATTNCHECK_ALIGN_TOP_LEFT) | (1u << ATTNCHECK_ALIGN_BOTTOM_RIGHT);
  c->fully_masked = 1u << ATTNCHECK_FULLY_MASKED_ZERO;
  c->gqa = c->cross = c->dqk_ne_dv = c->causal = c->key_padding = c->lse_out = c->weights_out = 1;
  c->head_dim_multiple = 1;
  c->notes = "invariance test variant";
  return ATTNCHECK_STATUS_OK;
}

static int32_t supports(const attncheck_problem* p, char* reason, size_t n) {
  if (p->Lk > MAX_KEYS || p->Dv > 512) {
    snprintf(reason, n, "Lk=%lld > %d or Dv=%lld > 512", (long long)p->Lk, MAX_KEYS, (long long)p->Dv);
    return 0;
  }
  return 1;
}

static int64_t key_length(const attncheck_problem* p, int64_t b) { return p->key_lengths ? p->key_lengths[b] : p->Lk; }

/* The first key of the summation order of this call's rows. */
static int64_t start_key(int64_t n) {
#if defined(VARIANT_RANDOM_ORDER)
  static uint64_t calls = 0;
  calls = calls * 6364136223846793005ull + 1442695040888963407ull;
  return n > 0 ? (int64_t)((calls >> 33) % (uint64_t)n) : 0;
#else
  (void)n;
  return 0;
#endif
}

static int32_t run(const attncheck_problem* p, char* err, size_t n) {
  (void)err, (void)n;
  const float *q = p->q, *k = p->k, *v = p->v;
  const int64_t *qs = p->q_strides, *ks = p->k_strides, *vs = p->v_strides, *os = p->out_strides;
  const int64_t group = p->Hq / p->Hkv;
  int64_t longest = 0;
  for (int64_t b = 0; b < p->B; ++b)
    if (key_length(p, b) > longest) longest = key_length(p, b);
  const int64_t chunks = p->B >= 4 ? 1 : 4 / p->B;
  float s[MAX_KEYS], acc[4][512], sum[4];
  int64_t keys[MAX_KEYS];
  for (int64_t b = 0; b < p->B; ++b)
    for (int64_t h = 0; h < p->Hq; ++h)
      for (int64_t i = 0; i < p->Lq; ++i) {
        const int64_t kh = h / group, kl = key_length(p, b);
#if defined(VARIANT_PADDING_MAX)
        const int64_t scan = longest; /* the batch's longest sequence: this row's padded slots too */
#else
        const int64_t scan = kl;
#endif
        int64_t nv = 0;
        float m = -INFINITY;
        for (int64_t j = 0; j < scan && j < p->Lk; ++j) {
          float dot = 0.0f;
          for (int64_t d = 0; d < p->Dqk; ++d)
            dot += q[b * qs[0] + h * qs[1] + i * qs[2] + d * qs[3]] * k[b * ks[0] + kh * ks[1] + j * ks[2] + d * ks[3]];
          s[j] = dot * (float)p->scale;
          const int vis = j < kl && (!p->causal || j <= i + p->diagonal_offset[b]);
          if (vis) keys[nv++] = j;
          if ((vis || j >= kl) && isfinite(s[j]) && s[j] > m) m = s[j];
        }
        const int64_t first = start_key(nv), per = (nv + chunks - 1) / chunks;
        float total = 0.0f;
        for (int64_t c = 0; c < chunks; ++c) {
          sum[c] = 0.0f;
          for (int64_t d = 0; d < p->Dv; ++d) acc[c][d] = 0.0f;
        }
        for (int64_t t = 0; t < nv; ++t) {
          const int64_t c = t / (per > 0 ? per : 1), j = keys[(t + first) % nv];
          const float e = expf(s[j] - m);
          sum[c] += e;
          for (int64_t d = 0; d < p->Dv; ++d) acc[c][d] += e * v[b * vs[0] + kh * vs[1] + j * vs[2] + d * vs[3]];
        }
        for (int64_t c = 0; c < chunks; ++c) total += sum[c];
        for (int64_t d = 0; d < p->Dv; ++d) {
          float o = 0.0f;
          for (int64_t c = 0; c < chunks; ++c) o += acc[c][d];
          ((float*)p->out)[b * os[0] + h * os[1] + i * os[2] + d * os[3]] = nv ? o / total : 0.0f;
        }
        if (p->lse) ((float*)p->lse)[b * p->lse_strides[0] + h * p->lse_strides[1] + i * p->lse_strides[2]] = nv ? m + logf(total) : -INFINITY;
        if (p->weights)
          for (int64_t j = 0; j < p->Lk; ++j) {
            int vis = j < kl && (!p->causal || j <= i + p->diagonal_offset[b]);
            ((float*)p->weights)[b * p->weights_strides[0] + h * p->weights_strides[1] + i * p->weights_strides[2] +
                                 j * p->weights_strides[3]] = vis ? expf(s[j] - m) / total : 0.0f;
          }
      }
  return ATTNCHECK_STATUS_OK;
}

static int32_t declarations(attncheck_declarations* d, char* err, size_t n) {
  (void)err, (void)n;
  d->deterministic = 1;
  d->batch_invariant = 1;
  return ATTNCHECK_STATUS_OK;
}

static const attncheck_plugin vtable = {ATTNCHECK_PLUGIN_ABI_VERSION, VARIANT_NAME, "invariance test variant (tests/invariance)",
                                        caps, NULL, supports, run, sizeof(attncheck_plugin), NULL, declarations,
                                        NULL, NULL};

ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void) { return &vtable; }
