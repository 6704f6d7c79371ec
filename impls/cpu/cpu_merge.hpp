// The CPU backend's merge of attention states (docs/states.md): what a split-KV or cascade kernel's combine step
// does, in fp32, under every declared convention. `cpu` offers it as its `merge` entry.
#pragma once

#include "attncheck/capabilities.hpp"
#include "attncheck/state.hpp"

namespace attncheck::cpu {

Support merge_supported(const MergeProblem& p);
// in: N stored states; out: pre-allocated (make_merge_outputs). Reads and writes through the tensors' strides.
void merge_fp32(const MergeProblem& p, const StoredStates& in, StoredStates& out);

}  // namespace attncheck::cpu
