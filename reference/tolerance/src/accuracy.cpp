// The accuracy profile (accuracy.hpp): one pass over the compared elements, sums in double.
#include "attncheck/accuracy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace attncheck {
inline namespace tolerance {

int precision_bits(DType t) {
  switch (t) {
    case DType::f64: return 53;
    case DType::f32: return 24;
    case DType::f16: return 11;
    case DType::bf16: return 8;
    case DType::e4m3: return 4;
    case DType::e5m2: return 3;
    case DType::u8:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1: break;
  }
  throw std::invalid_argument(std::string("ulps: dtype ") + to_string(t) + " is not a floating type");
}

namespace {
int min_exponent(DType t) {  // exponent of the smallest normal
  switch (t) {
    case DType::f64: return -1022;
    case DType::f32:
    case DType::bf16: return -126;
    case DType::f16:
    case DType::e5m2: return -14;
    case DType::e4m3: return -6;
    case DType::u8:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1: break;
  }
  return 0;
}
}  // namespace

double ulp_of(DType t, double x) {
  const int p = precision_bits(t), emin = min_exponent(t);
  const int e = (x == 0 || !std::isfinite(x)) ? emin : std::max(std::ilogb(x), emin);
  return std::ldexp(1.0, e - (p - 1));
}

namespace {
// The derived figures of a profile from its counts and sums.
void finish(Accuracy& a) {
  a.present = a.n > 0;
  if (a.n_nonfinite > 0)
    a.rms_rel = std::numeric_limits<double>::infinity();
  else if (a.ref2 > 0)
    a.rms_rel = std::sqrt(a.err2 / a.ref2);
  else
    a.rms_rel = a.err2 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  a.bias_ulp = a.bias_mag_ulp = 0;
  if (a.ulp_sum > 0) a.bias_ulp = a.err_sum / a.ulp_sum, a.bias_mag_ulp = a.err_mag_sum / a.ulp_sum;
  a.effective_bits.reset();
  if (a.rms_rel > 0 && std::isfinite(a.rms_rel)) a.effective_bits = -std::log2(a.rms_rel);
}
}  // namespace

Accuracy profile_accuracy(const std::vector<double>& expected, const std::vector<double>& actual,
                          const std::vector<double>& tol, DType ulp_dtype, const std::vector<char>* judged,
                          size_t row_len) {
  Accuracy a;
  a.ulp_dtype = ulp_dtype;
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
    a.err2 += err * err, a.ref2 += e * e;
    a.err_sum += err, a.err_mag_sum += (e < 0 ? -err : err), a.ulp_sum += ulp;
    const double u = std::abs(err) / ulp;
    size_t bin = 0;
    while (bin < kUlpEdges.size() && u > kUlpEdges[bin]) ++bin;
    ++a.ulp_hist[bin];
  }
  finish(a);
  return a;
}

void merge_accuracy(Accuracy& total, const Accuracy& part) {
  if (!part.present) return;
  if (!total.present) {
    total = part;
    return;
  }
  if (total.ulp_dtype != part.ulp_dtype)
    throw std::invalid_argument(std::string("merge_accuracy: ulps of ") + to_string(total.ulp_dtype) + " and " +
                                to_string(part.ulp_dtype) + " do not add");
  total.n += part.n, total.n_nonfinite += part.n_nonfinite;
  total.share = std::max(total.share, part.share);
  for (size_t b = 0; b < total.ulp_hist.size(); ++b) total.ulp_hist[b] += part.ulp_hist[b];
  total.err2 += part.err2, total.ref2 += part.ref2, total.err_sum += part.err_sum;
  total.err_mag_sum += part.err_mag_sum, total.ulp_sum += part.ulp_sum;
  finish(total);
}

}  // namespace tolerance
}  // namespace attncheck
