// The value generators: pinned bits (a seed must name the same inputs on every machine), independence of streams
// and layouts, and that each hostile distribution really has the property it is named for, checked on the
// reference's outputs (ties, uniform rows, one-hot rows, exact constant outputs, poison that never leaks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "attncheck/generate.hpp"
#include "attncheck/error_scales.hpp"
#include "attncheck/suite.hpp"

namespace attncheck {
namespace {

using gen::Distribution;

Problem small(DType dt = DType::f32) {
  Problem p;
  p.B = 2;
  p.Hq = 4;
  p.Hkv = 2;
  p.Lq = 9;
  p.Lk = 11;
  p.Dqk = 8;
  p.Dv = 6;
  p.dtype = dt;
  p.want_weights = true;
  return p;
}

TEST(Rng, SplitMix64OutputIsPinned) {
  // Published SplitMix64 outputs for seed 0 (the same on every platform, no libm involved).
  gen::Rng r(0);
  EXPECT_EQ(r.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(r.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(r.next(), 0x06c45d188009454full);
}

TEST(Rng, NormalHasUnitMoments) {
  gen::Rng r(7);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = r.normal();
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
}

TEST(Generate, SameSeedSameBitsOtherSeedOtherBits) {
  const Problem p = small(DType::f16);
  const Inputs a = gen::generate_inputs(p, Distribution::normal, 5),
               b = gen::generate_inputs(p, Distribution::normal, 5),
               c = gen::generate_inputs(p, Distribution::normal, 6);
  EXPECT_EQ(a.q.bytes, b.q.bytes);
  EXPECT_EQ(a.v.bytes, b.v.bytes);
  EXPECT_NE(a.q.bytes, c.q.bytes);
}

TEST(Generate, LayoutAndMasksDoNotChangeTheValues) {
  Problem p = small();
  const Inputs a = gen::generate_inputs(p, Distribution::normal, 3);
  p.layout = Layout::BSHD;
  p.mask_shape = std::array<int64_t, 4>{2, 1, 9, 11};
  const Inputs b = gen::generate_inputs(p, Distribution::normal, 3);
  EXPECT_EQ(a.q.to_double(), b.q.to_double());  // logical order equal, storage differs
  EXPECT_NE(a.q.bytes, b.q.bytes);
  EXPECT_EQ(a.k.to_double(), b.k.to_double());
  ASSERT_TRUE(b.mask.has_value());
}

TEST(Generate, ValuesAreSigned) {
  const Inputs in = gen::generate_inputs(small(), Distribution::uniform, 1);
  int neg = 0, pos = 0;
  for (double x : in.q.to_double()) (x < 0 ? neg : pos)++;
  EXPECT_GT(neg, 50);
  EXPECT_GT(pos, 50);
}

TEST(Generate, AllEqualKeysGiveUniformWeights) {
  const Problem p = small();
  const ExpectedAttention r = expected_attention(p, gen::generate_inputs(p, Distribution::all_equal, 2));
  for (double w : r.weights) EXPECT_NEAR(w, 1.0 / 11, 1e-15);
}

TEST(Generate, TiedMaximaHaveSeveralExactlyEqualTopWeights) {
  const Problem p = small();
  const ExpectedAttention r = expected_attention(p, gen::generate_inputs(p, Distribution::tied_maxima, 2));
  for (int64_t row = 0; row < p.B * p.Hq * p.Lq; ++row) {
    const double* w = &r.weights[static_cast<size_t>(row * p.Lk)];
    const double top = *std::max_element(w, w + p.Lk);
    EXPECT_GE(std::count(w, w + p.Lk, top), 3) << "row " << row;  // 11 keys over 3 vectors: >= 3 ties
  }
}

TEST(Generate, OneHotRowsAreOneHotInFp32) {
  Problem p = small();
  p.Lk = 8;  // <= Dqk: one matching key per query
  const ExpectedAttention r = expected_attention(p, gen::generate_inputs(p, Distribution::one_hot, 2));
  for (int64_t row = 0; row < p.B * p.Hq * p.Lq; ++row) {
    const double* w = &r.weights[static_cast<size_t>(row * p.Lk)];
    EXPECT_NEAR(*std::max_element(w, w + p.Lk), 1.0, 1e-15);
  }
}

TEST(Generate, LargeLogitsReachAbout1e4) {
  const Problem p = small(DType::f16);
  const ExpectedAttention r = expected_attention(p, gen::generate_inputs(p, Distribution::large_logits, 2));
  const double m = *std::max_element(r.score_mag.begin(), r.score_mag.end());
  EXPECT_GT(m, 5e3);
  EXPECT_LT(m, 1e6);
}

TEST(Generate, ConstantVGivesExactlyConstantOutput) {
  Problem p = small(DType::bf16);
  p.key_lengths = {11, 3};
  const ExpectedAttention r = expected_attention(p, gen::generate_inputs(p, Distribution::constant_v, 2));
  for (double o : r.out) EXPECT_NEAR(o, 0.75, 1e-15);
}

TEST(Generate, PoisonSitsOnlyInInvisibleKeysAndNeverLeaks) {
  Problem p = small(DType::f16);
  p.key_lengths = {11, 4};
  const Inputs in = gen::generate_inputs(p, Distribution::poison_masked, 2);
  int poisoned = 0;
  for (int64_t j = 0; j < p.Lk; ++j) {
    const bool bad = std::isnan(in.k.at(1, 0, j, 0)) || std::isnan(in.v.at(1, 0, j, 0));
    EXPECT_EQ(bad, j >= 4) << "key " << j;
    poisoned += bad;
    EXPECT_FALSE(std::isnan(in.k.at(0, 0, j, 0)));  // batch 0 has every key visible
  }
  EXPECT_EQ(poisoned, 7);
  const ExpectedAttention r = expected_attention(p, in);
  for (double o : r.out) EXPECT_TRUE(std::isfinite(o));
  p.fill = MaskFill::finite;
  EXPECT_THROW(gen::generate_inputs(p, Distribution::poison_masked, 2), std::invalid_argument);
}

TEST(Generate, TinyValuesReachFp16Subnormals) {
  const Inputs in = gen::generate_inputs(small(DType::f16), Distribution::tiny, 2);
  int subnormal = 0;
  for (double x : in.v.to_double()) subnormal += x != 0 && std::abs(x) < 0x1.0p-14;
  EXPECT_GT(subnormal, 10);
}

TEST(Suite, CheckedInSpecParsesWithEnoughCasesAndEveryDistribution) {
  const SuiteSpec s = read_suite(std::string(GOLDEN_DIR) + "/suite.json");
  EXPECT_GE(s.cases.size(), 60u);
  std::set<Distribution> seen;
  std::set<DType> dtypes;
  for (const auto& c : s.cases) {
    seen.insert(c.distribution);
    dtypes.insert(c.problem.dtype);
    EXPECT_LT(c.problem.Lk, 4096) << c.name << ": large cases belong in suite-large.json";
  }
  EXPECT_EQ(seen.size(), gen::all_distributions().size());
  EXPECT_EQ(dtypes, (std::set<DType>{DType::f64, DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2}));
}

}  // namespace
}  // namespace attncheck
