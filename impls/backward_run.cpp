// The optional backward entry of the Impl interface (defaults: not implemented) and the harness's way of running
// it: the implementation's own forward (with lse) first, then its backward on NaN-poisoned gradient tensors.
#include <limits>

#include "attncheck/backward.hpp"
#include "attncheck/impl.hpp"

namespace attncheck {

Support Impl::supports_backward(const Problem&) const { return Support::no("backward pass not implemented"); }

void Impl::run_backward(const Problem&, const Inputs&, const Outputs&, const Tensor&, Gradients&) const {
  throw std::logic_error(name() + ": backward pass not implemented");
}

Support run_backward_impl(const Impl& impl, const Problem& problem, const Inputs& in, const Tensor& dout,
                          Gradients& g) {
  Problem p = problem;
  p.want_lse = true;  // the saved statistics of a flash backward
  p.want_weights = false;
  Outputs fwd;
  if (Support s = run_impl(impl, p, in, fwd); !s.ok) return s;
  if (Support s = impl.supports_backward(p); !s.ok) return s;
  if (dout.shape != std::vector<int64_t>{p.B, p.Hq, p.Lq, p.Dv})
    throw std::invalid_argument("dout: shape does not match [B,Hq,Lq,Dv]");
  g = make_gradients(p);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  g.dq.fill(nan);
  g.dk.fill(nan);
  g.dv.fill(nan);
  if (g.dbias) g.dbias->fill(nan);
  impl.run_backward(p, in, fwd, dout, g);
  return Support::yes();
}

}  // namespace attncheck
