// The module's fp64 reference: the seeds' per-token loops with the projections around the looped attention. The
// attention itself is always reference_attention, so masks, policies and dropout mean exactly what they mean there.
#include <cmath>

#include "attncheck/module_problem.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/module_reference.hpp"
#include "module_detail.hpp"

namespace attncheck {
inline namespace oracle {

namespace module_detail {

// The row of a packed weight that holds feature d of head h of q (which = 0), k (1) or v (2).
int64_t packed_row(const ModuleProblem& m, Packing pk, int which, int64_t h, int64_t d) {
  const Problem& p = m.attn;
  if (pk == Packing::packed) {
    if (which == 0) return h * p.Dqk + d;
    if (which == 1) return m.rows_q() + h * p.Dqk + d;
    return m.rows_q() + m.rows_k() + h * p.Dv + d;
  }
  const int64_t G = p.group_size(), block = G * p.Dqk + p.Dqk + p.Dv;  // interleaved: one block per KV head
  if (which == 0) return (h / G) * block + (h % G) * p.Dqk + d;
  if (which == 1) return h * block + G * p.Dqk + d;
  return h * block + G * p.Dqk + p.Dqk + d;
}

}  // namespace module_detail

namespace module_trace {

using module_detail::at;
using module_detail::packed_row;

Rows select(const ModuleProblem& m, const ModuleInputs& in, int which, ModuleFault fault) {
  const Problem& p = m.attn;
  const int64_t H = which == 0 ? p.Hq : p.Hkv, D = which == 2 ? p.Dv : p.Dqk;
  Rows r{H * D, which == 0 ? m.d_in : m.d_kv(), {}, {}};
  if (m.packing == Packing::separate) {
    const Tensor& w = which == 0 ? *in.wq : which == 1 ? *in.wk : *in.wv;
    r.w = w.to_double();
    if (m.qkv_bias) r.b = (which == 0 ? *in.bq : which == 1 ? *in.bk : *in.bv).to_double();
    return r;
  }
  Packing pk = m.packing;
  if (fault == ModuleFault::qkv_order) pk = pk == Packing::packed ? Packing::interleaved : Packing::packed;
  const std::vector<double> w = in.wqkv->to_double(), b = m.qkv_bias ? in.bqkv->to_double() : std::vector<double>{};
  r.w.resize(at(r.rows * r.in));
  if (m.qkv_bias) r.b.resize(at(r.rows));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t src = packed_row(m, pk, which, h, d), dst = h * D + d;
      for (int64_t e = 0; e < r.in; ++e) r.w[at(dst * r.in + e)] = w[at(src * r.in + e)];
      if (m.qkv_bias) r.b[at(dst)] = b[at(src)];
    }
  return r;
}

Heads project(const ModuleProblem& m, const Tensor& x, const Rows& r, int64_t H, int64_t D, ModuleFault fault) {
  const int64_t B = m.attn.B, L = x.shape[1];
  const std::vector<double> xs = x.to_double();
  Heads out{H, L, D, std::vector<double>(at(B * H * L * D)), std::vector<double>(at(B * H * L * D))};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)          // for each token:
      for (int64_t c = 0; c < H * D; ++c) {  // feature c of x_t · Wᵀ + b
        double acc = r.b.empty() ? 0.0 : r.b[at(c)], mag = std::fabs(acc);
        for (int64_t e = 0; e < r.in; ++e) {
          const double xv = xs[at((b * L + l) * r.in + e)], wv = r.w[at(c * r.in + e)];
          acc += xv * wv;
          mag += std::fabs(xv * wv);
        }
        // The head split: [B, L, H*D] viewed as [B, L, H, D] and transposed to [B, H, L, D]; the head-split bug
        // views the same memory as [B, H, L, D] directly.
        const int64_t h = c / D, d = c % D, flat = l * H * D + c;
        const int64_t dst = fault == ModuleFault::head_split ? b * H * L * D + flat : ((b * H + h) * L + l) * D + d;
        out.val[at(dst)] = acc;
        out.mag[at(dst)] = mag;
      }
  return out;
}

Tensor to_tensor(const Heads& h, int64_t B) {
  Tensor t(DType::f64, {B, h.H, h.L, h.D});
  for (size_t n = 0; n < h.val.size(); ++n) t.set_offset(static_cast<int64_t>(n), h.val[n]);
  return t;
}

ModuleResult forward(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault, Trace& t,
                     RowObserver* observer) {
  validate(m, in);
  const Problem& p = m.attn;
  const Tensor& xkv = m.cross() ? *in.x2 : in.x;
  t.q = project(m, in.x, select(m, in, 0, fault), p.Hq, p.Dqk, fault);  // [B, Hq, Lq, Dqk]
  t.k = project(m, xkv, select(m, in, 1, fault), p.Hkv, p.Dqk, fault);  // [B, Hkv, Lk, Dqk]
  t.v = project(m, xkv, select(m, in, 2, fault), p.Hkv, p.Dv, fault);   // [B, Hkv, Lk, Dv]

  Problem a = p;
  a.dtype = DType::f64;   // no rounding of q, k, v: the oracle is exact math on the stored inputs
  a.want_weights = true;  // the tolerance model needs the weights
  Inputs ai{to_tensor(t.q, p.B), to_tensor(t.k, p.B), to_tensor(t.v, p.B), in.mask, in.bias, in.keep, {}, {}};
  if (fault == ModuleFault::scale_d_model) a.scale = 1.0 / std::sqrt(static_cast<double>(p.Hq * p.Dqk));
  if (fault == ModuleFault::key_padding_broadcast && is_key_padding(m) && !m.cross()) {
    Tensor mq(DType::u8, {p.B, 1, p.Lq, 1});  // mask[b, j] read as a mask over queries i = j
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t i = 0; i < p.Lq; ++i) mq.put(b, 0, i, 0, in.mask->at(b, 0, 0, i));
    a.mask_shape = std::array<int64_t, 4>{p.B, 1, p.Lq, 1};
    ai.mask = mq;
  }
  if (fault == ModuleFault::dropout_after_projection) a.dropout_p = 0, ai.keep.reset();
  t.attn = a;
  t.r = reference_attention_rows(a, ai, {}, 0, observer);
  t.ai = ai;

  // Head merge: o [B, Hq, Lq, Dv] transposed to [B, Lq, Hq, Dv] and viewed as [B, Lq, Hq*Dv] (the head-split bug
  // views [B, Hq, Lq, Dv] as [B, Lq, Hq*Dv] directly).
  const int64_t HD = p.Hq * p.Dv;
  t.merged.assign(at(p.B * p.Lq * HD), 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) {
          const int64_t src = ((b * p.Hq + h) * p.Lq + i) * p.Dv + d;
          const int64_t dst = fault == ModuleFault::head_split ? src : (b * p.Lq + i) * HD + h * p.Dv + d;
          t.merged[at(dst)] = t.r.out[at(src)];
        }

  ModuleResult res;
  const std::vector<double> wo = in.wo.to_double();
  const std::vector<double> bo =
      m.out_bias && fault != ModuleFault::out_bias ? in.bo->to_double() : std::vector<double>{};
  res.y.assign(at(p.B * p.Lq * m.d_out), 0.0);
  for (int64_t tok = 0; tok < p.B * p.Lq; ++tok)  // for each query token: y_t = merged_t · Woᵀ + bo
    for (int64_t c = 0; c < m.d_out; ++c) {
      double acc = bo.empty() ? 0.0 : bo[at(c)];
      for (int64_t e = 0; e < HD; ++e) acc += t.merged[at(tok * HD + e)] * wo[at(c * HD + e)];
      if (fault == ModuleFault::dropout_after_projection && p.dropout_p > 0) {
        const int64_t b = tok / p.Lq, i = tok % p.Lq;
        acc = in.keep->at(b, 0, i, c % p.Lk) != 0 ? acc / (1.0 - p.dropout_p) : 0.0;
      }
      res.y[at(tok * m.d_out + c)] = acc;
    }
  if (p.want_weights) {
    if (!m.average_weights) {
      res.weights = t.r.weights;
    } else {
      res.weights.assign(at(p.B * p.Lq * p.Lk), 0.0);
      const double div = fault == ModuleFault::weights_average ? 1.0 : static_cast<double>(p.Hq);
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hq; ++h)
          for (int64_t n = 0; n < p.Lq * p.Lk; ++n)
            res.weights[at(b * p.Lq * p.Lk + n)] += t.r.weights[at((b * p.Hq + h) * p.Lq * p.Lk + n)] / div;
    }
  }
  return res;
}

}  // namespace module_trace

using module_trace::Trace;

ModuleResult reference_module(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault) {
  Trace t;
  return module_trace::forward(m, in, fault, t);
}

}  // namespace oracle
}  // namespace attncheck
