// The module level around the looped reference: linear projections, head split/merge, multi-head self and cross
// attention, and the seeds' wrapper of independent single heads. Plain loops in double; the attention itself is
// always reference_attention, so masks, policies and dropout mean exactly what they mean there.
#include "attncheck/module.hpp"

#include <sstream>
#include <string>

namespace attncheck {
inline namespace oracle {

namespace {
[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

std::string dims(std::initializer_list<int64_t> v) {
  std::ostringstream o;
  o << '[';
  size_t n = 0;
  for (int64_t x : v) o << (n++ ? "," : "") << x;
  o << ']';
  return o.str();
}

void check_seq(const char* name, const Seq& x) {
  if (x.B < 1 || x.L < 1 || x.E < 1)
    fail(std::string(name) + " shape [B,L,E] must be positive, got " + dims({x.B, x.L, x.E}));
  if (static_cast<int64_t>(x.x.size()) != x.B * x.L * x.E)
    fail(std::string(name) + " holds " + std::to_string(x.x.size()) +
         " values, expected B*L*E=" + std::to_string(x.B * x.L * x.E) + " for shape " + dims({x.B, x.L, x.E}));
}

// The linear layer must map `in` features to `out` features.
void check_linear(const char* name, const Linear& l, int64_t in, int64_t out) {
  if (l.in != in || l.out != out)
    fail(std::string(name) + " shape [in,out] must be " + dims({in, out}) + ", got " + dims({l.in, l.out}));
  if (static_cast<int64_t>(l.w.size()) != l.in * l.out)
    fail(std::string(name) + ".w holds " + std::to_string(l.w.size()) +
         " values, expected in*out=" + std::to_string(l.in * l.out));
  if (!l.b.empty() && static_cast<int64_t>(l.b.size()) != l.out)
    fail(std::string(name) + ".b holds " + std::to_string(l.b.size()) +
         " values, expected out=" + std::to_string(l.out) + " (or none)");
}

// Slice h of a [B, H or 1, Lq, Lk] tensor, as a [B, 1, Lq, Lk] tensor (broadcast heads stay as they are).
Tensor head_slice(const Tensor& t, int64_t h) {
  if (t.shape[1] == 1) return t;
  Tensor s(t.dtype, {t.shape[0], 1, t.shape[2], t.shape[3]});
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t i = 0; i < t.shape[2]; ++i)
      for (int64_t j = 0; j < t.shape[3]; ++j) s.put(b, 0, i, j, t.at(b, h, i, j));
  return s;
}

// The seq that keys and values come from, checked against the problem.
const Seq& kv_source(const Problem& p, const Seq& x_q, const Seq* x_kv) {
  check_seq("x_q", x_q);
  if (x_q.B != p.B || x_q.L != p.Lq)
    fail("x_q shape [B,L,E]=" + dims({x_q.B, x_q.L, x_q.E}) + " does not match the problem's B=" + std::to_string(p.B) +
         " Lq=" + std::to_string(p.Lq));
  if (!x_kv) {
    if (p.Lk != p.Lq)
      fail("self attention (no x_kv) needs Lk == Lq, got Lq=" + std::to_string(p.Lq) + " Lk=" + std::to_string(p.Lk));
    return x_q;
  }
  check_seq("x_kv", *x_kv);
  if (x_kv->B != p.B || x_kv->L != p.Lk)
    fail("x_kv shape [B,L,E]=" + dims({x_kv->B, x_kv->L, x_kv->E}) +
         " does not match the problem's B=" + std::to_string(p.B) + " Lk=" + std::to_string(p.Lk));
  return *x_kv;
}
}  // namespace

Seq linear(const Seq& x, const Linear& l, const char* name) {
  check_seq("x", x);
  check_linear(name, l, x.E, l.out);
  if (l.out < 1) fail(std::string(name) + ".out must be >= 1, got " + std::to_string(l.out));
  Seq y{x.B, x.L, l.out, std::vector<double>(static_cast<size_t>(x.B * x.L * l.out))};
  for (int64_t t = 0; t < x.B * x.L; ++t)  // for each token: y_t = x_t · W + b
    for (int64_t o = 0; o < l.out; ++o) {
      double acc = l.b.empty() ? 0.0 : l.b[static_cast<size_t>(o)];
      for (int64_t e = 0; e < x.E; ++e)
        acc += x.x[static_cast<size_t>(t * x.E + e)] * l.w[static_cast<size_t>(e * l.out + o)];
      y.x[static_cast<size_t>(t * l.out + o)] = acc;
    }
  return y;
}

void split_heads(const Seq& x, int64_t col0, int64_t H, int64_t D, Tensor& t) {
  if (col0 < 0 || col0 + H * D > x.E)
    fail("split_heads: columns [" + std::to_string(col0) + ", " + std::to_string(col0 + H * D) +
         ") are outside E=" + std::to_string(x.E));
  if (t.shape != std::vector<int64_t>{x.B, H, x.L, D})
    fail("split_heads: target shape must be " + dims({x.B, H, x.L, D}));
  for (int64_t b = 0; b < x.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < x.L; ++l)
        for (int64_t d = 0; d < D; ++d) t.put(b, h, l, d, x.at(b, l, col0 + h * D + d));  // column h*D + d
}

Seq merge_heads(const std::vector<double>& o, int64_t B, int64_t H, int64_t L, int64_t D) {
  if (static_cast<int64_t>(o.size()) != B * H * L * D)
    fail("merge_heads: input holds " + std::to_string(o.size()) + " values, expected B*H*L*D for " +
         dims({B, H, L, D}));
  Seq y{B, L, H * D, std::vector<double>(o.size())};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t d = 0; d < D; ++d)
          y.x[static_cast<size_t>((b * L + l) * H * D + h * D + d)] =
              o[static_cast<size_t>(((b * H + h) * L + l) * D + d)];
  return y;
}

MhaResult reference_mha(const Problem& p, const MhaWeights& w, const Seq& x_q, const Seq* x_kv,
                        const AttentionExtras& extras, int threads) {
  validate(p);
  const Seq& xkv = kv_source(p, x_q, x_kv);
  const int64_t nq = p.Hq * p.Dqk, nk = p.Hkv * p.Dqk, nv = p.Hkv * p.Dv;
  Inputs in{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), extras.mask, extras.bias, extras.keep, {}, {}};
  if (w.wqkv) {
    if (w.wq || w.wk || w.wv) fail("weights: give either wqkv (packed) or wq/wk/wv (separate), not both");
    if (x_kv) fail("wqkv (packed) projects one input: it is for self attention only, but x_kv was given");
    check_linear("wqkv", *w.wqkv, x_q.E, nq + nk + nv);
    const Seq qkv = linear(x_q, *w.wqkv, "wqkv");  // [B, L, q | k | v]
    split_heads(qkv, 0, p.Hq, p.Dqk, in.q);
    split_heads(qkv, nq, p.Hkv, p.Dqk, in.k);
    split_heads(qkv, nq + nk, p.Hkv, p.Dv, in.v);
  } else {
    if (!w.wq || !w.wk || !w.wv) fail("weights: wq, wk and wv are all required when wqkv is not given");
    check_linear("wq", *w.wq, x_q.E, nq);
    check_linear("wk", *w.wk, xkv.E, nk);
    check_linear("wv", *w.wv, xkv.E, nv);
    split_heads(linear(x_q, *w.wq, "wq"), 0, p.Hq, p.Dqk, in.q);   // [B, Lq, Hq*Dqk] -> [B, Hq, Lq, Dqk]
    split_heads(linear(xkv, *w.wk, "wk"), 0, p.Hkv, p.Dqk, in.k);  // [B, Lk, Hkv*Dqk] -> [B, Hkv, Lk, Dqk]
    split_heads(linear(xkv, *w.wv, "wv"), 0, p.Hkv, p.Dv, in.v);   // [B, Lk, Hkv*Dv] -> [B, Hkv, Lk, Dv]
  }
  check_linear("wo", w.wo, p.Hq * p.Dv, w.wo.out);
  MhaResult r;
  r.attn = reference_attention(p, in, threads);
  r.merged = merge_heads(r.attn.out, p.B, p.Hq, p.Lq, p.Dv);  // [B, Lq, Hq*Dv]
  r.out = linear(r.merged, w.wo, "wo");                       // [B, Lq, Eout]
  return r;
}

MhaResult reference_wrapper(const Problem& p, const std::vector<HeadWeights>& heads, const Linear* wo, const Seq& x_q,
                            const Seq* x_kv, const AttentionExtras& extras, int threads) {
  validate(p);
  const int64_t H = static_cast<int64_t>(heads.size());
  if (p.Hq != H || p.Hkv != H)
    fail("wrapper: Hq and Hkv must equal the number of heads " + std::to_string(H) +
         ", got Hq=" + std::to_string(p.Hq) + " Hkv=" + std::to_string(p.Hkv));
  const Seq& xkv = kv_source(p, x_q, x_kv);
  // Check the masks, bias and keep-mask against the whole problem before slicing them per head.
  validate(p, Inputs{make_qkv(p, 0), make_qkv(p, 1), make_qkv(p, 2), extras.mask, extras.bias, extras.keep, {}, {}});
  Problem one = p;  // each head is an independent single-head attention
  one.Hq = one.Hkv = 1;
  if (one.mask_shape) (*one.mask_shape)[1] = 1;
  if (one.bias_shape) (*one.bias_shape)[1] = 1;

  MhaResult r;
  const size_t rows = static_cast<size_t>(p.B * p.Lq);
  r.attn.out.assign(rows * static_cast<size_t>(H * p.Dv), 0.0);
  r.attn.lse.assign(rows * static_cast<size_t>(H), 0.0);
  if (p.want_weights) r.attn.weights.assign(rows * static_cast<size_t>(H * p.Lk), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    const std::string tag = "heads[" + std::to_string(h) + "].";
    const HeadWeights& hw = heads[static_cast<size_t>(h)];
    check_linear((tag + "wq").c_str(), hw.wq, x_q.E, p.Dqk);
    check_linear((tag + "wk").c_str(), hw.wk, xkv.E, p.Dqk);
    check_linear((tag + "wv").c_str(), hw.wv, xkv.E, p.Dv);
    Inputs in{make_qkv(one, 0), make_qkv(one, 1), make_qkv(one, 2), {}, {}, {}, {}, {}};
    split_heads(linear(x_q, hw.wq, "wq"), 0, 1, p.Dqk, in.q);
    split_heads(linear(xkv, hw.wk, "wk"), 0, 1, p.Dqk, in.k);
    split_heads(linear(xkv, hw.wv, "wv"), 0, 1, p.Dv, in.v);
    if (extras.mask) in.mask = head_slice(*extras.mask, h);
    if (extras.bias) in.bias = head_slice(*extras.bias, h);
    if (extras.keep) in.keep = head_slice(*extras.keep, h);
    const ReferenceResult hr = reference_attention(one, in, threads);
    // Scatter head h's [B, 1, Lq, ...] results into the [B, H, Lq, ...] layout of a multi-head result.
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const size_t src = static_cast<size_t>(b * p.Lq + i), dst = static_cast<size_t>((b * H + h) * p.Lq + i);
        r.attn.lse[dst] = hr.lse[src];
        for (int64_t d = 0; d < p.Dv; ++d)
          r.attn.out[dst * static_cast<size_t>(p.Dv) + static_cast<size_t>(d)] =
              hr.out[src * static_cast<size_t>(p.Dv) + static_cast<size_t>(d)];
        if (p.want_weights)
          for (int64_t j = 0; j < p.Lk; ++j)
            r.attn.weights[dst * static_cast<size_t>(p.Lk) + static_cast<size_t>(j)] =
                hr.weights[src * static_cast<size_t>(p.Lk) + static_cast<size_t>(j)];
      }
  }
  r.merged = merge_heads(r.attn.out, p.B, H, p.Lq, p.Dv);  // torch.cat([head(x) for head in heads], dim=-1)
  if (wo) {
    check_linear("wo", *wo, H * p.Dv, wo->out);
    r.out = linear(r.merged, *wo, "wo");
  } else {
    r.out = r.merged;
  }
  return r;
}

}  // namespace oracle
}  // namespace attncheck
