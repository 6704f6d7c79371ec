// Backward mutants: a looped flash-style backward (P from the forward's saved lse, D from its O) with one real
// bug switched on each (the bug list of docs/backward.md), and the same code with none (a correct variant that
// must pass). run_backward_selftest judges each on generated cases with the gradient tolerance.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attncheck/contract.hpp"
#include "attncheck/impl.hpp"

namespace attncheck::mutants {

enum class BwdFault {
  none,                  // correct variant
  no_d_term,             // dS = P ∘ dP: the D_i = rowsum(dO∘O) term left out
  d_pre_dropout,         // D from the output before dropout (Σ_j P_ij dO·v_j, keep-mask ignored)
  dropout_not_replayed,  // backward ignores the keep-mask
  dropout_not_rescaled,  // kept gradients not scaled by 1/(1-p)
  gqa_not_summed,        // dK, dV of a KV head from its first query head only
  no_logit_derivative,   // the logit stage's derivative left out of the chain rule
  no_scale_dk,           // dK without the softmax scale
  no_causal_mask,        // causal mask applied in forward only
  lse_wrong_row,         // lse read from the next row
  // Subtle faults for the detection-power table (harness/power/backward_power.hpp):
  ds_bf16,          // dS rounded to bf16 before the dQ/dK products (an fp32 contract says fp32)
  d_from_bf16_o,    // D = rowsum(dO∘O) from O rounded to bf16
  lse_plus_log2,    // lse off by log 2: every P halved
  skip_dq_tile,     // keys [64, 128) never reach dQ (one tile of the dQ loop skipped)
  drop_max_key_dq,  // the key of largest weight never reaches dQ
  // RoPE faults, on RoPE problems (the selftest's and the detection-power table's):
  rope_ignored,         // q and k used unrotated, dQ and dK not mapped back (a backward that knows no RoPE)
  rope_not_transposed,  // dQ and dK of the rotated vectors rotated by R instead of Rᵀ on the way back
  // Modification faults, on problems with library modifications (the selftest's):
  score_mod_ignored,  // P recomputed from the scores without the score modifications (the forward's lse with them)
  mask_mod_ignored,   // P recomputed without the mask modifications: keys they hide get exp(s - lse)
};
const char* to_string(BwdFault f);
std::vector<BwdFault> all_backward_faults();     // the real-bug list (selftest): up to lse_wrong_row, RoPE's, the mods'
std::vector<BwdFault> subtle_backward_faults();  // ds_bf16 .. drop_max_key_dq
std::vector<BwdFault> rope_backward_faults();    // rope_ignored, rope_not_transposed
// With RoPE, q and k are rotated as a fused kernel does (`rope`: fp32 angles fl32(position · fl32(inv_freq)),
// cosf and sinf, optionally stored in a table of that format; exact: fp64), and dQ, dK are rotated back by the
// same angles, transposed. The logit stage and the library's score and mask modifications come from their entries
// (ModSet), their derivatives chained into dS; the mutant has no QK-norm, and declines it.
ImplPtr make_backward_mutant(BwdFault f, RopeMath rope = RopeMath::fp32);

struct BackwardSelftestResult {
  std::string name;
  bool correct = false, killed = false;
  std::string first_failure;  // case and verdict of the first failing comparison
  int ran = 0;
  double max_ratio = 0;  // largest error / tolerance over the cases that passed
  size_t entry = 0;      // index in the list (the correct variant first)
};
// Runs every mutant and the correct variant on `cases` generated cases (dtypes fp64 and fp32 alternating);
// `runs_entry` picks entries by index (a shard; empty: all).
std::vector<BackwardSelftestResult> run_backward_selftest(int cases = 60,
                                                          const std::function<bool(size_t)>& runs_entry = {});

}  // namespace attncheck::mutants
