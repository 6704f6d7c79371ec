// The accuracy profile (accuracy.hpp): one pass over the compared elements, sums in double.
#include "attncheck/accuracy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace attncheck {

int precision_bits(DType t) {
  switch (t) {
    case DType::f64: return 53;
    case DType::f32: return 24;
    case DType::f16: return 11;
    case DType::bf16: return 8;
    case DType::e4m3: return 4;
    case DType::e5m2: return 3;
    case DType::u8:
    case DType::i8: break;
  }
  throw std::invalid_argument(std::string("ulps: dtype ") + to_string(t) + " is not a floating type");
}

namespace {
int min_exponent(DType t) {  // exponent of the smallest normal
  switch (t) {
    case DType::f64: return -1022;
    case DType::f32: case DType::bf16: return -126;
    case DType::f16: case DType::e5m2: return -14;
    case DType::e4m3: return -6;
    case DType::u8:
    case DType::i8: break;
  }
  return 0;
}
}  // namespace

double ulp_of(DType t, double x) {
  const int p = precision_bits(t), emin = min_exponent(t);
  const int e = (x == 0 || !std::isfinite(x)) ? emin : std::max(std::ilogb(x), emin);
  return std::ldexp(1.0, e - (p - 1));
}

Accuracy profile_accuracy(const std::vector<double>& expected, const std::vector<double>& actual,
                          const std::vector<double>& tol, DType ulp_dtype, const std::vector<char>* judged,
                          size_t row_len) {
  Accuracy a;
  a.ulp_dtype = ulp_dtype;
  double err2 = 0, ref2 = 0, err_sum = 0, err_mag_sum = 0, ulp_sum = 0;
  for (size_t n = 0; n < expected.size() && n < actual.size(); ++n) {
    if (judged && !(*judged)[n / row_len]) continue;
    const double e = expected[n], x = actual[n];
    if (!std::isfinite(e)) continue;  // matched in kind or not by the verdict; no size to measure
    ++a.n;
    if (!std::isfinite(x)) {
      ++a.n_nonfinite;
      ++a.ulp_hist.back();
      a.share = std::numeric_limits<double>::infinity();
      continue;
    }
    const double err = x - e, ulp = ulp_of(ulp_dtype, e), t = n < tol.size() ? tol[n] : 0.0;
    a.share = std::max(a.share, t > 0 ? std::abs(err) / t : err != 0 ? std::numeric_limits<double>::infinity() : 0.0);
    err2 += err * err, ref2 += e * e;
    err_sum += err, err_mag_sum += (e < 0 ? -err : err), ulp_sum += ulp;
    const double u = std::abs(err) / ulp;
    size_t bin = 0;
    while (bin < kUlpEdges.size() && u > kUlpEdges[bin]) ++bin;
    ++a.ulp_hist[bin];
  }
  a.present = a.n > 0;
  if (a.n_nonfinite > 0) a.rms_rel = std::numeric_limits<double>::infinity();
  else if (ref2 > 0) a.rms_rel = std::sqrt(err2 / ref2);
  else a.rms_rel = err2 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  if (ulp_sum > 0) a.bias_ulp = err_sum / ulp_sum, a.bias_mag_ulp = err_mag_sum / ulp_sum;
  if (a.rms_rel > 0 && std::isfinite(a.rms_rel)) a.effective_bits = -std::log2(a.rms_rel);
  return a;
}

}  // namespace attncheck
