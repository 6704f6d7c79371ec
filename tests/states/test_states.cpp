// The state model (docs/states.md) against independent truths: the whole attention of the looped reference, merges
// worked by hand, the algebra (empty identity, order and grouping), the conventions' round trip, and the judge
// against an fp32 merge written here (not the code under test) and against broken variants of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attncheck/reference.hpp"
#include "attncheck/rng.hpp"
#include "attncheck/state.hpp"

namespace attncheck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t(DType::f32, std::move(shape));
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_offset(i, rng.normal());
  return t;
}

// Partition the keys of a causal GQA problem into ranges of lengths 0, 1, 4, 0, 8: the merge equals the looped
// reference's whole attention (out and lse), for every partition tried.
TEST(States, MergeOfAnyPartitionEqualsTheWholeAttention) {
  Problem p;
  p.B = 2, p.Hq = 4, p.Hkv = 2, p.Lq = 3, p.Lk = 13, p.Dqk = p.Dv = 8, p.scale = 0.37, p.causal = true;
  p.alignment = Alignment::bottom_right, p.want_lse = true;
  Inputs in;
  in.q = random_tensor({2, 4, 3, 8}, 1), in.k = random_tensor({2, 2, 13, 8}, 2), in.v = random_tensor({2, 2, 13, 8}, 3);
  const ReferenceResult whole = reference_attention(p, in);
  const PartialSpec s{2, 4, 2, 3, 13, 8, 0.37, true};
  for (const std::vector<int64_t>& cuts :
       {std::vector<int64_t>{0, 0, 1, 5, 5, 13}, {0, 13}, {0, 6, 13}, {0, 12, 13, 13}}) {
    std::vector<State> parts;
    for (size_t c = 0; c + 1 < cuts.size(); ++c)
      parts.push_back(partial_state(s, in.q, in.k, in.v, {cuts[c]}, {cuts[c + 1]}));
    const State m = merge_states(parts);
    for (int64_t r = 0; r < m.rows(); ++r) {
      EXPECT_NEAR(m.lse(r), whole.lse[r], 1e-12) << "row " << r;
      for (int64_t d = 0; d < 8; ++d)
        EXPECT_NEAR(m.out(r, d), whole.out[r * 8 + d], 1e-12) << "row " << r << " d " << d;
    }
  }
}

// Chunked prefill: a chunk of 4 queries over a cache of 9 past keys plus itself equals the past state (non-causal,
// every past key visible) merged with the chunk's own causal state; a chunk with no past (vLLM #39148) merges an
// empty past state into exactly the chunk's own state.
TEST(States, ChunkedPrefillIsPastMergedWithTheChunk) {
  const PartialSpec full{1, 2, 1, 4, 13, 8, 0.5, true};
  Tensor q = random_tensor({1, 2, 4, 8}, 4), k = random_tensor({1, 1, 13, 8}, 5), v = random_tensor({1, 1, 13, 8}, 6);
  const State whole = partial_state(full, q, k, v, {0}, {13});
  const State past = partial_state(full, q, k, v, {0}, {9}), chunk = partial_state(full, q, k, v, {9}, {13});
  const State m = merge_states({past, chunk});
  for (int64_t r = 0; r < m.rows(); ++r) EXPECT_NEAR(m.lse(r), whole.lse(r), 1e-12);
  const State none = partial_state(full, q, k, v, {0}, {0});
  for (int64_t r = 0; r < none.rows(); ++r) EXPECT_TRUE(none.empty(r));
  const State alone = merge_states({none, chunk});
  EXPECT_EQ(alone.m, chunk.m);
  EXPECT_EQ(alone.l, chunk.l);
  EXPECT_EQ(alone.u, chunk.u);
}

// Worked by hand: A = (O 1, lse 0), B = (O 3, lse ln 3): weights 1/4 and 3/4, O = 2.5, lse = ln 4.
TEST(States, TwoStatesWorkedByHand) {
  State a = empty_state(1, 1, 1, 1), b = empty_state(1, 1, 1, 1);
  a.m = {0.0}, a.l = {1.0}, a.u = {1.0};
  b.m = {std::log(3.0)}, b.l = {1.0}, b.u = {3.0};
  const State m = merge_states({a, b});
  EXPECT_NEAR(m.out(0, 0), 2.5, 1e-15);
  EXPECT_NEAR(m.lse(0), std::log(4.0), 1e-15);
  const State e = merge_states({empty_state(1, 1, 1, 1), empty_state(1, 1, 1, 1)});
  EXPECT_TRUE(e.empty(0));
  EXPECT_EQ(e.lse(0), -kInf);
  EXPECT_EQ(e.out(0, 0), 0.0);
}

TEST(States, MergeIsOrderFreeAndAssociative) {
  const PartialSpec s{1, 2, 2, 2, 20, 4, 0.3, false};
  Tensor q = random_tensor({1, 2, 2, 4}, 7), k = random_tensor({1, 2, 20, 4}, 8), v = random_tensor({1, 2, 20, 4}, 9);
  const State a = partial_state(s, q, k, v, {0}, {3}), b = partial_state(s, q, k, v, {3}, {11}),
              c = partial_state(s, q, k, v, {11}, {20});
  const State x = merge_states({a, b, c}), y = merge_states({c, merge_states({b, a})});
  for (int64_t r = 0; r < x.rows(); ++r) {
    EXPECT_NEAR(x.lse(r), y.lse(r), 1e-13);
    for (int64_t d = 0; d < 4; ++d) EXPECT_NEAR(x.out(r, d), y.out(r, d), 1e-13);
  }
}

TEST(States, ConventionsRoundTripAndNameTheirErrors) {
  for (const char* t :
       {"normalised,base=e,empty=-inf,out=zero,layout=bhl", "unnormalised,base=2,empty=+inf,out=undefined,layout=blh",
        "normalised,base=2,empty=-3.4028234663852886e+38,out=zero,layout=blh",
        "normalised,base=e,empty=-inf,out=zero,layout=bhl,olayout=blhd"})
    EXPECT_EQ(parse_conventions(t).text(), t);
  EXPECT_EQ(parse_conventions("normalised,layout=blh,olayout=bhld").text(),
            "normalised,base=e,empty=-inf,out=zero,layout=blh");
  EXPECT_EQ(parse_conventions("normalised,odtype=fp8_e5m2,oscale=0.003").text(),
            "normalised,base=e,empty=-inf,out=zero,layout=bhl,odtype=fp8_e5m2,oscale=0.003");
  for (const char* t : {"normalised,odtype=fp8_e4m3", "normalised,oscale=2", "normalised,odtype=fp8_e4m3,oscale=0",
                        "unnormalised,odtype=fp8_e4m3,oscale=1", "normalised,odtype=fp16,oscale=1"})
    EXPECT_THROW(parse_conventions(t), std::invalid_argument) << t;
  try {
    parse_conventions("normalised,olayout=bshd");
    FAIL() << "olayout=bshd accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("olayout=bshd"), std::string::npos) << e.what();
  }
  try {
    parse_conventions("normalised,base=10");
    FAIL() << "base=10 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("base=10"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_conventions("normalised,empty=nan"), std::invalid_argument);
}

// Encode under every convention and decode: the states come back (O to dtype rounding, stats to fp32).
TEST(States, EncodeDecodeUnderEveryConvention) {
  const PartialSpec s{1, 3, 1, 2, 6, 4, 0.5, true};
  Tensor q = random_tensor({1, 3, 2, 4}, 10), k = random_tensor({1, 1, 6, 4}, 11), v = random_tensor({1, 1, 6, 4}, 12);
  const std::vector<State> st = {partial_state(s, q, k, v, {0}, {0}), partial_state(s, q, k, v, {0}, {6})};
  for (const char* t :
       {"normalised,base=e,empty=-inf,out=zero,layout=bhl", "normalised,base=2,empty=+inf,out=undefined,layout=blh",
        "unnormalised,base=2,empty=-1e+30,out=zero,layout=blh"}) {
    MergeProblem p{"t", 2, 1, 3, 2, 4, DType::f32, parse_conventions(t)};
    const StoredStates enc = encode_states(p, st, p.conv.empty_out == EmptyOut::undefined);
    for (int64_t n = 0; n < 2; ++n) {
      const State d = decode_state(p, enc, n);
      for (int64_t r = 0; r < d.rows(); ++r) {
        ASSERT_EQ(d.empty(r), st[n].empty(r)) << t;
        if (d.empty(r)) continue;
        EXPECT_NEAR(d.lse(r), st[n].lse(r), 1e-5 * (1 + std::fabs(st[n].lse(r)))) << t;
        for (int64_t x = 0; x < 4; ++x) EXPECT_NEAR(d.out(r, x), st[n].out(r, x), 1e-6) << t;
      }
    }
  }
}

// An fp32 merge of normalised states written from the math, with switchable mistakes, judged by judge_merge.
enum class Bug { none, no_division, nan_leak, literal_sentinel, lse_off };
void fp32_merge(const MergeProblem& p, const StoredStates& in, StoredStates& out, Bug bug) {
  const int64_t rows = p.B * p.H * p.L;
  const float sentinel = p.conv.empty_lse == EmptyLse::neg_inf   ? -INFINITY
                         : p.conv.empty_lse == EmptyLse::pos_inf ? INFINITY
                                                                 : float(p.conv.sentinel);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (p.H * p.L), h = (r / p.L) % p.H, i = r % p.L;
    float M = -INFINITY;
    std::vector<float> x(p.N);
    for (int64_t n = 0; n < p.N; ++n) {
      const int64_t ix[4] = {n, b, h, i};
      x[n] = float(in.lse->get(ix));
      const bool empty = x[n] == sentinel && bug != Bug::literal_sentinel;
      if (empty) x[n] = -INFINITY;
      M = std::max(M, x[n]);
    }
    const int64_t ox[3] = {b, h, i};
    float S = 0;
    std::vector<float> o(p.D, 0.f);
    for (int64_t n = 0; n < p.N; ++n) {
      if (x[n] == -INFINITY && bug != Bug::nan_leak) continue;
      const float w = M == -INFINITY ? 0.f : std::exp(x[n] - M);
      S += w;
      for (int64_t d = 0; d < p.D; ++d) {
        const int64_t ix[5] = {n, b, h, i, d};
        o[d] += w * float(in.o.get(ix));
      }
    }
    out.lse->set(ox, S == 0 ? sentinel : M + std::log(S) + (bug == Bug::lse_off ? 1e-2f : 0.f));
    for (int64_t d = 0; d < p.D; ++d) {
      const int64_t od[4] = {b, h, i, d};
      out.o.set(od, S == 0 ? 0.f : bug == Bug::no_division ? o[d] : o[d] / S);
    }
  }
}

TEST(States, JudgePassesAnFp32MergeAndFailsEachMistake) {
  const PartialSpec s{2, 2, 1, 3, 40, 16, 0.25, false};
  Tensor q = random_tensor({2, 2, 3, 16}, 13), k = random_tensor({2, 1, 40, 16}, 14),
         v = random_tensor({2, 1, 40, 16}, 15);
  // Split 1 is empty for batch 0 only; split 3 is empty everywhere.
  const std::vector<State> st = {partial_state(s, q, k, v, {0}, {7}), partial_state(s, q, k, v, {7, 7}, {7, 30}),
                                 partial_state(s, q, k, v, {7}, {40}), partial_state(s, q, k, v, {40}, {40})};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    MergeProblem p{"t", 4, 2, 2, 3, 16, t, parse_conventions("normalised,base=e,empty=-inf,out=undefined,layout=bhl")};
    const StoredStates in = encode_states(p, st, true);
    for (Bug bug : {Bug::none, Bug::no_division, Bug::nan_leak, Bug::lse_off}) {
      StoredStates out = make_merge_outputs(p);
      fp32_merge(p, in, out, bug);
      const MergeVerdict v = judge_merge(p, in, out);
      EXPECT_EQ(v.pass, bug == Bug::none) << to_string(t) << " bug " << int(bug) << ": " << v.worst;
      EXPECT_GT(v.checked, 0);
    }
  }
}

// A token-major O ([B,L,H,D] in memory, [T,H,D] for packed sequences) is declared by olayout=blhd and carried by the
// strides alone: the same states stored both ways decode to the same values, a merge that follows the strides passes,
// and one that writes O as if it were [B,H,L,D] (the strides ignored) fails.
TEST(States, TokenMajorOutputIsCarriedByTheStrides) {
  const PartialSpec s{2, 3, 1, 5, 12, 4, 0.5, true};
  Tensor q = random_tensor({2, 3, 5, 4}, 19), k = random_tensor({2, 1, 12, 4}, 20),
         v = random_tensor({2, 1, 12, 4}, 21);
  const std::vector<State> st = {partial_state(s, q, k, v, {0}, {5}), partial_state(s, q, k, v, {5}, {12})};
  MergeProblem heads{"t", 2, 2, 3, 5, 4, DType::f32, parse_conventions("normalised,layout=blh")};
  MergeProblem tokens = heads;
  tokens.conv.o_layout = OutLayout::blhd;
  const StoredStates a = encode_states(heads, st, false), b = encode_states(tokens, st, false);
  EXPECT_EQ(b.o.strides, (std::vector<int64_t>{2 * 5 * 3 * 4, 5 * 3 * 4, 4, 3 * 4, 1}));
  EXPECT_EQ(make_merge_outputs(tokens).o.strides, (std::vector<int64_t>{5 * 3 * 4, 4, 3 * 4, 1}));
  EXPECT_EQ(a.o.to_double(), b.o.to_double());  // the same logical values
  EXPECT_NE(a.o.bytes, b.o.bytes);              // in another memory order
  StoredStates good = make_merge_outputs(tokens), blind = make_merge_outputs(tokens),
               heads_out = make_merge_outputs(heads);
  fp32_merge(tokens, b, good, Bug::none);
  fp32_merge(heads, a, heads_out, Bug::none);
  blind.lse = good.lse, blind.o.bytes = heads_out.o.bytes;  // O written contiguously as [B,H,L,D]
  EXPECT_TRUE(judge_merge(tokens, b, good).pass) << judge_merge(tokens, b, good).worst;
  EXPECT_FALSE(judge_merge(tokens, b, blind).pass);
}

// An fp8 merged output: stored = fp8(O / oscale), saturated. The O merged in fp32 and stored that way passes; stored
// with the scale ignored, applied the wrong way, or 25% off fails; and a value beyond the format saturates instead
// of becoming NaN (the scale 2^-10 puts |O| > 0.44 past e4m3's 448).
TEST(States, Fp8OutputIsJudgedThroughItsScale) {
  const PartialSpec s{2, 4, 2, 1, 60, 16, 0.25, false};
  Tensor q = random_tensor({2, 4, 1, 16}, 22), k = random_tensor({2, 2, 60, 16}, 23),
         v = random_tensor({2, 2, 60, 16}, 24);
  const std::vector<State> st = {partial_state(s, q, k, v, {0}, {13}), partial_state(s, q, k, v, {13}, {60})};
  for (const char* fmt : {"fp8_e4m3", "fp8_e5m2"})
    for (double scale : {0.0078125, 0.003, 0x1p-10}) {
      MergeProblem wide{"t", 2, 2, 4, 1, 16, DType::f32, parse_conventions("normalised")};
      MergeProblem p = wide;
      p.conv = parse_conventions(std::string("normalised,odtype=") + fmt + ",oscale=" + std::to_string(scale));
      const StoredStates in = encode_states(p, st, false);
      StoredStates merged = make_merge_outputs(wide);
      fp32_merge(wide, in, merged, Bug::none);
      const DType t = *p.conv.out_dtype;
      const double top = t == DType::e4m3 ? 448.0 : 57344.0;
      int saturated = 0;
      auto stored = [&](double factor) {
        StoredStates out = make_merge_outputs(p);
        EXPECT_EQ(out.o.dtype, t);
        out.lse = merged.lse;
        for (int64_t e = 0; e < out.o.numel(); ++e) {
          const double x = merged.o.get_offset(e) * factor;
          saturated += std::fabs(x) > top && factor == 1 / scale;
          out.o.set_offset(e, std::clamp(x, -top, top));
        }
        return judge_merge(p, in, out);
      };
      const MergeVerdict good = stored(1 / scale), ignored = stored(1), inverted = stored(scale),
                         off = stored(1.25 / scale);
      EXPECT_TRUE(good.pass) << fmt << " " << scale << ": " << good.worst;
      EXPECT_FALSE(ignored.pass) << fmt << " " << scale;
      EXPECT_FALSE(inverted.pass) << fmt << " " << scale;
      EXPECT_FALSE(off.pass) << fmt << " " << scale;
      if (t == DType::e4m3 && scale == 0x1p-10) {
        EXPECT_GT(saturated, 0);
      }
    }
}

// A +inf sentinel taken literally poisons every row that holds one; the declared convention read right passes.
TEST(States, JudgeCatchesALiteralPlusInfSentinel) {
  const PartialSpec s{1, 2, 1, 2, 10, 4, 0.5, false};
  Tensor q = random_tensor({1, 2, 2, 4}, 16), k = random_tensor({1, 1, 10, 4}, 17),
         v = random_tensor({1, 1, 10, 4}, 18);
  const std::vector<State> st = {partial_state(s, q, k, v, {0}, {10}), partial_state(s, q, k, v, {10}, {10})};
  MergeProblem p{"t", 2, 1, 2, 2, 4, DType::f32, parse_conventions("normalised,base=e,empty=+inf,out=zero,layout=bhl")};
  const StoredStates in = encode_states(p, st, false);
  StoredStates good = make_merge_outputs(p), bad = make_merge_outputs(p);
  fp32_merge(p, in, good, Bug::none);
  fp32_merge(p, in, bad, Bug::literal_sentinel);
  EXPECT_TRUE(judge_merge(p, in, good).pass) << judge_merge(p, in, good).worst;
  EXPECT_FALSE(judge_merge(p, in, bad).pass);
}

// The derived bound is tight enough to matter: for fp32 outputs of a two-state merge it stays within a few dozen
// units of fp32 of |O|, so an error of 1e-4 relative is caught.
TEST(States, BoundIsNotVacuous) {
  State a = empty_state(1, 1, 1, 1), b = empty_state(1, 1, 1, 1);
  a.m = {0.5}, a.l = {1.0}, a.u = {1.0};
  b.m = {0.25}, b.l = {1.0}, b.u = {-2.0};
  MergeProblem p{"t", 2, 1, 1, 1, 1, DType::f32, {}};
  const StoredStates in = encode_states(p, {a, b}, false);
  const State m = merge_states({a, b});
  StoredStates out = make_merge_outputs(p);
  const int64_t r3[3] = {0, 0, 0}, r4[4] = {0, 0, 0, 0};
  out.lse->set(r3, m.lse(0));
  out.o.set(r4, m.out(0, 0) * (1 + 1e-4));
  EXPECT_FALSE(judge_merge(p, in, out).pass);
  out.o.set(r4, m.out(0, 0));
  EXPECT_TRUE(judge_merge(p, in, out).pass) << judge_merge(p, in, out).worst;
}

// An fp16 O below the smallest normal (2^-14) rounds in steps of 2^-24: the exact merge rounded to fp16 passes
// however small the values, and an O one subnormal step off is still caught.
TEST(States, Fp16SubnormalOutputsRoundInSubnormalSteps) {
  State a = empty_state(1, 1, 1, 2), b = empty_state(1, 1, 1, 2);
  a.m = {0.0}, a.l = {1.0}, a.u = {3.3e-7, 1.9e-7};
  b.m = {0.1}, b.l = {2.0}, b.u = {2.0 * 3.4e-7, -2.0 * 2.9e-7};
  MergeProblem p{"t", 2, 1, 1, 1, 2, DType::f16, {}};
  const StoredStates in = encode_states(p, {a, b}, false);
  const State m = merge_states({decode_state(p, in, 0), decode_state(p, in, 1)});
  StoredStates out = make_merge_outputs(p);
  const int64_t r3[3] = {0, 0, 0};
  out.lse->set(r3, m.lse(0));
  for (int64_t d = 0; d < 2; ++d) {
    const int64_t r4[4] = {0, 0, 0, d};
    out.o.set(r4, m.out(0, d));  // rounds to fp16: a subnormal
    EXPECT_LT(std::fabs(out.o.get(r4)), std::ldexp(1.0, -14));
  }
  EXPECT_TRUE(judge_merge(p, in, out).pass) << judge_merge(p, in, out).worst;
  const int64_t r4[4] = {0, 0, 0, 0};
  out.o.set(r4, out.o.get(r4) + 2 * std::ldexp(1.0, -24));
  EXPECT_FALSE(judge_merge(p, in, out).pass);
}

}  // namespace
}  // namespace attncheck
