// `attncheck power`: fault injection into a correct fast attention kernel, judged by the tolerance model on a grid
// of context lengths, dtypes and logit distributions. Shows which real bug classes the bound catches, and how much
// of the bound correct-but-different implementations use (docs/tolerance.md, "Detection power").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/contract.hpp"
#include "attncheck/problem.hpp"

namespace attncheck::power {

// The injected faults (each a bug seen in real kernels) and none = a correct variant.
enum class Fault : uint8_t {
  none,
  skip_tile,
  drop_max_key,
  drop_random_key,
  causal_excl_diag,
  causal_future_key,
  window_off_by_one,
  scale_dv,
  tf32_operands,
  fp16_scores,
  bf16_pv_accumulation,
  missed_rescale,
  row_1pct,
  row_4ulp,
  lse_plus_log2,
  lse_base2,
  // Modification faults (mods.hpp), each on its own flavour.
  alibi_sign,
  alibi_slope_head,
  alibi_ignored,
  document_off_by_one,
  chunk_off_by_one,
  // Quantized KV cache faults (kv_cache.hpp), on the kv flavour: the scales dropped (codes read as values, vllm
  // PR #51363's dropped per-head descales) or every block of a token reading block 0's scale (a missing group
  // offset, as rocm-libraries PR #10474's every-group-reads-group-0).
  descale_ignored,
  descale_wrong_group,
  // Paged cache fault, on the kv_cache flavour (paged): a page index times the page stride overflowing its integer
  // type (flashinfer #3130), modelled as a narrower wrap: page p read as page p mod index_wrap_pages(p).
  index_overflow,
  // 4-bit cache faults (kv_cache.hpp's q4_0 / q4_1), on the kv_q4_0 and kv_q4_1 flavours: the two nibbles of a
  // byte read the other way round (element i of a block from byte i's high nibble, i + 16 from its low one), q4_0's
  // offset 8 forgotten (d q read for d (q - 8)), q4_1's m ignored (d q for d q + m), and every block reading the
  // d and m of the next block in memory (a block index off by one: the next token's first block at a row's end).
  q4_nibble_swapped,
  q4_offset_ignored,
  q4_min_ignored,
  q4_next_block_scale,
  // RoPE faults (rope.hpp), on the rope flavour: GPT-J pairs instead of NeoX, the query rotated at its row index
  // (its position offset ignored), the partial rotation applied to the last rotary_dim dims, the query one position
  // ahead, angles rounded to fp16.
  rope_interleave,
  rope_offset_ignored,
  rope_partial_wrong_half,
  rope_off_by_one,
  rope_fp16_angles,
  // Top-k sparse fault, on the topk flavour: a padding slot (-1) of a row's list read as key 0 (an index clamped
  // or used unchecked for the gather).
  topk_padding,
  // Absorbed MLA faults (mla.hpp), on the mla flavour: V read from the latent cache with its own row length Dv as
  // the stride instead of the cache's Dqk (a V pointer stepped by the wrong row stride, as ik_llama.cpp PR #2031),
  // V taken from the cache's last Dv columns (the k_pe side) instead of its first, and the softmax scale from the
  // absorbed head dim, 1/sqrt(Dqk), instead of the declared one (DeepSeek-V3: 1/sqrt(576) for 1/sqrt(192)).
  mla_v_stride,
  mla_v_columns,
  mla_scale_dim,
  // Block-sparse mask fault (block_mask.hpp), on the document flavour: a partial block of the block mask treated as
  // full (a block-sparse kernel skips the mask there): every row of the block sees every key of it.
  block_partial_as_full,
  // Max-logit faults, on the max_logit flavour: the row maximum taken before the logit stage (the raw scaled
  // logits), and of the unscaled dot products.
  max_logit_stage,
  max_logit_unscaled,
  // fp8 output faults (fp8_out.hpp), on the fp8_out flavour: scale_o ignored (codes of O), applied as a descale
  // (codes of O / scale_o), amax_o in scale_o units (max |O * scale_o|) and amax_o taken after the cast (max |code| /
  // scale_o).
  out_scale_ignored,
  out_scale_inverted,
  amax_o_scaled,
  amax_o_after_cast,
  // QK-norm faults (rope.hpp qk_norm), on the qk_norm flavour: eps dropped (x / sqrt(mean x^2)), eps added outside
  // the square root (x / (sqrt(mean x^2) + eps)), and the norm applied to q only (k read as given).
  qk_norm_eps_ignored,
  qk_norm_eps_outside,
  qk_norm_k_skipped
};

// How the kernel sums over keys.
enum class Order : uint8_t { sequential, pairwise, kahan, reversed, online };

struct Variant {
  std::string name;
  std::string what;
  Fault fault = Fault::none;
  Order order = Order::online;
  int block = 64;          // keys per tile of the online softmax
  bool p_rounded = false;  // unnormalised P rounded to the input dtype before P·V
  bool exp2 = false;       // exp2 with log2(e) folded into the scale
  bool fma = false;        // fused multiply-add in the dot products and P·V
  bool ftz = false;        // flush subnormal exps to zero
  int lanes = 1;           // dot products in 1, 2, 4 or 8 interleaved partial sums
  // RoPE problems: how the kernel gets cos and sin (fp32 angles by default, as FlashInfer and vLLM's fused kernels),
  // judged at the contract that declares it.
  RopeMath rope = RopeMath::fp32;
  bool correct() const { return fault == Fault::none; }
};

std::vector<Variant> correct_variants();
std::vector<Variant> fault_variants();

// Problem shapes of the grid: dense, causal (diagonals around a tile edge), window of 256 keys; and causal with a
// modification: ALiBi on two query heads (slopes 2^-6, 2^-10), two documents meeting at the tile edge between
// rows rows/2-1 and rows/2, chunks of 64 keys (a chunk boundary there too).
// rope: causal with partial NeoX RoPE (rotary_dim 32 of 64, theta 10000), every position past 65536.
// kv_cache: causal over a paged int8 KV cache with one fp16 scale per 16 head-dim elements of each token (K in 4
// blocks, V in 2), pages of 16 tokens: the first half of the sequence in pool pages 0.., the second half in pages
// index_wrap_pages(p).. past a power of two (the pages between unused), as a sequence late in a large pool.
// topk: causal, each row attending a list of min(Lk/4, 512) slots of keys in [1, diagonal], odd rows ending in padding.
// mla: causal absorbed MLA, V the first 32 columns of the 64-column latent cache K, scale 1/sqrt(48) declared.
// max_logit: causal with the logit stage on (each entry at its first example value) and the max-logit output per row.
// fp8_out: causal with an e4m3 output, scale_o 96 (|out| ~ 1, so codes up to a few hundred, below 448).
// qk_norm: causal with QK-norm (weights around 1, eps 1e-6) before partial NeoX RoPE as the rope flavour; q and k
// scaled by 2^-10, so mean(x^2) is near eps and eps matters (QK-norm takes the scale out again).
// kv_q4_0, kv_q4_1: causal over a 4-bit cache (llama.cpp's q4_0 / q4_1: blocks of 32 with fp16 d, and m for q4_1;
// K in 2 blocks per token, V in 1).
enum class Flavour : uint8_t {
  dense,
  causal,
  window,
  alibi,
  document,
  chunk,
  rope,
  kv_cache,
  topk,
  mla,
  max_logit,
  fp8_out,
  kv_q4_0,
  kv_q4_1,
  qk_norm
};
inline constexpr int kFlavours = 15;
const char* to_string(Flavour f);
Flavour flavour_of(Fault f);  // the shape a fault is run on (mask faults need their mask)
enum class Logits : uint8_t { normal, large, near_one_hot, hazard };
const char* to_string(Logits l);

// The pool page the index-overflow fault wraps at: the smallest power of two holding pages_per_seq pages.
int64_t index_wrap_pages(const Problem& p);

// The grid's problems (B = Hq = Hkv = 1, Dqk 64, Dv 32, BHSD, want_lse; causal/window diagonals of rows
// rows/2-1 and rows/2 end and start a tile) and seeded inputs (near_one_hot: each row has one key scoring 12..15;
// hazard: the keys on every mask edge and one tile edge per row hold 5-15% of the row's weight, V has mean 1).
Problem grid_problem(int64_t lk, DType t, Flavour f, int64_t rows);
Inputs grid_inputs(const Problem& p, Logits lg, uint64_t seed);

// Runs the kernel variant on a problem of the grid (B = Hq = Hkv = 1, BHSD, want_lse) and returns its outputs.
Outputs run_variant(const Variant& v, const Problem& p, const Inputs& in);

// An implementation brought by the user (`power --plugin/--worker`): it runs as one more correct variant on every
// grid problem it supports, judged at its declared precision contract. Faults stay injected into the built-in
// kernel (a black box cannot be faulted); the candidate's rows say whether it passes and how much of the bound it
// uses at long context. The harness supplies the callbacks, so this engine keeps depending on the core only.
struct Candidate {
  std::string name;
  // The candidate's outputs, or nullopt (with the reason in `why`) when it does not support the problem. May throw
  // (a crash or timeout of an isolated candidate): the cell then fails with the message.
  std::function<std::optional<Outputs>(const Problem&, const Inputs&, std::string* why)> run;
  std::function<PrecisionContract(DType)> contract;
};

struct GridOptions {
  std::vector<int64_t> lk{1024, 8192, 32768, 131072};
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  std::vector<Logits> logits{Logits::normal, Logits::large, Logits::near_one_hot, Logits::hazard};
  int64_t rows = 8;  // query rows judged per problem (the sampled rows; faults are placed where they see them)
  uint64_t seed = 20261123;
  int threads = 0;  // 0 = default
  std::optional<Candidate> candidate;
  // Called before each (Lk, dtype, logits) configuration with its name: the CLI's progress line and Ctrl-C (it may
  // throw to stop the grid).
  std::function<void(const std::string&)> on_configuration;
  // Which configurations to run, by index in the grid's order (Lk, then dtype, then logits); empty: all. A shard
  // of the grid; summarise() over the union of the shards' cells gives the whole grid's report.
  std::function<bool(size_t)> runs_configuration;
};

struct Cell {  // one variant on one configuration (Lk, dtype, logits), over the flavours it runs on
  std::string variant;
  bool correct = false;
  int64_t lk = 0;
  DType dtype = DType::f32;
  Logits logits = Logits::normal;
  size_t configuration = 0;   // index of (lk, dtype, logits) in the grid's order
  double ratio = 0;           // largest error/tolerance of any judged element (faults: detected iff > 1)
  std::string worst;          // the verdict's description of that element
  bool applicable = true;     // false: the fault is the identity here (TF32 rounding of fp16/bf16 operands)
  bool inside_noise = false;  // fault not detected and its effect no larger than a correct variant's error
  // faults: largest change of the base kernel's out/lse; correct variants: largest |error|. noise: the correct
  // variants' largest |error| on the same problem.
  double fault_err = 0, noise_err = 0;
};

// One fault on one (Lk, dtype) over every input kind: a real suite holds all kinds, so the fault is caught when
// any kind detects it. Undetectable: no kind detects it and in every kind its effect is inside rounding noise.
struct Coverage {
  std::string fault;
  int64_t lk = 0;
  DType dtype = DType::f32;
  std::vector<Logits> caught_by;
  bool applicable = true, undetectable = false;
};

struct Report {
  std::vector<Cell> cells;
  std::vector<Coverage> coverage;
  // Cells (fault x Lk x dtype x logits): detected, inside rounding noise, neither (below the bound, effect above
  // the correct variants' error on these inputs), not applicable.
  int cells_detected = 0, cells_inside_noise = 0, cells_below_bound = 0;
  // Coverage (fault x Lk x dtype): caught by some input kind, undetectable, missed, not applicable.
  int faults = 0, detected = 0, undetectable = 0, missed = 0, not_applicable = 0, false_alarms = 0;
  double headroom_32k_fp32 = 0;  // smallest (over logits) largest correct ratio at Lk = 32768, fp32
  bool accepted = false;
  double seconds = 0;
};

Report run_grid(const GridOptions& o);
// Everything in a report that follows from its cells (coverage, counts, headroom, acceptance); `logits` are the
// input kinds of the grid. run_grid ends with it; a merge of shards' cells calls it again.
void summarise(Report& rep, const std::vector<Logits>& logits);

}  // namespace attncheck::power
