// Dropout: a fixed keep-mask with rescale 1/(1-p) (weights and lse stay pre-dropout), dropped NaN values do not
// leak, and the Philox4x32-10 generator against Random123's published known-answer vectors.
#include "tiny.hpp"

using namespace attncheck;
using namespace tiny;

namespace {
Inputs with_keep(const Problem& p, Inputs in, const std::vector<int>& keep) {
  in.keep = Tensor(DType::u8, {p.B, p.Hq, p.Lq, p.Lk});
  for (size_t n = 0; n < keep.size(); ++n) in.keep->set_offset(static_cast<int64_t>(n), keep[n]);
  return in;
}
}  // namespace

TEST(Dropout, FixedKeepMaskRescalesKeptWeights) {
  // Four equal scores: weights 1/4 each. p = 0.5 keeps keys 0 and 2, each scaled by 2: out = (v0 + v2) / 2.
  Problem p = scalar_problem(1, 1, 1, 1, 4);
  p.dropout_p = 0.5;
  const ReferenceResult r =
      reference_attention(p, with_keep(p, scalar_inputs(p, {1, 1, 1, 1}, {6, 100, 10, 100}), {1, 0, 1, 0}));
  EXPECT_DOUBLE_EQ(r.out[0], 8.0);
  for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(r.weights[static_cast<size_t>(j)], 0.25) << "weights are pre-dropout";
  EXPECT_DOUBLE_EQ(r.lse[0], std::log(4.0)) << "lse is pre-dropout";
}

TEST(Dropout, HighProbabilityKeepsOne) {
  // p = 0.75, weights (1, 2, 3, 2)/8, only key 3 kept: out = 4 * (2/8) * v3 = v3.
  Problem p = scalar_problem(1, 1, 1, 2, 4);
  p.dropout_p = 0.75;
  const ReferenceResult r =
      reference_attention(p, with_keep(p, scalar_inputs(p, {1, 2, 3, 2}, {1, 1, 1, -7}), {0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_NEAR(r.out[0], -7.0, 1e-13);
  EXPECT_NEAR(r.out[1], 4.0 * (1 + 2 + 3 - 14) / 8.0, 1e-13) << "all kept: 4x the plain output";
}

TEST(Dropout, DroppedNaNValueDoesNotLeak) {
  Problem p = scalar_problem(1, 1, 1, 1, 2);
  p.dropout_p = 0.5;
  Inputs in = with_keep(p, scalar_inputs(p, {1, 1}, {3, 0}), {1, 0});
  in.v.put(0, 0, 1, 0, std::nan(""));
  EXPECT_DOUBLE_EQ(reference_attention(p, in).out[0], 3.0);
}

TEST(Dropout, Philox4x32_10KnownAnswers) {
  // Random123 tests/kat_vectors, the three "philox4x32 10" lines (counter[4] key[2] -> output[4]).
  using A4 = std::array<uint32_t, 4>;
  using A2 = std::array<uint32_t, 2>;
  EXPECT_EQ(philox4x32_10(A4{0, 0, 0, 0}, A2{0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10(A4{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, A2{0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10(A4{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, A2{0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Dropout, UniformIsPhiloxOfTheElementIndex) {
  // The documented mapping: counter (i, j, h, b), key (seed low, seed high), first word / 2^32.
  const uint64_t seed = 0x0123456789abcdefULL;
  const auto r = philox4x32_10({5, 7, 3, 2}, {0x89abcdefu, 0x01234567u});
  EXPECT_EQ(dropout_uniform(seed, 2, 3, 5, 7), r[0] / 4294967296.0);
  EXPECT_GE(dropout_uniform(seed, 0, 0, 0, 0), 0.0);
  EXPECT_LT(dropout_uniform(seed, 0, 0, 0, 0), 1.0);
}

TEST(Dropout, KeepMaskFollowsTheGenerator) {
  Problem p;
  p.B = 2, p.Hq = 2, p.Lq = 64, p.Lk = 128;
  p.dropout_p = 0.3;
  p.dropout_seed = 7;
  const Tensor keep = make_keep_mask(p);
  int64_t kept = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const bool k = keep.at(b, h, i, j) != 0;
          ASSERT_EQ(k, dropout_uniform(7, b, h, i, j) >= 0.3) << b << h << i << j;
          kept += k;
        }
  // 32768 Bernoulli(0.7) draws: mean 22937.6, sd 83; 6 sd either side.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * 32768, 6 * 83.0);
  p.dropout_seed = 8;
  EXPECT_NE(make_keep_mask(p).bytes, keep.bytes) << "another seed gives another mask";
  p.dropout_seed = 7;
  EXPECT_EQ(make_keep_mask(p).bytes, keep.bytes) << "the same seed gives the same mask";
}
