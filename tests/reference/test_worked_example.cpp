// The published worked example: six tokens whose scores (already Q·Kᵀ) are given, scaled by 1/sqrt(2).
// With K = V = identity, Q's rows are the score rows and the output equals the attention weights.
#include <gtest/gtest.h>

#include <cmath>

#include "attncheck/reference.hpp"

using namespace attncheck;

namespace {
const double kScores[6][6] = {
    {0.0613, -0.3491, 0.1443, -0.0437, -0.1303, 0.1076},
    {-0.6004, 3.4707, -1.5023, 0.4991, 1.2903, -1.3374},
    {0, 0, 0, 0, 0, 0},  // rows 2, 3, 5 are not published; any values do
    {0, 0, 0, 0, 0, 0},
    {-0.1510, 0.8626, -0.3597, 0.1112, 0.3216, -0.2787},
    {0, 0, 0, 0, 0, 0},
};

ReferenceResult run(bool causal) {
  Problem p;
  p.dtype = DType::f64;
  p.Lq = p.Lk = p.Dqk = p.Dv = 6;
  p.scale = 1.0 / std::sqrt(2.0);
  p.causal = causal;
  p.want_weights = true;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      in.q.put(0, 0, i, j, kScores[i][j]);
      in.k.put(0, 0, i, j, i == j);
      in.v.put(0, 0, i, j, i == j);
    }
  return reference_attention(p, in);
}

void expect_row(const ReferenceResult& r, int row, const std::vector<double>& want) {
  for (int j = 0; j < 6; ++j) {
    EXPECT_NEAR(r.weights[static_cast<size_t>(row * 6 + j)], want[static_cast<size_t>(j)], 5e-5)
        << "row " << row << " key " << j;
    EXPECT_EQ(r.out[static_cast<size_t>(row * 6 + j)], r.weights[static_cast<size_t>(row * 6 + j)])
        << "V = I: out == weights";
  }
}
}  // namespace

TEST(WorkedExample, SoftmaxOfScaledScores) {
  expect_row(run(false), 0, {0.1772, 0.1326, 0.1879, 0.1645, 0.1547, 0.1831});
}

TEST(WorkedExample, CausalRows) {
  const ReferenceResult r = run(true);
  expect_row(r, 1, {0.0532, 0.9468, 0, 0, 0, 0});
  expect_row(r, 4, {0.1536, 0.3145, 0.1325, 0.1849, 0.2145, 0});
  for (int j = 1; j < 6; ++j) EXPECT_EQ(r.weights[static_cast<size_t>(j)], 0.0) << "masked weights are exactly 0";
}
