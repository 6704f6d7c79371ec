// verify --invariance (docs/invariance.md): the rerun, batch, schedule and layout checks of a judged case as result
// rows of their own, "<impl>/rerun", "<impl>/batch", "<impl>/schedule", "<impl>/layout" ("<impl>/backward/rerun"
// for gradients): pass ("invariant on this run"), fail (with the diagnosis tag nondeterministic, batch-variant,
// schedule-variant or layout-variant, what moved and the first differing element) or unsupported (the check cannot
// be made for this case, with the reason).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/fixture.hpp"
#include "diagnosis.hpp"
#include "invariance.hpp"
#include "case_result.hpp"

namespace attncheck::verify {

struct InvarianceRow {
  CaseResult row;
  std::vector<std::string> lines;  // a violation's diagnosis block, printed under the row
};

// "--invariance rerun,batch,schedule,layout|all", --reruns K and --invariance-level declared|bitwise|tolerance; an
// empty list turns every check off. Throws std::invalid_argument naming the option and the value.
// A check of a case outside a finite-required contract (masked_inputs): reported apart as finite-required, its
// violation block dropped (such a case promises nothing, its invariance included). No-op without non-finite inputs.
void outside_contract(const std::string& nonfinite_inputs, InvarianceRow& r);

invariance::Options invariance_options(const std::string& list, int reruns, const std::string& level);

// The checks of one judged forward case (`out`: the implementation's outputs the row was judged on). A failure of
// the run itself during a check (crash, timeout, error) is that check's row outcome. `repro` (verify --diagnose
// --repro) writes a violated check's smallest repro, named in its diagnosis.
std::vector<InvarianceRow> invariance_rows(const Impl& impl, const std::string& name, const std::string& file,
                                           const Problem& p, const Inputs& in, const Outputs& out,
                                           const invariance::Options& o,
                                           const std::function<diagnose::Repro(const invariance::Check&)>& repro = {});
// The rerun check of a judged backward case (`g`: the gradients the row was judged on).
InvarianceRow backward_invariance_row(const Impl& impl, const std::string& label, const Fixture& f,
                                      const std::string& file, const Gradients& g, int runs);
// The schedule and layout checks of a judged backward case, as o asks ("<label>/schedule", "<label>/layout"; o's
// backward_within_tolerance judges a variant within tolerance).
std::vector<InvarianceRow> backward_variant_rows(const Impl& impl, const std::string& label, const Fixture& f,
                                                 const std::string& file, const Gradients& g,
                                                 const invariance::Options& o);

}  // namespace attncheck::verify
