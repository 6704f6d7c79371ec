// The harness's way of running one implementation on one case (capability checks
// are derived from the feature table: reference/src/features.cpp).
#include <cmath>
#include <limits>

#include "attncheck/impl.hpp"

namespace attncheck {

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
  impl.run(p, in, out);
  return Support::yes();
}

}  // namespace attncheck
