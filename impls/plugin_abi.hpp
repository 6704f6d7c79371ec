// Internal to attncheck: the pieces of the plugin host (impls/plugin.cpp) that the isolated worker host reuses to
// call a plugin on tensors that live in shared memory. Not installed; plugin authors use attncheck/plugin.h.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "attncheck/block_mask.hpp"
#include "attncheck/declarations.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/module_impl.hpp"
#include "attncheck/plugin.h"
#include "attncheck/state.hpp"

namespace attncheck {

// A dlopened, checked plugin: its vtable and converted capabilities. Throws PluginError like load_plugin.
struct OpenedPlugin {
  std::string path;
  const attncheck_plugin* vt = nullptr;
  Capabilities caps;
  Declarations declarations;          // v2 declarations(), else derived from the capabilities
  std::vector<std::string> features;  // v2 feature names beyond the v1 flags
  bool merge = false;                 // lists "merge" and has the vtable's merge (checked at load)
  bool module = false;                // lists "module" and has the vtable's run_module (checked at load)
};
OpenedPlugin open_plugin(const std::string& path);

// Tag 11's storage: the used library modifications and their parameters (deques: the pointers stay valid).
struct DescribedMods {
  std::vector<attncheck_mod> mods;
  std::vector<attncheck_mod_param> params;
  std::deque<std::vector<int64_t>> i64;
  std::deque<std::vector<double>> f64;
  std::deque<std::string> text;
  attncheck_ext_modifications ext;
};
// Fills `s` from the problem's used modifications; the extension to chain, or nullptr when it uses none.
const attncheck_extension* describe_modifications(const Problem& p, DescribedMods& s);

// A problem descriptor with the storage it points into (diagonal offsets, the v2 extension chain).
struct Described {
  attncheck_problem d;
  std::vector<int64_t> diag;
  std::string name;
  attncheck_ext_case_name case_name;
  attncheck_ext_sinks sinks;
  attncheck_ext_scores scores;
  attncheck_ext_kv_append kv_append;
  attncheck_ext_backward backward;
  attncheck_ext_varlen varlen;
  attncheck_ext_paged_kv paged_kv;
  attncheck_ext_fp8 fp8;
  attncheck_ext_schedule schedule;
  attncheck_ext_max_logit max_logit;
  DescribedMods mods;
  attncheck_ext_block_mask block_mask;
  attncheck_ext_mla mla;
  attncheck_ext_kv_quant kv_quant;
  Described() = default;
  Described(const Described&) = delete;  // d points into the members
};
// The shape and semantic fields of a problem, and the current schedule (tag 9) when it is not the default; tensor
// pointers stay NULL.
void describe(const Problem& p, Described& out);
// Appends out.backward (zeroed, tagged ATTNCHECK_EXT_BACKWARD) to the extension chain: a backward request.
attncheck_ext_backward& chain_backward(Described& out);

// The tensors of an absorbed-MLA problem's value view and a quantized cache's scales (tags 13 and 14), set after
// q, k and v: v becomes a view of k (k's pointer and strides), the scales take their pointers and strides (0 along
// the dims a scale is shared over). k_scale and v_scale are absent without a quantized cache.
void set_mla_and_scales(Described& desc, const Problem& p, const void* k_scale,
                        const std::vector<int64_t>& k_scale_strides, const void* v_scale,
                        const std::vector<int64_t>& v_scale_strides);

// Appends out.block_mask (tag 12) to the chain, pointing into m (which must outlive the call): the block mask the
// caller hands the kernel (current_block_mask()).
void chain_block_mask(Described& out, const BlockMask& m);
// The feature name by which a plugin or worker asks to be handed the block mask (plugin.h tag 12).
inline constexpr const char* kBlockMaskFeature = "block_mask";

// The feature name by which a plugin or worker offers the backward pass (plugin.h tag 5).
inline constexpr const char* kBackwardFeature = "backward";
// The feature name by which a plugin offers merges of attention states (plugin.h attncheck_merge_problem).
inline constexpr const char* kMergeFeature = "merge";

// The shape and convention fields of a merge problem; tensor pointers stay NULL.
void describe_merge(const MergeProblem& p, attncheck_merge_problem& m);
// Whether a plugin that lists "merge" takes this merge: the dtypes the ABI carries, then its supports_merge().
Support plugin_supports_merge(const OpenedPlugin& o, const MergeProblem& p);
// Calls the plugin's merge on a described problem; "" or the plugin's error message.
std::string call_merge(const OpenedPlugin& o, const attncheck_merge_problem& m);

// The feature name by which a plugin or worker offers a module entry (plugin.h attncheck_module_problem).
inline constexpr const char* kModuleFeature = "module";

// A module problem descriptor with the storage it points into: the attention inside as a Described (its q, k, v,
// out, lse and weights stay NULL), the module's shape and flags; tensor pointers NULL until set.
struct DescribedModule {
  Described attn;
  attncheck_module_problem m;
  std::string name;
  DescribedModule() = default;
  DescribedModule(const DescribedModule&) = delete;  // m points into the members
};
void describe_module(const ModuleProblem& p, DescribedModule& out);
// Whether a plugin that lists "module" takes this module: its supports_module(), if any.
Support plugin_supports_module(const OpenedPlugin& o, const ModuleProblem& p);
// Calls the plugin's run_module on a described problem; "" or the plugin's error message.
std::string call_module(const OpenedPlugin& o, const attncheck_module_problem& m);

}  // namespace attncheck
