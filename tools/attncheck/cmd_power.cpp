// `attncheck power [--json] [--lk 1024,8192] [--rows N] [--plugin LIB | --worker CMD]`: fault injection over the
// Lk x dtype x logits grid (harness/power); a plugin or worker runs as one more correct variant, at its contract. Exit 0 when every applicable fault is caught on every (Lk, dtype) by some input kind or is inside
// rounding noise for all of them, no correct variant fails and correct variants use >= 1% of the bound at Lk = 32k
// fp32; else 1.
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "attncheck/declarations.hpp"
#include "command.hpp"
#include "plugins.hpp"
#include "power.hpp"
#include "merge_rows.hpp"
#include "report.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

nlohmann::json num(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

std::string verdict(const power::Cell& c) {
  if (c.correct) return c.ratio > 1.0 ? "FALSE-ALARM" : "pass";
  if (!c.applicable) return "n/a";
  if (c.ratio > 1.0) return "detected";
  return c.inside_noise ? "inside-noise" : "below-bound";
}

std::string coverage_verdict(const power::Coverage& k) {
  if (!k.applicable) return "n/a";
  if (k.caught_by.empty()) return k.undetectable ? "undetectable" : "MISSED";
  return "caught";
}

std::string kinds(const power::Coverage& k) {
  std::string s;
  for (auto lg : k.caught_by) s += (s.empty() ? "" : ",") + std::string(power::to_string(lg));
  return s;
}

std::vector<std::string> g_plugins;
std::string g_candidate;
std::optional<std::string> g_shard;

// The candidate (--plugin/--worker/--candidate) as the engine's callbacks: run through run_impl, judged at its
// declared contract.
std::optional<power::Candidate> candidate_of(const ImplPtr& impl) {
  if (!impl) return std::nullopt;
  power::Candidate c;
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

// The JSON report of a grid (`--json`). `candidate`: the --candidate's name, or "". Sharded, each cell carries its
// configuration as its unit.
nlohmann::json power_json(const power::Report& r, uint64_t seed, int64_t rows, const std::string& candidate,
                          const std::optional<Shard>& shard) {
  int cand_cells = 0, cand_alarms = 0;
  for (const auto& c : r.cells)
    if (!candidate.empty() && c.variant == candidate) ++cand_cells, cand_alarms += c.ratio > 1.0;
  nlohmann::json j;
  j["faults"] = r.faults, j["detected"] = r.detected, j["undetectable"] = r.undetectable, j["missed"] = r.missed;
  j["not_applicable"] = r.not_applicable, j["false_alarms"] = r.false_alarms;
  j["headroom_32k_fp32"] = num(r.headroom_32k_fp32), j["accepted"] = r.accepted, j["seconds"] = r.seconds;
  j["seed"] = seed, j["rows"] = rows;
  j["candidate"] = candidate.empty() ? nlohmann::json(nullptr) : nlohmann::json(candidate);
  j["candidate_cells"] = cand_cells, j["candidate_false_alarms"] = cand_alarms;
  j["cells_detected"] = r.cells_detected, j["cells_inside_noise"] = r.cells_inside_noise;
  j["cells_below_bound"] = r.cells_below_bound;
  j["coverage"] = nlohmann::json::array();
  for (const auto& k : r.coverage)
    j["coverage"].push_back({{"fault", k.fault}, {"lk", k.lk}, {"dtype", to_string(k.dtype)},
                             {"verdict", coverage_verdict(k)}, {"caught_by", kinds(k)}});
  j["cells"] = nlohmann::json::array();
  for (const auto& c : r.cells)
    j["cells"].push_back(unit_row({{"variant", c.variant}, {"kind", c.correct ? "correct" : "fault"}, {"lk", c.lk},
                                   {"dtype", to_string(c.dtype)}, {"logits", power::to_string(c.logits)},
                                   {"ratio", num(c.ratio)}, {"verdict", verdict(c)}, {"error", num(c.fault_err)},
                                   {"noise", num(c.noise_err)}, {"worst", c.worst}},
                                  shard, c.configuration));
  return j;
}

// A cell back from its JSON row (a null number was not finite: infinity, as a crashed candidate's ratio is).
power::Cell cell_of(const nlohmann::json& row) {
  auto number = [&](const char* k) { return row[k].is_null() ? INFINITY : row[k].get<double>(); };
  power::Cell c;
  c.variant = row["variant"].get<std::string>(), c.correct = row["kind"] == "correct", c.lk = row["lk"].get<int64_t>();
  c.dtype = dtype_from_string(row["dtype"].get<std::string>());
  const std::string lg = row["logits"].get<std::string>();
  for (power::Logits l : power::GridOptions{}.logits)
    if (lg == power::to_string(l)) c.logits = l;
  c.ratio = number("ratio"), c.worst = row["worst"].get<std::string>();
  c.applicable = row["verdict"] != "n/a", c.inside_noise = row["verdict"] == "inside-noise";
  c.fault_err = number("error"), c.noise_err = number("noise");
  return c;
}

// merge: the cells of every shard, summarised again as run_grid summarises them; the exit rule of run_power.
const RegisterMerge merge{{"power", {"seed", "rows", "candidate"}, {"cells"},
                           [](nlohmann::json& j, const std::vector<nlohmann::json>&) {
                             power::Report r;
                             for (const auto& row : j["cells"]) r.cells.push_back(cell_of(row));
                             power::summarise(r, power::GridOptions{}.logits);
                             const std::string cand = j["candidate"].is_null() ? "" : j["candidate"].get<std::string>();
                             nlohmann::json m = power_json(r, j["seed"].get<uint64_t>(), j["rows"].get<int64_t>(),
                                                           cand, std::nullopt);
                             m["seconds"] = j["seconds"];
                             j = m;
                             if (!cand.empty() && j["candidate_cells"] == 0) return 1;
                             return r.accepted ? 0 : 1;
                           }}};

std::vector<std::string> g_dtypes, g_logits;  // a part of the grid (default: all)

int run_power(bool json, const std::vector<int64_t>& lk, int64_t rows, uint64_t seed) {
  load_plugins(g_plugins);
  const ImplPtr cand = brought_candidate(g_candidate, "power");
  if (cand)
    if (const Support a = cand->available(); !a.ok) {
      std::fprintf(stderr, "attncheck: exit 1: candidate %s is unavailable: %s\n", cand->name().c_str(), a.reason.c_str());
      return 1;
    }
  power::GridOptions o;
  o.candidate = candidate_of(cand);
  if (!lk.empty()) o.lk = lk;
  if (!g_dtypes.empty()) {
    o.dtypes.clear();
    for (const auto& n : g_dtypes) {
      const DType t = dtype_from_string(n);
      if (t != DType::f32 && t != DType::f16 && t != DType::bf16)
        throw std::invalid_argument("--dtype: the grid has fp32, fp16 and bf16, got '" + n + "'");
      o.dtypes.push_back(t);
    }
  }
  if (!g_logits.empty()) {
    o.logits.clear();
    for (const auto& n : g_logits) {
      std::string known;
      for (power::Logits l : power::GridOptions{}.logits) {
        known += (known.empty() ? "" : ", ") + std::string(power::to_string(l));
        if (n == power::to_string(l)) o.logits.push_back(l);
      }
      if (o.logits.empty() || power::to_string(o.logits.back()) != n)
        throw std::invalid_argument("--logits: one of " + known + ", got '" + n + "'");
    }
  }
  for (int64_t x : o.lk)
    if (x < 1024) throw CLI::ValidationError("--lk", "each Lk must be >= 1024 (got " + std::to_string(x) + ")");
  if (rows < 4) throw CLI::ValidationError("--rows", "must be >= 4 (got " + std::to_string(rows) + ")");
  o.rows = rows, o.seed = seed;
  Progress progress(o.lk.size() * o.dtypes.size() * o.logits.size());
  o.on_configuration = [&](const std::string& what) { progress.step(what); };
  const std::optional<Shard> shard = resolve_shard(g_shard);
  if (shard) {
    o.runs_configuration = [&](size_t k) { return shard->owns(k); };
    size_t mine = 0;
    for (size_t k = 0; k < o.lk.size() * o.dtypes.size() * o.logits.size(); ++k) mine += shard->owns(k);
    announce_shard(*shard, mine, "configurations (Lk, dtype, logits)", json ? stderr : stdout);
  }
  const power::Report r = power::run_grid(o);
  progress.clear();
  int cand_cells = 0, cand_alarms = 0;
  double cand_worst = 0;
  for (const auto& c : r.cells)
    if (cand && c.variant == cand->name())
      ++cand_cells, cand_alarms += c.ratio > 1.0, cand_worst = std::max(cand_worst, c.ratio);
  if (json) {
    nlohmann::json j = power_json(r, seed, rows, cand ? cand->name() : "", shard);
    j["seconds"] = r.seconds;
    stamp_shard(j, shard, "power", 1);
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    // One line per variant, dtype and logits: error/tolerance at each Lk (faults: smallest = closest to passing).
    std::map<std::string, std::vector<const power::Cell*>> lines;
    std::vector<std::string> order;
    for (const auto& c : r.cells) {
      const std::string key = c.variant + "  " + to_string(c.dtype) + "  " + power::to_string(c.logits);
      if (!lines.count(key)) order.push_back(key);
      lines[key].push_back(&c);
    }
    for (const auto& key : order) {
      std::printf("%-44s", key.c_str());
      for (const auto* c : lines[key]) std::printf("  Lk=%-6lld %9.3g %-12s", static_cast<long long>(c->lk), c->ratio, verdict(*c).c_str());
      std::printf("\n");
    }
    // Coverage: per fault, dtype and Lk, the input kinds that catch it.
    std::printf("\n");
    for (const auto& k : r.coverage)
      std::printf("%-20s %-5s Lk=%-7lld %-12s %s\n", k.fault.c_str(), to_string(k.dtype),
                  static_cast<long long>(k.lk), coverage_verdict(k).c_str(), kinds(k).c_str());
    if (cand) {
      std::printf("candidate %s: %d cells run (unsupported problems skipped), %d false alarms, largest error/tol %.3g; "
                  "judged at its declared contract:", cand->name().c_str(), cand_cells, cand_alarms, cand_worst);
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
  if (cand && cand_cells == 0) {
    std::fprintf(stderr, "attncheck: exit 1: candidate %s supports none of the grid's problems\n", cand->name().c_str());
    return 1;
  }
  return r.accepted ? 0 : 1;
}

bool g_json = false;
std::string g_merge;  // --merge DIR: the merge faults' table instead of the attention grid (docs/states.md)
std::vector<int64_t> g_lk;
int64_t g_rows = power::GridOptions{}.rows;
uint64_t g_seed = power::GridOptions{}.seed;
const Register reg{{"power", "Inject faults into a correct fast kernel and show which the tolerance model catches",
                    [](CLI::App& sub) {
                      sub.add_flag("--json", g_json, "Print the report as JSON");
                      sub.add_option("--lk", g_lk, "Key lengths of the grid (default 1024,8192,32768,131072)")
                          ->delimiter(',');
                      sub.add_option("--dtype", g_dtypes, "Only these dtypes of the grid (fp32, fp16, bf16)")
                          ->delimiter(',');
                      sub.add_option("--logits", g_logits,
                                     "Only these input kinds of the grid (normal, large, near_one_hot, hazard)")
                          ->delimiter(',');
                      sub.add_option("--rows", g_rows, "Query rows judged per problem (default 8)");
                      sub.add_option("--seed", g_seed, "Seed of the inputs");
                      sub.add_option("--candidate", g_candidate,
                                     "Run this implementation as one more correct variant, at its declared contract");
                      sub.add_option("--merge", g_merge, "Run the merge faults on the merge fixtures under DIR instead "
                                                         "(e.g. golden/states; docs/states.md)");
                      add_plugin_option(sub, g_plugins);
                      add_shard_option(sub, g_shard);
                      return std::function<int()>([] {
                        if (g_shard && !g_merge.empty())
                          throw std::invalid_argument("--shard: not with --merge (the merge table is one short run)");
                        return g_merge.empty() ? run_power(g_json, g_lk, g_rows, g_seed) : merge_power_table(g_merge);
                      });
                    }}};

}  // namespace
}  // namespace attncheck::cli
