// `attncheck property --plugin X.so --cases N`: the property suite (harness/property, RapidCheck with shrinking)
// against any implementation — built-in, plugin (isolated) or worker. A failure is shrunk and written as a
// regression fixture that `attncheck verify --fixtures DIR` replays. Exit 0 all hold, 1 a property failed, the
// implementation is unavailable or no case was supported, 2 bad input. `--report FILE.json` writes every row with
// the accuracy profile of its comparisons (docs/property.md#report).
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "invariance.hpp"
#include "plugins.hpp"
#include "report.hpp"
#include "shard.hpp"
#include "suite_run.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::vector<std::string> impls, plugins, only;
  int cases = 80;
  uint64_t seed = 20261122;
  std::string regressions = "attncheck-regressions";
  bool no_fixture = false;
  bool invariance = false;  // --invariance: the invariance group checks every implementation, declared or not
  std::string report;
  std::optional<std::string> shard;
};
Options g;

using json = nlohmann::json;

const RegisterMerge merge{{"property", {"seed", "cases"}, {"results"}, [](json& j, const std::vector<json>&) {
                             j["summary"] = prop::property_summary(j["results"]);
                             return prop::property_exit(j["results"]);
                           }}};

int run_property() {
  load_plugins(g.plugins);
  if (g.cases < 1) throw std::invalid_argument("--cases: must be >= 1, got " + std::to_string(g.cases));
  if (!g.report.empty() && (g.report.size() < 5 || g.report.substr(g.report.size() - 5) != ".json"))
    throw std::invalid_argument("--report: the property report is JSON: give FILE.json, got '" + g.report + "'");
  std::vector<ImplPtr> impls;
  if (g.impls.empty()) {  // default: the implementations brought on the command line, else every built-in
    for (const auto& i : registry())
      if (i->description().find("[isolated: ") != std::string::npos || i->description().find("[plugin ") != std::string::npos)
        impls.push_back(i);
    if (impls.empty()) impls = registry();
  } else {
    for (const auto& n : g.impls) {
      ImplPtr i = find_impl(n);
      if (!i) throw std::invalid_argument("--impl: unknown implementation '" + n + "'");
      impls.push_back(i);
    }
  }
  std::vector<const prop::Property*> props;
  for (const auto& n : g.only) {
    const prop::Property* p = prop::find_property(n);
    if (!p) throw std::invalid_argument("--property: unknown property '" + n + "' (known: " + prop::property_names() + ")");
    props.push_back(p);
  }
  if (props.empty())
    for (const auto& p : prop::properties()) props.push_back(&p);
  ::setenv("ATTNCHECK_REGRESSIONS_DIR", g.regressions.c_str(), 1);
  invariance::set_asked(g.invariance);

  // The units of work: (implementation, property) pairs in this order (suite_run.hpp).
  const std::optional<Shard> shard = resolve_shard(g.shard);
  if (shard) {
    size_t mine = 0;
    for (size_t u = 0; u < impls.size() * props.size(); ++u) mine += shard->owns(u);
    announce_shard(*shard, mine, "(implementation, property) pairs");
  }
  Progress progress(impls.size() * props.size());
  prop::SuiteRunOptions o;
  o.cases = g.cases, o.seed = g.seed, o.write_fixtures = !g.no_fixture, o.regressions = g.regressions;
  if (shard) o.runs_unit = [&](size_t u) { return shard->owns(u); };
  o.on_step = [&](const std::string& what) { progress.step(what); };
  o.before_line = [&] { progress.clear(); };
  const prop::SuiteRun run = prop::run_suite(impls, props, o);
  if (!g.report.empty()) {
    json j = prop::property_report(run.rows, g.seed, g.cases);
    stamp_shard(j, shard, "property", 2);
    write_report_file(g.report, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  }
  std::printf("\nproperties: %d failed, %d implementations unavailable or unchecked (seed %llu, %d cases each)\n",
              run.failed, run.problems, static_cast<unsigned long long>(g.seed), g.cases);
  return run.failed || run.problems ? 1 : 0;
}

const Register reg{{"property", "Run the property suite (shrinking, regression fixtures) against implementations",
                    [](CLI::App& sub) {
                      sub.add_option("--impl", g.impls, "Implementations (default: the --plugin/--worker ones, else all)");
                      sub.add_option("--cases", g.cases, "Generated cases per property")->capture_default_str();
                      sub.add_option("--seed", g.seed, "RapidCheck seed")->capture_default_str();
                      sub.add_option("--property", g.only, "Only these properties (repeatable)");
                      sub.add_option("--regressions", g.regressions, "Directory for shrunk failures (fixtures)")
                          ->capture_default_str();
                      sub.add_flag("--no-fixture", g.no_fixture, "Do not write shrunk failures");
                      sub.add_option("--report", g.report,
                                     "Write a JSON report: every row with its accuracy profile (FILE.json)");
                      sub.add_flag("--invariance", g.invariance,
                                   "Check rerun, batch and layout invariance whatever the implementations declare "
                                   "(default: only the promises they declare; docs/invariance.md)");
                      add_plugin_option(sub, g.plugins);
                      add_shard_option(sub, g.shard);
                      return std::function<int()>(run_property);
                    }}};

}  // namespace
}  // namespace attncheck::cli
