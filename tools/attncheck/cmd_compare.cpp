// `attncheck compare --expected FIXTURE.h5 --actual CANDIDATE.h5`: the verdict for an implementation that lives
// elsewhere (PyTorch, JAX, Triton, CUDA): it writes /actual/out (optionally lse, weights) with h5py or any HDF5
// library; the same tolerance model, table and reports as verify. `--policy` declares the candidate's fully-masked
// policy: the reference recomputes the expectation under it; `--contract` its precision contract, which the
// tolerance bound follows. /actual/dq, dk, dv (dbias) are judged against a fixture's gradients (docs/backward.md).
// `--diagnose` diagnoses a forward failure from the file's outputs; with the candidate re-runnable (`--plugin`,
// `--worker` or `--candidate NAME`) the probes re-run it and `--repro DIR` writes the smallest repro.
// Several --actual files are judged against the one fixture, each in its own rows; one that cannot be read gets
// its own input-error row and every other is judged (exit 2). Exit 0 pass, 1 fail, 2 bad input. The judging is
// harness/verify/compare.hpp; this file parses the options and prints the rows.
#include <cstdio>

#include "candidate_rows.hpp"
#include "command.hpp"
#include "compare.hpp"
#include "judge.hpp"
#include "plugins.hpp"
#include "report.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  verify::Comparison c;
  std::string report;
  std::vector<std::string> plugins;
};
Options g;

int run_compare() {
  if (!g.report.empty()) check_report_path(g.report);
  verify::prepare_repro_dir(g.c.repro, g.c.diagnose);
  load_plugins(g.plugins);
  g.c.rerun = [] { return brought_candidate(g.c.candidate, "compare --diagnose"); };
  const verify::Compared r =
      verify::compare_candidates(g.c, [](const std::string& n) { std::printf("note: %s\n", n.c_str()); });
  print_rows(r.rows, r.diagnoses);
  print_unreadable(r.rows);
  if (!g.report.empty()) write_report(g.report, r.rows, 1.0, r.notes);
  return exit_code(r.rows);
}

const Register reg{
    {"compare", "Judge a candidate's outputs (/actual/out, ...) against a fixture", [](CLI::App& sub) {
       sub.add_option("--expected", g.c.expected, "Golden fixture (.h5)")->required();
       sub.add_option("--actual", g.c.actuals,
                      "Candidate file(s) with /actual/out [, lse, weights] [, dq, dk, dv, dbias], or an .npz "
                      "with members out [, lse, weights]; several are each judged in their own rows")
           ->required();
       sub.add_option("--report", g.report, "Write a report: FILE.json or FILE.xml (JUnit)");
       sub.add_option("--name", g.c.name, "Implementation name in the report (default: file name)");
       sub.add_option("--policy", g.c.policy,
                      "The candidate's fully-masked-row policy (zero, nan, uniform), if not the fixture's");
       sub.add_option("--contract", g.c.contract,
                      "The candidate's precision contract, e.g. qk=bf16,pv=bf16,acc=fp32 (docs/tolerance.md)");
       sub.add_flag("--diagnose", g.c.diagnose,
                    "Diagnose a failure: where the error lives, likely causes; with a re-runnable "
                    "candidate, probes on derived problems (docs/diagnosis.md)");
       sub.add_option("--diagnose-reruns", g.c.diagnose_reruns, "Re-run budget per diagnosed failure")
           ->check(CLI::Range(0, 1000));
       sub.add_option("--repro", g.c.repro,
                      "With --diagnose and a re-runnable candidate: write the smallest repro as a fixture in DIR");
       sub.add_option("--candidate", g.c.candidate,
                      "With --diagnose: the implementation (built-in, plugin or worker) that wrote --actual, "
                      "re-run by the probes");
       add_plugin_option(sub, g.plugins);
       return std::function<int()>(run_compare);
     }}};

}  // namespace
}  // namespace attncheck::cli
