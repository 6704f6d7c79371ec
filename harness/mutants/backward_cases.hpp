// The generated cases of the backward checks (tests/backward and the backward selftest): fp64 (or a given dtype)
// cases over the whole feature space with every feature forced on in turn, a random dO, rows with no visible key.
#pragma once

#include <cmath>
#include <vector>

#include "attncheck/backward.hpp"
#include "attncheck/error_scales.hpp"
#include "case.hpp"

namespace attncheck::gradtest {

// Case n of a deterministic stream: drawn like the property suite, made `dtype` (fp64 by default) and small;
// features forced in turn.
inline prop::Case grad_case(uint64_t n, int64_t budget = 2500, DType dtype = DType::f64) {
  prop::SeededChooser pick(0x9e3779b97f4a7c15ull ^ (n * 7919));
  prop::CaseSpec s = prop::draw_spec(pick);
  s.dtype = dtype;
  switch (n % 6) {
    case 1:  // the logit stage on
      for (const ModEntry& m : logit_modifications()) s.logit.emplace_back(m.name, m.examples[0]);
      break;
    case 2: s.dropout_p = 0.5; break;
    case 3: s.bias_kind = static_cast<int>(1 + n % 3); break;
    case 4:
      s.Hkv = 1;
      s.Hq = 3;
      break;
    case 5:
      s.causal = true;
      s.mask_kind = static_cast<int>(n % 4);
      break;
    default: break;
  }
  prop::normalise(s);
  prop::apply_budget(s, budget);
  prop::Case c = prop::build_case(s);
  if (c.in.bias && dtype == DType::f64) {  // an exact fp64 bias: a finite-difference step is the step taken
    const std::vector<double> b = c.in.bias->to_double();
    Tensor t(DType::f64, c.in.bias->shape);
    for (size_t e = 0; e < b.size(); ++e) t.set_offset(static_cast<int64_t>(e), b[e]);
    c.in.bias = t;
    c.p.bias_dtype = DType::f64;
  }
  return c;
}

inline Tensor random_dout(const Problem& p, uint64_t seed) {
  Tensor t = make_dout(p);
  prop::SeededChooser r(seed);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) t.put(b, h, i, d, prop::normal(r));
  return t;
}

// Rows [B*Hq*Lq] with no visible key: the forward under the NaN policy makes exactly those rows NaN.
inline std::vector<char> empty_rows(const Problem& p, const Inputs& in) {
  Problem pn = p;
  pn.fully_masked = FullyMasked::nan;
  pn.fill = MaskFill::neg_inf;
  const ExpectedAttention f = expected_attention(pn, in, 1);
  std::vector<char> e(static_cast<size_t>(p.B * p.Hq * p.Lq), 0);
  for (size_t row = 0; row < e.size(); ++row) e[row] = std::isnan(f.out[row * static_cast<size_t>(p.Dv)]);
  return e;
}

}  // namespace attncheck::gradtest
