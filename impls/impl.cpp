// Capability checking and the harness's way of running one implementation on one case.
#include <cmath>
#include <limits>

#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"

namespace attncheck {

Support check_capabilities(const Capabilities& c, const Problem& p) {
  if (!c.dtypes.count(p.dtype)) return Support::no(std::string("dtype ") + to_string(p.dtype) + " not supported");
  if (!c.layouts.count(p.layout)) return Support::no(std::string("layout ") + to_string(p.layout) + " not supported");
  if (!c.gqa && p.Hq != p.Hkv) return Support::no("GQA/MQA (Hq != Hkv) not supported");
  if (!c.cross && p.Lq != p.Lk) return Support::no("Lq != Lk not supported");
  if (!c.dqk_ne_dv && p.Dqk != p.Dv) return Support::no("Dqk != Dv not supported");
  if (c.max_head_dim > 0 && (p.Dqk > c.max_head_dim || p.Dv > c.max_head_dim))
    return Support::no("head dim " + std::to_string(std::max(p.Dqk, p.Dv)) + " > " + std::to_string(c.max_head_dim));
  if (c.head_dim_multiple > 1 && (p.Dqk % c.head_dim_multiple || p.Dv % c.head_dim_multiple))
    return Support::no("head dims (" + std::to_string(p.Dqk) + ", " + std::to_string(p.Dv) +
                       ") not multiples of " + std::to_string(c.head_dim_multiple));
  const bool uses_alignment = p.causal || p.has_window();
  if (p.causal && !c.causal) return Support::no("causal mask not supported");
  if (uses_alignment && !c.alignments.count(p.alignment))
    return Support::no(std::string("alignment ") + to_string(p.alignment) + " not supported");
  if (!p.causal_offsets.empty() && !c.per_batch_offsets) return Support::no("per-batch causal offsets not supported");
  if (!p.key_lengths.empty() && !c.key_padding) return Support::no("key padding not supported");
  if (p.mask_shape && !c.bool_mask) return Support::no("boolean mask not supported");
  if (p.bias_shape && !c.bias) return Support::no("additive bias not supported");
  if (p.has_window() && !c.window) return Support::no("sliding window not supported");
  if (p.softcap > 0 && !c.softcap) return Support::no("softcap not supported");
  if (p.dropout_p > 0 && !c.dropout) return Support::no("dropout not supported");
  if (p.fill == MaskFill::finite && !c.finite_fill) return Support::no("finite mask fill not supported");
  if (!c.fully_masked.count(p.fully_masked))
    return Support::no(std::string("fully-masked policy '") + to_string(p.fully_masked) + "' not supported");
  if (p.want_weights && !c.weights_out) return Support::no("weights output not supported");
  if (p.want_lse && !c.lse_out) return Support::no("lse output not supported");
  return Support::yes();
}

Declarations Impl::declarations() const { return default_declarations(capabilities()); }

Declarations default_declarations(const Capabilities& c) {
  Declarations d;
  if (c.fully_masked.size() == 1) d.fully_masked_policy = *c.fully_masked.begin();
  d.outputs = {"out"};
  if (c.lse_out) d.outputs.push_back("lse");
  if (c.weights_out) d.outputs.push_back("weights");
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
  impl.run(p, in, out);
  return Support::yes();
}

}  // namespace attncheck
