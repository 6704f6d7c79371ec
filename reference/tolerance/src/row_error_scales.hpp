// The pieces of the error-scale pass (error_scales.cpp): per-key score error magnitudes, groups of equal values,
// one row's inputs, and the RowObserver that fills an ErrorScales from the reference's rows.
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/error_scales.hpp"
#include "attncheck/row_trace.hpp"

namespace attncheck {
inline namespace tolerance {

// Per-key magnitudes of a score's rounding errors. a: the dot product's partial sums, sqrt(Dqk (dot^2/3 +
// sum_d (q_d k_d)^2 / 6)) * |scale| (sums that grow linearly and sums that random-walk); b: the products'
// operand rounding, sqrt(sum_d (q_d k_d)^2) * |scale|; c: the score itself, |s| (scale, logit stage, bias, max).
struct KeyScales {
  std::vector<double> a, b, c;
  explicit KeyScales(size_t n) : a(n, 0.0), b(n, 0.0), c(n, 0.0) {}
  void set(size_t j, double scale, double dot, double qk2, double dqk, double score);
};

// Groups of equal finite values within each column of V (Lk, Dv), computed once per KV head: which v_jd share
// their value with another key of column d, and each group's keys, so a row sums its group terms column by column.
struct ValueGroups {
  std::vector<char> grouped;    // (Lk, Dv): 1 where another key of column d holds the same value
  std::vector<size_t> columns;  // (Dv + 1): column d's groups are columns[d] .. columns[d + 1] - 1
  std::vector<size_t> start;    // (groups + 1): group g's keys are keys[start[g]] .. keys[start[g + 1] - 1]
  std::vector<uint32_t> keys;
  std::vector<double> value;  // (groups): |v| of group g
};
ValueGroups value_groups(const double* v, int64_t Lk, int64_t Dv);

// One row's data for row_error_scales (spans of length Lk; V rows of length Dv).
struct RowInputs {
  const std::vector<double>& s;         // scores (finite where taking part)
  const std::vector<char>& takes_part;  // key takes part in the softmax sum
  const std::vector<double>& w;         // normalised weights
  const std::vector<double>& keep;      // 1, or keep_ij/(1-p) under dropout
  const KeyScales& mag;                 // per-key score error magnitudes
  const double* v;                      // (Lk, Dv)
  int64_t Dv;
  const double* o;                       // (Dv): the row's output, final
  const ValueGroups* vgroups = nullptr;  // value_groups of v, or null (every value counted alone)
  const double* q = nullptr;             // (Dqk): the query row, with k (Lk, Dqk) and the scale: p_qbar, out_qdev
  const double* k = nullptr;
  int64_t Dqk = 0;
  double scale = 0;
};
// Computes row `row`'s error scales into e (sized vectors must be allocated).
void row_error_scales(const RowInputs& x, size_t row, ErrorScales& e);

// Allocates the error scales for the problem the loops run; row() fills one row's from the row's trace.
class ErrorScalesPass final : public RowObserver {
 public:
  explicit ErrorScalesPass(ErrorScales& e) : e_(e) {}
  void start(const LoopedProblem& lp) override;
  void row(const RowTrace& t) override;

 private:
  ErrorScales& e_;
  const Problem* p_ = nullptr;
  const Inputs* in_ = nullptr;
  const ModSet* mods_ = nullptr;
  const RopeStage* rope_ = nullptr;
  std::vector<ValueGroups> vgroups_;  // per (b, KV head)
};

}  // namespace tolerance
}  // namespace attncheck
