// The oracle: a naive, looped scaled dot-product attention that accumulates in double.
// It mirrors the per-token loops of a textbook derivation and is bitwise deterministic for any thread count.
#pragma once

#include <functional>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {

struct ReferenceResult {
  std::vector<double> out;      // [B, Hq, Lq, Dv], row-major
  std::vector<double> lse;      // [B, Hq, Lq]: natural log of the softmax denominator (always computed)
  std::vector<double> weights;  // [B, Hq, Lq, Lk], only when problem.want_weights
  // Error scales for the tolerance model (docs/tolerance.md), computed alongside in double:
  std::vector<double> score_mag;  // [B, Hq, Lq]: max over visible j of |scale|*|q_i|*|k_j| + |bias_ij|
  std::vector<double> out_abs;    // [B, Hq, Lq, Dv]: sum_j |w_ij * keep_ij/(1-p) * v_jd|
};

// Validates problem and inputs (throws std::invalid_argument), then computes in double.
// threads = 0: ATTNCHECK_THREADS or the hardware concurrency. Rows are independent, so results do not depend on it.
ReferenceResult reference_attention(const Problem& p, const Inputs& in, int threads = 0);

// Run fn(row) for row in [0, n) on `threads` OS threads (0 = default). Each row must be independent.
void parallel_rows(int64_t n, int threads, const std::function<void(int64_t)>& fn);
int default_threads();

}  // namespace attncheck
