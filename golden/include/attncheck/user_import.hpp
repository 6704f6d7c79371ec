// `attncheck import`: a fixture from a user's own tensors (q, k, v, optional mask, bias, keep, and
// past_key/past_value for a KV-cache append: k, v are then the new tokens and the fixture also expects
// present = concat(past, new)), or a module fixture from x [, x2], the module's weights and flags (docs/module.md
// "Your own module"). The problem comes from the arrays' shapes and dtype plus the flags; the reference computes
// the expected outputs. Bad input is std::invalid_argument naming the file or the flag and the values.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/fixture.hpp"
#include "attncheck/module_fixture.hpp"

namespace attncheck {

// The flags of `import`, as given.
struct ImportRequest {
  std::string input;       // .npz or .h5; "-" reads an .npz from stdin
  std::string out;         // the fixture to write (.h5); may be empty with judge
  std::string tolerances;  // a folder for the per-element tolerances as .npy files (empty: none)
  std::string name, dtype, layout = "bhsd", causal, policy = "zero", fill_value, scores_out, max_logit;
  std::string score_mod, mask_mod;  // user modifications (expressions) and the arrays they index
  std::vector<std::string> aux;
  std::optional<double> scale;
  double dropout_p = 0, descale_q = 1, descale_k = 1, descale_v = 1;
  std::map<std::string, double> logit;  // the logit stage's parameters (mods.hpp) by field key
  std::optional<int64_t> causal_offset;
  std::vector<int64_t> window, key_lengths;
  uint64_t dropout_seed = 0;
  bool want_lse = false, want_weights = false;
  bool judge = false;  // the file also holds a candidate's outputs (out [, lse, weights]) to be judged
};

// The flags only a module import has.
struct ModuleImportFlags {
  std::string packing;  // packed (default) or interleaved, for wqkv
  int64_t heads = 0, kv_heads = 0;
  bool average_weights = false;
};

// The case made from the file, and with ImportRequest::judge the candidate's outputs it holds.
struct ImportedCase {
  std::string source;  // the input as messages name it ("stdin" for "-")
  Fixture fixture;
  Outputs candidate;
};

// The checks of --out against --judge, before anything is read.
void check_import_request(const ImportRequest& r);

// Reads the tensors, builds and validates the problem, runs the reference and writes the fixture (ImportRequest::out)
// and the tolerances (ImportRequest::tolerances). `note` receives what the reader should know ("q, k, v (float32)
// are rounded to --dtype bf16"), as it arises.
ImportedCase import_case(const ImportRequest& r, const std::function<void(const std::string&)>& note);

// The module fixture from an .npz (x, x2; wq, wk, wv [, bq, bk, bv] or wqkv [, bqkv]; wo [, bo]; key_padding_mask
// or mask; keep; dy for the reference gradients), with the request's input, out, name, dtype, causal, scale,
// policy, dropout and want_weights; written to ImportRequest::out.
ModuleFixture import_module_case(const ImportRequest& r, const ModuleImportFlags& m);

}  // namespace attncheck
