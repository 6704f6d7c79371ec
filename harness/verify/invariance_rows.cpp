// Result rows of the invariance checks (invariance_rows.hpp).
#include "invariance_rows.hpp"

#include "diagnosis.hpp"

namespace attncheck::verify {

namespace {

InvarianceRow to_row(const invariance::Check& c, CaseResult r,
                     const std::function<diagnose::Repro(const invariance::Check&)>& repro = {}) {
  InvarianceRow out;
  r.message = c.message;
  r.status = c.result == invariance::Check::invariant  ? Status::pass
             : c.result == invariance::Check::violated ? Status::fail
                                                       : Status::unsupported;
  if (c.result == invariance::Check::violated) {
    diagnose::Diagnosis d;
    d.anatomy = invariance::evidence(c);
    d.causes.push_back({invariance::tag(c.kind), 1.0, c.where});
    d.reruns = d.rerun_budget = c.runs;
    if (repro) d.repro = repro(c);
    out.lines = d.text();
    r.diagnosis_json = diagnose::to_json(d);
  }
  out.row = std::move(r);
  return out;
}

}  // namespace

invariance::Options invariance_options(const std::string& list, int reruns, const std::string& level) {
  invariance::Options o;
  o.runs = reruns;
  o.rerun = o.batch = false;
  if (level == "declared")
    o.level = invariance::Level::declared;
  else if (level == "bitwise")
    o.level = invariance::Level::bitwise;
  else if (level == "tolerance")
    o.level = invariance::Level::tolerance;
  else
    throw std::invalid_argument("--invariance-level: unknown level '" + level +
                                "' (expected declared, bitwise or tolerance)");
  size_t start = 0;
  while (start < list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, end - start);
    start = end + 1;
    if (item == "rerun")
      o.rerun = true;
    else if (item == "batch")
      o.batch = true;
    else if (item == "schedule")
      o.schedule = true;
    else if (item == "layout")
      o.layout = true;
    else if (item == "all")
      o.rerun = o.batch = o.schedule = o.layout = true;
    else
      throw std::invalid_argument("--invariance: unknown check '" + item + "' in '" + list +
                                  "' (expected rerun, batch, schedule, layout or all, comma-separated)");
  }
  return o;
}

std::vector<InvarianceRow> invariance_rows(const Impl& impl, const std::string& name, const std::string& file,
                                           const Problem& p, const Inputs& in, const Outputs& out,
                                           const invariance::Options& o,
                                           const std::function<diagnose::Repro(const invariance::Check&)>& repro) {
  std::vector<InvarianceRow> rows;
  try {
    for (const invariance::Check& c : invariance::check_forward(impl, p, in, out, o))
      rows.push_back(to_row(c, unjudged(name, file, impl.name() + "/" + invariance::name(c.kind)), repro));
  } catch (const std::exception&) {
    const char* first = o.rerun ? "/rerun" : o.batch ? "/batch" : o.schedule ? "/schedule" : "/layout";
    CaseResult r = unjudged(name, file, impl.name() + first);
    record_exception(r);
    r.message = "during the invariance checks: " + r.message;
    rows.push_back({std::move(r), {}});
  }
  return rows;
}

InvarianceRow backward_invariance_row(const Impl& impl, const std::string& label, const Fixture& f,
                                      const std::string& file, const Gradients& g, int runs) {
  CaseResult r = unjudged(f.name, file, label + "/rerun");
  try {
    return to_row(invariance::check_backward(impl, f.problem, f.inputs, *f.dout, g, runs), r);
  } catch (const std::exception&) {
    record_exception(r);
    r.message = "during the rerun check: " + r.message;
  }
  return {std::move(r), {}};
}

std::vector<InvarianceRow> backward_variant_rows(const Impl& impl, const std::string& label, const Fixture& f,
                                                 const std::string& file, const Gradients& g,
                                                 const invariance::Options& o) {
  std::vector<InvarianceRow> rows;
  try {
    for (const invariance::Check& c : invariance::check_backward_variants(impl, f.problem, f.inputs, *f.dout, g, o))
      rows.push_back(to_row(c, unjudged(f.name, file, label + "/" + invariance::name(c.kind))));
  } catch (const std::exception&) {
    CaseResult r = unjudged(f.name, file, label + (o.batch ? "/batch" : o.schedule ? "/schedule" : "/layout"));
    record_exception(r);
    r.message = "during the invariance checks: " + r.message;
    rows.push_back({std::move(r), {}});
  }
  return rows;
}

void outside_contract(const std::string& nonfinite_inputs, InvarianceRow& r) {
  if (nonfinite_inputs.empty()) return;
  apply_masked_inputs_contract(nonfinite_inputs, r.row);
  r.lines.clear();
}

}  // namespace attncheck::verify
