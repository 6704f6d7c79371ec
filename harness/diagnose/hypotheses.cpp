// Structural hypotheses: the reference on a derived problem is what a kernel with that bug computes (diagonal one
// key off, the other causal alignment, window one key wider, tiled GQA head map, last tile padded with score 0 or
// skipped, masks ignored, a finite sentinel, the logit stage after masking, other default scale, swapped layout...).
#include "hypotheses.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "attncheck/block_mask.hpp"
#include "attncheck/rope.hpp"
#include "derive.hpp"
#include "diagnosis.hpp"

namespace attncheck::diagnose {

void Scorer::add(const std::string& tag, const std::string& what, const std::vector<double>& pred_out,
                 const std::vector<double>* pred_lse, const std::vector<double>* pred_w,
                 const std::vector<double>* tol_out, const std::vector<double>* tol_lse) {
  const int64_t total = s.n_bad_out + s.n_bad_lse;
  const bool weighed = pred_w && !s.w.empty() && pred_w->size() == s.w.size();
  if (total == 0 && !(weighed && s.n_bad_w > 0)) return;
  const int64_t left = total ? s.bad_against(pred_out, tol_out) : 0;
  const int64_t left_lse = total && pred_lse && !s.lse.empty() ? s.bad_lse_against(*pred_lse, tol_lse) : s.n_bad_lse;
  double explained =
      total ? static_cast<double>(s.n_bad_out - left + s.n_bad_lse - left_lse) / static_cast<double>(total) : 1.0;
  std::ostringstream e;
  e << what << ": ";
  if (total) {
    e << "the candidate matches this prediction on " << (total - left - left_lse) << " of " << total
      << " failing elements";
    if (left + left_lse > 0) e << " (" << (left + left_lse) << " still off)";
  }
  if (weighed) {
    const Subject::WeightsFit f = s.weights_fit(*pred_w);
    const int64_t n = s.n_bad_w + f.contradicted;
    if (n > 0) {
      explained *= static_cast<double>(f.explained) / static_cast<double>(n);
      e << (total ? "; " : "") << "weights: explains " << f.explained << " of " << s.n_bad_w << " failing";
      if (f.contradicted) e << ", contradicts " << f.contradicted << " right ones";
    }
  }
  if (explained <= 0) return;
  out.push_back({tag, explained, e.str()});
}

namespace {
// The reference on a derived case, with weights when the candidate returned them for the same shape. A kernel writes
// 0 for a masked key's weight; the reference leaves it NaN in a row that poison made NaN (a row without any visible
// key follows the fully-masked policy, NaN included).
ExpectedAttention predicted(const Subject& s, prop::Case& d) {
  d.p.want_weights = !s.w.empty() && d.p.Lq == s.p().Lq && d.p.Lk == s.p().Lk;
  d.p.want_lse = true;
  ExpectedAttention r = expected_attention(d.p, d.in);
  const Problem& q = d.p;
  if (!q.want_weights) return r;
  const DenseMask dense(q, d.in);  // the masks as the reference composes them
  std::vector<char> seen(static_cast<size_t>(q.Lk));
  for (int64_t b = 0; b < q.B; ++b)
    for (int64_t h = 0; h < q.Hq; ++h)
      for (int64_t i = 0; i < q.Lq; ++i) {
        const int64_t row = ((b * q.Hq + h) * q.Lq + i) * q.Lk;
        dense.row(b, h, i, seen.data());
        if (std::find(seen.begin(), seen.end(), 1) == seen.end()) continue;
        for (int64_t j = 0; j < q.Lk; ++j)
          if (!seen[static_cast<size_t>(j)] && std::isnan(r.weights[static_cast<size_t>(row + j)]))
            r.weights[static_cast<size_t>(row + j)] = 0;
      }
  return r;
}
}  // namespace

// The reference on a derived case as the prediction; silently skipped when the derived case is invalid.
void Scorer::variant(const std::string& tag, const std::string& what, const std::function<prop::Case()>& make) {
  try {
    prop::Case d = make();
    const ExpectedAttention r = predicted(s, d);
    add(tag, what, r.out, d.p.Lq == s.p().Lq ? &r.lse : nullptr, d.p.want_weights ? &r.weights : nullptr);
  } catch (const std::invalid_argument&) {
  }
}

void Scorer::judged_variant(const std::string& tag, const std::string& what, const std::function<prop::Case()>& make) {
  try {
    prop::Case d = make();
    const ExpectedAttention r = predicted(s, d);
    const std::vector<double> tol = out_tolerance(d.p, r, s.model, s.out_dtype);
    const std::vector<double> tol_lse = lse_tolerance(d.p, r, s.model, s.lse_dtype);
    add(tag, what, r.out, d.p.Lq == s.p().Lq ? &r.lse : nullptr, d.p.want_weights ? &r.weights : nullptr, &tol,
        &tol_lse);
  } catch (const std::invalid_argument&) {
  }
}

namespace {

// The candidate's out read through the other layout's strides: what a kernel writing BHSD into BSHD (or back) stores.
std::vector<double> other_layout(const Problem& p, const std::vector<double>& ref, bool inverse) {
  std::vector<double> pred(ref.size());
  const int64_t H = p.Hq, L = p.Lq, D = p.Dv;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t d = 0; d < D; ++d) {
          // Written at the BSHD offset of (b,h,i,d), read back as BHSD (the two orders swap roles symmetrically).
          const int64_t off = ((b * L + i) * H + h) * D + d;
          const int64_t h2 = (off / D) % (H * L) / L, i2 = (off / D) % L;
          const auto x = static_cast<size_t>(((b * H + h) * L + i) * D + d),
                     y = static_cast<size_t>(((b * H + h2) * L + i2) * D + d);
          pred[inverse ? x : y] = ref[inverse ? y : x];
        }
  return pred;
}

}  // namespace

std::vector<double> out_from_weights(const Subject& s, const std::vector<double>& w, bool rescale_dropout) {
  const Problem& p = s.p();
  std::vector<double> o(static_cast<size_t>(s.rows() * p.Dv), 0.0);
  const double kscale = p.dropout_p > 0 && rescale_dropout ? 1.0 / (1.0 - p.dropout_p) : 1.0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const int64_t row = (b * p.Hq + h) * p.Lq + i;
        for (int64_t j = 0; j < p.Lk; ++j) {
          double wij = w[static_cast<size_t>(row * p.Lk + j)];
          if (wij == 0) continue;
          if (s.c.in.keep) wij *= s.c.in.keep->get_offset(row * p.Lk + j) * kscale;
          for (int64_t d = 0; d < p.Dv; ++d)
            o[static_cast<size_t>(row * p.Dv + d)] += wij * s.c.in.v.at(b, p.kv_head(h), j, d);
        }
      }
  return o;
}

Prediction softmax_model(const Subject& s, const std::function<double(int64_t, int64_t)>& score, DType sum_acc,
                         DType pv_acc, bool nan_rows) {
  const Problem& p = s.p();
  std::vector<double> w(s.score.size(), 0.0);
  Prediction pr{{}, s.ref.lse};
  auto acc = [](DType t, double a, double y) { return round_to(t, a + y); };
  std::vector<char> modelled(static_cast<size_t>(s.rows()), 0), nan_row(static_cast<size_t>(s.rows()), 0);
  for (int64_t r = 0; r < s.rows(); ++r) {
    double m = -INFINITY, sum = 0;
    bool any = false;
    for (int64_t j = 0; j < p.Lk; ++j)
      if (const double x = score(r, j); !std::isnan(x)) m = std::max(m, x), any = true;
    if (m == -INFINITY) {
      if (nan_rows && any) {
        nan_row[static_cast<size_t>(r)] = 1, pr.lse[static_cast<size_t>(r)] = NAN;
      } else if (p.fully_masked == FullyMasked::uniform) {  // the policy's average, accumulated like any row
        modelled[static_cast<size_t>(r)] = 1;
        for (int64_t j = 0; j < p.Lk; ++j) w[static_cast<size_t>(r * p.Lk + j)] = 1.0 / static_cast<double>(p.Lk);
      }
      continue;
    }
    modelled[static_cast<size_t>(r)] = 1;
    for (int64_t j = 0; j < p.Lk; ++j)
      if (const double x = score(r, j); !std::isnan(x)) sum = acc(sum_acc, sum, std::exp(x - m));
    for (int64_t j = 0; j < p.Lk; ++j)
      if (const double x = score(r, j); !std::isnan(x)) w[static_cast<size_t>(r * p.Lk + j)] = std::exp(x - m) / sum;
    pr.lse[static_cast<size_t>(r)] = m + std::log(sum);
  }
  const double k = p.dropout_p > 0 ? 1.0 / (1.0 - p.dropout_p) : 1.0;
  pr.out = s.ref.out;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const int64_t r = (b * p.Hq + h) * p.Lq + i;
        if (nan_row[static_cast<size_t>(r)])
          for (int64_t d = 0; d < p.Dv; ++d) pr.out[static_cast<size_t>(r * p.Dv + d)] = NAN;
        if (!modelled[static_cast<size_t>(r)]) continue;
        for (int64_t d = 0; d < p.Dv; ++d) {
          double a = 0;
          for (int64_t j = 0; j < p.Lk; ++j) {
            double x = w[static_cast<size_t>(r * p.Lk + j)];
            if (x == 0) continue;
            if (s.c.in.keep) x *= s.c.in.keep->get_offset(r * p.Lk + j) * k;
            a = acc(pv_acc, a, x * s.c.in.v.at(b, p.kv_head(h), j, d));
          }
          pr.out[static_cast<size_t>(r * p.Dv + d)] = a;
        }
      }
  return pr;
}

namespace {
// Rows of q (query = true) or k of case d rotated in place by rot(b, row, x) (x: Dqk values in fp64).
void rotate_inputs(prop::Case& d, bool query, const std::function<void(int64_t, int64_t, double*)>& rot) {
  const Problem& p = d.p;
  Tensor& t = query ? d.in.q : d.in.k;
  const int64_t H = query ? p.Hq : p.Hkv, L = query ? p.Lq : p.Lk;
  std::vector<double> x(static_cast<size_t>(p.Dqk));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        for (int64_t dd = 0; dd < p.Dqk; ++dd) x[size_t(dd)] = t.at(b, h, i, dd);
        rot(b, i, x.data());
        for (int64_t dd = 0; dd < p.Dqk; ++dd) t.put(b, h, i, dd, x[size_t(dd)]);
      }
}

// n padding keys that every query sees with score 0 and value 0 (a last key tile padded with score 0 instead of
// -inf). Each row's softmax gains n terms exp(0): with Z = exp(lse), out' = out Z / (Z + n) and lse' = log(Z + n);
// a row without a visible key averages the zero values (out 0, lse log n). The reference's own rows are the start,
// so every score modification and position stage is already in them.
Prediction padded_tail(const Subject& s, int64_t n) {
  const Problem& p = s.p();
  Prediction pr{s.ref.out, s.ref.lse};
  const double log_n = std::log(static_cast<double>(n));
  for (int64_t r = 0; r < s.rows(); ++r) {
    const double lse = s.ref.lse[static_cast<size_t>(r)];
    const double lse2 =
        std::isfinite(lse) ? std::max(lse, log_n) + std::log1p(std::exp(-std::abs(lse - log_n))) : log_n;
    const double f = std::isfinite(lse) ? std::exp(lse - lse2) : 0.0;
    for (int64_t d = 0; d < p.Dv; ++d) pr.out[static_cast<size_t>(r * p.Dv + d)] *= f;
    if (!std::isfinite(lse))
      for (int64_t d = 0; d < p.Dv; ++d) pr.out[static_cast<size_t>(r * p.Dv + d)] = 0;
    pr.lse[static_cast<size_t>(r)] = lse2;
  }
  return pr;
}

// Absorbed MLA (mla.hpp): V read out of the latent cache with its own row length as the stride, or from the
// cache's last Dv columns (the k_pe side). Each is the reference on the case without the tie, v rebuilt from k as
// the mistake reads it.
void mla_hypotheses(Scorer& sc, const prop::Case& c) {
  const Problem& p = c.p;
  auto values_from = [&](const char* tag, const char* what,
                         const std::function<double(int64_t, int64_t, int64_t, int64_t)>& read) {
    sc.variant(tag, what, [&] {
      prop::Case d = c;
      d.p.mla = false;
      for (int64_t b = 0; b < d.in.v.shape[0]; ++b)
        for (int64_t h = 0; h < d.in.v.shape[1]; ++h)
          for (int64_t j = 0; j < d.in.v.shape[2]; ++j)
            for (int64_t e = 0; e < p.Dv; ++e) d.in.v.put(b, h, j, e, read(b, h, j, e));
      return d;
    });
  };
  values_from("mla-v-stride", "absorbed MLA: V rows stepped by Dv instead of the latent cache's row length Dqk",
              [&](int64_t b, int64_t h, int64_t j, int64_t e) {
                const int64_t n = j * p.Dv + e;  // the n-th element of the head's latent rows, read as V's
                return c.in.k.at(b, h, n / p.Dqk, n % p.Dqk);
              });
  values_from("mla-v-columns", "absorbed MLA: V from the latent cache's last Dv columns (the k_pe side)",
              [&](int64_t b, int64_t h, int64_t j, int64_t e) { return c.in.k.at(b, h, j, p.Dqk - p.Dv + e); });
}

// QK-norm's eps misplaced: dropped (eps ~ 0), or added outside the square root (x / (sqrt(mean x^2) + eps)), the
// latter as the reference on q and k normalised that way in fp64 (the problem's RoPE still rotates them).
void qk_norm_hypotheses(Scorer& sc, const prop::Case& c) {
  sc.variant("qk-norm-eps", "QK-norm without its eps",
             [&] { return with_problem(c, [](Problem& q) { q.qk_norm_eps = 1e-300; }); });
  if (c.p.page_size > 0 || c.p.past_len > 0) return;  // k is not [B, Hkv, Lk, Dqk]
  sc.variant("qk-norm-eps", "QK-norm with eps added outside the square root", [&] {
    prop::Case d = c;
    for (bool query : {true, false})
      rotate_inputs(d, query, [&](int64_t, int64_t, double* x) {
        const std::vector<double>& w = query ? c.p.q_norm_weight : c.p.k_norm_weight;
        double ss = 0;
        for (int64_t k = 0; k < c.p.Dqk; ++k) ss += x[k] * x[k];
        const double r = 1.0 / (std::sqrt(ss / double(c.p.Dqk)) + c.p.qk_norm_eps);
        for (int64_t k = 0; k < c.p.Dqk; ++k) x[k] *= r * w[size_t(k)];
      });
    d.p.q_norm_weight.clear(), d.p.k_norm_weight.clear();
    return d;
  });
}

void rope_hypotheses(Scorer& sc, const prop::Case& c) {
  const Problem& p = c.p;
  const std::vector<double> inv = rope_inv_freq(p);
  sc.variant("rope-interleave",
             std::string("RoPE pairs ") +
                 (p.rotary_interleaved ? "NeoX halves instead of GPT-J" : "GPT-J interleaved instead of NeoX halves"),
             [&] { return with_problem(c, [](Problem& q) { q.rotary_interleaved = !q.rotary_interleaved; }); });
  // The query at position `to(b, i)` instead of its own: the reference on q pre-rotated by the difference.
  auto query_at = [&](const std::string& what, const std::function<int64_t(int64_t, int64_t)>& to) {
    sc.variant("rope-offset", what, [&] {
      prop::Case d = c;
      rotate_inputs(d, true, [&](int64_t b, int64_t i, double* x) {
        rope_rotate(p, inv, to(b, i) - rope_position(p, b, i + p.diagonal_offset(b)), x);
      });
      return d;
    });
  };
  query_at("RoPE: queries rotated at their row index (the position offset ignored)",
           [](int64_t, int64_t i) { return i; });
  for (int delta : {+1, -1})
    query_at(std::string("RoPE: queries rotated one position ") + (delta > 0 ? "ahead" : "behind"),
             [&](int64_t b, int64_t i) { return rope_position(p, b, i + p.diagonal_offset(b)) + delta; });
  if (p.rotary_dim < p.Dqk) {
    sc.variant("rope-partial", "RoPE over all Dqk dims instead of the first rotary_dim",
               [&] { return with_problem(c, [](Problem& q) { q.rotary_dim = q.Dqk % 2 ? q.Dqk - 1 : q.Dqk; }); });
    // The last rotary_dim dims rotated: no RoPE in the problem, both q and k rotated there in fp64.
    sc.variant("rope-partial", "partial RoPE applied to the last rotary_dim dims", [&] {
      prop::Case d = c;
      const int64_t shift = p.Dqk - p.rotary_dim;
      for (bool query : {true, false})
        rotate_inputs(d, query, [&](int64_t b, int64_t i, double* x) {
          rope_rotate(p, inv, rope_position(p, b, query ? i + p.diagonal_offset(b) : i), x + shift);
        });
      d.p.rotary_dim = 0;
      return d;
    });
  }
  // Angles in fp16 overflow past position 65504: cos and sin of inf are NaN, and so is every row that reads one.
  {
    const Subject& s = sc.s;
    std::vector<double> out = s.ref.out, lse = s.ref.lse;
    bool any = false;
    for (int64_t b = 0; b < p.B; ++b) {
      const bool key_over = p.key_length(b) > 0 && rope_position(p, b, p.key_length(b) - 1) > 65504;
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i) {
          if (!key_over && rope_position(p, b, i + p.diagonal_offset(b)) <= 65504) continue;
          const size_t row = static_cast<size_t>((b * p.Hq + h) * p.Lq + i);
          std::fill(out.begin() + row * p.Dv, out.begin() + (row + 1) * p.Dv, NAN);
          if (row < lse.size()) lse[row] = NAN;
          any = true;
        }
    }
    if (any) sc.add("rope-precision", "RoPE angles in fp16: past position 65504 they are inf, cos/sin NaN", out, &lse);
  }
  // Angles rounded to fp16 (or bf16): the reference without RoPE on q and k rotated with those angles in fp64.
  for (DType t : {DType::f16, DType::bf16})
    sc.variant("rope-precision", std::string("RoPE angles rounded to ") + to_string(t), [&] {
      prop::Case d = c;
      for (bool query : {true, false})
        rotate_inputs(d, query, [&](int64_t b, int64_t i, double* x) {
          const double pos = double(rope_position(p, b, query ? i + p.diagonal_offset(b) : i)),
                       m = rope_attention_factor(p);
          for (int64_t f = 0; f < p.rotary_dim / 2; ++f) {
            const auto [a, bb] = rope_pair(p, f);
            const double ang = round_to(t, pos * inv[size_t(f)]), xa = x[a], xb = x[bb];
            x[a] = m * (xa * std::cos(ang) - xb * std::sin(ang));
            x[bb] = m * (xb * std::cos(ang) + xa * std::sin(ang));
          }
        });
      d.p.rotary_dim = 0;
      return d;
    });
}
}  // namespace

std::vector<Cause> structural_hypotheses(const Subject& s) {
  std::vector<Cause> causes;
  Scorer sc{s, causes};
  const Problem& p = s.p();
  const prop::Case& c = s.c;

  // scale
  const double d = static_cast<double>(p.Dqk);
  if (!p.scale)
    sc.variant("scale", "default scale 1/d instead of 1/sqrt(d)",
               [&] { return with_problem(c, [&](Problem& q) { q.scale = 1.0 / d; }); });
  else if (p.mla)  // absorbed MLA declares the head dim before absorption; 1/sqrt(Dqk) is the absorbed one's
    sc.variant("mla-scale-dim", "absorbed MLA: scale 1/sqrt(Dqk) of the absorbed head instead of the declared one",
               [&] { return with_problem(c, [](Problem& q) { q.scale.reset(); }); });
  else
    sc.variant("scale", "explicit scale ignored (default 1/sqrt(d) used)",
               [&] { return with_problem(c, [](Problem& q) { q.scale.reset(); }); });
  if (p.Dv != p.Dqk)
    sc.variant("scale", "scale 1/sqrt(Dv) instead of 1/sqrt(Dqk)",
               [&] { return with_problem(c, [&](Problem& q) { q.scale = 1.0 / std::sqrt(double(p.Dv)); }); });
  if (p.effective_scale() != 1.0)
    sc.variant("scale", "scale not applied (1)", [&] { return with_problem(c, [](Problem& q) { q.scale = 1.0; }); });

  // causal diagonal and alignment
  if (p.causal || p.has_window()) {
    for (int delta : {+1, -1})
      sc.variant(p.causal ? "causal-diagonal" : "window-edge",
                 std::string("diagonal one key ") + (delta > 0 ? "right (j <= i+off+1)" : "left (j < i+off)"), [&] {
                   return diagonal_moved(c, [&](Problem& q) {
                     q.causal_offsets.clear();
                     for (int64_t b = 0; b < p.B; ++b) q.causal_offsets.push_back(p.diagonal_offset(b) + delta);
                     q.alignment = Alignment::explicit_;
                   });
                 });
    for (Alignment a : {Alignment::top_left, Alignment::bottom_right}) {
      if (a == p.alignment) continue;
      bool differs = false;
      Problem q = p;
      q.alignment = a, q.causal_offsets.clear();
      for (int64_t b = 0; b < p.B; ++b) differs = differs || q.diagonal_offset(b) != p.diagonal_offset(b);
      if (differs)
        sc.variant("causal-alignment",
                   std::string("diagonal aligned ") + to_string(a) + " instead of " + to_string(p.alignment),
                   [&] { return diagonal_moved(c, [&](Problem& r) { r.alignment = a, r.causal_offsets.clear(); }); });
    }
  }
  for (auto [side, delta] : {std::pair{0, 1}, std::pair{0, -1}, std::pair{1, 1}, std::pair{1, -1}}) {
    int64_t Problem::*f = side == 0 ? &Problem::window_left : &Problem::window_right;
    if (p.*f < 0 || p.*f + delta < 0) continue;
    sc.variant("window-edge",
               std::string(side == 0 ? "left" : "right") + " window edge " +
                   (delta > 0 ? "one key wider" : "one key narrower"),
               [&] { return with_problem(c, [&](Problem& q) { q.*f += delta; }); });
  }

  // masks ignored, fill, policy, logit stage order
  if (!p.key_lengths.empty())
    sc.variant("key-padding", "padded keys (beyond key_lengths) attended", [&] { return without(c, "key padding"); });
  if (p.mask_shape) sc.variant("mask-ignored", "boolean mask ignored", [&] { return without(c, "mask"); });
  if (p.fill == MaskFill::neg_inf)
    sc.variant("mask-fill", "finite sentinel -1e9 instead of -inf (fully masked rows become uniform)", [&] {
      return with_problem(
          c, [](Problem& q) { q.fill = MaskFill::finite, q.fill_value = -1e9, q.fully_masked = FullyMasked::uniform; });
    });
  for (FullyMasked f : {FullyMasked::nan, FullyMasked::zero, FullyMasked::uniform}) {
    if (f == p.fully_masked || (f == FullyMasked::uniform && p.fill == MaskFill::neg_inf)) continue;
    sc.variant(
        "fully-masked-policy",
        std::string("fully masked rows follow policy ") + to_string(f) + " instead of " + to_string(p.fully_masked),
        [&] { return with_problem(c, [&](Problem& q) { q.fully_masked = f; }); });
  }
  for (const ModEntry& m : logit_modifications()) {  // a logit-stage entry applied after bias and masking
    if (!m.used(p)) continue;
    const std::string tag = logit_order_tag(m), late = std::string(m.name) + " applied after ";
    const std::string masked = " (masked scores become " + std::string(m.name) + "(-inf))";
    // What a masked score becomes; the variant takes one value for the problem (every logit entry so far ignores
    // the position), the prediction below each key's own.
    const double limit = m.score(p, s.at(0, 0), -INFINITY);
    if (std::isfinite(limit))
      sc.variant(tag, late + "masking" + masked,
                 [&] { return with_problem(c, [&](Problem& q) { q.fill = MaskFill::finite, q.fill_value = limit; }); });
    const Prediction pr = softmax_model(s, [&](int64_t r, int64_t j) {
      const size_t n = static_cast<size_t>(r * p.Lk + j);
      if (!s.vis[n]) return s.row_visible[static_cast<size_t>(r)] ? m.score(p, s.at(r, j), -INFINITY) : NAN;
      const ModAt at = s.at(r, j);  // the bias is what the score holds beyond the logit stage
      const double biased = s.c.in.bias ? s.score[n] - m.score(p, at, s.logit[n]) + s.logit[n] : s.logit[n];
      return m.score(p, at, biased);
    });
    sc.add(tag, late + "bias and masking" + masked, pr.out, &pr.lse);
  }
  if (p.fill == MaskFill::neg_inf) {
    // Masked keys score -1e9 and no row is special-cased: a row the masks hide entirely averages every key's value,
    // a row whose visible keys a -inf bias hides and no mask hides becomes NaN (onnxruntime#28904, ik_llama.cpp#2344).
    const Prediction pr = softmax_model(
        s,
        [&](int64_t r, int64_t j) {
          const size_t n = static_cast<size_t>(r * p.Lk + j);
          return s.vis[n] ? s.score[n] : -1e9;
        },
        DType::f64, DType::f64, true);
    sc.add(
        "mask-fill",
        "finite sentinel -1e9 and no fully-masked handling: fully masked rows average every masked key's (kept) value, "
        "rows only a -inf bias hides are NaN",
        pr.out, &pr.lse);
  }

  // paged KV cache read without its block table: the pool read contiguously (batch b's page k is pool page
  // b * pages_per_seq + k), or every batch reading the pool's first pages
  if (s.paged) {
    const int64_t n = s.paged->p.pages_per_seq();
    sc.variant("block-table",
               "block table ignored: batch b's page k read from pool page b*" + std::to_string(n) +
                   "+k (pages read contiguously)",
               [&] { return with_block_table(*s.paged, [n](int64_t b, int64_t k) { return b * n + k; }); });
    if (p.B > 1)
      sc.variant("block-table", "block table ignored: every batch reads pool pages 0.." + std::to_string(n - 1),
                 [&] { return with_block_table(*s.paged, [](int64_t, int64_t k) { return k; }); });
    // a page index times the page stride overflowing its integer type (flashinfer #3130): the offset wraps at a
    // power of two, so page p is read as page p mod W; every W from 2 pages to the largest page the table names
    const std::vector<int64_t>& table = s.paged->p.block_table;
    const int64_t top = table.empty() ? 0 : *std::max_element(table.begin(), table.end());
    for (int64_t w = 2; w <= top; w *= 2)
      sc.variant("index-overflow",
                 "paged KV cache: the page offset wrapped at " + std::to_string(w) + " pages (page p read as p mod " +
                     std::to_string(w) + ")",
                 [&, w] {
                   return with_block_table(*s.paged,
                                           [&, w](int64_t b, int64_t k) { return table[size_t(b * n + k)] % w; });
                 });
  }

  // GQA head map
  if (p.Hkv > 1 && p.group_size() > 1)
    sc.variant("gqa-mapping", "query head h reads KV head h % Hkv (tiled) instead of h / group",
               [&] { return expand_kv_heads(c, [&](int64_t h) { return h % p.Hkv; }); });

  // last tile: padded with score 0, or skipped
  int64_t last_pad = -1, last_start = -1;
  for (int64_t T : {8, 16, 32, 64, 128}) {
    if (p.Lk % T == 0) continue;
    const int64_t Lk2 = (p.Lk + T - 1) / T * T, j0 = p.Lk / T * T;
    if (Lk2 != last_pad) {
      const Prediction pr = padded_tail(s, Lk2 - p.Lk);
      sc.add("tile-tail",
             "last key tile (size " + std::to_string(T) + ") padded to " + std::to_string(Lk2) +
                 " keys scored 0 instead of -inf",
             pr.out, &pr.lse);
    }
    // j0 = 0: Lk is below one tile, so a loop over whole tiles reads no key at all (every row as if fully masked)
    if (j0 != last_start)
      sc.variant("skipped-keys",
                 "keys " + std::to_string(j0) + ".." + std::to_string(p.Lk - 1) + " (the last partial tile of " +
                     std::to_string(T) + (j0 == 0 ? ", the only one" : "") + ") never read",
                 [&] { return mask_keys_from(c, j0); });
    last_pad = Lk2, last_start = j0;
  }

  key_hypotheses(s, [&](const std::string& tag, const std::string& what, const std::vector<double>& o,
                        const std::vector<double>* l) { sc.add(tag, what, o, l); });

  // mask applied after the softmax without renormalising: the softmax runs over every key (masked keys scored as
  // if visible, so poison in them reaches the row), then the masked weights are zeroed: out = out_visible *
  // exp(lse_visible - lse_all), lse = lse_all. A row without a visible key follows the fully-masked policy.
  if (p.causal || p.has_window() || !p.key_lengths.empty() || p.mask_shape || s.mods.has_mask()) {
    std::vector<double> pred = s.ref.out, lse = s.ref.lse, w = s.w.empty() ? std::vector<double>{} : s.ref.weights;
    for (int64_t r = 0; r < s.rows(); ++r) {
      if (!std::isfinite(s.row_max[static_cast<size_t>(r)]))
        continue;  // no visible key (a finite fill gives a finite lse)
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < p.Lk; ++j) m = std::max(m, s.unmasked_score(r, j));
      for (int64_t j = 0; j < p.Lk; ++j) sum += std::exp(s.unmasked_score(r, j) - m);
      const double all = m + std::log(sum);  // NaN when a masked key holds poison
      const double f = std::exp(s.ref.lse[static_cast<size_t>(r)] - all);
      lse[static_cast<size_t>(r)] = all;
      for (int64_t k = 0; k < p.Dv; ++k) pred[static_cast<size_t>(r * p.Dv + k)] *= f;
      for (int64_t j = 0; j < p.Lk && !w.empty(); ++j)
        if (s.vis[static_cast<size_t>(r * p.Lk + j)]) w[static_cast<size_t>(r * p.Lk + j)] *= f;
    }
    sc.add("mask-after-softmax", "mask applied after the softmax without renormalising", pred, &lse,
           w.empty() ? nullptr : &w);
  }

  // softmax over the wrong axis (over queries for each key); with a finite fill masked keys take part with it. A
  // single query (decode) gives every visible key weight 1: out is the sum of the visible values.
  {
    std::vector<double> w(s.score.size(), 0.0);
    const bool finite = p.fill == MaskFill::finite;
    auto x = [&](size_t n) { return s.vis[n] ? s.score[n] : finite ? p.fill_value : NAN; };
    for (int64_t bh = 0; bh < p.B * p.Hq; ++bh)
      for (int64_t j = 0; j < p.Lk; ++j) {
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < p.Lq; ++i)
          if (const double v = x(static_cast<size_t>((bh * p.Lq + i) * p.Lk + j)); !std::isnan(v)) m = std::max(m, v);
        if (m == -INFINITY) continue;
        for (int64_t i = 0; i < p.Lq; ++i)
          if (const double v = x(static_cast<size_t>((bh * p.Lq + i) * p.Lk + j)); !std::isnan(v))
            sum += std::exp(v - m);
        for (int64_t i = 0; i < p.Lq; ++i) {
          const size_t n = static_cast<size_t>((bh * p.Lq + i) * p.Lk + j);
          if (!std::isnan(x(n))) w[n] = std::exp(x(n) - m) / sum;
        }
      }
    // A row without a visible key follows the fully-masked policy before any softmax (the reference's row).
    std::vector<double> pred = out_from_weights(s, w);
    for (int64_t r = 0; r < s.rows(); ++r)
      if (!std::isfinite(s.row_max[static_cast<size_t>(r)])) {
        std::copy_n(s.ref.out.begin() + r * p.Dv, p.Dv, pred.begin() + r * p.Dv);
        if (!s.w.empty()) std::copy_n(s.ref.weights.begin() + r * p.Lk, p.Lk, w.begin() + r * p.Lk);
      }
    sc.add("softmax-axis", "softmax normalised over the queries of each key instead of over the keys", pred, nullptr,
           s.w.empty() ? nullptr : &w);
  }

  // dropout
  if (p.dropout_p > 0) {
    std::vector<double> pred = s.ref.out;
    for (double& x : pred) x *= 1.0 - p.dropout_p;
    sc.add("dropout-scale", "kept weights not rescaled by 1/(1-p)", pred);
    sc.variant("dropout-mask", "keep-mask not applied", [&] { return without(c, "dropout"); });
  }

  // RoPE (rope.hpp): the other pairing; a query rotated at a wrong position (its row index: the offset ignored, or
  // one position off); the partial rotation on the last rotary_dim dims or on all of them; angles rounded to
  // fp16. A wrong rotation of q (or k) is the reference on inputs pre-rotated by the difference, in fp64.
  if (uses_rope(p) && p.rope_mrope_section.empty() && p.cu_seqlens_q.empty())
    rope_hypotheses(sc, c);  // one position per row
  if (p.mla && p.Dv < p.Dqk) mla_hypotheses(sc, c);
  if (uses_qk_norm(p) && p.cu_seqlens_q.empty()) qk_norm_hypotheses(sc, c);
  modification_hypotheses(sc);
  cache_hypotheses(sc);
  fp8_out_hypotheses(sc);

  // layout: out written with the other layout's strides
  if (p.Hq > 1 && p.Lq > 1)
    for (bool inv : {false, true})
      sc.add("layout-stride",
             std::string("out written with the ") + (inv ? "BHSD" : "BSHD") + " strides into the " +
                 (inv ? "BSHD" : "BHSD") + " order",
             other_layout(p, s.ref.out, inv));
  return causes;
}

}  // namespace attncheck::diagnose
