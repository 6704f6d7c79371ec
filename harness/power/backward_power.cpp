// The backward detection-power table (backward_power.hpp): one fp32 problem per context length, the reference
// gradients once, then every variant's gradients judged by the gradient tolerance under the fp32 contract.
#include "backward_power.hpp"

#include <algorithm>
#include <cmath>

#include "attncheck/rng.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "backward_mutants.hpp"

namespace attncheck::power {

namespace {
double max_ratio(const Verdict& v) {
  double r = 0;
  for (const TensorVerdict& t : v.tensors)
    r = std::max(r, t.tolerance > 0 ? std::abs(t.actual - t.expected) / t.tolerance
                                    : (t.pass ? 0.0 : std::numeric_limits<double>::infinity()));
  return v.pass ? r : std::max(r, 1.0 + 1e-12);  // a failing verdict is > 1 even if its worst element is NaN
}
}  // namespace

std::vector<BackwardPowerRow> backward_power(const std::vector<int64_t>& lks, uint64_t seed) {
  using mutants::BwdFault;
  std::vector<std::pair<std::string, ImplPtr>> variants = {{"cpu", find_impl("cpu")},
                                                           {"cpu-flash", find_impl("cpu-flash")}};
  std::vector<BwdFault> faults = {BwdFault::none, BwdFault::no_d_term, BwdFault::gqa_not_summed, BwdFault::no_scale_dk,
                                  BwdFault::lse_wrong_row};
  for (BwdFault f : mutants::subtle_backward_faults()) faults.push_back(f);
  for (BwdFault f : faults) variants.emplace_back(mutants::to_string(f), mutants::make_backward_mutant(f));

  std::vector<BackwardPowerRow> rows;
  for (int64_t lk : lks) {
    Problem p;
    p.Hq = 2, p.Hkv = 1, p.Lq = 4, p.Lk = lk, p.Dqk = 64, p.Dv = 32;
    p.dtype = DType::f32;
    p.want_lse = true;
    Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}};
    Rng r(seed ^ static_cast<uint64_t>(lk));
    for (Tensor* t : {&in.q, &in.k, &in.v})
      for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, r.normal());
    Tensor dout = make_dout(p);
    for (int64_t n = 0; n < dout.numel(); ++n) dout.set_offset(n, r.normal());
    const ExpectedAttention fwd = expected_attention(p, in);
    const BackwardResult ref = reference_backward(p, in, dout);
    for (const auto& [name, impl] : variants) {
      Gradients g;
      BackwardPowerRow row;
      row.variant = name;
      row.correct = name == "cpu" || name == "cpu-flash" || name == mutants::to_string(BwdFault::none);
      row.lk = lk;
      if (!run_backward_impl(*impl, p, in, dout, g).ok) throw std::logic_error(name + ": backward unsupported");
      const Verdict v = judge_backward(p, fwd, ref, g);
      row.ratio = max_ratio(v);
      row.worst = v.worst().describe();
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace attncheck::power
