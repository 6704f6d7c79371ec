// The module's fp64 reference (the seeds' per-token loops with the projections around the looped attention) and
// its tolerance model through the projections (docs/module.md "Tolerance"). The attention itself is always
// reference_attention, so masks, policies and dropout mean exactly what they mean there.
#include <cmath>

#include "attncheck/module_problem.hpp"
#include "attncheck/reference.hpp"

namespace attncheck {

namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

// One projection's weight rows selected from wq/wk/wv or from the packed wqkv, as a dense [rows, in] matrix.
struct Rows {
  int64_t rows = 0, in = 0;
  std::vector<double> w, b;  // b empty without a bias
};

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

// q, k or v after the projection and the head split, [B, H, L, D] row-major: exact values and the magnitudes
// |b| + sum_e |x_e||W_e| their accumulation errors scale with.
struct Heads {
  int64_t H = 0, L = 0, D = 0;
  std::vector<double> val, mag;
};

Heads project(const ModuleProblem& m, const Tensor& x, const Rows& r, int64_t H, int64_t D, ModuleFault fault) {
  const int64_t B = m.attn.B, L = x.shape[1];
  const std::vector<double> xs = x.to_double();
  Heads out{H, L, D, std::vector<double>(at(B * H * L * D)), std::vector<double>(at(B * H * L * D))};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)      // for each token:
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

// Everything the tolerance model needs besides the result.
struct Trace {
  Problem attn;  // the fp64 attention that ran
  Heads q, k, v;
  ReferenceResult r;           // its out [B, Hq, Lq, Dv] and pre-dropout weights
  std::vector<double> merged;  // [B, Lq, Hq*Dv]
};

ModuleResult forward(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault, Trace& t) {
  validate(m, in);
  const Problem& p = m.attn;
  const Tensor& xkv = m.cross() ? *in.x2 : in.x;
  t.q = project(m, in.x, select(m, in, 0, fault), p.Hq, p.Dqk, fault);  // [B, Hq, Lq, Dqk]
  t.k = project(m, xkv, select(m, in, 1, fault), p.Hkv, p.Dqk, fault);  // [B, Hkv, Lk, Dqk]
  t.v = project(m, xkv, select(m, in, 2, fault), p.Hkv, p.Dv, fault);   // [B, Hkv, Lk, Dv]

  Problem a = p;
  a.dtype = DType::f64;  // no rounding of q, k, v: the oracle is exact math on the stored inputs
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
  t.r = reference_attention(a, ai);

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
  const std::vector<double> bo = m.out_bias && fault != ModuleFault::out_bias ? in.bo->to_double() : std::vector<double>{};
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

}  // namespace

ModuleResult reference_module(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault) {
  Trace t;
  return forward(m, in, fault, t);
}

ModuleTolerance module_tolerance(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault) {
  Trace t;
  const ModuleResult res = forward(m, in, fault, t);
  const Problem& p = t.attn;  // the attention that ran (a fault may change its scale, mask or dropout)
  const DType dt = m.attn.dtype;  // t.attn runs in fp64; the contract is the module's dtype
  const double u = unit_roundoff(dt);                 // storage of q, k, v, o, y
  const double ua = dt == DType::f64 ? u : 0x1.0p-24;  // fp32 accumulation
  const double up = dt == DType::f16 || dt == DType::bf16 ? u : ua;  // P rounded for P·V (contract)
  const double scale = std::fabs(p.effective_scale());
  // Projection errors: accumulation over d_in (+ the bias) in fp32, then rounding to the dtype.
  auto proj_err = [&](const Heads& h, int64_t n_in) {
    std::vector<double> e(h.val.size());
    for (size_t n = 0; n < e.size(); ++n)
      e[n] = static_cast<double>(n_in + 1) * ua * h.mag[n] + u * std::fabs(h.val[n]);
    return e;
  };
  const std::vector<double> eq = proj_err(t.q, m.d_in), ek = proj_err(t.k, m.d_kv()), ev = proj_err(t.v, m.d_kv());
  ModuleTolerance tol;
  std::vector<double> eo(at(p.B * p.Hq * p.Lq * p.Dv), 0.0), ew(at(p.B * p.Hq * p.Lq * p.Lk), 0.0);
  const double eps_p = static_cast<double>(p.Lk + 6) * ua;  // exp (4 ulp), row sum, division
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.Lq; ++i) {
        const size_t row = at((b * p.Hq + h) * p.Lq + i);
        const double* P = &t.r.weights[row * at(p.Lk)];
        // Score errors: operand errors through the dot product, its fp32 accumulation, scale and bias roundings.
        std::vector<double> es(at(p.Lk), 0.0);
        double sbar = 0;
        for (int64_t j = 0; j < p.Lk; ++j) {
          if (!(P[j] > 0)) continue;  // masked keys (and NaN rows of the nan policy) carry no error
          double op = 0, mag = 0;
          for (int64_t d = 0; d < p.Dqk; ++d) {
            const size_t qi = at(((b * p.Hq + h) * p.Lq + i) * p.Dqk + d), ki = at(((b * p.Hkv + g) * p.Lk + j) * p.Dqk + d);
            const double aq = std::fabs(t.q.val[qi]), ak = std::fabs(t.k.val[ki]);
            op += eq[qi] * ak + aq * ek[ki] + eq[qi] * ek[ki];
            mag += (aq + eq[qi]) * (ak + ek[ki]);
          }
          double e = scale * op + static_cast<double>(p.Dqk + 2) * ua * scale * mag;
          if (in.bias) e += ua * std::fabs(in.bias->at(b % in.bias->shape[0], h % in.bias->shape[1],
                                                        i % in.bias->shape[2], j % in.bias->shape[3]));
          if (p.softcap > 0) e += 4 * ua * p.softcap;
          es[at(j)] = e;
          sbar += P[j] * e;
        }
        for (int64_t j = 0; j < p.Lk; ++j)
          if (P[j] > 0) ew[row * at(p.Lk) + at(j)] = P[j] * (es[at(j)] + sbar + eps_p + ua);
        // out_d = sum_j P_j w_j v_jd: dP_j = P_j (ds_j - sum_l P_l ds_l) gives sum_j P_j w_j |ds_j||v_jd| + sbar |o_d|.
        for (int64_t d = 0; d < p.Dv; ++d) {
          double sens = 0, vabs = 0, verr = 0;
          for (int64_t j = 0; j < p.Lk; ++j) {
            if (!(P[j] > 0)) continue;
            const double w = in.keep ? (in.keep->at(b, h, i, j) != 0 ? 1.0 / (1.0 - p.dropout_p) : 0.0) : 1.0;
            const size_t vi = at(((b * p.Hkv + g) * p.Lk + j) * p.Dv + d);
            const double av = std::fabs(t.v.val[vi]);
            sens += P[j] * w * es[at(j)] * av;
            vabs += P[j] * w * av;
            verr += P[j] * w * ev[vi];
          }
          const double o = std::fabs(t.r.out[row * at(p.Dv) + at(d)]);
          eo[row * at(p.Dv) + at(d)] =
              sens + verr + sbar * o + (eps_p + up + static_cast<double>(p.Lk + 1) * ua) * vabs + u * o;
        }
      }
    }
  // y_c = sum_m merged_m Wo[c, m] + bo_c: the errors of o (moved as forward merges them) through Wo, the fp32
  // accumulation, rounding to the dtype; dropout after Wo (a fault) scales kept elements by 1/(1-p).
  const int64_t HD = p.Hq * p.Dv;
  std::vector<double> emerged(t.merged.size());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) {
          const int64_t src = ((b * p.Hq + h) * p.Lq + i) * p.Dv + d;
          emerged[at(fault == ModuleFault::head_split ? src : (b * p.Lq + i) * HD + h * p.Dv + d)] = eo[at(src)];
        }
  const std::vector<double> wo = in.wo.to_double();
  const std::vector<double> bo = m.out_bias && fault != ModuleFault::out_bias ? in.bo->to_double() : std::vector<double>{};
  tol.y.assign(res.y.size(), 0.0);
  for (int64_t tok = 0; tok < p.B * p.Lq; ++tok)
    for (int64_t c = 0; c < m.d_out; ++c) {
      double prop = 0, mag = bo.empty() ? 0.0 : std::fabs(bo[at(c)]);
      for (int64_t e = 0; e < HD; ++e) {
        const double w = std::fabs(wo[at(c * HD + e)]);
        prop += emerged[at(tok * HD + e)] * w;
        mag += std::fabs(t.merged[at(tok * HD + e)]) * w;
      }
      const size_t yi = at(tok * m.d_out + c);
      double e = prop + static_cast<double>(HD + 1) * ua * mag;
      if (fault == ModuleFault::dropout_after_projection && m.attn.dropout_p > 0)
        e = in.keep->at(tok / p.Lq, 0, tok % p.Lq, c % p.Lk) != 0 ? e / (1.0 - m.attn.dropout_p) + ua * std::fabs(res.y[yi]) : 0.0;
      tol.y[yi] = e + u * std::fabs(res.y[yi]);
    }
  if (m.attn.want_weights) {
    if (!m.average_weights) {
      tol.weights = ew;
    } else {  // the mean of the heads' bounds, plus the mean's own accumulation and its fp32 storage
      tol.weights.assign(res.weights.size(), 0.0);
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hq; ++h)
          for (int64_t n = 0; n < p.Lq * p.Lk; ++n)
            tol.weights[at(b * p.Lq * p.Lk + n)] +=
                ew[at((b * p.Hq + h) * p.Lq * p.Lk + n)] / (fault == ModuleFault::weights_average ? 1.0 : double(p.Hq));
      for (size_t n = 0; n < tol.weights.size(); ++n)
        tol.weights[n] += static_cast<double>(p.Hq + 1) * ua * std::fabs(res.weights[n]);
    }
  }
  return tol;
}

}  // namespace attncheck
