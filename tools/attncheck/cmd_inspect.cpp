// `attncheck inspect FIXTURE.h5 [--actual CANDIDATE.h5]`: a human summary of a fixture (problem, shapes, features,
// value statistics, provenance, tolerance) and, with a candidate, its verdict and worst elements, so nobody has
// to read a 4-D array to see what a case is or where an implementation goes wrong. A failing candidate also gets
// its diagnosis from the outputs alone (anatomy and likely causes, docs/diagnosis.md; no probes: nothing is re-run).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "attncheck/features.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/heatmap.hpp"
#include "command.hpp"
#include "diagnosis.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::string fixture, actual, png;
  int top = 5;
  int max_panels = 16;
};
Options g;

void stats(const char* name, const std::vector<double>& v, const char* extra = "") {
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
  std::printf("  %-10s n=%-8zu min %-11.4g max %-11.4g mean %-11.4g std %-10.4g zeros %-6lld nan %-5lld inf %lld%s\n",
              name, v.size(), lo, hi, mean, sd, static_cast<long long>(zero), static_cast<long long>(nan),
              static_cast<long long>(inf), extra);
}

void print_fixture(const Fixture& f) {
  const Problem& p = f.problem;
  std::printf("fixture     %s\ncase        %s\nproblem     %s\n", g.fixture.c_str(), f.name.c_str(), p.name().c_str());
  std::printf("dtype       %s, layout %s (q, k, v and out stored %s)\n", to_string(p.dtype), to_string(p.layout),
              p.layout == Layout::BHSD ? "[B,H,L,D]" : "[B,L,H,D]");
  std::printf(
      "shapes      q [%lld,%lld,%lld,%lld]  k [%lld,%lld,%lld,%lld]  v [%lld,%lld,%lld,%lld]  "
      "out [%lld,%lld,%lld,%lld] (logical B,H,L,D)\n",
      (long long)p.B, (long long)p.Hq, (long long)p.Lq, (long long)p.Dqk, (long long)p.B, (long long)p.Hkv,
      (long long)p.Lk, (long long)p.Dqk, (long long)p.B, (long long)p.Hkv, (long long)p.Lk, (long long)p.Dv,
      (long long)p.B, (long long)p.Hq, (long long)p.Lq, (long long)p.Dv);
  std::printf("features\n");
  std::printf("  scale       %.9g%s\n", p.effective_scale(), p.scale ? " (explicit)" : " (default 1/sqrt(Dqk))");
  if (p.Hq != p.Hkv) std::printf("  GQA         %lld query heads per KV head\n", (long long)p.group_size());
  if (p.causal) std::printf("  causal      alignment %s\n", to_string(p.alignment));
  if (p.alignment == Alignment::explicit_ && (p.causal || p.has_window()))
    std::printf("  offsets     %s\n", p.causal_offsets.empty() ? std::to_string(p.causal_offset).c_str()
                                                               : shape_string(p.causal_offsets).c_str());
  if (!p.key_lengths.empty()) std::printf("  key_lengths %s\n", shape_string(p.key_lengths).c_str());
  if (p.mask_shape)
    std::printf("  bool mask   %s\n", shape_string({p.mask_shape->begin(), p.mask_shape->end()}).c_str());
  if (p.bias_shape)
    std::printf("  bias        %s %s\n", shape_string({p.bias_shape->begin(), p.bias_shape->end()}).c_str(),
                to_string(p.bias_dtype));
  if (p.has_window())
    std::printf("  window      left %lld right %lld (-1 unbounded), alignment %s\n", (long long)p.window_left,
                (long long)p.window_right, to_string(p.alignment));
  for (const ModEntry& m : logit_modifications())
    if (m.used(p))
      for (const Field& x : m.fields) std::printf("  %-11s %s\n", x.key, field_text(p, x).c_str());
  std::printf("  fill        %s%s, fully masked rows -> %s\n", to_string(p.fill),
              p.fill == MaskFill::finite ? (" " + std::to_string(p.fill_value)).c_str() : "",
              to_string(p.fully_masked));
  if (p.dropout_p > 0) std::printf("  dropout     p %g seed %llu\n", p.dropout_p, (unsigned long long)p.dropout_seed);
  std::printf("  outputs     out%s%s%s\n", p.want_lse ? ", lse" : "", p.want_weights ? ", weights" : "",
              p.max_logit == MaxLogitOut::none   ? ""
              : p.max_logit == MaxLogitOut::rows ? ", max_logit [B,Hq,Lq]"
                                                 : ", max_logit [Hq]");
  std::printf("inputs\n");
  stats("q", f.inputs.q.to_double());
  stats("k", f.inputs.k.to_double());
  stats("v", f.inputs.v.to_double());
  if (f.inputs.mask) stats("mask", f.inputs.mask->to_double(), "  (1 = attend)");
  if (f.inputs.bias) stats("bias", f.inputs.bias->to_double());
  if (f.inputs.keep) stats("keep", f.inputs.keep->to_double(), "  (1 = kept)");
  std::printf("expected (reference, %s)\n", f.provenance.reference_precision.c_str());
  stats("out", f.expected.out);
  int64_t masked_rows = 0;
  for (double x : f.expected.lse) masked_rows += std::isinf(x) && x < 0;
  char extra[64];
  std::snprintf(extra, sizeof extra, "  (%lld rows with lse -inf)", static_cast<long long>(masked_rows));
  stats("lse", f.expected.lse, extra);
  if (p.want_weights) stats("weights", f.expected.weights);
  std::printf("provenance  schema_version %lld, attncheck %s, seed %llu, distribution %s\n            command: %s\n",
              (long long)f.provenance.schema_version, f.provenance.attncheck_version.c_str(),
              (unsigned long long)f.provenance.seed, f.provenance.distribution.c_str(), f.provenance.command.c_str());
  std::vector<double> tol = out_tolerance(p, f.expected, f.tolerance);
  std::sort(tol.begin(), tol.end());
  std::printf("tolerance   lambda %g, rel_floor %g; out tolerance min %.3g median %.3g max %.3g\n", f.tolerance.lambda,
              f.tolerance.rel_floor, tol.front(), tol[tol.size() / 2], tol.back());
}

bool print_candidate(const Fixture& f) {
  const Outputs cand = read_candidate(g.actual, f.problem);
  Problem p = f.problem;
  p.want_lse = cand.lse.has_value();
  p.want_weights = cand.weights.has_value() && f.problem.want_weights;
  const Verdict v = judge(p, f.expected, cand, f.tolerance);
  std::printf("\ncandidate   %s: %s\n", g.actual.c_str(), v.pass ? "PASS" : "FAIL");
  for (const auto& t : v.tensors)
    std::printf("  %-8s max abs %.3g  max rel %.3g  %s\n", t.tensor.c_str(), t.max_abs_err, t.max_rel_err,
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
  const size_t k = std::min<size_t>(static_cast<size_t>(std::max(g.top, 0)), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                    [&](size_t x, size_t y) { return ratio(x) > ratio(y); });
  std::printf("  worst out elements (error / tolerance):\n");
  for (size_t r = 0; r < k; ++r) {
    const size_t n = idx[r];
    const int64_t d = int64_t(n) % p.Dv, i = int64_t(n) / p.Dv % p.Lq, h = int64_t(n) / (p.Dv * p.Lq) % p.Hq,
                  b = int64_t(n) / (p.Dv * p.Lq * p.Hq);
    std::printf(
        "    out[b=%lld,h=%lld,i=%lld,d=%lld] expected %-14.9g actual %-14.9g |err| %-10.3g tol %-10.3g x%.3g\n",
        (long long)b, (long long)h, (long long)i, (long long)d, e[n], a[n], std::abs(a[n] - e[n]), tol[n], ratio(n));
  }
  if (!v.pass) {
    diagnose::Options o;
    o.tolerance = f.tolerance;
    for (const std::string& l : diagnose::diagnose({{}, p, f.inputs}, f.expected, cand, o).text())
      std::printf("  %s\n", l.c_str());
  }
  return v.pass;
}

// The heatmap picture (tools/heatmap): reference weights per (b, h) and, with a candidate, |out error| / tolerance.
void write_heatmap(const Fixture& f) {
  std::optional<Outputs> cand;
  if (!g.actual.empty()) cand = read_candidate(g.actual, f.problem);
  const Image img = attention_heatmap(f.problem, f.inputs, cand ? &*cand : nullptr, f.tolerance, g.max_panels);
  write_png(g.png, img);
  std::printf("png         %s (%dx%d)\n", g.png.c_str(), img.width, img.height);
}

int run_inspect() {
  if (g.max_panels < 1) throw std::invalid_argument("--max-panels must be >= 1, got " + std::to_string(g.max_panels));
  const Fixture f = read_fixture(g.fixture);
  print_fixture(f);
  if (!g.png.empty()) write_heatmap(f);
  // With a candidate, the exit code is its verdict (0 pass, 1 fail), like compare.
  if (!g.actual.empty()) return print_candidate(f) ? 0 : 1;
  return 0;
}

const Register reg{
    {"inspect", "Summarise a fixture (and a candidate's errors)", [](CLI::App& sub) {
       sub.add_option("fixture", g.fixture, "Golden fixture (.h5)")->required();
       sub.add_option("--actual", g.actual, "Candidate file with /actual/out [, lse, weights]");
       sub.add_option("--top", g.top, "How many worst elements to list")->capture_default_str();
       sub.add_option("--png", g.png,
                      "Write a heatmap PNG: reference attention weights per (b,h) and, with --actual, "
                      "|out error| / tolerance per (i,d)");
       sub.add_option("--max-panels", g.max_panels, "At most this many (b,h) panels in the PNG")->capture_default_str();
       return std::function<int()>(run_inspect);
     }}};

}  // namespace
}  // namespace attncheck::cli
