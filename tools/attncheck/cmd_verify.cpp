// `attncheck verify`: replays golden fixtures against implementations and judges them with the tolerance model.
// The options, the table and the reports; finding and judging the cases is harness/verify (judge.hpp). Per
// (fixture, implementation): a status, errors and the worst element; a table, an optional JSON or JUnit report,
// GoogleTest-style sharding. Exit 0 all pass, 1 any failure, a named implementation unavailable or
// nothing compared (unless --allow-unavailable), 2 bad input: a fixture file that cannot be read gets its own row
// (input-error) while every other one is judged, and decides the exit code (2 before 1).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "attncheck/durable_file.hpp"
#include "baseline_cli.hpp"
#include "command.hpp"
#include "judge.hpp"
#include "plugins.hpp"
#include "report.hpp"
#include "shard.hpp"
#include "shard_report.hpp"

namespace attncheck::cli {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::vector<std::string> impls, plugins;
  std::string fixtures = "golden", filter, report;
  std::optional<std::string> shard;
  bool allow_unavailable = false;
  bool diagnose = false;
  std::string repro;  // --repro DIR: with --diagnose, each failure's smallest repro written there as a fixture
  int diagnose_reruns = 12;
  double tol_scale = 1.0;        // --tol-scale: explicit multiplier of every tolerance, recorded in the report
  std::string pass = "forward";  // --pass forward|backward|both (backward_row.hpp)
  std::string spec;              // --spec: cases generated on demand from a suite spec instead of fixture files
  int64_t rows = 0;              // --rows: with --spec, the reference computes about this many sampled query rows
  std::string invariance;  // --invariance rerun,batch|all: the invariance checks (invariance_rows.hpp), off by default
  int reruns = 3;          // --reruns K: runs of each case in the rerun check
  std::string invariance_level = "declared";  // --invariance-level: bitwise or within tolerance (invariance.hpp)
  std::string baseline;          // --baseline FILE.json: compare this run with a stored report (docs/regression.md)
  bool accept_baseline = false;  // --accept-baseline: write this run to --baseline instead of failing on drift
  BaselineOptions b;
  std::vector<int64_t> block_mask;  // --block-mask Q,K: the exact block mask handed to each run (docs/block-mask.md)
};
Options g;

// The checks of the options among themselves, before any work; returns the stored baseline when there is one (a bad
// one is exit 2 before any work too).
std::optional<baseline::Report> check_options() {
  if (!g.report.empty()) check_report_path(g.report);
  verify::prepare_repro_dir(g.repro, g.diagnose);
  std::optional<baseline::Report> before;
  if (!g.baseline.empty()) {
    (void)thresholds(g.b);
    check_baseline_outputs(g.b);
    if (!g.accept_baseline || fs::exists(g.baseline)) before = baseline::load_report(g.baseline);
  } else if (g.accept_baseline || !g.b.summary.empty() || !g.b.junit.empty()) {
    throw std::invalid_argument("--accept-baseline, --summary and --junit need --baseline FILE.json");
  }
  return before;
}

verify::Judging judging(verify::Pass pass) {
  verify::Judging j;
  j.pass = pass, j.tol_scale = g.tol_scale;
  j.diagnose = g.diagnose, j.diagnose_reruns = g.diagnose_reruns, j.repro = g.repro;
  j.invariance = verify::invariance_options(g.invariance, g.reruns, g.invariance_level);
  j.block_mask = g.block_mask;
  return j;
}

verify::Selection selection(verify::Pass pass) {
  verify::Selection s;
  s.fixtures = g.fixtures, s.spec = g.spec, s.rows = g.rows, s.filter = g.filter, s.pass = pass;
  s.shard = resolve_shard(g.shard);
  return s;
}

// The table as the rows come: each row, then the lines under it.
verify::Observer printing(Progress& progress) {
  verify::Observer o;
  o.step = [&progress](const std::string& label) { progress.step(label); };
  o.row = [&progress](const CaseResult& r, const std::vector<std::string>& lines) {
    progress.clear();
    print_row(r);
    for (const std::string& l : lines) std::printf("    %s\n", l.c_str());
  };
  return o;
}

// CI honesty: unless --allow-unavailable, something must be compared, and each implementation named on the command
// line must be available.
ExitRules exit_rules(const std::vector<ImplPtr>& impls) {
  ExitRules rules;
  if (g.allow_unavailable) return rules;
  rules.require_compared = true;
  const bool all = g.impls.empty() || std::find(g.impls.begin(), g.impls.end(), "all") != g.impls.end();
  if (!all)
    for (const auto& impl : impls) rules.must_be_available.push_back(impl->name());
  return rules;
}

const RegisterMerge merge{{"verify", {"tol_scale", "schema_version"}, {"cases"}, verify::merge_shards}};

// --baseline: this run against the stored report (or, with --accept-baseline, this run stored); the exit code
// becomes 1 on a regression.
int against_baseline(const std::vector<CaseResult>& results, const std::optional<baseline::Report>& before, int rc) {
  if (g.baseline.empty()) return rc;
  const std::string now = report_json(results, g.tol_scale);
  int n = 0;
  if (before) {
    const baseline::Comparison c =
        baseline::compare_reports(*before, baseline::parse_report(now, "this run"), thresholds(g.b), true);
    n = report_comparison(c, g.b, "attncheck verify against " + g.baseline);
  }
  if (g.accept_baseline) {
    write_file_durably(g.baseline, report_json(results, g.tol_scale, true));
    std::printf("baseline %s %s by this run (--accept-baseline)\n", g.baseline.c_str(),
                before ? "replaced" : "written");
  } else if (n > 0) {
    std::printf("exit 1: %d regression%s against the baseline %s (--accept-baseline makes this run the baseline)\n", n,
                n > 1 ? "s" : "", g.baseline.c_str());
    rc = 1;
  }
  return rc;
}

int run_verify() {
  const verify::Pass pass = verify::pass_from_string(g.pass);
  load_plugins(g.plugins);
  const std::optional<baseline::Report> before = check_options();
  const std::vector<ImplPtr> impls = maybe_isolate(verify::select_impls(g.impls));
  const verify::Judging j = judging(pass);
  const verify::Selection s = selection(pass);
  verify::Cases cases = verify::find_cases(s);
  if (s.shard) announce_shard(*s.shard, cases.list.size(), "fixtures");
  print_header();
  Progress progress(cases.list.size() * impls.size());
  const verify::Judged judged = verify::judge_cases(cases, impls, j, printing(progress));
  progress.clear();
  print_summary(judged.rows);
  print_unreadable(judged.rows);
  for (const std::string& n : judged.notes()) std::printf("note: %s\n", n.c_str());
  const ExitRules rules = exit_rules(impls);
  if (!g.report.empty()) verify::write_run_report(g.report, judged, cases, g.tol_scale, s.shard, rules);
  if (g.tol_scale != 1.0) std::printf("every tolerance scaled by --tol-scale %g\n", g.tol_scale);
  return against_baseline(judged.rows, before, exit_code(judged.rows, rules));
}

const Register reg{
    {"verify", "Replay golden fixtures against implementations", [](CLI::App& sub) {
       sub.add_option("--impl", g.impls, "Implementation names, or all (default: all)");
       sub.add_option("--fixtures", g.fixtures, "Directory searched for *.h5 fixtures")->capture_default_str();
       sub.add_option("--spec", g.spec,
                      "Generate the cases of a suite spec on demand instead "
                      "(e.g. golden/suite-long.json)");
       sub.add_option("--rows", g.rows,
                      "With --spec: reference on about N sampled query rows, "
                      "reference-free checks on every row (docs/tolerance.md)")
           ->check(CLI::PositiveNumber);
       sub.add_option("--filter", g.filter,
                      "Globs on case or file names, ':'-separated; '-' before a glob excludes: 'fp16/*:-*drop*'");
       sub.add_option("--report", g.report, "Write a report: FILE.json or FILE.xml (JUnit)");
       add_shard_option(sub, g.shard);
       sub.add_option("--pass", g.pass, "forward, backward (gradients of the fixtures that have them) or both")
           ->capture_default_str();
       sub.add_flag("--diagnose", g.diagnose,
                    "For each failure: error anatomy, likely causes (tags) and probes that re-run the "
                    "implementation on derived problems (docs/diagnosis.md)");
       sub.add_option("--diagnose-reruns", g.diagnose_reruns, "Re-run budget per diagnosed failure")
           ->capture_default_str()
           ->check(CLI::Range(0, 1000));
       sub.add_option("--repro", g.repro,
                      "With --diagnose: reduce each failure to a small case with the same diagnosis and "
                      "write it into DIR as a fixture that verify replays");
       sub.add_option("--block-mask", g.block_mask,
                      "Q_BLOCK,KV_BLOCK: hand each forward run the exact block mask at these sizes (built-ins "
                      "in this process; cpu-flash consumes it at its tiles, 48,256 for D <= 64; docs/block-mask.md)")
           ->delimiter(',')
           ->expected(2)
           ->check(CLI::PositiveNumber);
       sub.add_option("--tol-scale", g.tol_scale, "Multiply every derived tolerance by X (recorded in the report)")
           ->check(CLI::PositiveNumber);
       sub.add_option("--invariance", g.invariance,
                      "Also check invariance of every judged case: rerun (same bits run after run), "
                      "batch (alone and in other batches), schedule (other threads, splits, block "
                      "orders), layout (BHSD, BSHD, other strides), or all (docs/invariance.md)");
       sub.add_option("--invariance-level", g.invariance_level,
                      "How batch, schedule and layout variants must agree: declared (bitwise where the "
                      "implementation promises it, else within tolerance), bitwise or tolerance")
           ->capture_default_str();
       sub.add_option("--reruns", g.reruns, "With --invariance rerun: runs of each case in all (K)")
           ->capture_default_str()
           ->check(CLI::Range(2, 100));
       sub.add_flag("--allow-unavailable", g.allow_unavailable,
                    "Exit 0 even when a named implementation is unavailable or no case was compared");
       sub.add_option("--baseline", g.baseline,
                      "Compare with a stored report (FILE.json): new failures, lost features, accuracy "
                      "drift inside the tolerance; exit 1 on a regression (docs/regression.md)");
       sub.add_flag(
           "--accept-baseline", g.accept_baseline,
           "Write this run's report to --baseline (creating or replacing it) instead of failing on its regressions");
       add_baseline_options(sub, g.b);
       add_plugin_option(sub, g.plugins);
       return std::function<int()>(run_verify);
     }}};

}  // namespace
}  // namespace attncheck::cli
