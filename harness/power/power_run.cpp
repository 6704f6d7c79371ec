// The report side of `attncheck power` (power_run.hpp). JSON has no infinity: a non-finite number is written as
// null, and read back as infinity (a crashed candidate's ratio).
#include "power_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "attncheck/declarations.hpp"

namespace attncheck::power {

namespace {

nlohmann::json num(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

std::string verdict(const Cell& c) {
  if (c.correct) return c.ratio > 1.0 ? "FALSE-ALARM" : "pass";
  if (!c.applicable) return "n/a";
  if (c.ratio > 1.0) return "detected";
  return c.inside_noise ? "inside-noise" : "below-bound";
}

std::string coverage_verdict(const Coverage& k) {
  if (!k.applicable) return "n/a";
  if (k.caught_by.empty()) return k.undetectable ? "undetectable" : "MISSED";
  return "caught";
}

std::string kinds(const Coverage& k) {
  std::string s;
  for (auto lg : k.caught_by) {
    if (!s.empty()) s += ',';
    s += to_string(lg);
  }
  return s;
}

// The candidate's cells: how many ran, how many failed, the largest error/tolerance.
struct CandidateCells {
  int cells = 0, false_alarms = 0;
  double worst = 0;
};
CandidateCells candidate_cells(const Report& r, const std::string& name) {
  CandidateCells k;
  for (const auto& c : r.cells)
    if (!name.empty() && c.variant == name) ++k.cells, k.false_alarms += c.ratio > 1.0, k.worst = std::max(k.worst, c.ratio);
  return k;
}

// A cell back from its JSON row (a null number was not finite: infinity, as a crashed candidate's ratio is).
Cell cell_of(const nlohmann::json& row) {
  auto number = [&](const char* k) { return row[k].is_null() ? INFINITY : row[k].get<double>(); };
  Cell c;
  c.variant = row["variant"].get<std::string>(), c.correct = row["kind"] == "correct", c.lk = row["lk"].get<int64_t>();
  c.dtype = dtype_from_string(row["dtype"].get<std::string>());
  const std::string lg = row["logits"].get<std::string>();
  for (Logits l : GridOptions{}.logits)
    if (lg == to_string(l)) c.logits = l;
  c.ratio = number("ratio"), c.worst = row["worst"].get<std::string>();
  c.applicable = row["verdict"] != "n/a", c.inside_noise = row["verdict"] == "inside-noise";
  c.fault_err = number("error"), c.noise_err = number("noise");
  return c;
}

}  // namespace

std::optional<Candidate> candidate_of(const ImplPtr& impl) {
  if (!impl) return std::nullopt;
  Candidate c;
  c.name = impl->name();
  c.run = [impl](const Problem& p, const Inputs& in, std::string* why) -> std::optional<Outputs> {
    Outputs out;
    const Support s = run_impl(*impl, p, in, out);
    if (!s.ok) {
      *why = s.reason;
      return std::nullopt;
    }
    return out;
  };
  const Declarations d = impl->declarations();
  c.contract = [d](DType t) { return d.contract_for(t); };
  return c;
}

std::vector<DType> grid_dtypes(const std::vector<std::string>& names) {
  std::vector<DType> r;
  for (const auto& n : names) {
    const DType t = dtype_from_string(n);
    if (t != DType::f32 && t != DType::f16 && t != DType::bf16)
      throw std::invalid_argument("--dtype: the grid has fp32, fp16 and bf16, got '" + n + "'");
    r.push_back(t);
  }
  return r;
}

std::vector<Logits> grid_logits(const std::vector<std::string>& names) {
  std::vector<Logits> r;
  for (const auto& n : names) {
    std::string known;
    for (Logits l : GridOptions{}.logits) {
      known += (known.empty() ? "" : ", ") + std::string(to_string(l));
      if (n == to_string(l)) r.push_back(l);
    }
    if (r.empty() || to_string(r.back()) != n) throw std::invalid_argument("--logits: one of " + known + ", got '" + n + "'");
  }
  return r;
}

nlohmann::json report_json(const Report& r, uint64_t seed, int64_t rows, const std::string& candidate, bool units) {
  const CandidateCells k = candidate_cells(r, candidate);
  nlohmann::json j;
  j["faults"] = r.faults, j["detected"] = r.detected, j["undetectable"] = r.undetectable, j["missed"] = r.missed;
  j["not_applicable"] = r.not_applicable, j["false_alarms"] = r.false_alarms;
  j["headroom_32k_fp32"] = num(r.headroom_32k_fp32), j["accepted"] = r.accepted, j["seconds"] = r.seconds;
  j["seed"] = seed, j["rows"] = rows;
  j["candidate"] = candidate.empty() ? nlohmann::json(nullptr) : nlohmann::json(candidate);
  j["candidate_cells"] = k.cells, j["candidate_false_alarms"] = k.false_alarms;
  j["cells_detected"] = r.cells_detected, j["cells_inside_noise"] = r.cells_inside_noise;
  j["cells_below_bound"] = r.cells_below_bound;
  j["coverage"] = nlohmann::json::array();
  for (const auto& c : r.coverage)
    j["coverage"].push_back({{"fault", c.fault}, {"lk", c.lk}, {"dtype", to_string(c.dtype)},
                             {"verdict", coverage_verdict(c)}, {"caught_by", kinds(c)}});
  j["cells"] = nlohmann::json::array();
  for (const auto& c : r.cells) {
    nlohmann::json row = {{"variant", c.variant}, {"kind", c.correct ? "correct" : "fault"}, {"lk", c.lk},
                          {"dtype", to_string(c.dtype)}, {"logits", to_string(c.logits)}, {"ratio", num(c.ratio)},
                          {"verdict", verdict(c)}, {"error", num(c.fault_err)}, {"noise", num(c.noise_err)},
                          {"worst", c.worst}};
    if (units) row["unit"] = c.configuration;
    j["cells"].push_back(row);
  }
  return j;
}

int merge_report(nlohmann::json& j) {
  Report r;
  for (const auto& row : j["cells"]) r.cells.push_back(cell_of(row));
  summarise(r, GridOptions{}.logits);
  const std::string cand = j["candidate"].is_null() ? "" : j["candidate"].get<std::string>();
  nlohmann::json m = report_json(r, j["seed"].get<uint64_t>(), j["rows"].get<int64_t>(), cand, false);
  m["seconds"] = j["seconds"];
  j = m;
  if (!cand.empty() && j["candidate_cells"] == 0) return 1;
  return r.accepted ? 0 : 1;
}

void print_report(const Report& r, const Impl* cand) {
  // One line per variant, dtype and logits: error/tolerance at each Lk (faults: smallest = closest to passing).
  std::map<std::string, std::vector<const Cell*>> lines;
  std::vector<std::string> order;
  for (const auto& c : r.cells) {
    const std::string key = c.variant + "  " + to_string(c.dtype) + "  " + to_string(c.logits);
    if (!lines.count(key)) order.push_back(key);
    lines[key].push_back(&c);
  }
  for (const auto& key : order) {
    std::printf("%-44s", key.c_str());
    for (const auto* c : lines[key])
      std::printf("  Lk=%-6lld %9.3g %-12s", static_cast<long long>(c->lk), c->ratio, verdict(*c).c_str());
    std::printf("\n");
  }
  // Coverage: per fault, dtype and Lk, the input kinds that catch it.
  std::printf("\n");
  for (const auto& k : r.coverage)
    std::printf("%-20s %-5s Lk=%-7lld %-12s %s\n", k.fault.c_str(), to_string(k.dtype), static_cast<long long>(k.lk),
                coverage_verdict(k).c_str(), kinds(k).c_str());
  if (cand) {
    const CandidateCells k = candidate_cells(r, cand->name());
    std::printf("candidate %s: %d cells run (unsupported problems skipped), %d false alarms, largest error/tol %.3g; "
                "judged at its declared contract:", cand->name().c_str(), k.cells, k.false_alarms, k.worst);
    for (DType t : cand->capabilities().dtypes)
      if (t != DType::u8) std::printf(" %s %s;", to_string(t), cand->declarations().contract_for(t).to_string().c_str());
    std::printf("\n");
  }
  std::printf("cells: detected %d, inside rounding noise %d, below the bound %d\n", r.cells_detected,
              r.cells_inside_noise, r.cells_below_bound);
  std::printf("faults x Lk x dtype %d: caught %d, undetectable %d, MISSED %d, n/a %d; false alarms %d; "
              "headroom at Lk=32k fp32 %.3g; %s in %.1f s\n",
              r.faults, r.detected, r.undetectable, r.missed, r.not_applicable, r.false_alarms, r.headroom_32k_fp32,
              r.accepted ? "ACCEPTED" : "NOT ACCEPTED", r.seconds);
}

int exit_code(const Report& r, const Impl* cand) {
  if (cand && candidate_cells(r, cand->name()).cells == 0) {
    std::fprintf(stderr, "attncheck: exit 1: candidate %s supports none of the grid's problems\n", cand->name().c_str());
    return 1;
  }
  return r.accepted ? 0 : 1;
}

}  // namespace attncheck::power
