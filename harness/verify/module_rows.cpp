// Module fixtures inside verify (module_rows.hpp): each implementation's module entry judged by harness/module.
#include "module_rows.hpp"

#include "attncheck/module_fixture.hpp"
#include "attncheck/module_tolerance.hpp"
#include "backward_row.hpp"
#include "module_check.hpp"

namespace attncheck::verify {

std::string module_case_name(const std::string& file) {
  try {
    return read_module_fixture(file).name;
  } catch (const std::exception&) {
    return "";
  }
}

bool module_fixture_has_gradients(const std::string& file) {
  try {
    return read_module_fixture(file).grad.has_value();
  } catch (const std::exception&) {
    return false;
  }
}

namespace {
// The "<impl>/backward" row of a module fixture with gradients.
ModuleRow backward_module_row(const ModuleFixture& f, const std::string& file, const Impl& impl, const Support& avail,
                              bool diagnose, double tol_scale, std::optional<ModuleGradients>& tol) {
  ModuleRow mr{unjudged(f.name, file, backward_label(impl.name())), {}};
  CaseResult& r = mr.row;
  const ModuleImplPtr entry = find_module_entry(impl);
  if (!avail.ok) {
    r.status = Status::unavailable, r.message = "unavailable: " + avail.reason;
  } else if (!entry) {
    r.status = Status::unsupported, r.message = "module: " + impl.name() + " has no module entry";
  } else {
    try {
      ModuleGradOutputs g;
      const Support s = run_module_backward(*entry, f.problem, f.inputs, *f.dy, g);
      if (!s.ok) {
        r.status = Status::unsupported, r.message = "module: " + s.reason;
      } else {
        if (!tol) tol = module_grad_tolerance(f.problem, f.inputs, f.dy->to_double());
        r = judged_result(f.name, file, backward_label(impl.name()), module_check::judge_backward(f, *tol, g, tol_scale));
        if (diagnose && r.status == Status::fail) {
          std::string tags;
          for (const std::string& t : module_check::diagnose_backward(f, g)) tags += (tags.empty() ? "" : " ") + t;
          mr.lines.push_back("diagnosis: " + (tags.empty() ? std::string("(no module backward fault explains it)") : tags));
        }
      }
    } catch (const std::exception&) {
      record_exception(r);
    }
  }
  describe_problem(r, f.problem.attn);
  r.features.push_back("module");
  return mr;
}
}  // namespace

std::vector<ModuleRow> module_rows(const std::string& file, const std::vector<ImplPtr>& impls,
                                   const std::vector<Support>& avail, bool diagnose, double tol_scale, bool forward,
                                   bool backward) {
  ModuleFixture f;
  try {
    f = read_module_fixture(file);
  } catch (const std::exception& e) {
    return {ModuleRow{input_error(file, e.what()), {}}};
  }
  std::vector<ModuleRow> rows;
  std::optional<ModuleGradients> gtol;  // computed once, when a backward is judged
  if (backward && f.grad)
    for (size_t i = 0; i < impls.size(); ++i)
      rows.push_back(backward_module_row(f, file, *impls[i], avail[i], diagnose, tol_scale, gtol));
  if (!forward) return rows;
  const ModuleTolerance tol = module_tolerance(f.problem, f.inputs);
  for (size_t i = 0; i < impls.size(); ++i) {
    ModuleRow mr{unjudged(f.name, file, impls[i]->name()), {}};
    CaseResult& r = mr.row;
    const ModuleImplPtr entry = find_module_entry(*impls[i]);
    if (!avail[i].ok) {
      r.status = Status::unavailable, r.message = "unavailable: " + avail[i].reason;
    } else if (!entry) {
      r.status = Status::unsupported, r.message = "module: " + impls[i]->name() + " has no module entry";
    } else {
      try {
        ModuleOutputs out;
        const Support s = run_module(*entry, f.problem, f.inputs, out);
        if (!s.ok) {
          r.status = Status::unsupported, r.message = "module: " + s.reason;
        } else {
          r = judged_result(f.name, file, impls[i]->name(), module_check::judge(f, tol, out, tol_scale));
          if (diagnose && r.status == Status::fail) {
            std::string tags;
            for (const std::string& t : module_check::diagnose(f, out)) tags += (tags.empty() ? "" : " ") + t;
            mr.lines.push_back("diagnosis: " + (tags.empty() ? std::string("(no module fault explains it)") : tags));
          }
        }
      } catch (const std::exception&) {
        record_exception(r);
      }
    }
    describe_problem(r, f.problem.attn);
    r.features.push_back("module");
    rows.push_back(std::move(mr));
  }
  return rows;
}

}  // namespace attncheck::verify
