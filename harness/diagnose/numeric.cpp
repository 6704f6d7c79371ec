// Numeric hypotheses: lse in the wrong form (base 2, without the row max, from the unscaled max), non-finite rows
// explained by overflow (no max subtraction, fp16 scores) or by poison in masked slots, and precision loss modelled
// directly (scores rounded to fp16/bf16, q and k rounded to tf32, softmax sum and P.V accumulated in fp16).
#include <cmath>
#include <limits>
#include <sstream>

#include "hypotheses.hpp"

namespace attncheck::diagnose {

namespace {

// Jaccard-like agreement between the rows with a non-finite out where a finite one was expected and a predicted set.
double agreement(const std::vector<char>& bad_rows, const std::vector<char>& pred, int64_t& hit, int64_t& nbad) {
  int64_t both = 0, either = 0;
  nbad = 0;
  for (size_t r = 0; r < bad_rows.size(); ++r) {
    both += bad_rows[r] && pred[r], either += bad_rows[r] || pred[r], nbad += bad_rows[r];
  }
  hit = both;
  return either ? static_cast<double>(both) / static_cast<double>(either) : 0.0;
}

// Root-mean-square of (a - b) over the finite elements of both.
double rms_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  int64_t n = 0;
  for (size_t k = 0; k < a.size(); ++k)
    if (std::isfinite(a[k]) && std::isfinite(b[k])) s += (a[k] - b[k]) * (a[k] - b[k]), ++n;
  return n ? std::sqrt(s / static_cast<double>(n)) : 0.0;
}

}  // namespace

std::vector<Cause> numeric_hypotheses(const Subject& s) {
  std::vector<Cause> causes;
  const Problem& p = s.p();
  const int64_t total = s.n_bad_out + s.n_bad_lse;
  if (total == 0) return causes;

  // lse forms (out may be right)
  if (s.n_bad_lse > 0) {
    const double scale = p.effective_scale();
    auto lse_form = [&](const std::string& tag, const std::string& what, const std::function<double(double, double)>& f) {
      std::vector<double> pred(s.ref.lse.size());
      for (size_t r = 0; r < pred.size(); ++r) pred[r] = std::isfinite(s.row_max[r]) ? f(s.ref.lse[r], s.row_max[r]) : s.ref.lse[r];
      const int64_t left = s.bad_lse_against(pred);
      if (left >= s.n_bad_lse) return;
      std::ostringstream e;
      e << what << ": explains " << (s.n_bad_lse - left) << " of " << s.n_bad_lse << " failing lse elements"
        << (s.n_bad_out ? "" : " (out is right)");
      causes.push_back({tag, static_cast<double>(s.n_bad_lse - left) / static_cast<double>(total), e.str()});
    };
    lse_form("lse-base", "lse in base 2 (log2 of the denominator)", [](double l, double) { return l / std::log(2.0); });
    lse_form("lse-missing-max", "lse without the row max (log of the shifted sum only)", [](double l, double m) { return l - m; });
    if (scale != 0 && scale != 1)
      lse_form("lse-unscaled-max", "lse from the unscaled row max (m/scale + log sum)", [&](double l, double m) { return l - m + m / scale; });
  }

  // non-finite out rows where finite ones were expected
  std::vector<char> nf(static_cast<size_t>(s.rows()), 0);
  int64_t n_nf_el = 0;
  for (size_t k = 0; k < s.out.size(); ++k)
    if (std::isfinite(s.ref.out[k]) && !std::isfinite(s.out[k])) nf[k / static_cast<size_t>(p.Dv)] = 1, ++n_nf_el;
  if (n_nf_el > 0) {
    const double frac = static_cast<double>(n_nf_el) / static_cast<double>(total);
    auto rows_cause = [&](const std::string& tag, const std::string& what, const std::vector<char>& pred) {
      int64_t hit = 0, nbad = 0;
      const double a = agreement(nf, pred, hit, nbad);
      if (a <= 0) return;
      std::ostringstream e;
      e << what << ": " << hit << " of " << nbad << " rows with a non-finite out are such rows";
      causes.push_back({tag, a * frac, e.str()});
    };
    const double lim = std::log(p.dtype == DType::f64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max());
    std::vector<char> over(nf.size()), raw16(nf.size()), poison(nf.size());
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          const int64_t r = (b * p.Hq + h) * p.Lq + i;
          over[static_cast<size_t>(r)] = s.row_max[static_cast<size_t>(r)] > lim;
          for (int64_t j = 0; j < p.Lk; ++j) {
            const size_t n = static_cast<size_t>(r * p.Lk + j);
            if (s.vis[n]) {
              const double sc = p.effective_scale();
              if (sc != 0 && std::abs(s.score[n] / sc) > 65504) raw16[static_cast<size_t>(r)] = 1;
              continue;
            }
            if (s.row_visible[static_cast<size_t>(r)] == 0) continue;
            bool bad = false;
            for (int64_t d = 0; d < p.Dqk && !bad; ++d) bad = !std::isfinite(s.c.in.k.at(b, p.kv_head(h), j, d));
            for (int64_t d = 0; d < p.Dv && !bad; ++d) bad = !std::isfinite(s.c.in.v.at(b, p.kv_head(h), j, d));
            if (s.c.in.bias) bad = bad || !std::isfinite(s.c.in.bias->get_offset(broadcast_offset(*s.c.in.bias, b, h, i, j)));
            poison[static_cast<size_t>(r)] |= bad;
          }
        }
    rows_cause("no-max-subtraction", "rows whose max score exceeds log(max float): exp overflows without subtracting the max", over);
    rows_cause("fp16-overflow", "rows with a raw q.k beyond the fp16 range (65504)", raw16);
    rows_cause("nan-leak", "rows whose masked keys hold NaN/Inf poison in K, V or bias", poison);
    std::vector<char> all_nan(nf.size(), 0);
    for (size_t k = 0; k < s.out.size(); ++k)
      if (std::isnan(s.out[k]) && std::isfinite(s.ref.out[k])) all_nan[k / static_cast<size_t>(p.Dv)] = 1;
    std::vector<char> left(nf.size());
    for (size_t r = 0; r < nf.size(); ++r) left[r] = all_nan[r] && !over[r] && !raw16[r] && !poison[r];
    rows_cause("uninitialised-output", "NaN (the harness's poison) left in rows that neither overflow nor see poison", left);
  }

  // precision: modelled errors of the same size as the observed ones
  const double observed = rms_diff(s.out, s.ref.out);
  auto precision = [&](const std::string& tag, const std::string& what, const Prediction& pr) {
    const std::vector<double>& pred = pr.out;
    const double modelled = rms_diff(pred, s.ref.out);
    const int64_t left = s.bad_against(pred);
    const int64_t left_lse = s.lse.empty() ? 0 : s.bad_lse_against(pr.lse);
    const double explained = static_cast<double>(s.n_bad_out - std::min(left, s.n_bad_out) + s.n_bad_lse - std::min(left_lse, s.n_bad_lse)) /
                             static_cast<double>(total);
    const double ratio = modelled > 0 ? observed / modelled : INFINITY;
    const double size_fit = ratio > 1.0 / 3 && ratio < 3 ? 0.5 : 0.0;
    const double score = std::max(explained, size_fit * static_cast<double>(s.n_bad_out) / static_cast<double>(total));
    if (score <= 0) return;
    std::ostringstream e;
    e << what << ": observed rms error " << observed << ", modelled " << modelled << "; the model explains "
      << (s.n_bad_out - std::min(left, s.n_bad_out)) << " of " << s.n_bad_out << " failing out and "
      << (s.n_bad_lse - std::min(left_lse, s.n_bad_lse)) << " of " << s.n_bad_lse << " failing lse elements";
    causes.push_back({tag, score, e.str()});
  };
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    for (DType t : {DType::f16, DType::bf16})
      precision("low-precision-scores", std::string("scores rounded to ") + to_string(t),
                softmax_model(s, [&](int64_t r, int64_t j) { return round_to(t, s.score[static_cast<size_t>(r * p.Lk + j)]); }));
  }
  if (p.dtype != DType::f16)
    precision("low-precision-accumulation", "softmax sum and P.V accumulated in fp16",
              softmax_model(s, [&](int64_t r, int64_t j) { return s.score[static_cast<size_t>(r * p.Lk + j)]; }, true));
  return causes;
}

}  // namespace attncheck::diagnose
