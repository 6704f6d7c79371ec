// The bound of a module's gradients (docs/module.md "Backward: the declared contract and the bound"): first order,
// worst case. The forward's errors of q, k, v, the scores and o (forward_errors) and dO's own error are carried
// through the attention backward's formulas; the attention backward's own rounding is grad_tolerance's bound at
// the exact inputs; the gradient GEMMs of Wo and of the projections accumulate in fp32 and round to the dtype.
#include <cmath>

#include "attncheck/module_problem.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/tolerance_backward.hpp"
#include "attncheck/module_reference.hpp"
#include "attncheck/module_tolerance.hpp"
#include "grad_scales_pass.hpp"
#include "module_errors.hpp"
#include "row_error_scales.hpp"

namespace attncheck {
inline namespace tolerance {

using module_errors::at;

namespace {

// Input-error propagation through the attention backward (docs/module.md): per element bounds of dq, dk, dv
// (layouts of BackwardResult) and dbias (bias_shape), from the errors eq, ek, ev of the operands, es of the scores
// and edo of dO.
struct AttnPropagation {
  std::vector<double> dq, dk, dv, dbias;
};

AttnPropagation propagate(const module_trace::Trace& t, const module_errors::ForwardErrors& fe, const Tensor& dout,
                          const std::vector<double>& edo) {
  const Problem& p = t.attn;
  const double scale = std::fabs(p.effective_scale());
  AttnPropagation r;
  r.dq.assign(t.q.val.size(), 0.0), r.dk.assign(t.k.val.size(), 0.0), r.dv.assign(t.v.val.size(), 0.0);
  if (p.bias_shape)
    r.dbias.assign(at((*p.bias_shape)[0] * (*p.bias_shape)[1] * (*p.bias_shape)[2] * (*p.bias_shape)[3]), 0.0);
  const std::vector<double> dO = dout.to_double();
  const ModSet mods(p);
  std::vector<double> dP(at(p.Lk)), edP(at(p.Lk));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.Lq; ++i) {
        const size_t row = at((b * p.Hq + h) * p.Lq + i);
        const double* P = &t.r.weights[row * at(p.Lk)];
        const double* es = &fe.es[row * at(p.Lk)];
        const double sbar = fe.sbar[row];
        auto kw = [&](int64_t j) {  // the dropout factor of key j
          return t.ai.keep ? (t.ai.keep->at(b, h, i, j) != 0 ? 1.0 / (1.0 - p.dropout_p) : 0.0) : 1.0;
        };
        auto vi = [&](int64_t j, int64_t d) { return at(((b * p.Hkv + g) * p.Lk + j) * p.Dv + d); };
        auto qi = [&](int64_t d) { return at(((b * p.Hq + h) * p.Lq + i) * p.Dqk + d); };
        auto ki = [&](int64_t j, int64_t d) { return at(((b * p.Hkv + g) * p.Lk + j) * p.Dqk + d); };
        // dP_j = w_j dO_i·v_j and its error; D = sum_j P_j dP_j and its error.
        double D = 0, eD = 0;
        for (int64_t j = 0; j < p.Lk; ++j) {
          dP[at(j)] = edP[at(j)] = 0;
          if (!(P[j] > 0)) continue;
          double s = 0, e = 0;
          for (int64_t d = 0; d < p.Dv; ++d) {
            const double o = dO[row * at(p.Dv) + at(d)];
            s += o * t.v.val[vi(j, d)];
            e += edo[row * at(p.Dv) + at(d)] * std::fabs(t.v.val[vi(j, d)]) + std::fabs(o) * fe.ev[vi(j, d)];
          }
          dP[at(j)] = kw(j) * s, edP[at(j)] = kw(j) * e;
          D += P[j] * dP[at(j)];
          eD += P[j] * (es[j] + sbar) * std::fabs(dP[at(j)]) + P[j] * edP[at(j)];
        }
        for (int64_t j = 0; j < p.Lk; ++j) {
          if (!(P[j] > 0)) continue;
          // dS_j = P_j (dP_j - D), with dP_j = P_j (ds_j - sum_l P_l ds_l) for the weights' error.
          const double eP = P[j] * (es[j] + sbar);
          const double dS = P[j] * (dP[at(j)] - D);
          const double eS = eP * std::fabs(dP[at(j)] - D) + P[j] * (edP[at(j)] + eD);
          double c = 1, dc = 0;  // the logit stage's chain factor and its error from the score's (entry facts)
          if (mods.has_logit()) {
            double x = 0;
            for (int64_t d = 0; d < p.Dqk; ++d) x += t.q.val[qi(d)] * t.k.val[ki(j, d)];
            c = mods.logit_derivative(ModAt{b, h, i, i + p.diagonal_offset(b), j}, x * p.effective_scale());
            dc = c * mods.logit_dscore_error(es[j]);
          }
          const double dX = dS * c, eX = eS * c + std::fabs(dS) * dc;
          for (int64_t d = 0; d < p.Dqk; ++d) {
            r.dq[qi(d)] += scale * (eX * std::fabs(t.k.val[ki(j, d)]) + std::fabs(dX) * fe.ek[ki(j, d)]);
            r.dk[ki(j, d)] += scale * (eX * std::fabs(t.q.val[qi(d)]) + std::fabs(dX) * fe.eq[qi(d)]);
          }
          for (int64_t d = 0; d < p.Dv; ++d)
            r.dv[vi(j, d)] += kw(j) * (eP * std::fabs(dO[row * at(p.Dv) + at(d)]) + P[j] * edo[row * at(p.Dv) + at(d)]);
          if (p.bias_shape) {
            const auto& s = *p.bias_shape;
            const int64_t n = (((s[0] == 1 ? 0 : b) * s[1] + (s[1] == 1 ? 0 : h)) * s[2] + (s[2] == 1 ? 0 : i)) * s[3] +
                              (s[3] == 1 ? 0 : j);
            r.dbias[at(n)] += eS;
          }
        }
      }
    }
  return r;
}

}  // namespace

ModuleGradients module_grad_tolerance(const ModuleProblem& m, const ModuleInputs& in, const std::vector<double>& dy,
                                      ModuleGradFault fault) {
  module_trace::BackwardTrace bt;
  ErrorScales attn_scales;  // the attention forward's and backward's, for its backward's own bound
  ExpectedGradients attn_grads;
  ErrorScalesPass pass(attn_scales);
  GradScalesPass grad_pass(attn_grads);
  module_trace::backward_trace(m, in, dy, bt, &pass, &grad_pass);
  static_cast<BackwardResult&>(attn_grads) = bt.a;
  const module_trace::Trace& t = bt.t;
  const BackwardResult& a = bt.a;
  const module_errors::ForwardErrors fe = module_errors::forward_errors(m, in, t);
  const ModuleGradients exact = reference_module_backward(m, in, dy, fault);  // |g| for the final rounding
  const Problem& p = m.attn;
  const DType dt = p.dtype;
  const double u = unit_roundoff(dt), ua = dt == DType::f64 ? u : 0x1.0p-24;
  const int64_t tokens = p.B * p.Lq, HD = p.Hq * p.Dv;
  const std::vector<double> wo = in.wo.to_double();
  ModuleGradients tol;

  // Wo: dbo = sum_tok dy, dWo = dyᵀ·merged (merged carries the forward's eo), dO = dy·Wo rounded to the dtype.
  std::vector<double> emerged(at(tokens * HD)), edo(at(tokens * HD));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d)
          emerged[at((b * p.Lq + i) * HD + h * p.Dv + d)] = fe.eo[at(((b * p.Hq + h) * p.Lq + i) * p.Dv + d)];
  tol.dwo.assign(at(m.d_out * HD), 0.0);
  if (m.out_bias) tol.dbo.assign(at(m.d_out), 0.0);
  std::vector<double> wo_mag(tol.dwo.size(), 0.0), bo_mag(at(m.d_out), 0.0);
  for (int64_t tok = 0; tok < tokens; ++tok)
    for (int64_t c = 0; c < m.d_out; ++c) {
      const double ady = std::fabs(dy[at(tok * m.d_out + c)]);
      bo_mag[at(c)] += ady;
      for (int64_t e = 0; e < HD; ++e) {
        tol.dwo[at(c * HD + e)] += ady * emerged[at(tok * HD + e)];
        wo_mag[at(c * HD + e)] += ady * std::fabs(t.merged[at(tok * HD + e)]);
        edo[at(tok * HD + e)] += ady * std::fabs(wo[at(c * HD + e)]);
      }
    }
  for (size_t n = 0; n < tol.dwo.size(); ++n) tol.dwo[n] += static_cast<double>(tokens + 1) * ua * wo_mag[n];
  if (fault == ModuleGradFault::wo_transposed) {  // the hypothesis moves the bound with the values
    std::vector<double> moved(tol.dwo.size());
    for (int64_t c = 0; c < m.d_out; ++c)
      for (int64_t e = 0; e < HD; ++e) moved[at(e * m.d_out + c)] = tol.dwo[at(c * HD + e)];
    tol.dwo = moved;
  }
  for (size_t n = 0; n < tol.dwo.size(); ++n) tol.dwo[n] += u * std::fabs(exact.dwo[n]);
  if (m.out_bias)
    for (int64_t c = 0; c < m.d_out; ++c)
      tol.dbo[at(c)] = fault == ModuleGradFault::out_bias_grad
                           ? 0.0
                           : static_cast<double>(tokens + 1) * ua * bo_mag[at(c)] + u * std::fabs(exact.dbo[at(c)]);
  // dO in the attention's layout [B, Hq, Lq, Dv]: accumulation over d_out in fp32, then rounded to the dtype.
  std::vector<double> edout(edo.size());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) {
          const size_t src = at((b * p.Lq + i) * HD + h * p.Dv + d);
          edout[at(((b * p.Hq + h) * p.Lq + i) * p.Dv + d)] =
              static_cast<double>(m.d_out + 1) * ua * edo[src] + u * std::fabs(bt.dmerged[src]);
        }

  // The attention backward: its own bound at the exact inputs plus the propagated input errors.
  Problem pd = t.attn;
  pd.dtype = dt;
  const GradTolerance own = grad_tolerance(pd, attn_scales, attn_grads);
  const AttnPropagation prop = propagate(t, fe, bt.dout, edout);
  auto sum = [](const std::vector<double>& x, const std::vector<double>& y) {
    std::vector<double> s(x.size());
    for (size_t n = 0; n < s.size(); ++n) s[n] = x[n] + y[n];
    return s;
  };
  const std::vector<double> edz[3] = {sum(own.dq, prop.dq), sum(own.dk, prop.dk), sum(own.dv, prop.dv)};
  if (p.bias_shape) tol.dbias = sum(own.dbias, prop.dbias);

  // The projections backwards: dW = dzᵀ·x and db = sum dz over the tokens, dx = dz·W over every path into x, in
  // fp32 from the delivered dz (its error edz), rounded to the dtype.
  const std::vector<double>* dz[3] = {&a.dq, &a.dk, &a.dv};
  std::vector<double> dw[3], db[3];
  std::vector<double> dx_prop(at(in.x.numel()), 0.0), dx_mag(dx_prop.size(), 0.0);
  std::vector<double> dx2_prop(m.cross() ? at(in.x2->numel()) : 0, 0.0), dx2_mag(dx2_prop.size(), 0.0);
  for (int which = 0; which < 3; ++which) {
    const module_trace::Rows r = module_trace::select(m, in, which, ModuleFault::none);
    const bool kv = which > 0;
    const Tensor& x = kv && m.cross() ? *in.x2 : in.x;
    const std::vector<double> xs = x.to_double();
    const int64_t H = which == 0 ? p.Hq : p.Hkv, L = x.shape[1], D = which == 2 ? p.Dv : p.Dqk, n = H * D;
    const int64_t T = p.B * L;
    const bool to_dx = !kv || m.cross() || fault != ModuleGradFault::x_kv_path;  // into x, or x2 for cross
    std::vector<double>& xprop = kv && m.cross() ? dx2_prop : dx_prop;
    std::vector<double>& xmag = kv && m.cross() ? dx2_mag : dx_mag;
    std::vector<double> wmag(at(n * r.in), 0.0), bmag(at(n), 0.0);
    dw[which].assign(at(n * r.in), 0.0), db[which].assign(at(n), 0.0);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t c = 0; c < n; ++c) {
          const size_t zi = at(((b * H + c / D) * L + l) * D + c % D);
          const double az = std::fabs((*dz[which])[zi]), ez = edz[which][zi];
          db[which][at(c)] += ez, bmag[at(c)] += az;
          for (int64_t e = 0; e < r.in; ++e) {
            const size_t xi = at((b * L + l) * r.in + e), wi = at(c * r.in + e);
            dw[which][wi] += ez * std::fabs(xs[xi]), wmag[wi] += az * std::fabs(xs[xi]);
            if (to_dx) xprop[xi] += ez * std::fabs(r.w[wi]), xmag[xi] += az * std::fabs(r.w[wi]);
          }
        }
    for (size_t k = 0; k < wmag.size(); ++k) dw[which][k] += static_cast<double>(T + 1) * ua * wmag[k];
    for (size_t k = 0; k < bmag.size(); ++k) db[which][k] += static_cast<double>(T + 1) * ua * bmag[k];
  }
  module_trace::pack_gradients(m, dw, db, tol);
  for (const char* name : {"dwq", "dwk", "dwv", "dbq", "dbk", "dbv", "dwqkv", "dbqkv"}) {
    std::vector<double>& v = module_grad(tol, name);
    const std::vector<double>& x = module_grad(exact, name);
    for (size_t k = 0; k < v.size(); ++k) v[k] += u * std::fabs(x[k]);
  }
  // Every path summed into dx (x2) is one fp32 sum of all the paths' terms: (n + 1) u_a of their magnitudes.
  const int64_t n_q = m.rows_q(), n_kv = m.rows_k() + m.rows_v();
  const int64_t n_x = m.cross() || fault == ModuleGradFault::x_kv_path ? n_q : n_q + n_kv;
  tol.dx.resize(dx_prop.size());
  for (size_t k = 0; k < dx_prop.size(); ++k)
    tol.dx[k] = dx_prop[k] + static_cast<double>(n_x + 1) * ua * dx_mag[k] + u * std::fabs(exact.dx[k]);
  tol.dx2.resize(dx2_prop.size());
  for (size_t k = 0; k < dx2_prop.size(); ++k)
    tol.dx2[k] = dx2_prop[k] + static_cast<double>(n_kv + 1) * ua * dx2_mag[k] + u * std::fabs(exact.dx2[k]);
  return tol;
}

}  // namespace tolerance
}  // namespace attncheck
