// `attncheck inspect`'s text (see inspect.hpp).
#include "inspect.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"
#include "diagnosis.hpp"

namespace attncheck::verify {
namespace {

void stats(std::FILE* out, const char* name, const std::vector<double>& v, const char* extra = "") {
  double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
  int64_t finite = 0, nan = 0, inf = 0, zero = 0;
  for (double x : v) {
    if (std::isnan(x)) {
      ++nan;
      continue;
    }
    if (std::isinf(x)) {
      ++inf;
      continue;
    }
    ++finite;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    sq += x * x;
    zero += x == 0;
  }
  const double mean = finite ? sum / double(finite) : NAN;
  const double sd = finite ? std::sqrt(std::max(0.0, sq / double(finite) - mean * mean)) : NAN;
  std::fprintf(out,
               "  %-10s n=%-8zu min %-11.4g max %-11.4g mean %-11.4g std %-10.4g zeros %-6lld nan %-5lld inf %lld%s\n",
               name, v.size(), lo, hi, mean, sd, static_cast<long long>(zero), static_cast<long long>(nan),
               static_cast<long long>(inf), extra);
}

}  // namespace

void print_fixture(std::FILE* out, const std::string& path, const Fixture& f) {
  const Problem& p = f.problem;
  std::fprintf(out, "fixture     %s\ncase        %s\nproblem     %s\n", path.c_str(), f.name.c_str(), p.name().c_str());
  std::fprintf(out, "dtype       %s, layout %s (q, k, v and out stored %s)\n", to_string(p.dtype), to_string(p.layout),
               p.layout == Layout::BHSD ? "[B,H,L,D]" : "[B,L,H,D]");
  std::fprintf(out,
               "shapes      q [%lld,%lld,%lld,%lld]  k [%lld,%lld,%lld,%lld]  v [%lld,%lld,%lld,%lld]  "
               "out [%lld,%lld,%lld,%lld] (logical B,H,L,D)\n",
               (long long)p.B, (long long)p.Hq, (long long)p.Lq, (long long)p.Dqk, (long long)p.B, (long long)p.Hkv,
               (long long)p.Lk, (long long)p.Dqk, (long long)p.B, (long long)p.Hkv, (long long)p.Lk, (long long)p.Dv,
               (long long)p.B, (long long)p.Hq, (long long)p.Lq, (long long)p.Dv);
  std::fprintf(out, "features\n");
  std::fprintf(out, "  scale       %.9g%s\n", p.effective_scale(), p.scale ? " (explicit)" : " (default 1/sqrt(Dqk))");
  if (p.Hq != p.Hkv) std::fprintf(out, "  GQA         %lld query heads per KV head\n", (long long)p.group_size());
  if (p.causal) std::fprintf(out, "  causal      alignment %s\n", to_string(p.alignment));
  if (p.alignment == Alignment::explicit_ && (p.causal || p.has_window()))
    std::fprintf(
        out, "  offsets     %s\n",
        p.causal_offsets.empty() ? std::to_string(p.causal_offset).c_str() : shape_string(p.causal_offsets).c_str());
  if (!p.key_lengths.empty()) std::fprintf(out, "  key_lengths %s\n", shape_string(p.key_lengths).c_str());
  if (p.mask_shape)
    std::fprintf(out, "  bool mask   %s\n", shape_string({p.mask_shape->begin(), p.mask_shape->end()}).c_str());
  if (p.bias_shape)
    std::fprintf(out, "  bias        %s %s\n", shape_string({p.bias_shape->begin(), p.bias_shape->end()}).c_str(),
                 to_string(p.bias_dtype));
  if (p.has_window())
    std::fprintf(out, "  window      left %lld right %lld (-1 unbounded), alignment %s\n", (long long)p.window_left,
                 (long long)p.window_right, to_string(p.alignment));
  for (const ModEntry& m : logit_modifications())
    if (m.used(p))
      for (const Field& x : m.fields) std::fprintf(out, "  %-11s %s\n", x.key, field_text(p, x).c_str());
  const bool finite = p.fill == MaskFill::finite;
  std::fprintf(out, "  fill        %s%s%s, fully masked rows -> %s\n", to_string(p.fill), finite ? " " : "",
               finite ? std::to_string(p.fill_value).c_str() : "", to_string(p.fully_masked));
  if (p.dropout_p > 0)
    std::fprintf(out, "  dropout     p %g seed %llu\n", p.dropout_p, (unsigned long long)p.dropout_seed);
  std::fprintf(out, "  outputs     out%s%s%s\n", p.want_lse ? ", lse" : "", p.want_weights ? ", weights" : "",
               p.max_logit == MaxLogitOut::none   ? ""
               : p.max_logit == MaxLogitOut::rows ? ", max_logit [B,Hq,Lq]"
                                                  : ", max_logit [Hq]");
  std::fprintf(out, "inputs\n");
  stats(out, "q", f.inputs.q.to_double());
  stats(out, "k", f.inputs.k.to_double());
  stats(out, "v", f.inputs.v.to_double());
  if (f.inputs.mask) stats(out, "mask", f.inputs.mask->to_double(), "  (1 = attend)");
  if (f.inputs.bias) stats(out, "bias", f.inputs.bias->to_double());
  if (f.inputs.keep) stats(out, "keep", f.inputs.keep->to_double(), "  (1 = kept)");
  std::fprintf(out, "expected (reference, %s)\n", f.provenance.reference_precision.c_str());
  stats(out, "out", f.expected.out);
  int64_t masked_rows = 0;
  for (double x : f.expected.lse) masked_rows += std::isinf(x) && x < 0;
  char extra[64];
  std::snprintf(extra, sizeof extra, "  (%lld rows with lse -inf)", static_cast<long long>(masked_rows));
  stats(out, "lse", f.expected.lse, extra);
  if (p.want_weights) stats(out, "weights", f.expected.weights);
  std::fprintf(out,
               "provenance  schema_version %lld, attncheck %s, seed %llu, distribution %s\n            command: %s\n",
               (long long)f.provenance.schema_version, f.provenance.attncheck_version.c_str(),
               (unsigned long long)f.provenance.seed, f.provenance.distribution.c_str(), f.provenance.command.c_str());
  std::vector<double> tol = out_tolerance(p, f.expected, f.tolerance);
  std::sort(tol.begin(), tol.end());
  std::fprintf(out, "tolerance   lambda %g, rel_floor %g; out tolerance min %.3g median %.3g max %.3g\n",
               f.tolerance.lambda, f.tolerance.rel_floor, tol.front(), tol[tol.size() / 2], tol.back());
}

bool print_candidate(std::FILE* out, const Fixture& f, const std::string& actual, int top) {
  const Outputs cand = read_candidate(actual, f.problem);
  Problem p = f.problem;
  p.want_lse = cand.lse.has_value();
  p.want_weights = cand.weights.has_value() && f.problem.want_weights;
  const Verdict v = judge(p, f.expected, cand, f.tolerance);
  std::fprintf(out, "\ncandidate   %s: %s\n", actual.c_str(), v.pass ? "PASS" : "FAIL");
  for (const auto& t : v.tensors)
    std::fprintf(out, "  %-8s max abs %.3g  max rel %.3g  %s\n", t.tensor.c_str(), t.max_abs_err, t.max_rel_err,
                 t.describe().c_str());
  // The worst elements of out by error / tolerance.
  const std::vector<double> e = f.expected.out, a = cand.out.to_double(),
                            tol = out_tolerance(p, f.expected, f.tolerance);
  std::vector<size_t> idx(e.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  auto ratio = [&](size_t n) {
    if (std::isnan(e[n])) return std::isnan(a[n]) ? 0.0 : INFINITY;
    if (!std::isfinite(a[n]) || !std::isfinite(e[n])) return a[n] == e[n] ? 0.0 : INFINITY;
    return std::abs(a[n] - e[n]) / std::max(tol[n], 1e-300);
  };
  const size_t k = std::min<size_t>(static_cast<size_t>(std::max(top, 0)), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                    [&](size_t x, size_t y) { return ratio(x) > ratio(y); });
  std::fprintf(out, "  worst out elements (error / tolerance):\n");
  for (size_t r = 0; r < k; ++r) {
    const size_t n = idx[r];
    const int64_t d = int64_t(n) % p.Dv, i = int64_t(n) / p.Dv % p.Lq, h = int64_t(n) / (p.Dv * p.Lq) % p.Hq,
                  b = int64_t(n) / (p.Dv * p.Lq * p.Hq);
    std::fprintf(
        out, "    out[b=%lld,h=%lld,i=%lld,d=%lld] expected %-14.9g actual %-14.9g |err| %-10.3g tol %-10.3g x%.3g\n",
        (long long)b, (long long)h, (long long)i, (long long)d, e[n], a[n], std::abs(a[n] - e[n]), tol[n], ratio(n));
  }
  if (!v.pass) {
    diagnose::Options o;
    o.tolerance = f.tolerance;
    for (const std::string& l : diagnose::diagnose({{}, p, f.inputs}, f.expected, cand, o).text())
      std::fprintf(out, "  %s\n", l.c_str());
  }
  return v.pass;
}

}  // namespace attncheck::verify
