// The library modifications (the position stage included), sinks and the max-logit output in both CUDA kernels on the
// host emulation: each entry's parameters drawn by the library's own generator (ModEntry::draw), judged against the
// looped reference with the derived tolerances (out, lse, max_logit), in both thread orders. Small shapes that cross a
// key tile (BC = 32).
#include <gtest/gtest.h>

#include <limits>

#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "emulated.hpp"
#include "hostile_cases.hpp"

using namespace attncheck;
using attncheck::cuda::KernelVersion;

namespace {

struct ModCase {
  std::string label;
  std::vector<std::string> mods;  // library entries, drawn in this order
  DType dtype = DType::f32;
  bool causal = false;
  Alignment alignment = Alignment::top_left;
  MaxLogitOut max_logit = MaxLogitOut::rows;
  bool sinks = false;        // sink logits per head, one of them -inf (no sink for that head)
  bool finite_fill = false;  // masked keys take part with fill -30
  int64_t Lq = 6, Lk = 45;
  void (*edit)(Problem&) = nullptr;  // after the draws: hand-placed parameters
};

// Top-k lists whose only visible keys sit on the first and last lane of a 32-key tile and on the last key of the
// tail tile: the fused kernel's per-tile vote must see each of them or it skips a tile some row needs.
void topk_on_tile_edges(Problem& p) {
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 5, p.Lk = 70, p.topk = 2;
  p.topk_indices = {31, 69, 32, -1, 63, 0, 5, -1, -1, -1};
}

// RoPE variants on top of the drawn entry: each pairing, a partial rotary dim, the frequency scalings.
void neox_pairs(Problem& p) { p.rotary_interleaved = false; }
void gptj_partial(Problem& p) { p.rotary_interleaved = true, p.rotary_dim = 10; }
void yarn(Problem& p) { p.rotary_interleaved = false, p.rope_yarn_factor = 4.0, p.rope_original_max = 32; }
void llama3(Problem& p) { p.rotary_dim = 16, p.rope_llama3_factor = 8.0, p.rope_original_max = 64; }
// mRoPE (Qwen2-VL): 8 pairs in sections 4 (time) + 2 (height) + 2 (width), the keys an image of 3 frames of 3x5
// patches, and an offset per batch. The height and width positions are spread (300 and 500 per patch) so that their
// low-frequency pairs turn far enough for bf16 to tell one section's positions from another's.
void mrope(Problem& p) {
  p.rotary_dim = 16, p.rotary_interleaved = false, p.rope_mrope_section = {4, 2, 2};
  p.rope_position_ids.assign(size_t(3 * p.B * p.Lk), 0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = 0; j < p.Lk; ++j) {
      const int64_t at[3] = {j / 15, 300 * ((j / 5) % 3), 500 * (j % 5)};
      for (int64_t s = 0; s < 3; ++s) p.rope_position_ids[size_t((s * p.B + b) * p.Lk + j)] = at[s] + 7 * b;
    }
  p.rope_offsets = {3, 1000};
}

std::vector<ModCase> cases() {
  return {
      {"alibi", {"alibi"}},
      {"alibi-br-bf16", {"alibi"}, DType::bf16, true, Alignment::bottom_right},
      {"t5", {"t5_bias"}, DType::f16},
      {"key-bias-causal-br-bf16", {"key_bias"}, DType::bf16, true, Alignment::bottom_right},
      {"document", {"document"}},
      {"chunked-causal-br", {"chunked"}, DType::f32, true, Alignment::bottom_right},
      {"prefix-lm", {"prefix_lm"}, DType::f64},
      {"dilated-br", {"dilated_window"}, DType::f32, false, Alignment::bottom_right},
      {"topk", {"topk"}, DType::f32, false, Alignment::top_left, MaxLogitOut::heads},
      {"alibi-t5-document-heads",
       {"alibi", "t5_bias", "document"},
       DType::f32,
       true,
       Alignment::top_left,
       MaxLogitOut::heads},
      {.label = "topk-tile-edges", .mods = {"topk"}, .Lq = 5, .Lk = 70, .edit = topk_on_tile_edges},
      {.label = "sinks-causal", .mods = {}, .causal = true, .sinks = true},
      {.label = "sinks-topk-finite-fill", .mods = {"topk"}, .dtype = DType::bf16, .sinks = true, .finite_fill = true},
      {.label = "sinks-document-fp64", .mods = {"document"}, .dtype = DType::f64, .sinks = true},
      {.label = "rope", .mods = {"rope"}},
      {.label = "rope-neox-br-bf16",
       .mods = {"rope"},
       .dtype = DType::bf16,
       .causal = true,
       .alignment = Alignment::bottom_right,
       .edit = neox_pairs},
      {.label = "rope-gptj-partial-fp16", .mods = {"rope"}, .dtype = DType::f16, .edit = gptj_partial},
      {.label = "qknorm", .mods = {"qk_norm"}, .dtype = DType::f16},
      {.label = "qknorm-rope-yarn-fp64",
       .mods = {"qk_norm", "rope"},
       .dtype = DType::f64,
       .causal = true,
       .edit = yarn},
      {.label = "rope-llama3-alibi-sinks", .mods = {"rope", "alibi"}, .sinks = true, .edit = llama3},
      {.label = "mrope-causal-br-bf16",
       .mods = {"rope"},
       .dtype = DType::bf16,
       .causal = true,
       .alignment = Alignment::bottom_right,
       .edit = mrope},
      {.label = "mrope-qknorm", .mods = {"qk_norm", "rope"}, .edit = mrope},
  };
}

struct Param {
  ModCase c;
  KernelVersion version;
};

std::string param_name(const testing::TestParamInfo<Param>& info) {
  std::string s = std::string(info.param.version == KernelVersion::naive ? "k1_" : "k2_") + info.param.c.label;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::vector<Param> params() {
  std::vector<Param> ps;
  for (const ModCase& c : cases())
    for (KernelVersion v : {KernelVersion::flash, KernelVersion::naive}) ps.push_back({c, v});
  return ps;
}

testcases::Case make_case(const ModCase& m) {
  testcases::Case c;
  c.label = m.label;
  Problem& p = c.p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = m.Lq, p.Lk = m.Lk, p.Dqk = p.Dv = 16;
  p.dtype = m.dtype;
  p.causal = m.causal;
  p.alignment = m.alignment;
  p.want_lse = true;
  p.max_logit = m.max_logit;
  p.fully_masked = FullyMasked::zero;  // a mask modification may hide a whole row
  c.amplitude = 2.0;
  if (m.sinks) p.sinks = {0.5, -std::numeric_limits<double>::infinity(), 2.0, -1.25};  // exact in bf16
  if (m.finite_fill) p.fill = MaskFill::finite, p.fill_value = -30.0;
  Rng rng(std::hash<std::string>{}(m.label));
  for (const std::string& name : m.mods) find_modification(name)->draw(p, rng);
  if (m.edit) {
    p.topk = 0, p.topk_indices.clear();
    m.edit(p);
  }
  return c;
}

class CudaMods : public testing::TestWithParam<Param> {};

TEST_P(CudaMods, MatchesReferenceInBothThreadOrders) {
  const Param& prm = GetParam();
  const testcases::Case c = make_case(prm.c);
  const Problem& p = c.p;
  ASSERT_TRUE(cuda::kernel_supports(p).ok) << cuda::kernel_supports(p).reason;
  const Inputs in = testcases::make_inputs(c);
  const ExpectedAttention ref = expected_attention(p, in);
  Outputs out = make_outputs(p);
  for (Tensor* t : {&out.out, out.lse ? &*out.lse : nullptr, out.max_logit ? &*out.max_logit : nullptr})
    if (t) t->fill(std::nan(""));
  Outputs reversed = out;
  cuda::run_emulated(p, in, out, prm.version, emu::Order::forward);
  cuda::run_emulated(p, in, reversed, prm.version, emu::Order::reversed);
  EXPECT_EQ(out.out.bytes, reversed.out.bytes) << "out depends on the thread order (a race)";
  EXPECT_EQ(out.max_logit->bytes, reversed.max_logit->bytes) << "max_logit depends on the thread order";
  // Judged under the kernels' declared contract (fp32 RoPE angles below fp64).
  ToleranceModel model;
  model.contract = find_impl("cuda-emulated")->declarations().contract_for(p.dtype);
  const Verdict v = judge(p, ref, out, model);
  bool judged_max_logit = false;
  for (const auto& t : v.tensors) {
    EXPECT_TRUE(t.pass) << param_name({prm, 0}) << " " << p.name() << ": " << t.describe();
    judged_max_logit = judged_max_logit || t.tensor == "max_logit";
  }
  EXPECT_TRUE(judged_max_logit) << "the max-logit output was not judged";
  // The modifications and sinks must change the answer: without them the same inputs give other outputs.
  Problem plain = p;
  plain.sinks.clear();
  plain.alibi_slopes.clear(), plain.t5_table.clear(), plain.t5_buckets = 0, plain.doc_ids.clear();
  plain.key_bias.clear();
  plain.chunk_size = 0, plain.prefix_lengths.clear(), plain.dilated_window = -1, plain.dilation = 1;
  plain.topk = 0, plain.topk_indices.clear();
  plain.rotary_dim = 0, plain.q_norm_weight.clear(), plain.k_norm_weight.clear();
  plain.rope_mrope_section.clear(), plain.rope_position_ids.clear(), plain.rope_offsets.clear();
  ASSERT_FALSE(uses_modifications(plain));
  const ExpectedAttention without = expected_attention(plain, in);
  EXPECT_NE(without.out, ref.out) << "the drawn modification changes nothing: the case cannot catch its loss";
  if (!p.sinks.empty()) {
    EXPECT_NE(without.lse, ref.lse) << "the sinks change no lse";
  }
  // mRoPE: a kernel rotating every pair at the first section's position fails on these inputs.
  if (!p.rope_mrope_section.empty()) {
    Problem one_section = p;
    for (int64_t s = 1; s < 3; ++s)
      for (int64_t x = 0; x < p.B * p.Lk; ++x)
        one_section.rope_position_ids[size_t(s * p.B * p.Lk + x)] = p.rope_position_ids[size_t(x)];
    const ExpectedAttention collapsed = expected_attention(one_section, in);
    Outputs wrong = out;
    const std::vector<int64_t>& n = wrong.out.shape;  // [B, Hq, Lq, Dv], the reference's row-major order
    size_t x = 0;
    for (int64_t b = 0; b < n[0]; ++b)
      for (int64_t h = 0; h < n[1]; ++h)
        for (int64_t i = 0; i < n[2]; ++i)
          for (int64_t d = 0; d < n[3]; ++d) wrong.out.put(b, h, i, d, collapsed.out[x++]);
    bool caught = false;
    for (const auto& t : judge(p, ref, wrong, model).tensors) caught = caught || (t.tensor == "out" && !t.pass);
    EXPECT_TRUE(caught) << "one position for every pair passes: the case cannot tell mRoPE's sections apart";
  }
}

INSTANTIATE_TEST_SUITE_P(Library, CudaMods, testing::ValuesIn(params()), param_name);

// What the kernels cannot evaluate is reported unsupported, naming it: user expressions (muparser, host-only).
TEST(CudaModsLimits, ExpressionsAreUnsupported) {
  const ImplPtr impl = find_impl("cuda-emulated");
  ASSERT_TRUE(impl);
  for (const char* name : {"score_expr", "mask_expr"}) {
    Problem p;
    p.B = 1, p.Hq = 2, p.Hkv = 2, p.Lq = 4, p.Lk = 8, p.Dqk = p.Dv = 8;
    Rng rng(1);
    find_modification(name)->draw(p, rng);
    ASSERT_TRUE(uses_modifications(p)) << name;
    const Support s = impl->supports(p);
    EXPECT_FALSE(s.ok) << name;
    EXPECT_NE(s.reason.find(std::string("modification ") + name + " not supported"), std::string::npos) << s.reason;
  }
  EXPECT_EQ(impl->capabilities().mods,
            (std::set<std::string>{"alibi", "t5_bias", "key_bias", "document", "chunked", "prefix_lm", "dilated_window",
                                   "topk", "rope", "qk_norm"}));
  EXPECT_EQ(impl->declarations().contract_for(DType::bf16).rope, RopeMath::fp32);
  EXPECT_EQ(impl->declarations().contract_for(DType::f64).rope, RopeMath::exact);
  EXPECT_TRUE(impl->capabilities().max_logit_out);
}

}  // namespace
