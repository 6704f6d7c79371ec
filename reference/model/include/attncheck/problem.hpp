// The attention problem model shared by the reference, every implementation, fixtures and the CLI.
// One Problem describes shapes and semantics (masks, fill, policies, dtype, layout); Inputs holds the tensors.
// Semantics are documented in docs/problem-model.md; validate() names the offending field and its values.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck {
inline namespace model {

// ---------------------------------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------------------------------
// e4m3, e5m2: the 8-bit floats of the OCP FP8 spec as FlashAttention-3 and cuDNN take them (e4m3 = "e4m3fn": no
// infinities, max 448, S.1111.111 is NaN; e5m2: IEEE-like, max 57344, infinities). Inputs only (q, k, v): an fp8
// problem's values are these codes times the problem's descale factors (docs/problem-model.md#fp8-inputs).
// i8: signed 8-bit integer codes of a quantized KV cache (Problem::kv_dtype), never a problem's dtype.
// q4_0, q4_1: llama.cpp's 4-bit KV codes (kv_cache.hpp); a tensor of them holds bytes of two codes each, so its
// elements (get/set) are those bytes, and its last extent is half the head dim.
enum class DType : uint8_t { f64, f32, f16, bf16, u8, e4m3, e5m2, i8, q4_0, q4_1 };

const char* to_string(DType t);
// "fp64"/"f64", "fp32", "fp16", "bf16", "u8", "fp8_e4m3"/"e4m3"/"float8_e4m3fn", "fp8_e5m2"/"e5m2"/"float8_e5m2",
// "int8"/"i8", "q4_0", "q4_1"; throws otherwise
DType dtype_from_string(const std::string& s);
size_t dtype_size(DType t);
// Unit roundoff of a floating dtype (2^-53, 2^-24, 2^-11, 2^-8, 2^-4, 2^-3).
double unit_roundoff(DType t);
inline bool is_fp8(DType t) { return t == DType::e4m3 || t == DType::e5m2; }
inline bool is_q4(DType t) { return t == DType::q4_0 || t == DType::q4_1; }
// fp8 codes: decoding is exact; encoding rounds to nearest even once, and a value beyond the largest finite one
// becomes NaN (e4m3) or +-inf (e5m2), as PyTorch's casts do.
double fp8_bits_to_double(uint8_t bits, DType t);
uint8_t double_to_fp8_bits(double x, DType t);

// IEEE binary16 and bfloat16 as raw bits; conversions round to nearest even, NaN stays NaN.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t h);

// "[2,3,4]": a shape (or any list of integers) as text, for messages.
std::string shape_string(const std::vector<int64_t>& s);
// Round a double to the nearest value representable in `t`, ties to even, rounding once (f64: identity).
// Tensor::set rounds the same way.
double round_to(DType t, double x);

// ---------------------------------------------------------------------------------------------------------------
// A strided host tensor that owns its bytes. Logical index order is the shape's; strides are in elements.
// ---------------------------------------------------------------------------------------------------------------
struct Tensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::vector<uint8_t> bytes;

  Tensor() = default;
  // Contiguous (row-major) tensor, zero-filled.
  Tensor(DType t, std::vector<int64_t> shape);
  // Tensor with a storage permutation: `storage_order[k]` is the logical dim that is the k-th slowest in memory.
  Tensor(DType t, std::vector<int64_t> shape, const std::vector<int>& storage_order);

  int64_t numel() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t offset(const int64_t* idx) const;  // element offset of a logical index
  double get(const int64_t* idx) const;
  void set(const int64_t* idx, double x);  // rounds to dtype
  double get_offset(int64_t off) const;
  void set_offset(int64_t off, double x);
  double at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    const int64_t i[4] = {a, b, c, d};
    return get(i);
  }
  void put(int64_t a, int64_t b, int64_t c, int64_t d, double x) {
    const int64_t i[4] = {a, b, c, d};
    set(i, x);
  }
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  // All elements, widened to double, in logical row-major order.
  std::vector<double> to_double() const;
  // Fill every element with x (NaN poisoning of outputs before a run).
  void fill(double x);
};

// ---------------------------------------------------------------------------------------------------------------
// The problem
// ---------------------------------------------------------------------------------------------------------------
enum class Layout : uint8_t { BHSD, BSHD };
const char* to_string(Layout l);
Layout layout_from_string(const std::string& s);

// Where the causal / window diagonal sits: key j is on the diagonal of query i when j == i + offset.
//   top_left     offset 0                      (PyTorch is_causal, ONNX is_causal)
//   bottom_right offset Lk_b - Lq              (FlashAttention >= 2.1; Lk_b is the batch's key length)
//   explicit_    offset = causal_offset, or causal_offsets[b] when given (a KV cache of P past tokens: P)
enum class Alignment : uint8_t { top_left, bottom_right, explicit_ };
const char* to_string(Alignment a);
Alignment alignment_from_string(const std::string& s);

// What a masked score becomes before the softmax.
enum class MaskFill : uint8_t { neg_inf, finite };
// What a row with no visible key produces (see docs/problem-model.md for which implementation does which):
//   nan      out, weights NaN      (plain -inf softmax: PyTorch math backend)
//   zero     out, weights 0        (FlashAttention, cuDNN, ONNX Attention, PyTorch fused kernels)
//   uniform  weights 1/Lk over all keys, out = mean of all values (a finite fill such as -1e9)
// lse of such a row is log(sum_j exp(fill)): -inf with an infinite fill, fill + log(Lk) with a finite one.
enum class FullyMasked : uint8_t { nan, zero, uniform };
// Raw scores as an output (ONNX Attention's qk_matmul_output_mode 0, 1, 2; mode 3 is want_weights), [B,Hq,Lq,Lk]:
//   scaled  scale * q_i.k_j for every key, masked or not (mode 0)
//   capped  the same after the softcap (mode 1; = scaled without a softcap)
//   masked  after softcap, bias and masks: the softmax's input, masked keys = the fill (mode 2)
enum class ScoresOut : uint8_t { none, scaled, capped, masked };
const char* to_string(MaskFill f);
const char* to_string(FullyMasked p);
const char* to_string(ScoresOut s);
ScoresOut scores_out_from_string(const std::string& s);
// The max-logit output (QK-clip / MuonClip; TransformerEngine's return_max_logit): the largest softmax input over a
// row's visible keys, i.e. after scale, softcap, bias and score modifications (the sink is not a key); a row with
// no visible key gives the fill (-inf, or the finite fill). docs/problem-model.md "Max-logit output".
//   rows   [B,Hq,Lq]
//   heads  [Hq]: the rows' maximum over batches and queries (TransformerEngine's shape)
enum class MaxLogitOut : uint8_t { none, rows, heads };
const char* to_string(MaxLogitOut m);
MaxLogitOut max_logit_from_string(const std::string& s);
// Granularity of a quantized KV cache's scales (reference/model/src/kv_cache.cpp): none = K and V are in the problem's
// dtype; tensor = one scale; head = one per (batch, KV head) (FlashAttention-3's descale shape); token = one per
// (batch, KV head, token); block = one per kv_block consecutive head-dim elements of a token (llama.cpp q8_0).
enum class KvScales : uint8_t { none, tensor, head, token, block };
const char* to_string(KvScales g);
KvScales kv_scales_from_string(const std::string& s);
MaskFill fill_from_string(const std::string& s);
FullyMasked fully_masked_from_string(const std::string& s);

struct Problem {
  // Shapes: Q [B, Hq, Lq, Dqk], K [B, Hkv, Lk, Dqk], V [B, Hkv, Lk, Dv], O [B, Hq, Lq, Dv] (logical order).
  int64_t B = 1, Hq = 1, Hkv = 1, Lq = 1, Lk = 1, Dqk = 1, Dv = 1;
  DType dtype = DType::f32;      // q, k, v and out
  Layout layout = Layout::BHSD;  // memory order of q, k, v and out

  std::optional<double> scale;  // default 1/sqrt(Dqk); 0 and negative allowed

  // Masks (all compose: a key is visible when every active mask allows it).
  bool causal = false;                        // j <= i + offset
  Alignment alignment = Alignment::top_left;  // for causal and window
  int64_t causal_offset = 0;                  // with Alignment::explicit_
  std::vector<int64_t> causal_offsets;        // per batch, with Alignment::explicit_; empty = causal_offset for all
  std::vector<int64_t> key_lengths;           // per batch valid key count (key padding); empty = Lk for all
  std::optional<std::array<int64_t, 4>> mask_shape;  // boolean mask (true = attend), broadcast to [B,Hq,Lq,Lk]
  std::optional<std::array<int64_t, 4>> bias_shape;  // additive bias, broadcast to [B,Hq,Lq,Lk]
  DType bias_dtype = DType::f32;
  int64_t window_left = -1, window_right = -1;  // sliding window around the diagonal; -1 = unbounded
  double softcap = 0.0;                         // c > 0: s -> c*tanh(s/c) before bias and masking; 0 = off
  // Attention sinks: one logit per query head that joins every row's softmax denominator and has no value
  // (exp(sinks[h]) is added to the sum; -inf = no sink for that head). Empty = no sinks.
  std::vector<double> sinks;
  // KV-cache append (ONNX past_key/present_key, FlashAttention flash_attn_with_kvcache k_new/v_new): 0 = off.
  // P > 0: Inputs::past_k/past_v hold P cached tokens, k/v hold the Lk - P new ones; the implementation writes
  // present = concat(past, new) along the sequence (Outputs::present_k/present_v, Lk tokens, an exact copy) and
  // attends over the Lk present keys. Masks, padding and alignment refer to present positions.
  int64_t past_len = 0;
  // Variable-length batches (FlashAttention's varlen API, PyTorch's jagged layout): S packed sequences in one batch
  // entry (B = 1). Sequence s owns queries [cu_seqlens_q[s], cu_seqlens_q[s+1]) and keys [cu_seqlens_k[s],
  // cu_seqlens_k[s+1]) (S + 1 nondecreasing offsets from 0 to Lq, resp. Lk; empty sequences allowed). A query
  // attends to its own sequence's keys only; causal/window alignment is per sequence (bottom_right: Lk_s - Lq_s).
  // Keys of other sequences are not part of the row at all (not even with a finite fill). Empty = off.
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  // Paged KV cache (vLLM, FlashInfer, FlashAttention's flash_attn_with_kvcache(block_table=...)): page_size > 0
  // stores K and V in a pool of num_pages pages of page_size tokens, Inputs::k [num_pages, Hkv, page_size, Dqk] and
  // v [num_pages, Hkv, page_size, Dv] in the layout; key j of batch b is token j % page_size of page
  // block_table[b * pages_per_seq() + j / page_size]. Pages may be shared; pages no entry names are never read.
  // The cached length per sequence (FlashAttention's cache_seqlens) is key_lengths. 0 = contiguous K/V.
  int64_t page_size = 0, num_pages = 0;
  std::vector<int64_t> block_table;  // [B, pages_per_seq()], row-major
  // fp8 inputs (dtype e4m3 or e5m2; cuDNN's sdpa_fp8, FlashAttention-3's fp8 forward): per-tensor descale factors,
  // the values are q = descale_q * code(q), k and v alike (past and new tokens of a KV-cache append share them).
  // Must stay 1 for other dtypes. docs/problem-model.md#fp8-inputs.
  double descale_q = 1.0, descale_k = 1.0, descale_v = 1.0;
  // Quantized KV cache (vLLM/FlashInfer fp8 caches, llama.cpp q8_0, FA3's per-(batch, KV head) descales): with
  // kv_scales != none, k and v hold kv_dtype codes (int8, fp8_e4m3, fp8_e5m2, 4-bit q4_0 / q4_1 packed two per
  // byte) and their values are code * scale (+ Inputs::k_min / v_min for q4_1),
  // the scales in Inputs::k_scale / v_scale (kv_scale_dtype) at the declared granularity; q stays in dtype and out
  // is delivered in dtype. Described once in reference/model/src/kv_cache.cpp (docs/problem-model.md "Quantized KV
  // cache").
  KvScales kv_scales = KvScales::none;
  DType kv_dtype = DType::i8;         // the codes' format (int8, fp8_e4m3, fp8_e5m2, q4_0, q4_1)
  int64_t kv_block = 32;              // head-dim elements per scale with kv_scales=block
  DType kv_scale_dtype = DType::f32;  // the scales' format (q8_0: fp16)
  bool kv_quantized() const { return kv_scales != KvScales::none; }
  // fp8 output (cuDNN sdpa_fp8's O, scale_o, amax_o): out holds the codes of O * scale_o in o_dtype (rounded once,
  // saturated at the format's largest finite value) and Outputs::amax_o = max |O| before the scaling. Described
  // once in reference/model/src/fp8_out.cpp (docs/problem-model.md "fp8 output").
  bool fp8_out = false;
  DType o_dtype = DType::e4m3;  // the output codes' format: fp8_e4m3 or fp8_e5m2
  double scale_o = 1.0;         // stored = O * scale_o; finite and > 0
  // Absorbed multi-head latent attention (DeepSeek MLA; FlashMLA, FlashInfer's MLA, vLLM): K is one latent cache
  // [c_kv | k_pe] per token and V is its first Dv columns (c_kv), the same memory read twice. Inputs::v holds those
  // columns (reference/model/src/mla.cpp), a fixture stores K alone; the scale is the problem's `scale` (DeepSeek-V3:
  // 1/sqrt(192), the head dim before absorption, not 1/sqrt(Dqk = 576)). docs/problem-model.md "Absorbed MLA".
  bool mla = false;
  // Score and mask modifications (the library: reference/model/src/mods_library.cpp; docs/problem-model.md
  // "Modifications"). Each is off at its default. Query i of batch b sits at key position i + diagonal_offset(b).
  std::vector<double> alibi_slopes;     // ALiBi: [Hq] or [B, Hq] (fp32 values): score -= slope * |pos - j|
  std::vector<double> t5_table;         // T5 relative-position bias [Hq, t5_buckets], added by distance bucket
  std::vector<double> key_bias;         // per-key logit bias [Hq, Lk] or [B, Hq, Lk]: score + key_bias[b, h, j]
  int64_t t5_buckets = 0;               // buckets of the T5 table (0 = off)
  int64_t t5_max_distance = 128;        // distance where the last T5 bucket starts (log-spaced above buckets/2)
  bool t5_bidirectional = true;         // T5 encoder (true) or decoder (false) bucketing
  std::vector<int64_t> doc_ids;         // document mask: [B, Lk] document id per token; j visible iff same doc
  int64_t chunk_size = 0;               // chunked local attention: pos / C == j / C (0 = off)
  std::vector<int64_t> prefix_lengths;  // prefix-LM: [B]: j visible iff j < prefix_lengths[b] or j <= pos
  int64_t dilated_window = -1;          // dilated sliding window: |pos - j| <= dilated_window * dilation
  int64_t dilation = 1;                 //   and (pos - j) divisible by dilation (-1 = off)
  int64_t topk = 0;                     // top-k sparse attention: slots per query token (0 = off)
  std::vector<int64_t> topk_indices;    //   [B, Lq, topk] key positions, -1 = trailing padding; j visible iff listed
  // Rotary position embedding (the position stage: reference/model/src/rope.cpp, its library entry in mods_library.cpp;
  // docs/problem-model.md "Rotary position embedding"). q of row (b, i) and k of key (b, j) are rotated before the
  // scores at positions i + diagonal_offset(b) + rope_offsets[b] and j + rope_offsets[b] (varlen: within the row's
  // sequence s, plus rope_offsets[s]; mRoPE: the key-axis index looked up in rope_position_ids). Off at rotary_dim 0.
  int64_t rotary_dim = 0;             // leading head dims rotated (even, <= Dqk); the rest pass through
  bool rotary_interleaved = false;    // pairs (2f, 2f+1) (GPT-J); false: (f, f + rotary_dim/2) (GPT-NeoX, Llama)
  double rope_theta = 10000.0;        // base: inv_freq_f = theta^(-2f/rotary_dim)
  std::vector<int64_t> rope_offsets;  // [B] position of key 0 (empty = 0)
  double rope_linear_factor = 1.0;    // linear (position interpolation): inv_freq / factor (1 = off)
  double rope_llama3_factor = 1.0;    // Llama 3.1 piecewise scaling (1 = off), with low/high_freq_factor
  double rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  double rope_yarn_factor = 1.0;  // YaRN (1 = off), with beta_fast/slow; cos and sin times 0.1 ln(s) + 1
  double rope_beta_fast = 32.0, rope_beta_slow = 1.0;
  int64_t rope_original_max = 8192;  // llama3 and YaRN: original_max_position_embeddings
  std::vector<int64_t>
      rope_mrope_section;  // mRoPE (Qwen2-VL): frequency pairs per section, sum rotary_dim/2 (empty = off)
  std::vector<int64_t> rope_position_ids;  //   [sections, B, Lk] position of each key-axis token per section
  // QK-norm (Qwen3, Gemma 3, OLMo): RMSNorm of every q and k head vector, x_d / sqrt(mean(x^2) + eps) * w_d, before
  // RoPE (the same position stage). Off when both weight lists are empty.
  std::vector<double> q_norm_weight, k_norm_weight;  // [Dqk] each
  double qk_norm_eps = 1e-6;
  // User modifications: expressions (muparser syntax) over score, b, h, q_idx, kv_idx, q_pos and named auxiliary
  // tensors (reference/model/src/mods_expr.cpp; docs/problem-model.md "Expressions"). Off when empty.
  std::string score_expr;            // e.g. "score + slopes[h] * (kv_idx - q_pos)"
  std::string mask_expr;             // e.g. "doc[b, q_idx] == doc[b, kv_idx] && kv_idx <= q_pos" (nonzero = visible)
  std::string expr_tensors;          // the auxiliary tensors: "name[d0,d1,...];..." (rank 1 to 4)
  std::vector<double> expr_values;   // their values, concatenated in that order, each row-major
  std::vector<int64_t> expr_origin;  // [b, h, q_idx, kv_idx] added to the variables (a cut of a larger problem)

  MaskFill fill = MaskFill::neg_inf;
  double fill_value = -1e9;  // used with MaskFill::finite
  FullyMasked fully_masked = FullyMasked::zero;

  double dropout_p = 0.0;     // keep-mask in Inputs::keep; kept weights are scaled by 1/(1-p)
  uint64_t dropout_seed = 0;  // seed of the counter-based generator that made the keep-mask

  bool want_weights = false;                  // P [B, Hq, Lq, Lk]
  bool want_lse = false;                      // lse [B, Hq, Lq]
  ScoresOut scores_out = ScoresOut::none;     // raw scores [B, Hq, Lq, Lk] at this stage
  MaxLogitOut max_logit = MaxLogitOut::none;  // the max-logit output's shape

  double effective_scale() const;
  int64_t group_size() const { return Hq / Hkv; }  // query heads per KV head
  int64_t kv_head(int64_t h) const { return h / group_size(); }
  int64_t new_len() const { return Lk - past_len; }  // key/value tokens in Inputs::k and v
  int64_t sequences() const { return cu_seqlens_q.empty() ? 0 : static_cast<int64_t>(cu_seqlens_q.size()) - 1; }
  int64_t sequence_of(int64_t i) const;
  int64_t pages_per_seq() const {
    return page_size > 0 ? (Lk + page_size - 1) / page_size : 0;
  }  // the packed sequence of query i (varlen only)
  // The keys of query row (b, i): the row's key range [begin, end) (varlen: its sequence's keys; else [0, Lk)),
  // the end of its valid keys (key padding) and the key index on its causal/window diagonal.
  struct RowKeys {
    int64_t begin, end, valid_end, diag;
  };
  RowKeys row_keys(int64_t b, int64_t i) const;
  int64_t key_length(int64_t b) const;       // valid keys of batch b
  int64_t diagonal_offset(int64_t b) const;  // the offset of the alignment for batch b
  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // The sink logit of query head h: -inf without sinks.
  double sink(int64_t h) const;
  // dtype of weights and lse outputs: f64 for f64 problems, otherwise f32.
  DType stat_dtype() const { return dtype == DType::f64 ? DType::f64 : DType::f32; }
  // dtype of out as implementations here deliver it: the input dtype, bf16 for fp8 inputs (FlashAttention-3's
  // fp8 forward). A candidate file may deliver any float dtype; it is judged in the one delivered.
  // With fp8_out, the output codes' format.
  DType out_dtype() const { return fp8_out ? o_dtype : is_fp8(dtype) ? DType::bf16 : dtype; }
  // The name from the parameters, lossless: parse_name(p.name()) is p. One component per non-default field,
  // e.g. "fp16/B2-Hq8-Hkv2-Lq97-Lk257-D64/causal/alignment=bottom_right/want_lse".
  std::string name() const;
  // The schema-1 short name, e.g. "fp16/B2-Hq8-Hkv2-Lq97-Lk257-D64/causal-br": golden case names and fixture
  // file names are built from it, so it never changes. Not every value shows (it does not parse back).
  std::string short_name() const;
};

// Throws std::invalid_argument naming the field and the values on any inconsistency.
void validate(const Problem& p);
// The problem a name() stands for (validated); throws naming the component it cannot read.
Problem parse_name(const std::string& name);

// ---------------------------------------------------------------------------------------------------------------
// Inputs and outputs
// ---------------------------------------------------------------------------------------------------------------
struct Inputs {
  Tensor q, k, v;                        // logical [B,H,L,D], memory order from the layout
  std::optional<Tensor> mask;            // u8 (0/1), shape == problem.mask_shape
  std::optional<Tensor> bias;            // bias_dtype, shape == problem.bias_shape
  std::optional<Tensor> keep;            // u8 (0/1), [B, Hq, Lq, Lk], present iff dropout_p > 0
  std::optional<Tensor> past_k, past_v;  // [B,Hkv,past_len,Dqk|Dv] like k and v, present iff past_len > 0
  // Quantized KV cache: the scales of k and v, [B|1, Hkv|1, Lk|1, D/kv_block|1] (kv_cache.hpp), present iff
  // kv_scales != none.
  // (Initialised here so that aggregate initialisations listing only the older members stay warning-free.)
  std::optional<Tensor> k_scale = std::nullopt;
  std::optional<Tensor> v_scale = std::nullopt;
  // kv_dtype q4_1: the blocks' m (value = d * q + m), shaped and typed like the scales, present iff q4_1.
  std::optional<Tensor> k_min = std::nullopt;
  std::optional<Tensor> v_min = std::nullopt;
};

struct Outputs {
  Tensor out;                                  // problem.out_dtype(), [B,Hq,Lq,Dv] in the layout
  std::optional<Tensor> lse;                   // stat_dtype, [B,Hq,Lq]
  std::optional<Tensor> weights;               // stat_dtype, [B,Hq,Lq,Lk], contiguous
  std::optional<Tensor> scores;                // stat_dtype, [B,Hq,Lq,Lk], contiguous, when scores_out != none
  std::optional<Tensor> present_k, present_v;  // like k and v with Lk tokens, when past_len > 0
  // stat_dtype, [B,Hq,Lq] or [Hq] (problem.max_logit). Initialised for the aggregate initialisations of the rest.
  std::optional<Tensor> max_logit = std::nullopt;
  // stat_dtype, [1], when fp8_out: max |O| over the output before scale_o (NaN elements skipped).
  std::optional<Tensor> amax_o = std::nullopt;
};

// The max-logit output's shape for the problem ({} when none), and the heads form of its rows: for each query head
// the maximum over b and i of rows [B,Hq,Lq] (what a rows kernel reduces to when heads are asked for).
std::vector<int64_t> max_logit_shape(const Problem& p);
std::vector<double> max_logit_heads(const Problem& p, const std::vector<double>& rows);

// Allocate tensors of the right shapes for the problem (zero-filled).
Tensor make_qkv(const Problem& p, int which);  // 0 = q, 1 = k, 2 = v (k, v: the new_len() new tokens, or the pages)
std::vector<int64_t> qkv_shape(const Problem& p, int which);  // the logical shape make_qkv allocates
// A [B,Hkv,L,D] key (which = 1) or value (2) tensor of L tokens in the problem's dtype and layout: past_len for
// the past, Lk for the present.
Tensor make_kv(const Problem& p, int which, int64_t L);
Outputs make_outputs(const Problem& p);
// Throws when the tensors do not match the problem (shape, dtype, presence).
void validate(const Problem& p, const Inputs& in);

// KV-cache append as plain data movement, for the layers that hold a whole sequence (generators, the
// reference). attend_over_present: the problem and inputs of attending over present = concat(past, new) with
// no append (past_len = 0). split_past: the reverse, moving the first p.past_len tokens of full-length k/v
// (Lk tokens) into past_k/past_v.
struct Attended {
  Problem p;
  Inputs in;
};
Attended attend_over_present(const Problem& p, const Inputs& in);
void split_past(const Problem& p, Inputs& in);
// Sequence s of a varlen problem as a problem of its own (B = 1, Lq_s x Lk_s, no cu_seqlens; masks, bias and the
// keep-mask sliced to its block). Requires Lq_s >= 1 and Lk_s >= 1 (an empty sequence has no problem of its own).
Attended sequence_problem(const Problem& p, const Inputs& in, int64_t s);
// A paged problem as the contiguous one it stands for: k, v [B,Hkv,Lk,D] read through the block table (page_size,
// num_pages and block_table cleared). The identity without paging.
Attended gather_pages(const Problem& p, const Inputs& in);
// An fp8 problem as the problem of its values, as fused fp8 kernels compute it: q, k (and past_k) hold the codes
// exactly in `to` (f32 or f64: every fp8 value is exact there), descale_q * descale_k is folded into the scale
// (one product, in `to`'s precision) and v (and past_v) hold descale_v * code rounded once to `to`; descales 1,
// dtype `to`. The identity for other dtypes.
Attended dequantize(const Problem& p, const Inputs& in, DType to);

// Storage order for a layout: BHSD -> {0,1,2,3}, BSHD -> {0,2,1,3}.
std::vector<int> storage_order(Layout l);

// Mask broadcasting: index of [b,h,i,j] in a tensor of broadcast shape `s`.
inline int64_t broadcast_offset(const Tensor& t, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t idx[4] = {t.shape[0] == 1 ? 0 : b, t.shape[1] == 1 ? 0 : h, t.shape[2] == 1 ? 0 : i,
                          t.shape[3] == 1 ? 0 : j};
  return t.offset(idx);
}

// ---------------------------------------------------------------------------------------------------------------
// Dropout: Philox4x32-10 counter-based generator, keep(b,h,i,j) is a pure function of (seed, b, h, i, j).
// ---------------------------------------------------------------------------------------------------------------
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
// Uniform in [0,1) for element (b,h,i,j) of a [B,Hq,Lq,Lk] weight tensor.
double dropout_uniform(uint64_t seed, int64_t b, int64_t h, int64_t i, int64_t j);
Tensor make_keep_mask(const Problem& p);  // keep iff dropout_uniform >= p

}  // namespace model
}  // namespace attncheck
