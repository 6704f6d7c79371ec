/* Test-only plugins that are right within tolerance but break an invariance promise (docs/invariance.md), one per
 * macro: VARIANT_RANDOM_ORDER sums the keys of every row starting at a key that changes on each call (a scheduler
 * that claims work in arrival order); VARIANT_BATCH_SPLIT splits the keys into max(1, 4 / B) chunks merged at the end,
 * so the summation order follows the batch size (split-KV decoding chosen from the batch); VARIANT_PADDING_MAX takes
 * each row's running max over the keys up to the longest sequence in the batch, reading its own padded slots up to a
 * neighbour's length (the shift cancels in exact arithmetic, not in rounding; also over a paged cache);
 * VARIANT_THREAD_SPLIT splits the keys into as many chunks as the schedule's threads (tag 9) and declares the threads
 * knob bitwise; VARIANT_SPLITS splits them into the schedule's num_splits chunks and declares that knob within
 * tolerance (as split-KV kernels honestly do); VARIANT_STRIDE_ORDER sums the keys in reverse order unless q comes in
 * BHSD-packed strides, and declares layout_invariant; VARIANT_BLOCK_ORDER sums the keys backwards when the schedule
 * asks for the reverse order and declares that knob bitwise; VARIANT_PAGE_ORDER (paged KV cache) sums each row's keys
 * in the order of their pages' places in the pool, not in key order; VARIANT_PACK_OFFSET (varlen) splits each
 * sequence's keys into 1 + (its first key's offset in the pack) % 3 chunks; VARIANT_GAP_ORDER sums the keys backwards
 * when k's strides have gaps (a slice of a packed buffer, as a kernel that copies such an input to scratch in another
 * order would), and declares layout_invariant. Each declares deterministic and batch_invariant, as a kernel that
 * believes it is would. fp32, both layouts, GQA, causal, key padding, lse, weights, the zero policy. */
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
#elif defined(VARIANT_THREAD_SPLIT)
#define VARIANT_NAME "variant-thread-split"
#elif defined(VARIANT_SPLITS)
#define VARIANT_NAME "variant-splits"
#elif defined(VARIANT_STRIDE_ORDER)
#define VARIANT_NAME "variant-stride-order"
#elif defined(VARIANT_BLOCK_ORDER)
#define VARIANT_NAME "variant-block-order"
#elif defined(VARIANT_PAGE_ORDER)
#define VARIANT_NAME "variant-page-order"
#elif defined(VARIANT_PACK_OFFSET)
#define VARIANT_NAME "variant-pack-offset"
#elif defined(VARIANT_GAP_ORDER)
#define VARIANT_NAME "variant-gap-order"
#else
#error "define one VARIANT_* macro"
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

/* The schedule the host asks for (tag 9), or NULL: the plugin's own choice. */
static const attncheck_extension* extension(const attncheck_problem* p, uint32_t tag);
static const attncheck_ext_schedule* schedule(const attncheck_problem* p) {
  return (const attncheck_ext_schedule*)extension(p, ATTNCHECK_EXT_SCHEDULE);
}

static const attncheck_extension* extension(const attncheck_problem* p, uint32_t tag) {
  for (const attncheck_extension* e = p->next; e; e = e->next)
    if (e->tag == tag) return e;
  return NULL;
}

/* Row i of batch b: its keys [*kb, *ke) and the key on its causal diagonal (a varlen row: its sequence's). */
static void row_keys(const attncheck_problem* p, int64_t b, int64_t i, int64_t* kb, int64_t* ke, int64_t* diag) {
  const attncheck_ext_varlen* vl = (const attncheck_ext_varlen*)extension(p, ATTNCHECK_EXT_VARLEN);
  if (!vl) {
    *kb = 0, *ke = key_length(p, b), *diag = i + p->diagonal_offset[b];
    return;
  }
  int64_t s = 0;
  while (s + 1 < vl->sequences && vl->cu_seqlens_q[s + 1] <= i) ++s;
  const int64_t q0 = vl->cu_seqlens_q[s], lq = vl->cu_seqlens_q[s + 1] - q0;
  *kb = vl->cu_seqlens_k[s], *ke = vl->cu_seqlens_k[s + 1];
  const int64_t off = p->alignment == ATTNCHECK_ALIGN_BOTTOM_RIGHT ? (*ke - *kb) - lq
                      : p->alignment == ATTNCHECK_ALIGN_EXPLICIT   ? p->causal_offset
                                                                   : 0;
  *diag = *kb + (i - q0) + off;
}

/* Element offset of key/value token j of KV head kh of batch b: through the block table of a paged cache. */
static int64_t token_offset(const attncheck_problem* p, const int64_t* st, int64_t b, int64_t kh, int64_t j) {
  const attncheck_ext_paged_kv* pg = (const attncheck_ext_paged_kv*)extension(p, ATTNCHECK_EXT_PAGED_KV);
  if (!pg) return b * st[0] + kh * st[1] + j * st[2];
  const int64_t page = pg->block_table[b * pg->pages_per_seq + j / pg->page_size];
  return page * st[0] + kh * st[1] + (j % pg->page_size) * st[2];
}

/* The pool place of key j's page (0 without paging): the summation order of VARIANT_PAGE_ORDER. */
static int64_t page_place(const attncheck_problem* p, int64_t b, int64_t j) {
  const attncheck_ext_paged_kv* pg = (const attncheck_ext_paged_kv*)extension(p, ATTNCHECK_EXT_PAGED_KV);
  return pg ? pg->block_table[b * pg->pages_per_seq + j / pg->page_size] : 0;
}

/* Key chunks merged at the end of each row (kb: the row's first key). */
static int64_t chunk_count(const attncheck_problem* p, int64_t kb) {
#if defined(VARIANT_PACK_OFFSET)
  (void)p;
  return 1 + kb % 3;
#elif defined(VARIANT_BATCH_SPLIT)
  (void)kb;
  return p->B >= 4 ? 1 : 4 / p->B;
#elif defined(VARIANT_THREAD_SPLIT) || defined(VARIANT_SPLITS)
  const attncheck_ext_schedule* s = schedule(p);
  (void)kb;
#if defined(VARIANT_THREAD_SPLIT)
  const int64_t c = s ? s->threads : 0;
#else
  const int64_t c = s ? s->num_splits : 0;
#endif
  return c < 1 ? 1 : c > 4 ? 4 : c;
#else
  (void)schedule, (void)p, (void)kb;
  return 1;
#endif
}

/* Whether k's strides have gaps: its last element lies past numel - 1 (a permutation of dense storage does not). */
static int k_has_gaps(const attncheck_problem* p) {
  const int64_t shape[4] = {p->B, p->Hkv, p->Lk, p->Dqk};
  int64_t last = 0, numel = 1;
  if (extension(p, ATTNCHECK_EXT_PAGED_KV) || extension(p, ATTNCHECK_EXT_VARLEN)) return 0;
  for (int d = 0; d < 4; ++d) last += (shape[d] - 1) * p->k_strides[d], numel *= shape[d];
  return last >= numel;
}

/* Whether q comes in the packed strides of BHSD. */
static int bhsd_packed(const attncheck_problem* p) {
  const int64_t* s = p->q_strides;
  return s[3] == 1 && s[2] == p->Dqk && s[1] == p->Lq * p->Dqk && s[0] == p->Hq * p->Lq * p->Dqk;
}

static int32_t run(const attncheck_problem* p, char* err, size_t n) {
  (void)err, (void)n;
  const float *q = p->q, *k = p->k, *v = p->v;
  const int64_t *qs = p->q_strides, *ks = p->k_strides, *vs = p->v_strides, *os = p->out_strides;
  const int64_t group = p->Hq / p->Hkv;
  int64_t longest = 0;
  for (int64_t b = 0; b < p->B; ++b)
    if (key_length(p, b) > longest) longest = key_length(p, b);
#if defined(VARIANT_STRIDE_ORDER)
  const int reverse = !bhsd_packed(p);
#elif defined(VARIANT_BLOCK_ORDER)
  const int reverse = schedule(p) && schedule(p)->reversed;
  (void)bhsd_packed, (void)k_has_gaps;
#elif defined(VARIANT_GAP_ORDER)
  const int reverse = k_has_gaps(p);
  (void)bhsd_packed;
#else
  const int reverse = 0;
  (void)bhsd_packed, (void)k_has_gaps;
#endif
  float s[MAX_KEYS], acc[4][512], sum[4];
  int64_t keys[MAX_KEYS];
  for (int64_t b = 0; b < p->B; ++b)
    for (int64_t h = 0; h < p->Hq; ++h)
      for (int64_t i = 0; i < p->Lq; ++i) {
        const int64_t kh = h / group;
        int64_t kb, kl, diag;
        row_keys(p, b, i, &kb, &kl, &diag);
        const int64_t chunks = chunk_count(p, kb);
#if defined(VARIANT_PADDING_MAX)
        const int64_t scan = longest; /* the batch's longest sequence: this row's padded slots too */
#else
        const int64_t scan = kl;
#endif
        int64_t nv = 0;
        float m = -INFINITY;
        for (int64_t j = kb; j < scan && j < p->Lk; ++j) {
          float dot = 0.0f;
          const int64_t kt = token_offset(p, ks, b, kh, j);
          for (int64_t d = 0; d < p->Dqk; ++d)
            dot += q[b * qs[0] + h * qs[1] + i * qs[2] + d * qs[3]] * k[kt + d * ks[3]];
          s[j] = dot * (float)p->scale;
          const int vis = j < kl && (!p->causal || j <= diag);
          if (vis) keys[nv++] = j;
          if ((vis || j >= kl) && isfinite(s[j]) && s[j] > m) m = s[j];
        }
#if defined(VARIANT_PAGE_ORDER)
        for (int64_t x = 1; x < nv; ++x) /* keys by their page's place in the pool (insertion sort: stable) */
          for (int64_t y = x; y > 0 && page_place(p, b, keys[y - 1]) > page_place(p, b, keys[y]); --y) {
            const int64_t t = keys[y];
            keys[y] = keys[y - 1], keys[y - 1] = t;
          }
#else
        (void)page_place;
#endif
        const int64_t first = start_key(nv), per = (nv + chunks - 1) / chunks;
        float total = 0.0f;
        for (int64_t c = 0; c < chunks; ++c) {
          sum[c] = 0.0f;
          for (int64_t d = 0; d < p->Dv; ++d) acc[c][d] = 0.0f;
        }
        for (int64_t t = 0; t < nv; ++t) {
          const int64_t c = t / (per > 0 ? per : 1), j = keys[reverse ? nv - 1 - t : (t + first) % nv];
          const float e = expf(s[j] - m);
          sum[c] += e;
          const int64_t vt = token_offset(p, vs, b, kh, j);
          for (int64_t d = 0; d < p->Dv; ++d) acc[c][d] += e * v[vt + d * vs[3]];
        }
        for (int64_t c = 0; c < chunks; ++c) total += sum[c];
        for (int64_t d = 0; d < p->Dv; ++d) {
          float o = 0.0f;
          for (int64_t c = 0; c < chunks; ++c) o += acc[c][d];
          ((float*)p->out)[b * os[0] + h * os[1] + i * os[2] + d * os[3]] = nv ? o / total : 0.0f;
        }
        if (p->lse)
          ((float*)p->lse)[b * p->lse_strides[0] + h * p->lse_strides[1] + i * p->lse_strides[2]] =
              nv ? m + logf(total) : -INFINITY;
        if (p->weights)
          for (int64_t j = 0; j < p->Lk; ++j) {
            const int vis = j >= kb && j < kl && (!p->causal || j <= diag);
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
#if defined(VARIANT_THREAD_SPLIT)
  d->schedule_knobs = d->schedule_bitwise = 1; /* threads, promised bitwise */
#elif defined(VARIANT_SPLITS)
  d->schedule_knobs = 2; /* num_splits, promised within tolerance */
#elif defined(VARIANT_STRIDE_ORDER) || defined(VARIANT_GAP_ORDER)
  d->layout_invariant = 1;
#elif defined(VARIANT_BLOCK_ORDER)
  d->schedule_knobs = d->schedule_bitwise = 4; /* block order, promised bitwise */
#endif
  return ATTNCHECK_STATUS_OK;
}

#if defined(VARIANT_PAGE_ORDER) || defined(VARIANT_PADDING_MAX)
static const char* const features[] = {"paged_kv", NULL};
#elif defined(VARIANT_PACK_OFFSET)
static const char* const features[] = {"varlen", NULL};
#else
static const char* const* const features = NULL;
#endif

static const attncheck_plugin vtable = {ATTNCHECK_PLUGIN_ABI_VERSION,
                                        VARIANT_NAME,
                                        "invariance test variant (tests/invariance)",
                                        caps,
                                        NULL,
                                        supports,
                                        run,
                                        sizeof(attncheck_plugin),
                                        features,
                                        declarations,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL};

ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void) { return &vtable; }
