// cpu and cpu-flash backward against the reference gradients with the gradient tolerance: generated cases over
// every feature and dtype, flash block edges, unsupported cases declared, and tightness at long context (a correct
// fp32 implementation uses at least 1% of the bound at Lk = 32768).
#include <gtest/gtest.h>

#include <limits>

#include "attncheck/tolerance_backward.hpp"
#include "backward_cases.hpp"

using namespace attncheck;
using namespace attncheck::gradtest;

namespace {
// Largest error/tolerance over every gradient element (inf when a non-finite value appears where none belongs).
double max_ratio(const Problem& p, const ExpectedAttention& f, const ExpectedGradients& r, const Gradients& g) {
  const GradTolerance t = grad_tolerance(p, f, r);
  double worst = 0;
  auto scan = [&](const std::vector<double>& e, const Tensor& a, const std::vector<double>& tol) {
    const std::vector<double> av = a.to_double();
    for (size_t n = 0; n < e.size(); ++n) worst = std::max(worst, std::abs(av[n] - e[n]) / tol[n]);
  };
  scan(r.dq, g.dq, t.dq);
  scan(r.dk, g.dk, t.dk);
  scan(r.dv, g.dv, t.dv);
  if (g.dbias) scan(r.dbias, *g.dbias, t.dbias);
  return worst;
}

// `name`'s gradients of a case (a test failure, and NaN gradients, if it declines the case).
Gradients run_backward_of(const char* name, const prop::Case& c, const Tensor& dout) {
  Gradients g;
  const Support s = run_backward_impl(*find_impl(name), c.p, c.in, dout, g);
  if (!s.ok) ADD_FAILURE() << name << " declined " << c.name() << ": " << s.reason;
  return g;
}

class CpuBackward : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuBackward, MatchesReferenceGradients) {
  const ImplPtr impl = find_impl(GetParam());
  ASSERT_TRUE(impl);
  static constexpr DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};
  int ran = 0, unsupported = 0;
  double worst = 0;
  for (uint64_t n = 0; n < 96; ++n) {
    const prop::Case c = grad_case(n, 4000, dtypes[n % 4]);
    const Tensor dout = random_dout(c.p, n);
    Gradients g;
    const Support s = run_backward_impl(*impl, c.p, c.in, dout, g);
    if (!s.ok) {
      ++unsupported;
      continue;
    }
    ++ran;
    const ExpectedAttention f = expected_attention(c.p, c.in);
    const ExpectedGradients r = expected_gradients(c.p, c.in, dout);
    const Verdict v = judge_backward(c.p, f, r, g);
    EXPECT_TRUE(v.pass) << c.name() << " " << c.spec.str() << "\n  " << v.worst().describe();
    worst = std::max(worst, max_ratio(c.p, f, r, g));
  }
  std::cout << "[backward] " << GetParam() << ": " << ran << " cases, " << unsupported
            << " unsupported, max error/tolerance " << worst << "\n";
  EXPECT_GE(ran, 80);
}

std::string impl_test_name(const ::testing::TestParamInfo<std::string>& i) {
  return i.param == "cpu" ? "cpu" : "cpu_flash";
}
INSTANTIATE_TEST_SUITE_P(Impls, CpuBackward, ::testing::Values("cpu", "cpu-flash"), impl_test_name);

TEST(CpuBackward, FlashDeclaresBroadcastBiasUnsupported) {
  prop::CaseSpec s;
  s.B = 2;
  s.bias_kind = 2;  // [1, Hq, Lq, Lk]
  const prop::Case c = prop::build_case(s);
  Gradients g;
  const Support sup = run_backward_impl(*find_impl("cpu-flash"), c.p, c.in, random_dout(c.p, 1), g);
  EXPECT_FALSE(sup.ok);
  EXPECT_NE(sup.reason.find("broadcast over batch or heads"), std::string::npos) << sup.reason;
  EXPECT_FALSE(find_impl("reference")->supports_backward(c.p).ok);
}

// Saturated softcap in fp32: cpu and cpu-flash form the derivative as 1 − t² from the float tanh t, as FlashAttention
// does; where tanh rounds to 1 that is 0 while the true derivative is ~1e-8..1e-20. The gradient tolerance carries
// that absolute error of the derivative (docs/backward.md "Logit stage derivative"), so both pass, and stay inside.
TEST(CpuBackward, SaturatedSoftcapFp32Passes) {
  for (uint64_t seed : {3u, 11u, 29u}) {
    prop::CaseSpec s;
    s.Hq = 2;
    s.Lq = 16;
    s.Lk = 14;
    s.Dqk = s.Dv = 4;
    s.logit = {{"softcap", 5.0}};
    s.bias_kind = 1;
    s.values = prop::Values::large_logits;
    s.seed = seed;
    const prop::Case c = prop::build_case(s);
    const Tensor dout = random_dout(c.p, seed);
    const ExpectedAttention f = expected_attention(c.p, c.in);
    const ExpectedGradients r = expected_gradients(c.p, c.in, dout);
    for (const char* name : {"cpu", "cpu-flash"}) {
      const Gradients g = run_backward_of(name, c, dout);
      const Verdict v = judge_backward(c.p, f, r, g);
      EXPECT_TRUE(v.pass) << name << " " << c.name() << "\n  " << v.worst().describe();
    }
  }
}

// Keys no query sees hold the largest finite float (golden's poison_masked): dO·v overflows to inf there, and a
// backward that sums D over every key (0·inf = NaN) poisons whole rows. Gradients must match the reference, and
// the unseen keys must get exactly zero dK and dV.
TEST(CpuBackward, MaxFiniteValuesInUnseenKeysNeverLeak) {
  prop::CaseSpec s;
  s.Hq = 2;
  s.Lq = 4;
  s.Lk = 9;  // causal top-left: keys 4..8 are seen by no query
  s.causal = true;
  const prop::Case base = prop::build_case(s);
  prop::Case c = base;
  const double big = std::numeric_limits<float>::max();
  for (int64_t j = 4; j < 9; ++j)
    for (int64_t d = 0; d < c.p.Dqk; ++d) {
      c.in.k.put(0, 0, j, d, d % 2 ? big : -big);
      c.in.v.put(0, 0, j, d, d % 2 ? -big : big);
    }
  const Tensor dout = random_dout(c.p, 2);
  const ExpectedAttention f = expected_attention(c.p, c.in);
  const ExpectedGradients r = expected_gradients(c.p, c.in, dout);
  for (const char* name : {"cpu", "cpu-flash"}) {
    const Gradients g = run_backward_of(name, c, dout);
    const Verdict v = judge_backward(c.p, f, r, g);
    EXPECT_TRUE(v.pass) << name << "\n  " << v.worst().describe();
    for (int64_t j = 4; j < 9; ++j)
      for (int64_t d = 0; d < c.p.Dqk; ++d) {
        EXPECT_EQ(g.dk.at(0, 0, j, d), 0.0) << name << " dk key " << j;
        EXPECT_EQ(g.dv.at(0, 0, j, d), 0.0) << name << " dv key " << j;
      }
  }
}

// Long context: a correct fp32 flash backward must use >= 1% of the bound (the bound is not vacuous) and pass.
TEST(CpuBackward, TightAtLongContextFp32) {
  prop::CaseSpec s;
  s.Lq = 2;
  s.Lk = 32768;
  s.Dqk = s.Dv = 64;
  s.dtype = DType::f32;
  s.want_weights = false;
  const prop::Case c = prop::build_case(s);
  const Tensor dout = random_dout(c.p, 5);
  const ExpectedAttention f = expected_attention(c.p, c.in);
  const ExpectedGradients r = expected_gradients(c.p, c.in, dout);
  for (const char* name : {"cpu", "cpu-flash"}) {
    const Gradients g = run_backward_of(name, c, dout);
    const double ratio = max_ratio(c.p, f, r, g);
    std::cout << "[backward] " << name << " Lk=32768 fp32: max error/tolerance " << ratio << "\n";
    EXPECT_LE(ratio, 1.0) << name;
    EXPECT_GE(ratio, 0.01) << name;
  }
}
}  // namespace
