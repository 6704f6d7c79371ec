// Backward mutants: a looped flash-style backward (P from the forward's saved lse, D from its O) with one real
// bug switched on each (the bug list of docs/backward.md), and the same code with none (a correct variant that
// must pass). run_backward_selftest judges each on generated cases with the gradient tolerance.
#pragma once

#include <string>
#include <vector>

#include "attncheck/impl.hpp"

namespace attncheck::mutants {

enum class BwdFault {
  none,                  // correct variant
  no_d_term,             // dS = P ∘ dP: the D_i = rowsum(dO∘O) term left out
  d_pre_dropout,         // D from the output before dropout (Σ_j P_ij dO·v_j, keep-mask ignored)
  dropout_not_replayed,  // backward ignores the keep-mask
  dropout_not_rescaled,  // kept gradients not scaled by 1/(1-p)
  gqa_not_summed,        // dK, dV of a KV head from its first query head only
  no_softcap_derivative, // softcap's 1 - tanh² left out of the chain rule
  no_scale_dk,           // dK without the softmax scale
  no_causal_mask,        // causal mask applied in forward only
  lse_wrong_row,         // lse read from the next row
};
const char* to_string(BwdFault f);
std::vector<BwdFault> all_backward_faults();  // every fault except none
ImplPtr make_backward_mutant(BwdFault f);

struct BackwardSelftestResult {
  std::string name;
  bool correct = false, killed = false;
  std::string first_failure;  // case and verdict of the first failing comparison
  int ran = 0;
  double max_ratio = 0;  // largest error / tolerance over the cases that passed
};
// Runs every mutant and the correct variant on `cases` generated cases (dtypes fp64 and fp32 alternating).
std::vector<BackwardSelftestResult> run_backward_selftest(int cases = 60);

}  // namespace attncheck::mutants
