// The probes of probes.hpp, in a fixed order (deterministic), each one candidate run judged against the reference
// on the derived case; a derived case the candidate does not support is reported as unsupported and costs nothing.
#include "probes.hpp"

#include <algorithm>
#include <functional>

#include "attncheck/error_scales.hpp"
#include "attncheck/mods.hpp"
#include "derive.hpp"
#include "diagnosis.hpp"

namespace attncheck::diagnose {

namespace {
// The causes a score or mask modification can trigger: the mask-handling bugs for a mask (it masks like any other),
// the bugs of its own parameters, and the entry ignored.
std::vector<std::string> modification_tags(const ModEntry& e) {
  std::vector<std::string> t = {"parameter-ignored"};
  if (e.kind == ModKind::mask)
    t.insert(t.end(), {"mask-after-softmax", "fully-masked-policy", "mask-fill", "nan-leak",
                       "block-mask-partial-as-full", "block-mask-missing"});
  const std::string name = e.name;
  if (name == "alibi") t.insert(t.end(), {"alibi-sign", "alibi-slope-head"});
  if (name == "document") t.push_back("document-boundary");
  if (name == "chunked") t.push_back("chunk-boundary");
  return t;
}

struct Probe {
  std::string name;
  std::function<prop::Case()> make;
  std::vector<std::string> tags;  // causes this change removes the trigger of
  bool positive_only = false;     // a failure that persists says nothing against the tags
  bool sole_trigger = false;      // when the failure disappears, no other cause can explain it
};
}  // namespace

ProbeEvidence run_probes(const prop::Case& c, const Impl& impl, int budget, const ToleranceModel& m) {
  const Problem& p = c.p;
  std::vector<Probe> probes;
  const std::map<std::string, std::vector<std::string>> feature_tags = {
      {"causal", {"causal-diagonal", "causal-alignment", "mask-after-softmax"}},
      {"window", {"window-edge", "causal-alignment", "mask-after-softmax"}},
      {"key padding", {"key-padding", "fully-masked-policy", "mask-fill", "mask-after-softmax"}},
      {"mask", {"mask-ignored", "fully-masked-policy", "mask-fill", "mask-after-softmax", "nan-leak"}},
      {"bias", {}},
      {"dropout", {"dropout-scale", "dropout-mask"}}};
  int64_t poisoned = 0;
  const prop::Case clean = zero_masked_poison(c, poisoned);
  if (poisoned > 0)  // pytorch#101967: 0 * NaN from a masked slot makes the row NaN
    probes.push_back({"poison in masked slots replaced by 0", [&clean] { return clean; }, {"nan-leak"}, false, true});
  for (const std::string& f : active_features(p)) {  // a logit-stage entry's feature: its order tag
    const ModEntry* logit = find_logit_modification(f);
    probes.push_back({f + " removed", [&c, f] { return without(c, f); },
                      logit ? std::vector{logit_order_tag(*logit)} : feature_tags.at(f)});
  }
  for (const ModEntry* e : used_modifications(p))
    if (e->kind != ModKind::position)
      probes.push_back({std::string(e->name) + " removed",
                        [&c, e] { return with_problem(c, [e](Problem& q) { reset_modification(q, *e); }); },
                        modification_tags(*e)});
  if (p.page_size > 0)
    probes.push_back({"paged K/V gathered into contiguous K/V", [&c] { return contiguous_kv(c); }, {"block-table"}});
  if (p.Hkv < p.Hq)
    probes.push_back({"GQA expanded to MHA",
                      [&c] { return expand_kv_heads(c, [&c](int64_t h) { return c.p.kv_head(h); }); },
                      {"gqa-mapping"}});
  if (!p.scale)
    probes.push_back({"default scale passed explicitly",
                      [&c] { return with_problem(c, [](Problem& q) { q.scale = q.effective_scale(); }); },
                      {"scale"}});
  if (p.scale && *p.scale < 0)
    probes.push_back({"scale made positive",
                      [&c] { return with_problem(c, [](Problem& q) { q.scale = -*q.scale; }); },
                      {"negative-scale-mask"},
                      false,
                      true});
  if (p.Lk > 16 && p.Lk % 16)
    probes.push_back({"Lk cut to " + std::to_string(p.Lk / 16 * 16) + " (a multiple of 16)",
                      [&c] { return prop::slice_keys(with_mask(c), 0, c.p.Lk / 16 * 16); },
                      {"tile-tail", "skipped-keys"}});
  if (p.dtype != DType::f64)
    probes.push_back(
        {"inputs in fp64",
         [&c] { return with_dtype(c, DType::f64); },
         {"low-precision-scores", "low-precision-accumulation", "tf32", "fp16-overflow", "no-max-subtraction"},
         true});

  ProbeEvidence ev;
  for (const Probe& pr : probes) {
    ProbeResult r{pr.name, "", ""};
    try {
      prop::Case d = pr.make();
      const Support sup = impl.supports(d.p);
      if (!sup.ok) {
        r.outcome = "unsupported", r.detail = sup.reason;
        ev.results.push_back(r);
        continue;
      }
      if (ev.reruns >= budget) {
        r.outcome = "skipped", r.detail = "re-run budget spent";
        ev.results.push_back(r);
        continue;
      }
      ++ev.reruns;
      Outputs out;
      run_impl(impl, d.p, d.in, out);
      const Verdict v = judge(d.p, expected_attention(d.p, d.in), out, m);
      r.outcome = v.pass ? "pass" : "fail";
      if (!v.pass) r.detail = v.worst().describe();
      // A failure that persists says nothing against a cause another still active mask can trigger (with causal
      // and a boolean mask, mask-after-softmax survives removing either one).
      std::vector<std::string> left;
      for (const std::string& f : active_features(d.p))
        if (const auto it = feature_tags.find(f); it != feature_tags.end())
          left.insert(left.end(), it->second.begin(), it->second.end());
      for (const ModEntry* e : used_modifications(d.p)) {
        const std::vector<std::string> t = modification_tags(*e);
        left.insert(left.end(), t.begin(), t.end());
      }
      for (const std::string& t : pr.tags) {
        if (!v.pass && (pr.positive_only || std::find(left.begin(), left.end(), t) != left.end())) continue;
        ev.votes[t] += v.pass ? 1 : -1;
        ev.why[t] = pr.name + (v.pass ? ": the failure disappears" : ": still fails");
      }
      if (v.pass && pr.sole_trigger) ev.sole.insert(ev.sole.end(), pr.tags.begin(), pr.tags.end());
    } catch (const std::exception& e) {
      r.outcome = "error", r.detail = e.what();
    }
    ev.results.push_back(r);
  }
  return ev;
}

}  // namespace attncheck::diagnose
