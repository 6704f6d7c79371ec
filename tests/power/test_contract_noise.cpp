// Correct low-precision computations at their declared precision contract must pass on every value distribution
// of the property suite, including the correlated ones (copies of one key, constant V, raw q.k beyond fp16) where
// rounding errors repeat instead of cancelling. The candidate is the exact computation with only the declared
// roundings applied: Q, K rounded to the qk format, V to the pv format, P rounded before P.V.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "case.hpp"

namespace attncheck {
namespace {

// Round to a contract format (tf32: 10 mantissa bits, nearest even; fp32 and wider: as stored).
double round_fmt(Precision f, double x) {
  switch (f) {
    case Precision::fp16: return round_to(DType::f16, x);
    case Precision::bf16: return round_to(DType::bf16, x);
    case Precision::fp8_e4m3: return round_to(DType::e4m3, x);
    case Precision::fp8_e5m2: return round_to(DType::e5m2, x);
    case Precision::tf32: {
      if (!std::isfinite(x) || x == 0) return x;
      int e;
      std::frexp(x, &e);
      const double q = std::ldexp(1.0, e - 11);
      return std::nearbyint(x / q) * q;
    }
    default: return x;
  }
}

Tensor rounded(const Tensor& t, Precision fmt) {
  Tensor r = t;
  for (int64_t n = 0; n < t.numel(); ++n) r.set_offset(n, round_fmt(fmt, t.get_offset(n)));
  return r;
}

// The P rounding a contract with p=rounded admits: the unnormalised P (max 1) or the normalised weights.
enum class PRound { none, unnormalised, normalised };

// The exact attention of the rounded operands, P rounded as asked, outputs rounded to their dtypes.
Outputs emulate(const Problem& p, const Inputs& in, const PrecisionContract& c, PRound pr) {
  Inputs x = in;
  x.q = rounded(in.q, c.qk_operands);
  x.k = rounded(in.k, c.qk_operands);
  x.v = rounded(in.v, c.pv_operands);
  Problem pw = p;
  pw.want_weights = true;
  const ExpectedAttention r = expected_attention(pw, x);
  Outputs o;
  o.out = Tensor(p.out_dtype(), {p.B, p.Hq, p.Lq, p.Dv});
  const int64_t group = p.Hq / p.Hkv;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const size_t row = static_cast<size_t>((b * p.Hq + h) * p.Lq + i);
        double wmax = 0;
        for (int64_t j = 0; j < p.Lk; ++j) wmax = std::max(wmax, r.weights[row * size_t(p.Lk) + size_t(j)]);
        for (int64_t d = 0; d < p.Dv; ++d) {
          double o_d = r.out[row * size_t(p.Dv) + size_t(d)];
          if (pr != PRound::none && wmax > 0 && std::isfinite(r.lse[row])) {  // not a fully masked row
            double acc = 0, l = 0;
            for (int64_t j = 0; j < p.Lk; ++j) {
              const double w = r.weights[row * size_t(p.Lk) + size_t(j)];
              if (w == 0) continue;  // masked (its V slot may hold poison)
              const double pj = pr == PRound::unnormalised ? w / wmax : w;
              l += pj;
              acc += round_fmt(c.pv_operands, pj) * p.descale_v *
                     x.v.at(b, h / group, j, d);  // fp8: value = descale * code
            }
            o_d = acc / l;
          }
          o.out.put(b, h, i, d, o_d);
        }
      }
  o.lse = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq});
  for (size_t n = 0; n < r.lse.size(); ++n) o.lse->set_offset(int64_t(n), r.lse[n]);
  if (p.want_weights) {
    o.weights = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq, p.Lk});
    for (size_t n = 0; n < r.weights.size(); ++n) o.weights->set_offset(int64_t(n), r.weights[n]);
  }
  return o;
}

struct Setting {
  DType dtype;
  const char* contract;
  PRound pr;
};

TEST(ContractNoise, DeclaredRoundingsPassOnEveryValueDistribution) {
  const Setting settings[] = {
      {DType::f32, "qk=bf16", PRound::none},
      {DType::f32, "qk=fp16", PRound::none},
      {DType::f32, "qk=tf32,pv=tf32", PRound::none},
      {DType::f32, "pv=bf16,p=rounded", PRound::unnormalised},
      {DType::f32, "pv=bf16,p=rounded", PRound::normalised},
      {DType::f16, "", PRound::unnormalised},  // fp16 normalised weights: not p=rounded (docs, "Subnormal P")
      {DType::bf16, "", PRound::unnormalised},
      {DType::bf16, "", PRound::normalised},
      {DType::e4m3, "", PRound::unnormalised},  // fp8: P rounded to the input format, subnormal below 2^-6
      {DType::e5m2, "", PRound::unnormalised},
  };
  std::map<std::string, double> worst;
  std::map<std::string, std::string> where;
  for (const Setting& s : settings) {
    for (int k = 0; k < 300; ++k) {
      prop::SeededChooser chooser(0xC0C0 + static_cast<uint64_t>(k));
      prop::CaseSpec spec = prop::draw_spec(chooser);
      spec.dtype = s.dtype;
      spec.dropout_p = 0;
      spec.values = static_cast<prop::Values>(k % static_cast<int>(prop::Values::count));
      const prop::Values vals = spec.values;  // fp8 codes of these overflow or vanish (as the fp8 properties' prep)
      if (is_fp8(s.dtype) && (vals == prop::Values::beyond_fp16 || vals == prop::Values::mixed ||
                              vals == prop::Values::large_logits || vals == prop::Values::tiny))
        continue;
      prop::normalise(spec);
      prop::apply_budget(spec, 40000);
      prop::Case c;
      try {
        c = prop::build_case(spec);
      } catch (const std::exception&) {
        continue;
      }
      if (c.p.past_len > 0 || c.p.scores_out != ScoresOut::none || !c.p.sinks.empty()) continue;
      ToleranceModel m;
      m.contract = contract_from_string(s.contract, s.dtype);
      const ExpectedAttention r = expected_attention(c.p, c.in);
      const Outputs o = emulate(c.p, c.in, *m.contract, s.pr);
      const Verdict v = judge(c.p, r, o, m);
      for (const TensorVerdict& t : v.tensors) {
        const double ratio = t.tolerance > 0 ? std::abs(t.actual - t.expected) / t.tolerance : 0;
        const std::string key = std::string(to_string(s.dtype)) + " " + s.contract + " p" + std::to_string(int(s.pr)) +
                                " " + prop::to_string(spec.values) + " " + t.tensor;
        if (!t.pass || ratio > worst[key]) {
          worst[key] = t.pass ? ratio : std::max(ratio, 1.0000001);
          where[key] = t.describe() + " [" + t.dominant + "] " + c.name();
        }
      }
    }
  }
  for (const auto& [key, ratio] : worst) {
    std::printf("%-60s %.3f  %s\n", key.c_str(), ratio, ratio > 0.9 ? where[key].c_str() : "");
    EXPECT_LE(ratio, 1.0) << key << ": " << where[key];
  }
}

// The subnormal part of fp16 P rounding counts keys whose unnormalised P is subnormal (s_j more than 9.7 below the
// max), not every weight below 2^-14: a flat row of 8192 keys has none, so detection at long context is kept.
TEST(ContractNoise, SubnormalPTermCountsOnlyKeysFarBelowTheMax) {
  Problem p;
  p.Lq = 2;
  p.Lk = 8192;
  p.Dqk = 16;
  p.Dv = 4;
  p.dtype = DType::f16;
  Inputs in{Tensor(DType::f16, {1, 1, p.Lq, p.Dqk}),
            Tensor(DType::f16, {1, 1, p.Lk, p.Dqk}),
            Tensor(DType::f16, {1, 1, p.Lk, p.Dv}),
            {},
            {},
            {},
            {},
            {}};
  prop::SeededChooser r(5);
  for (Tensor* t : {&in.q, &in.k, &in.v})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, round_to(DType::f16, prop::normal(r)));
  ExpectedAttention ref = expected_attention(p, in);
  for (double x : ref.out_sub) EXPECT_EQ(x, 0.0);  // every weight is below 2^-14, no P is
  // One key 20 below the rest (P = e^-20, subnormal in fp16) with a large value: it counts, at |v| / l.
  for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(0, 0, 7, d, 0.0);
  p.bias_shape = std::array<int64_t, 4>{1, 1, 1, p.Lk};
  in.bias = Tensor(p.bias_dtype, {1, 1, 1, p.Lk});
  in.bias->set_offset(7, -30.0);
  in.v.put(0, 0, 7, 0, 1000.0);
  ref = expected_attention(p, in);
  EXPECT_GT(ref.out_sub[0], 100.0 * ref.out_sub[1]);  // column 0 holds the 1000, column 1 an N(0,1) value
  EXPECT_GT(ref.out_sub[1], 0.0);
}

// Keys of real models share a large common component; then the rounding of q (one vector, shared by every key)
// moves every score alike and lse by all of it, however many keys there are.
TEST(ContractNoise, RoundedQueryOnKeysWithACommonOffsetPasses) {
  for (int64_t lk : {64, 1024, 8192}) {
    Problem p;
    p.B = p.Hq = p.Hkv = 1;
    p.Lq = 4;
    p.Lk = lk;
    p.Dqk = 64;
    p.Dv = 16;
    p.dtype = DType::f32;
    p.want_lse = true;
    Inputs in{Tensor(DType::f32, {1, 1, p.Lq, p.Dqk}),
              Tensor(DType::f32, {1, 1, lk, p.Dqk}),
              Tensor(DType::f32, {1, 1, lk, p.Dv}),
              {},
              {},
              {},
              {},
              {}};
    prop::SeededChooser r(lk);
    std::vector<double> mu(size_t(p.Dqk));
    for (double& x : mu) x = 2.0 * prop::normal(r);
    for (int64_t n = 0; n < in.q.numel(); ++n) in.q.set_offset(n, prop::normal(r));
    for (int64_t n = 0; n < in.k.numel(); ++n) in.k.set_offset(n, mu[size_t(n % p.Dqk)] + 0.3 * prop::normal(r));
    for (int64_t n = 0; n < in.v.numel(); ++n) in.v.set_offset(n, prop::normal(r));
    for (const char* c : {"qk=bf16", "qk=fp16"}) {
      ToleranceModel m;
      m.contract = contract_from_string(c, p.dtype);
      const ExpectedAttention ref = expected_attention(p, in);
      const Verdict v = judge(p, ref, emulate(p, in, *m.contract, PRound::none), m);
      EXPECT_TRUE(v.pass) << "Lk " << lk << " " << c << ": " << v.worst().describe();
    }
  }
}

}  // namespace
}  // namespace attncheck
