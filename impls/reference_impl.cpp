// The reference registered as an implementation, so `attncheck verify --impl reference` replays fixtures
// through the same path as every other backend (its outputs are rounded to the problem's dtypes).
#include "attncheck/declarations.hpp"
#include "attncheck/features.hpp"
#include "attncheck/fp8_out.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/reference.hpp"

namespace attncheck {
namespace {

class ReferenceImpl final : public Impl {
 public:
  std::string name() const override { return "reference"; }
  std::string description() const override { return "naive looped reference, double accumulation (the oracle)"; }
  Capabilities capabilities() const override {
    // The whole problem model: every extension feature of the table (fp8 adds its formats to the dtypes).
    Capabilities c;
    std::vector<std::string> all;
    for (const Feature& f : problem_features())
      if (f.abi_tag && f.boolean()) all.emplace_back(f.protocol);
    declare_extension_features(c, all);
    for (const ModEntry& m : modifications()) c.mods.insert(m.name);
    c.kv_quant = c.mla = c.fp8_out = c.kv_q4 = c.kv_quant_paged = true;
    return c;
  }
  // fp8 inputs decoded exactly, P in double: not rounded to fp8.
  Declarations declarations() const override {
    Declarations d = p_exact_declarations(capabilities());
    d.deterministic = d.batch_invariant = true;  // per-row loops in a fixed order, one row never reads another
    d.schedule_knobs = d.schedule_bitwise = knob_threads;  // rows are dealt to threads, each computed alone
    d.layout_invariant = true;                             // elements read by logical index
    return d;
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override {
    const ReferenceResult r = reference_attention(p, in);
    for (int64_t b = 0, n = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i)
          for (int64_t d = 0; d < p.Dv; ++d) out.out.put(b, h, i, d, r.out[static_cast<size_t>(n++)]);
    if (p.fp8_out) {  // the store of the exact O
      Tensor o(DType::f64, {p.B, p.Hq, p.Lq, p.Dv});
      std::copy(r.out.begin(), r.out.end(), o.data<double>());
      store_fp8_out(p, o, out);
    }
    if (out.lse)
      for (int64_t n = 0; n < out.lse->numel(); ++n) out.lse->set_offset(n, r.lse[static_cast<size_t>(n)]);
    if (out.weights)
      for (int64_t n = 0; n < out.weights->numel(); ++n) out.weights->set_offset(n, r.weights[static_cast<size_t>(n)]);
    if (out.scores)
      for (int64_t n = 0; n < out.scores->numel(); ++n) out.scores->set_offset(n, r.scores[static_cast<size_t>(n)]);
    if (out.max_logit) {
      const std::vector<double> m = p.max_logit == MaxLogitOut::heads ? max_logit_heads(p, r.max_logit) : r.max_logit;
      for (int64_t n = 0; n < out.max_logit->numel(); ++n) out.max_logit->set_offset(n, m[static_cast<size_t>(n)]);
    }
    for (auto [t, e] : {std::pair{&out.present_k, &r.present_k}, std::pair{&out.present_v, &r.present_v}})
      if (*t) {  // [B,Hkv,Lk,D] logical order in the reference, the layout's order in the tensor
        const int64_t H = (*t)->shape[1], L = (*t)->shape[2], D = (*t)->shape[3];
        for (int64_t n = 0; n < (*t)->numel(); ++n)
          (*t)->put(n / (H * L * D), n / (L * D) % H, n / D % L, n % D, (*e)[static_cast<size_t>(n)]);
      }
  }
};

}  // namespace

std::vector<ImplPtr> make_reference_impls() { return {std::make_shared<ReferenceImpl>()}; }

}  // namespace attncheck
