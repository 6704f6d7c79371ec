// Strided host tensors that own their bytes: construction in a storage order, element access widened to double.
#include <algorithm>
#include <cmath>

#include "attncheck/problem.hpp"
#include "detail.hpp"

namespace attncheck {
inline namespace model {

using detail::fail;
using detail::kMaxElements;

// ---- tensors -----------------------------------------------------------------------------------------------
Tensor::Tensor(DType t, std::vector<int64_t> s) : Tensor(t, std::move(s), std::vector<int>{}) {}

Tensor::Tensor(DType t, std::vector<int64_t> s, const std::vector<int>& order) : dtype(t), shape(std::move(s)) {
  int64_t bytes_needed = static_cast<int64_t>(dtype_size(t));
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) fail("tensor shape: negative extent " + shape_string(shape));
    // Overflow here would wrap to a small allocation that every later index runs past.
    if (__builtin_mul_overflow(bytes_needed, shape[i], &bytes_needed))
      fail("tensor shape: " + shape_string(shape) + " of " + to_string(t) + " needs more than 2^63 bytes");
  }
  std::vector<int> ord = order;
  if (ord.empty())
    for (size_t i = 0; i < shape.size(); ++i) ord.push_back(static_cast<int>(i));
  std::vector<bool> seen(shape.size(), false);  // a storage order must name every dim exactly once
  for (int d : ord)
    if (ord.size() != shape.size() || d < 0 || d >= static_cast<int>(shape.size()) || seen[static_cast<size_t>(d)])
      fail("tensor storage_order must be a permutation of 0.." + std::to_string(shape.size()) + "-1 for shape " +
           shape_string(shape) + ", got " + shape_string(std::vector<int64_t>(ord.begin(), ord.end())));
    else
      seen[static_cast<size_t>(d)] = true;
  strides.assign(shape.size(), 0);
  int64_t stride = 1;
  for (size_t k = ord.size(); k-- > 0;) {
    strides[static_cast<size_t>(ord[k])] = stride;
    stride *= shape[static_cast<size_t>(ord[k])];
  }
  bytes.assign(static_cast<size_t>(numel()) * dtype_size(t), 0);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t Tensor::offset(const int64_t* idx) const {
  int64_t off = 0;
  for (size_t i = 0; i < shape.size(); ++i) off += idx[i] * strides[i];
  return off;
}

double Tensor::get_offset(int64_t off) const {
  switch (dtype) {
    case DType::f64: return data<double>()[off];
    case DType::f32: return data<float>()[off];
    case DType::f16: return half_bits_to_float(data<uint16_t>()[off]);
    case DType::bf16: return bf16_bits_to_float(data<uint16_t>()[off]);
    case DType::u8: return data<uint8_t>()[off];
    case DType::e4m3:
    case DType::e5m2: return fp8_bits_to_double(data<uint8_t>()[off], dtype);
    case DType::i8: return data<int8_t>()[off];
    case DType::q4_0:
    case DType::q4_1: return data<uint8_t>()[off];
  }
  return 0;
}

void Tensor::set_offset(int64_t off, double x) {
  switch (dtype) {
    case DType::f64: data<double>()[off] = x; break;
    case DType::f32: data<float>()[off] = static_cast<float>(x); break;
    case DType::f16: data<uint16_t>()[off] = float_to_half_bits(detail::to_float_odd(x)); break;
    case DType::bf16: data<uint16_t>()[off] = float_to_bf16_bits(detail::to_float_odd(x)); break;
    case DType::u8: data<uint8_t>()[off] = x != 0 ? 1 : 0; break;
    case DType::e4m3:
    case DType::e5m2: data<uint8_t>()[off] = double_to_fp8_bits(x, dtype); break;
    case DType::i8: data<int8_t>()[off] = detail::to_int8(x); break;
    case DType::q4_0:
    case DType::q4_1: data<uint8_t>()[off] = detail::to_byte(x); break;
  }
}

double Tensor::get(const int64_t* idx) const { return get_offset(offset(idx)); }
void Tensor::set(const int64_t* idx, double x) { set_offset(offset(idx), x); }

std::vector<double> Tensor::to_double() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t n = 0; n < out.size(); ++n) {
    out[n] = get(idx.data());
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

void Tensor::fill(double x) {
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) set_offset(i, x);  // storage is dense: offsets 0..n-1 are every element
}

std::string shape_string(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) o += ',';
    o += std::to_string(s[i]);  // appended, not "," + to_string(): gcc 12's false -Wrestrict (GCC PR 105329)
  }
  return o + "]";
}

}  // namespace model
}  // namespace attncheck
