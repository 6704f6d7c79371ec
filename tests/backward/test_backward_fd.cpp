// The reference gradients against central finite differences of the reference FORWARD in fp64, on 240 generated
// problems covering every feature (masks, bias, window, softcap, dropout, GQA, policies, poison): an oracle that
// shares no code with the backward. Richardson-extrapolated central differences, h = 1e-3 max(1, |x|) (truncation
// ~h⁴); tolerance |fd - grad| <= 1e-6 (|grad| + abs) + 16 u Labs / h: abs = the sum of |terms| of the gradient
// element (GradScales::*_abs), Labs = Σ|dO·O terms| bounds the rounding of the loss itself (u = 2^-53).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "attncheck/grad_scales.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rng.hpp"
#include "backward_cases.hpp"

using namespace attncheck;
using namespace attncheck::gradtest;

namespace {

// L = Σ over rows with a visible key of dO·O (the loss whose gradients the backward returns); labs (optional)
// receives Σ |dO| · out_abs, a bound on the magnitudes the loss sums.
double loss(const Problem& p, const Inputs& in, const std::vector<double>& dout, const std::vector<char>& empty,
            double* labs = nullptr) {
  const ExpectedAttention f = expected_attention(p, in, 1);
  double l = 0, a = 0;
  for (size_t row = 0; row < empty.size(); ++row) {
    if (empty[row]) continue;
    for (int64_t d = 0; d < p.Dv; ++d) {
      const size_t n = row * static_cast<size_t>(p.Dv) + static_cast<size_t>(d);
      l += dout[n] * f.out[n];
      a += std::abs(dout[n]) * f.out_abs[n];
    }
  }
  if (labs) *labs = a;
  return l;
}

struct Probe {
  int tensor;  // 0 q, 1 k, 2 v, 3 bias
  std::vector<int64_t> idx;
};

int64_t flat(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t a = 0; a < shape.size(); ++a) f = f * shape[a] + idx[a];
  return f;
}

}  // namespace

TEST(BackwardFiniteDifferences, MatchesReferenceForwardOn240Problems) {
  int checked = 0, cases = 0;
  for (uint64_t n = 0; n < 240; ++n) {
    prop::Case c = grad_case(n);
    if (c.spec.values == prop::Values::large_logits || c.spec.values == prop::Values::beyond_fp16) {
      c = grad_case(n + 100000);  // saturated softmax: FD truncation dominates; those values get other checks
      if (c.spec.values == prop::Values::large_logits || c.spec.values == prop::Values::beyond_fp16) continue;
    }
    ++cases;
    const Problem& p = c.p;
    const Tensor dout_t = random_dout(p, n + 1);
    const std::vector<double> dout = dout_t.to_double();
    const std::vector<char> empty = empty_rows(p, c.in);
    const ExpectedGradients g = expected_gradients(p, c.in, dout_t, 1);
    double labs = 0;
    loss(p, c.in, dout, empty, &labs);

    prop::SeededChooser r(n * 31 + 7);
    std::vector<Probe> probes;
    for (int t = 0; t < 4; ++t) {
      const Tensor* x = t == 0 ? &c.in.q : t == 1 ? &c.in.k : t == 2 ? &c.in.v : (c.in.bias ? &*c.in.bias : nullptr);
      if (!x) continue;
      for (int s = 0; s < 6; ++s) {
        std::vector<int64_t> idx(4);
        for (int a = 0; a < 4; ++a) idx[static_cast<size_t>(a)] = r.pick(0, x->shape[static_cast<size_t>(a)] - 1);
        probes.push_back({t, idx});
      }
    }
    for (const Probe& pr : probes) {
      Inputs in = c.in;
      Tensor& x = pr.tensor == 0 ? in.q : pr.tensor == 1 ? in.k : pr.tensor == 2 ? in.v : *in.bias;
      const double x0 = x.get(pr.idx.data());
      if (!std::isfinite(x0) || std::abs(x0) > 1e6) continue;  // poisoned slots: covered by the leak tests
      const double h = 1e-3 * std::max(1.0, std::abs(x0));
      auto central = [&](double step) {
        x.set(pr.idx.data(), x0 + step);
        const double lp = loss(p, in, dout, empty);
        x.set(pr.idx.data(), x0 - step);
        const double lm = loss(p, in, dout, empty);
        return (lp - lm) / (2 * step);
      };
      const double fd = (4 * central(h / 2) - central(h)) / 3;  // Richardson: the h² term cancels
      const std::vector<double>& grad = pr.tensor == 0 ? g.dq : pr.tensor == 1 ? g.dk : pr.tensor == 2 ? g.dv : g.dbias;
      const std::vector<double>& abs = pr.tensor == 0   ? g.dq_abs
                                       : pr.tensor == 1 ? g.dk_abs
                                       : pr.tensor == 2 ? g.dv_abs
                                                        : g.dbias_abs;
      const size_t f = static_cast<size_t>(flat(x.shape, pr.idx));
      const double tol = 1e-6 * (std::abs(grad[f]) + abs[f]) + 16 * std::ldexp(1.0, -53) * labs / h;
      ++checked;
      EXPECT_LE(std::abs(fd - grad[f]), tol)
          << "case " << n << " " << c.name() << " spec " << c.spec.str() << "\n tensor "
          << "qkvb"[pr.tensor] << " [" << pr.idx[0] << "," << pr.idx[1] << "," << pr.idx[2] << "," << pr.idx[3]
          << "] fd " << fd << " grad " << grad[f] << " abs " << abs[f];
    }
  }
  std::cout << "[fd] " << cases << " problems, " << checked << " gradient elements checked\n";
  EXPECT_GE(cases, 200);
}

// ---- modifications and the position stage ---------------------------------------------------------------------

namespace {

Tensor random_tensor(const Problem& p, int which, uint64_t seed) {  // q, k or v of p, fp64 normal values
  Tensor t = make_qkv(p, which);
  prop::SeededChooser r(seed);
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      for (int64_t i = 0; i < t.shape[2]; ++i)
        for (int64_t d = 0; d < t.shape[3]; ++d) t.put(b, h, i, d, prop::normal(r));
  return t;
}

// Small fp64 shapes the library entries draw their parameters on: GQA, Lq != Lk both ways, alignments, a softcap
// and a bias (the score modifications come after both).
std::vector<Problem> fd_shapes() {
  std::vector<Problem> out;
  Problem p;
  p.dtype = DType::f64, p.B = 2, p.Hq = 2, p.Hkv = 1, p.Lq = 5, p.Lk = 7, p.Dqk = 6, p.Dv = 4;
  p.alignment = Alignment::bottom_right, p.causal = true;
  out.push_back(p);
  p.B = 1, p.Hq = p.Hkv = 2, p.Lq = 6, p.Lk = 4, p.Dqk = p.Dv = 4, p.causal = false, p.softcap = 3.0;
  p.alignment = Alignment::top_left;
  out.push_back(p);
  p.Lq = p.Lk = 6, p.softcap = 0, p.bias_shape = std::array<int64_t, 4>{1, 2, 6, 6}, p.bias_dtype = DType::f64;
  out.push_back(p);
  return out;
}

struct FdCase {
  std::string what;
  Problem p;
};

// Every library entry drawn on every shape, the RoPE variants (pairings, partial rotary, each frequency scaling,
// mRoPE), QK-norm before RoPE, and a non-linear score expression.
std::vector<FdCase> fd_mod_cases() {
  std::vector<FdCase> out;
  uint64_t seed = 3;
  for (const ModEntry& m : modifications())
    for (Problem p : fd_shapes()) {
      Rng rng(++seed * 131);
      m.draw(p, rng);
      out.push_back({m.name, p});
    }
  Problem r = fd_shapes()[0];
  r.rotary_dim = 6, r.rope_offsets = {70000, 3};
  for (int v = 0; v < 6; ++v) {
    Problem q = r;
    q.rotary_interleaved = v % 2 == 1;
    if (v == 1) q.rotary_dim = 4;  // partial: dims 4, 5 pass through
    if (v == 2) q.rope_linear_factor = 2;
    if (v == 3) q.rope_llama3_factor = 8, q.rope_original_max = 16, q.rope_theta = 500000;
    if (v == 4) q.rope_yarn_factor = 4, q.rope_original_max = 16;
    if (v == 5) {  // mRoPE: sections of 1 and 2 pairs, positions per section
      q.rope_mrope_section = {1, 2};
      for (int64_t n = 0; n < 2 * q.B * q.Lk; ++n) q.rope_position_ids.push_back((n * 7) % 11);
    }
    out.push_back({"rope variant " + std::to_string(v), q});
  }
  Problem n = fd_shapes()[1];
  for (int64_t d = 0; d < n.Dqk; ++d) {
    n.q_norm_weight.push_back(1.0 + 0.125 * double(d));
    n.k_norm_weight.push_back(1.5 - 0.25 * double(d));
  }
  n.qk_norm_eps = 0.25;  // a large eps: its part of the Jacobian is visible
  out.push_back({"qk_norm", n});
  n.rotary_dim = 2, n.rotary_interleaved = true, n.rope_offsets = {5};
  out.push_back({"qk_norm + rope", n});
  Problem e = fd_shapes()[2];
  e.score_expr = "score * (1 + 0.25 * h) - 0.05 * score ^ 2 + tanh(score / 4)";
  out.push_back({"score_expr non-linear", e});
  return out;
}

}  // namespace

// dq, dk, dv (and dbias) of the reference backward through every modification, RoPE and QK-norm against central
// differences of the reference forward, every element of every gradient, the tolerance of the test above.
TEST(BackwardFiniteDifferences, ThroughModificationsRopeAndQkNorm) {
  int checked = 0, cases = 0;
  for (const FdCase& fc : fd_mod_cases()) {
    const Problem& p = fc.p;
    ASSERT_NO_THROW(validate(p)) << fc.what << " " << p.name();
    Inputs in;
    in.q = random_tensor(p, 0, 11 + cases), in.k = random_tensor(p, 1, 12 + cases);
    in.v = random_tensor(p, 2, 13 + cases);
    if (p.bias_shape) {
      in.bias = Tensor(DType::f64, grad_shape(p, 3));
      prop::SeededChooser r(99 + cases);
      for (int64_t e = 0; e < in.bias->numel(); ++e) in.bias->set_offset(e, prop::normal(r));
    }
    ++cases;
    const Tensor dout_t = random_dout(p, 17 + cases);
    const std::vector<double> dout = dout_t.to_double();
    const std::vector<char> empty = empty_rows(p, in);
    const ExpectedGradients g = expected_gradients(p, in, dout_t, 1);
    double labs = 0;
    loss(p, in, dout, empty, &labs);
    for (int t = 0; t < 4; ++t) {
      if (t == 3 && !in.bias) continue;
      Tensor& x = t == 0 ? in.q : t == 1 ? in.k : t == 2 ? in.v : *in.bias;
      const std::vector<double>& grad = t == 0 ? g.dq : t == 1 ? g.dk : t == 2 ? g.dv : g.dbias;
      const std::vector<double>& abs = t == 0 ? g.dq_abs : t == 1 ? g.dk_abs : t == 2 ? g.dv_abs : g.dbias_abs;
      for (int64_t f = 0; f < x.numel(); ++f) {
        const double x0 = x.get_offset(f), h = 1e-3 * std::max(1.0, std::abs(x0));
        auto central = [&](double step) {
          x.set_offset(f, x0 + step);
          const double lp = loss(p, in, dout, empty);
          x.set_offset(f, x0 - step);
          const double lm = loss(p, in, dout, empty);
          x.set_offset(f, x0);
          return (lp - lm) / (2 * step);
        };
        const double fd = (4 * central(h / 2) - central(h)) / 3;
        const size_t n = static_cast<size_t>(f);  // fp64 BHSD inputs: storage offset = logical index
        const double tol = 1e-6 * (std::abs(grad[n]) + abs[n]) + 16 * std::ldexp(1.0, -53) * labs / h;
        ++checked;
        EXPECT_LE(std::abs(fd - grad[n]), tol)
            << fc.what << " " << p.name() << " tensor "
            << "qkvb"[t] << " element " << f << " fd " << fd << " grad " << grad[n] << " abs " << abs[n];
      }
    }
  }
  std::cout << "[fd mods] " << cases << " problems, " << checked << " gradient elements checked\n";
  EXPECT_EQ(cases, int(modifications().size()) * 3 + 9);
}
