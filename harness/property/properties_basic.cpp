// Properties judged on one case: agreement with the reference, weight rows, causality (bitwise), convex hull,
// closed forms (one visible key, equal scores), the fully-masked policy and poisoning of masked slots.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "attncheck/declarations.hpp"
#include "attncheck/mods.hpp"
#include "prop_util.hpp"

namespace attncheck::prop {

// ---- agreement with the reference within the tolerance model --------------------------------------------
Outcome agreement(const Impl& impl, const Case& c) {
  std::string why;
  const auto r = run(impl, c, &why);
  if (!r) return Outcome::unsup(why);
  const Tol t = tolerances(impl, c);
  Checker k(impl, c);
  k.compare("out", out_shape(c.p), t.ref.out, r->out, t.out);
  if (c.p.want_lse) k.compare("lse", lse_shape(c.p), t.ref.lse, r->lse, t.lse);
  if (c.p.want_weights) k.compare("weights", w_shape(c.p), t.ref.weights, r->w, t.w);
  return k.done();
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string at(int64_t b, int64_t h, int64_t i) {
  return "[b=" + std::to_string(b) + ",h=" + std::to_string(h) + ",i=" + std::to_string(i) + "]";
}

// ---- weight rows sum to 1, masked weights exactly 0 ---------------------------------------------------------
Outcome weights_rows(const Impl& impl, const Case& c) {
  if (!c.p.want_weights) return Outcome::unsup("weights output not supported");
  std::string why;
  const auto r = run(impl, c, &why);
  if (!r) return Outcome::unsup(why);
  const Tol t = tolerances(impl, c);
  Checker k(impl, c);
  const int64_t Lk = c.p.Lk;
  for (int64_t b = 0, row = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hq; ++h)
      for (int64_t i = 0; i < c.p.Lq; ++i, ++row) {
        if (row_fully_masked(c.p, c.in, b, h, i)) continue;
        double sum = 0, tol = Lk * 0x1p-52;  // each stored weight within its tolerance; the sum in double
        for (int64_t j = 0; j < Lk; ++j) {
          const size_t n = static_cast<size_t>(row * Lk + j);
          sum += r->w[n];
          tol += t.w[n];
          if (!visible(c.p, c.in, b, h, i, j) && t.ref.weights[n] == 0.0 && r->w[n] != 0.0) {
            std::ostringstream o;
            o << "weights" << at(b, h, i) << "[j=" << j << "]: masked weight is " << r->w[n] << ", expected exactly 0";
            return k.fail(o.str()), k.done();
          }
        }
        k.result.ratio = std::max(k.result.ratio, std::abs(sum - 1.0) / tol);
        if (!(std::abs(sum - 1.0) <= tol)) {
          std::ostringstream o;
          o.precision(9);
          o << "weights" << at(b, h, i) << ": row sums to " << sum << ", |err| " << std::abs(sum - 1) << " > tol "
            << tol;
          return k.fail(o.str()), k.done();
        }
      }
  return k.done();
}

// ---- causality: keys/values a query cannot see never change its output (bitwise) -----------------------
void prep_causality(CaseSpec& s) {
  if (!s.causal && !s.mask_kind && !s.key_padding && s.window_left < 0 && s.window_right < 0) s.causal = true;
}

Outcome causality(const Impl& impl, const Case& c) {
  SeededChooser rng(c.spec.seed ^ 0xc0ffee);
  std::vector<char> in_s(static_cast<size_t>(c.p.Lk), 0);
  if (c.p.Lk == 1) {
    in_s[0] = 1;
  } else if (rng.pick(0, 1)) {  // a suffix: causal rows before it are blind to all of it
    for (int64_t j = rng.pick(1, c.p.Lk - 1); j < c.p.Lk; ++j) in_s[static_cast<size_t>(j)] = 1;
  } else {
    for (auto& x : in_s) x = rng.pick(0, 2) == 0;
  }
  Case d = c;
  for (int64_t b = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hkv; ++h)
      for (int64_t j = 0; j < c.p.Lk; ++j) {
        if (!in_s[static_cast<size_t>(j)]) continue;
        for (int64_t e = 0; e < c.p.Dqk; ++e) d.in.k.put(b, h, j, e, 8.0 * normal(rng));
        for (int64_t e = 0; e < c.p.Dv; ++e) d.in.v.put(b, h, j, e, 8.0 * normal(rng));
      }
  std::string why;
  const auto ra = run(impl, c, &why);
  if (!ra) return Outcome::unsup(why);
  const auto rb = run(impl, d, &why);
  if (!rb) return Outcome::unsup(why);
  Checker k(impl, c);
  int64_t blind_rows = 0;
  for (int64_t b = 0, row = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hq; ++h)
      for (int64_t i = 0; i < c.p.Lq; ++i, ++row) {
        bool blind = true;
        for (int64_t j = 0; j < c.p.Lk && blind; ++j)
          blind = !(in_s[static_cast<size_t>(j)] && visible(c.p, c.in, b, h, i, j));
        // A fully-masked row under the uniform policy averages every value, seen or not.
        if (!blind || (c.p.fully_masked == FullyMasked::uniform && row_fully_masked(c.p, c.in, b, h, i))) continue;
        ++blind_rows;
        auto check = [&](const char* what, const std::vector<double>& a, const std::vector<double>& bb, int64_t len) {
          for (int64_t e = 0; e < len; ++e) {
            const size_t n = static_cast<size_t>(row * len + e);
            if (!same_bits(a[n], bb[n])) {
              std::ostringstream o;
              o.precision(17);
              o << what << at(b, h, i) << "[" << e << "]: changed from " << a[n] << " to " << bb[n]
                << " when only keys/values this query cannot see changed";
              return k.fail(o.str());
            }
          }
          return true;
        };
        if (!check("out", ra->out, rb->out, c.p.Dv)) return k.done();
        if (c.p.want_lse && !check("lse", ra->lse, rb->lse, 1)) return k.done();
        if (c.p.want_weights && !check("weights", ra->w, rb->w, c.p.Lk)) return k.done();
      }
  (void)blind_rows;
  return k.done();
}

// ---- convex hull: out within [min_j v_jd, max_j v_jd] over keys with nonzero weight (dropout off) --------
void prep_no_dropout(CaseSpec& s) { s.dropout_p = 0; }

Outcome convex_hull(const Impl& impl, const Case& c) {
  std::string why;
  const auto r = run(impl, c, &why);
  if (!r) return Outcome::unsup(why);
  const Tol t = tolerances(impl, c);
  const auto v = c.in.v.to_double();
  Checker k(impl, c);
  const int64_t Lk = c.p.Lk, Dv = c.p.Dv;
  for (int64_t b = 0, row = 0; b < c.p.B; ++b)
    for (int64_t h = 0; h < c.p.Hq; ++h)
      for (int64_t i = 0; i < c.p.Lq; ++i, ++row) {
        if (row_fully_masked(c.p, c.in, b, h, i)) continue;
        const int64_t kh = c.p.kv_head(h);
        for (int64_t d = 0; d < Dv; ++d) {
          double lo = kInf, hi = -kInf;
          for (int64_t j = 0; j < Lk; ++j)
            if (t.ref.weights[static_cast<size_t>(row * Lk + j)] > 0) {
              const double x = v[static_cast<size_t>(((b * c.p.Hkv + kh) * Lk + j) * Dv + d)];
              lo = std::min(lo, x), hi = std::max(hi, x);
            }
          const size_t n = static_cast<size_t>(row * Dv + d);
          const double o = r->out[n], tol = t.out[n];
          const double outside = std::max({0.0, lo - o, o - hi});
          k.result.ratio = std::max(k.result.ratio, tol > 0 ? outside / tol : (outside > 0 ? HUGE_VAL : 0.0));
          if (!(outside <= tol)) {
            std::ostringstream ss;
            ss.precision(9);
            ss << "out" << at(b, h, i) << "[d=" << d << "] = " << o << " outside the hull [" << lo << ", " << hi
               << "] of the visible values by " << outside << " > tol " << tol;
            return k.fail(ss.str()), k.done();
          }
        }
      }
  return k.done();
}

// ---- closed form: one visible key gives that value ------------------------------------------------------
Outcome one_visible_key(const Impl& impl, const Case& c0) {
  const Capabilities caps = impl.capabilities();
  Case c = c0;
  depoison(c);
  Problem& p = c.p;
  p.causal = false, p.alignment = Alignment::top_left, p.causal_offsets.clear(), p.window_left = p.window_right = -1;
  p.key_lengths.clear();
  p.bias_shape.reset(), c.in.bias.reset();
  SeededChooser rng(c.spec.seed ^ 0x0e);
  std::vector<int64_t> chosen(static_cast<size_t>(p.B * p.Hq * p.Lq), 0);
  if (caps.bool_mask) {
    p.mask_shape = std::array<int64_t, 4>{p.B, p.Hq, p.Lq, p.Lk};
    c.in.mask = Tensor(DType::u8, {p.B, p.Hq, p.Lq, p.Lk});
    for (auto& j : chosen) j = rng.pick(0, p.Lk - 1);
    for (size_t row = 0; row < chosen.size(); ++row)
      c.in.mask->set_offset(static_cast<int64_t>(row) * p.Lk + chosen[row], 1);
  } else if (caps.key_padding) {
    p.mask_shape.reset(), c.in.mask.reset();
    p.key_lengths.assign(static_cast<size_t>(p.B), 1);  // every query sees key 0 only
  } else {
    return Outcome::unsup("neither boolean masks nor key padding: cannot make exactly one key visible");
  }
  std::string why;
  const auto r = run(impl, c, &why);
  if (!r) return Outcome::unsup(why);
  const Tol t = tolerances(impl, c);
  const double u = p.dtype == DType::f64 ? unit_roundoff(DType::f64) : unit_roundoff(DType::f32);
  std::vector<double> eo(r->out.size()), to(r->out.size()), el(t.ref.lse.size()), ew(t.ref.weights.size(), 0.0);
  const auto q = c.in.q.to_double(), kk = c.in.k.to_double(), v = c.in.v.to_double();
  const double scale = p.effective_scale();
  const ModSet mods(p);
  for (int64_t b = 0, row = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i, ++row) {
        const int64_t j = chosen[static_cast<size_t>(row)], kh = p.kv_head(h);
        for (int64_t d = 0; d < p.Dv; ++d) {  // exactly that value: weight exp(0)/1 = 1 in any precision
          const double x = v[static_cast<size_t>(((b * p.Hkv + kh) * p.Lk + j) * p.Dv + d)];
          eo[static_cast<size_t>(row * p.Dv + d)] = x;
          to[static_cast<size_t>(row * p.Dv + d)] = 2 * u * std::abs(x);
        }
        double s = 0;
        for (int64_t d = 0; d < p.Dqk; ++d)
          s += q[static_cast<size_t>(row * p.Dqk + d)] *
               kk[static_cast<size_t>(((b * p.Hkv + kh) * p.Lk + j) * p.Dqk + d)];
        s *= scale;
        if (mods.has_logit()) s = mods.logit(ModAt{b, h, i, p.row_keys(b, i).diag, j}, s);
        el[static_cast<size_t>(row)] = s;  // lse of a single term is its score
        ew[static_cast<size_t>(row * p.Lk + j)] = 1.0;
      }
  Checker k(impl, c);
  k.compare("out", out_shape(p), eo, r->out, to);
  if (p.want_lse) k.compare("lse", lse_shape(p), el, r->lse, t.lse);
  if (p.want_weights) k.compare("weights", w_shape(p), ew, r->w, t.w);
  return k.done();
}

// ---- closed form: equal scores give the mean of the visible values -----------------------------------
void prep_equal(CaseSpec& s) { s.dropout_p = 0, s.bias_kind = 0; }

Outcome equal_scores(const Impl& impl, const Case& c0) {
  Case c = c0;
  depoison(c);
  c.p.bias_shape.reset(), c.in.bias.reset();
  const Problem& p = c.p;
  for (int64_t b = 0; b < p.B; ++b)  // every key of a head equals its key 0: all scores of a row are equal
    for (int64_t h = 0; h < p.Hkv; ++h)
      for (int64_t j = 1; j < p.Lk; ++j)
        for (int64_t d = 0; d < p.Dqk; ++d) c.in.k.put(b, h, j, d, c.in.k.at(b, h, 0, d));
  std::string why;
  const auto r = run(impl, c, &why);
  if (!r) return Outcome::unsup(why);
  const Tol t = tolerances(impl, c);
  std::vector<double> e = t.ref.out;  // fully-masked rows: the policy (checked by fully_masked_policy)
  for (int64_t b = 0, row = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i, ++row) {
        if (row_fully_masked(p, c.in, b, h, i)) continue;
        int64_t n = 0;  // the mean in long double: its own rounding must stay far below the tolerance
        std::vector<long double> mean(static_cast<size_t>(p.Dv), 0.0L);
        for (int64_t j = 0; j < p.Lk; ++j)
          if (visible(p, c.in, b, h, i, j)) {
            ++n;
            for (int64_t d = 0; d < p.Dv; ++d) mean[static_cast<size_t>(d)] += c.in.v.at(b, p.kv_head(h), j, d);
          }
        for (int64_t d = 0; d < p.Dv; ++d)
          e[static_cast<size_t>(row * p.Dv + d)] = static_cast<double>(mean[static_cast<size_t>(d)] / n);
      }
  Checker k(impl, c);
  k.compare("out", out_shape(p), e, r->out, t.out);
  return k.done();
}

// ---- fully-masked rows follow the declared policy exactly ----------------------------------------------
void prep_empty(CaseSpec& s) { s.empty_rows = true; }

Outcome fully_masked_policy(const Impl& impl, const Case& c) {
  const Problem& p = c.p;
  std::string why;
  const auto r = run(impl, c, &why);
  if (!r) return Outcome::unsup(why);
  const Tol t = tolerances(impl, c);
  std::vector<double> eo = r->out, to(eo.size(), 0.0), el = r->lse, tl(el.size(), 0.0), ew = r->w, tw(ew.size(), 0.0);
  int64_t rows = 0;
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  for (int64_t b = 0, row = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i, ++row) {
        if (!row_fully_masked(p, c.in, b, h, i)) continue;
        ++rows;
        for (int64_t d = 0; d < p.Dv; ++d) {
          const size_t n = static_cast<size_t>(row * p.Dv + d);
          long double mean = 0;  // uniform: 1/Lk over every key, dropout applied like any weight
          bool any_kept = false;
          for (int64_t j = 0; j < p.Lk; ++j) {
            const bool kept = !c.in.keep || c.in.keep->get_offset(row * p.Lk + j) != 0;
            any_kept = any_kept || kept;
            if (kept) mean += c.in.v.at(b, p.kv_head(h), j, d) * keep_scale / static_cast<double>(p.Lk);
          }
          // nan: NaN weights reach the output through every kept key; a dropped key contributes nothing, so a row
          // whose every key is dropped gives 0 (docs/problem-model.md, "zero weight contributes nothing").
          const double nan_out = any_kept ? kNaN : 0.0;
          eo[n] = p.fully_masked == FullyMasked::nan    ? nan_out
                  : p.fully_masked == FullyMasked::zero ? 0.0
                                                        : static_cast<double>(mean);
          to[n] = p.fully_masked == FullyMasked::uniform ? t.out[n] : 0.0;
        }
        if (p.want_lse) {
          el[static_cast<size_t>(row)] = p.fill == MaskFill::neg_inf ? -kInf : p.fill_value + std::log(double(p.Lk));
          tl[static_cast<size_t>(row)] = t.lse[static_cast<size_t>(row)];
        }
        if (p.want_weights)
          for (int64_t j = 0; j < p.Lk; ++j) {
            const size_t n = static_cast<size_t>(row * p.Lk + j);
            ew[n] = p.fully_masked == FullyMasked::nan    ? kNaN
                    : p.fully_masked == FullyMasked::zero ? 0.0
                                                          : 1.0 / double(p.Lk);
            tw[n] = t.w[n];
          }
      }
  if (!rows) return Outcome::unsup("no fully-masked row can be made within this implementation's capabilities");
  Checker k(impl, c);
  k.compare("out", out_shape(p), eo, r->out, to);
  if (p.want_lse) k.compare("lse", lse_shape(p), el, r->lse, tl);
  if (p.want_weights) k.compare("weights", w_shape(p), ew, r->w, tw);
  return k.done();
}

// ---- no poisoning: NaN/Inf/1e30 in slots no query sees never reach an output -----------------------------
void prep_poison(CaseSpec& s) {
  s.poison = true;
  s.key_padding = true;
  if (!s.mask_kind) s.mask_kind = 3;
  if (s.fully_masked == FullyMasked::uniform) s.fully_masked = FullyMasked::zero;
}

Outcome no_poisoning(const Impl& impl, const Case& c) {
  if (impl.declarations().masked_inputs == MaskedInputs::finite_required)
    return Outcome::unsup("declares masked_inputs: finite-required (its contract needs finite inputs everywhere)");
  int64_t poisoned = 0;
  for (const Tensor* t : {&c.in.k, &c.in.v})
    for (int64_t n = 0; n < t->numel(); ++n)
      poisoned += !std::isfinite(t->get_offset(n)) || std::abs(t->get_offset(n)) > 1e6;
  if (!poisoned) return Outcome::unsup("no key is hidden from every query (needs key padding or a column mask)");
  return agreement(impl, c);  // the poison must change nothing: the same verdict as on clean inputs
}

}  // namespace

std::vector<Property> basic_properties() {
  return {
      {"agreement", "out, lse and weights agree with the reference within the tolerance model", prep_none, agreement},
      {"weights_rows", "weight rows sum to 1; masked weights are exactly 0", prep_none, weights_rows},
      {"causality", "changing keys/values a query cannot see never changes its outputs (bitwise)", prep_causality,
       causality},
      {"convex_hull", "each output lies in the hull of the values with nonzero weight (dropout off)", prep_no_dropout,
       convex_hull},
      {"one_visible_key", "a single visible key gives exactly its value; lse = its score", prep_no_dropout,
       one_visible_key},
      {"equal_scores", "equal scores give the mean of the visible values", prep_equal, equal_scores},
      {"fully_masked_policy", "rows with no visible key follow the declared policy exactly", prep_empty,
       fully_masked_policy},
      {"no_poisoning", "NaN/Inf/huge values in slots no query sees never reach an output", prep_poison, no_poisoning},
  };
}

}  // namespace attncheck::prop
