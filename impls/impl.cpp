// The harness's way of running one implementation on one case (capability checks
// are derived from the feature table: reference/model/src/features.cpp).
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/state.hpp"

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

const char* to_string(MaskedInputs m) { return m == MaskedInputs::isolated ? "isolated" : "finite-required"; }

MaskedInputs masked_inputs_from_string(const std::string& s) {
  if (s == "isolated") return MaskedInputs::isolated;
  if (s == "finite-required") return MaskedInputs::finite_required;
  throw std::invalid_argument("expected \"isolated\" or \"finite-required\", got \"" + s + "\"");
}

std::string nonfinite_inputs(const Inputs& in) {
  std::string found;
  auto scan = [&](const char* name, const Tensor* t, bool minus_inf_ok) {
    if (!t) return;
    for (int64_t n = 0; n < t->numel(); ++n) {
      const double x = t->get_offset(n);
      if (std::isnan(x) || (std::isinf(x) && !(minus_inf_ok && x < 0))) {
        found += (found.empty() ? "" : ", ") + std::string(name);
        return;
      }
    }
  };
  auto opt = [](const std::optional<Tensor>& t) { return t ? &*t : nullptr; };
  scan("k", &in.k, false), scan("v", &in.v, false);
  scan("past_k", opt(in.past_k), false), scan("past_v", opt(in.past_v), false);
  scan("bias", opt(in.bias), true);
  return found;
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
  if (out.max_logit) out.max_logit->fill(poison);
  if (out.amax_o) out.amax_o->fill(poison);
  if (out.present_k) out.present_k->fill(poison), out.present_v->fill(poison);
  impl.run(p, in, out);
  return Support::yes();
}

Support Impl::supports_merge(const MergeProblem&) const { return Support::no("merge not implemented"); }
void Impl::run_merge(const MergeProblem&, const StoredStates&, StoredStates&) const {
  throw std::logic_error(name() + ": run_merge called without supports_merge");
}

Support Impl::supports_partials(const Problem&) const { return Support::no("partial states not exposed"); }
void Impl::run_partials(const Problem&, const Inputs&, int64_t, KernelPartials&) const {
  throw std::logic_error(name() + ": run_partials called without supports_partials");
}

Support run_merge_impl(const Impl& impl, const MergeProblem& p, const StoredStates& in, StoredStates& out) {
  validate(p);
  if (Support a = impl.available(); !a.ok) return Support::no("unavailable: " + a.reason);
  if (Support s = impl.supports_merge(p); !s.ok) return s;
  out = make_merge_outputs(p);
  const double nan = std::numeric_limits<double>::quiet_NaN();  // every element must be written
  out.o.fill(nan);
  for (std::optional<Tensor>* t : {&out.lse, &out.max, &out.sum})
    if (*t) (*t)->fill(nan);
  impl.run_merge(p, in, out);
  return Support::yes();
}

}  // namespace attncheck
