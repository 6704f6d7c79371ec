// The module's gradients by name and the module backward faults (module_problem.hpp).
#include "attncheck/module_problem.hpp"

namespace attncheck {
inline namespace model {

const char* to_string(ModuleGradFault f) {
  switch (f) {
    case ModuleGradFault::none: return "none";
    case ModuleGradFault::wo_transposed: return "grad-wo-transposed";
    case ModuleGradFault::out_bias_grad: return "grad-out-bias";
    case ModuleGradFault::x_kv_path: return "grad-x-kv-path";
  }
  return "?";
}

std::vector<ModuleGradFault> module_grad_faults() {
  return {ModuleGradFault::wo_transposed, ModuleGradFault::out_bias_grad, ModuleGradFault::x_kv_path};
}

bool grad_fault_applies(ModuleGradFault f, const ModuleProblem& m) {
  switch (f) {
    case ModuleGradFault::none: return false;
    case ModuleGradFault::wo_transposed: return m.d_out > 1 && m.attn.Hq * m.attn.Dv > 1;
    case ModuleGradFault::out_bias_grad: return m.out_bias;
    case ModuleGradFault::x_kv_path: return !m.cross();
  }
  return false;
}

std::vector<std::string> module_grad_names(const ModuleProblem& m) {
  std::vector<std::string> n{"dx"};
  if (m.cross()) n.push_back("dx2");
  if (m.packing == Packing::separate) {
    for (const char* s : {"dwq", "dwk", "dwv"}) n.push_back(s);
    if (m.qkv_bias)
      for (const char* s : {"dbq", "dbk", "dbv"}) n.push_back(s);
  } else {
    n.push_back("dwqkv");
    if (m.qkv_bias) n.push_back("dbqkv");
  }
  n.push_back("dwo");
  if (m.out_bias) n.push_back("dbo");
  if (m.attn.bias_shape) n.push_back("dbias");
  return n;
}

const Tensor& module_grad_input(const ModuleInputs& in, const std::string& g) {
  const std::pair<const char*, const std::optional<Tensor>*> opt[] = {
      {"dx2", &in.x2}, {"dwq", &in.wq},     {"dwk", &in.wk},     {"dwv", &in.wv}, {"dbq", &in.bq},    {"dbk", &in.bk},
      {"dbv", &in.bv}, {"dwqkv", &in.wqkv}, {"dbqkv", &in.bqkv}, {"dbo", &in.bo}, {"dbias", &in.bias}};
  if (g == "dx") return in.x;
  if (g == "dwo") return in.wo;
  for (const auto& [name, t] : opt)
    if (g == name) {
      if (!*t) throw std::invalid_argument(g + ": the module has no " + g.substr(1));
      return **t;
    }
  throw std::invalid_argument("gradient: unknown name '" + g + "'");
}

const std::vector<double>& module_grad(const ModuleGradients& g, const std::string& name) {
  const std::pair<const char*, const std::vector<double>*> all[] = {
      {"dx", &g.dx},   {"dx2", &g.dx2}, {"dwq", &g.dwq},    {"dwk", &g.dwk},     {"dwv", &g.dwv},
      {"dbq", &g.dbq}, {"dbk", &g.dbk}, {"dbv", &g.dbv},    {"dwqkv", &g.dwqkv}, {"dbqkv", &g.dbqkv},
      {"dwo", &g.dwo}, {"dbo", &g.dbo}, {"dbias", &g.dbias}};
  for (const auto& [n, v] : all)
    if (name == n) return *v;
  throw std::invalid_argument("gradient: unknown name '" + name + "'");
}

std::vector<double>& module_grad(ModuleGradients& g, const std::string& name) {
  return const_cast<std::vector<double>&>(module_grad(static_cast<const ModuleGradients&>(g), name));
}

}  // namespace model
}  // namespace attncheck
