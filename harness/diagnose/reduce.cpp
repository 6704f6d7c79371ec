// reduce() and cut() (reduce.hpp). The steps run in a fixed order, each trying cuts of the current best case; a cut
// is kept when the candidate still fails with the same top diagnosis; then each active feature is switched off the
// same way. Trials are diagnosed without re-runs first
// and with probes only when that does not already rank the tag first (tags that only a probe finds).
#include "reduce.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <stdexcept>

#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"

#include "attncheck/error_scales.hpp"
#include "derive.hpp"

namespace attncheck::diagnose {

namespace {

// src restricted to [start, start+count) per dim; a broadcast dim (size 1) stays size 1.
Tensor slice(const Tensor& src, const std::array<int64_t, 4>& start, const std::array<int64_t, 4>& count,
             const std::vector<int>& order) {
  std::vector<int64_t> shape(4);
  std::array<int64_t, 4> s0{};
  for (size_t k = 0; k < 4; ++k) {
    const bool bc = src.shape[k] == 1;
    shape[k] = bc ? 1 : count[k], s0[k] = bc ? 0 : start[k];
  }
  Tensor t = order.empty() ? Tensor(src.dtype, shape) : Tensor(src.dtype, shape, order);
  int64_t a[4], f[4];
  for (a[0] = 0; a[0] < shape[0]; ++a[0])
    for (a[1] = 0; a[1] < shape[1]; ++a[1])
      for (a[2] = 0; a[2] < shape[2]; ++a[2])
        for (a[3] = 0; a[3] < shape[3]; ++a[3]) {
          for (size_t k = 0; k < 4; ++k) f[k] = a[k] + s0[k];
          t.set(a, src.get(f));
        }
  return t;
}

}  // namespace

Cut whole(const Problem& p) { return {0, p.B, 0, p.Hq, 0, p.Hkv, 0, p.Lq, 0, p.Lk, p.Dqk, p.Dv}; }

prop::Case cut(const prop::Case& c, const Cut& k) {
  const Problem& p = c.p;
  const int64_t G = p.group_size();
  auto bad = [](const std::string& what) { throw std::invalid_argument("reduce: cut " + what); };
  if (k.nb < 1 || k.b0 + k.nb > p.B || k.nq < 1 || k.i0 + k.nq > p.Lq || k.nk < 1 || k.k0 < 0 || k.k0 + k.nk > p.Lk ||
      k.dqk < 1 || k.dqk > p.Dqk || k.dv < 1 || k.dv > p.Dv || k.nh < 1 || k.h0 + k.nh > p.Hq || k.ng < 1 ||
      k.g0 + k.ng > p.Hkv)
    bad("out of range");
  // The kept query heads must read the kept KV heads as before: whole groups, or heads of one group.
  const bool groups = k.h0 == k.g0 * G && k.nh == k.ng * G;
  const bool within = k.ng == 1 && p.kv_head(k.h0) == k.g0 && p.kv_head(k.h0 + k.nh - 1) == k.g0;
  if (!groups && !within) bad("heads do not keep the GQA map");
  if (p.past_len > 0 && (k.k0 != 0 || k.nk <= p.past_len)) bad("cuts into the KV-cache past or keeps no new key");
  if (!p.cu_seqlens_q.empty()) bad("of a varlen problem (reduce() takes one sequence first)");
  if (p.kv_quantized()) bad("of a problem with a quantized KV cache (its scales are not cut)");
  if (uses_rope(p) && !p.rope_mrope_section.empty() &&
      (k.b0 != 0 || k.nb != p.B || k.k0 != 0 || k.nk != p.Lk || k.i0 != 0 || k.nq != p.Lq))
    bad("of an mRoPE problem's tokens (its position ids are not cut)");
  if (uses_qk_norm(p) && k.dqk != p.Dqk) bad("head dims of a QK-norm problem (the norm is over all Dqk)");
  if (p.page_size > 0 && k.k0 % p.page_size != 0)  // key k0 must be token 0 of a page for the table to address it
    bad("drops keys [0, " + std::to_string(k.k0) +
        ") of a paged KV cache: not a whole number of pages (page_size=" + std::to_string(p.page_size) + ")");

  if (p.chunk_size > 0 && k.k0 % p.chunk_size != 0)  // chunks are counted from key 0
    bad("drops keys [0, " + std::to_string(k.k0) +
        ") of a chunked problem: not whole chunks (chunk_size=" + std::to_string(p.chunk_size) + ")");

  prop::Case d = c;
  Problem& q = d.p;
  q.B = k.nb, q.Hq = k.nh, q.Hkv = k.ng, q.Lq = k.nq, q.Lk = k.nk, q.Dqk = k.dqk, q.Dv = k.dv;
  if (!p.sinks.empty()) q.sinks.assign(p.sinks.begin() + k.h0, p.sinks.begin() + k.h0 + k.nh);
  if (!p.key_lengths.empty()) {
    q.key_lengths.clear();
    for (int64_t b = 0; b < k.nb; ++b)
      q.key_lengths.push_back(std::clamp(p.key_lengths[static_cast<size_t>(k.b0 + b)] - k.k0, int64_t{0}, k.nk));
  }
  // Row i and key j of the cut are row i0 + i and key k0 + j of the original: the diagonal moves by i0 - k0.
  if (!p.causal_offsets.empty())
    q.causal_offsets.assign(p.causal_offsets.begin() + k.b0, p.causal_offsets.begin() + k.b0 + k.nb);
  if (p.causal || p.has_window() || uses_modifications(p)) {  // modifications read the query's diagonal position
    std::vector<int64_t> off;
    for (int64_t b = 0; b < k.nb; ++b) off.push_back(k.i0 - k.k0 + p.diagonal_offset(k.b0 + b));
    bool top_left = true, bottom_right = true, same = true;
    for (int64_t b = 0; b < k.nb; ++b) {
      const int64_t x = off[static_cast<size_t>(b)];
      top_left = top_left && x == 0, same = same && x == off[0];
      bottom_right = bottom_right && x == q.key_length(b) - k.nq;
    }
    // The original alignment when it still yields these offsets (fewer features for the candidate to support).
    q.causal_offsets.clear(), q.causal_offset = 0;
    if (p.alignment == Alignment::top_left && top_left) {
      q.alignment = Alignment::top_left;
    } else if (p.alignment == Alignment::bottom_right && bottom_right) {
      q.alignment = Alignment::bottom_right;
    } else {
      q.alignment = Alignment::explicit_;
      if (same)
        q.causal_offset = off[0];
      else
        q.causal_offsets = off;
    }
  }

  // Modification parameters of the kept batches, heads and keys (mods.hpp; positions moved with the diagonal).
  if (!p.alibi_slopes.empty()) {
    const bool per_batch = static_cast<int64_t>(p.alibi_slopes.size()) != p.Hq;
    q.alibi_slopes.clear();
    for (int64_t b = 0; b < (per_batch ? k.nb : 1); ++b)
      for (int64_t h = 0; h < k.nh; ++h)
        q.alibi_slopes.push_back(p.alibi_slopes[static_cast<size_t>((per_batch ? (k.b0 + b) * p.Hq : 0) + k.h0 + h)]);
  }
  if (!p.t5_table.empty())
    q.t5_table.assign(p.t5_table.begin() + k.h0 * p.t5_buckets, p.t5_table.begin() + (k.h0 + k.nh) * p.t5_buckets);
  if (!p.key_bias.empty()) {  // [b?, h, j]: the kept heads' keys, per kept batch when per batch
    const int64_t nb = static_cast<int64_t>(p.key_bias.size()) == p.Hq * p.Lk ? 1 : p.B, b0 = nb == 1 ? 0 : k.b0;
    q.key_bias.clear();
    for (int64_t b = b0; b < b0 + (nb == 1 ? 1 : k.nb); ++b)
      for (int64_t h = k.h0; h < k.h0 + k.nh; ++h) {
        const auto row = p.key_bias.begin() + ((b * p.Hq + h) * p.Lk + k.k0);
        q.key_bias.insert(q.key_bias.end(), row, row + k.nk);
      }
  }
  if (!p.doc_ids.empty()) {
    q.doc_ids.clear();
    for (int64_t b = k.b0; b < k.b0 + k.nb; ++b)
      q.doc_ids.insert(q.doc_ids.end(), p.doc_ids.begin() + b * p.Lk + k.k0,
                       p.doc_ids.begin() + b * p.Lk + k.k0 + k.nk);
  }
  if (p.topk > 0) {  // the kept rows' lists, keys renumbered from k0; a listed key cut away leaves padding
    q.topk_indices.clear();
    for (int64_t b = k.b0; b < k.b0 + k.nb; ++b)
      for (int64_t i = k.i0; i < k.i0 + k.nq; ++i) {
        int64_t kept = 0;
        for (int64_t s = 0; s < p.topk; ++s)
          if (const int64_t j = p.topk_indices[static_cast<size_t>((b * p.Lq + i) * p.topk + s)];
              j >= k.k0 && j < k.k0 + k.nk)
            q.topk_indices.push_back(j - k.k0), ++kept;
        q.topk_indices.insert(q.topk_indices.end(), static_cast<size_t>(p.topk - kept), int64_t{-1});
      }
  }
  if (uses_rope(p)) {  // every kept token keeps its RoPE position: key j of the cut is key k0 + j (rope.hpp)
    q.rope_offsets.clear();
    for (int64_t b = k.b0; b < k.b0 + k.nb; ++b)
      q.rope_offsets.push_back((p.rope_offsets.empty() ? 0 : p.rope_offsets[static_cast<size_t>(b)]) + k.k0);
  }
  if (!p.prefix_lengths.empty()) {
    q.prefix_lengths.clear();
    for (int64_t b = k.b0; b < k.b0 + k.nb; ++b)
      q.prefix_lengths.push_back(std::clamp(p.prefix_lengths[static_cast<size_t>(b)] - k.k0, int64_t{0}, k.nk));
  }

  if (!p.score_expr.empty() || !p.mask_expr.empty()) {  // expressions go on reading the original indices and tensors
    const std::vector<int64_t> o = p.expr_origin.empty() ? std::vector<int64_t>(4, 0) : p.expr_origin;
    q.expr_origin = {o[0] + k.b0, o[1] + k.h0, o[2] + k.i0, o[3] + k.k0};
    if (std::all_of(q.expr_origin.begin(), q.expr_origin.end(), [](int64_t v) { return v == 0; }))
      q.expr_origin.clear();
  }

  const auto so = storage_order(p.layout);
  d.in.q = slice(c.in.q, {k.b0, k.h0, k.i0, 0}, {k.nb, k.nh, k.nq, k.dqk}, so);
  if (p.page_size > 0) {
    // Paged: the pool keeps every page (cut to the kept KV heads and head-dim columns); the block table keeps the
    // kept batches' rows and, of each, the pages holding keys [k0, k0+nk).
    const int64_t n = p.pages_per_seq(), first = k.k0 / p.page_size;
    q.block_table.clear();
    for (int64_t b = k.b0; b < k.b0 + k.nb; ++b)
      for (int64_t j = 0; j < q.pages_per_seq(); ++j)
        q.block_table.push_back(p.block_table[static_cast<size_t>(b * n + first + j)]);
    d.in.k = slice(c.in.k, {0, k.g0, 0, 0}, {p.num_pages, k.ng, p.page_size, k.dqk}, so);
    d.in.v = slice(c.in.v, {0, k.g0, 0, 0}, {p.num_pages, k.ng, p.page_size, k.dv}, so);
  } else {
    const int64_t nnew = k.nk - p.past_len;  // k and v hold the keys after the past: their first nnew are kept
    d.in.k = slice(c.in.k, {k.b0, k.g0, k.k0, 0}, {k.nb, k.ng, nnew, k.dqk}, so);
    d.in.v = slice(c.in.v, {k.b0, k.g0, k.k0, 0}, {k.nb, k.ng, nnew, k.dv}, so);
  }
  if (c.in.past_k) d.in.past_k = slice(*c.in.past_k, {k.b0, k.g0, 0, 0}, {k.nb, k.ng, p.past_len, k.dqk}, so);
  if (c.in.past_v) d.in.past_v = slice(*c.in.past_v, {k.b0, k.g0, 0, 0}, {k.nb, k.ng, p.past_len, k.dv}, so);
  const std::array<int64_t, 4> s0{k.b0, k.h0, k.i0, k.k0}, n{k.nb, k.nh, k.nq, k.nk};
  auto shape_of = [](const Tensor& t) {
    return std::array<int64_t, 4>{t.shape[0], t.shape[1], t.shape[2], t.shape[3]};
  };
  if (c.in.mask) d.in.mask = slice(*c.in.mask, s0, n, {}), q.mask_shape = shape_of(*d.in.mask);
  if (c.in.bias) d.in.bias = slice(*c.in.bias, s0, n, {}), q.bias_shape = shape_of(*d.in.bias);
  if (c.in.keep) d.in.keep = slice(*c.in.keep, s0, n, {});
  validate(q, d.in);
  return d;
}

namespace {

struct Trial {
  const Impl& impl;
  const Options& o;
  const std::string& top;
  int budget;
  int reruns = 0;

  // The candidate fails on d and the failure's diagnosis ranks `top` first.
  bool keeps(const prop::Case& d) {
    if (reruns >= budget || !impl.supports(d.p).ok) return false;
    ++reruns;
    Outputs out;
    ExpectedAttention ref;
    try {
      if (!run_impl(impl, d.p, d.in, out).ok) return false;
      ref = expected_attention(d.p, d.in);
      if (judge(d.p, ref, out, o.tolerance).pass) return false;
    } catch (const std::exception&) {
      return false;  // a crash is another failure than the one being reduced
    }
    if (top == "no known signature") return true;
    Options blind = o;
    blind.rerun = nullptr;
    if (diagnose(d, ref, out, blind).top() == top) return true;
    if (!o.rerun || reruns >= budget) return false;
    Options probed = o;
    probed.max_reruns = std::min(o.max_reruns, budget - reruns);
    const Diagnosis full = diagnose(d, ref, out, probed);
    reruns += full.reruns;
    return full.top() == top;
  }
};

// The greedy steps, each kept when `keeps` holds on the reduced case.
void reduce_steps(Reduction& r, const std::function<bool(const prop::Case&)>& keeps) {
  const prop::Case original = r.reduced;
  // Varlen: one packed sequence as a problem of its own first; the cuts below work on an ordinary problem.
  for (int64_t s = 0; s < original.p.sequences(); ++s) {
    const Problem& v = original.p;
    if (v.cu_seqlens_q[static_cast<size_t>(s) + 1] == v.cu_seqlens_q[static_cast<size_t>(s)] ||
        v.cu_seqlens_k[static_cast<size_t>(s) + 1] == v.cu_seqlens_k[static_cast<size_t>(s)])
      continue;
    Attended a = sequence_problem(v, original.in, s);
    prop::Case d{original.spec, std::move(a.p), std::move(a.in)};
    if (keeps(d)) {
      r.reduced = std::move(d), ++r.steps;
      break;
    }
  }
  // Paged: the contiguous problem it stands for, when the candidate still fails the same way on it; a failure that
  // needs the pages keeps them, and the cuts below keep the block table consistent.
  if (r.reduced.p.page_size > 0) {
    Attended a = gather_pages(r.reduced.p, r.reduced.in);
    prop::Case d{r.reduced.spec, std::move(a.p), std::move(a.in)};
    if (keeps(d)) r.reduced = std::move(d), ++r.steps;
  }
  const prop::Case c = r.reduced;
  const Problem& p = c.p;
  Cut cur = whole(p);
  auto attempt = [&](const Cut& k) {
    prop::Case d;
    try {
      d = cut(c, k);
    } catch (const std::invalid_argument&) {
      return false;
    }
    if (!keeps(d)) return false;
    cur = k, r.reduced = std::move(d), ++r.steps;
    return true;
  };
  // The shortest n in [1, cur] for which make(n) still fails (a bisection: the failure need not be monotone in n,
  // so this finds a short failing n, not always the shortest).
  auto shortest = [&](int64_t hi, const std::function<Cut(int64_t)>& make) {
    int64_t lo = 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (attempt(make(mid)))
        hi = mid;
      else
        lo = mid + 1;
    }
  };
  const int64_t G = p.group_size();
  for (int64_t b = 0; cur.nb > 1 && b < p.B; ++b) {
    Cut k = cur;
    k.b0 = b, k.nb = 1;
    if (attempt(k)) break;
  }
  for (int64_t g = 0; cur.ng > 1 && g < p.Hkv; ++g) {
    Cut k = cur;
    k.g0 = g, k.ng = 1, k.h0 = g * G, k.nh = G;
    if (attempt(k)) break;
  }
  for (int64_t h = cur.h0; cur.nh > 1 && h < cur.h0 + cur.nh; ++h) {
    Cut k = cur;
    k.h0 = h, k.nh = 1, k.g0 = p.kv_head(h), k.ng = 1;
    if (attempt(k)) break;
  }
  while (cur.nq > 1) {  // halves of the query rows: the first, else the second
    Cut a = cur, b = cur;
    a.nq = cur.nq / 2;
    b.i0 = cur.i0 + cur.nq / 2, b.nq = cur.nq - cur.nq / 2;
    if (!attempt(a) && !attempt(b)) break;
  }
  shortest(cur.nk, [&](int64_t n) {
    Cut k = cur;
    k.nk = n;
    return k;
  });
  shortest(cur.nk, [&](int64_t n) {  // then the fewest keys ending where the prefix ends: leading keys dropped
    Cut k = cur;
    k.k0 = cur.k0 + cur.nk - n, k.nk = n;
    return k;
  });
  shortest(std::max(cur.dqk, cur.dv), [&](int64_t n) {
    Cut k = cur;
    k.dqk = std::min(n, cur.dqk), k.dv = std::min(n, cur.dv);
    return k;
  });
  shortest(cur.dqk, [&](int64_t n) {
    Cut k = cur;
    k.dqk = n;
    return k;
  });
  shortest(cur.dv, [&](int64_t n) {
    Cut k = cur;
    k.dv = n;
    return k;
  });
  // Features the failure does not need (a causal mask that no longer masks anything, say), in a fixed order.
  for (const std::string& f : active_features(r.reduced.p)) {
    prop::Case d;
    try {
      d = without(r.reduced, f);
    } catch (const std::invalid_argument&) {
      continue;
    }
    if (keeps(d)) r.reduced = std::move(d), ++r.steps;
  }
}

}  // namespace

Reduction reduce(const prop::Case& original, const Impl& impl, const std::string& top, const Options& o, int budget) {
  Trial t{impl, o, top, budget};
  Reduction r{original, {}, 0, 0};
  reduce_steps(r, [&](const prop::Case& d) { return t.keeps(d); });

  // The reduced case's own diagnosis (the original's when nothing was removed is recomputed the same way).
  Outputs out;
  try {
    run_impl(impl, r.reduced.p, r.reduced.in, out);
    ++t.reruns;
    Options probed = o;
    probed.max_reruns = std::max(0, std::min(o.max_reruns, budget - t.reruns));
    if (probed.max_reruns == 0) probed.rerun = nullptr;
    r.diagnosis = diagnose(r.reduced, expected_attention(r.reduced.p, r.reduced.in), out, probed);
    t.reruns += r.diagnosis.reruns;
  } catch (const std::exception&) {
  }
  r.reruns = t.reruns;
  return r;
}

Reduction reduce_while(const prop::Case& original, const std::function<bool(const prop::Case&)>& fails, int budget) {
  Reduction r{original, {}, 0, 0};
  reduce_steps(r, [&](const prop::Case& d) {
    if (r.reruns >= budget) return false;
    ++r.reruns;
    try {
      return fails(d);
    } catch (const std::exception&) {
      return false;  // a crash is another failure than the one being reduced
    }
  });
  return r;
}

}  // namespace attncheck::diagnose
