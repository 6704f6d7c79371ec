// Backward through the module in fp64 (docs/module.md "Backward"): for L = sum(dy * y), the gradients of every
// input of the module: x (and x2), the projection weights and biases in the module's own packing, Wo and its bias.
// The attention's part is reference_backward; the projections' parts are the per-token loops of the forward, read
// backwards.
#include "attncheck/backward.hpp"
#include "attncheck/module_problem.hpp"
#include "attncheck/module_reference.hpp"
#include "module_detail.hpp"

namespace attncheck {
inline namespace oracle {

using module_detail::at;

namespace {

// Projection `which` backwards: dz [B, H, L, D] (head split undone) against its input x [B, L, in] and weight rows
// r: dW_sep [H*D, in] and db_sep [H*D] (returned), dx accumulated.
void project_back(const std::vector<double>& dz, int64_t B, int64_t H, int64_t L, int64_t D, const Tensor& x,
                  const module_trace::Rows& r, std::vector<double>& dx, std::vector<double>& dw,
                  std::vector<double>& db) {
  const std::vector<double> xs = x.to_double();
  const int64_t in = r.in, n = H * D;
  dw.assign(at(n * in), 0.0);
  db.assign(at(n), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)  // for each token: z_t = x_t · Wᵀ + b
      for (int64_t c = 0; c < n; ++c) {
        const double g = dz[at(((b * H + c / D) * L + l) * D + c % D)];
        if (g == 0) continue;
        db[at(c)] += g;
        for (int64_t e = 0; e < in; ++e) {
          dw[at(c * in + e)] += g * xs[at((b * L + l) * in + e)];
          dx[at((b * L + l) * in + e)] += g * r.w[at(c * in + e)];
        }
      }
}

}  // namespace

namespace module_trace {

using module_detail::packed_row;

// The separate-form gradients dw[which], db[which] placed into the module's packing (module_trace.hpp).
void pack_gradients(const ModuleProblem& m, const std::vector<double> (&dw)[3], const std::vector<double> (&db)[3],
                    ModuleGradients& g) {
  const Problem& p = m.attn;
  if (m.packing == Packing::separate) {
    g.dwq = dw[0], g.dwk = dw[1], g.dwv = dw[2];
    if (m.qkv_bias) g.dbq = db[0], g.dbk = db[1], g.dbv = db[2];
    return;
  }
  const int64_t rows = m.rows_q() + m.rows_k() + m.rows_v();
  g.dwqkv.assign(at(rows * m.d_in), 0.0);
  if (m.qkv_bias) g.dbqkv.assign(at(rows), 0.0);
  for (int which = 0; which < 3; ++which) {
    const int64_t H = which == 0 ? p.Hq : p.Hkv, D = which == 2 ? p.Dv : p.Dqk;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t row = packed_row(m, m.packing, which, h, d), c = h * D + d;
        for (int64_t e = 0; e < m.d_in; ++e) g.dwqkv[at(row * m.d_in + e)] = dw[which][at(c * m.d_in + e)];
        if (m.qkv_bias) g.dbqkv[at(row)] = db[which][at(c)];
      }
  }
}

void backward_trace(const ModuleProblem& m, const ModuleInputs& in, const std::vector<double>& dy, BackwardTrace& bt,
                    RowObserver* observer, GradObserver* grad_observer) {
  Trace& t = bt.t;
  (void)forward(m, in, ModuleFault::none, t, observer);
  const Problem& p = m.attn;
  const int64_t tokens = p.B * p.Lq, HD = p.Hq * p.Dv;
  if (static_cast<int64_t>(dy.size()) != tokens * m.d_out)
    throw std::invalid_argument("dy: holds " + std::to_string(dy.size()) +
                                " values, expected B*Lq*d_out=" + std::to_string(tokens * m.d_out));
  const std::vector<double> wo = in.wo.to_double();
  bt.dmerged.assign(at(tokens * HD), 0.0);
  for (int64_t tok = 0; tok < tokens; ++tok)  // merged = y's input: dmerged = dy · Wo
    for (int64_t c = 0; c < m.d_out; ++c)
      for (int64_t e = 0; e < HD; ++e) bt.dmerged[at(tok * HD + e)] += dy[at(tok * m.d_out + c)] * wo[at(c * HD + e)];
  // The merge backwards: dO [B, Hq, Lq, Dv], then the attention's own backward.
  bt.dout = Tensor(DType::f64, {p.B, p.Hq, p.Lq, p.Dv});
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d) bt.dout.put(b, h, i, d, bt.dmerged[at((b * p.Lq + i) * HD + h * p.Dv + d)]);
  bt.a = reference_backward(t.attn, t.ai, bt.dout, 0, false, grad_observer);
}

}  // namespace module_trace

ModuleGradients reference_module_backward(const ModuleProblem& m, const ModuleInputs& in, const std::vector<double>& dy,
                                          ModuleGradFault fault) {
  module_trace::BackwardTrace bt;
  module_trace::backward_trace(m, in, dy, bt);
  const module_trace::Trace& t = bt.t;
  const BackwardResult& a = bt.a;
  const Problem& p = m.attn;
  const int64_t tokens = p.B * p.Lq, HD = p.Hq * p.Dv;
  ModuleGradients g;
  // y = merged · Woᵀ + bo
  g.dwo.assign(at(m.d_out * HD), 0.0);
  g.dbo.assign(m.out_bias ? at(m.d_out) : 0, 0.0);
  for (int64_t tok = 0; tok < tokens; ++tok)
    for (int64_t c = 0; c < m.d_out; ++c) {
      const double d = dy[at(tok * m.d_out + c)];
      if (m.out_bias && fault != ModuleGradFault::out_bias_grad) g.dbo[at(c)] += d;
      for (int64_t e = 0; e < HD; ++e) {
        // The transposed fault writes element (c, e) at the flat position of (e, c) in [HD, d_out].
        const int64_t n = fault == ModuleGradFault::wo_transposed ? e * m.d_out + c : c * HD + e;
        g.dwo[at(n)] += d * t.merged[at(tok * HD + e)];
      }
    }
  g.dbias = a.dbias;
  // The projections backwards (into the separate form first, then into the module's packing).
  g.dx.assign(at(in.x.numel()), 0.0);
  if (m.cross()) g.dx2.assign(at(in.x2->numel()), 0.0);
  std::vector<double> dropped(fault == ModuleGradFault::x_kv_path ? g.dx.size() : 0);
  std::vector<double>& dxkv = m.cross() ? g.dx2 : fault == ModuleGradFault::x_kv_path ? dropped : g.dx;
  const Tensor& xkv = m.cross() ? *in.x2 : in.x;
  std::vector<double> dw[3], db[3];
  project_back(a.dq, p.B, p.Hq, p.Lq, p.Dqk, in.x, module_trace::select(m, in, 0, ModuleFault::none), g.dx, dw[0],
               db[0]);
  project_back(a.dk, p.B, p.Hkv, p.Lk, p.Dqk, xkv, module_trace::select(m, in, 1, ModuleFault::none), dxkv, dw[1],
               db[1]);
  project_back(a.dv, p.B, p.Hkv, p.Lk, p.Dv, xkv, module_trace::select(m, in, 2, ModuleFault::none), dxkv, dw[2],
               db[2]);
  module_trace::pack_gradients(m, dw, db, g);
  return g;
}

}  // namespace oracle
}  // namespace attncheck
