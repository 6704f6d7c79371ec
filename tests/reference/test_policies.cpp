// Masking semantics: every fill x fully-masked policy combination (out, weights and lse), finite fills that take
// part in the softmax, NaN-poisoned masked keys and values that must never leak, and the equivalence of the two
// ways of masking (-inf before the softmax == zero after it and renormalise).
#include "tiny.hpp"

using namespace attncheck;
using namespace tiny;

namespace {
// B=2, Lk=3: batch 0 fully visible, batch 1 has key_lengths 0 (every key masked).
struct PolicyCase {
  MaskFill fill;
  FullyMasked policy;
};

class Policies : public ::testing::TestWithParam<PolicyCase> {};

std::string policy_name(const ::testing::TestParamInfo<PolicyCase>& i) {
  return std::string(to_string(i.param.fill)) + "_" + to_string(i.param.policy);
}
}  // namespace

TEST_P(Policies, FullyMaskedRow) {
  const auto [fill, policy] = GetParam();
  Problem p = scalar_problem(2, 1, 1, 1, 3);
  p.key_lengths = {3, 0};
  p.fill = fill;
  p.fully_masked = policy;
  const std::vector<double> v = {3, 6, 12};
  const ReferenceResult r = reference_attention(p, scalar_inputs(p, {1, 2, 1}, v));
  // The visible row is the same whatever the policy: weights 1/4, 2/4, 1/4, out 0.75 + 3 + 3 = 6.75.
  expect_row(r, p, 0, {0.25, 0.5, 0.25}, v, "visible row");
  EXPECT_NEAR(r.lse[0], std::log(4.0), 1e-15);
  // The fully masked row: lse = log(sum_j exp(fill)) = -inf, or -1e9 + log(3) with the finite fill.
  if (fill == MaskFill::neg_inf) {
    EXPECT_EQ(r.lse[1], -INFINITY);
  } else {
    EXPECT_DOUBLE_EQ(r.lse[1], -1e9 + std::log(3.0));
  }
  // nan: weights and out NaN; zero: 0; uniform: 1/Lk each and out = mean of all values (3 + 6 + 12) / 3 = 7.
  const double want_w = policy == FullyMasked::zero ? 0.0 : 1.0 / 3, want_out = policy == FullyMasked::zero ? 0.0 : 7.0;
  for (int j = 0; j < 3; ++j) {
    const double w = r.weights[static_cast<size_t>(3 + j)];
    if (policy == FullyMasked::nan) {
      EXPECT_TRUE(std::isnan(w)) << j;
    } else {
      EXPECT_DOUBLE_EQ(w, want_w) << j;
    }
  }
  if (policy == FullyMasked::nan) {
    EXPECT_TRUE(std::isnan(r.out[1]));
  } else {
    EXPECT_DOUBLE_EQ(r.out[1], want_out);
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, Policies,
                         ::testing::Values(PolicyCase{MaskFill::neg_inf, FullyMasked::nan},
                                           PolicyCase{MaskFill::neg_inf, FullyMasked::zero},
                                           PolicyCase{MaskFill::neg_inf, FullyMasked::uniform},
                                           PolicyCase{MaskFill::finite, FullyMasked::nan},
                                           PolicyCase{MaskFill::finite, FullyMasked::zero},
                                           PolicyCase{MaskFill::finite, FullyMasked::uniform}),
                         policy_name);

TEST(Policies, MinusInfinityBiasOnEveryVisibleKeyIsFullyMasked) {
  // PyTorch's float attn_mask of -inf everywhere: no key has a finite score, so the policy decides.
  Problem p = scalar_problem(1, 1, 1, 1, 2);
  p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 1};
  Inputs in = scalar_inputs(p, {1, 2}, {1, 2});
  in.bias = Tensor(DType::f32, {1, 1, 1, 1});
  in.bias->fill(-INFINITY);
  for (FullyMasked policy : {FullyMasked::zero, FullyMasked::nan}) {
    p.fully_masked = policy;
    const ReferenceResult r = reference_attention(p, in);
    EXPECT_EQ(r.lse[0], -INFINITY);
    if (policy == FullyMasked::zero) {
      EXPECT_EQ(r.out[0], 0.0);
    } else {
      EXPECT_TRUE(std::isnan(r.out[0]));
    }
  }
}

TEST(Policies, FiniteFillMinusOneBillionEqualsMinusInfinityOnPartialRows) {
  // exp(-1e9 - max) underflows to exactly 0, so the Annotated Transformer's fill changes nothing on rows that
  // keep at least one key: same bits for weights, out and lse.
  Problem p = scalar_problem(1, 2, 1, 4, 4);
  p.causal = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  fill_random(in.q, 1);
  fill_random(in.k, 2);
  fill_random(in.v, 3);
  const ReferenceResult inf = reference_attention(p, in);
  p.fill = MaskFill::finite;
  const ReferenceResult fin = reference_attention(p, in);
  EXPECT_TRUE(same_bits(inf.out, fin.out));
  EXPECT_TRUE(same_bits(inf.weights, fin.weights));
  EXPECT_TRUE(same_bits(inf.lse, fin.lse));
}

TEST(Policies, FiniteFillTakesPartInTheSoftmax) {
  // A masked score becomes the fill and competes like any score: fill log(4) against scores log(1), log(3).
  Problem p = scalar_problem(1, 1, 1, 1, 3);
  p.key_lengths = {2};  // key 2 masked
  p.fill = MaskFill::finite;
  p.fill_value = std::log(4.0);
  const std::vector<double> v = {8, 16, 32};
  const ReferenceResult r = reference_attention(p, scalar_inputs(p, {1, 3, 100}, v));
  expect_row(r, p, 0, {1.0 / 8, 3.0 / 8, 4.0 / 8}, v, "finite fill");  // out 1 + 6 + 16 = 23
  EXPECT_NEAR(r.lse[0], std::log(8.0), 1e-15);
}

namespace {
void poison(Inputs& in, int64_t b, int64_t j) {
  for (int64_t d = 0; d < in.k.shape[3]; ++d) in.k.put(b, 0, j, d, std::nan(""));
  for (int64_t d = 0; d < in.v.shape[3]; ++d) in.v.put(b, 0, j, d, std::nan(""));
}

void expect_no_leak(const Problem& p, const Inputs& clean_in, const Inputs& poisoned) {
  const ReferenceResult clean = reference_attention(p, clean_in);
  const ReferenceResult r = reference_attention(p, poisoned);
  EXPECT_TRUE(same_bits(clean.out, r.out));
  EXPECT_TRUE(same_bits(clean.lse, r.lse));
  EXPECT_TRUE(same_bits(clean.weights, r.weights));
  for (double x : r.out) EXPECT_TRUE(std::isfinite(x));
}
}  // namespace

TEST(Policies, NaNPoisonedMaskedKeysAndValuesNeverLeak) {
  // Keys and values no query may see are NaN; the outputs must equal, bit for bit, a run with clean values.
  Problem p = scalar_problem(2, 2, 1, 3, 6);
  p.Dqk = 3, p.Dv = 2;
  p.scale.reset();
  p.causal = true;
  p.alignment = Alignment::bottom_right;
  p.key_lengths = {5, 4};  // padding: key 5 of batch 0, keys 4 and 5 of batch 1
  p.window_left = 1;       // batch 0 diagonals 2, 3, 4 keep keys 1..2, 2..3, 3..4: key 0 only hidden by the window
  p.mask_shape = std::array<int64_t, 4>{1, 1, 1, 6};
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), Tensor(DType::u8, {1, 1, 1, 6}), {}, {}, {}, {}};
  fill_random(in.q, 4);
  fill_random(in.k, 5);
  fill_random(in.v, 6);
  in.mask->fill(1);
  in.mask->put(0, 0, 0, 1, 0);  // key 1 hidden by the boolean mask
  Inputs poisoned = in;
  for (int64_t b : {0, 1}) {
    poison(poisoned, b, 1);
    poison(poisoned, b, 5);
  }
  poison(poisoned, 1, 4);
  poison(poisoned, 0, 0);
  expect_no_leak(p, in, poisoned);

  // Causal only: top-left Lq=2, Lk=4, keys 2 and 3 are above every row's diagonal.
  Problem pc = scalar_problem(1, 1, 1, 2, 4);
  pc.causal = true;
  Inputs ic = scalar_inputs(pc, {1, 2, 3, 4}, {1, 2, 3, 4});
  Inputs pcn = ic;
  poison(pcn, 0, 2);
  poison(pcn, 0, 3);
  expect_no_leak(pc, ic, pcn);
}

TEST(Policies, ZeroWeightContributesNothingEvenWithNaNValue) {
  // A visible key whose weight underflows to exactly 0 does not turn the output into NaN (0 * NaN is skipped).
  Problem p = scalar_problem(1, 1, 1, 1, 2);
  Inputs in = scalar_inputs(p, {1, 1}, {5, 0});
  in.k.put(0, 0, 1, 0, -1e6);  // weight exp(-1e6) == 0 in double
  in.v.put(0, 0, 1, 0, std::nan(""));
  const ReferenceResult r = reference_attention(p, in);
  EXPECT_EQ(r.weights[1], 0.0);
  EXPECT_EQ(r.out[0], 5.0);
}

TEST(Policies, MaskingBeforeEqualsRenormalisingAfter) {
  // Masked with -inf before the softmax == unmasked softmax, masked weights zeroed, each row renormalised.
  // The expected side is computed here from the unmasked reference weights, then multiplied with V in the test.
  Problem p;
  p.dtype = DType::f64;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 5, p.Lk = 7, p.Dqk = 4, p.Dv = 3;
  p.want_weights = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  fill_random(in.q, 7);
  fill_random(in.k, 8);
  fill_random(in.v, 9);
  const ReferenceResult unmasked = reference_attention(p, in);

  Tensor mask(DType::u8, {2, 4, 5, 7});
  std::mt19937_64 rng(10);
  for (int64_t n = 0; n < mask.numel(); ++n) mask.set_offset(n, (rng() % 3) != 0);
  for (int64_t h = 0; h < 4; ++h) mask.put(0, h, 0, 0, 1);  // make sure no row is empty
  const std::vector<int64_t> lens = {7, 5};
  Problem pm = p;
  pm.mask_shape = std::array<int64_t, 4>{2, 4, 5, 7};
  pm.key_lengths = lens;
  Inputs im = in;
  im.mask = mask;
  const ReferenceResult masked = reference_attention(pm, im);

  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 5; ++i) {
        const int64_t row = (b * 4 + h) * 5 + i;
        std::vector<double> w(7);
        double sum = 0;
        for (int64_t j = 0; j < 7; ++j) {
          const bool vis = mask.at(b, h, i, j) != 0 && j < lens[static_cast<size_t>(b)];
          w[static_cast<size_t>(j)] = vis ? unmasked.weights[static_cast<size_t>(row * 7 + j)] : 0.0;
          sum += w[static_cast<size_t>(j)];
        }
        ASSERT_GT(sum, 0.0);
        for (int64_t j = 0; j < 7; ++j) {
          w[static_cast<size_t>(j)] /= sum;
          EXPECT_NEAR(masked.weights[static_cast<size_t>(row * 7 + j)], w[static_cast<size_t>(j)], 1e-15);
        }
        for (int64_t d = 0; d < 3; ++d) {
          double o = 0;
          for (int64_t j = 0; j < 7; ++j) o += w[static_cast<size_t>(j)] * in.v.at(b, h / 2, j, d);
          EXPECT_NEAR(masked.out[static_cast<size_t>(row * 3 + d)], o, 1e-14) << "b" << b << " h" << h << " i" << i;
        }
      }
}
