// Properties of the reference backward on generated fp64 cases: Σ_j dS_ij = 0, dV = P'ᵀ·dO from the forward's
// weights, GQA equals MHA with repeated K/V after summing, keys no query sees get exactly zero dK/dV, linearity
// in dO, NaN-poisoned unseen keys never leak, permutation equivariance of keys and queries, a hand-computed
// two-key example (and a saturated softcap), and dout validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "attncheck/grad_scales.hpp"
#include "backward_cases.hpp"

using namespace attncheck;
using namespace attncheck::gradtest;

namespace {
constexpr int kCases = 120;

// Key j of (b, kv head) is seen when some query row of the group has it visible (and not fully masked).
bool key_seen(const prop::Case& c, int64_t b, int64_t kvh, int64_t j) {
  const Problem& p = c.p;
  for (int64_t h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h)
    for (int64_t i = 0; i < p.Lq; ++i)
      if (prop::visible(p, c.in, b, h, i, j)) return true;
  return false;
}
}  // namespace

TEST(BackwardProperties, ScoreGradientRowsSumToZero) {
  for (uint64_t n = 0; n < kCases; ++n) {
    const prop::Case c = grad_case(n);
    const BackwardResult g = reference_backward(c.p, c.in, random_dout(c.p, n), 1, true);
    for (int64_t row = 0; row < c.p.B * c.p.Hq * c.p.Lq; ++row) {
      double s = 0, a = 0;
      for (int64_t j = 0; j < c.p.Lk; ++j) {
        s += g.ds[static_cast<size_t>(row * c.p.Lk + j)];
        a += std::abs(g.ds[static_cast<size_t>(row * c.p.Lk + j)]);
      }
      ASSERT_LE(std::abs(s), 1e-12 * (a + std::abs(g.d[static_cast<size_t>(row)])) + 1e-300)
          << c.name() << " row " << row;
    }
  }
}

TEST(BackwardProperties, DvIsWeightsTransposedTimesDout) {
  for (uint64_t n = 0; n < kCases; ++n) {
    prop::Case c = grad_case(n);
    c.p.want_weights = true;
    const Problem& p = c.p;
    const Tensor dout = random_dout(p, n);
    const ExpectedGradients g = expected_gradients(p, c.in, dout, 1);
    const ExpectedAttention f = expected_attention(p, c.in, 1);
    const std::vector<char> empty = empty_rows(p, c.in);
    std::vector<double> dv(g.dv.size(), 0.0);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          const int64_t row = (b * p.Hq + h) * p.Lq + i;
          if (empty[static_cast<size_t>(row)]) continue;
          for (int64_t j = 0; j < p.Lk; ++j) {
            double w = f.weights[static_cast<size_t>(row * p.Lk + j)];
            if (c.in.keep) w *= c.in.keep->get_offset(row * p.Lk + j) ? 1 / (1 - p.dropout_p) : 0.0;
            if (w == 0) continue;
            for (int64_t d = 0; d < p.Dv; ++d)
              dv[static_cast<size_t>(((b * p.Hkv + p.kv_head(h)) * p.Lk + j) * p.Dv + d)] += w * dout.at(b, h, i, d);
          }
        }
    for (size_t e = 0; e < dv.size(); ++e)
      ASSERT_NEAR(g.dv[e], dv[e], 1e-12 * g.dv_abs[e] + 1e-300) << c.name() << " element " << e;
  }
}

TEST(BackwardProperties, GqaEqualsMhaWithRepeatedKvAfterSumming) {
  int tried = 0;
  for (uint64_t n = 0; n < kCases; ++n) {
    const prop::Case c = grad_case(n);
    const Problem& p = c.p;
    if (p.Hkv == p.Hq) continue;
    ++tried;
    Problem m = p;
    m.Hkv = p.Hq;
    Inputs in = c.in;
    in.k = make_qkv(m, 1);
    in.v = make_qkv(m, 2);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t j = 0; j < p.Lk; ++j) {
          for (int64_t d = 0; d < p.Dqk; ++d) in.k.put(b, h, j, d, c.in.k.at(b, p.kv_head(h), j, d));
          for (int64_t d = 0; d < p.Dv; ++d) in.v.put(b, h, j, d, c.in.v.at(b, p.kv_head(h), j, d));
        }
    const Tensor dout = random_dout(p, n);
    const ExpectedGradients gq = expected_gradients(p, c.in, dout, 1);
    const BackwardResult mh = reference_backward(m, in, dout, 1);
    EXPECT_EQ(gq.dq, mh.dq) << c.name();
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t kvh = 0; kvh < p.Hkv; ++kvh)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t d = 0; d < p.Dv; ++d) {
            double s = 0;
            for (int64_t h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h)
              s += mh.dv[static_cast<size_t>(((b * p.Hq + h) * p.Lk + j) * p.Dv + d)];
            const size_t e = static_cast<size_t>(((b * p.Hkv + kvh) * p.Lk + j) * p.Dv + d);
            ASSERT_NEAR(gq.dv[e], s, 1e-12 * gq.dv_abs[e] + 1e-300) << c.name();
          }
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t kvh = 0; kvh < p.Hkv; ++kvh)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t d = 0; d < p.Dqk; ++d) {
            double s = 0;
            for (int64_t h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h)
              s += mh.dk[static_cast<size_t>(((b * p.Hq + h) * p.Lk + j) * p.Dqk + d)];
            const size_t e = static_cast<size_t>(((b * p.Hkv + kvh) * p.Lk + j) * p.Dqk + d);
            ASSERT_NEAR(gq.dk[e], s, 1e-12 * gq.dk_abs[e] + 1e-300) << c.name();
          }
  }
  EXPECT_GE(tried, 20);
}

TEST(BackwardProperties, UnseenKeysGetZeroAndPoisonNeverLeaks) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int unseen = 0;
  for (uint64_t n = 0; n < kCases; ++n) {
    prop::Case c = grad_case(n);
    const Problem& p = c.p;
    prop::depoison(c);
    const Tensor dout = random_dout(p, n);
    const BackwardResult clean = reference_backward(p, c.in, dout, 1);
    Inputs poisoned = c.in;
    std::vector<char> seen(static_cast<size_t>(p.B * p.Hkv * p.Lk));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t kvh = 0; kvh < p.Hkv; ++kvh)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const bool s = key_seen(c, b, kvh, j);
          seen[static_cast<size_t>((b * p.Hkv + kvh) * p.Lk + j)] = s;
          if (s) continue;
          ++unseen;
          for (int64_t d = 0; d < p.Dqk; ++d) poisoned.k.put(b, kvh, j, d, nan);
          for (int64_t d = 0; d < p.Dv; ++d) poisoned.v.put(b, kvh, j, d, nan);
        }
    const BackwardResult g = reference_backward(p, poisoned, dout, 1);
    EXPECT_EQ(g.dq, clean.dq) << c.name();
    EXPECT_EQ(g.dk, clean.dk) << c.name();
    EXPECT_EQ(g.dv, clean.dv) << c.name();
    EXPECT_EQ(g.dbias, clean.dbias) << c.name();
    for (size_t kj = 0; kj < seen.size(); ++kj) {
      if (seen[kj]) continue;
      for (int64_t d = 0; d < p.Dqk; ++d)
        ASSERT_EQ(g.dk[kj * static_cast<size_t>(p.Dqk) + static_cast<size_t>(d)], 0.0);
      for (int64_t d = 0; d < p.Dv; ++d) ASSERT_EQ(g.dv[kj * static_cast<size_t>(p.Dv) + static_cast<size_t>(d)], 0.0);
    }
  }
  EXPECT_GE(unseen, 100);
}

TEST(BackwardProperties, LinearInDout) {
  for (uint64_t n = 0; n < kCases; ++n) {
    const prop::Case c = grad_case(n);
    const Problem& p = c.p;
    const Tensor d1 = random_dout(p, n), d2 = random_dout(p, n + 999);
    Tensor mix = make_dout(p);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i)
          for (int64_t d = 0; d < p.Dv; ++d) mix.put(b, h, i, d, 2 * d1.at(b, h, i, d) - 3 * d2.at(b, h, i, d));
    const ExpectedGradients g1 = expected_gradients(p, c.in, d1, 1), g2 = expected_gradients(p, c.in, d2, 1);
    const BackwardResult gm = reference_backward(p, c.in, mix, 1);
    auto check = [&](const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& m,
                     const std::vector<double>& a_abs, const std::vector<double>& b_abs, const char* what) {
      for (size_t e = 0; e < m.size(); ++e)
        ASSERT_NEAR(m[e], 2 * a[e] - 3 * b[e], 1e-11 * (2 * a_abs[e] + 3 * b_abs[e]) + 1e-300)
            << c.name() << " " << what << " element " << e;
    };
    check(g1.dq, g2.dq, gm.dq, g1.dq_abs, g2.dq_abs, "dq");
    check(g1.dk, g2.dk, gm.dk, g1.dk_abs, g2.dk_abs, "dk");
    check(g1.dv, g2.dv, gm.dv, g1.dv_abs, g2.dv_abs, "dv");
    check(g1.dbias, g2.dbias, gm.dbias, g1.dbias_abs, g2.dbias_abs, "dbias");
  }
}

// Permutation equivariance on canonical cases (positional masks folded into a boolean mask, bias expanded): keys
// (K, V rows with their mask, bias and keep columns) permuted give dK, dV permuted alike and dQ unchanged; queries
// (Q and dO rows with their mask, bias and keep rows) permuted give dQ permuted alike and dK, dV unchanged. Only the
// order of the sums differs.
namespace {
std::vector<int64_t> shuffled(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  prop::SeededChooser r(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(r.pick(0, i))]);
  return perm;
}
// Element (o, perm[n], x) of `orig` against element (o, n, x) of `permuted`, within summation-order rounding.
void expect_permuted(const std::vector<double>& orig, const std::vector<double>& permuted,
                     const std::vector<double>& abs, int64_t outer, int64_t L, int64_t inner,
                     const std::vector<int64_t>& perm, const std::string& what) {
  ASSERT_EQ(orig.size(), permuted.size()) << what;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t n = 0; n < L; ++n)
      for (int64_t x = 0; x < inner; ++x) {
        const size_t a = static_cast<size_t>((o * L + perm[static_cast<size_t>(n)]) * inner + x);
        const size_t b = static_cast<size_t>((o * L + n) * inner + x);
        ASSERT_NEAR(orig[a], permuted[b], 1e-12 * abs[a] + 1e-300) << what << " element " << a;
      }
}
}  // namespace

TEST(BackwardProperties, PermutingKeysOrQueriesPermutesTheirGradients) {
  for (uint64_t n = 0; n < kCases; ++n) {
    const prop::Case c = prop::canonical(grad_case(n));
    const Problem& p = c.p;
    const Tensor dout = random_dout(p, n);
    const ExpectedGradients g = expected_gradients(p, c.in, dout, 1);
    const std::string name = c.name();

    const std::vector<int64_t> kp = shuffled(p.Lk, n * 31 + 7);
    const prop::Case ck = prop::permute_keys(c, kp);
    const BackwardResult gk = reference_backward(ck.p, ck.in, dout, 1);
    expect_permuted(g.dq, gk.dq, g.dq_abs, p.B * p.Hq * p.Lq, 1, p.Dqk, std::vector<int64_t>{0}, name + " keys: dq");
    expect_permuted(g.dk, gk.dk, g.dk_abs, p.B * p.Hkv, p.Lk, p.Dqk, kp, name + " keys: dk");
    expect_permuted(g.dv, gk.dv, g.dv_abs, p.B * p.Hkv, p.Lk, p.Dv, kp, name + " keys: dv");

    const std::vector<int64_t> qp = shuffled(p.Lq, n * 37 + 11);
    const prop::Case cq = prop::permute_queries(c, qp);
    Tensor dq_out = make_dout(p);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i)
          for (int64_t d = 0; d < p.Dv; ++d) dq_out.put(b, h, i, d, dout.at(b, h, qp[static_cast<size_t>(i)], d));
    const BackwardResult gq = reference_backward(cq.p, cq.in, dq_out, 1);
    expect_permuted(g.dq, gq.dq, g.dq_abs, p.B * p.Hq, p.Lq, p.Dqk, qp, name + " queries: dq");
    expect_permuted(g.dk, gq.dk, g.dk_abs, p.B * p.Hkv * p.Lk, 1, p.Dqk, std::vector<int64_t>{0},
                    name + " queries: dk");
    expect_permuted(g.dv, gq.dv, g.dv_abs, p.B * p.Hkv * p.Lk, 1, p.Dv, std::vector<int64_t>{0}, name + " queries: dv");
  }
}

TEST(BackwardProperties, ThreadCountDoesNotChangeBits) {
  for (uint64_t n = 0; n < 30; ++n) {
    const prop::Case c = grad_case(n);
    const Tensor dout = random_dout(c.p, n);
    const ExpectedGradients a = expected_gradients(c.p, c.in, dout, 1), b = expected_gradients(c.p, c.in, dout, 3);
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
    EXPECT_EQ(a.dbias, b.dbias);
    // The error scales too: the tolerance side sums them in the order of the oracle's loops.
    EXPECT_EQ(a.dq_abs, b.dq_abs);
    EXPECT_EQ(a.dk_abs, b.dk_abs);
    EXPECT_EQ(a.dv_abs, b.dv_abs);
    EXPECT_EQ(a.dbias_abs, b.dbias_abs);
    EXPECT_EQ(a.dq_abs_unchained, b.dq_abs_unchained);
    EXPECT_EQ(a.dk_abs_unchained, b.dk_abs_unchained);
    EXPECT_EQ(a.mod_curv, b.mod_curv);
    EXPECT_EQ(a.dq_rope, b.dq_rope);
    EXPECT_EQ(a.dk_rope, b.dk_rope);
  }
}

// One query, two keys, Dqk = Dv = 1, scale 1: s = (q k0, q k1), P = softmax(s), O = P0 v0 + P1 v1, dO = 1.
// By hand: dV = P; dP_j = v_j; D = O; dS_j = P_j (v_j - O); dq = Σ dS_j k_j; dk_j = dS_j q.
TEST(BackwardProperties, TwoKeyWorkedExample) {
  Problem p;
  p.dtype = DType::f64;
  p.Lk = 2;
  p.scale = 1.0;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  in.q.put(0, 0, 0, 0, 0.5);
  in.k.put(0, 0, 0, 0, 1.0);
  in.k.put(0, 0, 1, 0, -2.0);
  in.v.put(0, 0, 0, 0, 3.0);
  in.v.put(0, 0, 1, 0, -1.0);
  Tensor dout = make_dout(p);
  dout.put(0, 0, 0, 0, 1.0);
  const double e0 = std::exp(0.5), e1 = std::exp(-1.0), P0 = e0 / (e0 + e1), P1 = e1 / (e0 + e1);
  const double O = 3 * P0 - P1, dS0 = P0 * (3 - O), dS1 = P1 * (-1 - O);
  const BackwardResult g = reference_backward(p, in, dout);
  EXPECT_NEAR(g.dv[0], P0, 1e-15);
  EXPECT_NEAR(g.dv[1], P1, 1e-15);
  EXPECT_NEAR(g.d[0], O, 1e-15);
  EXPECT_NEAR(g.dq[0], dS0 * 1.0 + dS1 * -2.0, 1e-15);
  EXPECT_NEAR(g.dk[0], dS0 * 0.5, 1e-15);
  EXPECT_NEAR(g.dk[1], dS1 * 0.5, 1e-15);
}

// Saturated softcap (x/c = 30): the derivative 1 − tanh² = 4e^-60/(1+e^-60)² is tiny but not zero, and the oracle
// must keep its relative accuracy (1 − t·t from the rounded t is exactly 0 in double from x/c ≈ 19 on).
TEST(BackwardProperties, SaturatedSoftcapDerivativeKeepsRelativeAccuracy) {
  Problem p;
  p.dtype = DType::f64;
  p.Lk = 2;
  p.scale = 1.0;
  p.softcap = 1.0;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  in.q.put(0, 0, 0, 0, 1.0);
  in.k.put(0, 0, 0, 0, 30.0);
  in.k.put(0, 0, 1, 0, 0.0);
  in.v.put(0, 0, 0, 0, 1.0);
  in.v.put(0, 0, 1, 0, 0.0);
  Tensor dout = make_dout(p);
  dout.put(0, 0, 0, 0, 1.0);
  // s = [tanh(30), 0] = [1, 0] in double; dP = [1, 0]; D = P0; dS0 = P0 P1; key 1 has k = 0.
  const double P0 = std::exp(1.0) / (std::exp(1.0) + 1.0), P1 = 1.0 - P0, e = std::exp(-60.0);
  const double chain0 = 4.0 * e / ((1.0 + e) * (1.0 + e));
  const BackwardResult g = reference_backward(p, in, dout);
  EXPECT_NEAR(g.dq[0], 30.0 * P0 * P1 * chain0, 1e-12 * 30.0 * P0 * P1 * chain0);
  EXPECT_NEAR(g.dk[0], P0 * P1 * chain0, 1e-12 * P0 * P1 * chain0);
}

TEST(BackwardProperties, BadDoutNamesTheField) {
  Problem p;
  p.Lq = 3;
  p.Dv = 2;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  try {
    reference_backward(p, in, Tensor(DType::f32, {1, 1, 2, 2}));
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dout: shape [1,1,2,2]"), std::string::npos) << e.what();
  }
}
