// What every part of the diagnosis looks at: the case, the reference, the candidate's outputs flattened to logical
// order, per-element tolerances, which elements fail, and the scores the reference saw (for |logit| and row maxima).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "case.hpp"

namespace attncheck::diagnose {

// Outside tolerance the way judge() counts it: a non-finite expectation must be matched in kind.
inline bool is_bad(double e, double a, double tol) {
  if (!std::isfinite(e)) return std::isnan(e) ? !std::isnan(a) : a != e;
  return !std::isfinite(a) || std::abs(a - e) > tol;
}

struct Subject {
  const prop::Case& c;                // with K and V contiguous (derive.hpp contiguous_kv)
  const prop::Case* paged = nullptr;  // the case as given, when its K and V are paged
  const ExpectedAttention& ref;
  ModSet mods;                      // the case's score and mask modifications (score mods as the reference)
  std::vector<double> out, lse, w;  // candidate, logical order (lse / w empty when not produced)
  std::vector<double> tol_out, tol_lse, tol_w;
  ToleranceModel model;                                  // the tolerance model the candidate was judged under
  DType out_dtype = DType::f64, lse_dtype = DType::f64;  // as the candidate delivered them
  std::vector<char> bad_out, bad_lse, bad_w;
  int64_t n_bad_out = 0, n_bad_lse = 0, n_bad_w = 0;
  // The max-logit output as judged (problem.max_logit: rows [B,Hq,Lq] or heads [Hq]), its expected values and
  // tolerances in that shape; empty when not produced.
  std::vector<double> ml, ml_expected, tol_ml;
  std::vector<char> bad_ml;
  int64_t n_bad_ml = 0;
  // An fp8 output (problem.fp8_out): `out` above is the candidate's codes read as code / scale_o and judged against
  // O saturated, as judge() does; amax_o as judged, its expected max |O| and tolerance ([1] each; empty when not
  // produced).
  std::vector<double> amax, amax_expected, tol_amax;
  std::vector<char> bad_amax;
  int64_t n_bad_amax = 0;
  std::vector<char> vis;             // [B,Hq,Lq,Lk] visibility under the problem's masks
  std::vector<double> score;         // [B,Hq,Lq,Lk] scaled scores through every modification, NaN where masked
  std::vector<double> logit;         // [B,Hq,Lq,Lk] scale * q.k (after QK-norm and RoPE) for every key, before any
                                     // score modification
  std::vector<double> row_max;       // [B,Hq,Lq] max visible score (-inf for fully masked rows)
  std::vector<int64_t> row_visible;  // [B,Hq,Lq] visible key count

  Subject(const prop::Case& cs, const ExpectedAttention& r, const Outputs& actual, const ToleranceModel& m);
  const Problem& p() const { return c.p; }
  int64_t rows() const { return c.p.B * c.p.Hq * c.p.Lq; }
  // Count of out elements outside tolerance when `expected` is taken as the truth instead of the reference, plus
  // the failing elements where `expected` itself is within the reference's tolerance (it does not predict them).
  // With `tol`, the candidate is compared with `expected` under that tolerance (the prediction's own, when it is the
  // reference on a derived case) instead of the reference's.
  int64_t bad_against(const std::vector<double>& expected, const std::vector<double>* tol = nullptr) const;
  int64_t bad_lse_against(const std::vector<double>& expected, const std::vector<double>* tol = nullptr) const;
  // Against predicted weights: the failing weights the prediction explains (it fails there itself and the candidate
  // matches it), and the weights it contradicts (it fails there, the candidate is right).
  struct WeightsFit {
    int64_t explained = 0, contradicted = 0;
  };
  WeightsFit weights_fit(const std::vector<double>& expected) const;
  // The score key j would have in row r if no mask hid it (the logit stage, then bias, then the score
  // modifications, as the reference); NaN where a score modification cannot be evaluated there.
  double unmasked_score(int64_t r, int64_t j) const;
  ModAt at(int64_t r, int64_t j) const;  // where row r (b, h, i flattened) meets key j
};

}  // namespace attncheck::diagnose
