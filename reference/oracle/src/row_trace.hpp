// One row of the looped forward (reference.cpp) as its loops left it, and the pass that derives the tolerance
// model's error scales from it (error_scales.cpp), so the loops hold the maths alone.
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/rope.hpp"

namespace attncheck {

// Key j's weight as the output sees it: dropped (0) or rescaled by 1/(1-p) under dropout, unchanged without.
inline double kept_weight(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t j, double w) {
  if (!in.keep) return w;
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  return in.keep->get_offset(((b * p.Hq + h) * p.Lq + i) * p.Lk + j) != 0 ? w * keep_scale : 0.0;
}

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
};

// Allocates the error scales of r for the problem; row() fills one row's, after the row's outputs are final.
class ErrorScalesPass {
 public:
  ErrorScalesPass(const Problem& p, const Inputs& in, const ModSet& mods, const RopeStage& rope,
                  const std::vector<double>& v, int threads, ReferenceResult& r);
  void row(const RowTrace& t, ReferenceResult& r) const;

 private:
  const Problem& p_;
  const Inputs& in_;
  const ModSet& mods_;
  const RopeStage& rope_;
  std::vector<ValueGroups> vgroups_;  // per (b, KV head)
};

}  // namespace attncheck
