// Numeric hypotheses: lse in the wrong form (base 2, without the row max, from the unscaled max), non-finite rows
// explained by overflow (no max subtraction, fp16 scores) or by poison in masked slots, and precision loss modelled
// directly (scores rounded to fp16/bf16, q and k rounded to tf32, softmax sum and P.V accumulated in fp16).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// Round to TF32 (10-bit mantissa, round to nearest even), the operand precision of tensor cores.
double tf32(double x) {
  float f = static_cast<float>(x);
  if (!std::isfinite(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0xFFFu + ((u >> 13) & 1u);
  u &= ~0x1FFFu;
  std::memcpy(&f, &u, 4);
  return f;
}

// Online softmax over key tiles of T with unnormalised accumulators (FlashAttention's structure). `missed`: the
// first tile boundary at which the running max grows keeps the old scale (the accumulators are not multiplied by
// exp(m_old - m_new)). `pv_acc`: the P.V accumulators round to that dtype after every add.
Prediction online_softmax(const Subject& s, int64_t T, bool missed_rescale, DType pv_acc = DType::f64) {
  const Problem& p = s.p();
  Prediction pr{s.ref.out, s.ref.lse};
  for (int64_t r = 0; r < s.rows(); ++r) {
    const int64_t b = r / (p.Hq * p.Lq), h = r / p.Lq % p.Hq;
    double m = -INFINITY, l = 0;
    std::vector<double> acc(static_cast<size_t>(p.Dv), 0.0);
    bool missed = false;
    for (int64_t j0 = 0; j0 < p.Lk; j0 += T) {
      const int64_t j1 = std::min(p.Lk, j0 + T);
      double bm = m;
      for (int64_t j = j0; j < j1; ++j)
        if (s.vis[static_cast<size_t>(r * p.Lk + j)]) bm = std::max(bm, s.score[static_cast<size_t>(r * p.Lk + j)]);
      if (bm == -INFINITY) continue;
      double alpha = m == -INFINITY ? 0.0 : std::exp(m - bm);
      if (missed_rescale && !missed && j0 > 0 && bm > m) alpha = 1.0, missed = true;
      l *= alpha;
      for (double& a : acc) a *= alpha;
      for (int64_t j = j0; j < j1; ++j) {
        const size_t n = static_cast<size_t>(r * p.Lk + j);
        if (!s.vis[n]) continue;
        const double e = std::exp(s.score[n] - bm);
        l += e;
        for (int64_t d = 0; d < p.Dv; ++d)
          acc[static_cast<size_t>(d)] =
              round_to(pv_acc, acc[static_cast<size_t>(d)] + e * s.c.in.v.at(b, p.kv_head(h), j, d));
      }
      m = bm;
    }
    if (m == -INFINITY || p.dropout_p > 0) continue;
    for (int64_t d = 0; d < p.Dv; ++d) pr.out[static_cast<size_t>(r * p.Dv + d)] = acc[static_cast<size_t>(d)] / l;
    pr.lse[static_cast<size_t>(r)] = m + std::log(l);
  }
  return pr;
}

}  // namespace

std::vector<Cause> numeric_hypotheses(const Subject& s) {
  std::vector<Cause> causes;
  const Problem& p = s.p();
  // The max-logit output at another stage (out and lse may be right): the row max of the scaled logits before every
  // modification and the bias, or of the unscaled dot products.
  if (s.n_bad_ml > 0) {
    const int64_t all = s.n_bad_out + s.n_bad_lse + s.n_bad_ml;
    const double scale = p.effective_scale();
    auto stage = [&](const std::string& what, double factor) {
      std::vector<double> pred(static_cast<size_t>(s.rows()), -std::numeric_limits<double>::infinity());
      for (size_t r = 0; r < pred.size(); ++r) {
        for (size_t j = 0; j < static_cast<size_t>(p.Lk); ++j)
          if (s.vis[r * static_cast<size_t>(p.Lk) + j])
            pred[r] = std::max(pred[r], s.logit[r * static_cast<size_t>(p.Lk) + j] * factor);
        if (pred[r] == -std::numeric_limits<double>::infinity())
          pred[r] = s.ref.max_logit[r];  // no visible key: the fill
      }
      if (p.max_logit == MaxLogitOut::heads) pred = max_logit_heads(p, pred);
      // Explained: a failing element the prediction matches (within the tolerance plus 4 units of fp32 roundoff)
      // where the prediction itself is outside the reference's tolerance.
      int64_t hit = 0;
      const double u = unit_roundoff(DType::f32);
      for (size_t k = 0; k < pred.size(); ++k)
        hit += s.bad_ml[k] && !is_bad(pred[k], s.ml[k], s.tol_ml[k] + 4 * u * std::abs(pred[k])) &&
               is_bad(s.ml_expected[k], pred[k], s.tol_ml[k]);
      if (hit == 0) return;
      std::ostringstream e;
      e << "max-logit output " << what << ": explains " << hit << " of " << s.n_bad_ml << " failing max_logit elements"
        << (s.n_bad_out + s.n_bad_lse ? "" : " (out and lse are right)");
      causes.push_back({"max-logit-stage", static_cast<double>(hit) / static_cast<double>(all), e.str()});
    };
    stage("of the scaled logits before the modifications and bias", 1.0);
    if (scale != 0 && scale != 1) stage("of the unscaled dot products", 1.0 / scale);
  }
  const int64_t total = s.n_bad_out + s.n_bad_lse;
  if (total == 0) return causes;

  // lse forms (out may be right)
  if (s.n_bad_lse > 0) {
    const double scale = p.effective_scale();
    auto lse_form = [&](const std::string& tag, const std::string& what,
                        const std::function<double(double, double)>& f) {
      std::vector<double> pred(s.ref.lse.size());
      for (size_t r = 0; r < pred.size(); ++r)
        pred[r] = std::isfinite(s.row_max[r]) ? f(s.ref.lse[r], s.row_max[r]) : s.ref.lse[r];
      const int64_t left = s.bad_lse_against(pred);
      if (left >= s.n_bad_lse) return;
      std::ostringstream e;
      e << what << ": explains " << (s.n_bad_lse - left) << " of " << s.n_bad_lse << " failing lse elements"
        << (s.n_bad_out ? "" : " (out is right)");
      causes.push_back({tag, static_cast<double>(s.n_bad_lse - left) / static_cast<double>(total), e.str()});
    };
    lse_form("lse-base", "lse in base 2 (log2 of the denominator)", [](double l, double) { return l / std::log(2.0); });
    lse_form("lse-offset", "lse off by log 2", [](double l, double) { return l + std::log(2.0); });
    lse_form("lse-missing-max", "lse without the row max (log of the shifted sum only)",
             [](double l, double m) { return l - m; });
    if (scale != 0 && scale != 1)
      lse_form("lse-unscaled-max", "lse from the unscaled row max (m/scale + log sum)",
               [&](double l, double m) { return l - m + m / scale; });
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
    const double lim =
        std::log(p.dtype == DType::f64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max());
    auto underflows = [&](double m) {
      return m > -INFINITY && (p.dtype == DType::f64 ? std::exp(m) == 0 : std::exp(static_cast<float>(m)) == 0.0f);
    };
    std::vector<char> over(nf.size()), raw16(nf.size()), poison(nf.size()), negscale(nf.size());
    const bool neg_fill = p.effective_scale() < 0 && p.fill != MaskFill::finite;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          const int64_t r = (b * p.Hq + h) * p.Lq + i;
          // Without the max subtracted, exp overflows past log(max), and a row whose every visible score lies below
          // log(smallest subnormal) sums to 0 (0 / 0): a score modification such as ALiBi at long distances does that
          over[static_cast<size_t>(r)] = s.row_max[static_cast<size_t>(r)] > lim || underflows(s.row_max[size_t(r)]);
          // a -inf fill multiplied by a negative scale is +inf: NaN in every row with a visible and a masked key
          const int64_t nvis = s.row_visible[static_cast<size_t>(r)];
          negscale[static_cast<size_t>(r)] = neg_fill && nvis > 0 && nvis < p.Lk;
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
            if (s.c.in.bias)
              bad = bad || !std::isfinite(s.c.in.bias->get_offset(broadcast_offset(*s.c.in.bias, b, h, i, j)));
            poison[static_cast<size_t>(r)] |= bad;
          }
        }
    rows_cause("no-max-subtraction",
               "rows whose max score exceeds log(max float) or lies below log(min float): exp overflows, or every term "
               "underflows to 0, without subtracting the max",
               over);
    rows_cause("fp16-overflow", "rows with a raw q.k beyond the fp16 range (65504)", raw16);
    rows_cause("nan-leak", "rows whose masked keys hold NaN/Inf poison in K, V or bias", poison);
    rows_cause("negative-scale-mask", "rows with masked keys under a negative scale (mask fill scaled to +inf)",
               negscale);
    std::vector<char> all_nan(nf.size(), 0);
    for (size_t k = 0; k < s.out.size(); ++k)
      if (std::isnan(s.out[k]) && std::isfinite(s.ref.out[k])) all_nan[k / static_cast<size_t>(p.Dv)] = 1;
    std::vector<char> left(nf.size());
    for (size_t r = 0; r < nf.size(); ++r) left[r] = all_nan[r] && !over[r] && !raw16[r] && !poison[r] && !negscale[r];
    rows_cause("uninitialised-output", "NaN (the harness's poison) left in rows that neither overflow nor see poison",
               left);
  }

  // precision: modelled errors of the same size as the observed ones. A rounding model predicts the size and spread
  // of the error better than its elements, so it also scores by how close the modelled rms error and the number of
  // elements the model itself fails are to the observed ones (out and lse apart, weighted by their failing
  // elements): 0.5 when both agree, each factor falling to 0 at a ratio of 3. The count keeps a few scattered bad
  // elements (a race, a stray write) from passing for rounding, which spreads over the whole output.
  const double observed = rms_diff(s.out, s.ref.out);
  const double observed_lse = s.lse.empty() ? 0.0 : rms_diff(s.lse, s.ref.lse);
  auto near = [](double obs, double mod) {
    if (!(mod > 0) || !(obs > 0)) return 0.0;
    return std::max(0.0, 1.0 - std::abs(std::log(obs / mod)) / std::log(3.0));
  };
  auto failing = [](const std::vector<double>& ref, const std::vector<double>& pred, const std::vector<double>& tol) {
    int64_t n = 0;
    for (size_t k = 0; k < ref.size() && k < pred.size(); ++k) n += is_bad(ref[k], pred[k], tol[k]);
    return static_cast<double>(n);
  };
  auto size_fit = [&](double obs, double mod, int64_t n_obs, double n_mod) {
    return 0.5 * near(obs, mod) * near(static_cast<double>(n_obs), n_mod);
  };
  auto precision = [&](const std::string& tag, const std::string& what, const Prediction& pr) {
    const std::vector<double>& pred = pr.out;
    const double modelled = rms_diff(pred, s.ref.out);
    const double modelled_lse = s.lse.empty() ? 0.0 : rms_diff(pr.lse, s.ref.lse);
    const int64_t left = s.bad_against(pred);
    const int64_t left_lse = s.lse.empty() ? 0 : s.bad_lse_against(pr.lse);
    const double explained =
        static_cast<double>(s.n_bad_out - std::min(left, s.n_bad_out) + s.n_bad_lse - std::min(left_lse, s.n_bad_lse)) /
        static_cast<double>(total);
    const double fit_out =
        s.n_bad_out ? size_fit(observed, modelled, s.n_bad_out, failing(s.ref.out, pred, s.tol_out)) : 0.0;
    const double fit_lse =
        s.n_bad_lse ? size_fit(observed_lse, modelled_lse, s.n_bad_lse, failing(s.ref.lse, pr.lse, s.tol_lse)) : 0.0;
    const double fit = (static_cast<double>(s.n_bad_out) * fit_out + static_cast<double>(s.n_bad_lse) * fit_lse) /
                       static_cast<double>(total);
    // Matching elements count only as far as the model also fails about as many elements as the candidate: the
    // prediction slack of a 16-bit type is wide enough that a model failing 60 elements "matches" 2 of 5 scattered
    // bad ones (test NoSignature).
    const double count_out =
        s.n_bad_out ? near(static_cast<double>(s.n_bad_out), failing(s.ref.out, pred, s.tol_out)) : 0.0;
    const double count_lse =
        s.n_bad_lse ? near(static_cast<double>(s.n_bad_lse), failing(s.ref.lse, pr.lse, s.tol_lse)) : 0.0;
    const double count = (static_cast<double>(s.n_bad_out) * count_out + static_cast<double>(s.n_bad_lse) * count_lse) /
                         static_cast<double>(total);
    const double score = std::max(explained * count, fit);
    if (score <= 0) return;
    std::ostringstream e;
    e << what << ": observed rms error " << observed << ", modelled " << modelled << " (the model fails "
      << failing(s.ref.out, pred, s.tol_out) << " out elements itself)";
    if (s.n_bad_lse > 0) e << " (lse " << observed_lse << ", modelled " << modelled_lse << ")";
    e << "; the model explains " << (s.n_bad_out - std::min(left, s.n_bad_out)) << " of " << s.n_bad_out
      << " failing out and " << (s.n_bad_lse - std::min(left_lse, s.n_bad_lse)) << " of " << s.n_bad_lse
      << " failing lse elements";
    causes.push_back({tag, score, e.str()});
  };
  // Scores rounded to a 16-bit type: a bug for every input dtype under the precision contract (fp32 scores).
  for (DType t : {DType::f16, DType::bf16})
    precision("low-precision-scores", std::string("scores rounded to ") + to_string(t),
              softmax_model(
                  s, [&](int64_t r, int64_t j) { return round_to(t, s.score[static_cast<size_t>(r * p.Lk + j)]); }));
  // Accumulators in a 16-bit type: a bug for every input dtype too (the contract accumulates in fp32), including
  // accumulating in the inputs' own 16-bit type.
  precision(
      "low-precision-accumulation", "softmax sum and P.V accumulated in fp16",
      softmax_model(
          s, [&](int64_t r, int64_t j) { return s.score[static_cast<size_t>(r * p.Lk + j)]; }, DType::f16, DType::f16));
  precision("low-precision-accumulation", "P.V accumulated in bf16",
            softmax_model(
                s, [&](int64_t r, int64_t j) { return s.score[static_cast<size_t>(r * p.Lk + j)]; }, DType::f64,
                DType::bf16));
  // The same in a tiled kernel: unnormalised P.V accumulators in bf16, rescaled at every tile where the max grows.
  if (p.dropout_p == 0)
    for (int64_t T : {64, 128})
      if (p.Lk > T)
        precision("low-precision-accumulation",
                  "P.V accumulated in bf16 by an online softmax over key tiles of " + std::to_string(T) +
                      " (unnormalised accumulators)",
                  online_softmax(s, T, false, DType::bf16));
  // Working precision: an fp64 problem computed in fp32 throughout (scores, sums, P.V, out), as a kernel that runs
  // fp64 problems on its fp32 path does. The evidence names the bits of relative precision the observed errors are
  // consistent with (-log2 of the RMS error relative to the reference, accuracy.hpp's effective bits).
  if (p.dtype == DType::f64) {
    Prediction pr = softmax_model(
        s, [&](int64_t r, int64_t j) { return round_to(DType::f32, s.score[static_cast<size_t>(r * p.Lk + j)]); },
        DType::f32, DType::f32);
    for (double& x : pr.out) x = round_to(DType::f32, x);
    double err2 = 0, ref2 = 0;
    for (size_t k = 0; k < s.out.size(); ++k)
      if (std::isfinite(s.out[k]) && std::isfinite(s.ref.out[k]))
        err2 += (s.out[k] - s.ref.out[k]) * (s.out[k] - s.ref.out[k]), ref2 += s.ref.out[k] * s.ref.out[k];
    std::ostringstream what;
    what.precision(3);
    what << "the fp64 problem computed in fp32";
    if (err2 > 0 && ref2 > 0)
      what << " (out's errors are consistent with " << -0.5 * std::log2(err2 / ref2)
           << " effective bits; fp64 work gives about 50)";
    precision("working-precision", what.str(), pr);
  }
  if (p.dtype == DType::f32) {
    prop::Case d = s.c;
    for (Tensor* t : {&d.in.q, &d.in.k, &d.in.v})
      for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, tf32(t->get_offset(n)));
    d.p.want_weights = false, d.p.want_lse = true;
    const ReferenceResult r = reference_attention(d.p, d.in);
    precision("tf32", "q, k and v rounded to TF32 (10-bit mantissa)", Prediction{r.out, r.lse});
  }
  if (p.dropout_p == 0)
    for (int64_t T : {16, 32, 64, 128})
      if (p.Lk > T)
        precision("missed-rescale",
                  "online softmax over key tiles of " + std::to_string(T) +
                      ": one tile boundary where the max grows is not rescaled",
                  online_softmax(s, T, true));

  // rows off by a constant factor (a wrong normaliser): a weak, two-parameter-per-row fit, so scored at 0.8
  if (s.n_bad_out > 0) {
    std::vector<double> pred = s.ref.out;
    int64_t rows = 0;
    for (int64_t r = 0; r < s.rows(); ++r) {
      double ae = 0, ee = 0;
      bool bad = false;
      for (int64_t d = 0; d < p.Dv; ++d) {
        const size_t k = static_cast<size_t>(r * p.Dv + d);
        bad = bad || s.bad_out[k];
        if (std::isfinite(s.out[k]) && std::isfinite(s.ref.out[k]))
          ae += s.out[k] * s.ref.out[k], ee += s.ref.out[k] * s.ref.out[k];
      }
      if (!bad || ee == 0) continue;
      ++rows;
      for (int64_t d = 0; d < p.Dv; ++d) pred[static_cast<size_t>(r * p.Dv + d)] *= ae / ee;
    }
    const int64_t left = s.bad_against(pred);
    if (left < s.n_bad_out && rows > 0) {
      std::ostringstream e;
      e << rows << " failing rows are the reference's rows times a per-row constant (a wrong normaliser); explains "
        << (s.n_bad_out - left) << " of " << s.n_bad_out << " failing out elements";
      causes.push_back(
          {"row-scale", 0.8 * static_cast<double>(s.n_bad_out - left) / static_cast<double>(total), e.str()});
    }
  }
  return causes;
}

}  // namespace attncheck::diagnose
