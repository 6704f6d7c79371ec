/* FROZEN COPY of attncheck/plugin.h at ABI version 1 (a test fixture: tests/isolation builds the example plugin
 * against it to prove v1 plugins keep loading). Do not edit. Original text follows.
 * attncheck plugin ABI: the C interface a user's shared library implements so `attncheck verify --plugin LIB.so`
 * (and the property suite) can judge it like any built-in implementation. C99, no attncheck headers needed.
 * The host dlopens the library, calls attncheck_plugin_entry() and checks abi_version before anything else. */
#ifndef ATTNCHECK_PLUGIN_H
#define ATTNCHECK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to the structs or function signatures below. The host refuses any other version. */
#define ATTNCHECK_PLUGIN_ABI_VERSION 1u
/* The one symbol a plugin exports (extern "C", default visibility). */
#define ATTNCHECK_PLUGIN_ENTRY_SYMBOL "attncheck_plugin_entry"

/* Enum values are fixed by the ABI; they also index the capability bit masks (bit 1u << value). */
typedef enum {
  ATTNCHECK_DTYPE_F64 = 0,
  ATTNCHECK_DTYPE_F32 = 1,
  ATTNCHECK_DTYPE_F16 = 2,
  ATTNCHECK_DTYPE_BF16 = 3,
  ATTNCHECK_DTYPE_U8 = 4
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
} attncheck_problem;

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
} attncheck_plugin;

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
