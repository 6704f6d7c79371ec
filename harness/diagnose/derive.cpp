// Derived cases for hypotheses and probes (see derive.hpp). Tensors keep the case's layout; masks that must change
// per key are folded first into one boolean mask (with_mask), so what each query sees stays explicit.
#include "derive.hpp"

#include <cmath>
#include <type_traits>
#include <variant>

#include "attncheck/block_mask.hpp"

#include "attncheck/mods.hpp"

namespace attncheck::diagnose {

namespace {
Tensor like(const Tensor& t, DType dt, std::vector<int64_t> shape, Layout l) {
  return t.shape.size() == 4 && shape.size() == 4 ? Tensor(dt, std::move(shape), storage_order(l))
                                                  : Tensor(dt, std::move(shape));
}
}  // namespace

prop::Case with_problem(const prop::Case& c, const std::function<void(Problem&)>& f) {
  prop::Case d = c;
  f(d.p);
  validate(d.p, d.in);
  return d;
}

prop::Case contiguous_kv(const prop::Case& c) {
  if (c.p.past_len == 0 && c.p.page_size == 0) return c;
  const Attended present = attend_over_present(c.p, c.in);
  const Attended flat = gather_pages(present.p, present.in);
  return {c.spec, flat.p, flat.in};
}

prop::Case with_block_table(const prop::Case& c, const std::function<int64_t(int64_t, int64_t)>& page) {
  return with_problem(c, [&](Problem& q) {
    const int64_t n = q.pages_per_seq();
    for (int64_t b = 0; b < q.B; ++b)
      for (int64_t k = 0; k < n; ++k) q.block_table[static_cast<size_t>(b * n + k)] = page(b, k);
  });
}

prop::Case expand_kv_heads(const prop::Case& c, const std::function<int64_t(int64_t)>& map) {
  prop::Case d = c;
  const Problem& p = c.p;
  d.p.Hkv = p.Hq;
  for (auto [src, dst, D] : {std::tuple{&c.in.k, &d.in.k, p.Dqk}, std::tuple{&c.in.v, &d.in.v, p.Dv}}) {
    Tensor t = like(*src, src->dtype, {p.B, p.Hq, p.Lk, D}, p.layout);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t j = 0; j < p.Lk; ++j)
          for (int64_t e = 0; e < D; ++e) t.put(b, h, j, e, src->at(b, map(h), j, e));
    *dst = std::move(t);
  }
  validate(d.p, d.in);
  return d;
}

void reset_modification(Problem& q, const ModEntry& e) {
  const Problem defaults;
  auto reset = [&](const ModEntry& x) {
    for (const Field& f : x.fields)
      std::visit(
          [&](auto m) {
            if constexpr (!std::is_same_v<decltype(m), DerivedF64>) q.*m = defaults.*m;
          },
          f.ref);
  };
  reset(e);
  // Parameters two entries share are listed with one of them (the expressions' auxiliary tensors with the score
  // expression): an entry no longer used gives them up too.
  for (const ModEntry& x : modifications())
    if (!x.used(q)) reset(x);
}

prop::Case with_mask(const prop::Case& c, const Sees& sees) {
  const Problem& p = c.p;
  prop::Case d = c;
  Problem& q = d.p;
  q.causal = false, q.window_left = q.window_right = -1, q.key_lengths.clear();
  if (p.cu_seqlens_q.empty()) {  // packed sequences place their diagonals themselves (the key padding is theirs)
    q.alignment = Alignment::explicit_, q.causal_offsets.clear();
    for (int64_t b = 0; b < p.B; ++b) q.causal_offsets.push_back(p.diagonal_offset(b));
  }
  for (const ModEntry* e : used_modifications(p))
    if (e->kind == ModKind::mask) reset_modification(q, *e);
  const std::vector<int64_t> full = {p.B, p.Hq, p.Lq, p.Lk};
  Tensor m(DType::u8, full);
  const DenseMask dense(p, c.in);
  std::vector<char> vis(static_cast<size_t>(p.Lk));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        dense.row(b, h, i, vis.data());
        for (int64_t j = 0; j < p.Lk; ++j) {
          const bool v = vis[static_cast<size_t>(j)] != 0;
          m.put(b, h, i, j, sees ? sees(b, h, i, j, v) : v);
        }
      }
  d.in.mask = std::move(m), q.mask_shape = std::array<int64_t, 4>{p.B, p.Hq, p.Lq, p.Lk};
  if (c.in.bias) {
    Tensor t(c.in.bias->dtype, full);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i)
          for (int64_t j = 0; j < p.Lk; ++j)
            t.put(b, h, i, j, c.in.bias->get_offset(broadcast_offset(*c.in.bias, b, h, i, j)));
    d.in.bias = std::move(t), q.bias_shape = std::array<int64_t, 4>{p.B, p.Hq, p.Lq, p.Lk};
  }
  validate(q, d.in);
  return d;
}

prop::Case mask_keys_from(const prop::Case& c, int64_t j0) {
  return with_mask(c, [j0](int64_t, int64_t, int64_t, int64_t j, bool vis) { return vis && j < j0; });
}

prop::Case diagonal_moved(const prop::Case& c, const std::function<void(Problem&)>& f) {
  const prop::Case moved = with_problem(c, f);
  Problem rest = c.p;  // every mask but the diagonal's
  rest.causal = false, rest.window_left = rest.window_right = -1;
  const DenseMask others(rest, c.in);
  const Problem& q = moved.p;
  std::vector<char> vis(static_cast<size_t>(c.p.Lk));
  int64_t row = -1;
  return with_mask(c, [&](int64_t b, int64_t h, int64_t i, int64_t j, bool) {
    if (const int64_t r = (b * c.p.Hq + h) * c.p.Lq + i; r != row) others.row(b, h, i, vis.data()), row = r;
    const int64_t diag = q.row_keys(b, i).diag;
    return vis[static_cast<size_t>(j)] && !(q.causal && j > diag) &&
           !(q.window_left >= 0 && j < diag - q.window_left) && !(q.window_right >= 0 && j > diag + q.window_right);
  });
}

prop::Case with_dtype(const prop::Case& c, DType t) {
  prop::Case d = c;
  d.p.dtype = t;
  for (auto [src, dst] : {std::pair{&c.in.q, &d.in.q}, std::pair{&c.in.k, &d.in.k}, std::pair{&c.in.v, &d.in.v}}) {
    Tensor x = like(*src, t, src->shape, c.p.layout);
    for (int64_t a = 0; a < x.shape[0]; ++a)
      for (int64_t b = 0; b < x.shape[1]; ++b)
        for (int64_t i = 0; i < x.shape[2]; ++i)
          for (int64_t e = 0; e < x.shape[3]; ++e) x.put(a, b, i, e, src->at(a, b, i, e));
    *dst = std::move(x);
  }
  validate(d.p, d.in);
  return d;
}

prop::Case zero_masked_poison(const prop::Case& c, int64_t& zeroed) {
  prop::Case d = c;
  const Problem& p = c.p;
  zeroed = 0;
  auto poison = [](double x) { return !std::isfinite(x) || std::abs(x) > 1e6; };
  std::vector<char> seen(static_cast<size_t>(p.B * p.Hkv * p.Lk), 0);
  std::vector<char> bias_seen(d.in.bias ? static_cast<size_t>(d.in.bias->numel()) : 0, 0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t j = 0; j < p.Lk; ++j) {
          if (!prop::visible(p, c.in, b, h, i, j)) continue;
          seen[static_cast<size_t>((b * p.Hkv + p.kv_head(h)) * p.Lk + j)] = 1;
          if (d.in.bias) bias_seen[static_cast<size_t>(broadcast_offset(*d.in.bias, b, h, i, j))] = 1;
        }
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t kh = 0; kh < p.Hkv; ++kh)
      for (int64_t j = 0; j < p.Lk; ++j) {
        if (seen[static_cast<size_t>((b * p.Hkv + kh) * p.Lk + j)]) continue;
        const bool past = j < p.past_len;  // the past holds the first past_len tokens, k and v the rest
        Tensor* kt = past ? &*d.in.past_k : &d.in.k;
        Tensor* vt = past ? &*d.in.past_v : &d.in.v;
        const int64_t t = past ? j : j - p.past_len;
        for (auto [x, D] : {std::pair{kt, p.Dqk}, std::pair{vt, p.Dv}})
          for (int64_t e = 0; e < D; ++e)
            if (poison(x->at(b, kh, t, e))) x->put(b, kh, t, e, 0.0), ++zeroed;
      }
  for (size_t n = 0; n < bias_seen.size(); ++n) {
    const double x = d.in.bias->get_offset(static_cast<int64_t>(n));
    if (!bias_seen[n] && poison(x) && x != -INFINITY) d.in.bias->set_offset(static_cast<int64_t>(n), 0.0), ++zeroed;
  }
  validate(d.p, d.in);
  return d;
}

std::vector<std::string> active_features(const Problem& p) {
  std::vector<std::string> f;
  if (p.causal) f.push_back("causal");
  if (p.has_window()) f.push_back("window");
  if (!p.key_lengths.empty()) f.push_back("key padding");
  if (p.mask_shape) f.push_back("mask");
  if (p.bias_shape) f.push_back("bias");
  for (const ModEntry& m : logit_modifications())
    if (m.used(p)) f.push_back(m.name);
  if (p.dropout_p > 0) f.push_back("dropout");
  return f;
}

prop::Case without(const prop::Case& c, const std::string& feature) {
  prop::Case d = c;
  Problem& p = d.p;
  if (feature == "causal")
    p.causal = false;
  else if (feature == "window")
    p.window_left = p.window_right = -1;
  else if (feature == "key padding")
    p.key_lengths.clear();
  else if (feature == "mask")
    p.mask_shape.reset(), d.in.mask.reset();
  else if (feature == "bias")
    p.bias_shape.reset(), d.in.bias.reset();
  else if (feature == "dropout")
    p.dropout_p = 0, d.in.keep.reset();
  else if (const ModEntry* m = find_logit_modification(feature))
    clear_modification(p, *m);
  else
    throw std::invalid_argument("diagnose: unknown feature '" + feature + "'");
  // Without a diagonal the alignment only places positions: kept where RoPE or a modification reads them.
  if (!p.causal && !p.has_window() && !uses_modifications(p))
    p.alignment = Alignment::top_left, p.causal_offset = 0, p.causal_offsets.clear();
  validate(p, d.in);
  return d;
}

}  // namespace attncheck::diagnose
