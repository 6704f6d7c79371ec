// Module verdicts, the module diagnosis and the module mutants' selftest (module_check.hpp).
#include "module_check.hpp"
#include "attncheck/module_reference.hpp"
#include "attncheck/module_tolerance.hpp"

#include <cmath>

namespace attncheck::module_check {

namespace {

std::vector<int64_t> weights_shape(const ModuleProblem& m) {
  const Problem& p = m.attn;
  return {p.B, m.average_weights ? 1 : p.Hq, p.Lq, p.Lk};  // averaged: head index 0
}

bool within(const std::vector<double>& expected, const std::vector<double>& actual, const std::vector<double>& tol) {
  for (size_t n = 0; n < expected.size(); ++n) {
    const double e = expected[n], a = actual[n];
    if (std::isnan(e) ? !std::isnan(a) : !(std::fabs(a - e) <= tol[n])) return false;
  }
  return true;
}

// The hypothesis `h` (the module computed with a fault) within its own bound `tol` of every output.
bool explains(const ModuleFixture& f, const ModuleTolerance& tol, const ModuleOutputs& out, const ModuleResult& h) {
  if (!within(h.y, out.y.to_double(), tol.y)) return false;
  return !f.problem.attn.want_weights || within(h.weights, out.weights->to_double(), tol.weights);
}

// Every y element 0 (dropped) or the no-dropout y / (1 - p) (kept), at least one of each.
bool dropout_signature(const ModuleFixture& f, const ModuleOutputs& out) {
  ModuleProblem m = f.problem;
  const double p = m.attn.dropout_p;
  ModuleInputs in = f.inputs;
  m.attn.dropout_p = 0, in.keep.reset();
  const ModuleResult y0 = reference_module(m, in);
  const ModuleTolerance tol = module_tolerance(m, in);
  const std::vector<double> a = out.y.to_double();
  int dropped = 0, kept = 0;
  for (size_t n = 0; n < a.size(); ++n) {
    const double t = tol.y[n] / (1.0 - p) + 0x1.0p-24 * std::fabs(y0.y[n]);
    if (std::fabs(a[n]) <= t) {
      dropped += std::fabs(y0.y[n]) > t;  // clearly dropped (else too small to tell)
    } else if (std::fabs(a[n] - y0.y[n] / (1.0 - p)) <= t) {
      ++kept;
    } else {
      return false;
    }
  }
  return dropped > 0 && kept > 0;
}

}  // namespace

Verdict judge(const ModuleFixture& f, const ModuleTolerance& tol, const ModuleOutputs& out, double scale) {
  const ModuleProblem& m = f.problem;
  const Problem& p = m.attn;
  auto scaled = [&](std::vector<double> t) {
    for (double& x : t) x *= scale;
    return t;
  };
  Verdict v;
  v.tensors.push_back(compare_values("y", {p.B, 1, p.Lq, m.d_out}, f.expected.y, out.y.to_double(), scaled(tol.y)));
  if (p.want_weights) {
    if (!out.weights) throw std::invalid_argument("weights: requested but not delivered");
    v.tensors.push_back(
        compare_values("weights", weights_shape(m), f.expected.weights, out.weights->to_double(), scaled(tol.weights)));
  }
  for (const TensorVerdict& t : v.tensors) v.pass = v.pass && t.pass;
  return v;
}

std::vector<std::string> diagnose(const ModuleFixture& f, const ModuleOutputs& out) {
  std::vector<std::string> tags;
  for (ModuleFault fault : module_faults()) {
    if (!fault_applies(fault, f.problem)) continue;
    const bool hit = fault == ModuleFault::dropout_after_projection
                         ? dropout_signature(f, out)
                         : explains(f, module_tolerance(f.problem, f.inputs, fault), out,
                                    reference_module(f.problem, f.inputs, fault));
    if (hit) tags.push_back(to_string(fault));
  }
  return tags;
}

Verdict judge_backward(const ModuleFixture& f, const ModuleGradients& tol, const ModuleGradOutputs& g, double scale) {
  Verdict v;
  for (const std::string& name : module_grad_names(f.problem)) {
    const std::vector<int64_t>& s = module_grad_input(f.inputs, name).shape;
    const std::vector<int64_t> shape4 = s.size() == 3   ? std::vector<int64_t>{s[0], 1, s[1], s[2]}
                                        : s.size() == 2 ? std::vector<int64_t>{1, 1, s[0], s[1]}
                                        : s.size() == 1 ? std::vector<int64_t>{1, 1, 1, s[0]}
                                                        : s;
    const auto it = g.find(name);
    if (it == g.end()) {
      TensorVerdict missing;
      missing.tensor = name, missing.pass = false, missing.n_bad = 1;
      v.tensors.push_back(missing);
      continue;
    }
    std::vector<double> t = module_grad(tol, name);
    for (double& x : t) x *= scale;
    v.tensors.push_back(compare_values(name, shape4, module_grad(*f.grad, name), it->second.to_double(), t));
  }
  for (const TensorVerdict& t : v.tensors) v.pass = v.pass && t.pass;
  return v;
}

std::vector<std::string> diagnose_backward(const ModuleFixture& f, const ModuleGradOutputs& g) {
  std::vector<std::string> tags;
  const std::vector<double> dy = f.dy->to_double();
  for (ModuleGradFault fault : module_grad_faults()) {
    if (!grad_fault_applies(fault, f.problem)) continue;
    const ModuleGradients h = reference_module_backward(f.problem, f.inputs, dy, fault);
    const ModuleGradients tol = module_grad_tolerance(f.problem, f.inputs, dy, fault);
    bool all = true;
    for (const std::string& name : module_grad_names(f.problem)) {
      const auto it = g.find(name);
      all = all && it != g.end() && within(module_grad(h, name), it->second.to_double(), module_grad(tol, name));
    }
    if (all) tags.push_back(to_string(fault));
  }
  return tags;
}

// One fixture a selftest entry failed: a false alarm for a correct entry; otherwise tagged when the diagnosis names
// exactly the injected fault, else listed with the tags it got.
template <class Diagnose>
void caught(SelftestRow& row, const std::string& fixture, bool correct, Diagnose diagnose) {
  ++row.caught;
  if (correct) {
    row.other_tags.push_back(fixture + ": false alarm");
    return;
  }
  const std::vector<std::string> tags = diagnose();
  if (tags == std::vector<std::string>{row.injected}) {
    ++row.tagged;
    return;
  }
  std::string t;
  for (const auto& s : tags) t += (t.empty() ? "" : ",") + s;
  row.other_tags.push_back(fixture + ": " + (t.empty() ? "(none)" : t));
}

namespace {
// The backward rows of the selftest: correct entries and the backward mutants on the fixtures with gradients.
void selftest_backward(const std::vector<ModuleFixture>& fixtures, std::vector<SelftestRow>& rows, size_t first,
                       const std::function<bool(size_t)>& runs_entry) {
  std::vector<std::pair<ModuleImplPtr, ModuleGradFault>> entries;
  for (const char* name : {"cpu", "cpu-flash"})
    if (ModuleImplPtr e = find_module_entry(name)) entries.emplace_back(e, ModuleGradFault::none);
  const std::vector<ModuleImplPtr> mutants = module_grad_mutants();
  const std::vector<ModuleGradFault> faults = module_grad_faults();
  for (size_t i = 0; i < mutants.size(); ++i) entries.emplace_back(mutants[i], faults[i]);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (runs_entry && !runs_entry(first + i)) continue;
    const auto& [impl, fault] = entries[i];
    const bool correct = fault == ModuleGradFault::none;
    SelftestRow row{
        impl->name() + (correct ? "/backward" : ""), correct ? "" : to_string(fault), 0, 0, 0, {}, first + i};
    for (const ModuleFixture& f : fixtures) {
      if (!f.grad || (!correct && !grad_fault_applies(fault, f.problem))) continue;
      ModuleGradOutputs g;
      if (!run_module_backward(*impl, f.problem, f.inputs, *f.dy, g).ok) continue;
      ++row.applicable;
      if (judge_backward(f, module_grad_tolerance(f.problem, f.inputs, f.dy->to_double()), g).pass) continue;
      caught(row, f.name, correct, [&] { return diagnose_backward(f, g); });
    }
    rows.push_back(std::move(row));
  }
}
}  // namespace

std::vector<SelftestRow> selftest(const std::vector<ModuleFixture>& fixtures,
                                  const std::function<bool(size_t)>& runs_entry) {
  std::vector<std::pair<ModuleImplPtr, ModuleFault>> entries;
  for (const char* name : {"cpu", "cpu-flash"})
    if (ModuleImplPtr e = find_module_entry(name)) entries.emplace_back(e, ModuleFault::none);
  const std::vector<ModuleImplPtr> mutants = module_mutants();
  const std::vector<ModuleFault> faults = module_faults();
  for (size_t i = 0; i < mutants.size(); ++i) entries.emplace_back(mutants[i], faults[i]);
  std::vector<SelftestRow> rows;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (runs_entry && !runs_entry(i)) continue;
    const auto& [impl, fault] = entries[i];
    SelftestRow row{impl->name(), fault == ModuleFault::none ? "" : to_string(fault), 0, 0, 0, {}, i};
    for (const ModuleFixture& f : fixtures) {
      if (fault != ModuleFault::none && !fault_applies(fault, f.problem)) continue;
      ModuleOutputs out;
      if (!run_module(*impl, f.problem, f.inputs, out).ok) continue;
      ++row.applicable;
      const ModuleTolerance tol = module_tolerance(f.problem, f.inputs);
      if (judge(f, tol, out).pass) continue;
      caught(row, f.name, fault == ModuleFault::none, [&] { return diagnose(f, out); });
    }
    rows.push_back(std::move(row));
  }
  selftest_backward(fixtures, rows, entries.size(), runs_entry);
  return rows;
}

bool selftest_ok(const std::vector<SelftestRow>& rows) {
  for (const SelftestRow& r : rows) {
    if (r.injected.empty() ? r.caught > 0 : (r.caught == 0 || r.tagged != r.caught)) return false;
  }
  return true;
}

}  // namespace attncheck::module_check
