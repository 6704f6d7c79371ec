// The oracle of the backward pass: gradients dQ, dK, dV (and dBias) of the looped reference forward for a given
// upstream gradient dO, in fp64 per-token loops written as the textbook derivation reads (docs/backward.md).
// Bitwise deterministic for any thread count.
#pragma once

#include <optional>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace oracle {

struct BackwardResult {
  std::vector<double> dq;     // [B, Hq, Lq, Dqk], row-major
  std::vector<double> dk;     // [B, Hkv, Lk, Dqk]
  std::vector<double> dv;     // [B, Hkv, Lk, Dv]
  std::vector<double> dbias;  // problem.bias_shape, row-major; empty without bias
  std::vector<double> d;      // [B, Hq, Lq]: D_i = sum_j P'_ij dP'_ij (= dO_i . O_i); 0 on fully masked rows
  std::vector<double> lse;    // [B, Hq, Lq]: the forward's lse (what a flash backward saves)
  // Error scales for the gradient tolerance (docs/backward.md), sums of the absolute values of the terms:
  //   g_ij = P_ij (|dP_ij| + |D_i| + m_ij + M_i) with m_ij = sum_d |dO_id v_jd| keep_ij/(1-p), M_i = sum_j P_ij m_ij
  //   (a bound on |dS_ij| plus what its rounding errors scale with) times |m'_ij|, the derivative of the score
  //   modifications (1 without), chain c_ij = softcap derivative (1 without). With QK-norm or RoPE, dq_abs and dk_abs
  //   are those of the staged q and k mapped back through the magnitudes of the stage's Jacobians (rope.hpp).
  std::vector<double> dq_abs;     // [B,Hq,Lq,Dqk]: sum_j |scale c_ij| g_ij |k_jd|
  std::vector<double> dk_abs;     // [B,Hkv,Lk,Dqk]: sum over the group's heads and i of |scale c_ij| g_ij |q_id|
  std::vector<double> dv_abs;     // [B,Hkv,Lk,Dv]: sum over the group's heads and i of |P'_ij dO_id|
  std::vector<double> dbias_abs;  // bias_shape: sum over the broadcast set of g_ij
  // With a softcap only (empty otherwise): dq_abs and dk_abs with c_ij replaced by 1, what an absolute error of the
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
  std::vector<double> ds;  // [B,Hq,Lq,Lk] dS = dL/d(score after softcap and bias), only when asked (tests)
};

// Validates problem, inputs and dout ([B,Hq,Lq,Dv] in problem.layout, any floating dtype; throws
// std::invalid_argument naming the field), then computes in double. Rows with no visible key contribute exactly
// zero to every gradient (every fully-masked policy); masked keys and keys with zero weight are never read.
BackwardResult reference_backward(const Problem& p, const Inputs& in, const Tensor& dout, int threads = 0,
                                  bool want_ds = false);

// Gradients as an implementation delivers them: dq, dk, dv in problem.dtype and problem.layout, dbias (only with a
// bias) in bias_dtype, contiguous in bias_shape. make_gradients allocates them zero-filled.
struct Gradients {
  Tensor dq, dk, dv;
  std::optional<Tensor> dbias;
};
Gradients make_gradients(const Problem& p);

// Shapes of the gradient tensors (logical order) and an allocated, zero-filled dout of the right shape.
std::vector<int64_t> grad_shape(const Problem& p, int which);  // 0 = dq, 1 = dk, 2 = dv, 3 = dbias
Tensor make_dout(const Problem& p);

}  // namespace oracle
}  // namespace attncheck
