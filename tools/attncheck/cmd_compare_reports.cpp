// `attncheck compare-reports BEFORE.json NOW.json`: the baseline comparison of two stored reports, for pipelines
// that keep reports as artifacts (docs/regression.md). Exit 0 no regression, 1 a new failure, a capability loss or
// a group that got less accurate, 2 bad input. Improvements are reported, never failures.
#include <cstdio>

#include "baseline_cli.hpp"
#include "command.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::string before, now;
  BaselineOptions b;
};
Options g;

int run() {
  const baseline::Thresholds t = thresholds(g.b);  // bad options are exit 2 before reading anything
  check_baseline_outputs(g.b);
  const baseline::Report before = baseline::load_report(g.before), now = baseline::load_report(g.now);
  const baseline::Comparison c = baseline::compare_reports(before, now, t);
  const int n = report_comparison(c, g.b, "attncheck: " + g.now + " against " + g.before);
  if (n > 0)
    std::printf("exit 1: %d regression%s against %s (accept by replacing it with %s)\n", n, n > 1 ? "s" : "",
                g.before.c_str(), g.now.c_str());
  return n > 0 ? 1 : 0;
}

const Register reg{
    {"compare-reports", "Compare a report with a baseline report: new failures, lost features, accuracy drift",
     [](CLI::App& sub) {
       sub.add_option("before", g.before, "The baseline report (.json from verify/compare --report)")->required();
       sub.add_option("now", g.now, "The new report")->required();
       add_baseline_options(sub, g.b);
       return std::function<int()>(run);
     }}};

}  // namespace
}  // namespace attncheck::cli
