/* An example attncheck plugin: scaled dot-product attention in plain fp32 loops, written against the C ABI
 * (attncheck/plugin.h) only, as a user's library would be. It supports a declared subset (fp32; causal, window,
 * padding, boolean mask, softcap, attention sinks, KV-cache append, packed sequences, a paged KV cache and fp8 inputs
 * (e4m3/e5m2 codes with descales, out in bf16) through the ABI v2 extension chain, and the modification library's
 * ALiBi, document, chunked, prefix-LM and dilated-window entries and plain RoPE (tag 11), consumes the block
 * mask it is handed (tag 12), absorbed MLA (tag 13) and quantized KV caches (tag 14); no bias, dropout or finite fill)
 * and says "unsupported" for everything else. It also offers the backward pass (feature "backward", extension tag 5):
 * dQ, dK, dV in plain loops, for the same subset without sinks, KV-cache append, packed sequences, pages or fp8.
 * Test-only variants are built from this file with macros: EXAMPLE_PLUGIN_BUG (a wrong softmax denominator),
 * EXAMPLE_PLUGIN_ABI (another ABI version), EXAMPLE_PLUGIN_NO_ENTRY (the entry symbol is missing),
 * EXAMPLE_PLUGIN_RUN_FAILS (run() reports an error status), EXAMPLE_PLUGIN_NO_WEIGHTS (declares no weights output,
 * like fused kernels), EXAMPLE_PLUGIN_ZERO_POLICY (supports only the zero fully-masked policy, like FlashAttention),
 * EXAMPLE_PLUGIN_BF16_P (rounds the weights to bf16 before P.V, like a tensor-core P.V, and declares pv=bf16,
 * p=rounded in its precision contract; with EXAMPLE_PLUGIN_UNDECLARED it rounds without declaring it: a wrong plugin),
 * EXAMPLE_PLUGIN_BWD_NO_D (a backward that forgets the D_i = rowsum(dO * O) term, FlashAttention's real bug),
 * EXAMPLE_PLUGIN_NO_FP8 (does not list "fp8", as a plugin built before extension tag 8),
 * EXAMPLE_PLUGIN_FP8_DESCALE_V (ignores descale_v: a wrong fp8 kernel), EXAMPLE_PLUGIN_ALIBI_SIGN (adds the ALiBi
 * bias with the wrong sign, as attention-gym's example did), EXAMPLE_PLUGIN_ROPE_INTERLEAVE (GPT-J pairs where
 * GPT-NeoX halves are declared, and the reverse), EXAMPLE_PLUGIN_PARTIAL_AS_FULL (reads a partial block of the handed
 * block mask as full, applying no mask in it), EXAMPLE_PLUGIN_MLA_V_STRIDE (steps MLA's V by Dv instead of the latent
 * row, ik_llama.cpp's bug), EXAMPLE_PLUGIN_KV_SCALE_GROUP0 (every KV head reads head 0's cache scales, as in
 * rocm-libraries' bug), EXAMPLE_PLUGIN_NO_MODS (lists no modification, as a
 * plugin built before tag 11);
 * tests/isolation/hostile_plugin.c sets EXAMPLE_PLUGIN_NAME and EXAMPLE_PLUGIN_HOOK (called
 * first in run) to misbehave. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attncheck/plugin.h"
#include "example_formats.h"

#ifndef EXAMPLE_PLUGIN_ABI
#define EXAMPLE_PLUGIN_ABI ATTNCHECK_PLUGIN_ABI_VERSION
#endif
#if defined(EXAMPLE_PLUGIN_NAME)
#elif defined(EXAMPLE_PLUGIN_BUG)
#define EXAMPLE_PLUGIN_NAME "example-plugin-buggy"
#elif defined(EXAMPLE_PLUGIN_RUN_FAILS)
#define EXAMPLE_PLUGIN_NAME "example-plugin-failing"
#elif defined(EXAMPLE_PLUGIN_NO_WEIGHTS)
#define EXAMPLE_PLUGIN_NAME "example-plugin-noweights"
#elif defined(EXAMPLE_PLUGIN_ZERO_POLICY)
#define EXAMPLE_PLUGIN_NAME "example-plugin-zero"
#elif defined(EXAMPLE_PLUGIN_NO_FP8)
#define EXAMPLE_PLUGIN_NAME "example-plugin-no-fp8"
#elif defined(EXAMPLE_PLUGIN_FP8_DESCALE_V)
#define EXAMPLE_PLUGIN_NAME "example-plugin-fp8-descale-v"
#elif defined(EXAMPLE_PLUGIN_BWD_NO_D)
#define EXAMPLE_PLUGIN_NAME "example-plugin-bwd-no-d"
#elif defined(EXAMPLE_PLUGIN_BF16_P) && defined(EXAMPLE_PLUGIN_UNDECLARED)
#define EXAMPLE_PLUGIN_NAME "example-plugin-bf16p-undeclared"
#elif defined(EXAMPLE_PLUGIN_BF16_P)
#define EXAMPLE_PLUGIN_NAME "example-plugin-bf16p"
#elif defined(EXAMPLE_PLUGIN_MAX_LOGIT_BUG)
#define EXAMPLE_PLUGIN_NAME "example-plugin-max-logit-unscaled"
#elif defined(EXAMPLE_PLUGIN_ALIBI_SIGN)
#define EXAMPLE_PLUGIN_NAME "example-plugin-alibi-sign"
#elif defined(EXAMPLE_PLUGIN_ROPE_INTERLEAVE)
#define EXAMPLE_PLUGIN_NAME "example-plugin-rope-interleave"
#elif defined(EXAMPLE_PLUGIN_PARTIAL_AS_FULL)
#define EXAMPLE_PLUGIN_NAME "example-plugin-partial-as-full"
#elif defined(EXAMPLE_PLUGIN_MLA_V_STRIDE)
#define EXAMPLE_PLUGIN_NAME "example-plugin-mla-v-stride"
#elif defined(EXAMPLE_PLUGIN_KV_SCALE_GROUP0)
#define EXAMPLE_PLUGIN_NAME "example-plugin-kv-scale-group0"
#elif defined(EXAMPLE_PLUGIN_NO_MODS)
#define EXAMPLE_PLUGIN_NAME "example-plugin-no-mods"
#elif defined(EXAMPLE_PLUGIN_NO_MAX_LOGIT)
#define EXAMPLE_PLUGIN_NAME "example-plugin-no-max-logit"
#else
#define EXAMPLE_PLUGIN_NAME "example-plugin"
#endif

/* One score row lives in a fixed buffer; longer key sequences are declined in supports(). So do the rotated q and k
 * rows of RoPE. */
enum { MAX_KEYS = 4096, MAX_HEAD_DIM = 256 };

static int32_t example_capabilities(attncheck_capabilities* c, char* err, size_t err_size) {
  (void)err;
  (void)err_size;
  c->dtypes = 1u << ATTNCHECK_DTYPE_F32;
  c->layouts = (1u << ATTNCHECK_LAYOUT_BHSD) | (1u << ATTNCHECK_LAYOUT_BSHD);
  c->alignments =
      (1u << ATTNCHECK_ALIGN_TOP_LEFT) | (1u << ATTNCHECK_ALIGN_BOTTOM_RIGHT) | (1u << ATTNCHECK_ALIGN_EXPLICIT);
  c->fully_masked = (1u << ATTNCHECK_FULLY_MASKED_NAN) | (1u << ATTNCHECK_FULLY_MASKED_ZERO);
  c->gqa = c->cross = c->dqk_ne_dv = c->causal = c->per_batch_offsets = c->key_padding = 1;
  c->bool_mask = c->window = c->softcap = 1;
  c->bias = c->dropout = c->finite_fill = 0;
  c->weights_out = c->lse_out = 1;
#ifdef EXAMPLE_PLUGIN_NO_WEIGHTS
  c->weights_out = 0;
#endif
#ifdef EXAMPLE_PLUGIN_ZERO_POLICY
  c->fully_masked = 1u << ATTNCHECK_FULLY_MASKED_ZERO;
#endif
  c->max_head_dim = 0;
  c->head_dim_multiple = 1;
  c->notes = "example plugin: fp32 loops, no bias/dropout/finite fill";
  return ATTNCHECK_STATUS_OK;
}

#if ATTNCHECK_PLUGIN_ABI_VERSION >= 2
/* The extension with tag `tag` in the problem's chain (ABI v2), or NULL. */
static const attncheck_extension* extension(const attncheck_problem* p, uint32_t tag) {
  if (p->abi_version >= 2)
    for (const attncheck_extension* e = p->next; e; e = e->next)
      if (e->tag == tag) return e;
  return NULL;
}
#endif

/* The library modifications the example evaluates (tag 11), their parameters resolved once per run; a NULL or 0
 * field: the problem does not use that entry. The query's position is pos = i + diagonal_offset[b]. */
typedef struct {
  const double* alibi_slopes; /* [Hq] or [B, Hq] */
  int64_t alibi_count;
  const int64_t* doc_ids; /* [B, Lk] */
  int64_t chunk_size;
  const int64_t* prefix_lengths; /* [B] */
  int64_t dilated_window, dilation;
  int64_t rotary_dim;     /* RoPE (a position stage): the leading rotary_dim dims of q and k rotated */
  int rotary_interleaved; /* pairs (2f, 2f+1) (GPT-J), else (f, f + rotary_dim/2) (GPT-NeoX) */
  double rope_theta;
  const int64_t* rope_offsets;  /* [B] or NULL */
  const char* rope_unsupported; /* a RoPE variant the example does not write (scaling, mRoPE), or NULL */
} example_mods;

#ifdef ATTNCHECK_EXT_MODIFICATIONS
static const attncheck_mod_param* mod_param(const attncheck_ext_modifications* e, const char* name, const char* key) {
  for (int64_t m = 0; e && m < e->count; ++m)
    for (int64_t k = 0; strcmp(e->mods[m].name, name) == 0 && k < e->mods[m].param_count; ++k)
      if (strcmp(e->mods[m].params[k].key, key) == 0) return &e->mods[m].params[k];
  return NULL;
}
#endif

static example_mods mods_of(const attncheck_problem* p) {
  example_mods m = {NULL, 0, NULL, 0, NULL, -1, 1, 0, 0, 10000.0, NULL, NULL};
#ifdef ATTNCHECK_EXT_MODIFICATIONS
  const attncheck_ext_modifications* e = (const attncheck_ext_modifications*)extension(p, ATTNCHECK_EXT_MODIFICATIONS);
  const attncheck_mod_param* x;
  if ((x = mod_param(e, "alibi", "alibi_slopes"))) m.alibi_slopes = x->f64, m.alibi_count = x->count;
  if ((x = mod_param(e, "document", "doc_ids"))) m.doc_ids = x->i64;
  if ((x = mod_param(e, "chunked", "chunk_size"))) m.chunk_size = x->i64[0];
  if ((x = mod_param(e, "prefix_lm", "prefix_lengths"))) m.prefix_lengths = x->i64;
  if ((x = mod_param(e, "dilated_window", "dilated_window"))) m.dilated_window = x->i64[0];
  if ((x = mod_param(e, "dilated_window", "dilation"))) m.dilation = x->i64[0];
  if ((x = mod_param(e, "rope", "rotary_dim"))) {
    m.rotary_dim = x->i64[0];
    m.rotary_interleaved = (int)mod_param(e, "rope", "rotary_interleaved")->i64[0];
    m.rope_theta = mod_param(e, "rope", "rope_theta")->f64[0];
    x = mod_param(e, "rope", "rope_offsets");
    m.rope_offsets = x->count ? x->i64 : NULL;
    /* plain RoPE only: frequency scaling and per-section positions are not written here */
    if (mod_param(e, "rope", "rope_linear_factor")->f64[0] != 1.0 ||
        mod_param(e, "rope", "rope_llama3_factor")->f64[0] != 1.0 ||
        mod_param(e, "rope", "rope_yarn_factor")->f64[0] != 1.0)
      m.rope_unsupported = "RoPE frequency scaling";
    if (mod_param(e, "rope", "rope_mrope_section")->count || mod_param(e, "rope", "rope_position_ids")->count)
      m.rope_unsupported = "mRoPE positions";
  }
#else
  (void)p;
#endif
  return m;
}

static int32_t example_supports(const attncheck_problem* p, char* reason, size_t reason_size) {
  if (p->Lk > MAX_KEYS) {
    snprintf(reason, reason_size, "Lk=%lld > %d: the example keeps one score row in a fixed buffer", (long long)p->Lk,
             MAX_KEYS);
    return 0;
  }
#ifdef ATTNCHECK_EXT_KV_QUANT
  if (extension(p, ATTNCHECK_EXT_KV_QUANT) &&
      (extension(p, ATTNCHECK_EXT_PAGED_KV) || extension(p, ATTNCHECK_EXT_KV_APPEND))) {
    snprintf(reason, reason_size, "the example reads a quantized cache only unpaged and without append");
    return 0;
  }
#endif
#ifdef ATTNCHECK_EXT_MODIFICATIONS
  const example_mods m = mods_of(p);
  if (m.rotary_dim > 0) {
    const char* why = m.rope_unsupported                      ? m.rope_unsupported
                      : p->Dqk > MAX_HEAD_DIM                 ? "a head dim above 256"
                      : p->dtype != ATTNCHECK_DTYPE_F32       ? "fp8 inputs"
                      : extension(p, ATTNCHECK_EXT_VARLEN)    ? "packed sequences"
                      : extension(p, ATTNCHECK_EXT_KV_APPEND) ? "KV-cache append"
                                                              : NULL;
    if (why) {
      snprintf(reason, reason_size, "the example's RoPE does not handle %s", why);
      return 0;
    }
  }
#ifdef ATTNCHECK_EXT_BACKWARD
  /* The looped backward applies the mask modifications (visible()) only: ALiBi's score term and the rotation are
   * not in it, so it must not be offered them. */
  if (extension(p, ATTNCHECK_EXT_BACKWARD) && (m.alibi_slopes || m.rotary_dim > 0)) {
    snprintf(reason, reason_size, "the example's backward has no ALiBi term and no RoPE");
    return 0;
  }
#endif
#endif
#ifdef ATTNCHECK_EXT_BACKWARD
  if (extension(p, ATTNCHECK_EXT_BACKWARD) && extension(p, ATTNCHECK_EXT_SINKS)) {
    snprintf(reason, reason_size, "the example's backward has no sink term");
    return 0;
  }
  if (extension(p, ATTNCHECK_EXT_BACKWARD) && extension(p, ATTNCHECK_EXT_VARLEN)) {
    snprintf(reason, reason_size, "the example's backward is not checked with packed sequences (no reference for it)");
    return 0;
  }
  if (extension(p, ATTNCHECK_EXT_BACKWARD) && extension(p, ATTNCHECK_EXT_PAGED_KV)) {
    snprintf(reason, reason_size, "the example's backward does not read pages");
    return 0;
  }
#endif
#if defined(ATTNCHECK_EXT_BACKWARD) && defined(ATTNCHECK_EXT_FP8)
  if (extension(p, ATTNCHECK_EXT_BACKWARD) && extension(p, ATTNCHECK_EXT_FP8)) {
    snprintf(reason, reason_size, "the example's backward reads fp32 only");
    return 0;
  }
#endif
  return 1;
}

/* The packed sequences' offsets (extension tag 6): 1 and cu_seqlens_q/k, or 0 without packed sequences. */
static int varlen_of(const attncheck_problem* p, const int64_t** cq, const int64_t** ck) {
#ifdef ATTNCHECK_EXT_VARLEN
  const attncheck_ext_varlen* e = (const attncheck_ext_varlen*)extension(p, ATTNCHECK_EXT_VARLEN);
  if (e) {
    *cq = e->cu_seqlens_q, *ck = e->cu_seqlens_k;
    return 1;
  }
#endif
  (void)p, (void)cq, (void)ck;
  return 0;
}

/* Element offset of token j of batch b in a K or V tensor with strides s (head and dim not included): with a paged
 * cache (extension tag 7) through the block table, else row j of batch b. */
static int64_t token_at(const attncheck_problem* p, int64_t b, int64_t j, const int64_t* s) {
#ifdef ATTNCHECK_EXT_PAGED_KV
  const attncheck_ext_paged_kv* e = (const attncheck_ext_paged_kv*)extension(p, ATTNCHECK_EXT_PAGED_KV);
  if (e) return e->block_table[b * e->pages_per_seq + j / e->page_size] * s[0] + (j % e->page_size) * s[2];
#endif
  return b * s[0] + j * s[2];
}

/* fp8 inputs (extension tag 8): *dqk = descale_q * descale_k, folded into the scale as fused fp8 kernels do, and
 * *dv = descale_v, applied to each value; both 1 without fp8. Returns 0 if out is not in a format written here. */
static int descales_of(const attncheck_problem* p, float* dqk, float* dv) {
  *dqk = *dv = 1.0f;
#ifdef ATTNCHECK_EXT_FP8
  const attncheck_ext_fp8* e = (const attncheck_ext_fp8*)extension(p, ATTNCHECK_EXT_FP8);
  if (e) {
    *dqk = (float)(e->descale_q * e->descale_k), *dv = (float)e->descale_v;
#ifdef EXAMPLE_PLUGIN_FP8_DESCALE_V
    *dv = 1.0f; /* the planted bug: descale_v ignored */
#endif
    return e->out_dtype == ATTNCHECK_DTYPE_BF16;
  }
#endif
  return p->dtype == ATTNCHECK_DTYPE_F32;
}

/* Query i's keys [*k0, *k1) and the key on its diagonal: its packed sequence's with varlen, else the valid keys. */
static int64_t row_keys(const attncheck_problem* p, int64_t b, int64_t i, int64_t* k0, int64_t* k1) {
  const int64_t *cq, *ck;
  if (!varlen_of(p, &cq, &ck)) {
    *k0 = 0, *k1 = p->key_lengths ? p->key_lengths[b] : p->Lk;
    return i + p->diagonal_offset[b];
  }
  int64_t s = 0;
  while (cq[s + 1] <= i) ++s;
  const int64_t q0 = cq[s], lq = cq[s + 1] - q0;
  *k0 = ck[s], *k1 = ck[s + 1];
  const int64_t off = p->alignment == ATTNCHECK_ALIGN_BOTTOM_RIGHT ? (*k1 - *k0) - lq
                      : p->alignment == ATTNCHECK_ALIGN_EXPLICIT   ? p->causal_offset
                                                                   : 0;
  return *k0 + (i - q0) + off;
}

/* A normalised weight w = p / sum as it enters P.V: unchanged, or (BF16_P) with the unnormalised p rounded to bf16
 * (nearest even) and divided by the unrounded sum, as FlashAttention's P.V does. */
static float pv_weight(float w, float sum) {
#ifdef EXAMPLE_PLUGIN_BF16_P
  union {
    float f;
    uint32_t u;
  } b;
  b.u = (uint32_t)bf16_bits(w * sum) << 16;
  return b.f / sum;
#else
  (void)sum;
  return w;
#endif
}

/* The kind of key block kb for query i of batch b and head h in the handed block mask (tag 12): 0 empty, 1 partial,
 * 2 full; -1 without a block mask. As a block-sparse kernel does, the example skips empty blocks and applies no mask
 * in full ones. */
static int block_kind(const attncheck_problem* p, int64_t b, int64_t h, int64_t i, int64_t j) {
#ifdef ATTNCHECK_EXT_BLOCK_MASK
  const attncheck_ext_block_mask* m = (const attncheck_ext_block_mask*)extension(p, ATTNCHECK_EXT_BLOCK_MASK);
  if (!m) return -1;
  const int64_t row = ((m->B == 1 ? 0 : b) * m->H + (m->H == 1 ? 0 : h)) * m->q_blocks + i / m->q_block;
  const int64_t kb = j / m->kv_block;
  for (int64_t n = 0; n < m->full_kv_num_blocks[row]; ++n)
    if (m->full_kv_indices[row * m->slots + n] == kb) return 2;
  for (int64_t n = 0; n < m->kv_num_blocks[row]; ++n)
#ifdef EXAMPLE_PLUGIN_PARTIAL_AS_FULL
    if (m->kv_indices[row * m->slots + n] == kb) return 2; /* the planted bug: a partial block read as full */
#else
    if (m->kv_indices[row * m->slots + n] == kb) return 1;
#endif
  return 0;
#else
  (void)p;
  (void)b;
  (void)h;
  (void)i;
  (void)j;
  return -1;
#endif
}

/* Element (b, h, j, d) of k (which = 0) or v (1) at offset `off`: the stored value, or with a quantized cache (tag
 * 14) its code times its scale, dequantised as it is read (never a widened copy of the cache). */
static float kv_value(const attncheck_problem* p, int which, const void* base, int64_t off, int64_t b, int64_t h,
                      int64_t j, int64_t d) {
#ifdef ATTNCHECK_EXT_KV_QUANT
  const attncheck_ext_kv_quant* q = (const attncheck_ext_kv_quant*)extension(p, ATTNCHECK_EXT_KV_QUANT);
  if (q) {
    const int64_t* s = which ? q->v_scale_strides : q->k_scale_strides;
    const int64_t at = b * s[0] + h * s[1] + j * s[2] + (d / q->kv_block) * s[3];
#ifdef EXAMPLE_PLUGIN_KV_SCALE_GROUP0
    const int64_t group = 0; /* the planted bug: every head reads the first head's scales */
#else
    const int64_t group = h * s[1];
#endif
    return code_value(base, off, q->codes) *
           scale_value(which ? q->v_scale : q->k_scale, at - h * s[1] + group, q->scale_dtype);
  }
#else
  (void)which;
  (void)b;
  (void)h;
  (void)j;
  (void)d;
#endif
  return load(p, base, off);
}

/* floor(a / c) for c > 0: a query before key 0 (pos < 0) is in chunk -1, not chunk 0. */
static int64_t floor_div(int64_t a, int64_t c) { return a / c - (a % c != 0 && a < 0); }

/* RoPE at `pos` on one head vector, as most kernels compute it: the angle pos * inv_freq rounded to fp32 (the
 * contract's fp32-angles term covers it), cos and sin in fp32, dims from rotary_dim on unchanged. */
static void rope_rotate(const example_mods* m, int64_t pos, float* x) {
  const int64_t half = m->rotary_dim / 2;
  for (int64_t f = 0; f < half; ++f) {
    const float inv = (float)pow(m->rope_theta, -2.0 * (double)f / (double)m->rotary_dim);
    const float t = (float)pos * inv;
#ifdef EXAMPLE_PLUGIN_ROPE_INTERLEAVE
    const int gptj = !m->rotary_interleaved; /* the planted bug: the pairing swapped */
#else
    const int gptj = m->rotary_interleaved;
#endif
    const int64_t a = gptj ? 2 * f : f, b = gptj ? 2 * f + 1 : f + half;
    const float xa = x[a], xb = x[b], c = cosf(t), s = sinf(t);
    x[a] = xa * c - xb * s;
    x[b] = xb * c + xa * s;
  }
}

/* The score modifications, after the softcap: ALiBi subtracts slope * |pos - j|. */
static float modify_score(const attncheck_problem* p, const example_mods* m, int64_t b, int64_t h, int64_t pos,
                          int64_t j, float s) {
  if (m->alibi_slopes) {
    const double slope = m->alibi_slopes[m->alibi_count == p->Hq ? h : b * p->Hq + h];
    const double dist = (double)(pos > j ? pos - j : j - pos);
#ifdef EXAMPLE_PLUGIN_ALIBI_SIGN
    s += (float)(slope * dist); /* the planted bug: the bias rewards distant keys */
#else
    s -= (float)(slope * dist);
#endif
  }
  return s;
}

/* Is key j visible to query i of batch b? Every mask of the problem, written out, the mask modifications included. */
static int visible(const attncheck_problem* p, const example_mods* m, int64_t b, int64_t h, int64_t i, int64_t j) {
  int64_t k0, k1;
  const int64_t diag = row_keys(p, b, i, &k0, &k1);
  if (m->doc_ids && (diag < 0 || diag >= p->Lk || m->doc_ids[b * p->Lk + diag] != m->doc_ids[b * p->Lk + j])) return 0;
  if (m->chunk_size > 0 && floor_div(diag, m->chunk_size) != j / m->chunk_size) return 0;
  if (m->prefix_lengths && !(j < m->prefix_lengths[b] || j <= diag)) return 0;
  if (m->dilated_window >= 0) {
    const int64_t d = diag - j;
    if (d % m->dilation != 0 || (d < 0 ? -d : d) / m->dilation > m->dilated_window) return 0;
  }
  if (p->causal && j > diag) return 0;
  if (j < k0 || j >= k1) return 0; /* key padding, or another packed sequence */
  if (p->window_left >= 0 && j < diag - p->window_left) return 0;
  if (p->window_right >= 0 && j > diag + p->window_right) return 0;
  if (p->mask) {
    const int64_t* s = p->mask_strides;
    if (!p->mask[b * s[0] + h * s[1] + i * s[2] + j * s[3]]) return 0;
  }
  return 1;
}

/* The sink logit of query head h, from the extension chain (ABI v2): -INFINITY when the problem has none. The
 * host sends sinks only because the vtable lists "sinks" in `features`; other tags are skipped. */
static float sink_of(const attncheck_problem* p, int64_t h) {
#if ATTNCHECK_PLUGIN_ABI_VERSION >= 2
  const attncheck_extension* e = extension(p, ATTNCHECK_EXT_SINKS);
  if (e) return (float)((const attncheck_ext_sinks*)e)->sinks[h];
#else
  (void)p;
  (void)h;
#endif
  return -INFINITY;
}

#if ATTNCHECK_PLUGIN_ABI_VERSION >= 2
/* KV-cache append (extension tag 4): copy past then new into present, and return present as the keys/values to
 * attend over (strides included). Without the extension, k and v are left as they are. */
static void append_kv(const attncheck_problem* p, const void** k, const void** v, const int64_t** ks,
                      const int64_t** vs) {
  if (p->abi_version < 2) return;
  for (const attncheck_extension* e = p->next; e; e = e->next) {
    if (e->tag != ATTNCHECK_EXT_KV_APPEND) continue;
    const attncheck_ext_kv_append* a = (const attncheck_ext_kv_append*)e;
    for (int which = 0; which < 2; ++which) {
      const char* past = (const char*)(which ? a->past_v : a->past_k);
      const char* now = (const char*)(which ? *v : *k);
      char* present = (char*)(which ? a->present_v : a->present_k);
      const int64_t z = element_size(p); /* fp8: the codes are copied */
      const int64_t* ps = which ? a->past_v_strides : a->past_k_strides;
      const int64_t* ns = which ? *vs : *ks;
      const int64_t* ts = which ? a->present_v_strides : a->present_k_strides;
      const int64_t D = which ? p->Dv : p->Dqk;
      for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hkv; ++h)
          for (int64_t j = 0; j < p->Lk; ++j)
            for (int64_t d = 0; d < D; ++d) {
              const int64_t jn = j - a->past_len;
              memcpy(present + z * (b * ts[0] + h * ts[1] + j * ts[2] + d * ts[3]),
                     jn < 0 ? past + z * (b * ps[0] + h * ps[1] + j * ps[2] + d * ps[3])
                            : now + z * (b * ns[0] + h * ns[1] + jn * ns[2] + d * ns[3]),
                     (size_t)z);
            }
    }
    *k = a->present_k, *ks = a->present_k_strides;
    *v = a->present_v, *vs = a->present_v_strides;
  }
}
#endif

#ifdef ATTNCHECK_EXT_BACKWARD
/* Gradients of L = sum(dout * out) in plain loops, as the textbook derivation reads (docs/backward.md). For each
 * query row the weights are recomputed from the forward's lse, P_ij = exp(s_ij - lse_i), then
 *   D_i = sum_d dO_id O_id,   dP_ij = dO_i . V_j,   dS_ij = P_ij (dP_ij - D_i),
 *   through the softcap s = c tanh(t / c):  dT_ij = dS_ij (1 - tanh^2(t_ij / c)),
 *   dQ_i = scale sum_j dT_ij K_j,   dK_j += scale dT_ij Q_i,   dV_j += P_ij dO_i,
 * dK and dV summed over the query heads that share a KV head. A fully masked row (lse = -inf) and a masked key get
 * exactly zero gradient. */
static int32_t example_backward(const attncheck_problem* p, const attncheck_ext_backward* g) {
  const float* q = (const float*)p->q;
  const float* k = (const float*)p->k;
  const float* v = (const float*)p->v;
  const float* o = (const float*)g->out;
  const float* lse = (const float*)g->lse;
  const float* dout = (const float*)g->dout;
  float* dq = (float*)g->dq;
  float* dk = (float*)g->dk;
  float* dv = (float*)g->dv;
  const int64_t *qs = p->q_strides, *ks = p->k_strides, *vs = p->v_strides, *os = g->out_strides;
  const int64_t *ls = g->lse_strides, *gs = g->dout_strides, *dqs = g->dq_strides, *dks = g->dk_strides,
                *dvs = g->dv_strides;
  const int64_t group = p->Hq / p->Hkv;
  const float scale = (float)p->scale;
  const float softcap = (float)p->softcap;
  float pw[MAX_KEYS], dt[MAX_KEYS];     /* per key of the row: P_ij and dT_ij */
  const example_mods mods = mods_of(p); /* mask modifications only: supports() declines ALiBi and RoPE */

  /* dK and dV accumulate over rows and heads: zero them first (the host pre-fills every gradient with NaN). */
  for (int64_t b = 0; b < p->B; ++b)
    for (int64_t kh = 0; kh < p->Hkv; ++kh)
      for (int64_t j = 0; j < p->Lk; ++j) {
        for (int64_t d = 0; d < p->Dqk; ++d) dk[b * dks[0] + kh * dks[1] + j * dks[2] + d * dks[3]] = 0.0f;
        for (int64_t d = 0; d < p->Dv; ++d) dv[b * dvs[0] + kh * dvs[1] + j * dvs[2] + d * dvs[3]] = 0.0f;
      }
  for (int64_t b = 0; b < p->B; ++b)
    for (int64_t h = 0; h < p->Hq; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < p->Lq; ++i) {
        const float lse_i = lse[b * ls[0] + h * ls[1] + i * ls[2]];
        const int live = isfinite(lse_i);
        float D = 0.0f; /* D_i = rowsum(dO * O) */
        for (int64_t d = 0; d < p->Dv && live; ++d)
          D += dout[b * gs[0] + h * gs[1] + i * gs[2] + d * gs[3]] * o[b * os[0] + h * os[1] + i * os[2] + d * os[3]];
#ifdef EXAMPLE_PLUGIN_BWD_NO_D
        D = 0.0f; /* the planted bug: the D term forgotten */
#endif
        for (int64_t j = 0; j < p->Lk; ++j) {
          pw[j] = dt[j] = 0.0f;
          if (!live || !visible(p, &mods, b, h, i, j)) continue;
          float dot = 0.0f, dp = 0.0f;
          for (int64_t d = 0; d < p->Dqk; ++d)
            dot += q[b * qs[0] + h * qs[1] + i * qs[2] + d * qs[3]] * k[b * ks[0] + kh * ks[1] + j * ks[2] + d * ks[3]];
          for (int64_t d = 0; d < p->Dv; ++d)
            dp +=
                dout[b * gs[0] + h * gs[1] + i * gs[2] + d * gs[3]] * v[b * vs[0] + kh * vs[1] + j * vs[2] + d * vs[3]];
          const float t = dot * scale;
          const float th = softcap > 0.0f ? tanhf(t / softcap) : 0.0f;
          const float s = softcap > 0.0f ? softcap * th : t;
          pw[j] = expf(s - lse_i);
          dt[j] = pw[j] * (dp - D) * (softcap > 0.0f ? 1.0f - th * th : 1.0f);
        }
        for (int64_t d = 0; d < p->Dqk; ++d) {
          float acc = 0.0f;
          for (int64_t j = 0; j < p->Lk; ++j)
            if (dt[j] != 0.0f) acc += dt[j] * k[b * ks[0] + kh * ks[1] + j * ks[2] + d * ks[3]];
          dq[b * dqs[0] + h * dqs[1] + i * dqs[2] + d * dqs[3]] = scale * acc;
        }
        for (int64_t j = 0; j < p->Lk; ++j) {
          if (pw[j] == 0.0f && dt[j] == 0.0f) continue;
          for (int64_t d = 0; d < p->Dqk; ++d)
            dk[b * dks[0] + kh * dks[1] + j * dks[2] + d * dks[3]] +=
                scale * dt[j] * q[b * qs[0] + h * qs[1] + i * qs[2] + d * qs[3]];
          for (int64_t d = 0; d < p->Dv; ++d)
            dv[b * dvs[0] + kh * dvs[1] + j * dvs[2] + d * dvs[3]] +=
                pw[j] * dout[b * gs[0] + h * gs[1] + i * gs[2] + d * gs[3]];
        }
      }
    }
  return ATTNCHECK_STATUS_OK;
}
#endif

#ifdef ATTNCHECK_EXT_MAX_LOGIT
/* The max-logit output (tag 10): row i's maximum softmax input over its visible keys, -inf without one (the
 * example has no finite fill); the heads form keeps each head's largest over b and i (NaN stays). */
static void write_max_logit(const attncheck_problem* p, int64_t b, int64_t h, int64_t i, float m) {
  const attncheck_ext_max_logit* e = (const attncheck_ext_max_logit*)extension(p, ATTNCHECK_EXT_MAX_LOGIT);
  if (!e) return;
#ifdef EXAMPLE_PLUGIN_MAX_LOGIT_BUG
  m /= (float)p->scale; /* the planted bug: the max taken before the scale */
#endif
  float* out = (float*)e->max_logit;
  if (e->form == 1) {
    out[b * e->strides[0] + h * e->strides[1] + i * e->strides[2]] = m;
  } else {
    float* at = out + h * e->strides[0];
    if ((b == 0 && i == 0) || m > *at || m != m) *at = m;
  }
}
#endif

static int32_t example_run(const attncheck_problem* p, char* err, size_t err_size) {
#ifdef EXAMPLE_PLUGIN_HOOK
  EXAMPLE_PLUGIN_HOOK(p);
#endif
#ifdef EXAMPLE_PLUGIN_RUN_FAILS
  snprintf(err, err_size, "planted failure: out of device memory for Lk=%lld", (long long)p->Lk);
  return ATTNCHECK_STATUS_ERROR;
#endif
  float dqk, dv;
  if (!descales_of(p, &dqk, &dv) || p->stat_dtype != ATTNCHECK_DTYPE_F32) {
    snprintf(err, err_size, "dtype %d: the example only computes fp32 (and fp8 inputs with a bf16 out)", (int)p->dtype);
    return ATTNCHECK_STATUS_ERROR;
  }
#ifdef ATTNCHECK_EXT_BACKWARD
  { /* a backward request (tag 5): the gradients instead of the forward */
    const attncheck_extension* bw = extension(p, ATTNCHECK_EXT_BACKWARD);
    if (bw) return example_backward(p, (const attncheck_ext_backward*)bw);
  }
#endif
  const void* q = p->q;
  const void* k = p->k;
  const void* v = p->v;
  float* lse = (float*)p->lse;
  float* weights = (float*)p->weights;
  const int64_t *qs = p->q_strides, *ks = p->k_strides, *vs = p->v_strides, *os = p->out_strides;
#if ATTNCHECK_PLUGIN_ABI_VERSION >= 2
  append_kv(p, &k, &v, &ks, &vs);
#endif
#if defined(ATTNCHECK_EXT_MLA) && defined(EXAMPLE_PLUGIN_MLA_V_STRIDE)
  int64_t packed_v[4];
  if (extension(p, ATTNCHECK_EXT_MLA)) { /* the planted bug: V stepped by its own row length, not the latent row's */
    packed_v[3] = 1, packed_v[2] = p->Dv, packed_v[1] = p->Lk * p->Dv, packed_v[0] = p->Hkv * p->Lk * p->Dv;
    vs = packed_v;
  }
#endif
  const int64_t group = p->Hq / p->Hkv;
  const float scale = (float)p->scale * dqk;
  const float softcap = (float)p->softcap;
  float score[MAX_KEYS];
  unsigned char vis[MAX_KEYS];
  const example_mods mods = mods_of(p);

  for (int64_t b = 0; b < p->B; ++b)
    for (int64_t h = 0; h < p->Hq; ++h) {
      const int64_t kh = h / group;
      const float sink = sink_of(p, h);
      for (int64_t i = 0; i < p->Lq; ++i) {
        /* scores of the visible keys and their maximum */
        float m = -INFINITY;
        int64_t n_vis = 0;
        for (int64_t j = 0; j < p->Lk; ++j) {
          const int kind = block_kind(p, b, h, i, j);
          vis[j] = (unsigned char)(kind == 2 ? 1 : kind == 0 ? 0 : visible(p, &mods, b, h, i, j));
          if (!vis[j]) continue;
          float dot = 0.0f;
          const int64_t kj = token_at(p, b, j, ks) + kh * ks[1];
          if (mods.rotary_dim > 0) { /* q and k rotated at their positions (the position stage) */
            float qr[MAX_HEAD_DIM], kr[MAX_HEAD_DIM];
            const int64_t off = mods.rope_offsets ? mods.rope_offsets[b] : 0;
            for (int64_t d = 0; d < p->Dqk; ++d)
              qr[d] = load(p, q, b * qs[0] + h * qs[1] + i * qs[2] + d * qs[3]),
              kr[d] = kv_value(p, 0, k, kj + d * ks[3], b, kh, j, d);
            rope_rotate(&mods, i + p->diagonal_offset[b] + off, qr);
            rope_rotate(&mods, j + off, kr);
            for (int64_t d = 0; d < p->Dqk; ++d) dot += qr[d] * kr[d];
          } else {
            for (int64_t d = 0; d < p->Dqk; ++d)
              dot += load(p, q, b * qs[0] + h * qs[1] + i * qs[2] + d * qs[3]) *
                     kv_value(p, 0, k, kj + d * ks[3], b, kh, j, d);
          }
          float s = dot * scale;
          if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
          s = modify_score(p, &mods, b, h, i + p->diagonal_offset[b], j, s);
          score[j] = s;
          if (s > m) m = s;
          ++n_vis;
        }
        /* softmax weights, normalised in place; a row with no visible key (and no sink) follows the fully-masked
         * policy. A sink joins the denominator without a value. */
        const int none = (n_vis == 0 || m == -INFINITY) && sink == -INFINITY;
#ifdef ATTNCHECK_EXT_MAX_LOGIT
        write_max_logit(p, b, h, i, m); /* before the sink joins: a sink is not a key */
#endif
        if (sink > m) m = sink;
        float sum = sink == -INFINITY ? 0.0f : expf(sink - m);
        int64_t last_vis = -1;
        for (int64_t j = 0; j < p->Lk; ++j)
          if (vis[j] && !none) {
            score[j] = expf(score[j] - m);
            sum += score[j];
            last_vis = j;
          }
#ifdef EXAMPLE_PLUGIN_BUG
        if (last_vis >= 0 && n_vis > 1) sum -= score[last_vis]; /* the planted bug: forgets the last key */
#endif
        (void)last_vis;
        const float row_fill = p->fully_masked == ATTNCHECK_FULLY_MASKED_NAN ? NAN : 0.0f;
        int64_t k0, k1;
        row_keys(p, b, i, &k0, &k1);
        const int64_t *cq, *ck;
        if (!varlen_of(p, &cq, &ck)) k0 = 0, k1 = p->Lk; /* a padded key is in the row; another sequence's is not */
        for (int64_t j = 0; j < p->Lk; ++j)
          score[j] = none ? (j >= k0 && j < k1 ? row_fill : 0.0f) : vis[j] ? score[j] / sum : 0.0f;
        if (lse)
          lse[b * p->lse_strides[0] + h * p->lse_strides[1] + i * p->lse_strides[2]] = none ? -INFINITY : m + logf(sum);
        if (weights) {
          const int64_t* ws = p->weights_strides;
          for (int64_t j = 0; j < p->Lk; ++j) weights[b * ws[0] + h * ws[1] + i * ws[2] + j * ws[3]] = score[j];
        }
        /* out = weights . V, touching only visible keys (masked values may be NaN on purpose) */
        for (int64_t d = 0; d < p->Dv; ++d) {
          float acc = none ? row_fill : 0.0f; /* nan policy: NaN, also for a sequence without keys */
          if (!none)
            for (int64_t j = 0; j < p->Lk; ++j)
              if (vis[j])
                acc += pv_weight(score[j], sum) *
                       (kv_value(p, 1, v, token_at(p, b, j, vs) + kh * vs[1] + d * vs[3], b, kh, j, d) * dv);
          const int64_t at = b * os[0] + h * os[1] + i * os[2] + d * os[3];
          if (p->dtype == ATTNCHECK_DTYPE_F32)
            ((float*)p->out)[at] = acc;
          else
            ((uint16_t*)p->out)[at] = bf16_bits(acc); /* fp8 inputs: out in bf16 */
        }
      }
    }
  return ATTNCHECK_STATUS_OK;
}

#if ATTNCHECK_PLUGIN_ABI_VERSION >= 2
/* What the example declares (ABI v2): plain fp32 loops are deterministic and round nothing below fp32. */
static int32_t example_declarations(attncheck_declarations* d, char* err, size_t err_size) {
  (void)err;
  (void)err_size;
  d->deterministic = 1;
#ifdef ATTNCHECK_DECL_BATCH_INVARIANT /* each row reads only its own batch entry's visible keys, in key order */
  if (d->struct_size >= offsetof(attncheck_declarations, batch_invariant) + sizeof d->batch_invariant)
    d->batch_invariant = 1;
#endif
#if defined(EXAMPLE_PLUGIN_BF16_P) && !defined(EXAMPLE_PLUGIN_UNDECLARED)
  d->contract[ATTNCHECK_DTYPE_F32] = "qk=fp32,scores=fp32,pv=bf16,acc=fp32,p=rounded,exp=exp,rope=fp32-angles";
#else
  d->contract[ATTNCHECK_DTYPE_F32] = "qk=fp32,scores=fp32,pv=fp32,acc=fp32,p=exact,exp=exp,rope=fp32-angles";
#endif
#ifdef ATTNCHECK_EXT_FP8 /* fp8: the codes' values in fp32, P not rounded to fp8 (a host before tag 8 has no field) */
  if (d->struct_size >= offsetof(attncheck_declarations, contract_fp8) + sizeof d->contract_fp8)
    d->contract_fp8[0] = d->contract_fp8[1] = "p=exact";
#endif
  return ATTNCHECK_STATUS_OK;
}
#endif

#if ATTNCHECK_PLUGIN_ABI_VERSION >= 2
static const char* const example_features[] = {"sinks",      "kv_append", "varlen",  "paged_kv",  "backward",
#if defined(ATTNCHECK_EXT_FP8) && !defined(EXAMPLE_PLUGIN_NO_FP8)
                                               "fp8",
#endif
#if defined(ATTNCHECK_EXT_MAX_LOGIT) && !defined(EXAMPLE_PLUGIN_NO_MAX_LOGIT)
                                               "max_logit",
#endif
#if defined(ATTNCHECK_EXT_MODIFICATIONS) && !defined(EXAMPLE_PLUGIN_NO_MODS)
                                               "alibi",      "document",  "chunked", "prefix_lm", "dilated_window",
                                               "rope",
#endif
#ifdef ATTNCHECK_EXT_BLOCK_MASK
                                               "block_mask",
#endif
#if defined(ATTNCHECK_EXT_KV_QUANT) && !defined(EXAMPLE_PLUGIN_NO_MODS)
                                               "mla",        "kv_quant",
#endif
                                               NULL};
#endif

static const attncheck_plugin example_vtable = {
    EXAMPLE_PLUGIN_ABI,
    EXAMPLE_PLUGIN_NAME,
    "example plugin: plain fp32 loops through the C plugin ABI",
    example_capabilities,
    NULL, /* available: always */
    example_supports,
    example_run,
#if ATTNCHECK_PLUGIN_ABI_VERSION >= 2 /* built against a v1 header, the vtable ends here */
    sizeof(attncheck_plugin),
    example_features, /* features beyond the v1 capability flags */
    example_declarations,
#endif
#ifdef ATTNCHECK_PLUGIN_HAS_MERGE
    NULL,
    NULL, /* supports_merge, merge: it does not merge states (tests/states/merge_plugin.c does) */
#endif
#ifdef ATTNCHECK_PLUGIN_HAS_MODULE
    NULL,
    NULL, /* supports_module, run_module: no module entry (tests/module/module_plugin.c has one) */
#endif
};

#ifndef EXAMPLE_PLUGIN_NO_ENTRY
ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void) { return &example_vtable; }
#else
ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry_misspelt(void) { return &example_vtable; }
#endif
