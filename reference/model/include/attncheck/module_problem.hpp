// A module-level attention problem described once (docs/module.md): x [B, Lq, d_in] (and x2 [B, Lk, d_in2] for
// cross attention), Wq/Wk/Wv or one packed Wqkv with optional biases, Wo with an optional bias, and the attention
// inside as a Problem (heads, GQA, Dqk != Dv, masks, causal, dropout). The module faults the diagnosis knows.
// Its fp64 reference: module_reference.hpp; its tolerance: module_tolerance.hpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"

namespace attncheck {
inline namespace model {

// How the q, k, v projection weights are stored. Every weight is [out, in] (nn.Linear.weight: y = x·Wᵀ + b).
//   separate     wq [Hq·Dqk, d_in], wk [Hkv·Dqk, d_kv], wv [Hkv·Dv, d_kv] (d_kv = d_in2 for cross attention)
//   packed       one wqkv [Hq·Dqk + Hkv·Dqk + Hkv·Dv, d_in], rows [q | k | v], each block head-major: PyTorch
//                nn.MultiheadAttention's in_proj_weight [3E, E] and the seeds' Wqkv(x).reshape(B, S, 3, nh, hs)
//   interleaved  one wqkv, rows grouped per KV head g: [q rows of g's query heads | k_g | v_g] (Megatron-LM's
//                query_key_value; with Hq == Hkv, Wqkv(x).reshape(B, S, nh, 3, hs))
// Packed weights of a cross-attention module project x with the q rows and x2 with the k and v rows (as
// nn.MultiheadAttention does), so they need d_in2 == d_in.
enum class Packing : uint8_t { separate, packed, interleaved };
const char* to_string(Packing p);
Packing packing_from_string(const std::string& s);  // "separate", "packed", "interleaved"; throws otherwise

struct ModuleProblem {
  // The attention inside: B, Hq, Hkv, Lq, Lk, Dqk, Dv, scale, masks, policies, dropout, want_weights. Its dtype is
  // the module's: x, the weights and biases are stored in it and q, k, v, the attention output and y are
  // delivered in it (the declared contract, docs/module.md). Layout BHSD; lse, scores, KV cache, paging, varlen,
  // fp8 and score modifications are attention-level features the module does not pass through.
  Problem attn;
  int64_t d_in = 1;   // features of x
  int64_t d_in2 = 0;  // features of x2; 0 = self attention (keys and values from x, Lk == Lq)
  int64_t d_out = 1;  // features of y = merged heads · Woᵀ + bo
  Packing packing = Packing::separate;
  bool qkv_bias = false;         // biases on the q, k and v projections (seeds' qkv_bias, nn.MHA's bias)
  bool out_bias = false;         // bias on Wo
  bool average_weights = false;  // weights output [B, Lq, Lk], averaged over the Hq heads (average_attn_weights)

  bool cross() const { return d_in2 > 0; }
  int64_t d_kv() const { return cross() ? d_in2 : d_in; }
  // Rows of each projection: Hq·Dqk, Hkv·Dqk, Hkv·Dv (their sum for a packed weight).
  int64_t rows_q() const { return attn.Hq * attn.Dqk; }
  int64_t rows_k() const { return attn.Hkv * attn.Dqk; }
  int64_t rows_v() const { return attn.Hkv * attn.Dv; }
  // "fp16/module-B2-L5x7-d12x10-H2x1-D4x3-o6/cross/packed/bias/obias/causal-tl/avgw": the case name from the
  // parameters (its attention part is the attention's short_name features).
  std::string name() const;
};

// The tensors of a module problem. Weights are 2-D [out, in], biases 1-D [out], all in attn.dtype; mask, bias and
// keep are the attention's (shapes of the attention problem; a key-padding mask is a mask of shape [B, 1, 1, Lk]).
struct ModuleInputs {
  Tensor x;                                      // [B, Lq, d_in]
  std::optional<Tensor> x2;                      // [B, Lk, d_in2], cross attention only
  std::optional<Tensor> wq, wk, wv, bq, bk, bv;  // separate
  std::optional<Tensor> wqkv, bqkv;              // packed or interleaved
  Tensor wo;                                     // [d_out, Hq·Dv]
  std::optional<Tensor> bo;                      // [d_out]
  std::optional<Tensor> mask, bias, keep;
};

// The optional q, k, v projection tensors by the name fixtures, the worker protocol and `import` give them, in the
// order they are written: weights 2-D [out, in], biases 1-D [out].
struct ModuleProjection {
  const char* name;
  std::optional<Tensor> ModuleInputs::*tensor;
  int rank;
};
inline constexpr ModuleProjection kModuleProjections[] = {
    {"wq", &ModuleInputs::wq, 2},     {"wk", &ModuleInputs::wk, 2},    {"wv", &ModuleInputs::wv, 2},
    {"bq", &ModuleInputs::bq, 1},     {"bk", &ModuleInputs::bk, 1},    {"bv", &ModuleInputs::bv, 1},
    {"wqkv", &ModuleInputs::wqkv, 2}, {"bqkv", &ModuleInputs::bqkv, 1}};

// Throws std::invalid_argument naming the field and the values: shapes that do not chain (x -> projections ->
// heads -> Wo), a dtype other than fp64/fp32/fp16/bf16, tensors missing or present against the flags, and every
// attention-level inconsistency (validate(Problem, Inputs)).
void validate(const ModuleProblem& m);
void validate(const ModuleProblem& m, const ModuleInputs& in);

// Allocate zero-filled tensors of the right shapes for every tensor the flags call for.
ModuleInputs make_module_inputs(const ModuleProblem& m);

// Deliberate deviations from the module's conventions: the module bug classes of docs/module.md. The reference
// computes them (for the diagnosis' hypotheses); the test-only module mutants inject them into the cpu entry.
enum class ModuleFault : uint8_t {
  none,
  head_split,             // heads split and merged with a bare view ([B, L, H·D] read as [B, H, L, D]), no transpose
  qkv_order,              // a packed weight split with the other packing's order (packed <-> interleaved)
  scale_d_model,          // scores scaled by 1/sqrt(Hq·Dqk) (d_model) instead of 1/sqrt(Dqk)
  key_padding_broadcast,  // a [B, 1, 1, Lk] key-padding mask applied as [B, 1, Lq, 1] (over queries)
  weights_average,        // averaged weights summed over heads instead of averaged
  out_bias,               // Wo's bias left out
  dropout_after_projection,  // dropout on y (after Wo) instead of on the attention weights
};
const char* to_string(ModuleFault f);  // the diagnosis tags: "head-split", "qkv-order", ...
ModuleFault module_fault_from_string(const std::string& s);
std::vector<ModuleFault> module_faults();  // every fault but none
// Whether the attention mask is a key-padding mask: shape [B, 1, 1, Lk] (nn.MHA's key_padding_mask, negated).
bool is_key_padding(const ModuleProblem& m);
// Whether a fault can change this problem's outputs at all (head_split needs Hq > 1, out_bias a bias, ...).
bool fault_applies(ModuleFault f, const ModuleProblem& m);

// The module's outputs: y [B, Lq, d_out] and, with attn.want_weights, the weights ([B, Hq, Lq, Lk] per head or
// [B, Lq, Lk] averaged), row-major doubles.
struct ModuleResult {
  std::vector<double> y, weights;
};

// Backward through the module: the gradients of L = sum(dy * y) (dy [B, Lq, d_out]) with respect to every module
// input, in fp64, shaped like the inputs (row-major): dx, dx2 (cross), dwq/dwk/dwv/dbq/dbk/dbv (separate) or
// dwqkv/dbqkv (packed, interleaved: rows in that packing), dwo, dbo. Empty where the module has no such input.
// dbias is the attention's additive bias (in its bias_shape), present only with one.
struct ModuleGradients {
  std::vector<double> dx, dx2, dwq, dwk, dwv, dbq, dbk, dbv, dwqkv, dbqkv, dwo, dbo, dbias;
};

// Deliberate mistakes of a module backward (the module bug classes of docs/module.md "Backward"): the reference
// computes them for the diagnosis, the test-only backward mutants inject them into the cpu entry.
enum class ModuleGradFault : uint8_t {
  none,
  wo_transposed,  // dWo written as merged^T·dy ([Hq·Dv, d_out] row-major) into the [d_out, Hq·Dv] gradient
  out_bias_grad,  // Wo's bias gradient left at zero
  x_kv_path,      // self attention: dx from the query projection only (the key and value paths dropped)
};
const char* to_string(ModuleGradFault f);           // the diagnosis tags: "grad-wo-transposed", ...
std::vector<ModuleGradFault> module_grad_faults();  // every fault but none
bool grad_fault_applies(ModuleGradFault f, const ModuleProblem& m);

// The gradients a module has, by name: "dx", "dx2" (cross), "dwq", "dwk", "dwv", "dbq", "dbk", "dbv" (separate)
// or "dwqkv", "dbqkv", then "dwo", "dbo", "dbias" (an attention bias); each shaped like the input it names.
std::vector<std::string> module_grad_names(const ModuleProblem& m);
const Tensor& module_grad_input(const ModuleInputs& in, const std::string& grad_name);  // "dwq" -> *in.wq
std::vector<double>& module_grad(ModuleGradients& g, const std::string& grad_name);
const std::vector<double>& module_grad(const ModuleGradients& g, const std::string& grad_name);

}  // namespace model
}  // namespace attncheck
