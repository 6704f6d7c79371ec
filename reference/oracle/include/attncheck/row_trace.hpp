// One row of the looped forward (reference.cpp) as its loops left it, handed to a RowObserver: how a pass that
// needs the row's intermediate values (the tolerance model's error scales) reads them without living in the loops.
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/rope.hpp"

namespace attncheck {
inline namespace oracle {

// Key j's weight as the output sees it: dropped (0) or rescaled by 1/(1-p) under dropout, unchanged without.
inline double kept_weight(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t j, double w) {
  if (!in.keep) return w;
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  return in.keep->get_offset(((b * p.Hq + h) * p.Lq + i) * p.Lk + j) != 0 ? w * keep_scale : 0.0;
}

// What the loops run on: the problem once its KV form is read (present, paged, quantized and fp8 keys and values
// become plain fp64 ones), its score modifications, its rotary embedding and V widened to double.
struct LoopedProblem {
  const Problem& p;
  const Inputs& in;
  const ModSet& mods;
  const RopeStage& rope;
  const std::vector<double>& v;  // (B, Hkv, Lk, Dv)
  int threads;                   // the loops' thread count
};

struct RowTrace {
  int64_t row, b, h, i, kvh;
  const double* q;  // (Dqk): the query row, rotated
  const double* k;  // (Lk, Dqk): the row's KV head, rotated
  const double* v;  // (Lk, Dv)
  Problem::RowKeys rk;
  const std::vector<double>& s;  // final scores, the fill where masked
  const std::vector<char>& visible;
  const std::vector<double>& w;  // normalised weights
  bool fully_masked;
  const double* out;  // (Dv): the row's output, final
};

class RowObserver {
 public:
  virtual ~RowObserver() = default;
  // Once, before the first row.
  virtual void start(const LoopedProblem& lp) = 0;
  // Once per row, after its outputs are final; rows come in any order, several at once from the loops' threads.
  virtual void row(const RowTrace& t) = 0;
};

}  // namespace oracle
}  // namespace attncheck
