// The reference gradients against central finite differences of the reference FORWARD in fp64, on 240 generated
// problems covering every feature (masks, bias, window, softcap, dropout, GQA, policies, poison): an oracle that
// shares no code with the backward. Richardson-extrapolated central differences, h = 1e-3 max(1, |x|) (truncation
// ~h⁴); tolerance |fd - grad| <= 1e-6 (|grad| + abs) + 16 u Labs / h: abs = the sum of |terms| of the gradient
// element (BackwardResult::*_abs), Labs = Σ|dO·O terms| bounds the rounding of the loss itself (u = 2^-53).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

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
    const BackwardResult g = reference_backward(p, c.in, dout_t, 1);
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
