// Shared machinery of the two CPU implementations (`cpu` dense, `cpu-flash` online softmax): strided loads and
// stores of any dtype in the compute type T (double for fp64, float otherwise), the score pipeline of the
// reference (scale -> softcap -> +bias -> mask -> fill), the fully-masked policies and a deterministic task pool.
#pragma once

#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE  // our own threads; Eigen's OpenMP (if any) would make the thread count ambiguous
#endif
#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

#include "attncheck/declarations.hpp"
#include "attncheck/fp8_out.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/kv_cache.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/rope.hpp"
#include "simd.hpp"

namespace attncheck::cpu {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ArrMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// Threads the CPU implementations use: ATTNCHECK_THREADS, else the hardware concurrency (as the reference).
int cpu_threads();

// Run fn(task, worker) for task in [0, n) on up to `threads` std::threads. Tasks are claimed from an atomic
// counter; each task's result depends only on the task, so the output is bitwise the same for any thread count.
void parallel_tasks(int64_t n, int threads, const std::function<void(int64_t, int)>& fn);

// ---- loads and stores -------------------------------------------------------------------------------------
// Rows [r0, r1) of head h of batch b of a logical [B, H, L, D] tensor (any layout, any float dtype) into a
// contiguous row-major T buffer of (r1 - r0) x D; with cols > 0, each row's first cols values only.
template <class T>
void load_rows(const Tensor& t, int64_t b, int64_t h, int64_t r0, int64_t r1, T* dst, int64_t cols = 0) {
  const int64_t D = cols > 0 ? cols : t.shape[3], sr = t.strides[2], sd = t.strides[3];
  const int64_t base = b * t.strides[0] + h * t.strides[1];
  auto copy = [&](const auto* src, auto conv) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto* row = src + base + r * sr;
      T* o = dst + (r - r0) * D;
      if (sd == 1)  // both layouts: the head dim is innermost, so this loop vectorises
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<T>(conv(row[d]));
      else
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<T>(conv(row[d * sd]));
    }
  };
  if constexpr (std::is_same_v<T, float>) {  // 16-bit rows into float: vectorised widening (F16C, shifts)
    if (sd == 1 && (t.dtype == DType::f16 || t.dtype == DType::bf16)) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* row = t.data<uint16_t>() + base + r * sr;
        if (t.dtype == DType::f16)
          simd::widen_f16(row, dst + (r - r0) * D, D);
        else
          simd::widen_bf16(row, dst + (r - r0) * D, D);
      }
      return;
    }
  }
  switch (t.dtype) {
    case DType::f64: copy(t.data<double>(), [](double x) { return x; }); break;
    case DType::f32: copy(t.data<float>(), [](float x) { return x; }); break;
    case DType::f16: copy(t.data<uint16_t>(), [](uint16_t x) { return half_bits_to_float(x); }); break;
    case DType::bf16: copy(t.data<uint16_t>(), [](uint16_t x) { return bf16_bits_to_float(x); }); break;
    case DType::u8:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1:
      throw std::invalid_argument(
          "cpu: q/k/v dtype u8/int8/q4 is not a floating type (a quantized cache is decoded in load_kv_rows)");
    case DType::e4m3:
    case DType::e5m2: throw std::invalid_argument("cpu: fp8 inputs are decoded before the kernel (run_cpu)");
  }
}

// The tensor holding k (which = 1) or v (2) rows: absorbed MLA reads V as the first Dv columns of the latent cache k
// (a view: the same memory as the keys, which in.v only duplicates).
inline const Tensor& kv_tensor(const Problem& p, const Inputs& in, int which) {
  return which == 1 || p.mla ? in.k : in.v;
}

// Rows [r0, r0 + n) of a quantized cache's k (which = 1) or v (2), head h of batch b, as their codes in place and
// the scales of those rows as floats, for the kernels that dequantise in registers (simd::Codes8): each value
// fl32(code * scale), one rounding of an exact product (a code has at most 8 significant bits, a scale 24), so the
// same bits as the reference's dequantize_kv rounded to float.
struct CodesView {
  const uint8_t* codes = nullptr;  // row 0's codes, rows ld bytes apart
  int64_t ld = 0, D = 0;
  simd::Codes8 c;
  std::vector<float> scales;  // row r's groups at r * c.groups
  std::vector<int32_t> gidx;

  const float* row_scales(int64_t r) const { return scales.data() + r * c.groups; }
  // False (nothing set) unless the cache is quantized, the codes' inner stride is 1 and the scales are exact in float.
  bool view(const Problem& p, const Inputs& in, int which, int64_t b, int64_t h, int64_t r0, int64_t n) {
    if (!p.kv_quantized() || is_q4(p.kv_dtype)) return false;  // 4-bit codes: load_q4_rows
    const Tensor& t = which == 1 ? in.k : in.v;
    const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
    if (t.strides[3] != 1 || (s.dtype != DType::f32 && s.dtype != DType::f16 && s.dtype != DType::bf16)) return false;
    D = t.shape[3];
    c.groups = s.shape[3], c.group = c.groups == 1 ? D : p.kv_block;
    c.lut = fp8_values(t.dtype);
    // The scales of the rows, read from s directly (kv_scale_at, per element, costs more than the GEMM here).
    const int64_t base = broadcast_offset(s, b, h, r0, 0), sr = s.shape[2] == 1 ? 0 : s.strides[2];
    const int64_t sg = s.strides[3];
    scales.resize(static_cast<size_t>(n * c.groups));
    const uint16_t* s16 = s.dtype == DType::f32 ? nullptr : s.data<uint16_t>();
    if (s16 && (c.groups == 1 || sg == 1) && sr == c.groups) {  // the rows' scales contiguous: widened at once
      if (s.dtype == DType::f16)
        simd::widen_f16(s16 + base, scales.data(), n * c.groups);
      else
        simd::widen_bf16(s16 + base, scales.data(), n * c.groups);
    } else {
      for (int64_t r = 0; r < n; ++r)
        for (int64_t g = 0; g < c.groups; ++g) {
          const int64_t at = base + r * sr + g * sg;
          scales[static_cast<size_t>(r * c.groups + g)] = !s16                    ? s.data<float>()[at]
                                                          : s.dtype == DType::f16 ? half_bits_to_float(s16[at])
                                                                                  : bf16_bits_to_float(s16[at]);
        }
    }
    c.gidx = nullptr;
    if (c.groups > 1 && c.group % simd::float_lanes() != 0) {  // a scale per lane, gathered
      gidx.resize(static_cast<size_t>(D));
      for (int64_t e = 0; e < D; ++e) gidx[static_cast<size_t>(e)] = static_cast<int32_t>(e / c.group);
      c.gidx = gidx.data();
    }
    codes = t.data<uint8_t>() + b * t.strides[0] + h * t.strides[1] + r0 * t.strides[2], ld = t.strides[2];
    return true;
  }
  // Whether every value of the n rows is finite: no fp8 NaN / inf code (e4m3 S.1111.111, e5m2 S.11111.xx) and no
  // product past the largest float.
  bool finite(const Problem& p, int64_t n) const {
    const float smax = scales.empty() ? 0.0f : *std::max_element(scales.begin(), scales.end());
    if (static_cast<double>(smax) * kv_code_max(p.kv_dtype) > std::numeric_limits<float>::max()) return false;
    const uint8_t mask = p.kv_dtype == DType::e4m3 ? 0x7f : p.kv_dtype == DType::e5m2 ? 0x7c : 0;
    if (mask == 0) return true;
    bool bad = false;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t d = 0; d < D; ++d) bad |= (codes[r * ld + d] & mask) == mask;
    return !bad;
  }
  // The value of each fp8 code as a float (exact), nullptr for int8.
  static const float* fp8_values(DType codes) {
    static const std::array<std::array<float, 256>, 2> lut = [] {
      std::array<std::array<float, 256>, 2> v{};
      for (int x = 0; x < 256; ++x) {
        v[0][size_t(x)] = static_cast<float>(fp8_bits_to_double(uint8_t(x), DType::e4m3));
        v[1][size_t(x)] = static_cast<float>(fp8_bits_to_double(uint8_t(x), DType::e5m2));
      }
      return v;
    }();
    return codes == DType::e4m3 ? lut[0].data() : codes == DType::e5m2 ? lut[1].data() : nullptr;
  }
};

// Rows [r0, r1) of a 4-bit cache's k (which = 1) or v (2), head h of batch b, into dst (D values each), unpacked
// block by block as loaded (kv_cache.hpp's nibble order: a block's byte i holds element i low, i + 16 high):
// d (q - 8) or d q + m in double, rounded once to T, the same bits as the reference's dequantize_kv rounded to T.
template <class T>
void load_q4_rows(const Problem& p, const Inputs& in, int which, int64_t b, int64_t h, int64_t r0, int64_t r1, T* dst) {
  const Tensor& t = which == 1 ? in.k : in.v;
  const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
  const Tensor* mins = p.kv_dtype == DType::q4_1 ? &*(which == 1 ? in.k_min : in.v_min) : nullptr;
  const int64_t D = 2 * t.shape[3], sr = t.strides[2], sd = t.strides[3], base = b * t.strides[0] + h * t.strides[1];
  const double offset = p.kv_dtype == DType::q4_0 ? -8.0 : 0.0;
  constexpr int64_t half = kQ4Block / 2;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = t.data<uint8_t>() + base + r * sr;
    T* o = dst + (r - r0) * D;
    for (int64_t e0 = 0; e0 < D; e0 += kQ4Block) {
      const double d = kv_scale_at(p, s, b, h, r, e0), m = mins ? kv_scale_at(p, *mins, b, h, r, e0) : 0.0;
      const uint8_t* bytes = row + q4_byte(e0) * sd;
      for (int64_t i = 0; i < half; ++i) {
        const uint8_t x = bytes[i * sd];
        o[e0 + i] = static_cast<T>((q4_nibble(x, false) + offset) * d + m);
        o[e0 + half + i] = static_cast<T>((q4_nibble(x, true) + offset) * d + m);
      }
    }
  }
}

// Rows [r0, r1) of k (which = 1) or v (2) of head h of batch b, as load_rows gives them. A quantized KV cache's
// codes are decoded here, a chunk of rows at a time (never a decoded copy of the cache): each code * its scale
// computed exactly and rounded once to T, the same bits as the reference's dequantize_kv rounded to T (float:
// vectorised, CodesView).
template <class T>
void load_kv_rows(const Problem& p, const Inputs& in, int which, int64_t b, int64_t h, int64_t r0, int64_t r1, T* dst) {
  const Tensor& t = kv_tensor(p, in, which);
  if (!p.kv_quantized()) return load_rows(t, b, h, r0, r1, dst, which == 1 ? p.Dqk : p.Dv);
  if (is_q4(p.kv_dtype)) return load_q4_rows(p, in, which, b, h, r0, r1, dst);
  if constexpr (std::is_same_v<T, float>) {
    thread_local CodesView v;
    if (v.view(p, in, which, b, h, r0, r1 - r0))
      return simd::dequantize_codes(v.c, v.codes, v.ld, v.scales.data(), r1 - r0, v.D, dst);
  }
  const Tensor& s = which == 1 ? *in.k_scale : *in.v_scale;
  static const std::array<std::array<double, 256>, 2> fp8 = [] {  // every e4m3 and e5m2 code, decoded once
    std::array<std::array<double, 256>, 2> c{};
    for (int x = 0; x < 256; ++x)
      c[0][size_t(x)] = fp8_bits_to_double(uint8_t(x), DType::e4m3),
      c[1][size_t(x)] = fp8_bits_to_double(uint8_t(x), DType::e5m2);
    return c;
  }();
  const double* lut = t.dtype == DType::e4m3 ? fp8[0].data() : t.dtype == DType::e5m2 ? fp8[1].data() : nullptr;
  const int64_t D = t.shape[3], sr = t.strides[2], sd = t.strides[3], base = b * t.strides[0] + h * t.strides[1];
  const int64_t groups = s.shape[3], G = groups == 1 ? D : p.kv_block;
  std::vector<double> scale(static_cast<size_t>(groups));
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < groups; ++g) scale[size_t(g)] = kv_scale_at(p, s, b, h, r, g * G);
    const uint8_t* row = t.data<uint8_t>() + base + r * sr;
    T* o = dst + (r - r0) * D;
    for (int64_t d = 0; d < D; ++d) {
      const uint8_t c = row[d * sd];
      const double code = lut ? lut[c] : static_cast<double>(static_cast<int8_t>(c));
      o[d] = static_cast<T>(code * scale[size_t(d / G)]);
    }
  }
}

// Rotary embedding fused into a load (rope.hpp): rows [r0, r1) just loaded into `rows` (D each, compute type) are
// query rows (query = true) or keys of batch b; each is rotated at its position in fp64 and rounded once to T, as a
// kernel rotates a tile in registers after reading it. Nothing happens without RoPE.
template <class T>
void rotate_rows(const RopeStage& rope, bool query, int64_t b, int64_t r0, int64_t r1, int64_t D, T* rows) {
  if (!rope.on()) return;
  std::vector<double> x(static_cast<size_t>(D));
  for (int64_t r = r0; r < r1; ++r) {
    T* row = rows + (r - r0) * D;
    std::copy(row, row + D, x.begin());
    if (query)
      rope.query(b, r, x.data());
    else
      rope.key(b, r, x.data());
    for (int64_t d = 0; d < D; ++d) row[d] = static_cast<T>(x[static_cast<size_t>(d)]);
  }
}

// One row of D values (compute type) into row i of head h of batch b of `t`, rounded once to t's dtype.
template <class T>
void store_row(Tensor& t, int64_t b, int64_t h, int64_t i, const T* src) {
  const int64_t D = t.shape[3], sd = t.strides[3];
  const int64_t base = b * t.strides[0] + h * t.strides[1] + i * t.strides[2];
  switch (t.dtype) {
    case DType::f64:
      for (int64_t d = 0; d < D; ++d) t.data<double>()[base + d * sd] = static_cast<double>(src[d]);
      break;
    case DType::f32:
      for (int64_t d = 0; d < D; ++d) t.data<float>()[base + d * sd] = static_cast<float>(src[d]);
      break;
    case DType::f16:
      for (int64_t d = 0; d < D; ++d)
        t.data<uint16_t>()[base + d * sd] = float_to_half_bits(static_cast<float>(src[d]));
      break;
    case DType::bf16:
      if constexpr (std::is_same_v<T, float>)
        if (sd == 1) return simd::narrow_bf16(src, t.data<uint16_t>() + base, D);  // vectorised, same bits
      for (int64_t d = 0; d < D; ++d)
        t.data<uint16_t>()[base + d * sd] = float_to_bf16_bits(static_cast<float>(src[d]));
      break;
    case DType::u8:
    case DType::i8:
    case DType::q4_0:
    case DType::q4_1:
    case DType::e4m3:
    case DType::e5m2:
      throw std::invalid_argument(std::string("cpu: out dtype ") + to_string(t.dtype) + " not produced");
  }
}

// ---- exp with exact zeros ---------------------------------------------------------------------------------
// A plain vectorised exp would give exp(-inf) a tiny nonzero value (Eigen's clamps its argument: ~3e-39), so a
// masked key would leak weight (and NaN from a poisoned value). Results below the smallest normal number
// (arguments below about -87.3 in float, -708.4 in double) are exactly 0, which is also what the double reference
// gives wherever its weight is exactly 0 (masked, or fill - max < -745); in between the reference's weights are
// below the tolerance model's absolute floor.
template <class T>
inline T exp0(T x) {
  const T e = std::exp(x);
  return e < std::numeric_limits<T>::min() ? T(0) : e;
}
// dst[j] = exp0(src[j] - m) for j < n (dst may alias src); returns the sum (fixed order). SIMD, see simd.hpp.
template <class T>
inline T exp_shifted(const T* src, T* dst, int64_t n, T m) {
  return n <= 0 ? T(0) : simd::exp_shifted<T>(src, dst, n, m);
}
// max(m, s[0..n)), skipping NaN like std::max(m, x) does in the reference. SIMD: a scalar `?:` chain would be one
// dependent compare per element, as slow as the GEMM it follows.
template <class T>
inline T row_max(const T* s, int64_t n, T m) {
  return n <= 0 ? m : simd::row_max<T>(s, n, m);
}

// ---- the score pipeline of one query row --------------------------------------------------------------------
// Keys in [lo, hi) pass the causal, window and key-padding masks (all relative to diagonal_offset(b)).
struct Span {
  int64_t lo = 0, hi = 0;
};

template <class T>
class Scorer {
 public:
  Scorer(const Problem& p, const Inputs& in)
      : p_(p),
        in_(in),
        scale_(static_cast<T>(p.effective_scale())),
        softcap_(static_cast<T>(p.softcap)),
        fill_(p.fill == MaskFill::finite ? static_cast<T>(p.fill_value) : -std::numeric_limits<T>::infinity()),
        finite_fill_(p.fill == MaskFill::finite),
        mods_(p) {}

  T fill() const { return fill_; }
  bool finite_fill() const { return finite_fill_; }
  // Raw scores at the stages before masking (ScoresOut::scaled / capped), from raw dot products, with the same
  // operations as process().
  void staged(const T* dot, T* dst, int64_t n, ScoresOut stage) const {
    for (int64_t j = 0; j < n; ++j) {
      const T v = dot[j] * scale_;
      dst[j] = stage == ScoresOut::capped && softcap_ > 0 ? softcap_ * std::tanh(v / softcap_) : v;
    }
  }

  // The logit stage's derivative d logit / d (scale·dot) of keys from raw dot products, into chain (left as it is
  // without a logit stage): 1 - t·t from the recomputed tanh, as FlashAttention's backward forms it.
  void logit_chain(const T* raw, int64_t n, T* chain) const {
    if (softcap_ > 0)
      for (int64_t j = 0; j < n; ++j) {
        const T t = std::tanh(scale_ * raw[j] / softcap_);
        chain[j] = T(1) - t * t;
      }
  }

  // d (score modifications) / d score of keys [j0, j0 + n) of row (b, h, i) from raw dot products (as process()
  // forms the score they modify), in fp64, into dmod; 1 outside `sp`, on hidden keys and without score
  // modifications (the backward's chain rule, mods.hpp).
  void mod_derivatives(int64_t b, int64_t h, int64_t i, int64_t j0, const T* raw, int64_t n, Span sp, T* dmod) const {
    std::fill(dmod, dmod + n, T(1));
    if (!mods_.has_score()) return;
    const int64_t a = std::clamp<int64_t>(sp.lo - j0, 0, n), e = std::clamp<int64_t>(sp.hi - j0, 0, n);
    if (a >= e) return;
    std::vector<T> v(raw + a, raw + e);
    for (T& x : v) x = softcap_ > 0 ? softcap_ * std::tanh(x * scale_ / softcap_) : x * scale_;
    if (in_.bias) add_bias(b, h, i, j0 + a, v.data(), e - a);
    const int64_t pos = i + p_.diagonal_offset(b);
    for (int64_t j = a; j < e; ++j) {
      const ModAt at{b, h, i, pos, j0 + j};
      const double x = static_cast<double>(v[static_cast<size_t>(j - a)]);
      if (std::isfinite(x) && visible_key(b, h, i, at)) dmod[j] = static_cast<T>(mods_.derivative(at, x));
    }
  }

  // A key inside the row's span that neither the boolean mask nor a mask modification hides.
  bool visible_key(int64_t b, int64_t h, int64_t i, const ModAt& at) const {
    if (in_.mask && in_.mask->get_offset(broadcast_offset(*in_.mask, b, h, i, at.j)) == 0) return false;
    return !mods_.has_mask() || mods_.visible(at);
  }

  // Whether a mask modification hides every key of [j0, j1) from each of rows [i0, i0 + nr) (within their spans):
  // such a key block weighs exactly 0 under a -inf fill and a kernel may skip it, as FlexAttention's block mask
  // does. False without mask modifications.
  bool mods_hide_block(int64_t b, int64_t h, int64_t i0, int64_t nr, const Span* spans, int64_t j0, int64_t j1) const {
    if (!mods_.has_mask()) return false;
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t pos = i0 + r + p_.diagonal_offset(b);
      for (int64_t j = std::max(j0, spans[r].lo); j < std::min(j1, spans[r].hi); ++j)
        if (mods_.visible(ModAt{b, h, i0 + r, pos, j})) return false;
    }
    return true;
  }

  Span span(int64_t b, int64_t i) const {
    const int64_t diag = i + p_.diagonal_offset(b);
    Span s{0, p_.key_length(b)};
    if (p_.causal) s.hi = std::min(s.hi, diag + 1);
    if (p_.window_right >= 0) s.hi = std::min(s.hi, diag + p_.window_right + 1);
    if (p_.window_left >= 0) s.lo = std::max(s.lo, diag - p_.window_left);
    s.hi = std::clamp<int64_t>(s.hi, 0, p_.Lk);
    s.lo = std::clamp<int64_t>(s.lo, 0, s.hi);
    return s;
  }

  // s[0..n) holds raw dot products q_i·k_j for keys j0..j0+n of (b, h, i); columns outside `sp` may hold garbage.
  // On return s holds the final scores (masked keys = fill). Returns the max over visible keys (-inf if none).
  // `full`: a block mask says every key of the block is visible (block_mask.hpp), so no per-key mask is applied.
  T process(int64_t b, int64_t h, int64_t i, int64_t j0, T* s, int64_t n, Span sp, bool full = false) const {
    const int64_t a = std::clamp<int64_t>(sp.lo - j0, 0, n), e = std::clamp<int64_t>(sp.hi - j0, 0, n);
    const T neg_inf = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < a; ++j) s[j] = fill_;
    for (int64_t j = e; j < n; ++j) s[j] = fill_;
    if (a >= e) return neg_inf;
    T* v = s + a;
    const int64_t m = e - a;
    const bool no_mask = full || (!in_.mask && !mods_.has_mask());
    if (softcap_ <= 0 && !in_.bias && !mods_.has_score() && no_mask)
      return simd::scale_max<T>(v, m, scale_);  // the common case
    ArrMap<T>(v, m) *= scale_;
    if (softcap_ > 0)  // scalar std::tanh: Eigen's fast tanh saturates early (error ~2e-7 * cap near |s| = 8 cap)
      for (int64_t j = 0; j < m; ++j) v[j] = softcap_ * std::tanh(v[j] / softcap_);
    if (in_.bias) add_bias(b, h, i, j0 + a, v, m);
    const int64_t pos = i + p_.diagonal_offset(b);  // the query's key position (mods.hpp)
    if (mods_.has_score())                          // score modifications after the bias, each in fp64 and rounded once
      for (int64_t j = 0; j < m; ++j) {
        const ModAt at{b, h, i, pos, j0 + a + j};
        const double x = static_cast<double>(v[j]), r = mods_.score(at, x);
        if (std::isfinite(x) && !std::isfinite(r) && visible_key(b, h, i, at)) mods_.expect_finite(at, x);  // throws
        v[j] = static_cast<T>(r);
      }
    if (no_mask) return row_max(v, m, neg_inf);
    const uint8_t* mrow = nullptr;
    int64_t mj = 0;
    if (in_.mask) {
      const Tensor& mk = *in_.mask;
      mrow = mk.data<uint8_t>() + broadcast_offset(mk, b, h, i, 0);
      mj = mk.shape[3] == 1 ? 0 : mk.strides[3];
    }
    T mx = neg_inf;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t key = j0 + a + j;
      if ((mrow && mrow[key * mj] == 0) || (mods_.has_mask() && !mods_.visible(ModAt{b, h, i, pos, key})))
        v[j] = fill_;  // masked: never looked at again (the key may be NaN-poisoned)
      else
        mx = v[j] > mx ? v[j] : mx;
    }
    return mx;
  }

 private:
  void add_bias(int64_t b, int64_t h, int64_t i, int64_t jstart, T* v, int64_t m) const {
    const Tensor& bt = *in_.bias;
    const int64_t base = broadcast_offset(bt, b, h, i, 0);
    const int64_t sj = bt.shape[3] == 1 ? 0 : bt.strides[3];
    auto add = [&](const auto* src, auto conv) {
      for (int64_t j = 0; j < m; ++j) v[j] += static_cast<T>(conv(src[base + (jstart + j) * sj]));
    };
    switch (bt.dtype) {
      case DType::f64: add(bt.data<double>(), [](double x) { return x; }); break;
      case DType::f32: add(bt.data<float>(), [](float x) { return x; }); break;
      case DType::f16: add(bt.data<uint16_t>(), [](uint16_t x) { return half_bits_to_float(x); }); break;
      case DType::bf16: add(bt.data<uint16_t>(), [](uint16_t x) { return bf16_bits_to_float(x); }); break;
      case DType::u8:
      case DType::i8:
      case DType::q4_0:
      case DType::q4_1:
      case DType::e4m3:
      case DType::e5m2:
        throw std::invalid_argument(std::string("cpu: bias dtype ") + to_string(bt.dtype) + " not supported");
    }
  }

  const Problem& p_;
  const Inputs& in_;
  T scale_, softcap_, fill_;
  bool finite_fill_;
  ModSet mods_;
};

// ---- dropout ------------------------------------------------------------------------------------------------
// keep(b, h, i, j0..) as a pointer into the contiguous [B, Hq, Lq, Lk] keep-mask, or nullptr without dropout.
inline const uint8_t* keep_row(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t j0) {
  if (!in.keep) return nullptr;
  return in.keep->data<uint8_t>() + ((b * p.Hq + h) * p.Lq + i) * p.Lk + j0;
}
// p[j] = keep[j] ? p[j] / (1 - dropout_p) : 0 (a select, so a dropped NaN weight contributes nothing either).
template <class T>
inline void apply_keep(T* pr, const uint8_t* keep, int64_t n, T keep_scale) {
  for (int64_t j = 0; j < n; ++j) pr[j] = keep[j] ? pr[j] * keep_scale : T(0);
}

// ---- fully-masked rows --------------------------------------------------------------------------------------
// The weight every key gets in a row without a visible key, by policy (nan, uniform 1/Lk, zero).
template <class T>
T policy_weight(const Problem& p) {
  switch (p.fully_masked) {
    case FullyMasked::nan: return std::numeric_limits<T>::quiet_NaN();
    case FullyMasked::uniform: return T(1) / static_cast<T>(p.Lk);
    case FullyMasked::zero: return T(0);
  }
  return T(0);
}
// lse of such a row: log(sum_j exp(fill)) = fill + log(Lk) for a finite fill, -inf otherwise.
template <class T>
T policy_lse(const Problem& p) {
  return p.fill == MaskFill::finite ? static_cast<T>(p.fill_value + std::log(static_cast<double>(p.Lk)))
                                    : -std::numeric_limits<T>::infinity();
}

// The max-logit output of a row with no visible key: the fill (problem.hpp MaxLogitOut).
template <class T>
T policy_max_logit(const Problem& p) {
  return p.fill == MaskFill::finite ? static_cast<T>(p.fill_value) : -std::numeric_limits<T>::infinity();
}

// ---- values that must not leak -----------------------------------------------------------------------------
// A GEMM computes 0 * NaN = NaN, while the reference skips zero weights. Rows of V that are not finite are zeroed
// in the GEMM operand and remembered here; afterwards each is added only to the output rows whose weight is
// nonzero, exactly as the reference's loop does.
template <class T>
struct BadValues {
  std::vector<int64_t> cols;  // column of the weight block
  std::vector<T> rows;        // their original values, Dv each

  void clear() {
    cols.clear();
    rows.clear();
  }
  // Scan V (n x Dv, row-major); zero and remember non-finite rows.
  void scan(T* v, int64_t n, int64_t Dv, int64_t col0) {
    // Fast path: x * 0 is 0 for every finite x and NaN otherwise, and a vectorised sum sees any NaN.
    if (n <= 0 || (Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v, n * Dv) * T(0)).sum() == T(0)) return;
    for (int64_t r = 0; r < n; ++r) {
      T* row = v + r * Dv;
      bool finite = true;
      for (int64_t d = 0; d < Dv; ++d) finite = finite && std::isfinite(row[d]);
      if (finite) continue;
      cols.push_back(col0 + r);
      rows.insert(rows.end(), row, row + Dv);
      std::fill(row, row + Dv, T(0));
    }
  }
  // acc[r, :] += P[r, c] * row for every remembered column c with P[r, c] != 0.
  template <class PMat, class AccMat>
  void add(const PMat& P, AccMat& acc) const {
    for (size_t k = 0; k < cols.size(); ++k)
      for (Eigen::Index r = 0; r < P.rows(); ++r) {
        const T w = P(r, cols[k]);
        if (w == T(0)) continue;
        for (Eigen::Index d = 0; d < acc.cols(); ++d) acc(r, d) += w * rows[k * static_cast<size_t>(acc.cols()) + d];
      }
  }
};

// Packed variable-length sequences (cu_seqlens) as a varlen kernel schedules them: each sequence's block on its
// own (attend(problem, inputs, outputs) on the sequence's problem), scattered into the packed outputs; keys of other
// sequences weigh 0. A sequence with queries but no keys is fully masked (or has only its sink) and is written here.
template <class F>
void run_packed(const Problem& p, const Inputs& in, Outputs& out, F&& attend) {
  if (p.cu_seqlens_q.empty()) return attend(p, in, out);
  if (out.weights) out.weights->fill(0.0);
  for (int64_t s = 0; s < p.sequences(); ++s) {
    const size_t u = static_cast<size_t>(s);
    const int64_t q0 = p.cu_seqlens_q[u], q1 = p.cu_seqlens_q[u + 1], k0 = p.cu_seqlens_k[u];
    if (q1 == q0) continue;
    if (p.cu_seqlens_k[u + 1] == k0) {
      for (int64_t h = 0; h < p.Hq; ++h) {
        const double sink = p.sink(h), inf = std::numeric_limits<double>::infinity();
        const double o =
            sink > -inf || p.fully_masked != FullyMasked::nan ? 0.0 : std::numeric_limits<double>::quiet_NaN();
        for (int64_t i = q0; i < q1; ++i) {
          for (int64_t d = 0; d < p.Dv; ++d) out.out.put(0, h, i, d, o);
          const int64_t at[3] = {0, h, i};
          if (out.lse) out.lse->set(at, sink);  // -inf without a sink
          if (out.max_logit) out.max_logit->set(at, policy_max_logit<double>(p));
        }
      }
      continue;
    }
    const Attended a = sequence_problem(p, in, s);
    Outputs o = make_outputs(a.p);
    for (Tensor* t :
         {&o.out, o.lse ? &*o.lse : nullptr, o.weights ? &*o.weights : nullptr, o.max_logit ? &*o.max_logit : nullptr})
      if (t) t->fill(std::numeric_limits<double>::quiet_NaN());  // an element the kernel skips must not read as 0
    attend(a.p, a.in, o);
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < a.p.Lq; ++i) {
        for (int64_t d = 0; d < p.Dv; ++d) out.out.put(0, h, q0 + i, d, o.out.at(0, h, i, d));
        const int64_t at[3] = {0, h, q0 + i}, from[3] = {0, h, i};
        if (out.lse) out.lse->set(at, o.lse->get(from));
        if (out.max_logit) out.max_logit->set(at, o.max_logit->get(from));
        if (out.weights)
          for (int64_t j = 0; j < a.p.Lk; ++j) out.weights->put(0, h, q0 + i, k0 + j, o.weights->at(0, h, i, j));
      }
  }
}

// KV-cache append as a kernel with a cache does it: write present = concat(past, new) into the outputs (rows of
// D elements copied as bytes: past, new and present share dtype and layout), then attend over what was written,
// so a wrong copy shows in the attention output too. attend(p, in, out) gets the problem without append.
template <class F>
void run_appending(const Problem& p, const Inputs& in, Outputs& out, F&& attend) {
  if (p.past_len == 0) return attend(p, in, out);
  Inputs present = in;
  present.past_k.reset(), present.past_v.reset();
  for (int which : {1, 2}) {
    const Tensor& past = which == 1 ? *in.past_k : *in.past_v;
    const Tensor& now = which == 1 ? in.k : in.v;
    Tensor& dst = which == 1 ? *out.present_k : *out.present_v;
    const size_t row = static_cast<size_t>(dst.shape[3]) * dtype_size(dst.dtype);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const bool old = j < p.past_len;
          const int64_t from[4] = {b, h, old ? j : j - p.past_len, 0}, to[4] = {b, h, j, 0};
          const Tensor& src = old ? past : now;
          std::memcpy(dst.bytes.data() + dst.offset(to) * static_cast<int64_t>(dtype_size(dst.dtype)),
                      src.bytes.data() + src.offset(from) * static_cast<int64_t>(dtype_size(src.dtype)), row);
        }
    (which == 1 ? present.k : present.v) = dst;
  }
  Problem q = p;
  q.past_len = 0;
  attend(q, present, out);
}

// The features the CPU implementations handle around their kernel: a paged cache (gathered into contiguous K/V,
// as a kernel without paged reads is fed), KV-cache append (present holds the stored codes), fp8 inputs (decoded to
// float at packing: codes exact, descale_q * descale_k folded into the scale, descale_v into v; P stays float, so
// their fp8 contract is p=exact: p_exact_declarations), then packed sequences. A quantized KV cache passes through
// untouched: load_kv_rows decodes it where the kernels load K and V rows.
template <class F>
void run_cpu(const Problem& p, const Inputs& in, Outputs& out, F&& kernel) {
  if (p.max_logit == MaxLogitOut::heads) {  // the kernels write rows; the heads form is their maximum
    Problem q = p;
    q.max_logit = MaxLogitOut::rows;
    Tensor heads = std::move(*out.max_logit);
    out.max_logit = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq});
    run_cpu(q, in, out, kernel);
    const std::vector<double> h = max_logit_heads(p, out.max_logit->to_double());
    for (size_t n = 0; n < h.size(); ++n) heads.set_offset(static_cast<int64_t>(n), h[n]);
    out.max_logit = std::move(heads);
    return;
  }
  if (p.fp8_out) {  // the kernels write O in the working precision; the epilogue scales, saturates, rounds once
    Problem q = p;
    q.fp8_out = false, q.o_dtype = Problem{}.o_dtype, q.scale_o = 1.0;
    Outputs values = std::move(out);
    values.out = Tensor(p.stat_dtype(), {p.B, p.Hq, p.Lq, p.Dv}, storage_order(p.layout));
    values.amax_o.reset();
    run_cpu(q, in, values, kernel);
    Tensor codes = Tensor(p.out_dtype(), {p.B, p.Hq, p.Lq, p.Dv}, storage_order(p.layout));
    const Tensor o = std::move(values.out);
    out = std::move(values);
    out.out = std::move(codes), out.amax_o = Tensor(p.stat_dtype(), {1});
    store_fp8_out(p, o, out);
    return;
  }
  auto rest = [&](const Problem& q, const Inputs& x) {
    run_appending(q, x, out, [&](const Problem& r, const Inputs& y, Outputs& o) {
      if (!is_fp8(r.dtype)) return run_packed(r, y, o, kernel);  // no copy of the inputs (decode reads K/V once)
      const Attended d = dequantize(r, y, DType::f32);
      run_packed(d.p, d.in, o, kernel);
    });
  };
  if (p.page_size == 0) return rest(p, in);
  const Attended a = gather_pages(p, in);
  rest(a.p, a.in);
}

// What both CPU implementations declare: everything the problem model has, fp8 included.
inline Capabilities cpu_capabilities(const char* notes) {
  Capabilities c;
  c.sinks = c.scores_out = c.kv_append = c.varlen = c.paged_kv = c.fp8 = c.kv_quant = c.mla = c.max_logit_out =
      c.fp8_out = c.kv_q4 = c.kv_quant_paged = true;
  c.dtypes.insert({DType::e4m3, DType::e5m2});
  for (const ModEntry& m : modifications()) c.mods.insert(m.name);
  c.notes = notes;
  return c;
}

}  // namespace attncheck::cpu
