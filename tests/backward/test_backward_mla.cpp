// The backward of absorbed MLA (mla.hpp): K and V are one latent cache, so its gradient is one tensor, dK + dV in
// K's first Dv columns (dv the view of those columns). The reference's against central finite differences of the
// forward, perturbing the cache (v follows k); cpu and cpu-flash pass the gradient tolerance in fp32 and bf16, and a
// kernel that returns the two roles' gradients apart (dK alone in the cache's first columns) fails; backends whose
// interfaces carry dk and dv as two tensors decline.
#include <gtest/gtest.h>

#include <cmath>

#include "attncheck/generate.hpp"
#include "attncheck/grad_scales.hpp"
#include "attncheck/mla.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "backward_cases.hpp"

using namespace attncheck;
using namespace attncheck::gradtest;

namespace {

Problem mla_problem(DType t) {
  Problem p;
  p.dtype = t, p.B = 2, p.Hq = 3, p.Hkv = 1, p.Lq = 4, p.Lk = 9, p.Dqk = 10, p.Dv = 6, p.want_lse = true;
  p.causal = true, p.alignment = Alignment::bottom_right, p.key_lengths = {9, 6};
  p.mla = true, p.scale = 1.0 / std::sqrt(8.0);  // declared, as DeepSeek's: not 1/sqrt(Dqk)
  return p;
}

// The same inputs as two independent roles: K the cache, V a copy of its first Dv columns (no tie).
Problem apart(Problem p) {
  p.mla = false;
  return p;
}

double loss(const Problem& p, const Inputs& in, const std::vector<double>& dout) {  // sum dO . O
  const std::vector<double> out = expected_attention(p, in, 1).out;
  double l = 0;
  for (size_t n = 0; n < out.size(); ++n) l += dout[n] * out[n];
  return l;
}

}  // namespace

TEST(MlaBackward, LatentGradientMatchesFiniteDifferences) {
  const Problem p = mla_problem(DType::f64);
  const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
  const Tensor dout_t = random_dout(p, 3);
  const std::vector<double> dout = dout_t.to_double();
  const BackwardResult r = reference_backward(p, in, dout_t, 1);
  const BackwardResult two = reference_backward(apart(p), in, dout_t, 1);
  int differs = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j : {int64_t{0}, int64_t{4}, p.key_lengths[size_t(b)] - 1})
      for (int64_t e = 0; e < p.Dqk; ++e) {
        const size_t n = static_cast<size_t>((b * p.Lk + j) * p.Dqk + e);
        auto central = [&](double step) {
          double l[2];
          for (int s = 0; s < 2; ++s) {
            Inputs x = in;
            x.k.put(b, 0, j, e, in.k.at(b, 0, j, e) + (s ? -step : step));
            tie_latent_values(p, x);  // the cache moves as keys and as values
            l[s] = loss(p, x, dout);
          }
          return (l[0] - l[1]) / (2 * step);
        };
        const double fd = (4 * central(5e-4) - central(1e-3)) / 3;
        EXPECT_NEAR(fd, r.dk[n], 1e-7 * (1 + std::abs(r.dk[n]))) << "dk[" << b << ",0," << j << "," << e << "]";
        if (e < p.Dv) {
          const size_t v = static_cast<size_t>((b * p.Lk + j) * p.Dv + e);
          EXPECT_EQ(r.dv[v], r.dk[n]) << "dv is the view of the cache gradient's first Dv columns";
          EXPECT_EQ(r.dk[n], two.dk[n] + two.dv[v]);
          differs += std::abs(fd - two.dk[n]) > 1e-4 * (1 + std::abs(fd));  // dK alone misses dV
        }
      }
  EXPECT_GT(differs, 10) << "the values' gradient is too small here to tell a fold from none";
}

TEST(MlaBackward, CpuAndCpuFlashPassAndAnUnfoldedGradientFails) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Problem p = mla_problem(t);
    const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 9);
    const Tensor dout = random_dout(p, 4);
    const ExpectedAttention f = expected_attention(p, in);
    const ExpectedGradients r = expected_gradients(p, in, dout);
    for (const char* name : {"cpu", "cpu-flash"}) {
      Gradients g;
      const Support s = run_backward_impl(*find_impl(name), p, in, dout, g);
      ASSERT_TRUE(s.ok) << name << ": " << s.reason;
      const Verdict v = judge_backward(p, f, r, g);
      EXPECT_TRUE(v.pass) << name << " " << to_string(t) << "\n  " << v.worst().describe();
    }
    Gradients unfolded;  // the two roles' gradients as a kernel for separate K and V returns them
    ASSERT_TRUE(run_backward_impl(*find_impl("cpu"), apart(p), in, dout, unfolded).ok);
    const Verdict v = judge_backward(p, f, r, unfolded);
    EXPECT_FALSE(v.pass) << to_string(t) << ": dK without dV in the cache's first columns passes";
    EXPECT_EQ(v.worst().tensor == "dk" || v.worst().tensor == "dv", true) << v.worst().describe();
  }
}

TEST(MlaBackward, BackendsWithTwoGradientTensorsDecline) {
  const Problem p = mla_problem(DType::f32);
  for (const char* name : {"cuda-emulated"}) {
    const ImplPtr impl = find_impl(name);
    if (!impl) continue;
    const Support s = impl->supports_backward(p);
    EXPECT_FALSE(s.ok) << name;
    EXPECT_NE(s.reason.find("MLA"), std::string::npos) << name << ": " << s.reason;
  }
}
