// The JSON side of the worker protocol (docs/worker-protocol.md): problems, capabilities and declarations as JSON,
// and field access that names the message and the field in every error. Shared by the client (worker_client.cpp)
// and the worker host that serves plugins and built-ins (worker_serve.cpp).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "attncheck/block_mask.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/module_problem.hpp"
#include "attncheck/state.hpp"

namespace attncheck::worker {

using json = nlohmann::json;
// The versions attncheck speaks: 1 (forward) and 2 (adds the backward message). A worker answers one of them.
constexpr int kProtocolVersion = 2;
constexpr int kMinProtocolVersion = 1;

// A message that does not follow the protocol; what() names the message and the field.
struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Field access: `where` is the message context ("hello", "reply to run 7"), `key` the field name.
const json& field(const json& obj, const std::string& where, const std::string& key);
std::string str_field(const json& obj, const std::string& where, const std::string& key);
int64_t int_field(const json& obj, const std::string& where, const std::string& key);
double num_field(const json& obj, const std::string& where, const std::string& key);
bool bool_field(const json& obj, const std::string& where, const std::string& key);

// Protocol spellings: f64 f32 f16 bf16 u8, bhsd bshd, top_left bottom_right explicit.
std::string dtype_name(DType t);
std::string layout_name(Layout l);
std::string alignment_name(Alignment a);

// The problem fully resolved (effective scale, per-batch diagonal offsets), plus what rebuilds the Problem.
json problem_to_json(const Problem& p);
Problem problem_from_json(const json& j, const std::string& where);
// A merge problem (the `merge` message, docs/worker-protocol.md 2c): name, N, B, H, L, D, dtype, conventions.
json merge_problem_to_json(const MergeProblem& p);
MergeProblem merge_problem_from_json(const json& j,
                                     const std::string& where);  // validated; ProtocolError naming the field
// A module problem (the `module` message, docs/worker-protocol.md 2d): name, the attention inside as `attention`
// (a problem as above), d_in, d_in2, d_out, packing, qkv_bias, out_bias, average_weights.
json module_problem_to_json(const ModuleProblem& m);
ModuleProblem module_problem_from_json(const json& j, const std::string& where);  // validated, like merges
// The module message's input tensors by their protocol names (x, x2, wq, ..., wo, bo, mask, bias, keep), those present.
std::vector<std::pair<const char*, const Tensor*>> module_input_tensors(const ModuleInputs& in);

// The block mask handed with a `run` request (docs/worker-protocol.md, feature `block_mask`): block sizes, extents and
// FlexAttention's four arrays, flattened row-major. from_json validates it against p (validate_block_mask): a
// ProtocolError naming the field.
json block_mask_to_json(const BlockMask& m);
BlockMask block_mask_from_json(const json& j, const std::string& where, const Problem& p);

// Capabilities by feature name; unknown names are ignored (a worker may know features this attncheck does not).
json capabilities_to_json(const Capabilities& c);
Capabilities capabilities_from_json(const json& j, const std::string& where);

// Declarations (attncheck::Declarations) as JSON; from_json starts from `defaults` and overrides what is given.
json declarations_to_json(const Declarations& d);
Declarations declarations_from_json(const json& j, const std::string& where, Declarations defaults);

}  // namespace attncheck::worker
