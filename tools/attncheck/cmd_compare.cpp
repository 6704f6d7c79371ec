// `attncheck compare --expected FIXTURE.h5 --actual CANDIDATE.h5`: the verdict for an implementation that lives
// elsewhere (PyTorch, JAX, Triton, CUDA): it writes /actual/out (optionally lse, weights) with h5py or any HDF5
// library; the same tolerance model, table and reports as verify. `--policy` declares the candidate's fully-masked
// policy: the reference recomputes the expectation under it; `--contract` its precision contract, which the
// tolerance bound follows. /actual/dq, dk, dv (dbias) are judged against a fixture's gradients (docs/backward.md).
// `--diagnose` diagnoses a forward failure from the file's outputs; with the candidate re-runnable (`--plugin`,
// `--worker` or `--candidate NAME`) the probes re-run it and `--repro DIR` writes the smallest repro.
// Several --actual files are judged against the one fixture, each in its own rows; one that cannot be read gets
// its own input-error row and every other is judged (exit 2). Exit 0 pass, 1 fail, 2 bad input.
#include <cstdio>
#include <filesystem>

#include "attncheck/fixture.hpp"
#include "attncheck/contract.hpp"
#include "candidate_rows.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/fixture_gradients.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "command.hpp"
#include "diagnosis.hpp"
#include "backward_row.hpp"
#include "plugins.hpp"
#include "repro.hpp"
#include "report.hpp"

namespace attncheck::cli {

using verify::backward_label;
namespace {

struct Options {
  std::string expected, actual, report, name, policy, contract;
  std::vector<std::string> actuals;  // --actual, one or more; `actual` is the one being judged
  bool diagnose = false;
  int diagnose_reruns = 12;
  std::string repro, candidate;  // --repro DIR, --candidate NAME (the implementation that wrote --actual)
  std::vector<std::string> plugins;
};
Options g;

// The diagnosis of the forward failure: always from the file's outputs; probes and the repro re-run the candidate
// when one is given, after checking that its re-run fails the case too (else its probes would describe another
// implementation than the one that wrote the file).
std::vector<std::string> diagnose_file(const Fixture& f, const Problem& p, const Outputs& cand, const ToleranceModel& m,
                                       CaseResult& r) {
  const ImplPtr rerun = brought_candidate(g.candidate, "compare --diagnose");
  if (!g.repro.empty() && !rerun)
    throw std::invalid_argument(
        "--repro: needs a candidate that can be re-run (--plugin, --worker or --candidate NAME); "
        "the candidate file alone cannot be reduced");
  diagnose::Options o;
  o.max_reruns = g.diagnose_reruns, o.tolerance = m;
  std::vector<std::string> notes;
  if (rerun) {
    Outputs again;
    const Support s = run_impl(*rerun, p, f.inputs, again);
    if (!s.ok)
      notes.push_back("note: " + rerun->name() + " does not support the case (" + s.reason + "): no probes");
    else if (judge(p, f.expected, again, m).pass)
      notes.push_back("note: " + rerun->name() +
                      " re-run passes the case the file fails: it is not the candidate that "
                      "wrote " +
                      g.actual + ", so no probes and no repro");
    else
      o.rerun = rerun.get();
  } else {
    notes.push_back(
        "note: no re-runnable candidate (--plugin, --worker, --candidate): diagnosis from the file's outputs, no "
        "probes");
  }
  diagnose::Diagnosis d = diagnose::diagnose({{}, p, f.inputs}, f.expected, cand, o);
  if (!g.repro.empty() && o.rerun) d.repro = diagnose::write_repro(f, p, *rerun, d, o, g.repro);
  r.diagnosis_json = diagnose::to_json(d);
  std::vector<std::string> lines = d.text();
  lines.insert(lines.begin(), notes.begin(), notes.end());
  return lines;
}

// g.actual's rows (forward, then gradients when it has them) and their diagnosis lines, appended to rs/diagnoses.
// Bad input (an unreadable file, gradients the fixture has none of, a bad --contract) throws std::invalid_argument.
void judge_candidate(const Fixture& f, std::vector<CaseResult>& rs, std::vector<std::vector<std::string>>& diagnoses) {
  const Outputs cand = read_candidate(g.actual, f.problem);
  const std::string impl = g.name.empty() ? std::filesystem::path(g.actual).filename().string() : g.name;
  Judged judged;
  rs.push_back(judge_forward(f, g.expected, g.actual, impl, cand, g.contract, judged));
  const Problem& p = judged.problem;
  const ToleranceModel& m = judged.model;
  diagnoses.emplace_back();
  if (g.diagnose && rs.back().status == Status::fail) diagnoses.back() = diagnose_file(f, p, cand, m, rs.back());
  // Gradients (/actual/dq, dk, dv, dbias): judged against the fixture's reference gradients.
  if (const std::optional<Gradients> grads = read_candidate_gradients(g.actual, f.problem)) {
    if (!f.has_gradients)
      throw std::invalid_argument("--actual: " + g.actual + " has gradients but " + g.expected +
                                  " has none (fixtures generated with \"gradients\": golden/backward)");
    rs.push_back(
        judged_result(f.name, g.expected, backward_label(impl), judge_backward(p, f.expected, *f.grad, *grads, m)));
    diagnoses.emplace_back();
  } else if (f.has_gradients) {
    std::printf("note: %s has no /actual/dq: gradients not compared\n", g.actual.c_str());
  }
}

int run_compare() {
  if (!g.report.empty()) check_report_path(g.report);
  if (!g.repro.empty() && !g.diagnose)
    throw std::invalid_argument(
        "--repro: needs --diagnose (the repro is reduced while it keeps the diagnosis of the "
        "failure; add --diagnose or drop --repro " +
        g.repro + ")");
  if (!g.repro.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(g.repro, ec);
    if (ec || !std::filesystem::is_directory(g.repro))
      throw std::invalid_argument("--repro: cannot create the directory '" + g.repro + "'" +
                                  (ec ? ": " + ec.message() : ""));
  }
  load_plugins(g.plugins);
  Fixture f = read_fixture(g.expected);
  if (!g.policy.empty()) {
    FullyMasked pol;
    try {
      pol = fully_masked_from_string(g.policy);
    } catch (const std::exception&) {
      throw std::invalid_argument("--policy: unknown value '" + g.policy + "' (expected zero, nan, uniform)");
    }
    if (pol != f.problem.fully_masked) {
      Problem q = f.problem;
      q.fully_masked = pol;
      try {
        validate(q, f.inputs);
      } catch (const std::exception& e) {
        throw std::invalid_argument("--policy " + g.policy + ": " + e.what());
      }
      std::printf(
          "note: judged under the declared fully-masked policy %s (fixture: %s; expectation recomputed by the "
          "reference)\n",
          to_string(pol), to_string(f.problem.fully_masked));
      f.expected = expected_attention(q, f.inputs);
      f.problem = q;
    }
  }
  std::vector<std::string> notes;  // printed here, and in the report
  if (!f.checksummed) notes.push_back(unchecksummed_note(1));
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  if (g.actuals.size() > 1)
    for (const auto& [opt, given] : {std::pair<const char*, bool>{"--name", !g.name.empty()},
                                     {"--repro", !g.repro.empty()},
                                     {"--candidate", !g.candidate.empty()}})
      if (given)
        throw std::invalid_argument(std::string(opt) + ": names one candidate, but " +
                                    std::to_string(g.actuals.size()) +
                                    " --actual files were given (each row is named by its file; give one --actual)");
  if (!g.contract.empty()) {  // bad for every candidate alike: checked once, before any is read
    try {
      validate_contract(contract_from_string(g.contract, f.problem.dtype), f.problem.dtype);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("--contract: ") + e.what());
    }
  }
  std::vector<CaseResult> rs;
  std::vector<std::vector<std::string>> diagnoses;  // per row of rs
  for (const std::string& actual : g.actuals) {
    g.actual = actual;
    if (g.actuals.size() == 1) {  // one candidate: bad input ends the run with its message, as it always did
      judge_candidate(f, rs, diagnoses);
      continue;
    }
    const size_t before = rs.size();
    try {
      judge_candidate(f, rs, diagnoses);
    } catch (const std::invalid_argument& e) {
      rs.resize(before), diagnoses.resize(before);  // its forward row, when its gradients were what was bad
      const std::string m = e.what();
      rs.push_back(input_error(actual, m.find(actual) == std::string::npos ? actual + ": " + m : m));
      diagnoses.emplace_back();
    }
  }
  for (auto& r : rs)
    if (r.status != Status::input_error) describe_problem(r, f.problem);
  print_rows(rs, diagnoses);
  print_unreadable(rs);
  if (!g.report.empty()) write_report(g.report, rs, 1.0, notes);
  return exit_code(rs);
}

const Register reg{
    {"compare", "Judge a candidate's outputs (/actual/out, ...) against a fixture", [](CLI::App& sub) {
       sub.add_option("--expected", g.expected, "Golden fixture (.h5)")->required();
       sub.add_option("--actual", g.actuals,
                      "Candidate file(s) with /actual/out [, lse, weights] [, dq, dk, dv, dbias], or an .npz "
                      "with members out [, lse, weights]; several are each judged in their own rows")
           ->required();
       sub.add_option("--report", g.report, "Write a report: FILE.json or FILE.xml (JUnit)");
       sub.add_option("--name", g.name, "Implementation name in the report (default: file name)");
       sub.add_option("--policy", g.policy,
                      "The candidate's fully-masked-row policy (zero, nan, uniform), if not the fixture's");
       sub.add_option("--contract", g.contract,
                      "The candidate's precision contract, e.g. qk=bf16,pv=bf16,acc=fp32 (docs/tolerance.md)");
       sub.add_flag("--diagnose", g.diagnose,
                    "Diagnose a failure: where the error lives, likely causes; with a re-runnable "
                    "candidate, probes on derived problems (docs/diagnosis.md)");
       sub.add_option("--diagnose-reruns", g.diagnose_reruns, "Re-run budget per diagnosed failure")
           ->check(CLI::Range(0, 1000));
       sub.add_option("--repro", g.repro,
                      "With --diagnose and a re-runnable candidate: write the smallest repro as a fixture in DIR");
       sub.add_option("--candidate", g.candidate,
                      "With --diagnose: the implementation (built-in, plugin or worker) that wrote --actual, "
                      "re-run by the probes");
       add_plugin_option(sub, g.plugins);
       return std::function<int()>(run_compare);
     }}};

}  // namespace
}  // namespace attncheck::cli
