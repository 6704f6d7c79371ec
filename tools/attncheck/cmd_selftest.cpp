// `attncheck selftest [--json]`: proof that the property suite catches bugs. Every mutant of the test-only catalogue
// (harness/mutants) must be killed by some property and every correct-but-different variant must pass. With
// `--pass backward`: every backward mutant (backward_mutants.hpp) must fail the gradient comparison on generated
// cases and the correct flash-style backward must pass them all. Exit 0 when killed == mutants and false_alarms == 0.
// The tables and reports: harness/mutants/selftest_report.hpp.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "plugins.hpp"
#include "properties.hpp"
#include "selftest_modules.hpp"
#include "selftest_report.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

std::vector<std::string> g_plugins;
std::string g_candidate;
std::optional<std::string> g_shard;
std::vector<std::string> g_properties;

// The units of a sharded selftest: the catalogue's entries, then the module selftest's rows (forward run);
// the backward list's entries (--pass backward).
void announce(const std::optional<Shard>& shard, bool json, const char* what) {
  if (shard)
    std::fprintf(json ? stderr : stdout, "shard %lld/%lld (%s): %s\n", static_cast<long long>(shard->index),
                 static_cast<long long>(shard->count), shard->source.c_str(), what);
}

// merge: the counts follow from the rows' verdicts, as run_selftest and run_backward_selftest count them.
const RegisterMerge merge{
    {"selftest",
     {"pass", "seed", "cases_per_property", "candidate", "contract"},
     {"details", "module_mutants"},
     [](nlohmann::json& j, const std::vector<nlohmann::json>&) { return mutants::merge_selftest(j); }}};

int run_selftest_cmd(bool json, int cases, uint64_t seed, bool verbose) {
  load_plugins(g_plugins);
  mutants::SelftestOptions o;
  o.candidate = brought_candidate(g_candidate, "selftest");
  if (o.candidate) {
    if (const Support a = o.candidate->available(); !a.ok) {
      std::fprintf(stderr, "attncheck: exit 1: candidate %s is unavailable: %s\n", o.candidate->name().c_str(),
                   a.reason.c_str());
      return 1;
    }
  }
  if (cases > 0) o.cases_per_property = cases;
  for (const auto& n : g_properties)
    if (!prop::find_property(n))
      throw std::invalid_argument("--property: unknown property '" + n + "' (known: " + prop::property_names() + ")");
  o.properties = g_properties;
  o.seed = seed;
  const std::optional<Shard> shard = resolve_shard(g_shard);
  announce(shard, json, "catalogue entries, then module rows");
  if (shard) o.runs_entry = [&](size_t k) { return shard->owns(k); };
  const mutants::SelftestReport r = mutants::run_selftest(o);
  const std::vector<module_check::SelftestRow> mod =
      mutants::module_selftest_rows(o, [&](size_t k) { return runs_unit(shard, r.entries + k); });
  if (json) {
    nlohmann::json j = mutants::selftest_json(r, o, mod, verbose, shard.has_value());
    stamp_shard(j, shard, "selftest", verbose ? 2 : -1);
    std::printf("%s\n", j.dump(verbose ? 2 : -1).c_str());
  } else {
    mutants::print_selftest(r, o, mod, verbose);
  }
  return mutants::selftest_ok(r, mod) ? 0 : 1;
}

// The backward catalogue (docs/backward.md "Backward mutants"): one row per entry, the same exit rule.
int run_backward_selftest_cmd(bool json, int cases) {
  const std::optional<Shard> shard = resolve_shard(g_shard);
  announce(shard, json, "backward entries");
  const auto rs = mutants::run_backward_selftest(cases > 0 ? cases : 60, [&](size_t k) { return runs_unit(shard, k); });
  if (json) {
    nlohmann::json j = mutants::backward_selftest_json(rs, shard.has_value());
    stamp_shard(j, shard, "selftest", -1);
    std::printf("%s\n", j.dump().c_str());
  } else {
    mutants::print_backward_selftest(rs);
  }
  return mutants::backward_selftest_ok(rs) ? 0 : 1;
}

bool g_json = false, g_verbose = false;
std::string g_pass = "forward";
int g_cases = 0;
uint64_t g_seed = mutants::SelftestOptions{}.seed;
const Register reg{
    {"selftest", "Run the property suite against the mutant catalogue (every mutant must die)", [](CLI::App& sub) {
       sub.add_flag("--json", g_json, "Print the report as JSON");
       sub.add_flag("--verbose", g_verbose, "Print every failure message");
       sub.add_option("--cases", g_cases, "Cases per property and entry (default 24)")->check(CLI::PositiveNumber);
       sub.add_option("--seed", g_seed, "Seed of the generated cases");
       sub.add_option("--property", g_properties,
                      "Only these properties (repeatable; a mutant that only others kill survives); "
                      "leaves out the module mutants, which no property judges");
       sub.add_option("--candidate", g_candidate,
                      "Restrict the cases to what this implementation supports and run it too");
       sub.add_option("--pass", g_pass, "forward (the property suite) or backward (the gradient mutants)")
           ->capture_default_str();
       add_plugin_option(sub, g_plugins);
       add_shard_option(sub, g_shard);
       return std::function<int()>([] {
         if (g_pass != "forward" && g_pass != "backward")
           throw std::invalid_argument("--pass: must be forward or backward, got '" + g_pass + "'");
         return g_pass == "backward" ? run_backward_selftest_cmd(g_json, g_cases)
                                     : run_selftest_cmd(g_json, g_cases, g_seed, g_verbose);
       });
     }}};

}  // namespace
}  // namespace attncheck::cli
