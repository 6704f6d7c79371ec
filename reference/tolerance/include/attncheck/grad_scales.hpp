// The error scales of the gradient tolerance (docs/backward.md "Tolerance"): sums of the absolute values of the
// terms of each gradient, computed in double from the reference backward's own pass (the oracle hands each row
// out, grad_trace.hpp), and the reference gradients together with them, which is what a judge needs
// (expected_gradients).
#pragma once

#include <vector>

#include "attncheck/backward.hpp"

namespace attncheck {
inline namespace tolerance {

struct GradScales {
  // Sums of the absolute values of the terms:
  //   g_ij = P_ij (|dP_ij| + |D_i| + m_ij + M_i) with m_ij = sum_d |dO_id v_jd| keep_ij/(1-p), M_i = sum_j P_ij m_ij
  //   (a bound on |dS_ij| plus what its rounding errors scale with) times |m'_ij|, the derivative of the score
  //   modifications (1 without), chain c_ij = the logit stage's derivative (1 without one). With QK-norm or RoPE,
  //   dq_abs and dk_abs are those of the staged q and k mapped back through the magnitudes of the stage's Jacobians
  //   (rope.hpp).
  std::vector<double> dq_abs;     // [B,Hq,Lq,Dqk]: sum_j |scale c_ij| g_ij |k_jd|
  std::vector<double> dk_abs;     // [B,Hkv,Lk,Dqk]: sum over the group's heads and i of |scale c_ij| g_ij |q_id|
  std::vector<double> dv_abs;     // [B,Hkv,Lk,Dv]: sum over the group's heads and i of |P'_ij dO_id|
  std::vector<double> dbias_abs;  // bias_shape: sum over the broadcast set of g_ij
  // With a logit stage only (empty otherwise): dq_abs and dk_abs with c_ij replaced by 1, what an absolute error of the
  // derivative (1 - t² from a rounded tanh t) is multiplied by.
  std::vector<double> dq_abs_unchained, dk_abs_unchained;
  // With score modifications of a nonzero curvature (0 for the additive library entries; empty without score
  // modifications): per row [B,Hq,Lq] the largest |m''_ij| / |m'_ij| over visible keys (|m'| floored at 2^-10),
  // m the score modifications together: a score error δ moves their derivative by this times δ, relatively.
  std::vector<double> mod_curv;
  // With RoPE only (empty otherwise): what dq and dk move by per unit relative angle error, every angle a of a
  // (row, pair) off by at most δ·a (docs/backward.md "RoPE angles"). In the rotated frame, for element d of pair f,
  //   dq_rope[i,d] = sum_j |scale c_ij| g_ij a_jf |k_jf| + m a_if |dq_if|,  a_tf = |pos_t| inv_freq_f,
  // (|x_f| a pair's norm, m the attention factor; the second term: the rotation back), then mapped back like dq_abs;
  // dk_rope the same with q and k swapped, summed over the group's heads and rows.
  std::vector<double> dq_rope, dk_rope;
};

// The reference gradients and the error scales they are judged by.
struct ExpectedGradients : BackwardResult, GradScales {};

// reference_backward and the error scales of the same pass; arguments as there.
ExpectedGradients expected_gradients(const Problem& p, const Inputs& in, const Tensor& dout, int threads = 0,
                                     bool want_ds = false);

}  // namespace tolerance
}  // namespace attncheck
