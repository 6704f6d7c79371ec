// verify's rows for merge fixtures (docs/states.md). A merge row reads like an attention row: pass/fail with the
// worst element, unsupported with the reason, a run failure as its outcome.
#include "merge_row.hpp"

#include "merge_diagnosis.hpp"  // harness/diagnose

namespace attncheck::verify {

CaseResult merge_row(const Impl& impl, const Support& available, const MergeFixture& f, const std::string& file,
                     std::vector<std::string>* diagnosis) {
  CaseResult r = unjudged(f.problem.name, file, impl.name());
  r.dtype = to_string(f.problem.dtype), r.features = {"merge"};
  if (!available.ok) {
    r.status = Status::unavailable, r.message = "unavailable: " + available.reason;
    return r;
  }
  try {
    StoredStates out;
    const Support s = run_merge_impl(impl, f.problem, f.inputs, out);
    if (!s.ok) {
      r.status = Status::unsupported, r.message = s.reason;
      return r;
    }
    const MergeVerdict v = judge_merge(f.problem, f.inputs, out);
    TensorVerdict t;
    t.tensor = "state", t.pass = v.pass, t.n = v.checked, t.n_bad = v.failed;
    r.verdict.pass = v.pass;
    r.verdict.tensors.push_back(t);
    r.judged = true;
    r.status = v.pass ? Status::pass : Status::fail;
    r.message = v.pass ? ""
                       : std::to_string(v.failed) + " of " + std::to_string(v.checked) +
                             " elements outside the bound; worst " + v.worst;
    if (!v.pass && diagnosis) {
      const MergeDiagnosis d = diagnose_merge(f.problem, f.inputs, out);
      r.message += "; diagnosis: " + d.tag;
      diagnosis->push_back("likely cause: " + d.tag + " (" + d.why + ")");
      r.diagnosis_json = "{\"top\":\"" + d.tag + "\"}";
    }
  } catch (const std::exception&) {
    record_exception(r);
  }
  return r;
}

}  // namespace attncheck::verify
