#include "shard_report.hpp"

#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "reports.hpp"
#include "status.hpp"

namespace attncheck::verify {
namespace {

bool is_json_path(const std::string& p) { return p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0; }

// A shard's JSON report: the run's report with each row's unit, and the shard mark.
std::string shard_report_json(const std::vector<CaseResult>& results, const std::vector<std::string>& notes,
                              double tol_scale, const Shard& shard, const Cases& cases, int64_t unchecksummed,
                              const ExitRules& rules) {
  nlohmann::json j = nlohmann::json::parse(report_json(results, tol_scale, false, notes));
  for (auto& row : j["cases"]) {
    std::optional<size_t> unit;  // one fixture per file; a --spec run names its cases in one file
    const std::string file = row["file"], name = row["fixture"];
    for (const Case& c : cases.list)
      if (c.file == file && (!unit || c.name == name)) unit = c.unit;
    row["unit"] = unit.value();
  }
  stamp_shard(j, shard, "verify", 2);
  j["shard"]["unchecksummed"] = unchecksummed;
  j["shard"]["must_be_available"] = rules.must_be_available;
  j["shard"]["require_compared"] = rules.require_compared;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

void write_run_report(const std::string& path, const Judged& judged, const Cases& cases, double tol_scale,
                      const std::optional<Shard>& shard, const ExitRules& rules) {
  if (shard && is_json_path(path))
    write_report_file(
        path, shard_report_json(judged.rows, judged.notes(), tol_scale, *shard, cases, judged.unchecksummed, rules));
  else
    write_report(path, judged.rows, tol_scale, judged.notes());
}

int merge_shards(nlohmann::json& j, const std::vector<nlohmann::json>& shards) {
  std::vector<CaseResult> rs;
  for (const auto& row : j["cases"]) {
    CaseResult r;
    r.fixture = row["fixture"], r.file = row["file"], r.impl = row["impl"];
    const std::string status = row["status"];
    const std::optional<Status> s = status_from_string(status);
    if (!s) throw std::invalid_argument("merge: unknown status '" + status + "' in a verify shard's row");
    r.status = *s;
    r.message = row["message"], r.judged = row.contains("tensors");
    rs.push_back(std::move(r));
  }
  std::map<std::string, int> n;
  for (Status s : all_statuses()) n[to_string(s)] = 0;
  for (const auto& r : rs) ++n[to_string(r.status)];
  j["summary"] = n;
  int64_t unchecksummed = 0;
  for (const auto& s : shards) unchecksummed += s["shard"].value("unchecksummed", int64_t{0});
  j.erase("notes");
  if (unchecksummed) j["notes"] = {unchecksummed_note(unchecksummed)};
  ExitRules rules;
  rules.must_be_available = shards.front()["shard"].value("must_be_available", std::vector<std::string>{});
  rules.require_compared = shards.front()["shard"].value("require_compared", false);
  return exit_code(rs, rules);
}

}  // namespace attncheck::verify
