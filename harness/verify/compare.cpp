#include "compare.hpp"

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <utility>

#include "attncheck/contract.hpp"
#include "attncheck/fixture_gradients.hpp"
#include "attncheck/error_scales.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "backward_row.hpp"
#include "diagnosis.hpp"
#include "judge.hpp"
#include "repro.hpp"

namespace attncheck::verify {
namespace {

// The diagnosis of a forward failure: always from the file's outputs; probes and the repro re-run the candidate
// when one is given, after checking that its re-run fails the case too (else its probes would describe another
// implementation than the one that wrote the file).
std::vector<std::string> diagnose_file(const Comparison& c, const std::string& actual, const Fixture& f,
                                       const Problem& p, const Outputs& cand, const ToleranceModel& m, CaseResult& r) {
  const ImplPtr rerun = c.rerun ? c.rerun() : nullptr;
  if (!c.repro.empty() && !rerun)
    throw std::invalid_argument(
        "--repro: needs a candidate that can be re-run (--plugin, --worker or --candidate NAME); "
        "the candidate file alone cannot be reduced");
  diagnose::Options o;
  o.max_reruns = c.diagnose_reruns, o.tolerance = m;
  std::vector<std::string> notes;
  if (rerun) {
    Outputs again;
    const Support s = run_impl(*rerun, p, f.inputs, again);
    if (!s.ok)
      notes.push_back("note: " + rerun->name() + " does not support the case (" + s.reason + "): no probes");
    else if (judge(p, f.expected, again, m).pass)
      notes.push_back("note: " + rerun->name() +
                      " re-run passes the case the file fails: it is not the candidate that wrote " + actual +
                      ", so no probes and no repro");
    else
      o.rerun = rerun.get();
  } else {
    notes.push_back(
        "note: no re-runnable candidate (--plugin, --worker, --candidate): diagnosis from the file's outputs, no "
        "probes");
  }
  diagnose::Diagnosis d = diagnose::diagnose({{}, p, f.inputs}, f.expected, cand, o);
  if (!c.repro.empty() && o.rerun) d.repro = diagnose::write_repro(f, p, *rerun, d, o, c.repro);
  r.diagnosis_json = diagnose::to_json(d);
  std::vector<std::string> lines = d.text();
  lines.insert(lines.begin(), notes.begin(), notes.end());
  return lines;
}

// One candidate file's rows (forward, then gradients when it has them) and their diagnosis lines, appended to out.
// Bad input (an unreadable file, gradients the fixture has none of, a bad --contract) throws std::invalid_argument.
void judge_file(const Comparison& c, const std::string& actual, const Fixture& f, Compared& out, const NoteSink& note) {
  const Outputs cand = read_candidate(actual, f.problem);
  const std::string impl = c.name.empty() ? std::filesystem::path(actual).filename().string() : c.name;
  CandidateJudging judged;
  out.rows.push_back(judge_candidate_outputs(f, c.expected, actual, impl, cand, c.contract, judged, note));
  const Problem& p = judged.problem;
  const ToleranceModel& m = judged.model;
  out.diagnoses.emplace_back();
  if (c.diagnose && out.rows.back().status == Status::fail)
    out.diagnoses.back() = diagnose_file(c, actual, f, p, cand, m, out.rows.back());
  if (const std::optional<Gradients> grads = read_candidate_gradients(actual, f.problem)) {
    if (!f.has_gradients)
      throw std::invalid_argument("--actual: " + actual + " has gradients but " + c.expected +
                                  " has none (fixtures generated with \"gradients\": golden/backward)");
    out.rows.push_back(
        judged_result(f.name, c.expected, backward_label(impl), judge_backward(p, f.expected, *f.grad, *grads, m)));
    out.diagnoses.emplace_back();
  } else if (f.has_gradients) {
    note(actual + " has no /actual/dq: gradients not compared");
  }
}

// --policy: the expectation recomputed by the reference under the candidate's declared fully-masked policy.
void apply_policy(const std::string& policy, Fixture& f, const NoteSink& note) {
  FullyMasked pol;
  try {
    pol = fully_masked_from_string(policy);
  } catch (const std::exception&) {
    throw std::invalid_argument("--policy: unknown value '" + policy + "' (expected zero, nan, uniform)");
  }
  if (pol == f.problem.fully_masked) return;
  Problem q = f.problem;
  q.fully_masked = pol;
  try {
    validate(q, f.inputs);
  } catch (const std::exception& e) {
    throw std::invalid_argument("--policy " + policy + ": " + e.what());
  }
  note(std::string("judged under the declared fully-masked policy ") + to_string(pol) +
       " (fixture: " + to_string(f.problem.fully_masked) + "; expectation recomputed by the reference)");
  f.expected = expected_attention(q, f.inputs);
  f.problem = q;
}

// The options that name one candidate, and the contract, checked once before any candidate is read.
void check_options(const Comparison& c, const Fixture& f) {
  if (c.actuals.size() > 1)
    for (const auto& [opt, given] : {std::pair<const char*, bool>{"--name", !c.name.empty()},
                                     {"--repro", !c.repro.empty()},
                                     {"--candidate", !c.candidate.empty()}})
      if (given)
        throw std::invalid_argument(std::string(opt) + ": names one candidate, but " +
                                    std::to_string(c.actuals.size()) +
                                    " --actual files were given (each row is named by its file; give one --actual)");
  if (!c.contract.empty()) {
    try {
      validate_contract(contract_from_string(c.contract, f.problem.dtype), f.problem.dtype);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("--contract: ") + e.what());
    }
  }
}

}  // namespace

CaseResult judge_candidate_outputs(const Fixture& f, const std::string& file, const std::string& source,
                                   const std::string& impl, const Outputs& cand, const std::string& contract,
                                   CandidateJudging& judged, const NoteSink& note) {
  Problem& problem = judged.problem;
  problem = f.problem;
  problem.want_lse = cand.lse.has_value();
  problem.want_weights = cand.weights.has_value() && f.problem.want_weights;
  if (!cand.lse) note(source + " has no /actual/lse: lse not compared");
  if (cand.weights && !f.problem.want_weights) note(file + " has no expected weights: /actual/weights not compared");
  if (!cand.weights && f.problem.want_weights) note(source + " has no /actual/weights: weights not compared");
  ToleranceModel& m = judged.model;
  m = f.tolerance;
  if (!contract.empty()) {
    try {
      m.contract = contract_from_string(contract, problem.dtype);
      validate_contract(*m.contract, problem.dtype);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("--contract: ") + e.what());
    }
    note("judged under the declared precision contract " + m.contract->to_string());
  }
  return judged_result(f.name, file, impl, judge(problem, f.expected, cand, m));
}

Compared compare_candidates(const Comparison& c, const NoteSink& note) {
  Fixture f = read_fixture(c.expected);
  if (!c.policy.empty()) apply_policy(c.policy, f, note);
  Compared out;
  if (!f.checksummed) out.notes.push_back(unchecksummed_note(1));
  for (const std::string& n : out.notes) note(n);
  check_options(c, f);
  for (const std::string& actual : c.actuals) {
    if (c.actuals.size() == 1) {  // one candidate: bad input ends the run with its message
      judge_file(c, actual, f, out, note);
      continue;
    }
    const size_t before = out.rows.size();
    try {
      judge_file(c, actual, f, out, note);
    } catch (const std::invalid_argument& e) {
      out.rows.resize(before), out.diagnoses.resize(before);  // its forward row, when its gradients were what was bad
      const std::string m = e.what();
      out.rows.push_back(input_error(actual, m.find(actual) == std::string::npos ? actual + ": " + m : m));
      out.diagnoses.emplace_back();
    }
  }
  for (auto& r : out.rows)
    if (r.status != Status::input_error) describe_problem(r, f.problem);
  return out;
}

}  // namespace attncheck::verify
