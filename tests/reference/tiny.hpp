// Helpers for the hand-computed reference tests. The trick that makes expected values checkable by hand: with
// Dqk = 1, q = 1, scale = 1 and k_j = log(a_j), the score of key j is log(a_j), so the softmax weight of j is
// a_j / (sum of a over visible keys) — a plain fraction the tests write down (or compute by that ratio).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attncheck/reference.hpp"

namespace tiny {
using namespace attncheck;

// An fp64 problem with Dqk = Dv = 1 and scale 1; every query is 1.
inline Problem scalar_problem(int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lk) {
  Problem p;
  p.dtype = DType::f64;
  p.B = B, p.Hq = Hq, p.Hkv = Hkv, p.Lq = Lq, p.Lk = Lk, p.Dqk = 1, p.Dv = 1;
  p.scale = 1.0;
  p.want_weights = p.want_lse = true;
  return p;
}

// Inputs for a scalar problem: key j of (b, kv head g) has score log(a(b,g,j)) and value v(b,g,j).
inline Inputs scalar_inputs(const Problem& p, const std::function<double(int64_t, int64_t, int64_t)>& a,
                            const std::function<double(int64_t, int64_t, int64_t)>& v) {
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
  in.q.fill(1.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t g = 0; g < p.Hkv; ++g)
      for (int64_t j = 0; j < p.Lk; ++j) {
        in.k.put(b, g, j, 0, std::log(a(b, g, j)));
        in.v.put(b, g, j, 0, v(b, g, j));
      }
  return in;
}

// The same a and v for every batch and head.
inline Inputs scalar_inputs(const Problem& p, const std::vector<double>& a, const std::vector<double>& v) {
  return scalar_inputs(
      p, [&](int64_t, int64_t, int64_t j) { return a[static_cast<size_t>(j)]; },
      [&](int64_t, int64_t, int64_t j) { return v[static_cast<size_t>(j)]; });
}

// Softmax of scores log(a_j) over the visible keys, written as the ratio a_j / sum a.
inline std::vector<double> ratio_weights(const std::vector<double>& a, const std::vector<int>& visible) {
  double sum = 0;
  for (size_t j = 0; j < a.size(); ++j) sum += visible[j] ? a[j] : 0.0;
  std::vector<double> w(a.size());
  for (size_t j = 0; j < a.size(); ++j) w[j] = visible[j] ? a[j] / sum : 0.0;
  return w;
}

inline double dot(const std::vector<double>& w, const std::vector<double>& v) {
  double s = 0;
  for (size_t j = 0; j < w.size(); ++j) s += w[j] * v[j];
  return s;
}

// Row `row` (flattened b, h, i) of a scalar-problem result against hand-written weights; checks out = w·v too.
inline void expect_row(const ReferenceResult& r, const Problem& p, int64_t row, const std::vector<double>& w,
                       const std::vector<double>& v, const std::string& what) {
  for (int64_t j = 0; j < p.Lk; ++j)
    EXPECT_NEAR(r.weights[static_cast<size_t>(row * p.Lk + j)], w[static_cast<size_t>(j)], 1e-14)
        << what << " row " << row << " key " << j;
  EXPECT_NEAR(r.out[static_cast<size_t>(row)], dot(w, v), 1e-13) << what << " row " << row << " out";
}

// Seeded signed uniform values in [-1, 1) for every element of a tensor.
inline void fill_random(Tensor& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_offset(i, u(rng));
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}
}  // namespace tiny
