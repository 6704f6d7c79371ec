// `attncheck merge`'s joining of shard reports (see merge_reports.hpp).
#include "merge_reports.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace attncheck::verify {
namespace {

using json = nlohmann::json;

json read_report(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument(file + ": cannot be read");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw std::invalid_argument(file + ": not a JSON report (" + e.what() + ")");
  }
}

// The settings of the run, which every shard must share.
json common(const json& j, const Merger& m) {
  json c = json::object();
  for (const auto& k : m.settings) c[k] = j.contains(k) ? j[k] : json(nullptr);
  return c;
}

}  // namespace

MergedReport merge_reports(const std::vector<std::string>& files, const std::vector<Merger>& mergers) {
  if (files.empty()) throw std::invalid_argument("merge: give the shards' JSON reports");
  std::vector<json> parts;
  for (const auto& f : files) {
    parts.push_back(read_report(f));
    const json& s = parts.back();
    if (!s.is_object() || !s.contains("shard") || !s["shard"].is_object() || !s["shard"].contains("verb"))
      throw std::invalid_argument(f + ": field 'shard' missing: not the report of a sharded run (--shard I/N)");
  }
  const json& first = parts.front()["shard"];
  const std::string verb = first.value("verb", "");
  const auto m = std::find_if(mergers.begin(), mergers.end(), [&](const Merger& x) { return x.verb == verb; });
  if (m == mergers.end()) throw std::invalid_argument(files[0] + ": shard.verb '" + verb + "' cannot be merged");
  const int64_t count = first.value("count", int64_t{0});
  std::map<int64_t, size_t> seen;
  for (size_t i = 0; i < parts.size(); ++i) {
    const json& s = parts[i]["shard"];
    if (s.value("verb", "") != verb || s.value("count", int64_t{0}) != count)
      throw std::invalid_argument(files[i] + ": shard " + s.dump() + " is not of the same run as " + files[0] +
                                  " (" + first.dump() + ")");
    if (common(parts[i], *m) != common(parts[0], *m))
      throw std::invalid_argument(files[i] + ": ran with other settings than " + files[0] + ": " +
                                  common(parts[i], *m).dump() + " against " + common(parts[0], *m).dump());
    const int64_t index = s.value("index", int64_t{-1});
    if (seen.count(index))
      throw std::invalid_argument(files[i] + ": shard " + std::to_string(index) + " given twice (also " +
                                  files[seen[index]] + ")");
    seen[index] = i;
  }
  for (int64_t k = 0; k < count; ++k)
    if (!seen.count(k))
      throw std::invalid_argument("merge: shard " + std::to_string(k) + "/" + std::to_string(count) + " is missing");
  if (static_cast<int64_t>(seen.size()) != count)
    throw std::invalid_argument("merge: shard indices outside 0.." + std::to_string(count - 1));

  json merged = parts[0];
  const int indent = first.value("indent", -1);
  merged.erase("shard");
  if (merged.contains("seconds")) {  // the work's total time
    double t = 0;
    for (const auto& p : parts) t += p.value("seconds", 0.0);
    merged["seconds"] = t;
  }
  for (const std::string& key : m->rows) {
    std::vector<std::pair<int64_t, json>> rows;  // stable: rows of one unit keep their order
    for (const auto& p : parts)
      if (p.contains(key))
        for (const auto& r : p[key]) {
          if (!r.contains("unit")) throw std::invalid_argument("merge: a row of '" + key + "' has no field 'unit'");
          rows.emplace_back(r["unit"].get<int64_t>(), r);
        }
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (rows.empty() && !merged.contains(key)) continue;
    merged[key] = json::array();
    for (auto& [u, r] : rows) {
      r.erase("unit");
      merged[key].push_back(std::move(r));
    }
  }
  MergedReport r;
  r.verb = verb, r.shards = parts.size();
  r.exit_code = m->finish(merged, parts);
  r.text = merged.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

}  // namespace attncheck::verify
