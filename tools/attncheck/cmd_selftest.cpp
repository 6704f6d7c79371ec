// `attncheck selftest [--json]`: proof that the property suite catches bugs. Every mutant of the test-only catalogue
// (harness/mutants) must be killed by some property and every correct-but-different variant must pass. With
// `--pass backward`: every backward mutant (backward_mutants.hpp) must fail the gradient comparison on generated
// cases and the correct flash-style backward must pass them all. Exit 0 when killed == mutants and false_alarms == 0.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "attncheck/declarations.hpp"
#include "attncheck/module_suite.hpp"
#include "backward_mutants.hpp"
#include "module_check.hpp"
#include "command.hpp"
#include "plugins.hpp"
#include "properties.hpp"
#include "selftest.hpp"
#include "shard.hpp"

namespace attncheck::cli {
namespace {

// JSON has no infinity: a kill by NaN, inf or an exact (bitwise, exactly-zero) check reports ratio null.
nlohmann::json ratio_json(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

std::vector<std::string> g_plugins;
std::string g_candidate;
std::optional<std::string> g_shard;
std::vector<std::string> g_properties;

// The units of a sharded selftest: the catalogue's entries, then the module selftest's rows (forward run);
// the backward list's entries (--pass backward).
void announce(const std::optional<Shard>& shard, bool json, const char* what) {
  if (shard) std::fprintf(json ? stderr : stdout, "shard %lld/%lld (%s): %s\n", static_cast<long long>(shard->index),
                          static_cast<long long>(shard->count), shard->source.c_str(), what);
}

// merge: the counts follow from the rows' verdicts, as run_selftest and run_backward_selftest count them.
int selftest_merged(nlohmann::json& j, const std::vector<nlohmann::json>&) {
  int mutants = 0, killed = 0, correct = 0, false_alarms = 0, out_of_scope = 0;
  for (const auto& d : j["details"]) {
    const std::string v = d["verdict"].get<std::string>();
    if (v == "out_of_scope") ++out_of_scope;
    else if (d["kind"] == "correct") ++correct, false_alarms += v == "false_alarm";
    else ++mutants, killed += v == "killed";
  }
  j["mutants"] = mutants, j["killed"] = killed, j["false_alarms"] = false_alarms;
  if (j.value("pass", "") == "backward") return killed == mutants && false_alarms == 0 ? 0 : 1;
  j["correct_variants"] = correct, j["out_of_scope"] = out_of_scope;
  std::vector<module_check::SelftestRow> mod;
  if (j.contains("module_mutants"))
    for (const auto& m : j["module_mutants"])
      mod.push_back({m["name"].get<std::string>(), m["injected"].get<std::string>(), m["applicable"].get<int>(),
                     m["caught"].get<int>(), m["tagged"].get<int>(), {}, 0});
  return killed == mutants && false_alarms == 0 && module_check::selftest_ok(mod) ? 0 : 1;
}
const RegisterMerge merge{
    {"selftest", {"pass", "seed", "cases_per_property", "candidate", "contract"}, {"details", "module_mutants"},
     selftest_merged}};

// The contracts the candidate is judged at, one per dtype it supports ("fp32 qk=bf16,scores=fp32,...").
std::vector<std::pair<std::string, std::string>> candidate_contracts(const Impl& c) {
  std::vector<std::pair<std::string, std::string>> r;
  const Declarations d = c.declarations();
  for (DType t : c.capabilities().dtypes)
    if (t != DType::u8) r.emplace_back(to_string(t), d.contract_for(t).to_string());
  return r;
}

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
  // The module mutants (docs/module.md) on the module suite, built in memory: the cpu entry's, so not with a candidate.
  std::vector<module_check::SelftestRow> mod;
  if (!o.candidate && o.properties.empty())  // --property asks about the property suite alone
    mod = module_check::selftest(module_suite(), [&](size_t k) { return runs_unit(shard, r.entries + k); });
  const bool ok = r.killed == r.mutants && r.false_alarms == 0 && module_check::selftest_ok(mod);
  if (json) {
    nlohmann::json j;
    j["mutants"] = r.mutants, j["killed"] = r.killed, j["false_alarms"] = r.false_alarms;
    j["correct_variants"] = r.correct, j["seconds"] = r.seconds, j["seed"] = o.seed;
    j["cases_per_property"] = o.cases_per_property;
    j["out_of_scope"] = r.out_of_scope;
    j["candidate"] = o.candidate ? nlohmann::json(o.candidate->name()) : nlohmann::json(nullptr);
    if (o.candidate)  // the mutants and the candidate are judged at the candidate's declared contract
      for (const auto& [t, c] : candidate_contracts(*o.candidate)) j["contract"][t] = c;
    j["details"] = nlohmann::json::array();
    for (const auto& e : r.details) {
      nlohmann::json d;
      d["name"] = e.name, d["bug"] = e.bug, d["kind"] = e.correct ? "correct" : "mutant";
      d["verdict"] = e.out_of_scope ? "out_of_scope"
                     : e.correct  ? (e.failures.empty() ? "passed" : "false_alarm")
                                  : (e.failures.empty() ? "survived" : "killed");
      d["killed_by"] = nlohmann::json::array();
      for (const auto& k : e.failures) {
        nlohmann::json kj = {{"property", k.property}, {"case", k.case_name}, {"ratio", ratio_json(k.ratio)}};
        if (verbose) kj["message"] = k.message;
        d["killed_by"].push_back(kj);
      }
      d["max_pass_ratio"] = e.max_pass_ratio, d["checks"] = e.checks, d["unsupported"] = e.unsupported;
      j["details"].push_back(unit_row(d, shard, e.entry));
    }
    for (const auto& m : mod)
      j["module_mutants"].push_back(unit_row({{"name", m.impl}, {"injected", m.injected}, {"applicable", m.applicable},
                                              {"caught", m.caught}, {"tagged", m.tagged}, {"other", m.other_tags}},
                                             shard, r.entries + m.entry));
    stamp_shard(j, shard, "selftest", verbose ? 2 : -1);
    std::printf("%s\n", j.dump(verbose ? 2 : -1).c_str());
  } else {
    for (const auto& e : r.details) {
      std::printf("%-24s %-12s", e.name.c_str(),
                  e.out_of_scope ? "out-of-scope"
                  : e.correct    ? (e.failures.empty() ? "passed" : "FALSE-ALARM")
                                 : (e.failures.empty() ? "SURVIVED" : "killed"));
      if (e.failures.empty())
        std::printf(" max error/tol %.3g over %d checks", e.max_pass_ratio, e.checks);
      for (const auto& k : e.failures) std::printf(" %s(%.3g)", k.property.c_str(), k.ratio);
      std::printf("\n");
      if (verbose || (e.correct && !e.failures.empty()))
        for (const auto& k : e.failures) std::printf("    %s: %s\n", k.property.c_str(), k.message.c_str());
    }
    std::printf("mutants %d killed %d false_alarms %d (%d correct variants) in %.1f s\n", r.mutants, r.killed,
                r.false_alarms, r.correct, r.seconds);
    for (const auto& m : mod) {
      std::printf("module %-30s %s: %d of %d module cases fail", m.impl.c_str(),
                  m.injected.empty() ? "correct" : ("injects " + m.injected).c_str(), m.caught, m.applicable);
      if (!m.injected.empty()) std::printf(", %d diagnosed %s", m.tagged, m.injected.c_str());
      std::printf("\n");
      for (const auto& t : m.other_tags) std::printf("    %s\n", t.c_str());
    }
    if (!mod.empty())
      std::printf("module mutants: %s\n", module_check::selftest_ok(mod) ? "every one caught and tagged, no false alarm"
                                                                        : "FAILED (docs/module.md)");
    if (o.candidate) {
      std::printf("candidate %s: cases restricted to its capabilities; %d mutants out of scope (their bug lies in a "
                  "feature it does not support)\n", o.candidate->name().c_str(), r.out_of_scope);
      std::printf("tolerances of the candidate and of every mutant follow its declared precision contract:");
      for (const auto& [t, c] : candidate_contracts(*o.candidate)) std::printf(" %s %s;", t.c_str(), c.c_str());
      std::printf("\n");
    }
  }
  return ok ? 0 : 1;
}

// The backward catalogue (docs/backward.md "Backward mutants"): one row per entry, the same exit rule.
int run_backward_selftest_cmd(bool json, int cases) {
  const std::optional<Shard> shard = resolve_shard(g_shard);
  announce(shard, json, "backward entries");
  const auto rs = mutants::run_backward_selftest(cases > 0 ? cases : 60,
                                                 [&](size_t k) { return runs_unit(shard, k); });
  int mutants = 0, killed = 0, false_alarms = 0;
  nlohmann::json details = nlohmann::json::array();
  for (const auto& r : rs) {
    mutants += r.correct ? 0 : 1;
    killed += !r.correct && r.killed ? 1 : 0;
    false_alarms += r.correct && r.killed ? 1 : 0;
    const char* verdict = r.correct ? (r.killed ? "false_alarm" : "passed") : (r.killed ? "killed" : "survived");
    if (json) {
      details.push_back(unit_row({{"name", r.name}, {"kind", r.correct ? "correct" : "mutant"}, {"verdict", verdict},
                                  {"cases", r.ran}, {"max_pass_ratio", r.max_ratio}, {"first_failure", r.first_failure}},
                                 shard, r.entry));
    } else {
      std::printf("%-28s %-12s %d cases, max error/tol of the passing ones %.3g%s%s\n", r.name.c_str(), verdict, r.ran,
                  r.max_ratio, r.killed ? "; first failure: " : "", r.first_failure.c_str());
    }
  }
  if (json) {
    nlohmann::json j = {{"pass", "backward"}, {"mutants", mutants}, {"killed", killed}, {"false_alarms", false_alarms},
                        {"details", details}};
    stamp_shard(j, shard, "selftest", -1);
    std::printf("%s\n", j.dump().c_str());
  } else
    std::printf("backward mutants %d killed %d false_alarms %d\n", mutants, killed, false_alarms);
  return killed == mutants && false_alarms == 0 ? 0 : 1;
}

bool g_json = false, g_verbose = false;
std::string g_pass = "forward";
int g_cases = 0;
uint64_t g_seed = mutants::SelftestOptions{}.seed;
const Register reg{{"selftest", "Run the property suite against the mutant catalogue (every mutant must die)",
                    [](CLI::App& sub) {
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
