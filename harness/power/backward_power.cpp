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
struct Seeded {
  Problem p;
  Inputs in;
  Tensor dout;
};
// Problem p with N(0,1) inputs and dO.
Seeded seeded(const Problem& p, uint64_t seed) {
  Seeded s{p, Inputs{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), {}, {}, {}, {}, {}}, make_dout(p)};
  Rng r(seed);
  for (Tensor* t : {&s.in.q, &s.in.k, &s.in.v, &s.dout})
    for (int64_t n = 0; n < t->numel(); ++n) t->set_offset(n, r.normal());
  return s;
}

Problem power_problem(int64_t lk) {
  Problem p;
  p.Hq = 2, p.Hkv = 1, p.Lq = 4, p.Lk = lk, p.Dqk = 64, p.Dv = 32;
  p.dtype = DType::f32;
  p.want_lse = true;
  return p;
}

double max_ratio(const Verdict& v) {
  double r = 0;
  for (const TensorVerdict& t : v.tensors)
    r = std::max(r, t.tolerance > 0 ? std::abs(t.actual - t.expected) / t.tolerance
                                    : (t.pass ? 0.0 : std::numeric_limits<double>::infinity()));
  return v.pass ? r : std::max(r, 1.0 + 1e-12);  // a failing verdict is > 1 even if its worst element is NaN
}

BackwardPowerRow judged(const std::string& name, bool correct, const Impl& impl, const Seeded& s,
                        const ExpectedAttention& fwd, const ExpectedGradients& ref, const ToleranceModel& m) {
  Gradients g;
  if (!run_backward_impl(impl, s.p, s.in, s.dout, g).ok) throw std::logic_error(name + ": backward unsupported");
  const Verdict v = judge_backward(s.p, fwd, ref, g, m);
  BackwardPowerRow row;
  row.variant = name;
  row.correct = correct;
  row.ratio = max_ratio(v);
  const TensorVerdict& w = v.worst();
  row.worst = w.describe();
  row.error = std::abs(w.actual - w.expected);
  row.tolerance = w.tolerance;
  return row;
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
    const Seeded s = seeded(power_problem(lk), seed ^ static_cast<uint64_t>(lk));
    const ExpectedAttention fwd = expected_attention(s.p, s.in);
    const ExpectedGradients ref = expected_gradients(s.p, s.in, s.dout);
    for (const auto& [name, impl] : variants) {
      const bool correct = name == "cpu" || name == "cpu-flash" || name == mutants::to_string(BwdFault::none);
      rows.push_back(judged(name, correct, *impl, s, fwd, ref, ToleranceModel{}));
      rows.back().lk = lk;
    }
  }
  return rows;
}

std::vector<BackwardPowerRow> backward_rope_power(const std::vector<int64_t>& positions, int64_t lk, uint64_t seed) {
  using mutants::BwdFault;
  struct Variant {
    std::string name;
    ImplPtr impl;
    RopeMath rope;  // declared
    bool correct;
  };
  std::vector<Variant> variants = {
      {"cpu-flash", find_impl("cpu-flash"), RopeMath::exact, true},
      {"bwd-rope-fp32-angles", mutants::make_backward_mutant(BwdFault::none, RopeMath::fp32), RopeMath::fp32, true},
      {"bwd-rope-table-fp16", mutants::make_backward_mutant(BwdFault::none, RopeMath::table_fp16), RopeMath::table_fp16,
       true},
      {"bwd-rope-table-bf16", mutants::make_backward_mutant(BwdFault::none, RopeMath::table_bf16), RopeMath::table_bf16,
       true}};
  for (BwdFault f : mutants::rope_backward_faults())
    variants.push_back(
        {mutants::to_string(f), mutants::make_backward_mutant(f, RopeMath::fp32), RopeMath::fp32, false});

  std::vector<BackwardPowerRow> rows;
  for (int64_t pos : positions) {
    Problem p = power_problem(lk);
    p.causal = true;
    p.rotary_dim = p.Dqk;
    p.rope_offsets = {std::max<int64_t>(pos - lk, 0)};
    const Seeded s = seeded(p, seed ^ static_cast<uint64_t>(pos));
    const ExpectedAttention fwd = expected_attention(s.p, s.in);
    const ExpectedGradients ref = expected_gradients(s.p, s.in, s.dout);
    for (const Variant& v : variants) {
      ToleranceModel m;
      m.contract = default_contract(p.dtype);
      m.contract->rope = v.rope;
      rows.push_back(judged(v.name, v.correct, *v.impl, s, fwd, ref, m));
      rows.back().lk = lk;
      rows.back().position = p.rope_offsets[0] + lk;
    }
  }
  return rows;
}

}  // namespace attncheck::power
