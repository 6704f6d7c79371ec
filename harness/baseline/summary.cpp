// How a baseline comparison is shown: terminal lines, a Markdown summary for pull requests, JUnit XML for CI test
// tabs. Regressions first, then improvements and notes; the per-group table keeps the "all features" groups and
// every group that changed, so a summary stays readable on a suite of hundreds of cases.
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "baseline.hpp"

namespace attncheck::baseline {

namespace {
std::string f3(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}
std::string f2(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.2f", x);
  return b;
}
std::string pct(double level) {
  char b[16];
  std::snprintf(b, sizeof b, "%g%%", level * 100);
  return b;
}

std::string growth_text(const GroupDrift& g, const Thresholds& t) {
  return "error x" + f3(g.growth.estimate) + " (" + pct(t.confidence) + " interval " + f3(g.growth.lo) + "-" +
         f3(g.growth.hi) + ", " + std::to_string(g.n) + " cases; max growth " + f3(t.growth_for(g.dtype)) + ")";
}
std::string bias_text(const GroupDrift& g, const Thresholds& t) {
  return "bias " + f2(g.bias_before) + " -> " + f2(g.bias_now) + " ulp (shift " + f2(g.bias_shift.estimate) +
         ", interval " + f2(g.bias_shift.lo) + " to " + f2(g.bias_shift.hi) + "; max shift " + f3(t.max_bias_shift) +
         ")";
}

std::string xml(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
    }
  }
  return o;
}

bool shown(const GroupDrift& g) {
  return (g.feature == "all" && g.judged) || g.growth_regression || g.bias_regression || g.improvement;
}
}  // namespace

std::vector<std::string> text_lines(const Comparison& c, const Thresholds& t) {
  std::vector<std::string> l;
  int nf = 0, nl = 0, ng = 0, ni = 0;
  for (const auto& ch : c.changes) nf += ch.kind == "new-failure", nl += ch.kind == "capability-loss";
  for (const auto& g : c.groups) ng += g.growth_regression || g.bias_regression, ni += g.improvement;
  l.push_back("baseline: " + std::to_string(nf) + " new failures, " + std::to_string(nl) + " capability losses, " +
              std::to_string(ng) + " groups less accurate, " + std::to_string(ni) + " groups more accurate");
  for (const auto& ch : c.changes)
    l.push_back(std::string(ch.regression() ? "  REGRESSION " : "  note       ") + ch.kind + " " + ch.impl + " " +
                ch.fixture + ": " + ch.before + " -> " + ch.now);
  // A regressed feature group is listed when the implementation x dtype x tensor as a whole did not regress, or
  // when the feature is worse than the whole (its interval lies above the whole's estimate): where the loss is.
  std::map<std::string, const GroupDrift*> whole;
  for (const auto& g : c.groups)
    if (g.feature == "all") whole[g.impl + " " + g.dtype + " " + g.tensor] = &g;
  for (const auto& g : c.groups) {
    const auto w = whole.find(g.impl + " " + g.dtype + " " + g.tensor);
    if (g.feature != "all" && w != whole.end() &&
        (w->second->growth_regression || w->second->bias_regression || w->second->improvement) &&
        !(g.growth.lo > w->second->growth.estimate))
      continue;
    if (g.growth_regression) l.push_back("  REGRESSION accuracy " + g.name() + ": " + growth_text(g, t));
    if (g.bias_regression) l.push_back("  REGRESSION bias " + g.name() + ": " + bias_text(g, t));
    if (g.improvement) l.push_back("  improved   " + g.name() + ": " + growth_text(g, t) + "; " + bias_text(g, t));
  }
  for (const auto& g : c.groups)
    if (g.feature == "all" && g.judged)
      l.push_back("  group " + g.name() + ": " + growth_text(g, t) + "; share of bound " + f3(g.share_before) + " -> " +
                  f3(g.share_now));
  if (!c.largest.empty()) {
    std::string s = "  largest per-case error ratios:";
    for (size_t k = 0; k < c.largest.size() && k < 5; ++k)
      s += (k ? ", " : " ") + c.largest[k].impl + " " + c.largest[k].fixture + " " + c.largest[k].tensor + " x" +
           f3(c.largest[k].ratio);
    l.push_back(s);
  }
  for (const auto& n : c.notes) l.push_back("  note: " + n);
  return l;
}

std::string markdown(const Comparison& c, const Thresholds& t, const std::string& title) {
  std::ostringstream o;
  const int r = c.regressions();
  o << "### " << title << ": " << (r ? std::to_string(r) + " regression" + (r > 1 ? "s" : "") : "no regression")
    << "\n\n";
  // Many changed cases fold into <details> so the group table stays on the first screen of the pull request.
  const bool fold = c.changes.size() > 20;
  if (fold) o << "<details><summary>" << c.changes.size() << " cases changed status</summary>\n\n";
  bool any = false;
  for (const auto& ch : c.changes) {
    if (!any) o << "| | implementation | case | before | now |\n|---|---|---|---|---|\n", any = true;
    o << "| " << (ch.regression() ? ":x: " : "") << ch.kind << " | " << ch.impl << " | `" << ch.fixture << "` | "
      << ch.before << " | " << ch.now << " |\n";
  }
  if (any) o << "\n";
  if (fold) o << "</details>\n\n";
  o << "| group (impl dtype feature tensor) | cases | error now / before | " << pct(t.confidence)
    << " interval | bias before -> now (ulp) | share of bound before -> now | |\n|---|---|---|---|---|---|---|\n";
  for (const auto& g : c.groups) {
    if (!shown(g)) continue;
    const char* mark = g.growth_regression || g.bias_regression ? ":x: less accurate"
                       : g.improvement                          ? "more accurate"
                                                                : "";
    o << "| " << g.name() << " | " << g.n << " | " << f3(g.growth.estimate) << " | " << f3(g.growth.lo) << "-"
      << f3(g.growth.hi) << " | " << f2(g.bias_before) << " -> " << f2(g.bias_now) << " | " << f3(g.share_before)
      << " -> " << f3(g.share_now) << " | " << mark << " |\n";
  }
  if (!c.largest.empty()) {
    o << "\nLargest per-case error ratios: ";
    for (size_t k = 0; k < c.largest.size() && k < 5; ++k)
      o << (k ? ", " : "") << c.largest[k].impl << " `" << c.largest[k].fixture << "` " << c.largest[k].tensor << " x"
        << f3(c.largest[k].ratio);
    o << "\n";
  }
  for (const auto& n : c.notes) o << "\n_note: " << n << "_\n";
  o << "\nA group regresses when its whole interval lies above the maximum growth (" << f3(t.max_growth)
    << ") or its bias moved away from zero by more than " << f3(t.max_bias_shift) << " ulp; groups of fewer than "
    << t.min_cases << " cases are not judged (docs/regression.md).\n";
  return o.str();
}

std::string junit(const Comparison& c, const Thresholds& t) {
  std::ostringstream body;
  int tests = 0, failures = 0;
  for (const auto& ch : c.changes) {
    if (!ch.regression()) continue;
    ++tests, ++failures;
    body << "    <testcase classname=\"" << xml(ch.impl) << "\" name=\"" << xml(ch.kind + " " + ch.fixture)
         << "\">\n      <failure type=\"" << ch.kind << "\" message=\"" << xml(ch.before + " -> " + ch.now)
         << "\"/>\n    </testcase>\n";
  }
  for (const auto& g : c.groups) {
    if (!g.judged) continue;
    ++tests;
    body << "    <testcase classname=\"" << xml(g.impl) << "\" name=\"" << xml("accuracy " + g.name()) << "\"";
    if (!g.growth_regression && !g.bias_regression) {
      body << "/>\n";
      continue;
    }
    ++failures;
    const std::string msg = g.growth_regression ? growth_text(g, t) : bias_text(g, t);
    body << ">\n      <failure type=\"" << (g.growth_regression ? "accuracy" : "bias") << "\" message=\"" << xml(msg)
         << "\"/>\n    </testcase>\n";
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"attncheck-baseline\" tests=\"" << tests
    << "\" failures=\"" << failures << "\">\n  <testsuite name=\"baseline\" tests=\"" << tests << "\" failures=\""
    << failures << "\">\n"
    << body.str() << "  </testsuite>\n</testsuites>\n";
  return o.str();
}

}  // namespace attncheck::baseline
