// Module verdicts, diagnosis and selftest (docs/module.md). judge: y and weights against the fp64 reference with
// the module tolerance. diagnose: which module bug classes explain a failure, each tested as a hypothesis (the
// reference computing the module with that fault). selftest: every module mutant on every fixture it applies to.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attncheck/module_fixture.hpp"
#include "attncheck/module_impl.hpp"
#include "attncheck/tolerance.hpp"
#include "attncheck/module_tolerance.hpp"

namespace attncheck::module_check {

Verdict judge(const ModuleFixture& f, const ModuleTolerance& tol, const ModuleOutputs& out, double scale = 1.0);

// The tags (to_string(ModuleFault)) whose hypothesis explains every output of a failing run: the module computed
// with that fault by the reference, within that computation's own bound (module_tolerance with the fault); empty
// when none does. Hypotheses are tried only where the fault
// can change the outputs (fault_applies). dropout-after-projection is tested by its signature instead of one mask:
// every y element is 0 or the no-dropout module's y / (1 - p), with some of each.
std::vector<std::string> diagnose(const ModuleFixture& f, const ModuleOutputs& out);

// The backward (fixtures with gradients): every gradient against the fixture's reference gradients with the
// module gradient bound (module_grad_tolerance); a gradient not delivered fails.
Verdict judge_backward(const ModuleFixture& f, const ModuleGradients& tol, const ModuleGradOutputs& g,
                       double scale = 1.0);
// The tags (to_string(ModuleGradFault)) whose hypothesis explains every gradient of a failing backward: the
// reference backward with that fault, within that computation's own bound; empty when none does.
std::vector<std::string> diagnose_backward(const ModuleFixture& f, const ModuleGradOutputs& g);

struct SelftestRow {
  std::string impl;                     // "cpu~head-split", or a correct entry ("cpu")
  std::string injected;                 // the fault's tag, "" for a correct entry
  int applicable = 0;                   // fixtures the fault can change (every fixture for a correct entry)
  int caught = 0;                       // of those, failed (a correct entry: false alarms)
  int tagged = 0;                       // of the caught, diagnosed with exactly the injected tag
  std::vector<std::string> other_tags;  // diagnoses that were not the injected tag, "case: tags"
  size_t entry = 0;                     // index of the row in the full selftest (forward entries, then backward)
};
// Correct entries (find_module_entry of cpu, cpu-flash) and every module mutant on the fixtures; then the same
// correct entries' backward ("cpu/backward") and every backward mutant on the fixtures with gradients.
// `runs_entry` picks rows by their index in that order (a shard; empty: all).
std::vector<SelftestRow> selftest(const std::vector<ModuleFixture>& fixtures,
                                  const std::function<bool(size_t)>& runs_entry = {});
// Every mutant caught at least once and tagged on every catch, no correct entry failing.
bool selftest_ok(const std::vector<SelftestRow>& rows);

}  // namespace attncheck::module_check
