// The outputs of a module problem, allocated (module_impl.hpp); in the interface library, so the worker host can
// allocate them without the registry.
#include "attncheck/module_impl.hpp"

namespace attncheck {

ModuleOutputs make_module_outputs(const ModuleProblem& m) {
  const Problem& p = m.attn;
  ModuleOutputs o;
  o.y = Tensor(p.dtype, {p.B, p.Lq, m.d_out});
  if (p.want_weights)
    o.weights = m.average_weights ? Tensor(p.stat_dtype(), {p.B, 1, p.Lq, p.Lk})
                                  : Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq, p.Lk});
  return o;
}

}  // namespace attncheck
