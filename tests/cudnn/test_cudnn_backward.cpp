// Deviceless checks of the cuDNN SDPA backward graph, like the forward's (test_cudnn_graph.cpp): for supported
// cases of the feature matrix cuDNN finalizes the backward operation graph and its heuristics propose an engine for
// sm_80 and sm_90; for a subset the first engine's plan must get as far as loading the compiled kernel. Unsupported
// cases are declared with a reason; the variant pack binds O, stats and dO as inputs and the gradients as outputs;
// the backward run on a device is skipped (not passed) without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "attncheck/backward.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "cudnn_support.hpp"
#include "driver.hpp"
#include "sdpa_graph.hpp"
#include "variant_pack.hpp"

using namespace attncheck;
using namespace attncheck::cudnn;

namespace {

Problem base() {
  Problem p;
  p.B = 2, p.Hq = 8, p.Hkv = 2, p.Lq = 97, p.Lk = 257, p.Dqk = p.Dv = 64;  // GQA, Lq != Lk, no tile multiples
  p.dtype = DType::f16;
  p.want_lse = true;
  return p;
}

struct Case {
  const char* name;
  std::function<void(Problem&)> change;
  bool plan = false;  // also build an execution plan for the first engine
};

const Case kCases[] = {
    {"fp16_bhsd_gqa", [](Problem&) {}, true},
    {"bf16_bshd", [](Problem& p) { p.dtype = DType::bf16, p.layout = Layout::BSHD; }},
    {"fp16_mha", [](Problem& p) { p.Hkv = 8; }, true},
    {"bf16_mqa_causal_tl", [](Problem& p) { p.dtype = DType::bf16, p.Hkv = 1, p.causal = true; }},
    {"fp16_causal_br", [](Problem& p) { p.causal = true, p.alignment = Alignment::bottom_right; }},
    {"fp16_padding",
     [](Problem& p) {
       p.key_lengths = {200, 1};
     }},
    {"bf16_padding_causal_tl",
     [](Problem& p) {
       p.dtype = DType::bf16, p.key_lengths = {3, 256}, p.causal = true;
     }},
    {"fp16_bias_head",
     [](Problem& p) {
       p.bias_shape = std::array<int64_t, 4>{1, 8, 97, 257}, p.bias_dtype = DType::f16;
     },
     true},
    {"bf16_bias_causal_tl_padding",
     [](Problem& p) {
       p.dtype = p.bias_dtype = DType::bf16, p.bias_shape = std::array<int64_t, 4>{1, 8, 97, 257}, p.causal = true,
       p.key_lengths = {100, 257};
     }},
    {"fp16_dropout", [](Problem& p) { p.dropout_p = 0.2; }, true},
    {"bf16_bshd_dropout_causal_tl_bias",
     [](Problem& p) {
       p.dtype = p.bias_dtype = DType::bf16, p.layout = Layout::BSHD, p.dropout_p = 0.1, p.causal = true,
       p.bias_shape = std::array<int64_t, 4>{1, 8, 97, 257};
     }},
    {"fp16_d8", [](Problem& p) { p.Dqk = p.Dv = 8; }},
    {"fp16_d128", [](Problem& p) { p.Dqk = p.Dv = 128; }},
    {"fp16_dqk128_dv64", [](Problem& p) { p.Dqk = 128, p.Dv = 64; }},
    {"fp16_lq1_decode", [](Problem& p) { p.Lq = 1, p.causal = true, p.alignment = Alignment::bottom_right; }},
};

struct Param {
  const Case* c;
  NamedGpu gpu;
};

class CudnnBackwardGraph : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { ASSERT_TRUE(driver_load_error().empty()) << driver_load_error(); }
};

TEST_P(CudnnBackwardGraph, HeuristicsFindAnEngine) {
  Problem p = base();
  GetParam().c->change(p);
  validate(p);
  const Support s = cudnn_supports_backward(p);
  ASSERT_TRUE(s.ok) << p.name() << " should be supported: " << s.reason;

  const SdpaGraph graph(p, Pass::backward);
  const SdpaUids& u = graph.uids();
  for (int64_t uid : {u.q, u.k, u.v, u.o, u.d_o, u.stats, u.dq, u.dk, u.dv, u.softmax_sum}) EXPECT_NE(uid, 0);
  EXPECT_EQ(u.dbias != 0, p.bias_shape.has_value());
  EXPECT_EQ(u.dq_accum != 0, !p.bias_shape.has_value());
  EXPECT_EQ(u.seq_kv != 0, !p.key_lengths.empty());
  EXPECT_EQ(u.keep != 0, p.dropout_p > 0);

  const Desc props = named_device_properties(GetParam().gpu);
  const std::vector<Desc> configs = heuristic_engine_configs(graph, props);
  ASSERT_FALSE(configs.empty()) << "cuDNN heuristics found no backward engine for " << p.name() << " on "
                                << to_string(GetParam().gpu);
  std::string engines;
  for (const Desc& c : configs) engines.append(" ").append(std::to_string(engine_global_index(c)));
  RecordProperty("engines", engines);

  if (!GetParam().c->plan) return;
  try {
    const Desc plan = make_plan(configs.front(), props);
    RecordProperty("plan", "built");
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

INSTANTIATE_TEST_SUITE_P(Cudnn, CudnnBackwardGraph, ::testing::ValuesIn(params()), [](const auto& info) {
  return std::string(info.param.c->name) + "_" + (info.param.gpu == NamedGpu::a100_sm80 ? "sm80" : "sm90");
});

// Cases the forward takes and the backward declines, each with the reason naming cuDNN's limit.
TEST(CudnnBackwardSupport, DocumentedLimitsAreDeclared) {
  struct Limit {
    const char* what;
    std::function<void(Problem&)> change;
    const char* reason;
  };
  const Limit limits[] = {
      {"head dim 136", [](Problem& p) { p.Dqk = p.Dv = 136; }, "head dims above 128"},
      {"Lq = Lk = 1", [](Problem& p) { p.Lq = p.Lk = 1; }, "Lq = Lk = 1"},
      {"fp32", [](Problem& p) { p.dtype = DType::f32; }, "no backward engine for fp32"},
      {"bias [B,1,1,Lk]",
       [](Problem& p) {
         p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 257};
       },
       "dBias only as"},
      {"bias [B,Hq,Lq,Lk]",
       [](Problem& p) {
         p.bias_shape = std::array<int64_t, 4>{2, 8, 97, 257};
       },
       "dBias only as"},
  };
  for (const Limit& l : limits) {
    Problem p = base();
    l.change(p);
    EXPECT_TRUE(cudnn_supports(p).ok) << l.what << ": the forward takes it: " << cudnn_supports(p).reason;
    const Support s = cudnn_supports_backward(p);
    EXPECT_FALSE(s.ok) << l.what;
    EXPECT_NE(s.reason.find(l.reason), std::string::npos) << l.what << ": " << s.reason;
  }
  Problem one_batch = base();
  one_batch.B = 1;
  one_batch.bias_shape = std::array<int64_t, 4>{1, 8, 97, 257};
  EXPECT_TRUE(cudnn_supports_backward(one_batch).ok) << cudnn_supports_backward(one_batch).reason;
  const ImplPtr impl = find_impl("cudnn");
  ASSERT_TRUE(impl);
  EXPECT_FALSE(impl->supports_backward([] {
                     Problem p = base();
                     p.Dqk = p.Dv = 136;
                     return p;
                   }())
                   .ok);
}

// The guards behind the declared limits, asked of cuDNN with graphs built directly (bypassing supports): no
// backward engine for fp32 I/O, for a dBias other than [1, Hq, Lq, Lk], or for head dim 68 on either GPU; head
// dims above 128 only on sm_90 (so the heuristics can fail, and the limits mirror cuDNN's rather than inventing).
TEST(CudnnBackwardGraphNegative, DeclaredLimitsHaveNoEngine) {
  ASSERT_TRUE(driver_load_error().empty()) << driver_load_error();
  auto engines = [](const Problem& p, NamedGpu gpu) {
    const SdpaGraph g(p, Pass::backward);
    return heuristic_engine_configs(g, named_device_properties(gpu)).size();
  };
  const std::function<void(Problem&)> none[] = {
      [](Problem& p) { p.dtype = DType::f32; },
      [](Problem& p) {
        p.bias_shape = std::array<int64_t, 4>{2, 8, 97, 257};
      },
      [](Problem& p) {
        p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 257};
      },
      [](Problem& p) { p.Dqk = p.Dv = 68; },
  };
  for (const auto& change : none) {
    Problem p = base();
    change(p);
    EXPECT_FALSE(cudnn_supports_backward(p).ok) << p.name();
    for (NamedGpu g : {NamedGpu::a100_sm80, NamedGpu::h100_sm90})
      EXPECT_EQ(engines(p, g), 0u) << p.name() << " " << to_string(g);
  }
  Problem wide = base();
  wide.Dqk = wide.Dv = 136;
  EXPECT_EQ(engines(wide, NamedGpu::a100_sm80), 0u);
  EXPECT_GT(engines(wide, NamedGpu::h100_sm90), 0u);
}

// Distinct signed values, so a misplaced element cannot go unnoticed.
void fill(Tensor& t, double salt) {
  for (int64_t n = 0; n < t.numel(); ++n) t.set_offset(n, std::sin(0.37 * static_cast<double>(n) + salt) * 4.0);
}

TEST(CudnnBackwardVariantPack, InputsOutputsAndWorkTensorsAreBound) {
  ASSERT_TRUE(driver_load_error().empty()) << driver_load_error();
  for (bool with_bias : {false, true}) {
    Problem p;
    p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 11, p.Dqk = 16, p.Dv = 8;
    p.dtype = DType::bf16, p.layout = Layout::BSHD, p.want_lse = true, p.dropout_p = 0.3, p.dropout_seed = 9;
    p.key_lengths = {7, 11};
    if (with_bias) p.bias_shape = std::array<int64_t, 4>{1, 4, 5, 11}, p.bias_dtype = DType::bf16;
    Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
    fill(in.q, 0.1), fill(in.k, 0.2), fill(in.v, 0.3);
    if (with_bias) in.bias = Tensor(p.bias_dtype, {1, 4, 5, 11}), fill(*in.bias, 0.4);
    in.keep = make_keep_mask(p);
    Outputs fwd = make_outputs(p);
    fill(fwd.out, 0.5), fill(*fwd.lse, 0.6);
    Tensor dout = make_dout(p);
    fill(dout, 0.7);

    const SdpaGraph g(p, Pass::backward);
    const BackwardData bwd{fwd, dout};
    const std::vector<HostBinding> bindings = host_bindings(p, in, g, &bwd);
    const SdpaUids& u = g.uids();
    std::set<int64_t> bound, outputs, work;
    for (const HostBinding& b : bindings) {
      bound.insert(b.uid);
      if (b.is_output) outputs.insert(b.uid);
      if (b.is_work) work.insert(b.uid);
      if (!b.is_output && !b.is_work) {
        EXPECT_EQ(static_cast<int64_t>(b.upload.size()), b.bytes) << b.name;
      }
      if (b.uid == u.d_o) {
        EXPECT_EQ(b.upload, dout.bytes) << "dO in the layout of O";
      }
      if (b.uid == u.o) {
        EXPECT_EQ(b.upload, fwd.out.bytes);
      }
      if (b.uid == u.stats) {
        ASSERT_EQ(b.upload.size(), static_cast<size_t>(p.B * p.Hq * p.Lq) * sizeof(float));
        float v;
        std::memcpy(&v, b.upload.data() + 3 * sizeof(float), sizeof(float));
        EXPECT_EQ(v, static_cast<float>(fwd.lse->get_offset(3)));
      }
    }
    std::set<int64_t> declared;
    for (const auto& t : g.device_tensors()) declared.insert(t.uid);
    EXPECT_EQ(bound, declared);
    std::set<int64_t> want_outputs{u.dq, u.dk, u.dv};
    if (with_bias) want_outputs.insert(u.dbias);
    EXPECT_EQ(outputs, want_outputs);
    std::set<int64_t> want_work{u.softmax_sum};
    if (!with_bias) want_work.insert(u.dq_accum);
    EXPECT_EQ(work, want_work);

    // Device results land in the gradient tensors as they are (the graph declares the gradients' own layouts).
    Gradients grads = make_gradients(p);
    for (const HostBinding& b : bindings) {
      if (!b.is_output) continue;
      std::vector<uint8_t> bytes(static_cast<size_t>(b.bytes));
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
      store_gradient(p, g, b.uid, bytes, grads);
      const Tensor& t = b.uid == u.dq ? grads.dq : b.uid == u.dk ? grads.dk : b.uid == u.dv ? grads.dv : *grads.dbias;
      EXPECT_EQ(t.bytes, bytes) << b.name;
    }
    EXPECT_THROW(store_gradient(p, g, u.q, {}, grads), std::logic_error);
  }
}

// On a device: cudnn's gradients against the reference with the gradient tolerance; skipped without one.
TEST(CudnnBackwardDevice, MatchesReferenceGradientsOnADevice) {
  const ImplPtr impl = find_impl("cudnn");
  ASSERT_TRUE(impl);
  const Support a = impl->available();
  if (!a.ok) GTEST_SKIP() << "cudnn unavailable: " << a.reason;
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 33, p.Lk = 65, p.Dqk = p.Dv = 64, p.dtype = DType::bf16, p.causal = true;
  p.want_lse = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  fill(in.q, 0.1), fill(in.k, 0.2), fill(in.v, 0.3);
  Tensor dout = make_dout(p);
  fill(dout, 0.7);
  Gradients g;
  const Support s = run_backward_impl(*impl, p, in, dout, g);
  ASSERT_TRUE(s.ok) << s.reason;
  const Verdict v = judge_backward(p, expected_attention(p, in), expected_gradients(p, in, dout), g);
  EXPECT_TRUE(v.pass) << v.worst().describe();
}

}  // namespace
