// Module fixtures: one HDF5 file per module case (golden/modules/, format in golden/SCHEMA.md "Module fixtures"):
// the module problem, x (x2), every weight and bias exactly as an implementation receives them, and the fp64
// reference's y and weights. Readers throw std::invalid_argument "<file>: <field>: <what>".
#pragma once

#include <string>
#include <vector>

#include "attncheck/fixture.hpp"
#include "attncheck/module_problem.hpp"

namespace attncheck {

struct ModuleFixture {
  std::string name;  // ModuleProblem::name() plus the value distribution, e.g. ".../normal"
  ModuleProblem problem;
  ModuleInputs inputs;
  ModuleResult expected;  // reference_module, fp64
  Provenance provenance;
  // With gradients (root attribute gradients = 1): dy [B, Lq, d_out] in the module dtype and the fp64
  // reference_module_backward of it (every name of module_grad_names).
  std::optional<Tensor> dy;
  std::optional<ModuleGradients> grad;
};

// Runs the reference.
ModuleFixture make_module_fixture(std::string name, const ModuleProblem& m, ModuleInputs in, Provenance prov);
// Adds dy and the reference gradients.
void add_module_gradients(ModuleFixture& f, Tensor dy);
// Deterministic bytes (write_file_durably); module_fixture_image returns them.
std::string module_fixture_image(const std::string& path, const ModuleFixture& f);
void write_module_fixture(const std::string& path, const ModuleFixture& f);
ModuleFixture read_module_fixture(const std::string& path);
// Every .h5 file directly in `dir`, in name order, read by read_module_fixture. std::invalid_argument naming
// --fixtures when `dir` is not a directory or holds no .h5 file.
std::vector<ModuleFixture> read_module_fixture_dir(const std::string& dir);
// Whether `path` is an HDF5 file whose root says kind = "module". False for everything else, unreadable files
// included (the attention fixture reader then reports those).
bool is_module_fixture(const std::string& path);
// Vets `paths` for is_module_fixture, and the module fixtures among them for read_module_fixture, in two child
// processes in all (untrusted.hpp) instead of one per file and call: for callers about to look at many files.
void prepare_module_reads(const std::vector<std::string>& paths);

}  // namespace attncheck
