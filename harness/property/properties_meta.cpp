// Metamorphic properties: an implementation compared with itself on transformed cases (permuted keys or queries,
// shifted bias, GQA expanded to MHA, masks removed and renormalised, positional masks materialised, keys split and
// merged through lse, queries sliced). Two runs each within the tolerance model of the exact result are within
// the sum of their tolerances of each other; the transformed cases have the same error scales as the original.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "prop_util.hpp"

namespace attncheck::prop {

Outcome compare_pair(const Impl& impl, const Case& a, const Ran& ra, const Ran& rb_mapped) {
  const Tol t = tolerances(impl, a);
  Checker k(impl, a);
  k.compare("out", out_shape(a.p), ra.out, rb_mapped.out, add(t.out, t.out));
  if (a.p.want_lse) k.compare("lse", lse_shape(a.p), ra.lse, rb_mapped.lse, add(t.lse, t.lse));
  if (a.p.want_weights) k.compare("weights", w_shape(a.p), ra.w, rb_mapped.w, add(t.w, t.w));
  return k.done();
}

namespace {

// Element (o, n, x) of a result computed on permuted data belongs at (o, perm[n], x) of the original.
std::vector<double> unpermute(const std::vector<double>& v, int64_t outer, int64_t L, int64_t inner,
                              const std::vector<int64_t>& perm) {
  std::vector<double> r(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t n = 0; n < L; ++n)
      for (int64_t x = 0; x < inner; ++x)
        r[static_cast<size_t>((o * L + perm[static_cast<size_t>(n)]) * inner + x)] =
            v[static_cast<size_t>((o * L + n) * inner + x)];
  return r;
}

std::vector<int64_t> make_perm(int64_t n, SeededChooser& r) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (r.pick(0, 2) == 0) {
    std::reverse(perm.begin(), perm.end());
  } else {
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(r.pick(0, i))]);
  }
  return perm;
}

// ---- key/value permutation invariance, query permutation equivariance ------------------------------------
Outcome kv_permutation(const Impl& impl, const Case& c0) {
  const Case c = canonical(c0);
  SeededChooser rng(c.spec.seed ^ 0x4b);
  const auto perm = make_perm(c.p.Lk, rng);
  const Case d = permute_keys(c, perm);
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  Ran back = *rb;
  if (c.p.want_weights) back.w = unpermute(rb->w, c.p.B * c.p.Hq * c.p.Lq, c.p.Lk, 1, perm);
  return compare_pair(impl, c, *ra, back);
}

Outcome query_permutation(const Impl& impl, const Case& c0) {
  const Case c = canonical(c0);
  SeededChooser rng(c.spec.seed ^ 0x51);
  const auto perm = make_perm(c.p.Lq, rng);
  const Case d = permute_queries(c, perm);
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  const int64_t heads = c.p.B * c.p.Hq;
  Ran back;
  back.out = unpermute(rb->out, heads, c.p.Lq, c.p.Dv, perm);
  if (c.p.want_lse) back.lse = unpermute(rb->lse, heads, c.p.Lq, 1, perm);
  if (c.p.want_weights) back.w = unpermute(rb->w, heads, c.p.Lq, c.p.Lk, perm);
  return compare_pair(impl, c, *ra, back);
}

// ---- shift invariance: a per-row constant added to the bias changes nothing (lse moves by it) -------------
Outcome shift_invariance(const Impl& impl, const Case& c) {
  if (!impl.capabilities().bias) return Outcome::unsup("additive bias not supported");
  const Problem& p = c.p;
  Case d = c;
  d.p.bias_shape = std::array<int64_t, 4>{p.B, p.Hq, p.Lq, p.Lk};
  // bias + shift must be exact, or the two cases differ by the bias rounding: fp64 problems get an fp64 bias
  // (the sum of two fp32 values is exact in fp64); for the others that rounding is within the score error.
  if (p.dtype == DType::f64) d.p.bias_dtype = DType::f64;
  d.in.bias = Tensor(d.p.bias_dtype, {p.B, p.Hq, p.Lq, p.Lk});
  SeededChooser rng(c.spec.seed ^ 0x5f);
  std::vector<double> shift(static_cast<size_t>(p.B * p.Hq * p.Lq));
  for (auto& s : shift) s = static_cast<float>(30.0 * (2.0 * (rng.next() >> 11) * 0x1p-53 - 1.0));
  for (int64_t b = 0, row = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i, ++row)
        for (int64_t j = 0; j < p.Lk; ++j)
          d.in.bias->put(b, h, i, j,
                         (c.in.bias ? c.in.bias->get_offset(broadcast_offset(*c.in.bias, b, h, i, j)) : 0.0) +
                             shift[static_cast<size_t>(row)]);
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  const Tol ta = tolerances(impl, c), tb = tolerances(impl, d);
  Checker k(impl, c);
  k.compare("out", out_shape(p), ra->out, rb->out, add(ta.out, tb.out));
  if (p.want_lse) {
    std::vector<double> unshifted = rb->lse;
    for (int64_t b = 0, row = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i, ++row)
          if (!row_fully_masked(p, c.in, b, h, i))
            unshifted[static_cast<size_t>(row)] -= shift[static_cast<size_t>(row)];
    k.compare("lse", lse_shape(p), ra->lse, unshifted, add(ta.lse, tb.lse));
  }
  if (p.want_weights) k.compare("weights", w_shape(p), ra->w, rb->w, add(ta.w, tb.w));
  return k.done();
}

// ---- GQA equals MHA with each KV head repeated (repeat-interleave: query head h reads KV head h / group) ---
void prep_gqa(CaseSpec& s) {
  if (s.Hq == s.Hkv) s.Hq = s.Hkv * 2;
}

Outcome gqa_equals_mha(const Impl& impl, const Case& c) {
  if (c.p.Hq == c.p.Hkv)
    return Outcome::unsup(impl.capabilities().gqa ? "Hq == Hkv after the size budget"
                                                  : "GQA (Hq != Hkv) not supported");
  Case d = c;
  d.p.Hkv = c.p.Hq;
  d.in.k = make_qkv(d.p, 1), d.in.v = make_qkv(d.p, 2);
  for (int64_t b = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hq; ++h)
      for (int64_t j = 0; j < c.p.Lk; ++j) {
        for (int64_t e = 0; e < c.p.Dqk; ++e) d.in.k.put(b, h, j, e, c.in.k.at(b, h / c.p.group_size(), j, e));
        for (int64_t e = 0; e < c.p.Dv; ++e) d.in.v.put(b, h, j, e, c.in.v.at(b, h / c.p.group_size(), j, e));
      }
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  return compare_pair(impl, c, *ra, *rb);
}

// ---- -inf masking equals softmax over all keys, masked weights removed, renormalised ----------------------
void prep_masked(CaseSpec& s) {
  s.finite_fill = false;
  if (!s.mask_kind && !s.causal) {
    if (s.seed & 1)
      s.causal = true;
    else
      s.mask_kind = 1;
  }
}

Outcome mask_after_softmax(const Impl& impl, const Case& c0) {
  if (!c0.p.want_weights) return Outcome::unsup("weights output not supported");
  Case m = canonical(c0);
  depoison(m);
  if (!m.in.mask) return Outcome::unsup("no mask in this case (masks not supported)");
  Case u = m;
  u.p.mask_shape.reset(), u.in.mask.reset();
  RUN_OR_UNSUP(rm, impl, m);
  RUN_OR_UNSUP(ru, impl, u);
  const Tol tm = tolerances(impl, m), tu = tolerances(impl, u);
  const Problem& p = m.p;
  std::vector<double> e = rm->w, tol(e.size(), 0.0);
  for (int64_t row = 0; row < p.B * p.Hq * p.Lq; ++row) {
    double sum = 0, sum_ref = 0, sum_tol = 0;
    for (int64_t j = 0; j < p.Lk; ++j) {
      const size_t n = static_cast<size_t>(row * p.Lk + j);
      if (!m.in.mask->get_offset(row * p.Lk + j)) continue;
      sum += ru->w[n], sum_ref += tu.ref.weights[n], sum_tol += tu.w[n];
    }
    if (!(sum_ref > 1e-30)) continue;  // fully masked, or every visible weight underflows without the mask
    for (int64_t j = 0; j < p.Lk; ++j) {
      const size_t n = static_cast<size_t>(row * p.Lk + j);
      const bool vis = m.in.mask->get_offset(row * p.Lk + j) != 0;
      e[n] = vis ? ru->w[n] / sum : 0.0;
      tol[n] = tm.w[n] + (vis ? (tu.w[n] + e[n] * sum_tol) / sum : 0.0);
    }
  }
  Checker k(impl, m);
  k.compare("weights", w_shape(p), e, rm->w, tol);
  return k.done();
}

// ---- bottom-right causal equals the materialised mask j <= i + Lk_b - Lq --------------------------------
void prep_bottom_right(CaseSpec& s) {
  s.causal = true;
  s.alignment = Alignment::bottom_right;
  if (s.Lq == s.Lk) s.Lk = s.seed & 1 ? std::max<int64_t>(1, s.Lq / 2) : s.Lq * 2 + 1;
}

Outcome bottom_right_materialised(const Impl& impl, const Case& c) {
  if (!c.p.causal || c.p.alignment != Alignment::bottom_right)
    return Outcome::unsup("bottom-right causal alignment not supported");
  const Case d = canonical(c);
  RUN_OR_UNSUP(ra, impl, c);
  RUN_OR_UNSUP(rb, impl, d);
  return compare_pair(impl, c, *ra, *rb);
}

// ---- keys split in two, partial results merged through their lse, equal the full result -----------------
void prep_split(CaseSpec& s) {
  s.finite_fill = false;
  s.want_lse = true;
  if (s.Lk < 2) s.Lk = 2;
}

Outcome split_keys_merge(const Impl& impl, const Case& c0) {
  if (!c0.p.want_lse) return Outcome::unsup("lse output not supported");
  if (c0.p.Lk < 2) return Outcome::unsup("Lk < 2");
  const Case c = canonical(c0);
  SeededChooser rng(c.spec.seed ^ 0x5b);
  int64_t cut = rng.pick(1, c.p.Lk - 1);
  for (int64_t tile : {16, 32, 64})  // prefer a tile boundary when there is one
    if (tile < c.p.Lk && rng.pick(0, 1)) cut = tile;
  const Case a = slice_keys(c, 0, cut), b = slice_keys(c, cut, c.p.Lk);
  RUN_OR_UNSUP(rf, impl, c);
  RUN_OR_UNSUP(ra, impl, a);
  RUN_OR_UNSUP(rb, impl, b);
  const Tol tf = tolerances(impl, c), ta = tolerances(impl, a), tb = tolerances(impl, b);
  const Problem& p = c.p;
  std::vector<double> eo = rf->out, to(eo.size(), 0.0), el = rf->lse, tl(el.size(), 0.0);
  for (int64_t row = 0; row < p.B * p.Hq * p.Lq; ++row) {
    const size_t r = static_cast<size_t>(row);
    const double la = ra->lse[r], lb = rb->lse[r];
    if (la == -HUGE_VAL && lb == -HUGE_VAL) continue;  // fully masked: the policy property judges it
    const double L = std::max(la, lb) + std::log(std::exp(la - std::max(la, lb)) + std::exp(lb - std::max(la, lb)));
    const double wa = la == -HUGE_VAL ? 0.0 : std::exp(la - L), wb = lb == -HUGE_VAL ? 0.0 : std::exp(lb - L);
    const double dl = std::max(wa > 0 ? ta.lse[r] : 0.0, wb > 0 ? tb.lse[r] : 0.0);
    el[r] = L;
    tl[r] = tf.lse[r] + dl;
    for (int64_t d = 0; d < p.Dv; ++d) {
      const size_t n = static_cast<size_t>(row * p.Dv + d);
      const double oa = wa > 0 ? ra->out[n] : 0.0, ob = wb > 0 ? rb->out[n] : 0.0;
      eo[n] = wa * oa + wb * ob;
      // each part within its tolerance; the merge factors exp(l - L) carry the lse errors (2*dl relative)
      to[n] = tf.out[n] + (wa > 0 ? wa * ta.out[n] : 0.0) + (wb > 0 ? wb * tb.out[n] : 0.0) +
              (wa * std::abs(oa) + wb * std::abs(ob)) * 2 * dl;
    }
  }
  Checker k(impl, c);
  k.compare("out", out_shape(p), eo, rf->out, to);
  k.compare("lse", lse_shape(p), el, rf->lse, tl);
  return k.done();
}

// ---- queries computed in two slices equal the whole -------------------------------------------------------
void prep_slices(CaseSpec& s) {
  if (s.Lq < 2) s.Lq = 2;
}

Outcome query_slices(const Impl& impl, const Case& c0) {
  if (c0.p.Lq < 2) return Outcome::unsup("Lq < 2");
  const Case c = canonical(c0);
  SeededChooser rng(c.spec.seed ^ 0x51ce);
  const int64_t cut = rng.pick(1, c.p.Lq - 1);
  const Case a = slice_queries(c, 0, cut), b = slice_queries(c, cut, c.p.Lq);
  RUN_OR_UNSUP(rf, impl, c);
  RUN_OR_UNSUP(ra, impl, a);
  RUN_OR_UNSUP(rb, impl, b);
  const Problem& p = c.p;
  Ran joined;
  auto join = [&](std::vector<double>& dst, const std::vector<double>& x, const std::vector<double>& y, int64_t inner) {
    for (int64_t hd = 0; hd < p.B * p.Hq; ++hd) {
      dst.insert(dst.end(), x.begin() + hd * cut * inner, x.begin() + (hd + 1) * cut * inner);
      dst.insert(dst.end(), y.begin() + hd * (p.Lq - cut) * inner, y.begin() + (hd + 1) * (p.Lq - cut) * inner);
    }
  };
  join(joined.out, ra->out, rb->out, p.Dv);
  if (p.want_lse) join(joined.lse, ra->lse, rb->lse, 1);
  if (p.want_weights) join(joined.w, ra->w, rb->w, p.Lk);
  return compare_pair(impl, c, *rf, joined);
}

}  // namespace

std::vector<Property> metamorphic_properties() {
  return {
      {"kv_permutation", "permuting keys/values (mask, bias, dropout alike) changes nothing", prep_none,
       kv_permutation},
      {"query_permutation", "permuting queries permutes the outputs alike", prep_none, query_permutation},
      {"shift_invariance", "a per-row constant added to the bias changes nothing but lse", prep_none, shift_invariance},
      {"gqa_equals_mha", "GQA equals MHA with KV heads repeat-interleaved", prep_gqa, gqa_equals_mha},
      {"mask_after_softmax", "-inf masking equals unmasked softmax, masked weights dropped, renormalised", prep_masked,
       mask_after_softmax},
      {"bottom_right_materialised", "bottom-right causal equals the materialised mask j <= i + Lk - Lq",
       prep_bottom_right, bottom_right_materialised},
      {"split_keys_merge", "keys split in two and merged through lse equal the full result", prep_split,
       split_keys_merge},
      {"query_slices", "queries computed in two slices equal the whole", prep_slices, query_slices},
  };
}

}  // namespace attncheck::prop
