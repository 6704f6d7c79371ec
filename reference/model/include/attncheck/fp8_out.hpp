// An fp8 output, described once (cuDNN sdpa_fp8's O with scale_o and amax_o): with Problem::fp8_out the output is
// stored as the o_dtype codes of O * scale_o, each rounded once to nearest even and saturated at the format's
// largest finite value (448 for e4m3, 57344 for e5m2); amax_o is max |O| over the whole output before the scaling
// (NaN elements skipped), in the stat dtype. The rules, the store and the decoding the judge uses live here.
#pragma once

#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// Cross-field rules (validate(Problem) calls this): throws naming the field and the values.
void validate_fp8_out(const Problem& p);
// The code value stored for an output value o: o * scale_o saturated, rounded once to o_dtype (NaN stays NaN).
double fp8_out_code(const Problem& p, double o);
// The output value a stored code stands for: code / scale_o.
inline double fp8_out_value(const Problem& p, double code) { return code / p.scale_o; }
// O clamped to what the format can hold: [-top/scale_o, top/scale_o] (NaN stays NaN). The judge's expected value.
double fp8_out_saturated(const Problem& p, double o);
// max |o| over the non-NaN values (0 when there are none).
double fp8_out_amax(const std::vector<double>& o);
// The epilogue: `values` (logical [B,Hq,Lq,Dv], any float dtype) stored into out.out as codes and its amax into
// out.amax_o. The identity's counterpart for problems without fp8_out is not needed: callers test p.fp8_out.
void store_fp8_out(const Problem& p, const Tensor& values, Outputs& out);

}  // namespace model
}  // namespace attncheck
