// What an implementation declares it can do, and the verdict on one problem. The check itself is derived from
// the feature table (features.hpp): a feature a backend does not declare is reported unsupported, never run.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// The names of the logit-stage entries (mods.hpp ModKind::logit): every backend runs them unless it says not.
std::set<std::string> logit_modification_names();

struct Capabilities {
  std::set<DType> dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
  std::set<Layout> layouts = {Layout::BHSD, Layout::BSHD};
  bool gqa = true;        // Hq != Hkv
  bool cross = true;      // Lq != Lk
  bool dqk_ne_dv = true;  // Dqk != Dv
  bool causal = true;
  std::set<Alignment> alignments = {Alignment::top_left, Alignment::bottom_right, Alignment::explicit_};
  bool per_batch_offsets = true;
  bool key_padding = true;
  bool bool_mask = true;
  bool bias = true;
  bool window = true;
  std::set<std::string> logit = logit_modification_names();  // logit-stage entries (mods.hpp) by name
  bool dropout = true;                                       // through Inputs::keep
  bool finite_fill = true;
  std::set<FullyMasked> fully_masked = {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform};
  bool weights_out = true;
  bool lse_out = true;
  // Features added after plugin ABI 2 default to false: a backend (or plugin) must declare them.
  bool sinks = false;             // Problem::sinks
  bool scores_out = false;        // Problem::scores_out (Outputs::scores)
  bool kv_append = false;         // Problem::past_len (Inputs::past_k/v, Outputs::present_k/v)
  bool varlen = false;            // Problem::cu_seqlens_q/k (packed variable-length sequences)
  bool paged_kv = false;          // Problem::page_size/block_table (K and V in pages)
  bool fp8 = false;               // dtype e4m3/e5m2 with Problem::descale_q/k/v (list the formats in dtypes too)
  bool kv_quant = false;          // Problem::kv_scales (k, v as codes with Inputs::k_scale/v_scale)
  bool kv_q4 = false;             // kv_dtype q4_0 / q4_1 (two 4-bit codes per byte, q4_1 with Inputs::k_min/v_min)
  bool kv_quant_paged = false;    // a quantized cache in pages (per-token and per-block scales in pages too)
  bool mla = false;               // Problem::mla (v is the first Dv columns of k)
  bool max_logit_out = false;     // Problem::max_logit (Outputs::max_logit)
  bool fp8_out = false;           // Problem::fp8_out (out as fp8 codes of O * scale_o, Outputs::amax_o)
  std::set<std::string> mods;     // library modifications (mods.hpp) by name; none unless declared
  int64_t max_head_dim = 0;       // 0 = no limit
  int64_t head_dim_multiple = 1;  // Dqk and Dv must be multiples of this
  std::string notes;              // free text shown by `attncheck list` (e.g. "inline PTX paths not emulated")
};

// Why a case can or cannot run. ok == false carries the reason, e.g. "dropout not supported".
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// Checks a problem against capability flags (every entry of problem_features()); the common part of every
// Impl::supports. The first unsupported feature is the reason.
Support check_capabilities(const Capabilities& c, const Problem& p);

}  // namespace model
}  // namespace attncheck
