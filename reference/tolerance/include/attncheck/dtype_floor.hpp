// The absolute floor of a dtype: its smallest positive (subnormal) value. Rounding into a dtype errs by at most
// half a unit relative to the value or half this step absolutely, whichever is larger, so every bound that charges
// a rounding charges both.
#pragma once

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace tolerance {

double denorm_min(DType t);

}  // namespace tolerance
}  // namespace attncheck
