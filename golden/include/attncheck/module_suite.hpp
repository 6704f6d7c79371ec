// The module golden suite (golden/modules/): every case in one table here, values from seeded generators, so
// `attncheck generate-modules` rebuilds the checked-in files byte for byte. docs/module.md lists what it covers.
#pragma once

#include <vector>

#include "attncheck/module_fixture.hpp"

namespace attncheck {

// Random module inputs for `m`: x ~ N(0, 1), weights and biases ~ U(-1, 1)·2/sqrt(in) so that q·k stays O(1)
// per feature, all rounded to the module dtype; a key-padding mask keeps the first Lk - 2b keys of batch b; an
// attention mask [1, 1, Lq, Lk] is a seeded 0/1 pattern with the diagonal (or key 0) kept; the keep-mask is
// make_keep_mask(attn).
ModuleInputs generate_module_inputs(const ModuleProblem& m, uint64_t seed);

// The suite: the cases' fixtures, in a fixed order, each with dy ~ N(0, 1) (stream 40 of its seed, rounded to the
// dtype) and the reference gradients.
std::vector<ModuleFixture> module_suite();

}  // namespace attncheck
