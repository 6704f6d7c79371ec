// Each known merge mistake as an fp64 model of the whole merged state; the candidate's output is compared element by
// element with every model on the rows the judge failed, and the model that reproduces most of them (at least 90%)
// names the cause. Models, from the bug reports in docs/states.md:
//   empty-state-nan     empty states weighted 0 but their O still multiplied in (0·NaN), and 0/0 for all-empty rows
//   lse-sentinel        the declared empty lse (+inf, a finite sentinel) taken as a real lse, or the empty merged
//                       row's lse written as X + log(0) instead of the sentinel
//   lse-layout          lse read and written as if the other layout ([B,H,L] for a declared [B,L,H], or back), or O
//                       ([B,H,L,D] for a declared [B,L,H,D]): either puts the stats and O of different rows together
//   merge-unnormalised  normalised O summed without dividing by the weights' sum; unnormalised sums taken as 1
//   split-boundary      one state (a split) dropped, or counted twice
//   lse-base            weights and lse in base e for base-2 states (or base 2 for base-e ones)
//   out-scale           an fp8 output's scale ignored (O stored unscaled) or applied the wrong way (O·scale stored)
#include "merge_diagnosis.hpp"

#include <cmath>
#include <limits>

#include "attncheck/kv_cache.hpp"

namespace attncheck {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Model {
  std::string tag, what;
  bool literal_sentinel = false, leak = false, swap_layout = false, no_division = false, wrong_base = false;
  bool swap_o = false;   // O's other layout, its strides ignored
  int scale_power = -1;  // an fp8 output stores O·scale^scale_power: -1 as declared, 0 scale ignored, 1 inverted
  int64_t drop = -1, twice = -1;
  bool log_of_zero = false;  // the empty merged row's lse written as X + log(0) = -inf instead of the sentinel
};

// One merged state as a model computes it, in stored units, at the output's logical rows.
struct Merged {
  std::vector<double> o, s1, s2;  // [rows·D], [rows], [rows]
};

int64_t flat(const MergeProblem& p, int64_t r, bool blh) {
  const int64_t b = r / (p.H * p.L), h = (r / p.L) % p.H, i = r % p.L;
  return blh ? (b * p.L + i) * p.H + h : (b * p.H + h) * p.L + i;
}

// Element offset of (b, h, i, d) in an O stored contiguously as [B,H,L,D] or, token-major, [B,L,H,D].
int64_t o_flat(const MergeProblem& p, int64_t b, int64_t h, int64_t i, int64_t d, bool tokens) {
  return (tokens ? (b * p.L + i) * p.H + h : (b * p.H + h) * p.L + i) * p.D + d;
}

Merged run_model(const MergeProblem& p, const StoredStates& in, const Model& m) {
  const bool norm = p.conv.form == StateForm::normalised, blh = p.conv.layout == StatLayout::blh;
  const double ln_b = (p.conv.base == LseBase::two) != m.wrong_base ? std::log(2.0) : 1.0;  // the base it uses
  const double sentinel = empty_stat_value(p.conv);
  const Tensor& xs = norm ? *in.lse : *in.max;
  const int64_t rows = p.B * p.H * p.L;
  const bool tokens = p.conv.o_layout == OutLayout::blhd;
  // Slot of row r the kernel reads and writes: the declared layout's, or the other one's.
  auto slot = [&](int64_t r) { return flat(p, r, m.swap_layout ? !blh : blh); };
  std::vector<double> o(static_cast<size_t>(rows * p.D)), s1(static_cast<size_t>(rows)), s2(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> x, l, w;
    std::vector<int64_t> who;
    double X = -kInf;
    for (int64_t n = 0; n < p.N; ++n) {
      if (n == m.drop) continue;
      for (int rep = 0; rep < (n == m.twice ? 2 : 1); ++rep) {
        const double xn = xs.get_offset(n * rows + slot(r));
        const double stored_l = norm ? 1.0 : in.sum->get_offset(n * rows + slot(r));
        const double ln = !norm && m.no_division ? 1.0 : stored_l;
        const bool empty = !m.literal_sentinel && (xn == sentinel || stored_l == 0);
        if (empty && !m.leak) continue;
        x.push_back(empty ? -kInf : xn), l.push_back(ln), who.push_back(n);
        if (!empty) X = std::max(X, xn);
        if (m.literal_sentinel) X = std::max(X, xn);
      }
    }
    double S = 0;
    std::vector<double> acc(static_cast<size_t>(p.D), 0.0);
    for (size_t k = 0; k < x.size(); ++k) {
      const double wk = std::exp((x[k] - X) * ln_b);  // NaN when X is -inf or +inf: what a kernel gets
      S += wk * l[k];
      for (int64_t d = 0; d < p.D; ++d) {
        const int64_t b = r / (p.H * p.L), h = (r / p.L) % p.H, i = r % p.L;
        const int64_t at[5] = {who[k], b, h, i, d};
        acc[static_cast<size_t>(d)] +=
            wk * (m.swap_o ? in.o.get_offset(who[k] * rows * p.D + o_flat(p, b, h, i, d, !tokens)) : in.o.get(at));
      }
    }
    const bool none = x.empty();
    double lse = none ? sentinel : X + std::log(S) / ln_b;
    if (!none && S == 0 && !m.log_of_zero) lse = sentinel;
    s1[static_cast<size_t>(slot(r))] = norm ? lse : (none ? sentinel : X);
    s2[static_cast<size_t>(slot(r))] = none ? 0 : S;
    for (int64_t d = 0; d < p.D; ++d)
      o[static_cast<size_t>(r * p.D + d)] = none                       ? 0
                                            : (norm && !m.no_division) ? acc[static_cast<size_t>(d)] / S
                                                                       : acc[static_cast<size_t>(d)];
  }
  if (m.swap_o) {  // written at the other layout's offsets; the judge reads the declared layout's
    std::vector<double> mem(o.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < p.D; ++d)
        mem[static_cast<size_t>(o_flat(p, r / (p.H * p.L), (r / p.L) % p.H, r % p.L, d, !tokens))] =
            o[static_cast<size_t>(r * p.D + d)];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < p.D; ++d)
        o[static_cast<size_t>(r * p.D + d)] =
            mem[static_cast<size_t>(o_flat(p, r / (p.H * p.L), (r / p.L) % p.H, r % p.L, d, tokens))];
  }
  Merged out{o, std::vector<double>(static_cast<size_t>(rows)), std::vector<double>(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r)  // what the judge reads at row r: the slot its declared layout names
    out.s1[static_cast<size_t>(r)] = s1[static_cast<size_t>(flat(p, r, blh))],
    out.s2[static_cast<size_t>(r)] = s2[static_cast<size_t>(flat(p, r, blh))];
  return out;
}

bool close(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (got == want) return true;
  return std::fabs(got - want) <= 2e-2 * std::fabs(want) + 1e-3;  // fp16/bf16 outputs of an fp32 computation
}

std::vector<Model> models(const MergeProblem& p) {
  std::vector<Model> ms;
  ms.push_back({"empty-state-nan", "empty states' O multiplied by a zero weight (NaN leaks), 0/0 for all-empty rows"});
  ms.back().leak = true, ms.back().log_of_zero = true;
  ms.push_back({"lse-sentinel", "the empty lse sentinel taken as a real lse"});
  ms.back().literal_sentinel = true;
  ms.push_back({"lse-sentinel", "the empty merged row's lse written as log(0) instead of the declared sentinel"});
  ms.back().log_of_zero = true;
  ms.push_back({"lse-layout", "lse read and written in the other layout ([B,H,L] <-> [B,L,H])"});
  ms.back().swap_layout = true;
  if (p.conv.o_layout == OutLayout::blhd) {  // only a token-major O has another layout to be mistaken for
    ms.push_back({"lse-layout", "O read and written as [B,H,L,D] while declared [B,L,H,D], its strides ignored"});
    ms.back().swap_o = true;
  }
  ms.push_back({"merge-unnormalised", p.conv.form == StateForm::normalised ? "O not divided by the sum of the weights"
                                                                           : "the states' sums taken as 1"});
  ms.back().no_division = true;
  for (int64_t n = 0; n < p.N; ++n) {
    ms.push_back({"split-boundary", "state " + std::to_string(n) + " dropped"});
    ms.back().drop = n;
    ms.push_back({"split-boundary", "state " + std::to_string(n) + " counted twice"});
    ms.back().twice = n;
  }
  ms.push_back({"lse-base", "weights and lse in the other base (e vs 2)"});
  ms.back().wrong_base = true;
  if (p.conv.out_dtype) {
    ms.push_back({"out-scale", "the fp8 output's scale ignored (O stored unscaled)"});
    ms.back().scale_power = 0;
    ms.push_back({"out-scale", "the fp8 output multiplied by its scale instead of divided"});
    ms.back().scale_power = 1;
  }
  return ms;
}

}  // namespace

const std::vector<std::string>& merge_tags() {
  static const std::vector<std::string> t = {"empty-state-nan", "lse-sentinel", "lse-layout", "merge-unnormalised",
                                             "split-boundary",  "lse-base",     "out-scale"};
  return t;
}

MergeDiagnosis diagnose_merge(const MergeProblem& p, const StoredStates& in, const StoredStates& out) {
  const MergeVerdict v = judge_merge(p, in, out);
  MergeDiagnosis best;
  if (v.pass) return {"none", "the merge passes", 0};
  const bool norm = p.conv.form == StateForm::normalised;
  // The candidate's output at logical rows, in the same frame as the models.
  const std::vector<double> o = out.o.to_double();
  const std::vector<double> s1 = (norm ? *out.lse : *out.max).to_double();
  const std::vector<double> s2 = norm ? std::vector<double>() : out.sum->to_double();
  for (const Model& m : models(p)) {
    Merged want = run_model(p, in, m);
    if (const auto& t = p.conv.out_dtype)  // the model's O as an fp8 output stores it, in the candidate's frame
      for (double& x : want.o) {
        const double top = kv_code_max(*t), y = x * std::pow(p.conv.out_scale, m.scale_power);
        x = round_to(*t, y > top ? top : y < -top ? -top : y);
      }
    int64_t n = 0, hit = 0;
    for (int64_t r : v.bad_rows) {
      auto count = [&](double got, double w) { ++n, hit += close(got, w); };
      count(s1[static_cast<size_t>(r)], want.s1[static_cast<size_t>(r)]);
      if (!norm) count(s2[static_cast<size_t>(r)], want.s2[static_cast<size_t>(r)]);
      for (int64_t d = 0; d < p.D; ++d)
        count(o[static_cast<size_t>(r * p.D + d)], want.o[static_cast<size_t>(r * p.D + d)]);
    }
    const double f = n ? static_cast<double>(hit) / static_cast<double>(n) : 0;
    if (f > best.explained + 1e-12)
      best = {
          m.tag,
          m.what + ": reproduces " + std::to_string(hit) + " of " + std::to_string(n) + " elements of the failing rows",
          f};
  }
  if (best.explained < 0.9)
    best = {"unknown", "no known merge mistake reproduces the failure (best: " + best.tag + ", " + best.why + ")",
            best.explained};
  return best;
}

}  // namespace attncheck
