// `attncheck power [--json] [--lk 1024,8192] [--rows N] [--plugin LIB | --worker CMD]`: fault injection over the
// Lk x dtype x logits grid (harness/power; its table and report: power_run.hpp); a plugin or worker runs as one more
// correct variant, at its contract. Exit 0 when every applicable fault is caught on every (Lk, dtype) by some input
// kind or is inside rounding noise for all of them, no correct variant fails and correct variants use >= 1% of the
// bound at Lk = 32k fp32; else 1.
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "plugins.hpp"
#include "power_run.hpp"
#include "merge_table.hpp"
#include "report.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

std::vector<std::string> g_plugins;
std::string g_candidate;
std::optional<std::string> g_shard;

// merge: the cells of every shard, summarised again as run_grid summarises them; the exit rule of run_power.
const RegisterMerge merge{
    {"power", {"seed", "rows", "candidate"}, {"cells"}, [](nlohmann::json& j, const std::vector<nlohmann::json>&) {
       return power::merge_report(j);
     }}};

std::vector<std::string> g_dtypes, g_logits;  // a part of the grid (default: all)

int run_power(bool json, const std::vector<int64_t>& lk, int64_t rows, uint64_t seed) {
  load_plugins(g_plugins);
  const ImplPtr cand = brought_candidate(g_candidate, "power");
  if (cand)
    if (const Support a = cand->available(); !a.ok) {
      std::fprintf(stderr, "attncheck: exit 1: candidate %s is unavailable: %s\n", cand->name().c_str(),
                   a.reason.c_str());
      return 1;
    }
  power::GridOptions o;
  o.candidate = power::candidate_of(cand);
  if (!lk.empty()) o.lk = lk;
  if (!g_dtypes.empty()) o.dtypes = power::grid_dtypes(g_dtypes);
  if (!g_logits.empty()) o.logits = power::grid_logits(g_logits);
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
  if (json) {
    nlohmann::json j = power::report_json(r, seed, rows, cand ? cand->name() : "", shard.has_value());
    stamp_shard(j, shard, "power", 1);
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    power::print_report(r, cand.get());
  }
  return power::exit_code(r, cand.get());
}

bool g_json = false;
std::string g_merge;  // --merge DIR: the merge faults' table instead of the attention grid (docs/states.md)
std::vector<int64_t> g_lk;
int64_t g_rows = power::GridOptions{}.rows;
uint64_t g_seed = power::GridOptions{}.seed;
const Register reg{
    {"power", "Inject faults into a correct fast kernel and show which the tolerance model catches", [](CLI::App& sub) {
       sub.add_flag("--json", g_json, "Print the report as JSON");
       sub.add_option("--lk", g_lk, "Key lengths of the grid (default 1024,8192,32768,131072)")->delimiter(',');
       sub.add_option("--dtype", g_dtypes, "Only these dtypes of the grid (fp32, fp16, bf16)")->delimiter(',');
       sub.add_option("--logits", g_logits, "Only these input kinds of the grid (normal, large, near_one_hot, hazard)")
           ->delimiter(',');
       sub.add_option("--rows", g_rows, "Query rows judged per problem (default 8)");
       sub.add_option("--seed", g_seed, "Seed of the inputs");
       sub.add_option("--candidate", g_candidate,
                      "Run this implementation as one more correct variant, at its declared contract");
       sub.add_option("--merge", g_merge,
                      "Run the merge faults on the merge fixtures under DIR instead "
                      "(e.g. golden/states; docs/states.md)");
       add_plugin_option(sub, g_plugins);
       add_shard_option(sub, g_shard);
       return std::function<int()>([] {
         if (g_shard && !g_merge.empty())
           throw std::invalid_argument("--shard: not with --merge (the merge table is one short run)");
         return g_merge.empty() ? run_power(g_json, g_lk, g_rows, g_seed)
                                : power::print_merge_table(power::merge_table(g_merge));
       });
     }}};

}  // namespace
}  // namespace attncheck::cli
