// Invariants of the features of problem model v2 (docs/problem-model.md), each an implementation compared with
// itself on an equivalent case: a sink of -inf is no sink; a sink is a key of score `sink` whose value is zero.
#include <cmath>
#include <limits>

#include "prop_util.hpp"

namespace attncheck::prop {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---- attention sinks -------------------------------------------------------------------------------------
void prep_sinks(CaseSpec& s) { s.sinks_kind = 1 + static_cast<int>(s.seed % 2); }
// Finite sinks only: a row with no visible key and a -inf sink is fully masked, and its policy output (uniform:
// the mean of Lk values) and lse (finite fill: fill + log Lk) count the keys, which differ by the extra one.
void prep_sink_key(CaseSpec& s) { s.sinks_kind = 1; }

Outcome sink_neg_inf_is_none(const Impl& impl, const Case& c) {
  if (c.p.sinks.empty()) return Outcome::unsup("attention sinks not supported");
  Case none = c, neg = c;
  none.p.sinks.clear();
  for (double& x : neg.p.sinks) x = kNegInf;
  RUN_OR_UNSUP(ra, impl, neg);
  RUN_OR_UNSUP(rb, impl, none);
  return compare_pair(impl, none, *ra, *rb);
}

// The case with one key appended per (batch, kv head): K = 0 and V = 0, visible to every query, bias sinks[h]
// (its score is scale·0, softcapped 0, plus the bias: exactly the sink), kept by dropout; and no sinks.
Case sink_as_key(const Case& c0) {
  const Case c = canonical(c0);
  const int64_t Lk = c.p.Lk;
  Case d = c;
  d.p.Lk = Lk + 1;
  d.p.sinks.clear();
  d.in.k = make_qkv(d.p, 1), d.in.v = make_qkv(d.p, 2);
  for (int64_t b = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hkv; ++h)
      for (int64_t j = 0; j < Lk; ++j) {
        for (int64_t e = 0; e < c.p.Dqk; ++e) d.in.k.put(b, h, j, e, c.in.k.at(b, h, j, e));
        for (int64_t e = 0; e < c.p.Dv; ++e) d.in.v.put(b, h, j, e, c.in.v.at(b, h, j, e));
      }
  const std::vector<int64_t> full = {c.p.B, c.p.Hq, c.p.Lq, Lk + 1};
  auto widen = [&](const std::optional<Tensor>& t, DType dt, auto last) {
    Tensor w(dt, full);
    for (int64_t b = 0; b < c.p.B; ++b)
      for (int64_t h = 0; h < c.p.Hq; ++h)
        for (int64_t i = 0; i < c.p.Lq; ++i)
          for (int64_t j = 0; j <= Lk; ++j)
            w.put(b, h, i, j, j == Lk ? last(h) : t ? t->get_offset(broadcast_offset(*t, b, h, i, j)) : 0.0);
    return w;
  };
  d.in.bias = widen(c.in.bias, c.p.bias_dtype, [&](int64_t h) { return c.p.sinks[static_cast<size_t>(h)]; });
  d.p.bias_shape = std::array<int64_t, 4>{full[0], full[1], full[2], full[3]};
  if (c.in.mask) d.in.mask = widen(c.in.mask, DType::u8, [](int64_t) { return 1.0; }), d.p.mask_shape = d.p.bias_shape;
  if (c.in.keep) d.in.keep = widen(c.in.keep, DType::u8, [](int64_t) { return 1.0; });
  return d;
}

Outcome sink_is_zero_value_key(const Impl& impl, const Case& c) {
  if (c.p.sinks.empty()) return Outcome::unsup("attention sinks not supported");
  const Case d = sink_as_key(c);
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  // Each run is within its own tolerance of its exact result, and the exact results coincide (weights: the
  // first Lk keys of the longer case), so the runs differ by at most the sum of both tolerances.
  const Tol ta = tolerances(c), tb = tolerances(d);
  const int64_t rows = c.p.B * c.p.Hq * c.p.Lq, Lk = c.p.Lk;
  Ran mapped = *rb;
  std::vector<double> wtol(ta.w.size());
  if (c.p.want_weights) mapped.w.resize(ta.w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < Lk; ++j) {
      const size_t n = static_cast<size_t>(r * Lk + j), m = static_cast<size_t>(r * (Lk + 1) + j);
      if (c.p.want_weights) mapped.w[n] = rb->w[m];
      wtol[n] = ta.w[n] + tb.w[m];
    }
  Checker k(impl, c);
  k.compare("out", out_shape(c.p), ra->out, mapped.out, add(ta.out, tb.out));
  if (c.p.want_lse) k.compare("lse", lse_shape(c.p), ra->lse, mapped.lse, add(ta.lse, tb.lse));
  if (c.p.want_weights) k.compare("weights", w_shape(c.p), ra->w, mapped.w, wtol);
  return k.done();
}

}  // namespace

std::vector<Property> model_properties() {
  return {
      {"sink_neg_inf_is_none", "a sink of -inf on every head equals no sinks", prep_sinks, sink_neg_inf_is_none},
      {"sink_is_zero_value_key", "a sink equals one more key with score = sink and a zero value", prep_sink_key,
       sink_is_zero_value_key},
  };
}

}  // namespace attncheck::prop
