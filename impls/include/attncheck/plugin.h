/* attncheck plugin ABI: the C interface a user's shared library implements so `attncheck verify --plugin LIB.so`
 * (and the property suite) can judge it like any built-in implementation. C99, no attncheck headers needed.
 * The host dlopens the library, calls attncheck_plugin_entry() and checks abi_version before anything else.
 * Version 2 only appends: v1 plugins keep working unchanged (rules in docs/plugins.md). */
#ifndef ATTNCHECK_PLUGIN_H
#define ATTNCHECK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version this header describes. The host accepts every version from 1 up to its own and refuses newer ones.
 * A new version only appends fields to the structs below; fields added by version N are marked "v N". */
#define ATTNCHECK_PLUGIN_ABI_VERSION 2u
/* The one symbol a plugin exports (extern "C", default visibility). */
#define ATTNCHECK_PLUGIN_ENTRY_SYMBOL "attncheck_plugin_entry"

/* Enum values are fixed by the ABI; they also index the capability bit masks (bit 1u << value). */
typedef enum {
  ATTNCHECK_DTYPE_F64 = 0,
  ATTNCHECK_DTYPE_F32 = 1,
  ATTNCHECK_DTYPE_F16 = 2,
  ATTNCHECK_DTYPE_BF16 = 3,
  ATTNCHECK_DTYPE_U8 = 4,
  /* fp8 codes (uint8_t), only with extension tag 8 (feature "fp8"); never in capabilities.dtypes */
  ATTNCHECK_DTYPE_E4M3 = 5,
  ATTNCHECK_DTYPE_E5M2 = 6,
  /* int8 codes (int8_t) of a quantized KV cache, only with extension tag 14 */
  ATTNCHECK_DTYPE_I8 = 7
} attncheck_dtype;
typedef enum { ATTNCHECK_LAYOUT_BHSD = 0, ATTNCHECK_LAYOUT_BSHD = 1 } attncheck_layout;
/* Diagonal of the causal mask / window: key j is on query i's diagonal when j == i + diagonal_offset[b]. */
typedef enum {
  ATTNCHECK_ALIGN_TOP_LEFT = 0,
  ATTNCHECK_ALIGN_BOTTOM_RIGHT = 1,
  ATTNCHECK_ALIGN_EXPLICIT = 2
} attncheck_alignment;
typedef enum { ATTNCHECK_FILL_NEG_INF = 0, ATTNCHECK_FILL_FINITE = 1 } attncheck_fill;
/* Rows with no visible key: out/weights NaN, out/weights 0, or uniform weights over all keys. */
typedef enum {
  ATTNCHECK_FULLY_MASKED_NAN = 0,
  ATTNCHECK_FULLY_MASKED_ZERO = 1,
  ATTNCHECK_FULLY_MASKED_UNIFORM = 2
} attncheck_fully_masked;

typedef enum { ATTNCHECK_STATUS_OK = 0, ATTNCHECK_STATUS_ERROR = 1 } attncheck_status;

/* One problem with its tensors. Semantics are attncheck's Problem (docs/problem-model.md); every field is filled.
 * Element types: f64 = double, f32 = float, f16/bf16 = uint16_t bit patterns, u8 = uint8_t (0/1 for masks).
 * Strides are in elements, one per logical dim. q [B,Hq,Lq,Dqk], k [B,Hkv,Lk,Dqk], v [B,Hkv,Lk,Dv],
 * out [B,Hq,Lq,Dv] in `dtype`. mask, bias and keep are indexed by (b, h, i, j) with their strides; a broadcast dim
 * has stride 0, so element (b,h,i,j) is always at b*s[0] + h*s[1] + i*s[2] + j*s[3]. lse [B,Hq,Lq] and
 * weights [B,Hq,Lq,Lk] are in `stat_dtype` (f64 for f64 problems, otherwise f32). Pointers of absent tensors are
 * NULL. Outputs are pre-filled with NaN (+inf when fully_masked is NAN) by the host: every element the plugin does
 * not write fails. */
typedef struct attncheck_problem {
  int64_t B, Hq, Hkv, Lq, Lk, Dqk, Dv; /* Hq is a multiple of Hkv; query head h reads KV head h / (Hq / Hkv) */
  int32_t dtype;                       /* attncheck_dtype of q, k, v and out */
  int32_t layout;                      /* attncheck_layout, informational: the strides already encode it */
  int32_t stat_dtype;                  /* attncheck_dtype of lse and weights */
  double scale;                        /* the effective scale (default 1/sqrt(Dqk) already applied) */

  int32_t causal;                    /* 1: key j visible only when j <= i + diagonal_offset[b] */
  int32_t alignment;                 /* attncheck_alignment, for causal and window */
  const int64_t* diagonal_offset;    /* [B]: the alignment resolved per batch (always set) */
  const int64_t* causal_offsets;     /* [B] or NULL: explicit per-batch offsets as given */
  int64_t causal_offset;             /* explicit offset when causal_offsets is NULL */
  const int64_t* key_lengths;        /* [B] or NULL: keys j >= key_lengths[b] are invisible (padding) */
  int64_t window_left, window_right; /* visible when diag - left <= j <= diag + right; -1 = unbounded */
  double softcap;                    /* > 0: s -> softcap * tanh(s / softcap) before bias and masks; 0 = off */

  const uint8_t* mask; /* boolean mask (1 = attend), or NULL */
  int64_t mask_shape[4], mask_strides[4];
  const void* bias; /* additive bias in bias_dtype, or NULL */
  int32_t bias_dtype;
  int64_t bias_shape[4], bias_strides[4];

  int32_t fill;         /* attncheck_fill: what a masked score becomes */
  double fill_value;    /* with ATTNCHECK_FILL_FINITE */
  int32_t fully_masked; /* attncheck_fully_masked */

  double dropout_p; /* kept weights are scaled by 1 / (1 - dropout_p) */
  uint64_t dropout_seed;
  const uint8_t* keep; /* [B,Hq,Lq,Lk] keep-mask (1 = keep) when dropout_p > 0, else NULL */
  int64_t keep_strides[4];

  const void *q, *k, *v;
  int64_t q_strides[4], k_strides[4], v_strides[4];
  void* out;
  int64_t out_strides[4];
  void* lse; /* NULL unless requested */
  int64_t lse_strides[3];
  void* weights; /* NULL unless requested */
  int64_t weights_strides[4];

  /* v2: only read these when the vtable's abi_version >= 2 (the host then always sets them). */
  uint32_t struct_size;                   /* sizeof(attncheck_problem) of the host: later versions append more */
  uint32_t abi_version;                   /* the host's ATTNCHECK_PLUGIN_ABI_VERSION */
  const struct attncheck_extension* next; /* extension chain: problem features beyond the fields above */
} attncheck_problem;

/* Extensions: tagged structs chained behind attncheck_problem.next (and each other's next). A plugin walks the
 * chain; an extension whose tag it does not know describes a feature it did not declare, and the host never sends
 * a problem with such a feature (see `features` in the vtable), so unknown tags can be skipped safely. */
typedef struct attncheck_extension {
  uint32_t tag;         /* ATTNCHECK_EXT_* */
  uint32_t struct_size; /* size of the whole tagged struct */
  const struct attncheck_extension* next;
} attncheck_extension;

/* Tag 1: the case's name ("fp32/B1-Hq2-.../causal-tl"), for the plugin's own logs. Always present in v2. */
#define ATTNCHECK_EXT_CASE_NAME 1u
typedef struct attncheck_ext_case_name {
  attncheck_extension header; /* tag ATTNCHECK_EXT_CASE_NAME */
  const char* name;
} attncheck_ext_case_name;

/* Tag 2: attention sinks, present iff the problem has them (feature name "sinks"). sinks[h] is query head h's
 * sink logit: exp(sinks[h]) joins the softmax denominator of every row of that head and carries no value, so
 * lse = log(sum_j exp(s_ij) + exp(sinks[h])); -INFINITY means no sink for that head. A row without a visible key
 * but with a finite sink is not fully masked: its key weights and output are 0 and lse = sinks[h]. */
#define ATTNCHECK_EXT_SINKS 2u
typedef struct attncheck_ext_sinks {
  attncheck_extension header; /* tag ATTNCHECK_EXT_SINKS */
  const double* sinks;        /* [Hq] */
} attncheck_ext_sinks;

/* Tag 3: the raw-score output, present iff the problem asks for it (feature name "scores"; ONNX Attention's
 * qk_matmul_output_mode 0-2). The plugin writes scores[b,h,i,j] (stat_dtype, strides in elements) at the stage:
 * 1 = scale * q.k for every key (masked or not), 2 = the same after the softcap, 3 = after softcap, bias and
 * masks (the softmax's input; masked keys hold the fill: -inf, or fill_value). Pre-filled with NaN by the host. */
#define ATTNCHECK_EXT_SCORES 3u
typedef struct attncheck_ext_scores {
  attncheck_extension header; /* tag ATTNCHECK_EXT_SCORES */
  int32_t stage;              /* 1 scaled, 2 capped, 3 masked */
  void* scores;               /* [B,Hq,Lq,Lk]; NULL in supports() */
  int64_t strides[4];
} attncheck_ext_scores;

/* Tag 4: KV-cache append, present iff the problem has a past (feature name "kv_append"; ONNX past_key/present_key,
 * FlashAttention's flash_attn_with_kvcache with k_new/v_new). Then k and v of attncheck_problem hold only the
 * Lk - past_len new tokens (k_strides, v_strides index them from 0) and Lk is the present length. The plugin writes
 * present[b,h,j,:] = j < past_len ? past[b,h,j,:] : new[b,h,j - past_len,:] (dtype of q/k/v, an exact copy), for
 * keys and values, and attends over the Lk present tokens (masks, padding and the diagonal refer to present
 * positions). Present buffers are pre-filled with NaN by the host; all pointers are NULL in supports(). */
#define ATTNCHECK_EXT_KV_APPEND 4u
typedef struct attncheck_ext_kv_append {
  attncheck_extension header;  /* tag ATTNCHECK_EXT_KV_APPEND */
  int64_t past_len;            /* >= 1 */
  const void *past_k, *past_v; /* [B,Hkv,past_len,Dqk], [B,Hkv,past_len,Dv] */
  int64_t past_k_strides[4], past_v_strides[4];
  void *present_k, *present_v; /* [B,Hkv,Lk,Dqk], [B,Hkv,Lk,Dv] */
  int64_t present_k_strides[4], present_v_strides[4];
} attncheck_ext_kv_append;

/* Tag 5: the backward pass (feature name "backward"; a plugin that does not list it is never asked). With this
 * extension in the chain, supports() is asked whether the plugin can compute the gradients of this problem
 * (pointers NULL), and run() computes them instead of the forward: p->out, p->lse and p->weights are NULL, and the
 * plugin's own forward results for the same problem (run with lse) come in here, with the upstream gradient dout.
 * The gradients are of L = sum(dout * out): dq [B,Hq,Lq,Dqk], dk [B,Hkv,Lk,Dqk], dv [B,Hkv,Lk,Dv] in `dtype`
 * (GQA: dk and dv summed over the query heads of each KV head), dbias in bias_dtype with bias_shape, NULL without a
 * bias; dbias_strides are 0 along its broadcast dims, like bias_strides, so element (b,h,i,j) of the full gradient
 * adds into dbias[b*s[0] + h*s[1] + i*s[2] + j*s[3]]. The host pre-fills them with NaN: every element must be written,
 * zeros included (masked keys and fully-masked rows get exactly zero gradient). Inputs, out, lse and dout are
 * checked unchanged afterwards and the gradients have guard bands, as in the forward. docs/plugins.md#backward. */
#define ATTNCHECK_EXT_BACKWARD 5u
typedef struct attncheck_ext_backward {
  attncheck_extension header; /* tag ATTNCHECK_EXT_BACKWARD */
  const void* out;            /* the forward output [B,Hq,Lq,Dv], dtype */
  int64_t out_strides[4];
  const void* lse; /* the forward lse [B,Hq,Lq], stat_dtype */
  int64_t lse_strides[3];
  const void* dout; /* [B,Hq,Lq,Dv], dtype */
  int64_t dout_strides[4];
  void* dq;
  int64_t dq_strides[4];
  void* dk;
  int64_t dk_strides[4];
  void* dv;
  int64_t dv_strides[4];
  void* dbias; /* NULL without a bias */
  int64_t dbias_strides[4];
} attncheck_ext_backward;

/* Tag 6: packed variable-length sequences, present iff the problem has them (feature name "varlen"; FlashAttention's
 * varlen API with cu_seqlens_q/cu_seqlens_k). Then B = 1 and sequence s owns queries [cu_seqlens_q[s],
 * cu_seqlens_q[s+1]) and keys [cu_seqlens_k[s], cu_seqlens_k[s+1]) of the one batch entry (empty sequences allowed).
 * A query sees only its own sequence's keys; other keys are not part of its row (weights 0, even with a finite
 * fill). The causal/window diagonal is per sequence: key k0 + (i - q0) + offset, offset = 0 (top-left),
 * Lk_s - Lq_s (bottom-right) or causal_offset (explicit); key_lengths and diagonal_offset do not apply. A sequence
 * with queries but no keys is fully masked (out by the policy, lse -inf), unless its head has a sink. */
#define ATTNCHECK_EXT_VARLEN 6u
typedef struct attncheck_ext_varlen {
  attncheck_extension header;  /* tag ATTNCHECK_EXT_VARLEN */
  int64_t sequences;           /* S >= 1 */
  const int64_t* cu_seqlens_q; /* [S + 1], 0 .. Lq */
  const int64_t* cu_seqlens_k; /* [S + 1], 0 .. Lk */
} attncheck_ext_varlen;

/* Tag 7: a paged KV cache, present iff the problem has one (feature name "paged_kv"; vLLM/FlashInfer paged
 * attention, FlashAttention's flash_attn_with_kvcache with block_table). Then p->k and p->v are the page pools
 * [num_pages, Hkv, page_size, Dqk|Dv] (k_strides/v_strides index them: page, head, token, dim) and key j of batch b
 * is token j % page_size of page block_table[b * pages_per_seq + j / page_size]. Pages may be shared between
 * batch entries; pool slots no entry maps hold NaN in attncheck's cases. B, Lk and key_lengths (= cache_seqlens)
 * keep their meaning. */
#define ATTNCHECK_EXT_PAGED_KV 7u
typedef struct attncheck_ext_paged_kv {
  attncheck_extension header; /* tag ATTNCHECK_EXT_PAGED_KV */
  int64_t page_size;          /* tokens per page, >= 1 */
  int64_t num_pages;          /* pages in the pool */
  int64_t pages_per_seq;      /* ceil(Lk / page_size): the block table's row length */
  const int64_t* block_table; /* [B, pages_per_seq], entries in [0, num_pages) */
} attncheck_ext_paged_kv;

/* Tag 8: fp8 inputs, present iff the problem's dtype is ATTNCHECK_DTYPE_E4M3 or ATTNCHECK_DTYPE_E5M2 (feature name
 * "fp8"; cuDNN's sdpa_fp8, FlashAttention-3's fp8 forward). q, k, v (and the past of tag 4) hold 8-bit codes of the
 * OCP FP8 formats (e4m3: no infinities, max 448, S.1111.111 = NaN; e5m2: IEEE-like, max 57344); their values are
 * descale_q/k/v times the codes. out is written in out_dtype (bf16), not in `dtype`; stat_dtype stays f32; present
 * (tag 4) holds the codes. A plugin listing "fp8" is offered both formats and may decline one in supports(). */
#define ATTNCHECK_EXT_FP8 8u
typedef struct attncheck_ext_fp8 {
  attncheck_extension header;             /* tag ATTNCHECK_EXT_FP8 */
  double descale_q, descale_k, descale_v; /* finite, > 0 */
  int32_t out_dtype;                      /* attncheck_dtype of out (ATTNCHECK_DTYPE_BF16) */
} attncheck_ext_fp8;

/* Tag 9: the schedule of this run (docs/invariance.md#schedule), present only when the plugin declared schedule
 * knobs (attncheck_declarations.schedule_knobs) and the host asks for a setting other than the plugin's own choice.
 * A field is 0 where the plugin chooses; the host only sets the knobs declared. The result must stay the same bits
 * across the settings of the knobs in schedule_bitwise, and within tolerance across the others. */
#define ATTNCHECK_EXT_SCHEDULE 9u
typedef struct attncheck_ext_schedule {
  attncheck_extension header; /* tag ATTNCHECK_EXT_SCHEDULE */
  int32_t threads;            /* worker threads, >= 1; 0 = the plugin's choice */
  int32_t num_splits;         /* key splits per row (split-KV), >= 1; 0 = the plugin's choice */
  int32_t reversed;           /* 1: take the work units (query blocks, heads) in reverse order */
} attncheck_ext_schedule;

/* Tag 10: the max-logit output, present iff the problem asks for it (feature name "max_logit"; TransformerEngine's
 * return_max_logit, for QK-clip). The plugin writes the maximum of the softmax input over each row's visible keys:
 * after the scale, softcap and bias, before any exp, in natural units; a row with no visible key gives the fill
 * (-INFINITY, or fill_value with ATTNCHECK_FILL_FINITE); a sink does not count. form 1 (rows): max_logit[b,h,i],
 * strides[0..2]; form 2 (heads): max_logit[h], the maximum over b and i, strides[0]. stat_dtype; pre-filled with
 * NaN by the host; NULL in supports(). */
#define ATTNCHECK_EXT_MAX_LOGIT 10u
typedef struct attncheck_ext_max_logit {
  attncheck_extension header; /* tag ATTNCHECK_EXT_MAX_LOGIT */
  int32_t form;               /* 1 rows [B,Hq,Lq], 2 heads [Hq] */
  void* max_logit;
  int64_t strides[3]; /* elements; heads: strides[0] only */
} attncheck_ext_max_logit;

/* Tag 11: the problem's score, mask and position modifications (docs/problem-model.md "Modifications"), present iff
 * it uses any. A plugin is offered an entry only if it lists the entry's name ("alibi", "document", "rope", ...;
 * `attncheck list` prints them) in the vtable's `features`; a problem using an entry it does not list is reported
 * unsupported and never reaches supports() or run(). `mods` holds every entry the problem uses, in library order
 * (the order scores are modified); each carries its parameters by the names, types and meanings that
 * docs/problem-model.md gives for it (e.g. alibi: "alibi_slopes", f64, Hq or B*Hq values). The query's position on
 * the key axis is pos = i + diagonal_offset[b] for every entry. A new library entry needs no new tag. */
#define ATTNCHECK_EXT_MODIFICATIONS 11u
typedef enum { ATTNCHECK_MOD_SCORE = 0, ATTNCHECK_MOD_MASK = 1, ATTNCHECK_MOD_POSITION = 2 } attncheck_mod_kind;
typedef enum { ATTNCHECK_PARAM_I64 = 0, ATTNCHECK_PARAM_F64 = 1, ATTNCHECK_PARAM_TEXT = 2 } attncheck_param_type;
typedef struct attncheck_mod_param {
  const char* key;    /* the parameter's name, e.g. "alibi_slopes", "chunk_size", "score_expr" */
  int32_t type;       /* attncheck_param_type; a bool is an I64 of 0 or 1 */
  int64_t count;      /* values in i64 or f64 (a scalar: 1; an empty list: 0); TEXT: 1 */
  const int64_t* i64; /* with ATTNCHECK_PARAM_I64, else NULL */
  const double* f64;  /* with ATTNCHECK_PARAM_F64, else NULL */
  const char* text;   /* with ATTNCHECK_PARAM_TEXT (NUL-terminated UTF-8), else NULL */
} attncheck_mod_param;
typedef struct attncheck_mod {
  const char* name; /* the library entry's name, as listed in `features` */
  int32_t kind;     /* attncheck_mod_kind */
  int64_t param_count;
  const attncheck_mod_param* params; /* every parameter of the entry, set or at its default */
} attncheck_mod;
typedef struct attncheck_ext_modifications {
  attncheck_extension header; /* tag ATTNCHECK_EXT_MODIFICATIONS */
  int64_t count;              /* >= 1 */
  const attncheck_mod* mods;
} attncheck_ext_modifications;

/* Tag 12: the block mask the kernel may consume (docs/block-mask.md; FlexAttention's BlockMask), present in run()
 * when the caller hands one (`attncheck verify --block-mask Q,K`) and the plugin lists "block_mask" in `features`:
 * the exact block mask of the problem at q_block x kv_block, derived by attncheck from the dense mask. Per (b, h,
 * query block) kv_num_blocks counts the partial key blocks listed in kv_indices and full_kv_num_blocks the full
 * ones in full_kv_indices (indices ascending; slots past a count unused). A key block listed in neither is empty: a
 * kernel may skip it. A full one has every score visible: a kernel may apply no mask in it. A tail block (Lq or Lk
 * not a multiple of the block size) is never full. B or H of 1 stands for every batch or head. */
#define ATTNCHECK_EXT_BLOCK_MASK 12u
typedef struct attncheck_ext_block_mask {
  attncheck_extension header;        /* tag ATTNCHECK_EXT_BLOCK_MASK */
  int64_t q_block, kv_block;         /* block sizes, >= 1 */
  int64_t B, H, q_blocks, slots;     /* q_blocks = ceil(Lq / q_block); slots = ceil(Lk / kv_block) */
  const int64_t* kv_num_blocks;      /* [B, H, q_blocks] */
  const int64_t* kv_indices;         /* [B, H, q_blocks, slots] */
  const int64_t* full_kv_num_blocks; /* [B, H, q_blocks] */
  const int64_t* full_kv_indices;    /* [B, H, q_blocks, slots] */
} attncheck_ext_block_mask;

/* Tag 13: absorbed MLA (feature name "mla"; docs/problem-model.md "Absorbed MLA"; FlashMLA, FlashInfer's MLA): K
 * holds one latent vector per token and V is its first Dv columns, one cache read as keys and values. p->v points at
 * k's storage and v_strides are k's, so V's row stride is the latent row's (Dqk elements in BHSD), not Dv: a kernel
 * that steps V by Dv reads the wrong rows. Hkv is 1 in attncheck's cases; p->scale comes from the declared
 * dimension (DeepSeek-V3: 1/sqrt(192)), not from Dqk. */
#define ATTNCHECK_EXT_MLA 13u
typedef struct attncheck_ext_mla {
  attncheck_extension header; /* tag ATTNCHECK_EXT_MLA */
  int64_t latent_dim;         /* Dqk: the columns of the one cache; V is columns [0, Dv) of it */
} attncheck_ext_mla;

/* Tag 14: a quantized KV cache (feature name "kv_quant"; docs/problem-model.md "Quantized KV cache"; vLLM's and
 * FlashInfer's int8/fp8 caches, llama.cpp's q8_0): k and v hold codes in `codes` (int8_t, or fp8 codes as uint8_t)
 * and element (b,h,j,d) of k is its code times k_scale[b*s[0] + h*s[1] + j*s[2] + (d / kv_block)*s[3]] (likewise v),
 * the scales in scale_dtype. A stride is 0 along the dims a scale is shared over, so one formula serves every
 * granularity; `granularity` says which it is. q and out stay in p->dtype. */
#define ATTNCHECK_EXT_KV_QUANT 14u
typedef enum {
  ATTNCHECK_KV_TENSOR = 0,
  ATTNCHECK_KV_HEAD = 1,
  ATTNCHECK_KV_TOKEN = 2,
  ATTNCHECK_KV_BLOCK = 3
} attncheck_kv_granularity;
typedef struct attncheck_ext_kv_quant {
  attncheck_extension header;    /* tag ATTNCHECK_EXT_KV_QUANT */
  int32_t codes;                 /* attncheck_dtype of k and v: ATTNCHECK_DTYPE_I8, _E4M3 or _E5M2 */
  int32_t granularity;           /* attncheck_kv_granularity: per tensor, (batch, KV head), token, block */
  int64_t kv_block;              /* head-dim elements per scale (the block granularity); else Dqk or more */
  int32_t scale_dtype;           /* attncheck_dtype of the scales: F32, F16 or BF16 */
  const void *k_scale, *v_scale; /* NULL in supports() */
  int64_t k_scale_strides[4], v_scale_strides[4];
} attncheck_ext_kv_quant;

/* What the plugin can do; the host turns it into attncheck::Capabilities and checks every case against it before
 * calling supports() and run(). Bit masks: bit (1u << enum value). Booleans are 0/1. */
typedef struct attncheck_capabilities {
  uint32_t dtypes;       /* attncheck_dtype bits */
  uint32_t layouts;      /* attncheck_layout bits */
  uint32_t alignments;   /* attncheck_alignment bits */
  uint32_t fully_masked; /* attncheck_fully_masked bits */
  int32_t gqa, cross, dqk_ne_dv, causal, per_batch_offsets, key_padding, bool_mask, bias, window, softcap, dropout,
      finite_fill, weights_out, lse_out;
  int64_t max_head_dim;      /* 0 = no limit */
  int64_t head_dim_multiple; /* 1 = any */
  const char* notes;         /* static string or NULL */
} attncheck_capabilities;

/* v2: what the plugin declares about itself; the harness judges against it (docs/isolation.md#declarations).
 * The host zero-fills the struct and sets struct_size before the call. */
typedef struct attncheck_declarations {
  uint32_t struct_size;
  int32_t fully_masked_policy; /* attncheck_fully_masked followed natively, or -1 = follows the problem */
  int32_t deterministic;       /* 1: same inputs give the same bits */
  uint32_t outputs;            /* bits: 1 = out, 2 = lse, 4 = weights (0 = derived from the capabilities) */
  const char* contract[4];     /* per attncheck_dtype f64..bf16: precision contract string as in
                                  attncheck/contract.hpp ("qk=fp16,acc=fp32,p=rounded"), or NULL = default */
  /* Appended with tag 8: read by hosts that know it, written by a plugin only when struct_size covers it. */
  const char* contract_fp8[2]; /* e4m3, e5m2: as contract[], e.g. "p=exact"; NULL = default */
  /* Appended after tag 8 (ATTNCHECK_DECL_BATCH_INVARIANT), written by a plugin only when struct_size covers it: */
  int32_t batch_invariant; /* 1: a batch entry gives the same bits whatever else is in the batch */
  /* Appended with it (ATTNCHECK_DECL_MASKED_INPUTS): what the contract asks of K/V values no query sees. */
  int32_t masked_inputs; /* 0 isolated (default: they never reach an output), 1 finite-required */
  /* Appended with tag 9 (ATTNCHECK_DECL_SCHEDULE), written by a plugin only when struct_size covers it: */
  uint32_t schedule_knobs;   /* knobs it honours (tag 9): 1 threads, 2 num_splits, 4 block order */
  uint32_t schedule_bitwise; /* of those, the ones whose settings give the same bits */
  int32_t layout_invariant;  /* 1: the same data in another layout or strides gives the same bits */
} attncheck_declarations;

/* Defined by headers that have attncheck_declarations.batch_invariant, so a plugin can build against older ones. */
#define ATTNCHECK_DECL_BATCH_INVARIANT 1
#define ATTNCHECK_DECL_MASKED_INPUTS 1
#define ATTNCHECK_DECL_SCHEDULE 1

/* The merge of attention states (docs/states.md; docs/plugins.md#merge): N stored states of the same rows in, the
 * merged state out, as FlashAttention's combine, FlashInfer's merge_states or vLLM's merge_attn_states compute it.
 * Offered only to a plugin that lists the feature "merge" and sets the vtable's `merge` (appended below). A state is
 * stored under the conventions given here (never guessed): normalised = O and lse; unnormalised = O times the sum,
 * the row max and the sum. Stats (lse, max, sum) are always f32 and their strides follow stat_layout, so a plugin that
 * ignores the strides reads the wrong rows. Element (n,b,h,i,d) of o_in is at n*s[0] + b*s[1] + h*s[2] + i*s[3] +
 * d*s[4]; element (n,b,h,i) of a stat input at n*s[0] + b*s[1] + h*s[2] + i*s[3]; outputs drop n. Outputs are
 * NaN-filled by the host; inputs are checked unchanged afterwards and outputs have guard bands. Pointers of the other
 * form are NULL. */
typedef enum { ATTNCHECK_STATE_NORMALISED = 0, ATTNCHECK_STATE_UNNORMALISED = 1 } attncheck_state_form;
typedef enum { ATTNCHECK_LSE_BASE_E = 0, ATTNCHECK_LSE_BASE_2 = 1 } attncheck_lse_base;
/* The stored lse (or max) of a state that saw no key; under FINITE the value is `sentinel` (as an f32). */
typedef enum {
  ATTNCHECK_EMPTY_NEG_INF = 0,
  ATTNCHECK_EMPTY_POS_INF = 1,
  ATTNCHECK_EMPTY_FINITE = 2
} attncheck_empty_lse;
/* The O of an empty state: 0, or anything (NaN included) that must not reach the merged result. */
typedef enum { ATTNCHECK_EMPTY_OUT_ZERO = 0, ATTNCHECK_EMPTY_OUT_UNDEFINED = 1 } attncheck_empty_out;
typedef enum { ATTNCHECK_STAT_BHL = 0, ATTNCHECK_STAT_BLH = 1 } attncheck_stat_layout;
typedef struct attncheck_merge_problem {
  uint32_t struct_size;  /* sizeof(attncheck_merge_problem) of the host: later versions append more */
  const char* name;      /* the case's name, for the plugin's own logs */
  int64_t N, B, H, L, D; /* N >= 1 states of [B,H,L] rows of D values */
  int32_t dtype;         /* attncheck_dtype of o_in and o_out (F32, F16 or BF16) */
  int32_t form;          /* attncheck_state_form */
  int32_t lse_base;      /* attncheck_lse_base: lse and max in nats or in bits (log2) */
  int32_t empty_lse;     /* attncheck_empty_lse */
  double sentinel;       /* the empty lse under ATTNCHECK_EMPTY_FINITE */
  int32_t empty_out;     /* attncheck_empty_out */
  int32_t stat_layout;   /* attncheck_stat_layout, informational: the strides already encode it */
  const void* o_in;      /* [N,B,H,L,D]; the strides carry a token-major O ([N,B,L,H,D] in memory) */
  int64_t o_in_strides[5];
  const float *lse_in, *max_in, *sum_in; /* [N,B,H,L]: lse when normalised, max and sum when unnormalised */
  int64_t lse_in_strides[4], max_in_strides[4], sum_in_strides[4];
  void* o_out; /* [B,H,L,D] */
  int64_t o_out_strides[4];
  float *lse_out, *max_out, *sum_out; /* [B,H,L], the same form as the inputs */
  int64_t lse_out_strides[3], max_out_strides[3], sum_out_strides[3];
} attncheck_merge_problem;

/* An attention module (docs/module.md; docs/plugins.md#module): y = merge(attention(split(x Wq^T + bq), split(kv Wk^T
 * + bk), split(kv Wv^T + bv))) Wo^T + bo, with kv = x (self attention) or x2 (cross attention). Offered only to a
 * plugin that lists the feature "module" and sets the vtable's `run_module` (appended below). Every weight is
 * [out, in] as nn.Linear stores it, every bias [out]; x, x2, weights and biases are in attn->dtype, and so is y.
 * Packing of the q, k, v weights (module_problem.hpp): SEPARATE = wq [Hq*Dqk, d_in], wk [Hkv*Dqk, d_kv], wv [Hkv*Dv,
 * d_kv]; PACKED = one wqkv with rows [q | k | v], each block head-major (nn.MultiheadAttention's in_proj_weight);
 * INTERLEAVED = one wqkv whose rows are grouped per KV head g: [the q rows of g's Hq/Hkv query heads | k_g | v_g]
 * (Megatron-LM). Packed weights of a cross-attention module project x with the q rows and x2 with the k, v rows.
 * Row r of a projection's output block belongs to head r / D, column r % D. The attention inside is `attn`, an
 * attncheck_problem with its shape, scale, masks (mask, bias and keep with their pointers and strides, key_lengths,
 * causal), policy and dropout; its q, k, v, out, lse and weights are NULL (the module makes q, k, v itself).
 * weights, when not NULL, is the attention weights output in attn->stat_dtype: [B,Hq,Lq,Lk], or [B,1,Lq,Lk] averaged
 * over the heads when average_weights is 1. Strides in elements. Outputs are NaN-filled by the host; inputs are checked
 * unchanged afterwards and outputs have guard bands. Pointers of absent tensors are NULL. */
typedef enum {
  ATTNCHECK_PACKING_SEPARATE = 0,
  ATTNCHECK_PACKING_PACKED = 1,
  ATTNCHECK_PACKING_INTERLEAVED = 2
} attncheck_packing;
typedef struct attncheck_module_problem {
  uint32_t struct_size;          /* sizeof(attncheck_module_problem) of the host: later versions append more */
  const char* name;              /* the case's name, for the plugin's own logs */
  const attncheck_problem* attn; /* the attention inside (B, Hq, Hkv, Lq, Lk, Dqk, Dv, dtype, masks, ...) */
  int64_t d_in;                  /* features of x */
  int64_t d_in2;                 /* features of x2; 0 = self attention (Lk == Lq, keys and values from x) */
  int64_t d_out;                 /* features of y */
  int32_t packing;               /* attncheck_packing */
  int32_t qkv_bias, out_bias, average_weights; /* 0/1 */
  const void *x, *x2;                          /* [B,Lq,d_in], [B,Lk,d_in2] (x2 NULL for self attention) */
  int64_t x_strides[3], x2_strides[3];
  const void *wq, *wk, *wv, *wqkv, *wo; /* separate: wq, wk, wv; packed/interleaved: wqkv; wo [d_out, Hq*Dv] */
  int64_t wq_strides[2], wk_strides[2], wv_strides[2], wqkv_strides[2], wo_strides[2];
  const void *bq, *bk, *bv, *bqkv, *bo; /* with qkv_bias (bq/bk/bv or bqkv by the packing), with out_bias (bo) */
  int64_t bq_strides[1], bk_strides[1], bv_strides[1], bqkv_strides[1], bo_strides[1];
  void* y; /* [B,Lq,d_out] */
  int64_t y_strides[3];
  void* weights; /* NULL unless requested */
  int64_t weights_strides[4];
} attncheck_module_problem;

/* The vtable. Strings are static, NUL-terminated UTF-8. Messages go into caller-owned buffers (always
 * NUL-terminated by the plugin, truncated if needed) so plugins need no thread-local state. */
typedef struct attncheck_plugin {
  uint32_t abi_version; /* ATTNCHECK_PLUGIN_ABI_VERSION the plugin was built with; must stay the first field */
  const char* name;     /* implementation name, e.g. "my-flash"; unique among implementations */
  const char* description;
  /* Fill *caps. Returns ATTNCHECK_STATUS_OK, or ERROR with a message in err. */
  int32_t (*capabilities)(attncheck_capabilities* caps, char* err, size_t err_size);
  /* Optional (may be NULL): 1 if the plugin can run on this machine, else 0 with the reason (e.g. no GPU). */
  int32_t (*available)(char* reason, size_t reason_size);
  /* Optional (may be NULL): 1 if this case is supported beyond the capability flags, else 0 with the reason.
   * Tensor pointers are NULL here; only the shape and semantic fields are meaningful. */
  int32_t (*supports)(const attncheck_problem* p, char* reason, size_t reason_size);
  /* Compute out (and lse, weights when their pointers are set). ATTNCHECK_STATUS_OK, or ERROR with a message. */
  int32_t (*run)(const attncheck_problem* p, char* err, size_t err_size);

  /* v2 (read only when abi_version >= 2): */
  uint32_t struct_size; /* sizeof(attncheck_plugin) the plugin was built with */
  /* Capability negotiation for features beyond the v1 flags: NULL-terminated list of the feature names (as in
   * docs/worker-protocol.md) the plugin supports, and "backward" when run() computes gradients (tag 5). A problem using
   * a feature not listed here is reported unsupported and never reaches supports() or run(). NULL = none beyond the v1
   * flags. */
  const char* const* features;
  /* Optional (may be NULL): fill *d. ATTNCHECK_STATUS_OK, or ERROR with a message. */
  int32_t (*declarations)(attncheck_declarations* d, char* err, size_t err_size);
  /* Appended after `declarations`, read only when struct_size covers them (ATTNCHECK_PLUGIN_HAS_MERGE); required
   * when "merge" is among the features, ignored otherwise: */
  /* Optional (may be NULL): 1 if this merge is supported, else 0 with the reason. Tensor pointers are NULL. */
  int32_t (*supports_merge)(const attncheck_merge_problem* m, char* reason, size_t reason_size);
  /* Merge the states: write o_out and the output stats. ATTNCHECK_STATUS_OK, or ERROR with a message. */
  int32_t (*merge)(const attncheck_merge_problem* m, char* err, size_t err_size);
  /* Appended after `merge`, read only when struct_size covers them (ATTNCHECK_PLUGIN_HAS_MODULE); required when
   * "module" is among the features, ignored otherwise: */
  /* Optional (may be NULL): 1 if this module is supported, else 0 with the reason. Tensor pointers are NULL. */
  int32_t (*supports_module)(const attncheck_module_problem* m, char* reason, size_t reason_size);
  /* Run the module forward: write y (and weights when set). ATTNCHECK_STATUS_OK, or ERROR with a message. */
  int32_t (*run_module)(const attncheck_module_problem* m, char* err, size_t err_size);
} attncheck_plugin;

/* Defined by headers whose vtable has supports_merge and merge, so a plugin can build against older ones. */
#define ATTNCHECK_PLUGIN_HAS_MERGE 1
/* Defined by headers whose vtable has supports_module and run_module. */
#define ATTNCHECK_PLUGIN_HAS_MODULE 1

/* The entry point: returns a pointer to a static vtable (never freed by the host). A plugin defines it as
 *   ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void) { return &my_vtable; } */
typedef const attncheck_plugin* (*attncheck_plugin_entry_fn)(void);
#if defined(_WIN32)
#define ATTNCHECK_PLUGIN_EXPORT __declspec(dllexport)
#else
#define ATTNCHECK_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif
ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin* attncheck_plugin_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTNCHECK_PLUGIN_H */
