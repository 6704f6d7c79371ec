// The fp8 output (fp8_out.hpp): rules, the store, the decoding.
#include "attncheck/fp8_out.hpp"

#include <algorithm>
#include <cmath>

#include "attncheck/kv_cache.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;

void validate_fp8_out(const Problem& p) {
  const Problem d;
  if (!p.fp8_out) {
    if (p.o_dtype != d.o_dtype || p.scale_o != d.scale_o)
      fail(std::string("o_dtype and scale_o need fp8_out (an fp8 output), got fp8_out=0, o_dtype=") +
           to_string(p.o_dtype) + ", scale_o=" + std::to_string(p.scale_o));
    return;
  }
  // The poison that shows an unwritten element is NaN; with fully_masked=nan that is a right answer, and e4m3 has
  // no infinity to poison with instead.
  if (p.fully_masked == FullyMasked::nan)
    fail(
        "fp8_out: fully_masked=nan is not modelled with an fp8 output (cuDNN writes 0 for such rows), got "
        "fully_masked=nan");
}

double fp8_out_saturated(const Problem& p, double o) {
  const double top = kv_code_max(p.o_dtype) / p.scale_o;
  return o > top ? top : o < -top ? -top : o;  // NaN stays NaN
}

double fp8_out_code(const Problem& p, double o) {
  const double top = kv_code_max(p.o_dtype), y = o * p.scale_o;
  return round_to(p.o_dtype, y > top ? top : y < -top ? -top : y);
}

double fp8_out_amax(const std::vector<double>& o) {
  double m = 0;
  for (double x : o)
    if (!std::isnan(x)) m = std::max(m, std::abs(x));
  return m;
}

void store_fp8_out(const Problem& p, const Tensor& values, Outputs& out) {
  std::vector<double> all;
  all.reserve(static_cast<size_t>(values.numel()));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) {
          const double o = values.at(b, h, i, d);
          out.out.put(b, h, i, d, fp8_out_code(p, o));
          all.push_back(o);
        }
  out.amax_o->set_offset(0, fp8_out_amax(all));
}

}  // namespace model
}  // namespace attncheck
