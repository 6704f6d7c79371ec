// The oracle: a naive, looped scaled dot-product attention that accumulates in double.
// It mirrors the per-token loops of a textbook derivation and is bitwise deterministic for any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/threads.hpp"  // default_threads(), parallel_rows()

namespace attncheck {
inline namespace oracle {

// The reference's outputs. The error scales the tolerance model judges them by are the tolerance side's
// (error_scales.hpp: expected_attention), derived from the same pass through a RowObserver (row_trace.hpp).
struct ReferenceResult {
  std::vector<double> out;                   // [B, Hq, Lq, Dv], row-major
  std::vector<double> lse;                   // [B, Hq, Lq]: natural log of the softmax denominator (always computed)
  std::vector<double> weights;               // [B, Hq, Lq, Lk], only when problem.want_weights
  std::vector<double> scores;                // [B, Hq, Lq, Lk], the raw scores at problem.scores_out (when not none)
  std::vector<double> present_k, present_v;  // [B, Hkv, Lk, Dqk|Dv]: concat(past, new), when problem.past_len > 0
  // [B, Hq, Lq], when problem.max_logit != none: the row maximum of the softmax input over visible keys (rows form;
  // judge() reduces it for heads).
  std::vector<double> max_logit;
  // Query rows i computed (for every b, h); empty = all. Other rows hold zeros and are not judged (tolerance.hpp).
  std::vector<int64_t> sampled_rows;
};

class RowObserver;  // row_trace.hpp

// Validates problem and inputs (throws std::invalid_argument), then computes in double.
// threads = 0: ATTNCHECK_THREADS or the hardware concurrency. Rows are independent, so results do not depend on it.
ReferenceResult reference_attention(const Problem& p, const Inputs& in, int threads = 0);
// The same, for the query rows `rows` only (each in [0, Lq), for every batch and head; empty = all rows): long
// contexts verified in minutes (docs/tolerance.md, "Sampled rows"). Pick the rows with sample_rows.
// With an observer, each row is also handed to it as the loops leave it (row_trace.hpp).
ReferenceResult reference_attention_rows(const Problem& p, const Inputs& in, const std::vector<int64_t>& rows,
                                         int threads = 0, RowObserver* observer = nullptr);
// About n query rows (sorted, distinct), always including the first and last row, the rows on both sides of every
// 64- and 128-key tile edge of the diagonal (as many as fit in n / 2), the first and last row whose causal or window
// diagonal enters the keys, the first and last fully masked row (mask-free criteria: causal, window, padding), and
// the rows with the largest |q_i| (the largest bound on |logit|); the rest evenly spaced.
std::vector<int64_t> sample_rows(const Problem& p, const Inputs& in, int64_t n);

}  // namespace oracle
}  // namespace attncheck
