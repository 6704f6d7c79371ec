// Diagnosis of a failing attention case: where the error lives (anatomy), which known bug classes fit (tagged
// causes with evidence, ranked), what re-running the candidate on derived problems showed (probes), and how many
// re-runs that cost. A pure function of the case and the outputs, plus optional bounded re-runs of the candidate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "case.hpp"

namespace attncheck::diagnose {

// Stable, machine-readable cause tags (docs/diagnosis.md lists them with their signatures).
const std::vector<std::string>& known_tags();
// A logit-stage entry (mods.hpp) applied after bias and masking (masked scores become its limit at -inf):
// "NAME-order".
std::string logit_order_tag(const ModEntry& e);

struct Cause {
  std::string tag;       // one of known_tags()
  double score = 0;      // 0..1: fraction of the failing elements the cause explains (plus probe evidence)
  std::string evidence;  // one line: what matched
};

struct ProbeResult {
  std::string name;     // e.g. "causal removed"
  std::string outcome;  // "pass", "fail", "unsupported", "error"
  std::string detail;
};

// The smallest repro of the failure (reduce.hpp), when one was asked for.
struct Repro {
  std::string before, after;  // Problem::short_name() of the failing case and of the reduced one
  std::string top;            // the reduced case's top tag (the original's, unless nothing could be removed)
  int reruns = 0;             // candidate runs the reduction spent (not counted in Diagnosis::reruns)
  std::string path;           // the regression fixture written ("" when none was written)
};

struct Diagnosis {
  std::vector<std::string> anatomy;  // one finding per line, most specific first
  std::vector<Cause> causes;         // best first; empty = no known signature
  std::vector<ProbeResult> probes;
  int reruns = 0;  // candidate runs spent by the probes
  int rerun_budget = 0;
  std::optional<Repro> repro;
  // Without probes, the first causes fit the failure equally and fully: the outputs alone cannot tell them apart
  // (their tags, best-ranked first); empty otherwise.
  std::vector<std::string> tied;
  std::string top() const {
    return !tied.empty() ? "undetermined" : causes.empty() ? "no known signature" : causes.front().tag;
  }
  std::vector<std::string> text() const;  // indented report lines
};

struct Options {
  const Impl* rerun = nullptr;  // the candidate, when it can be re-run on derived problems (probes)
  int max_reruns = 12;
  ToleranceModel tolerance;
};

// `ref` is the reference result for (c.p, c.in) with lse (and weights when c.p.want_weights); `actual` the
// candidate's outputs for it. Deterministic; throws only on inconsistent shapes.
Diagnosis diagnose(const prop::Case& c, const ExpectedAttention& ref, const Outputs& actual, const Options& o = {});

// {"top": tag, "causes": [{tag, score, evidence}], "anatomy": [...], "probes": [...], "reruns", "rerun_budget"},
// plus "undetermined": [tags] when top is "undetermined", and "repro": {before, after, top, reruns, path} when a
// repro was made.
std::string to_json(const Diagnosis& d);

}  // namespace attncheck::diagnose
