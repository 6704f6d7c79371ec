// The harness's way of running one implementation on one case (capability checks
// are derived from the feature table: reference/src/features.cpp).
#include <cmath>
#include <limits>

#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"

namespace attncheck {

Declarations Impl::declarations() const { return default_declarations(capabilities()); }

Declarations default_declarations(const Capabilities& c) {
  Declarations d;
  if (c.fully_masked.size() == 1) d.fully_masked_policy = *c.fully_masked.begin();
  d.outputs = {"out"};
  if (c.lse_out) d.outputs.push_back("lse");
  if (c.weights_out) d.outputs.push_back("weights");
  return d;
}

Declarations p_exact_declarations(const Capabilities& c) {
  Declarations d = default_declarations(c);
  for (DType t : {DType::e4m3, DType::e5m2}) {
    PrecisionContract k = default_contract(t);
    k.p_rounded = false;
    d.contracts[t] = k;
  }
  return d;
}

Support run_impl(const Impl& impl, const Problem& p, const Inputs& in, Outputs& out) {
  validate(p, in);
  if (Support a = impl.available(); !a.ok) return Support::no("unavailable: " + a.reason);
  if (Support s = impl.supports(p); !s.ok) return s;
  out = make_outputs(p);
  // Poison every output so an element the implementation never writes fails. NaN, unless the fully-masked policy
  // is nan: then NaN is the right answer for masked rows, and an implementation that skips them would pass.
  const double poison = p.fully_masked == FullyMasked::nan ? std::numeric_limits<double>::infinity()
                                                           : std::numeric_limits<double>::quiet_NaN();
  out.out.fill(poison);
  if (out.lse) out.lse->fill(poison);
  if (out.weights) out.weights->fill(poison);
  if (out.scores) out.scores->fill(poison);
  if (out.present_k) out.present_k->fill(poison), out.present_v->fill(poison);
  impl.run(p, in, out);
  return Support::yes();
}

}  // namespace attncheck
