// The arithmetic of the library modifications (mods_library.cpp) on plain values: no containers, no Problem, so
// the fp64 reference and the CUDA kernels (nvcc device code and its host emulation) evaluate each entry with the
// same function. Per-token parameters are read through an accessor (`at(k)`), so a kernel reads them with its
// checked global loads. The entries' parameters, rules and documentation stay in mods_library.cpp.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ATTNCHECK_HD __host__ __device__
#else
#define ATTNCHECK_HD
#endif

namespace attncheck::inline model::mod_eval {

ATTNCHECK_HD inline int64_t abs_i(int64_t x) { return x < 0 ? -x : x; }
ATTNCHECK_HD inline int64_t floor_div(int64_t a, int64_t c) { return a / c - ((a % c != 0) && ((a < 0) != (c < 0))); }

// ALiBi: score - slope * |pos - j|.
ATTNCHECK_HD inline double alibi(double s, double slope, int64_t pos, int64_t j) {
  return s - slope * static_cast<double>(abs_i(pos - j));
}

// T5: the bucket of relative position rel = j - pos, transformers' _relative_position_bucket evaluated in double.
ATTNCHECK_HD inline int64_t t5_bucket(int64_t buckets, int64_t max_distance, bool bidirectional, int64_t rel) {
  int64_t n = buckets, bucket = 0;
  if (bidirectional) {
    n /= 2;
    if (rel > 0) bucket += n;
    rel = abs_i(rel);
  } else {
    rel = rel < 0 ? -rel : 0;  // keys after the query share bucket 0
  }
  const int64_t exact = n / 2;
  if (rel < exact) return bucket + rel;
  const double f = log(double(rel) / double(exact)) / log(double(max_distance) / double(exact));
  const int64_t b = exact + static_cast<int64_t>(f * double(n - exact));
  return bucket + (b < n - 1 ? b : n - 1);
}

// Document mask: the query at key position pos and key j carry the same id; a query outside [0, Lk) belongs to
// no document. id(k): the id of key-axis token k of the batch entry.
template <class Id>
ATTNCHECK_HD inline bool document(int64_t pos, int64_t j, int64_t Lk, const Id& id) {
  return pos >= 0 && pos < Lk && id(pos) == id(j);
}

// Chunked local attention: query and key in the same chunk of `chunk` tokens.
ATTNCHECK_HD inline bool chunked(int64_t pos, int64_t j, int64_t chunk) { return floor_div(pos, chunk) == j / chunk; }

// Prefix-LM: the batch entry's first `prefix` keys are seen by every query, causal after them.
ATTNCHECK_HD inline bool prefix_lm(int64_t pos, int64_t j, int64_t prefix) { return j < prefix || j <= pos; }

// Dilated sliding window: |pos - j| a multiple of `dilation`, at most `window` steps away.
ATTNCHECK_HD inline bool dilated(int64_t pos, int64_t j, int64_t window, int64_t dilation) {
  const int64_t d = pos - j;
  return d % dilation == 0 && abs_i(d) / dilation <= window;
}

// Top-k sparse: j is one of the query's `topk` listed keys; slot(s): the key in slot s (-1 = padding).
template <class Slot>
ATTNCHECK_HD inline bool topk_listed(int64_t j, int64_t topk, const Slot& slot) {
  for (int64_t s = 0; s < topk; ++s)
    if (slot(s) == j) return true;
  return false;
}

}  // namespace attncheck::inline model::mod_eval
