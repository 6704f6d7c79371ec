// The merge variants of `attncheck power --merge`: one fp32 combine loop (written apart from the cpu backend's and
// from the diagnosis models) with a switch per mistake seen in real kernels, and two correct variants that round
// differently (reverse order; base-2 states converted to nats before the exponent) to show the bound has room.
#include "merge_power.hpp"

#include <cmath>

#include "attncheck/kv_cache.hpp"

namespace attncheck::power {

namespace {
enum Fault {
  none = 0,
  reverse,
  via_nats,
  skip_empty_check,
  literal_sentinel,
  contiguous_lse,
  no_normalise,
  drop_last,
  base_e,
  contiguous_o,
  scale_ignored
};
}

const std::vector<MergeVariant>& merge_variants() {
  static const std::vector<MergeVariant> v = {
      {"correct-fp32", "", none},
      {"correct-reverse-order", "", reverse},
      {"correct-via-nats", "", via_nats},
      {"nan-from-empty-state", "empty-state-nan", skip_empty_check},
      {"sentinel-as-lse", "lse-sentinel", literal_sentinel},
      {"lse-contiguous-bhl", "lse-layout", contiguous_lse},
      {"o-contiguous-bhld", "lse-layout", contiguous_o},
      {"no-normalisation", "merge-unnormalised", no_normalise},
      {"last-split-dropped", "split-boundary", drop_last},
      {"base-e-always", "lse-base", base_e},
      {"fp8-scale-ignored", "out-scale", scale_ignored},
  };
  return v;
}

void run_merge_variant(const MergeVariant& v, const MergeProblem& p, const StoredStates& in, StoredStates& out) {
  const int f = v.fault;
  const bool norm = p.conv.form == StateForm::normalised;
  const bool two = p.conv.base == LseBase::two && f != base_e;
  const float sentinel = static_cast<float>(empty_stat_value(p.conv));
  const Tensor& xs = norm ? *in.lse : *in.max;
  Tensor& ys = norm ? *out.lse : *out.max;
  const int64_t rows = p.B * p.H * p.L;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (p.H * p.L), h = (r / p.L) % p.H, i = r % p.L;
    // The stat's element offset for state n: through the strides, or (the layout bug) as contiguous [N,B,H,L].
    auto off = [&](const Tensor& t, int64_t n) {
      if (f == contiguous_lse) return n * rows + r;
      const int64_t at[4] = {n, b, h, i};
      return t.offset(at);
    };
    const int64_t N = f == drop_last ? p.N - 1 : p.N;
    float X = f == literal_sentinel || f == skip_empty_check ? -INFINITY : 0.f;
    bool any = false;
    auto empty = [&](int64_t n) {
      if (f == literal_sentinel) return false;
      const float x = static_cast<float>(xs.get_offset(off(xs, n)));
      return x == sentinel || (!norm && in.sum->get_offset(off(*in.sum, n)) == 0.0);
    };
    for (int64_t n = 0; n < N; ++n) {
      const float x = static_cast<float>(xs.get_offset(off(xs, n)));
      if (empty(n)) continue;
      X = any || f == literal_sentinel || f == skip_empty_check ? std::max(X, x) : x;
      any = true;
    }
    float S = 0.f;
    std::vector<float> acc(static_cast<size_t>(p.D), 0.f);
    for (int64_t k = 0; k < N; ++k) {
      const int64_t n = f == reverse ? N - 1 - k : k;
      const bool e = empty(n);
      if (e && f != skip_empty_check) continue;
      const float x = e ? -INFINITY : static_cast<float>(xs.get_offset(off(xs, n)));
      float w;
      if (f == via_nats && two)
        w = std::exp(x * 0.69314718f - X * 0.69314718f);
      else
        w = two ? std::exp2(x - X) : std::exp(x - X);
      const float l = norm ? 1.f : static_cast<float>(in.sum->get_offset(off(*in.sum, n)));
      S += w * l;
      for (int64_t d = 0; d < p.D; ++d) {
        const int64_t at[5] = {n, b, h, i, d};  // the O layout bug: as contiguous [N,B,H,L,D], the strides ignored
        const double o = f == contiguous_o ? in.o.get_offset((n * rows + r) * p.D + d) : in.o.get(at);
        acc[static_cast<size_t>(d)] += w * static_cast<float>(o);
      }
    }
    const bool naive = f == skip_empty_check || f == literal_sentinel;  // no special case for an all-empty row
    const int64_t st = f == contiguous_lse ? r : [&] {
      const int64_t at[3] = {b, h, i};
      return ys.offset(at);
    }();
    const float lse = two ? X + std::log2(S) : X + std::log(S);
    if (norm)
      ys.set_offset(st, any || naive ? lse : sentinel);
    else {
      ys.set_offset(st, any || naive ? X : sentinel);
      out.sum->set_offset(f == contiguous_lse ? r : st, any || naive ? S : 0.f);
    }
    for (int64_t d = 0; d < p.D; ++d) {
      const int64_t at[4] = {b, h, i, d};
      const float o = acc[static_cast<size_t>(d)];
      double x = !(any || naive) ? 0.f : norm && f != no_normalise ? o / S : o;
      if (p.conv
              .out_dtype) {  // fp8: O / scale (the mistake: the scale ignored), saturated at the format's largest value
        const double top = kv_code_max(*p.conv.out_dtype);
        if (f != scale_ignored) x /= p.conv.out_scale;
        x = x > top ? top : x < -top ? -top : x;
      }
      if (f == contiguous_o)
        out.o.set_offset(r * p.D + d, x);
      else
        out.o.set(at, x);
    }
  }
}

}  // namespace attncheck::power
