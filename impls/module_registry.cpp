// Which implementations offer a module entry (module_impl.hpp), the test-only module mutants, and run_module.
// Only `cpu` and `cpu-flash` have one; every other implementation reports module fixtures as unsupported.
#include <cmath>
#include <limits>

#include "attncheck/impl.hpp"
#include "attncheck/module_impl.hpp"

namespace attncheck {

#ifdef ATTNCHECK_HAVE_CPU
ModuleImplPtr make_cpu_module(ImplPtr attention, ModuleFault fault,
                              ModuleGradFault grad_fault = ModuleGradFault::none);  // impls/cpu/cpu_module.cpp
#endif

ModuleImplPtr find_module_entry(const std::string& impl_name) {
#ifdef ATTNCHECK_HAVE_CPU
  if (impl_name == "cpu" || impl_name == "cpu-flash")
    if (ImplPtr a = find_impl(impl_name)) return make_cpu_module(a, ModuleFault::none);
#endif
  (void)impl_name;
  return nullptr;
}

ModuleImplPtr find_module_entry(const Impl& impl) {
  if (const auto* provider = dynamic_cast<const ModuleProvider*>(&impl)) return provider->module_entry();
  if (find_impl(impl.name()).get() != &impl) return nullptr;  // a wrapper or mutant wearing a built-in's name
  return find_module_entry(impl.name());
}

std::vector<ModuleImplPtr> module_mutants() {
  std::vector<ModuleImplPtr> out;
#ifdef ATTNCHECK_HAVE_CPU
  if (ImplPtr a = find_impl("cpu"))
    for (ModuleFault f : module_faults()) out.push_back(make_cpu_module(a, f));
#endif
  return out;
}

std::vector<ModuleImplPtr> module_grad_mutants() {
  std::vector<ModuleImplPtr> out;
#ifdef ATTNCHECK_HAVE_CPU
  if (ImplPtr a = find_impl("cpu"))
    for (ModuleGradFault f : module_grad_faults()) out.push_back(make_cpu_module(a, ModuleFault::none, f));
#endif
  return out;
}

Support run_module(const ModuleImpl& impl, const ModuleProblem& m, const ModuleInputs& in, ModuleOutputs& out) {
  validate(m, in);
  const Support s = impl.supports(m);
  if (!s.ok) return s;
  out = make_module_outputs(m);
  out.y.fill(std::numeric_limits<double>::quiet_NaN());
  if (out.weights) out.weights->fill(std::numeric_limits<double>::quiet_NaN());
  impl.run(m, in, out);
  return s;
}

Support run_module_backward(const ModuleImpl& impl, const ModuleProblem& m, const ModuleInputs& in, const Tensor& dy,
                            ModuleGradOutputs& g) {
  validate(m, in);
  const Problem& p = m.attn;
  if (dy.shape != std::vector<int64_t>{p.B, p.Lq, m.d_out})
    throw std::invalid_argument("dy: shape " + shape_string(dy.shape) +
                                ", expected [B, Lq, d_out] = " + shape_string({p.B, p.Lq, m.d_out}));
  if (dy.dtype != p.dtype)
    throw std::invalid_argument(std::string("dy: dtype ") + to_string(dy.dtype) + ", expected the module's " +
                                to_string(p.dtype));
  if (Support s = impl.supports(m); !s.ok) return s;
  if (Support s = impl.supports_backward(m); !s.ok) return s;
  g.clear();
  for (const std::string& name : module_grad_names(m)) {
    const Tensor& input = module_grad_input(in, name);
    Tensor t(input.dtype, input.shape);
    t.fill(std::numeric_limits<double>::quiet_NaN());
    g.emplace(name, std::move(t));
  }
  impl.run_backward(m, in, dy, g);
  return Support::yes();
}

}  // namespace attncheck
