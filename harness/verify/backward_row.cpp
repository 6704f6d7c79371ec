// verify's backward rows (backward_row.hpp): the implementation's own forward then backward on the fixture's dout,
// judged against the fixture's reference gradients under the implementation's declared precision contract.
#include "backward_row.hpp"

#include "attncheck/declarations.hpp"
#include "attncheck/tolerance_backward.hpp"

namespace attncheck::verify {

Pass pass_from_string(const std::string& s) {
  if (s == "forward") return Pass::forward;
  if (s == "backward") return Pass::backward;
  if (s == "both") return Pass::both;
  throw std::invalid_argument("--pass: unknown value '" + s + "' (expected forward, backward or both)");
}

std::string backward_label(const std::string& impl) { return impl + "/backward"; }

CaseResult backward_row(const Impl& impl, const Support& available, const Fixture& f, const std::string& file,
                        double tol_scale, int reruns, std::vector<InvarianceRow>* checks,
                        const invariance::Options* variants) {
  CaseResult r = unjudged(f.name, file, backward_label(impl.name()));
  if (!available.ok) {
    r.status = Status::unavailable;
    r.message = "unavailable: " + available.reason;
    return r;
  }
  try {
    Gradients g;
    const Support s = run_backward_impl(impl, f.problem, f.inputs, *f.dout, g);
    if (!s.ok) {
      r.status = Status::unsupported;
      r.message = "backward: " + s.reason;
      return r;
    }
    ToleranceModel m = f.tolerance;
    m.contract = impl.declarations().contract_for(f.problem.dtype);
    m.scale = tol_scale;
    CaseResult judged = judged_result(f.name, file, r.impl, judge_backward(f.problem, f.expected, *f.grad, g, m));
    if (impl.declarations().masked_inputs == MaskedInputs::finite_required)  // as for the forward row
      apply_masked_inputs_contract(nonfinite_inputs(f.inputs), judged);
    if (reruns >= 2 && checks) {
      checks->push_back(backward_invariance_row(impl, r.impl, f, file, g, reruns));
      if (impl.declarations().masked_inputs == MaskedInputs::finite_required)  // outside the contract: apart
        outside_contract(nonfinite_inputs(f.inputs), checks->back());
    }
    if (variants && (variants->batch || variants->schedule || variants->layout) && checks) {
      invariance::Options o = *variants;  // variants judged within tolerance as this row was
      o.backward_within_tolerance = [&](const Gradients& x) {
        const Verdict v = judge_backward(f.problem, f.expected, *f.grad, x, m);
        return v.pass ? std::string() : v.worst().describe();
      };
      for (InvarianceRow& row : backward_variant_rows(impl, r.impl, f, file, g, o)) {
        if (impl.declarations().masked_inputs == MaskedInputs::finite_required)
          outside_contract(nonfinite_inputs(f.inputs), row);
        checks->push_back(std::move(row));
      }
    }
    return judged;
  } catch (const std::exception&) {
    record_exception(r);
  }
  return r;
}

}  // namespace attncheck::verify
