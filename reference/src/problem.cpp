// Problem model: dtype conversions, strided tensors, validation with messages that name fields and values,
// and the Philox dropout generator. Depends on the standard library only.
#include "attncheck/problem.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace attncheck {

namespace {
[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

constexpr int64_t kMaxElements = int64_t{1} << 60;  // per tensor, and the bound on offsets and windows

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << ']';
  return o.str();
}
}  // namespace

// ---- dtypes ------------------------------------------------------------------------------------------------
const char* to_string(DType t) {
  switch (t) {
    case DType::f64: return "fp64";
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
  }
  return "?";
}

DType dtype_from_string(const std::string& s) {
  if (s == "fp64" || s == "f64" || s == "float64") return DType::f64;
  if (s == "fp32" || s == "f32" || s == "float32") return DType::f32;
  if (s == "fp16" || s == "f16" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "u8" || s == "bool") return DType::u8;
  fail("dtype: unknown value '" + s + "' (expected fp64, fp32, fp16, bf16)");
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f64: return std::ldexp(1.0, -53);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::u8: return 0.5;
  }
  return 0;
}

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // value = absx_float; half subnormal unit is 2^-24. Round absx_float / 2^-24 to nearest even.
    float a;
    std::memcpy(&a, &absx, 4);
    const float scaled = a * 16777216.0f;  // exact: multiplication by a power of two
    const float r = std::nearbyint(scaled);  // default rounding mode: to nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // Normal: rebias exponent from 127 to 15 and round the 23-bit mantissa to 10 bits, nearest even.
  uint32_t m = absx - (112u << 23);  // exponent - 112
  const uint32_t lsb = (m >> 13) & 1u;
  m += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | (m >> 13));
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(man), -24);
    uint32_t b;
    std::memcpy(&b, &out, 4);
    b |= sign;
    std::memcpy(&out, &b, 4);
    return out;
  }
  uint32_t b = (exp == 31) ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13));
  std::memcpy(&out, &b, 4);
  return out;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &b, 4);
  return out;
}

namespace {
// double -> float rounded to odd: when inexact, the neighbour with an odd last bit. fp32 carries more than two bits
// beyond fp16's and bf16's mantissas, so rounding this float to nearest-even once more equals rounding the double
// directly (no double rounding: 1 + 2^-11 + 2^-40 must become fp16 1 + 2^-10, not the tie 1 + 2^-11 -> 1).
float to_float_odd(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 1u) == 0) f = std::nextafter(f, static_cast<double>(f) < x ? INFINITY : -INFINITY);  // toward x
  return f;
}
}  // namespace

double round_to(DType t, double x) {
  switch (t) {
    case DType::f64: return x;
    case DType::f32: return static_cast<float>(x);
    case DType::f16: return half_bits_to_float(float_to_half_bits(to_float_odd(x)));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(to_float_odd(x)));
    case DType::u8: return x != 0 ? 1.0 : 0.0;
  }
  return x;
}

// ---- tensors -----------------------------------------------------------------------------------------------
Tensor::Tensor(DType t, std::vector<int64_t> s) : Tensor(t, std::move(s), std::vector<int>{}) {}

Tensor::Tensor(DType t, std::vector<int64_t> s, const std::vector<int>& order) : dtype(t), shape(std::move(s)) {
  int64_t bytes_needed = static_cast<int64_t>(dtype_size(t));
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) fail("tensor shape: negative extent " + shape_str(shape));
    // Overflow here would wrap to a small allocation that every later index runs past.
    if (__builtin_mul_overflow(bytes_needed, shape[i], &bytes_needed))
      fail("tensor shape: " + shape_str(shape) + " of " + to_string(t) + " needs more than 2^63 bytes");
  }
  std::vector<int> ord = order;
  if (ord.empty())
    for (size_t i = 0; i < shape.size(); ++i) ord.push_back(static_cast<int>(i));
  std::vector<bool> seen(shape.size(), false);  // a storage order must name every dim exactly once
  for (int d : ord)
    if (ord.size() != shape.size() || d < 0 || d >= static_cast<int>(shape.size()) || seen[static_cast<size_t>(d)])
      fail("tensor storage_order must be a permutation of 0.." + std::to_string(shape.size()) + "-1 for shape " +
           shape_str(shape) + ", got " + shape_str(std::vector<int64_t>(ord.begin(), ord.end())));
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
  }
  return 0;
}

void Tensor::set_offset(int64_t off, double x) {
  switch (dtype) {
    case DType::f64: data<double>()[off] = x; break;
    case DType::f32: data<float>()[off] = static_cast<float>(x); break;
    case DType::f16: data<uint16_t>()[off] = float_to_half_bits(to_float_odd(x)); break;
    case DType::bf16: data<uint16_t>()[off] = float_to_bf16_bits(to_float_odd(x)); break;
    case DType::u8: data<uint8_t>()[off] = x != 0 ? 1 : 0; break;
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

// ---- enums -------------------------------------------------------------------------------------------------
const char* to_string(Layout l) { return l == Layout::BHSD ? "BHSD" : "BSHD"; }
Layout layout_from_string(const std::string& s) {
  if (s == "BHSD" || s == "bhsd") return Layout::BHSD;
  if (s == "BSHD" || s == "bshd") return Layout::BSHD;
  fail("layout: unknown value '" + s + "' (expected BHSD or BSHD)");
}
const char* to_string(Alignment a) {
  switch (a) {
    case Alignment::top_left: return "top_left";
    case Alignment::bottom_right: return "bottom_right";
    case Alignment::explicit_: return "offset";
  }
  return "?";
}
Alignment alignment_from_string(const std::string& s) {
  if (s == "top_left" || s == "tl") return Alignment::top_left;
  if (s == "bottom_right" || s == "br") return Alignment::bottom_right;
  if (s == "offset" || s == "explicit") return Alignment::explicit_;
  fail("alignment: unknown value '" + s + "' (expected top_left, bottom_right, offset)");
}
const char* to_string(MaskFill f) { return f == MaskFill::neg_inf ? "neg_inf" : "finite"; }
MaskFill fill_from_string(const std::string& s) {
  if (s == "neg_inf" || s == "-inf") return MaskFill::neg_inf;
  if (s == "finite") return MaskFill::finite;
  fail("fill: unknown value '" + s + "' (expected neg_inf or finite)");
}
const char* to_string(FullyMasked p) {
  switch (p) {
    case FullyMasked::nan: return "nan";
    case FullyMasked::zero: return "zero";
    case FullyMasked::uniform: return "uniform";
  }
  return "?";
}
FullyMasked fully_masked_from_string(const std::string& s) {
  if (s == "nan") return FullyMasked::nan;
  if (s == "zero") return FullyMasked::zero;
  if (s == "uniform") return FullyMasked::uniform;
  fail("fully_masked: unknown value '" + s + "' (expected nan, zero, uniform)");
}

// ---- problem -----------------------------------------------------------------------------------------------
double Problem::effective_scale() const { return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(Dqk)); }

int64_t Problem::key_length(int64_t b) const {
  return key_lengths.empty() ? Lk : key_lengths[static_cast<size_t>(b)];
}

int64_t Problem::diagonal_offset(int64_t b) const {
  switch (alignment) {
    case Alignment::top_left: return 0;
    case Alignment::bottom_right: return key_length(b) - Lq;
    case Alignment::explicit_:
      return causal_offsets.empty() ? causal_offset : causal_offsets[static_cast<size_t>(b)];
  }
  return 0;
}

std::string Problem::name() const {
  std::ostringstream o;
  o << to_string(dtype) << "/B" << B << "-Hq" << Hq << "-Hkv" << Hkv << "-Lq" << Lq << "-Lk" << Lk;
  if (Dqk == Dv)
    o << "-D" << Dqk;
  else
    o << "-Dqk" << Dqk << "-Dv" << Dv;
  std::string feats;
  auto add = [&](const std::string& f) { feats += (feats.empty() ? "" : "-") + f; };
  if (layout == Layout::BSHD) add("bshd");
  if (causal) {
    if (alignment == Alignment::top_left) add("causal-tl");
    if (alignment == Alignment::bottom_right) add("causal-br");
    if (alignment == Alignment::explicit_)
      add("causal-off" + (causal_offsets.empty() ? std::to_string(causal_offset) : std::string("pb")));
  }
  if (!key_lengths.empty()) add("pad");
  if (mask_shape) add("mask");
  if (bias_shape) add("bias");
  if (has_window()) add("win" + std::to_string(window_left) + "_" + std::to_string(window_right));
  if (softcap > 0) add("softcap");
  if (dropout_p > 0) add("drop");
  if (fill == MaskFill::finite) add("finite");
  if (fully_masked != FullyMasked::zero) add(std::string("fm-") + to_string(fully_masked));
  if (scale) add("scaled");
  o << '/' << (feats.empty() ? std::string("plain") : feats);
  return o.str();
}

void validate(const Problem& p) {
  auto positive = [](const char* field, int64_t v) {
    if (v < 1) fail(std::string(field) + " must be >= 1, got " + std::to_string(v));
  };
  positive("B", p.B);
  positive("Hq", p.Hq);
  positive("Hkv", p.Hkv);
  positive("Lq", p.Lq);
  positive("Lk", p.Lk);
  positive("Dqk", p.Dqk);
  positive("Dv", p.Dv);
  if (p.Hq % p.Hkv != 0)
    fail("Hq must be a multiple of Hkv (MHA/GQA/MQA), got Hq=" + std::to_string(p.Hq) +
         " Hkv=" + std::to_string(p.Hkv));
  // Every tensor of the problem must be indexable in int64 with room to spare: element counts of q, k, v, out and
  // of [B,Hq,Lq,Lk] (weights, masks, keep) at most 2^60, so byte sizes and index arithmetic cannot overflow.
  auto count = [&](const char* what, std::initializer_list<std::pair<const char*, int64_t>> dims) {
    int64_t n = 1;
    std::string expr, vals;
    bool over = false;
    for (const auto& [name, v] : dims) {
      if (!expr.empty()) expr += '*', vals += ' ';
      expr += name;
      vals.append(name).append("=").append(std::to_string(v));
      over = over || __builtin_mul_overflow(n, v, &n) || n > kMaxElements;
    }
    if (over)
      fail(std::string(what) + " elements " + expr + " exceed 2^60 (" + vals + "): too large to index");
  };
  count("q", {{"B", p.B}, {"Hq", p.Hq}, {"Lq", p.Lq}, {"Dqk", p.Dqk}});
  count("k", {{"B", p.B}, {"Hkv", p.Hkv}, {"Lk", p.Lk}, {"Dqk", p.Dqk}});
  count("v", {{"B", p.B}, {"Hkv", p.Hkv}, {"Lk", p.Lk}, {"Dv", p.Dv}});
  count("out", {{"B", p.B}, {"Hq", p.Hq}, {"Lq", p.Lq}, {"Dv", p.Dv}});
  count("weights", {{"B", p.B}, {"Hq", p.Hq}, {"Lq", p.Lq}, {"Lk", p.Lk}});
  if (p.dtype == DType::u8) fail("dtype must be a floating type (fp64, fp32, fp16, bf16), got u8");
  if (p.scale && !std::isfinite(*p.scale)) fail("scale must be finite, got " + std::to_string(*p.scale));
  if (!p.key_lengths.empty()) {
    if (static_cast<int64_t>(p.key_lengths.size()) != p.B)
      fail("key_lengths must have B=" + std::to_string(p.B) + " entries, got " +
           std::to_string(p.key_lengths.size()));
    for (size_t b = 0; b < p.key_lengths.size(); ++b)
      if (p.key_lengths[b] < 0 || p.key_lengths[b] > p.Lk)
        fail("key_lengths[" + std::to_string(b) + "] must be in [0, Lk=" + std::to_string(p.Lk) + "], got " +
             std::to_string(p.key_lengths[b]));
  }
  if (!p.causal_offsets.empty()) {
    if (p.alignment != Alignment::explicit_)
      fail(std::string("causal_offsets are only meaningful with alignment=offset, got alignment=") +
           to_string(p.alignment));
    if (static_cast<int64_t>(p.causal_offsets.size()) != p.B)
      fail("causal_offsets must have B=" + std::to_string(p.B) + " entries, got " +
           std::to_string(p.causal_offsets.size()));
  }
  // Offsets and windows beyond 2^60 mean the same as 2^60 (sequences are shorter), but i + offset +- window would
  // overflow int64 in every implementation's mask test and silently mask the wrong keys.
  auto bounded = [](const std::string& field, int64_t v) {
    if (v > kMaxElements || v < -kMaxElements)
      fail(field + " must be within +-2^60 (" + std::to_string(kMaxElements) + "), got " + std::to_string(v));
  };
  bounded("causal_offset", p.causal_offset);
  for (size_t b = 0; b < p.causal_offsets.size(); ++b)
    bounded("causal_offsets[" + std::to_string(b) + "]", p.causal_offsets[b]);
  bounded("window_left", p.window_left);
  bounded("window_right", p.window_right);
  auto check_bcast = [&](const char* field, const std::array<int64_t, 4>& s) {
    const int64_t full[4] = {p.B, p.Hq, p.Lq, p.Lk};
    const char* dims[4] = {"B", "Hq", "Lq", "Lk"};
    for (int d = 0; d < 4; ++d)
      if (s[d] != 1 && s[d] != full[d])
        fail(std::string(field) + " shape " + shape_str({s[0], s[1], s[2], s[3]}) +
             " is not broadcastable to [B,Hq,Lq,Lk]=" + shape_str({p.B, p.Hq, p.Lq, p.Lk}) + ": dim " +
             std::to_string(d) + " (" + dims[d] + ") is " + std::to_string(s[d]) + ", expected 1 or " +
             std::to_string(full[d]));
  };
  if (p.mask_shape) check_bcast("mask", *p.mask_shape);
  if (p.bias_shape) {
    check_bcast("bias", *p.bias_shape);
    if (p.bias_dtype == DType::u8) fail("bias_dtype must be a floating type, got u8");
  }
  if (p.window_left < -1) fail("window_left must be >= 0 or -1 (unbounded), got " + std::to_string(p.window_left));
  if (p.window_right < -1)
    fail("window_right must be >= 0 or -1 (unbounded), got " + std::to_string(p.window_right));
  if (!(p.softcap >= 0) || !std::isfinite(p.softcap))
    fail("softcap must be a finite value >= 0 (0 = off), got " + std::to_string(p.softcap));
  if (p.fill == MaskFill::finite && !std::isfinite(p.fill_value))
    fail("fill_value must be finite with fill=finite, got " + std::to_string(p.fill_value));
  if (!(p.dropout_p >= 0.0 && p.dropout_p < 1.0))
    fail("dropout_p must be in [0, 1), got " + std::to_string(p.dropout_p));
}

std::vector<int> storage_order(Layout l) {
  return l == Layout::BHSD ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 2, 1, 3};
}

Tensor make_qkv(const Problem& p, int which) {
  const int64_t H = which == 0 ? p.Hq : p.Hkv;
  const int64_t L = which == 0 ? p.Lq : p.Lk;
  const int64_t D = which == 2 ? p.Dv : p.Dqk;
  return Tensor(p.dtype, {p.B, H, L, D}, storage_order(p.layout));
}

Outputs make_outputs(const Problem& p) {
  Outputs o;
  o.out = Tensor(p.dtype, {p.B, p.Hq, p.Lq, p.Dv}, storage_order(p.layout));
  if (p.want_lse) o.lse = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq});
  if (p.want_weights) o.weights = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq, p.Lk});
  return o;
}

void validate(const Problem& p, const Inputs& in) {
  validate(p);
  auto check = [&](const char* field, const Tensor& t, DType dt, const std::vector<int64_t>& shape) {
    if (t.dtype != dt)
      fail(std::string(field) + " dtype must be " + to_string(dt) + ", got " + to_string(t.dtype));
    if (t.shape != shape)
      fail(std::string(field) + " shape must be " + shape_str(shape) + ", got " + shape_str(t.shape));
    if (t.bytes.size() != static_cast<size_t>(t.numel()) * dtype_size(t.dtype))
      fail(std::string(field) + " holds " + std::to_string(t.bytes.size()) + " bytes, expected " +
           std::to_string(t.numel() * static_cast<int64_t>(dtype_size(t.dtype))));
    // Every element must lie inside the bytes: a hand-built tensor with wrong strides would read out of bounds.
    if (t.strides.size() != t.shape.size())
      fail(std::string(field) + " strides " + shape_str(t.strides) + " must have one entry per dim of shape " +
           shape_str(t.shape));
    int64_t last = 0;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.strides[d] < 0)
        fail(std::string(field) + " strides " + shape_str(t.strides) + " must be >= 0, dim " + std::to_string(d) +
             " is " + std::to_string(t.strides[d]));
      if (t.shape[d] > 0) last += (t.shape[d] - 1) * t.strides[d];
    }
    if (t.numel() > 0 && last >= t.numel())
      fail(std::string(field) + " strides " + shape_str(t.strides) + " reach element " + std::to_string(last) +
           " of shape " + shape_str(t.shape) + ", which holds only " + std::to_string(t.numel()));
  };
  check("q", in.q, p.dtype, {p.B, p.Hq, p.Lq, p.Dqk});
  check("k", in.k, p.dtype, {p.B, p.Hkv, p.Lk, p.Dqk});
  check("v", in.v, p.dtype, {p.B, p.Hkv, p.Lk, p.Dv});
  if (p.mask_shape.has_value() != in.mask.has_value())
    fail(std::string("mask: problem ") + (p.mask_shape ? "declares" : "does not declare") +
         " a boolean mask but the inputs " + (in.mask ? "have one" : "have none"));
  if (in.mask) {
    const auto& s = *p.mask_shape;
    check("mask", *in.mask, DType::u8, {s[0], s[1], s[2], s[3]});
  }
  if (p.bias_shape.has_value() != in.bias.has_value())
    fail(std::string("bias: problem ") + (p.bias_shape ? "declares" : "does not declare") +
         " a bias but the inputs " + (in.bias ? "have one" : "have none"));
  if (in.bias) {
    const auto& s = *p.bias_shape;
    check("bias", *in.bias, p.bias_dtype, {s[0], s[1], s[2], s[3]});
  }
  if ((p.dropout_p > 0) != in.keep.has_value())
    fail("keep: dropout_p=" + std::to_string(p.dropout_p) + " but the inputs " +
         (in.keep ? "have a keep-mask" : "have no keep-mask"));
  if (in.keep) check("keep", *in.keep, DType::u8, {p.B, p.Hq, p.Lq, p.Lk});
}

// ---- dropout -----------------------------------------------------------------------------------------------
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(M0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(M1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

double dropout_uniform(uint64_t seed, int64_t b, int64_t h, int64_t i, int64_t j) {
  // counter = (i, j, h, b) per element; key = seed. One Philox call per element, first word used.
  const auto r = philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(j), static_cast<uint32_t>(h),
                                static_cast<uint32_t>(b)},
                               {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return r[0] * (1.0 / 4294967296.0);
}

Tensor make_keep_mask(const Problem& p) {
  Tensor keep(DType::u8, {p.B, p.Hq, p.Lq, p.Lk});
  uint8_t* k = keep.data<uint8_t>();
  int64_t n = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t j = 0; j < p.Lk; ++j) k[n++] = dropout_uniform(p.dropout_seed, b, h, i, j) >= p.dropout_p;
  return keep;
}

}  // namespace attncheck
