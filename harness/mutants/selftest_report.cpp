// The report side of `attncheck selftest` (selftest_report.hpp). JSON has no infinity: a kill by NaN, inf or an
// exact (bitwise, exactly-zero) check reports ratio null.
#include "selftest_report.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "attncheck/declarations.hpp"

namespace attncheck::mutants {

namespace {

nlohmann::json ratio_json(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

// The contracts the candidate is judged at, one per dtype it supports ("fp32 qk=bf16,scores=fp32,...").
std::vector<std::pair<std::string, std::string>> candidate_contracts(const Impl& c) {
  std::vector<std::pair<std::string, std::string>> r;
  const Declarations d = c.declarations();
  for (DType t : c.capabilities().dtypes)
    if (t != DType::u8) r.emplace_back(to_string(t), d.contract_for(t).to_string());
  return r;
}

const char* backward_verdict(const BackwardSelftestResult& r) {
  return r.correct ? (r.killed ? "false_alarm" : "passed") : (r.killed ? "killed" : "survived");
}

}  // namespace

bool selftest_ok(const SelftestReport& r, const std::vector<module_check::SelftestRow>& mod) {
  return r.killed == r.mutants && r.false_alarms == 0 && module_check::selftest_ok(mod);
}

nlohmann::json selftest_json(const SelftestReport& r, const SelftestOptions& o,
                             const std::vector<module_check::SelftestRow>& mod, bool verbose, bool units) {
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
                   : e.correct    ? (e.failures.empty() ? "passed" : "false_alarm")
                                  : (e.failures.empty() ? "survived" : "killed");
    d["killed_by"] = nlohmann::json::array();
    for (const auto& k : e.failures) {
      nlohmann::json kj = {{"property", k.property}, {"case", k.case_name}, {"ratio", ratio_json(k.ratio)}};
      if (verbose) kj["message"] = k.message;
      d["killed_by"].push_back(kj);
    }
    d["max_pass_ratio"] = e.max_pass_ratio, d["checks"] = e.checks, d["unsupported"] = e.unsupported;
    if (units) d["unit"] = e.entry;
    j["details"].push_back(d);
  }
  for (const auto& m : mod) {
    nlohmann::json row = {{"name", m.impl},         {"injected", m.injected}, {"applicable", m.applicable},
                          {"caught", m.caught},     {"tagged", m.tagged},     {"other", m.other_tags}};
    if (units) row["unit"] = r.entries + m.entry;
    j["module_mutants"].push_back(row);
  }
  return j;
}

void print_selftest(const SelftestReport& r, const SelftestOptions& o,
                    const std::vector<module_check::SelftestRow>& mod, bool verbose) {
  for (const auto& e : r.details) {
    std::printf("%-24s %-12s", e.name.c_str(),
                e.out_of_scope ? "out-of-scope"
                : e.correct    ? (e.failures.empty() ? "passed" : "FALSE-ALARM")
                               : (e.failures.empty() ? "SURVIVED" : "killed"));
    if (e.failures.empty()) std::printf(" max error/tol %.3g over %d checks", e.max_pass_ratio, e.checks);
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

bool backward_selftest_ok(const std::vector<BackwardSelftestResult>& rs) {
  for (const auto& r : rs)
    if (r.correct == r.killed) return false;  // a false alarm, or a mutant that survived
  return true;
}

nlohmann::json backward_selftest_json(const std::vector<BackwardSelftestResult>& rs, bool units) {
  int mutants = 0, killed = 0, false_alarms = 0;
  nlohmann::json details = nlohmann::json::array();
  for (const auto& r : rs) {
    mutants += r.correct ? 0 : 1;
    killed += !r.correct && r.killed ? 1 : 0;
    false_alarms += r.correct && r.killed ? 1 : 0;
    nlohmann::json row = {{"name", r.name},        {"kind", r.correct ? "correct" : "mutant"},
                          {"verdict", backward_verdict(r)}, {"cases", r.ran},
                          {"max_pass_ratio", r.max_ratio}, {"first_failure", r.first_failure}};
    if (units) row["unit"] = r.entry;
    details.push_back(row);
  }
  return {{"pass", "backward"}, {"mutants", mutants}, {"killed", killed}, {"false_alarms", false_alarms},
          {"details", details}};
}

void print_backward_selftest(const std::vector<BackwardSelftestResult>& rs) {
  int mutants = 0, killed = 0, false_alarms = 0;
  for (const auto& r : rs) {
    mutants += r.correct ? 0 : 1;
    killed += !r.correct && r.killed ? 1 : 0;
    false_alarms += r.correct && r.killed ? 1 : 0;
    std::printf("%-28s %-12s %d cases, max error/tol of the passing ones %.3g%s%s\n", r.name.c_str(),
                backward_verdict(r), r.ran, r.max_ratio, r.killed ? "; first failure: " : "", r.first_failure.c_str());
  }
  std::printf("backward mutants %d killed %d false_alarms %d\n", mutants, killed, false_alarms);
}

int merge_selftest(nlohmann::json& j) {
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

}  // namespace attncheck::mutants
