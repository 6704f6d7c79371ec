// The module level the seed tutorials build on top of attention: projections (separate Wq/Wk/Wv or one packed
// Wqkv), optional biases, head split and merge, output projection Wo; self and cross attention; and the seeds'
// "wrapper" form (independent single-head attentions whose outputs are concatenated). Double precision, plain loops.
#pragma once

#include <optional>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/reference.hpp"

namespace attncheck {
inline namespace oracle {

// A linear layer y = x·W + b with W stored [in, out] row-major: the papers' Q = X·W^Q convention (and the seeds'
// `x @ W_query`). PyTorch's nn.Linear stores weight [out, in] and computes x·weightᵀ: pass weightᵀ here.
struct Linear {
  int64_t in = 0, out = 0;
  std::vector<double> w;  // [in, out]
  std::vector<double> b;  // [out], or empty for no bias (the seeds' qkv_bias=False)
};

// Activations [B, L, E], row-major, double.
struct Seq {
  int64_t B = 0, L = 0, E = 0;
  std::vector<double> x;
  double at(int64_t b, int64_t l, int64_t e) const { return x[static_cast<size_t>((b * L + l) * E + e)]; }
};

// y = x·W + b for every token. `name` is used in error messages ("wq", "wo", ...).
Seq linear(const Seq& x, const Linear& l, const char* name);

// Head split: columns [col0, col0 + H*D) of x [B, L, ...] viewed as [B, L, H, D] and transposed to [B, H, L, D]
// (the seeds' `.view(B, L, H, D).transpose(1, 2)`), stored in `t` (any dtype and layout; values round to it).
void split_heads(const Seq& x, int64_t col0, int64_t H, int64_t D, Tensor& t);
// Head merge: o [B, H, L, D] (row-major) -> [B, L, H*D] (the seeds' `.transpose(1, 2).reshape(B, L, H*D)`).
Seq merge_heads(const std::vector<double>& o, int64_t B, int64_t H, int64_t L, int64_t D);

// The masks, bias and dropout keep-mask of the attention inside a module (the tensors of Inputs besides q, k, v).
struct AttentionExtras {
  std::optional<Tensor> mask, bias, keep;
};

// Multi-head attention weights. Either separate wq [Eq, Hq*Dqk], wk [Ekv, Hkv*Dqk], wv [Ekv, Hkv*Dv], or one packed
// wqkv [E, Hq*Dqk + Hkv*Dqk + Hkv*Dv] whose columns are [q | k | v], each block head-major (head h's columns are
// contiguous), as in the seeds' `Wqkv(x).reshape(B, S, 3, nh, hs)` when Hq == Hkv. Packed is self attention only.
// wo [Hq*Dv, Eout] projects the merged heads back.
struct MhaWeights {
  std::optional<Linear> wq, wk, wv;
  std::optional<Linear> wqkv;
  Linear wo;
};

struct MhaResult {
  Seq out;               // [B, Lq, Eout]: after Wo
  Seq merged;            // [B, Lq, Hq*Dv]: the concatenated heads, before Wo
  ReferenceResult attn;  // the attention itself: out [B, Hq, Lq, Dv], lse, weights
};

// Multi-head (MHA/GQA/MQA by problem.Hkv) attention over x_q [B, Lq, Eq]; self attention when x_kv is null,
// cross attention over x_kv [B, Lk, Ekv] otherwise. `attn` describes the attention exactly as for
// reference_attention (shapes B, Hq, Hkv, Lq, Lk, Dqk, Dv must agree with x and the weights; masks, scale, dropout
// etc. apply unchanged). The projected q, k, v are stored in attn.dtype before the attention (fp64: exact).
MhaResult reference_mha(const Problem& attn, const MhaWeights& w, const Seq& x_q, const Seq* x_kv,
                        const AttentionExtras& extras = {}, int threads = 0);

// One head of the seeds' MultiHeadAttentionWrapper: its own single-head projections (the seeds' SelfAttention).
struct HeadWeights {
  Linear wq, wk, wv;  // [Eq, Dqk], [Ekv, Dqk], [Ekv, Dv]
};

// The wrapper form: head h is an independent single-head attention on the same x with its own wq/wk/wv; outputs
// are concatenated along features ([B, Lq, H*Dv], the seeds' torch.cat(dim=-1)), then wo is applied when given.
// `attn` has Hq == Hkv == heads.size(); head h uses slice h of a per-head mask, bias or keep-mask.
MhaResult reference_wrapper(const Problem& attn, const std::vector<HeadWeights>& heads, const Linear* wo,
                            const Seq& x_q, const Seq* x_kv, const AttentionExtras& extras = {}, int threads = 0);

}  // namespace oracle
}  // namespace attncheck
