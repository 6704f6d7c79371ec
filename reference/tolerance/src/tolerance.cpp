// The element-wise verdict: compares each output with the reference within the derived bound (the terms are in
// tolerance_bound.cpp, derived in docs/tolerance.md) and names the term that dominated where it failed.
#include "attncheck/tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "attncheck/fp8_out.hpp"

namespace attncheck {
inline namespace tolerance {

std::string TensorVerdict::describe() const {
  static const char* names4[] = {"b", "h", "i", "d"};
  static const char* namesw[] = {"b", "h", "i", "j"};
  std::ostringstream o;
  o.precision(9);
  o << tensor << '[';
  for (int k = 0; k < worst_rank; ++k)
    o << (k ? "," : "") << (tensor == "weights" || tensor == "scores" ? namesw[k] : names4[k]) << '='
      << worst[static_cast<size_t>(k)];
  o << "]: expected " << expected << " actual " << actual << " |err| " << std::abs(actual - expected)
    << (pass ? " <= " : " > ") << "tol " << tolerance;
  if (dominant == kExactDominant)
    o << " (exact case: the answer is representable in the output dtype, any difference is a bug)";
  else if (!dominant.empty())
    o << " (bound dominated by " << dominant << ")";
  if (!pass) o << " (" << n_bad << " of " << n << " elements outside)";
  return o.str();
}

TensorVerdict compare_values(const std::string& name, const std::vector<int64_t>& shape,
                             const std::vector<double>& expected, const std::vector<double>& actual,
                             const std::vector<double>& tol, const ToleranceModel& m, const std::vector<char>* judged,
                             size_t row_len) {
  TensorVerdict v;
  v.tensor = name;
  v.worst_rank = static_cast<int>(shape.size());
  v.n = 0;
  if (actual.size() != expected.size() || tol.size() != expected.size())
    throw std::invalid_argument(name + ": actual has " + std::to_string(actual.size()) + " elements, expected " +
                                std::to_string(expected.size()));
  double worst_ratio = -1.0;
  size_t worst_n = 0;
  for (size_t n = 0; n < expected.size(); ++n) {
    if (judged && !(*judged)[n / row_len]) continue;
    ++v.n;
    const double e = expected[n], a = actual[n];
    double err, ratio;
    bool ok;
    if (!std::isfinite(e)) {
      ok = std::isnan(e) ? std::isnan(a) : a == e;
      err = ok ? 0.0 : std::numeric_limits<double>::infinity();
      ratio = ok ? 0.0 : std::numeric_limits<double>::infinity();
    } else if (!std::isfinite(a)) {
      ok = false;
      err = ratio = std::numeric_limits<double>::infinity();
    } else {
      err = std::abs(a - e);
      ok = err <= tol[n];
      ratio = tol[n] > 0 ? err / tol[n] : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
      v.max_rel_err = std::max(v.max_rel_err, err / std::max(std::abs(e), m.rel_floor));
    }
    if (std::isfinite(e)) v.max_abs_err = std::max(v.max_abs_err, err);
    if (!ok) {
      ++v.n_bad;
      v.pass = false;
    }
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_n = n;
    }
  }
  if (v.n > 0) {
    size_t rest = worst_n;
    for (size_t k = shape.size(); k-- > 0;) {
      v.worst[k] = static_cast<int64_t>(rest % static_cast<size_t>(shape[k]));
      rest /= static_cast<size_t>(shape[k]);
    }
    v.expected = expected[worst_n];
    v.actual = actual[worst_n];
    v.tolerance = tol[worst_n];
  }
  return v;
}

const TensorVerdict& Verdict::worst() const {
  for (const auto& t : tensors)
    if (!t.pass) return t;
  return tensors.front();
}

namespace {
// The name of the largest term of the bound at the verdict's worst element.
template <class F>
void name_dominant(TensorVerdict& v, const std::vector<int64_t>& shape, F terms) {
  if (v.n == 0) return;
  size_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k)
    flat = flat * static_cast<size_t>(shape[k]) + static_cast<size_t>(v.worst[k]);
  const TolTerms t = terms(flat);
  int best = 0;
  for (int k = 1; k < kTolTerms; ++k)
    if (t[static_cast<size_t>(k)] > t[static_cast<size_t>(best)]) best = k;
  v.dominant = to_string(static_cast<TolTerm>(best));
}

// The dtype an output was delivered in: its tensor's, unless widened to double on the way (candidate files keep
// their stored type; a double tensor of a non-fp64 problem is judged in the problem's own output dtype).
DType delivered(const Tensor& t, DType fallback) { return t.dtype == DType::f64 ? fallback : t.dtype; }
}  // namespace

Verdict judge(const Problem& p, const ExpectedAttention& r, const Outputs& actual, const ToleranceModel& m) {
  Verdict v;
  const std::vector<int64_t> out_shape{p.B, p.Hq, p.Lq, p.Dv}, lse_shape{p.B, p.Hq, p.Lq},
      w_shape{p.B, p.Hq, p.Lq, p.Lk};
  const DType d_out = delivered(actual.out, p.dtype);
  std::vector<char> rows;  // sampled reference: the (b, h, i) rows it computed
  if (!r.sampled_rows.empty()) {
    rows.assign(static_cast<size_t>(p.B * p.Hq * p.Lq), 0);
    for (int64_t bh = 0; bh < p.B * p.Hq; ++bh)
      for (int64_t i : r.sampled_rows) rows[static_cast<size_t>(bh * p.Lq + i)] = 1;
  }
  const std::vector<char>* jr = rows.empty() ? nullptr : &rows;
  // Each compared tensor is also profiled (accuracy.hpp) in the ulps of the dtype it was delivered in.
  auto compare = [&](const char* name, const std::vector<int64_t>& shape, const std::vector<double>& e, const Tensor& a,
                     const std::vector<double>& tol, DType d, size_t row_len) {
    const std::vector<double> x = a.to_double();
    v.tensors.push_back(compare_values(name, shape, e, x, tol, m, jr, row_len));
    v.tensors.back().accuracy = profile_accuracy(e, x, tol, d, jr, row_len);
  };
  if (p.fp8_out) {
    // out holds the codes of O * scale_o (fp8_out.hpp): judged as code / scale_o against O saturated to the format.
    std::vector<double> e(r.out.size()), x = actual.out.to_double();
    for (size_t n = 0; n < e.size(); ++n) e[n] = fp8_out_saturated(p, r.out[n]), x[n] = fp8_out_value(p, x[n]);
    const std::vector<double> tol = out_tolerance(p, r, m, d_out);
    v.tensors.push_back(compare_values("out", out_shape, e, x, tol, m, jr, static_cast<size_t>(p.Dv)));
    v.tensors.back().accuracy = profile_accuracy(e, x, tol, d_out, jr, static_cast<size_t>(p.Dv));
  } else {
    compare("out", out_shape, r.out, actual.out, out_tolerance(p, r, m, d_out), d_out, static_cast<size_t>(p.Dv));
  }
  name_dominant(v.tensors.back(), out_shape, [&](size_t n) { return out_terms(p, r, n, d_out, m); });
  if (m.exact_out) v.tensors.back().dominant = kExactDominant;
  auto missing = [&](const char* name) {
    TensorVerdict t;
    t.tensor = name;
    t.pass = false;
    t.n_bad = 1;
    v.tensors.push_back(t);
  };
  if (p.fp8_out) {
    if (!actual.amax_o) {
      missing("amax_o");
    } else {
      // max |O| over the whole output: every row must have been computed.
      if (jr) throw std::invalid_argument("fp8_out: amax_o cannot be judged on sampled rows");
      const DType d = delivered(*actual.amax_o, p.stat_dtype());
      compare("amax_o", {1}, {fp8_out_amax(r.out)}, *actual.amax_o, {amax_o_tolerance(p, r, m)}, d, 1);
    }
  }
  if (p.want_lse) {
    if (!actual.lse) {
      missing("lse");
    } else {
      const DType d = delivered(*actual.lse, p.stat_dtype());
      compare("lse", lse_shape, r.lse, *actual.lse, lse_tolerance(p, r, m, d), d, 1);
      name_dominant(v.tensors.back(), lse_shape, [&](size_t n) { return lse_terms(p, r, n, d, m); });
    }
  }
  if (p.want_weights) {
    if (!actual.weights) {
      missing("weights");
    } else {
      const DType d = delivered(*actual.weights, p.stat_dtype());
      compare("weights", w_shape, r.weights, *actual.weights, weights_tolerance(p, r, m, d), d,
              static_cast<size_t>(p.Lk));
      name_dominant(v.tensors.back(), w_shape, [&](size_t n) { return weights_terms(p, r, n, d, m); });
    }
  }
  if (p.scores_out != ScoresOut::none) {
    if (!actual.scores) {
      missing("scores");
    } else {
      const DType d = delivered(*actual.scores, p.stat_dtype());
      compare("scores", w_shape, r.scores, *actual.scores, scores_tolerance(p, r, m, d), d, static_cast<size_t>(p.Lk));
      name_dominant(v.tensors.back(), w_shape, [&](size_t n) { return scores_terms(p, r, n, d, m); });
    }
  }
  if (p.max_logit != MaxLogitOut::none) {
    if (!actual.max_logit) {
      missing("max_logit");
    } else {
      // Rows as the reference computes them; the heads form is each head's maximum over b and i, within the
      // largest tolerance of its rows (|max a - max e| <= max |a - e|).
      const DType d = delivered(*actual.max_logit, p.stat_dtype());
      std::vector<double> e = r.max_logit, tol = max_logit_tolerance(p, r, m, d);
      const std::vector<int64_t> shape = max_logit_shape(p);
      if (p.max_logit == MaxLogitOut::heads) {
        if (jr) throw std::invalid_argument("max_logit=heads cannot be judged on sampled rows (use max_logit=rows)");
        std::vector<double> t(static_cast<size_t>(p.Hq), 0.0);
        for (size_t n = 0; n < tol.size(); ++n) {
          double& x = t[n / static_cast<size_t>(p.Lq) % static_cast<size_t>(p.Hq)];
          x = std::max(x, tol[n]);
        }
        e = max_logit_heads(p, e), tol = std::move(t);
      }
      compare("max_logit", shape, e, *actual.max_logit, tol, d, 1);
      if (p.max_logit == MaxLogitOut::rows)
        name_dominant(v.tensors.back(), shape, [&](size_t n) { return max_logit_terms(p, r, n, d, m); });
    }
  }
  if (p.past_len > 0) {
    // present = concat(past, new) is a copy: exact, element by element (NaN where the input holds NaN).
    const std::pair<const char*, const std::vector<double>*> expected[] = {{"present_k", &r.present_k},
                                                                           {"present_v", &r.present_v}};
    for (const auto& [name, e] : expected) {
      const std::optional<Tensor>& a = name == expected[0].first ? actual.present_k : actual.present_v;
      if (!a) {
        missing(name);
        continue;
      }
      v.tensors.push_back(compare_values(name, a->shape, *e, a->to_double(), std::vector<double>(e->size(), 0.0), m));
      v.tensors.back().dominant = "exact copy";
    }
  }
  if (jr) v.tensors.push_back(reference_free_checks(p, actual));
  for (const auto& t : v.tensors) v.pass = v.pass && t.pass;
  return v;
}

}  // namespace tolerance
}  // namespace attncheck
