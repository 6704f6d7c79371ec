// The module's tolerance model through the projections, the softmax and Wo (docs/module.md "The declared contract
// and the tolerance"): a first-order worst-case bound computed from the fp64 forward's trace.
#include <cmath>

#include "attncheck/module_problem.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/module_tolerance.hpp"
#include "module_errors.hpp"

namespace attncheck {
inline namespace tolerance {

using module_errors::at;
using module_trace::Heads;
using module_trace::Trace;

namespace module_errors {

ForwardErrors forward_errors(const ModuleProblem& m, const ModuleInputs& in, const Trace& t) {
  const Problem& p = t.attn;           // the attention that ran (a fault may change its scale, mask or dropout)
  const DType dt = m.attn.dtype;       // t.attn runs in fp64; the contract is the module's dtype
  const double u = unit_roundoff(dt);  // storage of q, k, v, o, y
  const double ua = dt == DType::f64 ? u : 0x1.0p-24;                // fp32 accumulation
  const double up = dt == DType::f16 || dt == DType::bf16 ? u : ua;  // P rounded for P·V (contract)
  const double scale = std::fabs(p.effective_scale());
  const double logit_abs = ModSet(p).logit_abs_error();
  // Projection errors: accumulation over d_in (+ the bias) in fp32, then rounding to the dtype.
  auto proj_err = [&](const Heads& h, int64_t n_in) {
    std::vector<double> e(h.val.size());
    for (size_t n = 0; n < e.size(); ++n)
      e[n] = static_cast<double>(n_in + 1) * ua * h.mag[n] + u * std::fabs(h.val[n]);
    return e;
  };
  ForwardErrors fe;
  fe.eq = proj_err(t.q, m.d_in), fe.ek = proj_err(t.k, m.d_kv()), fe.ev = proj_err(t.v, m.d_kv());
  const std::vector<double>&eq = fe.eq, &ek = fe.ek, &ev = fe.ev;
  fe.eo.assign(at(p.B * p.Hq * p.Lq * p.Dv), 0.0);
  fe.ew.assign(at(p.B * p.Hq * p.Lq * p.Lk), 0.0);
  fe.es.assign(at(p.B * p.Hq * p.Lq * p.Lk), 0.0);
  fe.sbar.assign(at(p.B * p.Hq * p.Lq), 0.0);
  std::vector<double>&eo = fe.eo, &ew = fe.ew;
  const double eps_p = static_cast<double>(p.Lk + 6) * ua;  // exp (4 ulp), row sum, division
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.Lq; ++i) {
        const size_t row = at((b * p.Hq + h) * p.Lq + i);
        const double* P = &t.r.weights[row * at(p.Lk)];
        // Score errors: operand errors through the dot product, its fp32 accumulation, scale and bias roundings.
        double* es = &fe.es[row * at(p.Lk)];
        double& sbar = fe.sbar[row];
        for (int64_t j = 0; j < p.Lk; ++j) {
          if (!(P[j] > 0)) continue;  // masked keys (and NaN rows of the nan policy) carry no error
          double op = 0, mag = 0;
          for (int64_t d = 0; d < p.Dqk; ++d) {
            const size_t qi = at(((b * p.Hq + h) * p.Lq + i) * p.Dqk + d),
                         ki = at(((b * p.Hkv + g) * p.Lk + j) * p.Dqk + d);
            const double aq = std::fabs(t.q.val[qi]), ak = std::fabs(t.k.val[ki]);
            op += eq[qi] * ak + aq * ek[ki] + eq[qi] * ek[ki];
            mag += (aq + eq[qi]) * (ak + ek[ki]);
          }
          double e = scale * op + static_cast<double>(p.Dqk + 2) * ua * scale * mag;
          if (in.bias)
            e += ua * std::fabs(in.bias->at(b % in.bias->shape[0], h % in.bias->shape[1], i % in.bias->shape[2],
                                            j % in.bias->shape[3]));
          if (logit_abs > 0) e += ua * logit_abs;  // the logit stage's evaluation (its entries' abs_error)
          es[j] = e;
          sbar += P[j] * e;
        }
        for (int64_t j = 0; j < p.Lk; ++j)
          if (P[j] > 0) ew[row * at(p.Lk) + at(j)] = P[j] * (es[j] + sbar + eps_p + ua);
        // out_d = sum_j P_j w_j v_jd: dP_j = P_j (ds_j - sum_l P_l ds_l) gives sum_j P_j w_j |ds_j||v_jd| + sbar |o_d|.
        for (int64_t d = 0; d < p.Dv; ++d) {
          double sens = 0, vabs = 0, verr = 0;
          for (int64_t j = 0; j < p.Lk; ++j) {
            if (!(P[j] > 0)) continue;
            const double w = in.keep ? (in.keep->at(b, h, i, j) != 0 ? 1.0 / (1.0 - p.dropout_p) : 0.0) : 1.0;
            const size_t vi = at(((b * p.Hkv + g) * p.Lk + j) * p.Dv + d);
            const double av = std::fabs(t.v.val[vi]);
            sens += P[j] * w * es[j] * av;
            vabs += P[j] * w * av;
            verr += P[j] * w * ev[vi];
          }
          const double o = std::fabs(t.r.out[row * at(p.Dv) + at(d)]);
          eo[row * at(p.Dv) + at(d)] =
              sens + verr + sbar * o + (eps_p + up + static_cast<double>(p.Lk + 1) * ua) * vabs + u * o;
        }
      }
    }
  return fe;
}

}  // namespace module_errors

ModuleTolerance module_tolerance(const ModuleProblem& m, const ModuleInputs& in, ModuleFault fault) {
  Trace t;
  const ModuleResult res = module_trace::forward(m, in, fault, t);
  const Problem& p = t.attn;
  const DType dt = m.attn.dtype;
  const double u = unit_roundoff(dt), ua = dt == DType::f64 ? u : 0x1.0p-24;
  const module_errors::ForwardErrors fe = module_errors::forward_errors(m, in, t);
  const std::vector<double>&eo = fe.eo, &ew = fe.ew;
  ModuleTolerance tol;
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
  const std::vector<double> bo =
      m.out_bias && fault != ModuleFault::out_bias ? in.bo->to_double() : std::vector<double>{};
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
        e = in.keep->at(tok / p.Lq, 0, tok % p.Lq, c % p.Lk) != 0
                ? e / (1.0 - m.attn.dropout_p) + ua * std::fabs(res.y[yi])
                : 0.0;
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

}  // namespace tolerance
}  // namespace attncheck
