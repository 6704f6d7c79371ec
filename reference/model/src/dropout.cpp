// Dropout's keep-mask: Philox4x32-10, so keep(b,h,i,j) is a pure function of the seed and the index.
#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

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
  const auto r = philox4x32_10(
      {static_cast<uint32_t>(i), static_cast<uint32_t>(j), static_cast<uint32_t>(h), static_cast<uint32_t>(b)},
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

}  // namespace model
}  // namespace attncheck
