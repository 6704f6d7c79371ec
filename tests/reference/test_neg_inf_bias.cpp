// A bias of -inf (PyTorch's float attention masks) masks a key: the reference gives it weight exactly 0, and
// the tolerance model stays finite for such rows (an infinite score_mag would make every tolerance of the row inf or
// NaN, so that any output passed).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"

using namespace attncheck;

TEST(NegInfBias, MasksKeyAndKeepsTolerancesFinite) {
  Problem p;
  p.dtype = DType::f32;
  p.Lq = 2;
  p.Lk = 3;
  p.Dqk = p.Dv = 2;
  p.bias_shape = std::array<int64_t, 4>{1, 1, 1, 3};
  p.want_weights = true;
  Inputs in;
  in.q = make_qkv(p, 0), in.k = make_qkv(p, 1), in.v = make_qkv(p, 2);
  in.bias = Tensor(DType::f32, {1, 1, 1, 3});
  const double q[2][2] = {{0.5, -1.0}, {2.0, 0.25}}, k[3][2] = {{1, 0}, {0, 1}, {-1, 1}};
  for (int i = 0; i < 2; ++i)
    for (int d = 0; d < 2; ++d) in.q.put(0, 0, i, d, q[i][d]);
  for (int j = 0; j < 3; ++j)
    for (int d = 0; d < 2; ++d) {
      in.k.put(0, 0, j, d, k[j][d]);
      in.v.put(0, 0, j, d, j + 1.0 + d);
    }
  in.bias->put(0, 0, 0, 1, -std::numeric_limits<double>::infinity());
  const ExpectedAttention r = expected_attention(p, in);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(r.weights[static_cast<size_t>(i * 3 + 1)], 0.0);
  for (double t : out_tolerance(p, r)) EXPECT_TRUE(std::isfinite(t)) << t;
  // And a wrong output fails: key 1's value leaking in must be caught.
  Outputs o = make_outputs(p);
  for (int i = 0; i < 2; ++i)
    for (int d = 0; d < 2; ++d) o.out.put(0, 0, i, d, r.out[static_cast<size_t>(i * 2 + d)] + 1e-3);
  o.weights->fill(0);
  EXPECT_FALSE(judge(p, r, o).pass);
}
