// The property suite as `attncheck property` runs it (suite_run.hpp).
#include "suite_run.hpp"

#include <cmath>
#include <cstdio>
#include <map>

#include "rc_runner.hpp"
#include "reports.hpp"  // harness/verify: accuracy_json
#include "status.hpp"   // harness/verify: the row statuses

namespace attncheck::prop {

namespace {

using json = nlohmann::json;
using verify::Status;

// One report row: an implementation's run of one property ("-" and `unavailable` for an implementation that could
// not run at all). Numbers that are not finite are written as null.
json report_row(const std::string& impl, const std::string& property, Status status, const RcRun* r = nullptr,
                const std::string& message = "") {
  json row = {{"impl", impl}, {"property", property}, {"status", to_string(status)}, {"message", message}};
  if (!r) return row;
  row["supported"] = r->supported, row["unsupported"] = r->unsupported;
  row["max_ratio"] = std::isfinite(r->max_ratio) ? json(r->max_ratio) : json(nullptr);
  if (!r->fixture.empty()) row["fixture"] = r->fixture;
  json acc = json::array();
  for (const auto& [key, a] : r->accuracy) {
    json t = {{"tensor", key.first}, {"dtype", key.second}};
    t.update(verify::accuracy_json(a));
    acc.push_back(t);
  }
  row["accuracy"] = acc;
  return row;
}

}  // namespace

SuiteRun run_suite(const std::vector<ImplPtr>& impls, const std::vector<const Property*>& props,
                   const SuiteRunOptions& o) {
  SuiteRun run;
  const bool sharded = static_cast<bool>(o.runs_unit);
  auto runs = [&](size_t unit) { return !sharded || o.runs_unit(unit); };
  auto add = [&](json row, size_t unit) {
    if (sharded) row["unit"] = unit;
    run.rows.push_back(row);
  };
  auto line = [&] {
    if (o.before_line) o.before_line();
  };
  for (size_t ii = 0; ii < impls.size(); ++ii) {
    const ImplPtr& impl = impls[ii];
    const size_t unit0 = ii * props.size();
    bool any = false;
    for (size_t pi = 0; pi < props.size(); ++pi) any = any || runs(unit0 + pi);
    if (!any) continue;
    if (const Support a = impl->available(); !a.ok) {
      if (!runs(unit0)) continue;
      std::printf("UNAVAILABLE %-16s %s\n", impl->name().c_str(), a.reason.c_str());
      add(report_row(impl->name(), "-", Status::unavailable, nullptr, a.reason), unit0);
      ++run.problems;
      continue;
    }
    int supported = 0;
    for (size_t pi = 0; pi < props.size(); ++pi) {
      const Property* p = props[pi];
      if (!runs(unit0 + pi)) continue;
      if (o.on_step) o.on_step(impl->name() + " " + p->name);
      rc::detail::TestParams params = rc::detail::configuration().testParams;
      params.maxSuccess = o.cases;
      params.seed = o.seed;
      const RcRun r = rc_run(*p, *impl, params, default_budget(*impl), o.write_fixtures);
      supported += r.supported;
      line();
      if (r.failed || r.gave_up) {
        ++run.failed;
        // The shrunk failure and its spec; RapidCheck's own trace (counterexample dump) is left out.
        const std::string m = r.message.substr(0, r.message.find("\nFalsifiable"));
        std::printf("FAIL        %-16s %-26s %s\n", impl->name().c_str(), p->name, m.c_str());
        add(report_row(impl->name(), p->name, Status::fail, &r, m), unit0 + pi);
        if (!r.fixture.empty())
          std::printf(
              "            shrunk case written to %s (replay: attncheck verify --fixtures %s --impl %s, same "
              "--plugin/--worker)\n",
              r.fixture.c_str(), o.regressions.c_str(), impl->name().c_str());
      } else if (r.supported == 0) {
        std::printf("UNSUPPORTED %-16s %-26s no generated case was supported (%d tried)\n", impl->name().c_str(),
                    p->name, r.unsupported);
        add(report_row(impl->name(), p->name, Status::unsupported, &r, "no generated case was supported"), unit0 + pi);
      } else {
        std::printf("PASS        %-16s %-26s %d cases, %d unsupported, max error/tol %.3g\n", impl->name().c_str(),
                    p->name, r.supported, r.unsupported, r.max_ratio);
        add(report_row(impl->name(), p->name, Status::pass, &r, r.worst), unit0 + pi);
      }
      std::fflush(stdout);
    }
    if (supported == 0 && !sharded) {  // sharded: merge judges this over every shard's rows
      std::printf("NOTHING     %-16s no generated case was supported: nothing was checked\n", impl->name().c_str());
      ++run.problems;
    }
  }
  return run;
}

json property_summary(const json& rows) {
  json summary = json::object();
  for (Status s : {Status::pass, Status::fail, Status::unsupported, Status::unavailable}) summary[to_string(s)] = 0;
  for (const auto& r : rows)
    summary[r["status"].get<std::string>()] = summary[r["status"].get<std::string>()].get<int>() + 1;
  return summary;
}

json property_report(const json& rows, uint64_t seed, int cases) {
  return {{"report", "property"}, {"schema_version", 1}, {"seed", seed},
          {"cases", cases},       {"results", rows},     {"summary", property_summary(rows)}};
}

int property_exit(const json& rows) {
  std::map<std::string, int> supported;  // per implementation that ran
  int failed = 0, problems = 0;
  for (const auto& r : rows) {
    const std::optional<Status> status = verify::status_from_string(r["status"].get<std::string>());
    const std::string impl = r["impl"].get<std::string>();
    failed += status == Status::fail;
    if (status == Status::unavailable)
      ++problems;
    else
      supported[impl] += r.value("supported", 0);
  }
  for (const auto& [impl, n] : supported) problems += n == 0;
  return failed || problems ? 1 : 0;
}

}  // namespace attncheck::prop
