// Invariants of the problem model's features beyond the plain softmax (docs/problem-model.md), each an implementation
// compared with itself on an equivalent case: a sink of -inf is no sink; a sink is a key of score `sink` whose value is
// zero; raw scores agree with the weights and lse, and their stages with each other; append then attend equals attend
// over the concatenation; packed sequences equal separate calls; a paged cache equals the contiguous K/V; fp8 codes
// shifted by 2^k against their descales change nothing, and equal the values they stand for.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <tuple>

#include "attncheck/mods.hpp"
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
// (its score is scale·0, kept 0 by the logit stage, plus the bias: exactly the sink), kept by dropout; and no sinks.
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
  const Tol ta = tolerances(impl, c), tb = tolerances(impl, d);
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

// ---- raw-score outputs ------------------------------------------------------------------------------------
// Raw stages read every key by definition, so poison (NaN in keys no query sees) would only test poison.
void prep_scores(CaseSpec& s) {
  s.scores_out = ScoresOut::masked;
  s.poison = false;
}

// The softmax's input and its outputs agree: weights = exp(masked score - lse) on every row that is not fully
// masked (the sink, if any, is in lse), within the weights' tolerance plus the scores' and lse's carried over.
Outcome scores_softmax(const Impl& impl, const Case& c0) {
  const Case c = with_stats(impl, c0);
  if (c.p.scores_out != ScoresOut::masked) return Outcome::unsup("raw-score output not supported");
  if (!c.p.want_weights || !c.p.want_lse) return Outcome::unsup("needs weights and lse outputs");
  RUN_OR_UNSUP(r, impl, c);
  const Tol t = tolerances(impl, c);
  std::vector<double> e(r->w.size()), tol(r->w.size());
  for (int64_t b = 0, row = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hq; ++h)
      for (int64_t i = 0; i < c.p.Lq; ++i, ++row)
        for (int64_t j = 0; j < c.p.Lk; ++j) {
          const size_t n = static_cast<size_t>(row * c.p.Lk + j);
          const bool empty = row_fully_masked(c.p, c.in, b, h, i);
          e[n] = empty ? r->w[n] : std::exp(r->s[n] - r->lse[static_cast<size_t>(row)]);
          tol[n] = empty ? 0.0 : t.w[n] + 1.01 * t.ref.weights[n] * (t.s[n] + t.lse[static_cast<size_t>(row)]);
        }
  Checker k(impl, c);
  k.compare("weights vs exp(scores - lse)", w_shape(c.p), e, r->w, tol);
  return k.done();
}

void prep_stages(CaseSpec& s) {
  prep_scores(s);
  if (s.logit.empty() && s.seed % 2)  // the capped stage differs from the scaled one
    for (const ModEntry& m : logit_modifications()) s.logit.emplace_back(m.name, m.examples[0]);
}

// The stages follow from each other: capped = the logit stage of scaled (mods.hpp); masked = capped + bias where
// visible, the fill elsewhere (exactly). Three runs of the same case, one per stage.
Outcome scores_stages(const Impl& impl, const Case& c) {
  if (c.p.scores_out == ScoresOut::none) return Outcome::unsup("raw-score output not supported");
  Case at[3] = {c, c, c};
  const ScoresOut stages[3] = {ScoresOut::scaled, ScoresOut::capped, ScoresOut::masked};
  std::optional<Ran> r[3];
  Tol t[3];
  for (int k = 0; k < 3; ++k) {
    at[k].p.scores_out = stages[k];
    std::string why;
    if (!(r[k] = run(impl, at[k], &why))) return Outcome::unsup(why);
    t[k] = tolerances(impl, at[k]);
  }
  const Problem& p = c.p;
  const double fill = p.fill == MaskFill::finite ? p.fill_value : kNegInf;
  const ModSet mods(p);
  std::vector<double> capped(r[0]->s.size()), masked(capped.size()), tol_c(capped.size()), tol_m(capped.size());
  for (int64_t b = 0, row = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i, ++row)
        for (int64_t j = 0; j < p.Lk; ++j) {
          const size_t n = static_cast<size_t>(row * p.Lk + j);
          const double x = r[0]->s[n];
          capped[n] = mods.has_logit() ? mods.logit(ModAt{b, h, i, p.row_keys(b, i).diag, j}, x) : x;
          tol_c[n] = t[1].s[n] + t[0].s[n];  // the logit stage's slope is at most 1 (its slope_bound)
          const bool vis = visible(p, c.in, b, h, i, j);
          const double bias = c.in.bias ? c.in.bias->get_offset(broadcast_offset(*c.in.bias, b, h, i, j)) : 0.0;
          masked[n] = vis ? r[1]->s[n] + bias : fill;
          tol_m[n] = vis ? t[2].s[n] + t[1].s[n] : 0.0;
        }
  Checker k(impl, c);
  k.compare("capped vs logit stage(scaled)", w_shape(p), capped, r[1]->s, tol_c);
  k.compare("masked vs capped + bias, or the fill", w_shape(p), masked, r[2]->s, tol_m);
  return k.done();
}

// The case with its problem and inputs replaced by an equivalent pair (attend_over_present, gather_pages, ...).
Case as(const Case& c, Attended a) {
  Case d = c;
  d.p = std::move(a.p), d.in = std::move(a.in);
  return d;
}

// ---- KV-cache append --------------------------------------------------------------------------------------
void prep_append(CaseSpec& s) {
  s.kv_append = true;
  s.Lk = std::max<int64_t>(s.Lk, 2);  // at least one past and one new token
}

// Append then attend equals attend over the concatenation: present is concat(past, new) exactly (NaN poison
// included), and the outputs match the same implementation's run on the whole sequence without a past.
Outcome append_equals_concat(const Impl& impl, const Case& c) {
  if (c.p.past_len == 0) return Outcome::unsup("KV-cache append not supported");
  const Case whole = as(c, attend_over_present(c.p, c.in));
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, whole);
  Checker k(impl, c);
  const std::vector<int64_t> kshape{c.p.B, c.p.Hkv, c.p.Lk, c.p.Dqk}, vshape{c.p.B, c.p.Hkv, c.p.Lk, c.p.Dv};
  k.compare("present_k = concat(past_k, k)", kshape, whole.in.k.to_double(), ra->present_k,
            std::vector<double>(ra->present_k.size(), 0.0));
  k.compare("present_v = concat(past_v, v)", vshape, whole.in.v.to_double(), ra->present_v,
            std::vector<double>(ra->present_v.size(), 0.0));
  if (k.result.kind == Outcome::fail) return k.done();
  return compare_pair(impl, whole, *rb, *ra);
}

// ---- packed variable-length sequences -----------------------------------------------------------------------
void prep_varlen(CaseSpec& s) {
  s.varlen = true;
  s.B = 1;
  s.key_padding = s.per_batch_offsets = false;
  s.poison = false;  // poison is placed on keys no query sees before the packing is drawn, which moves diagonals
  if (s.fully_masked == FullyMasked::uniform) s.fully_masked = FullyMasked::zero;  // undefined without keys
}

// Varlen equals separate calls per sequence: each sequence's rows of the packed run match the same implementation
// on that sequence alone (within both tolerances), keys of other sequences weigh exactly 0, and rows of a sequence
// without keys hold the reference's policy values exactly.
Outcome varlen_equals_separate(const Impl& impl, const Case& c0) {
  const Case c = with_stats(impl, c0);
  if (c.p.cu_seqlens_q.empty()) return Outcome::unsup("variable-length packed sequences not supported");
  RUN_OR_UNSUP(packed, impl, c);
  const Tol tp = tolerances(impl, c);
  const Problem& p = c.p;
  // Rows of sequences without keys keep the reference and the packed case's own tolerance.
  std::vector<double> e_out = tp.ref.out, t_out = tp.out, e_lse = tp.ref.lse, t_lse = tp.lse;
  std::vector<double> e_w(static_cast<size_t>(p.Hq * p.Lq * p.Lk), 0.0), t_w(e_w.size(), 0.0);
  if (p.want_weights) e_w = tp.ref.weights;  // empty-key rows; every other in-block entry is replaced below
  for (int64_t s = 0; s < p.sequences(); ++s) {
    const size_t u = static_cast<size_t>(s);
    const int64_t q0 = p.cu_seqlens_q[u], k0 = p.cu_seqlens_k[u];
    if (p.cu_seqlens_q[u + 1] == q0 || p.cu_seqlens_k[u + 1] == k0) continue;
    const Case one = as(c, sequence_problem(p, c.in, s));
    RUN_OR_UNSUP(alone, impl, one);
    const Tol ts = tolerances(impl, one);
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < one.p.Lq; ++i) {
        const size_t rp = static_cast<size_t>(h * p.Lq + q0 + i), rs = static_cast<size_t>(h * one.p.Lq + i);
        for (int64_t d = 0; d < p.Dv; ++d) {
          const size_t np = rp * static_cast<size_t>(p.Dv) + static_cast<size_t>(d),
                       ns = rs * static_cast<size_t>(p.Dv) + static_cast<size_t>(d);
          e_out[np] = alone->out[ns], t_out[np] = tp.out[np] + ts.out[ns];
        }
        if (p.want_lse) e_lse[rp] = alone->lse[rs], t_lse[rp] = tp.lse[rp] + ts.lse[rs];
        for (int64_t j = 0; j < one.p.Lk && p.want_weights; ++j) {
          const size_t np = rp * static_cast<size_t>(p.Lk) + static_cast<size_t>(k0 + j),
                       ns = rs * static_cast<size_t>(one.p.Lk) + static_cast<size_t>(j);
          e_w[np] = alone->w[ns], t_w[np] = tp.w[np] + ts.w[ns];
        }
      }
  }
  Checker k(impl, c);
  k.compare("out vs each sequence alone", out_shape(p), e_out, packed->out, t_out);
  if (p.want_lse) k.compare("lse vs each sequence alone", lse_shape(p), e_lse, packed->lse, t_lse);
  if (p.want_weights) k.compare("weights vs each sequence alone (0 across sequences)", w_shape(p), e_w, packed->w, t_w);
  return k.done();
}

// ---- paged KV cache ------------------------------------------------------------------------------------------
void prep_paged(CaseSpec& s) { s.paged = true; }

// Paged equals contiguous: the outputs equal the same implementation on the contiguous problem the pages stand for
// (gather_pages), within both tolerances. Unused pool slots hold NaN, so a read of a wrong page or slot shows.
Outcome paged_equals_contiguous(const Impl& impl, const Case& c) {
  if (c.p.page_size == 0) return Outcome::unsup("paged KV cache (block table) not supported");
  const Case flat = as(c, gather_pages(c.p, c.in));
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, flat);
  return compare_pair(impl, flat, *rb, *ra);
}

// ---- fp8 inputs ----------------------------------------------------------------------------------------------
// e4m3 or e5m2 by seed; value distributions whose codes would overflow or vanish in fp8 become normal.
void prep_fp8(CaseSpec& s) {
  s.dtype = s.seed % 2 ? DType::e5m2 : DType::e4m3;
  if (s.values == Values::beyond_fp16 || s.values == Values::mixed || s.values == Values::large_logits ||
      s.values == Values::tiny)
    s.values = Values::normal;
}

// Codes times 2^k and descale times 2^-k: the same values. k (per tensor, up to 3) keeps the largest finite code
// within the format, so every code stays exact; NaN and inf poison stay what they are. The shifts differ per tensor
// (q 1, k 2, v 3 where the codes allow), so a descale applied to the wrong tensor shows too. *shifted: any k > 0.
Case shift_fp8(const Case& c, bool* shifted) {
  Case d = c;
  const double top = c.p.dtype == DType::e4m3 ? 448.0 : 57344.0;
  auto shift = [&](Tensor& t, double& descale, int max_k) {
    double amax = 0;
    for (int64_t n = 0; n < t.numel(); ++n)
      if (std::isfinite(t.get_offset(n))) amax = std::max(amax, std::abs(t.get_offset(n)));
    int k = max_k;
    while (k > 0 && amax * std::ldexp(1.0, k) > top) --k;
    for (int64_t n = 0; n < t.numel(); ++n) t.set_offset(n, std::ldexp(t.get_offset(n), k));
    descale = std::ldexp(descale, -k);
    return k;
  };
  const int kk = shift(d.in.k, d.p.descale_k, 2), kv = shift(d.in.v, d.p.descale_v, 3);
  *shifted = shift(d.in.q, d.p.descale_q, 1) + kk + kv > 0;
  if (d.in.past_k) {  // the past shares the descales: shifted by the same k (or not at all)
    Tensor& pk = *d.in.past_k;
    for (int64_t n = 0; n < pk.numel(); ++n) pk.set_offset(n, std::ldexp(pk.get_offset(n), kk));
    Tensor& pv = *d.in.past_v;
    for (int64_t n = 0; n < pv.numel(); ++n) pv.set_offset(n, std::ldexp(pv.get_offset(n), kv));
  }
  return d;
}

// Bitwise: scaling one factor of every product by 2^k and another by 2^-k changes no rounding of a computation made
// of binary floating-point operations (away from overflow and the subnormal range), so an implementation that uses
// the descales as values gives the same bits. One that ignores, swaps, inverts or squares a descale does not,
// however close to 1 that descale is (the golden fixtures' tolerance cannot see a factor below ~2 under e5m2's
// P rounding: docs/tolerance.md#fp8).
Outcome fp8_descale_exponent(const Impl& impl, const Case& c) {
  if (!is_fp8(c.p.dtype)) return Outcome::unsup("fp8 inputs (e4m3/e5m2 with descale factors) not supported");
  bool shifted = false;
  const Case d = shift_fp8(c, &shifted);
  if (!shifted) return Outcome::unsup("no tensor's codes can be shifted by 2^k within the fp8 range");
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  Checker k(impl, c);
  for (auto [what, a, b] : {std::tuple{"out", &ra->out, &rb->out}, std::tuple{"lse", &ra->lse, &rb->lse},
                            std::tuple{"weights", &ra->w, &rb->w}, std::tuple{"scores", &ra->s, &rb->s}}) {
    if (a->size() != b->size()) {
      k.fail(std::string(what) + ": sizes differ");
      return k.done();
    }
    for (size_t n = 0; n < a->size(); ++n)
      if (!same_bits((*a)[n], (*b)[n])) {
        std::ostringstream o;
        o.precision(17);
        o << what << "[" << n << "]: " << (*a)[n] << " became " << (*b)[n]
          << " with codes times 2^k and descales times 2^-k (the same values)";
        k.fail(o.str());
        return k.done();
      }
  }
  return k.done();
}

// The fp8 case equals the same implementation on the values it stands for (dequantize: fp32 codes, descales folded
// into the scale and v), within both tolerances: a wrong decode, an ignored or misapplied descale shows.
Outcome fp8_equals_values(const Impl& impl, const Case& c) {
  if (!is_fp8(c.p.dtype)) return Outcome::unsup("fp8 inputs (e4m3/e5m2 with descale factors) not supported");
  const DType wide = impl.capabilities().dtypes.count(DType::f32) ? DType::f32 : DType::f64;
  const Case values = as(c, dequantize(c.p, c.in, wide));
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, values);
  return compare_pair(impl, c, *ra, *rb);
}

}  // namespace

std::vector<Property> model_properties() {
  return {
      {"sink_neg_inf_is_none", "a sink of -inf on every head equals no sinks", prep_sinks, sink_neg_inf_is_none},
      {"sink_is_zero_value_key", "a sink equals one more key with score = sink and a zero value", prep_sink_key,
       sink_is_zero_value_key},
      {"scores_softmax", "weights equal exp(masked scores - lse)", prep_scores, scores_softmax},
      {"scores_stages", "raw-score stages: capped = logit stage(scaled), masked = capped + bias or the fill",
       prep_stages, scores_stages},
      {"append_equals_concat",
       "KV-cache append: present = concat(past, new) exactly, and attending after the append "
       "equals attending over the concatenation",
       prep_append, append_equals_concat},
      {"varlen_equals_separate",
       "packed sequences (cu_seqlens) equal one call per sequence; other sequences' keys "
       "weigh 0",
       prep_varlen, varlen_equals_separate},
      {"paged_equals_contiguous",
       "a paged KV cache (block table, shared and unused pages) equals the contiguous "
       "K/V it stands for",
       prep_paged, paged_equals_contiguous},
      {"fp8_descale_exponent",
       "fp8: codes times 2^k with descales times 2^-k (the same values) give the same "
       "bits",
       prep_fp8, fp8_descale_exponent},
      {"fp8_equals_values", "fp8: the result equals the problem of the values the codes and descales stand for",
       prep_fp8, fp8_equals_values},
  };
}

}  // namespace attncheck::prop
