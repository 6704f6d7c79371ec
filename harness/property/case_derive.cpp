// Derived cases for metamorphic properties: positional masks folded into a boolean mask (so keys and queries can
// be sliced and permuted without changing what each query sees), slices, permutations and poison removal.
#include <cmath>
#include <functional>

#include "case.hpp"

namespace attncheck::prop {

namespace {
using Map = std::function<void(const int64_t* dst, int64_t* src)>;

// A tensor of `shape` (storage order like `like`'s kind) whose element dst is src[map(dst)].
Tensor remap(const Tensor& src, std::vector<int64_t> shape, const std::vector<int>& order, const Map& map) {
  Tensor t(src.dtype, std::move(shape), order);
  int64_t idx[4] = {0, 0, 0, 0}, from[4];
  for (idx[0] = 0; idx[0] < t.shape[0]; ++idx[0])
    for (idx[1] = 0; idx[1] < t.shape[1]; ++idx[1])
      for (idx[2] = 0; idx[2] < t.shape[2]; ++idx[2])
        for (idx[3] = 0; idx[3] < t.shape[3]; ++idx[3]) {
          map(idx, from);
          t.set(idx, src.get(from));
        }
  return t;
}

// Apply index maps on the query axis (dim 2 of q, mask, bias, keep) and the key axis (dim 2 of k, v; dim 3 of
// mask, bias, keep) of a canonical case.
Case remap_case(const Case& c, int64_t Lq, int64_t Lk, const std::function<int64_t(int64_t)>& qi,
                const std::function<int64_t(int64_t)>& kj) {
  Case d = c;
  d.p.Lq = Lq, d.p.Lk = Lk;
  const auto so = storage_order(c.p.layout);
  auto qmap = [&](const int64_t* a, int64_t* s) { s[0] = a[0], s[1] = a[1], s[2] = qi(a[2]), s[3] = a[3]; };
  auto kmap = [&](const int64_t* a, int64_t* s) { s[0] = a[0], s[1] = a[1], s[2] = kj(a[2]), s[3] = a[3]; };
  auto smap = [&](const int64_t* a, int64_t* s) { s[0] = a[0], s[1] = a[1], s[2] = qi(a[2]), s[3] = kj(a[3]); };
  d.in.q = remap(c.in.q, {c.p.B, c.p.Hq, Lq, c.p.Dqk}, so, qmap);
  d.in.k = remap(c.in.k, {c.p.B, c.p.Hkv, Lk, c.p.Dqk}, so, kmap);
  d.in.v = remap(c.in.v, {c.p.B, c.p.Hkv, Lk, c.p.Dv}, so, kmap);
  const std::vector<int64_t> full = {c.p.B, c.p.Hq, Lq, Lk};
  if (c.in.mask)
    d.in.mask = remap(*c.in.mask, full, {}, smap), d.p.mask_shape = std::array<int64_t, 4>{c.p.B, c.p.Hq, Lq, Lk};
  if (c.in.bias)
    d.in.bias = remap(*c.in.bias, full, {}, smap), d.p.bias_shape = std::array<int64_t, 4>{c.p.B, c.p.Hq, Lq, Lk};
  if (c.in.keep) d.in.keep = remap(*c.in.keep, full, {}, smap);
  return d;
}
}  // namespace

Case canonical(const Case& c) {
  Case d = c;
  Problem& p = d.p;
  const bool positional = p.causal || p.has_window() || !p.key_lengths.empty();
  p.causal = false;
  p.alignment = Alignment::top_left;
  p.causal_offset = 0;
  p.causal_offsets.clear();
  p.key_lengths.clear();
  p.window_left = p.window_right = -1;
  const std::vector<int64_t> full = {c.p.B, c.p.Hq, c.p.Lq, c.p.Lk};
  if (positional || c.in.mask) {
    Tensor m(DType::u8, full);
    for (int64_t b = 0; b < c.p.B; ++b)
      for (int64_t h = 0; h < c.p.Hq; ++h)
        for (int64_t i = 0; i < c.p.Lq; ++i)
          for (int64_t j = 0; j < c.p.Lk; ++j) m.put(b, h, i, j, visible(c.p, c.in, b, h, i, j));
    d.in.mask = std::move(m);
    p.mask_shape = std::array<int64_t, 4>{c.p.B, c.p.Hq, c.p.Lq, c.p.Lk};
  }
  if (c.in.bias) {
    d.in.bias = remap(*c.in.bias, full, {}, [&](const int64_t* a, int64_t* s) {
      for (int k = 0; k < 4; ++k) s[k] = c.in.bias->shape[static_cast<size_t>(k)] == 1 ? 0 : a[k];
    });
    p.bias_shape = std::array<int64_t, 4>{c.p.B, c.p.Hq, c.p.Lq, c.p.Lk};
  }
  return d;
}

Case slice_keys(const Case& c, int64_t j0, int64_t j1) {
  return remap_case(
      c, c.p.Lq, j1 - j0, [](int64_t i) { return i; }, [j0](int64_t j) { return j + j0; });
}

Case slice_queries(const Case& c, int64_t i0, int64_t i1) {
  return remap_case(
      c, i1 - i0, c.p.Lk, [i0](int64_t i) { return i + i0; }, [](int64_t j) { return j; });
}

Case permute_keys(const Case& c, const std::vector<int64_t>& perm) {
  return remap_case(
      c, c.p.Lq, c.p.Lk, [](int64_t i) { return i; }, [&perm](int64_t j) { return perm[static_cast<size_t>(j)]; });
}

Case permute_queries(const Case& c, const std::vector<int64_t>& perm) {
  return remap_case(
      c, c.p.Lq, c.p.Lk, [&perm](int64_t i) { return perm[static_cast<size_t>(i)]; }, [](int64_t j) { return j; });
}

void depoison(Case& c) {
  for (Tensor* t : {&c.in.k, &c.in.v, c.in.bias ? &*c.in.bias : nullptr}) {
    if (!t) continue;
    for (int64_t n = 0; n < t->numel(); ++n) {
      const double x = t->get_offset(n);
      if (!std::isfinite(x) || std::abs(x) > 1e6) t->set_offset(n, 0.0);
    }
  }
}

}  // namespace attncheck::prop
