// Honesty of the diagnosis: an error without the structure of any known bug (a few scattered elements off by some
// tolerances, as a race or a stray write would leave) is "no known signature", not a guess; and a prediction that
// equals the reference (a bug this problem cannot show) explains nothing, however small the error.
#include <gtest/gtest.h>

#include <random>

#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "diagnosis.hpp"

namespace attncheck {
namespace {

prop::Case make_case(DType t) {
  prop::Case c;
  Problem& p = c.p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 16, p.Lk = 96, p.Dqk = p.Dv = 16, p.dtype = t, p.want_lse = true;
  std::mt19937_64 g(11);
  std::normal_distribution<double> n(0.0, 1.0);
  c.in.q = Tensor(t, {p.B, p.Hq, p.Lq, p.Dqk});
  c.in.k = Tensor(t, {p.B, p.Hkv, p.Lk, p.Dqk});
  c.in.v = Tensor(t, {p.B, p.Hkv, p.Lk, p.Dv});
  for (Tensor* x : {&c.in.q, &c.in.k, &c.in.v})
    for (int64_t k = 0; k < x->numel(); ++k) x->set_offset(k, n(g));
  return c;
}

// The reference's outputs with `count` scattered out elements moved by `times` their tolerance.
diagnose::Diagnosis scattered(DType t, int count, double times) {
  const prop::Case c = make_case(t);
  const ExpectedAttention ref = expected_attention(c.p, c.in);
  Outputs out;
  out.out = Tensor(t, {c.p.B, c.p.Hq, c.p.Lq, c.p.Dv});
  out.lse = Tensor(c.p.stat_dtype(), {c.p.B, c.p.Hq, c.p.Lq});
  for (int64_t k = 0; k < out.out.numel(); ++k) out.out.set_offset(k, ref.out[static_cast<size_t>(k)]);
  for (int64_t k = 0; k < out.lse->numel(); ++k) out.lse->set_offset(k, ref.lse[static_cast<size_t>(k)]);
  const std::vector<double> tol = out_tolerance(c.p, ref, ToleranceModel{}, t);
  std::mt19937_64 g(3);
  for (int e = 0; e < count; ++e) {
    const int64_t k = static_cast<int64_t>(g() % static_cast<uint64_t>(out.out.numel()));
    out.out.set_offset(k, ref.out[static_cast<size_t>(k)] + (e % 2 ? 1 : -1) * times * tol[static_cast<size_t>(k)]);
  }
  EXPECT_FALSE(judge(c.p, ref, out).pass);
  return diagnose::diagnose(c, ref, out, {});
}

TEST(NoSignature, ScatteredElementsOffByAFewTolerancesHaveNoKnownSignature) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (double times : {3.0, 30.0}) {
      const diagnose::Diagnosis d = scattered(t, 5, times);
      std::string why;
      for (const std::string& l : d.text()) why += l + "\n";
      EXPECT_EQ(d.top(), "no known signature") << to_string(t) << " x" << times << "\n" << why;
    }
}

}  // namespace
}  // namespace attncheck
