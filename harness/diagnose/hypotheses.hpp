// Hypotheses about the cause of a failure: each predicts the candidate's outputs under one bug (the reference on a
// derived problem, or a direct model of the bug) and scores by the fraction of failing elements the prediction
// explains. Pure functions of the Subject; no re-runs of the candidate.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "derive.hpp"
#include "diagnosis.hpp"
#include "subject.hpp"

namespace attncheck::diagnose {

// Collects the causes of one diagnosis. add() scores a prediction of out (and lse when given) against the candidate:
// the fraction of the failing out and lse elements it explains. When the candidate returned weights and the
// prediction has them, that fraction is scaled by the weights' fit (failing weights explained / (failing weights +
// weights the prediction contradicts)), and it is the whole score where only weights fail: weights show which keys a
// kernel read, which out and lse can hide (a NaN row is NaN whichever keys leaked it).
struct Scorer {
  const Subject& s;
  std::vector<Cause>& out;
  // With tol_out / tol_lse, the candidate is held to the prediction within those tolerances.
  void add(const std::string& tag, const std::string& what, const std::vector<double>& pred_out,
           const std::vector<double>* pred_lse = nullptr, const std::vector<double>* pred_w = nullptr,
           const std::vector<double>* tol_out = nullptr, const std::vector<double>* tol_lse = nullptr);
  // The reference on a derived case as the prediction; silently skipped when the derived case is invalid.
  void variant(const std::string& tag, const std::string& what, const std::function<prop::Case()>& make);
  // The same, with the derived case's own tolerance: for a bug that changes which keys a row sums over, and so how
  // the kernel's rounding grows, where the original row's tolerance would call a faithful prediction off.
  void judged_variant(const std::string& tag, const std::string& what, const std::function<prop::Case()>& make);
};

// Causes whose predictions explain some failing elements, unsorted, scores in (0, 1].
std::vector<Cause> structural_hypotheses(const Subject& s);  // masks, alignment, scale, GQA, tiles, layout, policy
std::vector<Cause> numeric_hypotheses(const Subject& s);     // lse forms, non-finite rows, precision
// The reference with every mask replaced by one boolean mask of the keys `sees` lets through, held to that case's own
// tolerance (Scorer::judged_variant); skipped when it changes no failing row.
void add_visibility(Scorer& sc, const std::string& tag, const std::string& what, const Sees& sees);
// Score and mask modifications (mods.hpp) and the block masks derived from them (block_mask.hpp): an entry left
// out, ALiBi's sign or head, a document or chunk boundary one token off, blocks treated as full or never read.
void modification_hypotheses(Scorer& sc);
// Serving caches: a quantized KV cache's scales dropped or read from the wrong group, a 4-bit cache's nibbles, offset
// or min misread; top-k padding read as a key.
void cache_hypotheses(Scorer& sc);
// An fp8 output: scale_o ignored or applied as a descale; amax_o in scale_o units or taken after the cast.
void fp8_out_hypotheses(Scorer& sc);
// Keys never read (a whole tile anywhere, one key per row), reported through `add(tag, what, out, lse)`.
void key_hypotheses(const Subject& s,
                    const std::function<void(const std::string&, const std::string&, const std::vector<double>&,
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
