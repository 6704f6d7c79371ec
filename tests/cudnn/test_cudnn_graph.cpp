// Deviceless checks of the cuDNN SDPA graph: for every supported shape of the feature matrix, cuDNN finalizes the
// operation graph and its heuristics propose at least one engine for a named GPU (sm_80 A100, sm_90 H100).
// For a subset, the first engine is turned into an execution plan, which must get as far as loading the compiled
// kernel: without a GPU that load is the only step allowed to fail. Needs the CUDA driver library to be loadable;
// with no real driver installed the toolkit's stub (libcuda.so, soname libcuda.so.1) is loaded for that.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cudnn_support.hpp"
#include "driver.hpp"
#include "sdpa_graph.hpp"

using namespace attncheck;
using namespace attncheck::cudnn;

namespace {

Problem base() {
  Problem p;
  p.B = 2, p.Hq = 8, p.Hkv = 2, p.Lq = 97, p.Lk = 257, p.Dqk = p.Dv = 64;  // GQA, Lq != Lk, no tile multiples
  p.dtype = DType::f16;
  return p;
}

struct Case {
  const char* name;
  std::function<void(Problem&)> change;
  bool plan = false;  // also build an execution plan for the first engine (runtime compilation: ~0.7 s)
};

const Case kCases[] = {
    {"fp16_bhsd", [](Problem&) {}, true},
    {"bf16_bshd", [](Problem& p) { p.dtype = DType::bf16, p.layout = Layout::BSHD; }},
    {"fp32_bhsd", [](Problem& p) { p.dtype = DType::f32; }, true},
    {"fp32_bshd_causal", [](Problem& p) { p.dtype = DType::f32, p.layout = Layout::BSHD, p.causal = true; }},
    {"fp16_mha", [](Problem& p) { p.Hkv = 8; }},
    {"bf16_mqa_causal_tl", [](Problem& p) { p.dtype = DType::bf16, p.Hkv = 1, p.causal = true; }},
    {"fp16_causal_tl_lq_gt_lk", [](Problem& p) { p.causal = true, p.Lq = 300; }},
    {"fp16_causal_br", [](Problem& p) { p.causal = true, p.alignment = Alignment::bottom_right; }, true},
    {"bf16_bshd_causal_br_lq_eq_lk",
     [](Problem& p) {
       p.dtype = DType::bf16, p.layout = Layout::BSHD, p.causal = true, p.Lq = p.Lk = 130,
       p.alignment = Alignment::bottom_right;
     }},
    {"fp16_padding",
     [](Problem& p) {
       p.key_lengths = {200, 1};
     }},
    {"fp16_padding_causal_br_lse",
     [](Problem& p) {
       p.key_lengths = {257, 97}, p.causal = true, p.alignment = Alignment::bottom_right, p.want_lse = true;
     },
     true},
    {"bf16_padding_causal_tl",
     [](Problem& p) {
       p.dtype = DType::bf16, p.key_lengths = {3, 256}, p.causal = true;
     }},
    {"fp16_lse", [](Problem& p) { p.want_lse = true; }},
    {"fp16_bias_full_fp16",
     [](Problem& p) {
       p.bias_shape = std::array<int64_t, 4>{2, 8, 97, 257}, p.bias_dtype = DType::f16;
     }},
    {"fp16_bias_head_fp32",
     [](Problem& p) {
       p.bias_shape = std::array<int64_t, 4>{1, 8, 97, 257};
     }},
    {"bf16_bias_keys_only",
     [](Problem& p) {
       p.dtype = p.bias_dtype = DType::bf16, p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 257};
     }},
    {"fp16_bias_causal_tl_padding_lse",
     [](Problem& p) {
       p.bias_shape = std::array<int64_t, 4>{2, 1, 97, 257}, p.causal = true, p.key_lengths = {100, 257},
       p.want_lse = true;
     }},
    {"bf16_bshd_everything",
     [](Problem& p) {
       p.dtype = p.bias_dtype = DType::bf16, p.layout = Layout::BSHD, p.Hkv = 1, p.causal = true,
       p.key_lengths = {5, 250}, p.bias_shape = std::array<int64_t, 4>{1, 8, 97, 257}, p.want_lse = true,
       p.scale = -0.3;
     }},
    {"fp16_dropout", [](Problem& p) { p.dropout_p = 0.2; }},
    {"bf16_bshd_dropout_causal_tl_padding_bias_lse",
     [](Problem& p) {
       p.dtype = DType::bf16, p.layout = Layout::BSHD, p.dropout_p = 0.1, p.causal = true, p.key_lengths = {60, 257},
       p.bias_shape = std::array<int64_t, 4>{1, 1, 97, 257}, p.want_lse = true;
     },
     true},
    {"fp16_d8", [](Problem& p) { p.Dqk = p.Dv = 8; }},
    {"fp16_d128", [](Problem& p) { p.Dqk = p.Dv = 128; }},
    {"bf16_d256_causal", [](Problem& p) { p.dtype = DType::bf16, p.Dqk = p.Dv = 256, p.causal = true; }, true},
    {"fp16_dqk128_dv64", [](Problem& p) { p.Dqk = 128, p.Dv = 64; }},
    {"fp16_dqk64_dv128_lse", [](Problem& p) { p.Dv = 128, p.want_lse = true; }},
    {"fp16_lq1_decode", [](Problem& p) { p.Lq = 1, p.causal = true, p.alignment = Alignment::bottom_right; }},
    {"fp16_lk1", [](Problem& p) { p.Lk = 1; }},
};

struct Param {
  const Case* c;
  NamedGpu gpu;
};

class CudnnGraph : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(driver_load_error().empty())
        << "cuDNN needs the CUDA driver library to run heuristics, even for a named GPU; none could be loaded: "
        << driver_load_error();
  }
};

TEST_P(CudnnGraph, HeuristicsFindAnEngine) {
  Problem p = base();
  GetParam().c->change(p);
  validate(p);
  const Support s = cudnn_supports(p);
  ASSERT_TRUE(s.ok) << p.name() << " should be supported: " << s.reason;

  const SdpaGraph graph(p);
  const SdpaUids& u = graph.uids();
  EXPECT_EQ(u.stats != 0, p.want_lse);
  EXPECT_EQ(u.bias != 0, p.bias_shape.has_value());
  EXPECT_EQ(u.seq_kv != 0, !p.key_lengths.empty());
  EXPECT_EQ(u.keep != 0, p.dropout_p > 0);

  const Desc props = named_device_properties(GetParam().gpu);
  const std::vector<Desc> configs = heuristic_engine_configs(graph, props);
  ASSERT_FALSE(configs.empty()) << "cuDNN heuristics found no engine for " << p.name() << " on "
                                << to_string(GetParam().gpu);
  std::string engines;
  for (const Desc& c : configs) engines.append(" ").append(std::to_string(engine_global_index(c)));
  RecordProperty("engines", engines);

  if (!GetParam().c->plan) return;
  try {
    const Desc plan = make_plan(configs.front(), props);
    RecordProperty("plan", "built");  // a real driver and a matching GPU: the kernel loaded
  } catch (const CudnnError& e) {
    expect_stopped_at_kernel_load(e);
    RecordProperty("plan", "stopped at kernel load");
  }
}

std::vector<Param> params() {
  std::vector<Param> v;
  for (const Case& c : kCases)
    for (NamedGpu g : {NamedGpu::a100_sm80, NamedGpu::h100_sm90}) v.push_back({&c, g});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cudnn, CudnnGraph, ::testing::ValuesIn(params()), [](const auto& info) {
  return std::string(info.param.c->name) + "_" + (info.param.gpu == NamedGpu::a100_sm80 ? "sm80" : "sm90");
});

// The strides the graph declares are the ones the harness's tensors have, so run() can copy bytes as they are.
TEST(CudnnGraphLayout, StridesMatchTheProblemModel) {
  for (Layout l : {Layout::BHSD, Layout::BSHD}) {
    Problem p = base();
    p.layout = l, p.Dv = 40;
    const SdpaStrides s = SdpaStrides::from_layout(p);
    EXPECT_EQ(s.q, make_qkv(p, 0).strides) << to_string(l);
    EXPECT_EQ(s.k, make_qkv(p, 1).strides) << to_string(l);
    EXPECT_EQ(s.v, make_qkv(p, 2).strides) << to_string(l);
    EXPECT_EQ(s.o, make_outputs(p).out.strides) << to_string(l);
  }
}

// cuDNN itself rejects a head dim that is not a multiple of 8: the check above can fail, and the capability
// limit mirrors cuDNN's rule rather than inventing one.
TEST(CudnnGraphNegative, HeadDim68HasNoEngine) {
  ASSERT_TRUE(driver_load_error().empty()) << driver_load_error();
  Problem p = base();
  p.Dqk = p.Dv = 68;
  EXPECT_FALSE(cudnn_supports(p).ok);
  const SdpaGraph graph(p);  // built directly, bypassing supports(), to ask cuDNN
  for (NamedGpu g : {NamedGpu::a100_sm80, NamedGpu::h100_sm90})
    EXPECT_TRUE(heuristic_engine_configs(graph, named_device_properties(g)).empty()) << to_string(g);
}

}  // namespace
