// A kernel that computes fp64 problems in fp32 (plain fp32 loops here) fails the fp64 bound everywhere; its
// diagnosis names the working precision (tag working-precision) with the effective bits of its errors, instead of
// "no known signature". A correct fp64 computation in another order passes and needs no diagnosis.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "diagnosis.hpp"

namespace attncheck {
namespace {

prop::Case make_case() {
  prop::Case c;
  Problem& p = c.p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 16, p.Lk = 96, p.Dqk = p.Dv = 16, p.dtype = DType::f64, p.want_lse = true;
  std::mt19937_64 g(5);
  std::normal_distribution<double> n(0.0, 1.0);
  c.in.q = Tensor(p.dtype, {p.B, p.Hq, p.Lq, p.Dqk});
  c.in.k = Tensor(p.dtype, {p.B, p.Hkv, p.Lk, p.Dqk});
  c.in.v = Tensor(p.dtype, {p.B, p.Hkv, p.Lk, p.Dv});
  for (Tensor* x : {&c.in.q, &c.in.k, &c.in.v})
    for (int64_t k = 0; k < x->numel(); ++k) x->set_offset(k, n(g));
  return c;
}

// Softmax attention in working type T (every input read as T, every sum in T), delivered in double. The tensors
// are contiguous [B=1,H,L,D].
template <class T>
Outputs attention_in(const prop::Case& c) {
  const Problem& p = c.p;
  Outputs o;
  o.out = Tensor(DType::f64, {p.B, p.Hq, p.Lq, p.Dv});
  o.lse = Tensor(DType::f64, {p.B, p.Hq, p.Lq});
  std::vector<T> s(static_cast<size_t>(p.Lk));
  for (int64_t h = 0; h < p.Hq; ++h)
    for (int64_t i = 0; i < p.Lq; ++i) {
      T m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < p.Lk; ++j) {
        T dot = 0;
        for (int64_t d = 0; d < p.Dqk; ++d)
          dot += static_cast<T>(c.in.q.get_offset((h * p.Lq + i) * p.Dqk + d)) *
                 static_cast<T>(c.in.k.get_offset(j * p.Dqk + d));
        s[static_cast<size_t>(j)] = dot * static_cast<T>(p.effective_scale());
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      for (auto& x : s) sum += (x = std::exp(x - m));
      o.lse->set_offset(h * p.Lq + i, static_cast<double>(m + std::log(sum)));
      for (int64_t d = 0; d < p.Dv; ++d) {
        T acc = 0;
        for (int64_t j = 0; j < p.Lk; ++j)
          acc += s[static_cast<size_t>(j)] * static_cast<T>(c.in.v.get_offset(j * p.Dv + d));
        o.out.put(0, h, i, d, static_cast<double>(acc / sum));
      }
    }
  return o;
}

TEST(WorkingPrecision, Fp64ProblemComputedInFp32IsNamed) {
  const prop::Case c = make_case();
  const ExpectedAttention ref = expected_attention(c.p, c.in);
  const Outputs wide = attention_in<double>(c), narrow = attention_in<float>(c);
  EXPECT_TRUE(judge(c.p, ref, wide).pass);  // the same loops in double: inside the fp64 bound
  const Verdict v = judge(c.p, ref, narrow);
  ASSERT_FALSE(v.pass);
  ASSERT_TRUE(v.tensors[0].accuracy.effective_bits);
  EXPECT_LT(*v.tensors[0].accuracy.effective_bits, 30.0);  // fp32 work: well short of fp64's ~50
  const diagnose::Diagnosis d = diagnose::diagnose(c, ref, narrow, {});
  std::string why;
  for (const std::string& l : d.text()) why += l + "\n";
  EXPECT_EQ(d.top(), "working-precision") << why;
  EXPECT_NE(why.find("effective bits"), std::string::npos) << why;
}

}  // namespace
}  // namespace attncheck
