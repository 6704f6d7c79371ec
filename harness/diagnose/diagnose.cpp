// diagnose(): anatomy, hypotheses and (with a re-runnable candidate) probes, merged into one ranked list of causes.
// A cause keeps its best-scoring evidence; a probe vote adds 0.3 (the failure vanishes) or takes 0.2; causes below 0.25
// are dropped, so an unexplained failure says "no known signature" rather than guessing.
#include <algorithm>
#include <map>
#include <sstream>

#include "anatomy.hpp"
#include "derive.hpp"
#include "diagnosis.hpp"
#include "hypotheses.hpp"
#include "probes.hpp"

namespace attncheck::diagnose {

const std::vector<std::string>& known_tags() {
  // In tie-break order: the more specific signature first.
  static const std::vector<std::string> tags = [] {
    std::vector<std::string> t = {"causal-diagonal", "causal-alignment", "window-edge",
                                  "tile-tail",       "skipped-keys",     "gqa-mapping"};
    for (const ModEntry& e : logit_modifications()) t.push_back(logit_order_tag(e));
    t.insert(
        t.end(),
        {"alibi-sign", "alibi-slope-head", "document-boundary", "chunk-boundary", "descale-ignored",
         "descale-wrong-group", "q4-nibble-order", "q4-offset", "q4-min-ignored", "topk-padding", "mask-fill",
         "key-padding", "mask-ignored", "mask-after-softmax", "softmax-axis", "block-table", "index-overflow",
         "fully-masked-policy",
         // block masks after the mask tags: where every block is partial (a tail block), treating them as full is the
         // mask ignored, and the named mask is the more specific cause
         "block-mask-partial-as-full", "block-mask-missing", "parameter-ignored", "dropout-scale", "dropout-mask",
         "mla-scale-dim", "mla-v-stride", "mla-v-columns",
         // an fp8 output's store before the scale and row-scale causes, which can fit a uniformly rescaled output too
         "fp8-out-scale-ignored", "fp8-out-scale-inverted", "amax-o-scaled", "amax-o-after-cast", "scale",
         "layout-stride", "lse-base", "lse-offset", "lse-missing-max", "lse-unscaled-max", "max-logit-stage",
         // RoPE before the NaN causes: a RoPE problem's NaN rows from angles past fp16's range are the more specific
         "rope-interleave", "rope-offset", "rope-partial", "rope-precision", "qk-norm-eps", "nan-leak",
         "no-max-subtraction", "fp16-overflow", "missed-rescale", "low-precision-scores", "low-precision-accumulation",
         "tf32", "row-scale", "negative-scale-mask", "uninitialised-output",
         // the invariance checks' tags (harness/property/invariance.hpp), never scored by the hypotheses
         "nondeterministic", "batch-variant", "schedule-variant", "layout-variant"});
    return t;
  }();
  return tags;
}

std::string logit_order_tag(const ModEntry& e) { return std::string(e.name) + "-order"; }

namespace {
constexpr double kFullFit = 1.0 - 1e-9;  // a cause explaining every failing element
size_t rank_of(const std::string& tag) {
  const auto& t = known_tags();
  return static_cast<size_t>(std::find(t.begin(), t.end(), tag) - t.begin());
}
}  // namespace

Diagnosis diagnose(const prop::Case& c, const ExpectedAttention& ref, const Outputs& actual, const Options& o) {
  Diagnosis d;
  // The models read K and V as [B,Hkv,Lk,D]: a paged cache or a KV-cache past is made contiguous first (the same
  // problem, the same reference); the probes re-run the candidate on the case as given.
  const prop::Case flat = contiguous_kv(c);
  Subject s(flat, ref, actual, o.tolerance);
  if (c.p.page_size > 0) s.paged = &c;
  d.anatomy = anatomy(s);
  std::vector<Cause> all = structural_hypotheses(s);
  for (Cause& x : numeric_hypotheses(s)) all.push_back(std::move(x));
  std::map<std::string, Cause> best;
  for (Cause& x : all)
    if (!best.count(x.tag) || x.score > best[x.tag].score) best[x.tag] = std::move(x);
  d.rerun_budget = o.rerun ? o.max_reruns : 0;
  if (o.rerun && s.n_bad_out + s.n_bad_lse + s.n_bad_w > 0) {
    ProbeEvidence ev = run_probes(c, *o.rerun, o.max_reruns, o.tolerance);
    d.probes = ev.results, d.reruns = ev.reruns;
    // A sole-trigger probe whose change removes the failure outranks every fit: the other causes cannot explain a
    // failure that only this change removes, so they are voted down and the probe's tag is put first.
    for (const std::string& t : ev.sole) {
      for (auto& [tag, cause] : best)
        if (std::find(ev.sole.begin(), ev.sole.end(), tag) == ev.sole.end()) {
          ev.votes[tag] = -1;
          ev.why[tag] = "only the probe for " + t + " removes the failure";
        }
      best[t] = {t, 1.0, "probe " + ev.why[t]};
    }
    for (const auto& [tag, v] : ev.votes) {
      if (v == 0) continue;
      const double delta = v > 0 ? 0.3 : -0.2;
      if (best.count(tag)) {
        best[tag].score += delta;
        best[tag].evidence += "; probe " + ev.why[tag];
      } else if (v > 0) {
        best[tag] = {tag, delta, "probe " + ev.why[tag]};
      }
    }
  }
  for (auto& [tag, cause] : best)
    if (cause.score >= 0.25) d.causes.push_back(cause);
  std::stable_sort(d.causes.begin(), d.causes.end(), [](const Cause& a, const Cause& b) {
    if (std::abs(a.score - b.score) > 1e-9) return a.score > b.score;
    return rank_of(a.tag) < rank_of(b.tag);
  });
  // A full fit shared by causes no probe could separate: say so rather than let the tag order choose.
  if (d.probes.empty() && d.causes.size() > 1 && d.causes[0].score >= kFullFit &&
      std::abs(d.causes[1].score - d.causes[0].score) <= 1e-9)
    for (const Cause& c : d.causes)
      if (std::abs(c.score - d.causes[0].score) <= 1e-9) d.tied.push_back(c.tag);
  return d;
}

std::vector<std::string> Diagnosis::text() const {
  std::vector<std::string> l;
  l.push_back("diagnosis: " + top());
  if (!tied.empty()) {
    std::string t;
    for (const std::string& x : tied) t += (t.empty() ? "" : ", ") + x;
    l.push_back("  undetermined between " + t +
                ": each explains every failing element; only re-running the candidate on derived problems (probes) "
                "can tell them apart");
  }
  for (const std::string& a : anatomy) l.push_back("  anatomy: " + a);
  for (const Cause& c : causes) {
    std::ostringstream o;
    o.precision(2);
    o << "  cause " << c.tag << " (score " << std::fixed << c.score << "): " << c.evidence;
    l.push_back(o.str());
  }
  if (causes.empty())
    l.push_back("  cause: no known signature (no hypothesis explains a quarter of the failing elements)");
  for (const ProbeResult& p : probes)
    l.push_back("  probe " + p.name + ": " + p.outcome + (p.detail.empty() ? "" : " (" + p.detail + ")"));
  if (rerun_budget > 0) l.push_back("  re-runs: " + std::to_string(reruns) + " of " + std::to_string(rerun_budget));
  if (repro)
    l.push_back("  repro: " + repro->before + " -> " + repro->after + " (still " + repro->top + ", " +
                std::to_string(repro->reruns) + " re-runs)" +
                (repro->path.empty() ? "" : ", written to " + repro->path));
  return l;
}

}  // namespace attncheck::diagnose
