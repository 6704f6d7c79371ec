// The judging of a candidate that lives elsewhere (PyTorch, JAX, Triton, CUDA): its outputs, written to a file with
// any HDF5 library (/actual/out [, lse, weights] [, dq, dk, dv, dbias]) or handed over as tensors, judged against one
// fixture with the same tolerance model, rows and reports as verify. The candidate may declare its fully-masked
// policy (the reference recomputes the expectation under it) and its precision contract (the bound follows it).
// `attncheck compare` and `import --judge` parse the options and print what this returns.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attncheck/fixture.hpp"
#include "attncheck/impl.hpp"
#include "case_result.hpp"

namespace attncheck::verify {

// A note for the reader, as it arises ("FILE has no /actual/lse: lse not compared"), without the "note: " prefix.
using NoteSink = std::function<void(const std::string& note)>;

// The problem and tolerance model a candidate's outputs were judged under.
struct CandidateJudging {
  Problem problem;
  ToleranceModel model;
};

// The forward row of a candidate's outputs: what it provides is judged (lse when it has lse; weights when both it
// and the fixture have them) under the fixture's tolerance model, or under the declared precision `contract` when
// one is given (a bad one is std::invalid_argument naming --contract). A note names `source` for each output not
// compared. `judged` receives the problem and model.
CaseResult judge_candidate_outputs(const Fixture& f, const std::string& file, const std::string& source,
                                   const std::string& impl, const Outputs& cand, const std::string& contract,
                                   CandidateJudging& judged, const NoteSink& note);

// `compare`: candidate files against one fixture.
struct Comparison {
  std::string expected;              // the fixture
  std::vector<std::string> actuals;  // candidate files, each judged in its own rows
  std::string name;                  // the rows' implementation name (one candidate only; default: the file name)
  std::string policy;                // the candidate's fully-masked policy when not the fixture's (zero, nan, uniform)
  std::string contract;              // the candidate's precision contract (docs/tolerance.md)
  bool diagnose = false;             // a forward failure diagnosed from the file's outputs
  int diagnose_reruns = 12;          // re-run budget of the diagnosis's probes
  std::string repro;                 // with diagnose and a re-runnable candidate: the smallest repro written here
  std::string candidate;             // --candidate NAME as given: the implementation that wrote the one file
  // The implementation that wrote the files, re-run by the probes (nullptr: none). Asked only when a failure is
  // diagnosed, so a bad name is reported after the rows before it were judged.
  std::function<ImplPtr()> rerun;
};

struct Compared {
  std::vector<CaseResult> rows;                     // per candidate: forward, then gradients when it has them
  std::vector<std::vector<std::string>> diagnoses;  // the lines under each row (its diagnosis)
  std::vector<std::string> notes;                   // the report's notes
};

// Judges every candidate. Bad input is std::invalid_argument naming the option: the fixture, --policy, --contract,
// an option that names one candidate given with several, and with one candidate anything unreadable in it. With
// several, a candidate that cannot be read gets its own input-error row and every other is judged.
Compared compare_candidates(const Comparison& c, const NoteSink& note);

}  // namespace attncheck::verify
