// Hypotheses about the cause of a failure: each predicts the candidate's outputs under one bug (the reference on a
// derived problem, or a direct model of the bug) and scores by the fraction of failing elements the prediction
// explains. Pure functions of the Subject; no re-runs of the candidate.
#pragma once

#include <functional>
#include <vector>

#include "diagnosis.hpp"
#include "subject.hpp"

namespace attncheck::diagnose {

// Causes whose predictions explain some failing elements, unsorted, scores in (0, 1].
std::vector<Cause> structural_hypotheses(const Subject& s);  // masks, alignment, scale, GQA, tiles, layout, policy
std::vector<Cause> numeric_hypotheses(const Subject& s);     // lse forms, non-finite rows, precision
// Keys never read (a whole tile anywhere, one key per row), reported through `add(tag, what, out, lse)`.
void key_hypotheses(const Subject& s, const std::function<void(const std::string&, const std::string&, const std::vector<double>&,
                                                                 const std::vector<double>*)>& add);

// A direct model of a kernel: row softmax over the keys whose score(row, j) is not NaN, then P.V (with dropout);
// Rows without a key keep the reference's out and lse.
struct Prediction {
  std::vector<double> out, lse;
};
// sum_acc / pv_acc: the dtype the softmax sum and the P.V accumulators round to after every add (f64: none).
// nan_rows: a row whose keys all score -inf is NaN, as in a kernel without fully-masked handling (exp(-inf - -inf)),
// instead of keeping the reference.
Prediction softmax_model(const Subject& s, const std::function<double(int64_t row, int64_t j)>& score,
                         DType sum_acc = DType::f64, DType pv_acc = DType::f64, bool nan_rows = false);

// Weights [B,Hq,Lq,Lk] applied to the values (with the dropout keep-mask and 1/(1-p)): out [B,Hq,Lq,Dv].
std::vector<double> out_from_weights(const Subject& s, const std::vector<double>& w, bool rescale_dropout = true);

}  // namespace attncheck::diagnose
