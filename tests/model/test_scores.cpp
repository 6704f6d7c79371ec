// Raw-score outputs (Problem::scores_out, ONNX qk_matmul_output_mode 0-2): the reference's stages against values
// worked out by hand, cpu and cpu-flash against the reference at every stage (a wrong stage must fail), and the
// plugin route (offered only to plugins that declare "scores").
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/generate.hpp"
#include "impl_check.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/plugin_loader.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One query, three keys, D = 1, scale 0.5, softcap 2, a bias, key 2 masked: q = 2, k = (1, -3, 40).
Problem tiny(ScoresOut stage) {
  Problem p;
  p.dtype = DType::f64, p.bias_dtype = DType::f64;
  p.Lk = 3, p.scale = 0.5, p.softcap = 2.0, p.scores_out = stage;
  p.mask_shape = std::array<int64_t, 4>{1, 1, 1, 3};
  p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 3};
  return p;
}
Inputs tiny_inputs(const Problem& p) {
  Inputs in{make_qkv(p, 0),
            make_qkv(p, 1),
            make_qkv(p, 2),
            Tensor(DType::u8, {1, 1, 1, 3}),
            Tensor(DType::f64, {1, 1, 1, 3}),
            {},
            {},
            {}};
  in.q.put(0, 0, 0, 0, 2.0);
  const double k[] = {1.0, -3.0, 40.0}, bias[] = {0.25, -1.0, 7.0};
  for (int64_t j = 0; j < 3; ++j) {
    in.k.put(0, 0, j, 0, k[j]);
    in.mask->put(0, 0, 0, j, j < 2);
    in.bias->put(0, 0, 0, j, bias[j]);
  }
  return in;
}

TEST(Scores, ReferenceStagesWorkedByHand) {
  const double c[] = {2 * std::tanh(1.0 / 2), 2 * std::tanh(-3.0 / 2), 2 * std::tanh(40.0 / 2)};
  auto scores = [](ScoresOut s) {
    const Problem p = tiny(s);
    return reference_attention(p, tiny_inputs(p)).scores;
  };
  const std::vector<double> scaled = scores(ScoresOut::scaled), capped = scores(ScoresOut::capped),
                            masked = scores(ScoresOut::masked);
  // scaled: 0.5 * 2 * k, every key (the masked one too, as ONNX's mode 0)
  EXPECT_EQ(scaled, (std::vector<double>{1.0, -3.0, 40.0}));
  for (int j = 0; j < 3; ++j) EXPECT_DOUBLE_EQ(capped[static_cast<size_t>(j)], c[j]) << j;
  EXPECT_DOUBLE_EQ(masked[0], c[0] + 0.25);
  EXPECT_DOUBLE_EQ(masked[1], c[1] - 1.0);
  EXPECT_EQ(masked[2], -kInf) << "a masked key's score is the fill";
  EXPECT_TRUE(reference_attention(tiny(ScoresOut::none), tiny_inputs(tiny(ScoresOut::none))).scores.empty());
}

std::vector<Problem> cpu_problems() {
  std::vector<Problem> v;
  auto make = [&](DType t, int64_t Lq, int64_t Lk, ScoresOut s, auto&& tweak) {
    Problem p;
    p.dtype = t, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = Lq, p.Lk = Lk, p.Dqk = p.Dv = 16;
    p.want_lse = true, p.scores_out = s;
    tweak(p);
    v.push_back(p);
  };
  for (ScoresOut s : {ScoresOut::scaled, ScoresOut::capped, ScoresOut::masked}) {
    make(DType::f32, 37, 150, s,
         [](Problem& p) { p.softcap = 5, p.causal = true, p.alignment = Alignment::bottom_right; });
    make(DType::f64, 5, 40, s, [](Problem& p) {
      p.softcap = 3, p.bias_shape = std::array<int64_t, 4>{2, 1, 1, 40}, p.bias_dtype = DType::f64;
      p.key_lengths = {40, 0}, p.window_left = 4;
    });
    make(DType::bf16, 1, 300, s, [](Problem& p) { p.key_lengths = {211, 300}; });  // decode
    make(DType::f16, 13, 17, s, [](Problem& p) {
      p.fill = MaskFill::finite, p.fill_value = -1e4, p.mask_shape = std::array<int64_t, 4>{2, 4, 13, 17};
      p.sinks = {0.5, -kInf, 2, 1};
    });
  }
  return v;
}

TEST(Scores, CpuImplementationsMatchTheReference) {
  expect_impls_match_reference(cpu_problems(), [](Problem p) {  // the scores of another stage are judged wrong
    p.scores_out = p.scores_out == ScoresOut::masked ? ScoresOut::scaled : ScoresOut::masked;
    return p;
  });
}

TEST(Scores, OfferedOnlyToPluginsThatDeclareThem) {
  Problem p = cpu_problems()[0];
  p.dtype = DType::f32;
  for (const char* path : {EXAMPLE_PLUGIN_PATH, V1_PLUGIN_PATH}) {
    const ImplPtr plugin = load_plugin(path);
    EXPECT_FALSE(plugin->capabilities().scores_out) << path;
    EXPECT_EQ(plugin->supports(p).reason, "raw-score output not supported") << path;
  }
}

}  // namespace
}  // namespace attncheck
