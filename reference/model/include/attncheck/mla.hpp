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

}  // namespace model
}  // namespace attncheck
