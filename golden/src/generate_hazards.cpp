// The hazard distributions of the golden suite (listed in generate.hpp): inputs built so that a known bug class
// moves the result far beyond rounding. Same rules as generate.cpp: integer arithmetic, IEEE +,*,/ and sqrt only,
// so a seed names the same bits everywhere.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attncheck/generate.hpp"

namespace attncheck::gen {

bool fill_hazard(const Problem& p, Distribution dist, Inputs& in, Rng& rq, Rng& rk, Rng& rv) {
  const double scale = p.effective_scale() == 0.0 ? 1.0 : std::abs(p.effective_scale());
  const double sqrt_d = std::sqrt(static_cast<double>(p.Dqk));
  auto normal_q = [&](int64_t, int64_t, int64_t, int64_t) { return rq.normal(); };
  auto normal_k = [&](int64_t, int64_t, int64_t, int64_t) { return rk.normal(); };
  auto normal_v = [&](int64_t, int64_t, int64_t, int64_t) { return rv.normal(); };
  switch (dist) {
    case Distribution::fp16_overflow: {
      // q.k = f^2 * sqrt(Dqk) * N(0,1) with f^2 * sqrt(Dqk) = 2^17: about half the raw dot products exceed 65504.
      const double f = std::sqrt(0x1.0p17 / sqrt_d);
      fill4(in.q, [&](auto...) { return f * rq.normal(); });
      fill4(in.k, [&](auto...) { return f * rk.normal(); });
      fill4(in.v, normal_v);
      return true;
    }
    case Distribution::logits_30_80: {
      const double f = std::sqrt(30.0 / (scale * sqrt_d));  // score = scale * f^2 * sqrt(Dqk) * N(0,1)
      fill4(in.q, [&](auto...) { return f * rq.normal(); });
      fill4(in.k, [&](auto...) { return f * rk.normal(); });
      fill4(in.v, normal_v);
      return true;
    }
    case Distribution::near_ties: {
      std::vector<double> base(static_cast<size_t>(p.B * p.Hkv * 3 * p.Dqk));
      for (double& x : base) x = rk.normal();
      fill4(in.q, normal_q);
      fill4(in.k, [&](int64_t b, int64_t h, int64_t j, int64_t d) {
        const double x = base[static_cast<size_t>(((b * p.Hkv + h) * 3 + j % 3) * p.Dqk + d)];
        return x * (1.0 + 0x1.0p-9 * rk.uniform_signed());
      });
      fill4(in.v, normal_v);
      return true;
    }
    case Distribution::neg_inf_bias: {
      if (!in.bias) throw std::invalid_argument("distribution: neg_inf_bias needs a bias (set bias_shape)");
      fill4(in.q, normal_q);
      fill4(in.k, normal_k);
      fill4(in.v, normal_v);
      Tensor& bias = *in.bias;
      const double ninf = -std::numeric_limits<double>::infinity();
      fill4(bias, [&](int64_t a, int64_t h, int64_t i, int64_t j) {
        return i == 0 || (i + j) % 3 == 0 ? ninf : bias.at(a, h, i, j);
      });
      return true;
    }
    case Distribution::tile_edge_dominant: {
      // Coordinate 0 of every query is 4; a tile-edge key's coordinate 0 adds 8 to its score in every row.
      fill4(in.q, [&](int64_t, int64_t, int64_t, int64_t d) { return d == 0 ? 4.0 : rq.normal(); });
      fill4(in.k, [&](int64_t, int64_t, int64_t j, int64_t d) {
        const double x = rk.normal();
        return d == 0 && (j % 64 == 0 || j % 64 == 63) ? 8.0 / (4.0 * scale) : (d == 0 ? 0.0 : x);
      });
      fill4(in.v, normal_v);
      return true;
    }
    case Distribution::one_hot_v:
      fill4(in.q, normal_q);
      fill4(in.k, normal_k);
      fill4(in.v, [&](int64_t, int64_t, int64_t j, int64_t d) { return d == j % p.Dv ? 1.0 : 0.0; });
      return true;
    case Distribution::uniform_rows: {
      fill4(in.q, [](auto...) { return 0.0; });
      fill4(in.k, normal_k);
      // Integers -2..3 from the stream; a column summing to 0 gets +1 on its first key (a zero answer would be a
      // cancellation, not exact for an implementation that rounds its partial results).
      fill4(in.v, [&](auto...) { return static_cast<double>(static_cast<int64_t>(rv.next() % 6) - 2); });
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hkv; ++h)
          for (int64_t d = 0; d < p.Dv; ++d) {
            double sum = 0;
            for (int64_t j = 0; j < p.Lk; ++j) sum += in.v.at(b, h, j, d);
            if (sum == 0) in.v.put(b, h, 0, d, in.v.at(b, h, 0, d) + 1.0);
          }
      return true;
    }
    default: return false;
  }
}

}  // namespace attncheck::gen
