// One row of the looped backward (backward.cpp) as its loops left it, handed to a GradObserver: how a pass that
// needs the row's intermediate values (the tolerance model's gradient error scales) reads them without living in
// the loops. The forward's counterpart is row_trace.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attncheck/backward.hpp"
#include "attncheck/mods.hpp"
#include "attncheck/rope.hpp"

namespace attncheck {
inline namespace oracle {

// What the loops run on: q and k as given and after the position stage (QK-norm, RoPE), V and dO, all in double.
struct GradLoops {
  const Problem& p;
  const Inputs& in;
  const ModSet& mods;
  const RopeStage& stage;
  const std::vector<double>&q_in, &k_in;  // as given
  const std::vector<double>&q, &k;        // after the position stage
  const std::vector<double>&v, &dout;
  int threads;  // the loops' thread count

  // g (a gradient, or with abs its error scale) of the staged row `row` of q (query) or k becomes that of the
  // input row. A row without gradient stays 0 without reading its input (an unseen key may be poisoned).
  void stage_back(bool query, int64_t row, double* g, bool abs) const {
    if (!stage.on() || std::all_of(g, g + p.Dqk, [](double x) { return x == 0.0; })) return;
    const int64_t H = query ? p.Hq : p.Hkv, L = query ? p.Lq : p.Lk, b = row / (H * L), t = row % L;
    const double* x = &(query ? q_in : k_in)[static_cast<size_t>(row * p.Dqk)];
    query ? stage.query_back(b, t, x, g, abs) : stage.key_back(b, t, x, g, abs);
  }
};

// Row (b, h, i) of the backward, not fully masked; vectors of length Lk.
struct GradRowTrace {
  int64_t row, b, h, i, kvh;
  const std::vector<char>& visible;
  const std::vector<double>& pre;    // the score the score modifications read (after the logit stage and bias)
  const std::vector<double>& chain;  // d logit stage / d (scale·q·k): c_ij (1 without one)
  const std::vector<double>& dmod;   // d (score modifications) / d pre: m'_ij (1 without)
  const std::vector<double>& P;      // the softmax weights
  const std::vector<double>& keep;   // keep_ij/(1-p): 0 dropped, 1 without dropout
  const std::vector<double>& pp;     // P'_ij = P_ij keep_ij/(1-p)
  const std::vector<double>& dP;     // keep_ij/(1-p) dO_i·v_j where P'_ij != 0
  double D;                          // D_i = sum_j P'_ij dP'_ij
};

class GradObserver {
 public:
  virtual ~GradObserver() = default;
  // Once, before the first row.
  virtual void start(const GradLoops& loops) = 0;
  // dK and dV's pass: every row of one (batch, KV head) in order from one thread, several heads at once.
  virtual void row(const GradRowTrace& t) = 0;
  // With a position stage only: dq and dk of the staged q and k, before the way back through the stage.
  virtual void staged(const BackwardResult& r) = 0;
  // dBias's pass: the rows (b, h, i) that read row `bias_row` of the bias, in order from one thread, several bias
  // rows at once.
  virtual void bias_row(int64_t bias_row, const GradRowTrace& t) = 0;
};

}  // namespace oracle
}  // namespace attncheck
