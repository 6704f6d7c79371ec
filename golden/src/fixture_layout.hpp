// Shared helpers of the fixture writer and reader: the stored (memory-order) extents of layout-dependent tensors,
// and permutations between the reference's row-major [B,Hq,Lq,Dv] and the stored order.
#pragma once

#include <cstdint>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck::fixture_detail {

// Extents of a logical [B,H,L,D] tensor as stored for a layout: BHSD [B,H,L,D], BSHD [B,L,H,D].
inline std::vector<int64_t> stored_dims(const std::vector<int64_t>& logical, Layout l) {
  if (l == Layout::BHSD) return logical;
  return {logical[0], logical[2], logical[1], logical[3]};
}

// Row-major logical [B,H,L,D] -> stored order of the layout (and back).
inline std::vector<double> to_layout(const std::vector<double>& x, int64_t B, int64_t H, int64_t L, int64_t D, Layout l,
                                     bool inverse = false) {
  if (l == Layout::BHSD) return x;
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const size_t logical = static_cast<size_t>(((b * H + h) * L + i) * D + d);
          const size_t stored = static_cast<size_t>(((b * L + i) * H + h) * D + d);
          if (inverse)
            y[logical] = x[stored];
          else
            y[stored] = x[logical];
        }
  return y;
}

}  // namespace attncheck::fixture_detail
