// `attncheck property --plugin X.so --cases N`: the property suite (harness/property, RapidCheck with shrinking)
// against any implementation — built-in, plugin (isolated) or worker. A failure is shrunk and written as a
// regression fixture that `attncheck verify --fixtures DIR` replays. Exit 0 all hold, 1 a property failed, the
// implementation is unavailable or no case was supported, 2 bad input. `--report FILE.json` writes every row with
// the accuracy profile of its comparisons (docs/property.md#report).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "invariance.hpp"
#include "plugins.hpp"
#include "properties.hpp"
#include "rc_runner.hpp"
#include "report.hpp"
#include "shard.hpp"

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

// One report row: an implementation's run of one property ("-" and `unavailable` for an implementation that could
// not run at all). Numbers that are not finite are written as null.
json report_row(const std::string& impl, const std::string& property, const std::string& status,
                const prop::RcRun* r = nullptr, const std::string& message = "") {
  json row = {{"impl", impl}, {"property", property}, {"status", status}, {"message", message}};
  if (!r) return row;
  row["supported"] = r->supported, row["unsupported"] = r->unsupported;
  row["max_ratio"] = std::isfinite(r->max_ratio) ? json(r->max_ratio) : json(nullptr);
  if (!r->fixture.empty()) row["fixture"] = r->fixture;
  json acc = json::array();
  for (const auto& [key, a] : r->accuracy) {
    json t = {{"tensor", key.first}, {"dtype", key.second}};
    t.update(accuracy_json(a));
    acc.push_back(t);
  }
  row["accuracy"] = acc;
  return row;
}

json property_summary(const json& rows) {
  json summary = {{"pass", 0}, {"fail", 0}, {"unsupported", 0}, {"unavailable", 0}};
  for (const auto& r : rows) summary[r["status"].get<std::string>()] = summary[r["status"].get<std::string>()].get<int>() + 1;
  return summary;
}

void write_property_report(const json& rows, const std::optional<Shard>& shard) {
  json j = {{"report", "property"}, {"schema_version", 1}, {"seed", g.seed}, {"cases", g.cases},
            {"results", rows}, {"summary", property_summary(rows)}};
  stamp_shard(j, shard, "property", 2);
  write_report_file(g.report, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

// The exit rule over a whole run's rows: a failed property, an unavailable implementation, or one for which no
// generated case of any property was supported.
int property_exit(const json& rows) {
  std::map<std::string, int> supported;  // per implementation that ran
  int failed = 0, problems = 0;
  for (const auto& r : rows) {
    const std::string status = r["status"].get<std::string>(), impl = r["impl"].get<std::string>();
    failed += status == "fail";
    if (status == "unavailable") ++problems;
    else supported[impl] += r.value("supported", 0);
  }
  for (const auto& [impl, n] : supported) problems += n == 0;
  return failed || problems ? 1 : 0;
}
const RegisterMerge merge{{"property", {"seed", "cases"}, {"results"}, [](json& j, const std::vector<json>&) {
                             j["summary"] = property_summary(j["results"]);
                             return property_exit(j["results"]);
                           }}};

int run_property() {
  load_plugins(g.plugins);
  if (g.cases < 1) throw std::invalid_argument("--cases: must be >= 1, got " + std::to_string(g.cases));
  if (!g.report.empty() && (g.report.size() < 5 || g.report.substr(g.report.size() - 5) != ".json"))
    throw std::invalid_argument("--report: the property report is JSON: give FILE.json, got '" + g.report + "'");
  json rows = json::array();
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

  // The units of work: (implementation, property) pairs in this order. An unavailable implementation's one row
  // belongs to its first pair's shard.
  const std::optional<Shard> shard = resolve_shard(g.shard);
  if (shard) {
    size_t mine = 0;
    for (size_t u = 0; u < impls.size() * props.size(); ++u) mine += shard->owns(u);
    announce_shard(*shard, mine, "(implementation, property) pairs");
  }
  int failed = 0, problems = 0;
  Progress progress(impls.size() * props.size());
  for (size_t ii = 0; ii < impls.size(); ++ii) {
    const ImplPtr& impl = impls[ii];
    const size_t unit0 = ii * props.size();
    bool any = false;
    for (size_t pi = 0; pi < props.size(); ++pi) any = any || runs_unit(shard, unit0 + pi);
    if (!any) continue;
    if (const Support a = impl->available(); !a.ok) {
      if (!runs_unit(shard, unit0)) continue;
      std::printf("UNAVAILABLE %-16s %s\n", impl->name().c_str(), a.reason.c_str());
      rows.push_back(unit_row(report_row(impl->name(), "-", "unavailable", nullptr, a.reason), shard, unit0));
      ++problems;
      continue;
    }
    int supported = 0;
    for (size_t pi = 0; pi < props.size(); ++pi) {
      const prop::Property* p = props[pi];
      if (!runs_unit(shard, unit0 + pi)) continue;
      progress.step(impl->name() + " " + p->name);
      rc::detail::TestParams params = rc::detail::configuration().testParams;
      params.maxSuccess = g.cases;
      params.seed = g.seed;
      const prop::RcRun r = prop::rc_run(*p, *impl, params, prop::default_budget(*impl), !g.no_fixture);
      supported += r.supported;
      progress.clear();
      if (r.failed || r.gave_up) {
        ++failed;
        // The shrunk failure and its spec; RapidCheck's own trace (counterexample dump) is left out.
        const std::string m = r.message.substr(0, r.message.find("\nFalsifiable"));
        std::printf("FAIL        %-16s %-26s %s\n", impl->name().c_str(), p->name, m.c_str());
        rows.push_back(unit_row(report_row(impl->name(), p->name, "fail", &r, m), shard, unit0 + pi));
        if (!r.fixture.empty())
          std::printf("            shrunk case written to %s (replay: attncheck verify --fixtures %s --impl %s, same --plugin/--worker)\n",
                      r.fixture.c_str(), g.regressions.c_str(), impl->name().c_str());
      } else if (r.supported == 0) {
        std::printf("UNSUPPORTED %-16s %-26s no generated case was supported (%d tried)\n", impl->name().c_str(),
                    p->name, r.unsupported);
        rows.push_back(unit_row(report_row(impl->name(), p->name, "unsupported", &r, "no generated case was supported"),
                                shard, unit0 + pi));
      } else {
        std::printf("PASS        %-16s %-26s %d cases, %d unsupported, max error/tol %.3g\n", impl->name().c_str(),
                    p->name, r.supported, r.unsupported, r.max_ratio);
        rows.push_back(unit_row(report_row(impl->name(), p->name, "pass", &r, r.worst), shard, unit0 + pi));
      }
      std::fflush(stdout);
    }
    if (supported == 0 && !shard) {  // sharded: merge judges this over every shard's rows
      std::printf("NOTHING     %-16s no generated case was supported: nothing was checked\n", impl->name().c_str());
      ++problems;
    }
  }
  if (!g.report.empty()) write_property_report(rows, shard);
  std::printf("\nproperties: %d failed, %d implementations unavailable or unchecked (seed %llu, %d cases each)\n",
              failed, problems, static_cast<unsigned long long>(g.seed), g.cases);
  return failed || problems ? 1 : 0;
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
