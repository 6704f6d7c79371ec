// The invariance group (docs/invariance.md): the same case gives the same bits run after run (forward, and the
// backward where the implementation has one), a batch entry gives the same bits alone or anywhere in a larger
// batch, the case agrees under other settings of the schedule knobs the implementation exposes and with its inputs
// in another layout or strides (bitwise where declared, else within tolerance). A promise the implementation
// declares (deterministic, batch_invariant, schedule knobs, layout_invariant) is checked always; an undeclared one
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

// Whether outputs of the case agree with the reference within the tolerance `impl` declares: "" or what fails.
std::function<std::string(const Outputs&)> judge_against(const Impl& impl, const Case& c) {
  auto t = std::make_shared<Tol>(tolerances(impl, c));
  return [&impl, &c, t](const Outputs& o) {
    Checker k(impl, c);
    k.compare("out", out_shape(c.p), t->ref.out, o.out.to_double(), t->out);
    if (c.p.want_lse && o.lse) k.compare("lse", lse_shape(c.p), t->ref.lse, o.lse->to_double(), t->lse);
    if (c.p.want_weights && o.weights) k.compare("weights", w_shape(c.p), t->ref.weights, o.weights->to_double(), t->w);
    const Outcome r = k.done();
    return r.kind == Outcome::fail ? r.message : std::string();
  };
}

// The schedule or layout check of one case.
Outcome variant_check(const Impl& impl, const Case& c0, bool schedule) {
  const Case c = with_stats(impl, c0);
  Outputs first;
  if (const Support s = run_impl(impl, c.p, c.in, first); !s.ok) return Outcome::unsup(s.reason);
  invariance::Options o;
  o.rerun = o.batch = false;
  (schedule ? o.schedule : o.layout) = true;
  o.within_tolerance = judge_against(impl, c);
  return outcome(impl, c, invariance::check_forward(impl, c.p, c.in, first, o).front());
}

Outcome schedule_invariance(const Impl& impl, const Case& c) {
  if (!impl.declarations().schedule_knobs)
    return Outcome::unsup("exposes no schedule knob (threads, num_splits, block_order)");
  return variant_check(impl, c, true);
}

Outcome layout_invariance(const Impl& impl, const Case& c) {
  if (!impl.declarations().layout_invariant && !invariance::asked())
    return Outcome::unsup("not declared layout_invariant (attncheck property --invariance checks it anyway)");
  return variant_check(impl, c, false);
}

}  // namespace

std::vector<Property> invariance_properties() {
  return {
      {"rerun", "the same case gives the same bits run after run (forward and backward), also after another case",
       prep_none, rerun},
      {"batch_invariance", "a batch entry gives the same bits alone and anywhere in a larger, padded batch", prep_none,
       batch_invariance},
      {"schedule_invariance",
       "the case agrees under other threads, num_splits and block orders (the knobs it exposes): bitwise where "
       "declared",
       prep_none, schedule_invariance},
      {"layout_invariance", "the same data in the other layout and with sequence-major strides gives the same bits",
       prep_none, layout_invariance},
  };
}

}  // namespace attncheck::prop
