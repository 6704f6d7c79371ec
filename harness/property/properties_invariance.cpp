// The invariance group (docs/invariance.md): the same case gives the same bits run after run (forward, and the
// backward where the implementation has one), and a batch entry gives the same bits alone or anywhere in a larger
// batch. A promise the implementation declares (deterministic, batch_invariant) is checked always; an undeclared one
// only when the user asks (invariance::asked()), otherwise the case is unsupported with the reason.
#include "attncheck/declarations.hpp"
#include "invariance.hpp"
#include "prop_util.hpp"

namespace attncheck::prop {
namespace {

Outcome outcome(const Impl& impl, const Case& c, const invariance::Check& k) {
  if (k.result == invariance::Check::unsupported) return Outcome::unsup(k.message);
  Checker ch(impl, c);
  if (k.result == invariance::Check::violated) ch.fail(k.message);
  return ch.done();
}

// An upstream gradient with values of the case's own scale: out's shape, filled from the case's seed.
Tensor make_upstream(const Case& c) {
  Tensor d = make_dout(c.p);
  SeededChooser r(c.spec.seed ^ 0xd0);
  for (int64_t n = 0; n < d.numel(); ++n) d.set_offset(n, r.uniform_signed());
  return d;
}

Outcome rerun(const Impl& impl, const Case& c0) {
  const Declarations d = impl.declarations();
  if (!d.deterministic && !invariance::asked())
    return Outcome::unsup("not declared deterministic (attncheck property --invariance checks it anyway)");
  const Case c = with_stats(impl, c0);
  Outputs first;
  if (const Support s = run_impl(impl, c.p, c.in, first); !s.ok) return Outcome::unsup(s.reason);
  invariance::Options o;
  o.batch = false;
  const Outcome fwd = outcome(impl, c, invariance::check_forward(impl, c.p, c.in, first, o).front());
  if (fwd.kind == Outcome::fail || !impl.supports_backward(c.p).ok || is_fp8(c.p.dtype)) return fwd;
  const Tensor dout = make_upstream(c);
  Gradients g;
  if (!run_backward_impl(impl, c.p, c.in, dout, g).ok) return fwd;
  return outcome(impl, c, invariance::check_backward(impl, c.p, c.in, dout, g, o.runs));
}

Outcome batch_invariance(const Impl& impl, const Case& c0) {
  if (!impl.declarations().batch_invariant && !invariance::asked())
    return Outcome::unsup("not declared batch_invariant (attncheck property --invariance checks it anyway)");
  const Case c = with_stats(impl, c0);
  Outputs first;
  if (const Support s = run_impl(impl, c.p, c.in, first); !s.ok) return Outcome::unsup(s.reason);
  invariance::Options o;
  o.rerun = false;
  return outcome(impl, c, invariance::check_forward(impl, c.p, c.in, first, o).front());
}

}  // namespace

std::vector<Property> invariance_properties() {
  return {
      {"rerun", "the same case gives the same bits run after run (forward and backward), also after another case",
       prep_none, rerun},
      {"batch_invariance", "a batch entry gives the same bits alone and anywhere in a larger, padded batch", prep_none,
       batch_invariance},
  };
}

}  // namespace attncheck::prop
