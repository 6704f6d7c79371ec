// Absorbed multi-head latent attention (Problem::mla), described once: K holds one latent vector per token,
// [c_kv | k_pe] (Dqk = d_c + d_rope), and V is its first Dv = d_c columns, the same memory read as keys and values
// (FlashMLA, FlashInfer's MLA decode, vLLM). Inputs::v holds those columns, so every backend that reads v reads the
// latent values; a fixture stores K alone. The rules, the tie of v to k and its check live here.
#pragma once

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// Cross-field rules (validate(Problem) calls this): throws naming the field and the values.
void validate_mla(const Problem& p);
// K's first Dv columns, in k's dtype and layout: the value tensor of an MLA problem (k: [B|pages, Hkv, L, Dqk]).
Tensor latent_values(const Problem& p, const Tensor& k);
// in.v = latent_values(p, in.k) (generators, fixture readers, import).
void tie_latent_values(const Problem& p, Inputs& in);
// validate(Problem, Inputs) calls this: in.v must hold exactly K's first Dv columns (bit for bit, NaN payloads
// included); else throws naming the first element that differs.
void check_latent_values(const Problem& p, const Inputs& in);

// The backward's gradient of the one latent cache: K's role and V's role meet in K's first Dv columns, so dk there
// is dK + dV, and dv is that gradient's first Dv columns (a view, as v is of k). dk [B, Hkv, Lk, Dqk] and dv
// [B, Hkv, Lk, Dv] hold the two roles' gradients on entry (row-major doubles, or tensors in the problem's layout,
// the sum rounded once to their dtype); nothing without mla.
void fold_latent_gradient(const Problem& p, std::vector<double>& dk, std::vector<double>& dv);
void fold_latent_gradient(const Problem& p, Tensor& dk, Tensor& dv);

}  // namespace model
}  // namespace attncheck
