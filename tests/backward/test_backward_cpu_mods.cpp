// cpu and cpu-flash backward through the modification library, RoPE (every variant) and QK-norm against the
// reference gradients with the gradient tolerance, in fp32, fp16 and bf16, on a shape that crosses cpu-flash's
// 64-key and 64-query tiles; and the gradients of a staged problem judged without the stage fail (the mapping back
// through the rotation and the norm is what the gradients of q and k are made of).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attncheck/mods.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/rope.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "backward_cases.hpp"

using namespace attncheck;
using namespace attncheck::gradtest;

namespace {

Tensor random_tensor(const Problem& p, int which, uint64_t seed) {  // q, k or v, normal values rounded to p.dtype
  Tensor t = make_qkv(p, which);
  prop::SeededChooser r(seed);
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      for (int64_t i = 0; i < t.shape[2]; ++i)
        for (int64_t d = 0; d < t.shape[3]; ++d) t.put(b, h, i, d, prop::normal(r));
  return t;
}

Problem base(DType t) {
  Problem p;
  p.dtype = t, p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 70, p.Lk = 75, p.Dqk = p.Dv = 16;
  p.alignment = Alignment::bottom_right, p.causal = true;
  return p;
}

struct Labelled {
  std::string what;
  Problem p;
};

std::vector<Labelled> cases() {
  std::vector<Labelled> out;
  uint64_t seed = 5;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (const ModEntry& m : modifications()) {
      Problem p = base(t);
      Rng rng(++seed * 977);
      m.draw(p, rng);
      out.push_back({m.name, p});
    }
    for (int v = 0; v < 4; ++v) {  // RoPE: partial, scalings, mRoPE; QK-norm with RoPE
      Problem p = base(t);
      p.rotary_dim = v == 0 ? 6 : 16, p.rotary_interleaved = v % 2 == 0, p.rope_offsets = {65536 + 11, 3};
      if (v == 1) p.rope_theta = 500000, p.rope_llama3_factor = 8, p.rope_original_max = 64;
      if (v == 2) {
        p.rope_yarn_factor = 4, p.rope_original_max = 256;
        p.rope_mrope_section = {2, 4, 2};
        for (int64_t n = 0; n < 3 * p.B * p.Lk; ++n) p.rope_position_ids.push_back((n * 13) % 97);
      }
      if (v == 3)
        for (int64_t d = 0; d < p.Dqk; ++d) {
          p.q_norm_weight.push_back(1.0 + 0.0625 * double(d % 5));
          p.k_norm_weight.push_back(1.0 - 0.03125 * double(d % 7));
        }
      out.push_back({"rope variant " + std::to_string(v), p});
    }
    Problem e = base(t);
    e.score_expr = "score * (1 + 0.125 * h) - 0.03 * score ^ 2";
    out.push_back({"score_expr non-linear", e});
  }
  return out;
}

}  // namespace

TEST(CpuBackwardMods, MatchReferenceGradients) {
  int ran = 0, staged = 0;
  double worst = 0;
  for (const Labelled& c : cases()) {
    const Problem& p = c.p;
    ASSERT_NO_THROW(validate(p)) << c.what << " " << p.name();
    Inputs in;
    in.q = random_tensor(p, 0, 1 + ran), in.k = random_tensor(p, 1, 2 + ran), in.v = random_tensor(p, 2, 3 + ran);
    const Tensor dout = random_dout(p, 4 + ran);
    const ExpectedAttention f = expected_attention(p, in);
    const ExpectedGradients r = expected_gradients(p, in, dout);
    for (const char* name : {"cpu", "cpu-flash"}) {
      Gradients g;
      const Support s = run_backward_impl(*find_impl(name), p, in, dout, g);
      ASSERT_TRUE(s.ok) << name << " " << c.what << ": " << s.reason;
      const Verdict v = judge_backward(p, f, r, g);
      EXPECT_TRUE(v.pass) << name << " " << c.what << " " << p.name() << "\n  " << v.worst().describe();
      const TensorVerdict& w = v.worst();
      if (w.tolerance > 0) worst = std::max(worst, std::abs(w.actual - w.expected) / w.tolerance);
      if (uses_position_stage(p)) {  // judged as if q and k had no stage: dq, dk must fail
        Problem plain = p;
        plain.rotary_dim = 0, plain.q_norm_weight.clear(), plain.k_norm_weight.clear();
        plain.rope_mrope_section.clear(), plain.rope_position_ids.clear();
        EXPECT_FALSE(judge_backward(plain, expected_attention(plain, in), expected_gradients(plain, in, dout), g).pass)
            << name << " " << c.what;
        ++staged;
      }
    }
    ++ran;
  }
  std::cout << "[backward mods] " << ran << " problems x {cpu, cpu-flash}, max error/tolerance " << worst << "\n";
  EXPECT_EQ(ran, 3 * (int(modifications().size()) + 5));
  EXPECT_EQ(staged, 3 * 2 * (4 + 2));  // 4 RoPE variants and the rope and qk_norm entries, per dtype and impl
}
