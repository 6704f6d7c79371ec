// What `attncheck generate` does with a suite spec: each selected case built in memory and compared with the file
// it would replace; a new file is written, an unchanged one left alone, a changed one written only when updating
// (else reported, with what changed numerically). Files are written durably (durable_file.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "attncheck/suite.hpp"

namespace attncheck {

struct RegenerateOptions {
  std::string out = "golden";  // the suite's fixtures go to OUT/<spec subdir>/
  bool update = false;         // overwrite a file whose bytes would change
  std::string filter;          // a glob on the case's name or file name; empty: every case
  // Which of the selected cases to build, by index among them (a shard; empty: all).
  std::function<bool(size_t)> builds;
  std::function<void(const std::string&)> on_case;  // before each case, with its name (progress, Ctrl-C)
  std::function<void(const std::string&)> on_line;  // each line of news: new, updated, DIFFERS, stale
};

struct RegenerateCounts {
  std::string dir;  // OUT/<spec subdir>
  size_t selected = 0, built = 0;
  int created = 0, same = 0, updated = 0, differ = 0;
};

// std::invalid_argument when the filter matches no case, or a target exists and is not a regular file.
RegenerateCounts regenerate_suite(const SuiteSpec& spec, const RegenerateOptions& o);

// The same for a merge-state suite spec (state_suite.hpp; is_merge_suite): every case is built (`filter`, `builds` and
// `on_case` are not used). std::invalid_argument when two cases share a file name.
RegenerateCounts regenerate_merge_suite(const std::string& spec, const RegenerateOptions& o);

// The module suite (module_suite.hpp) into OUT/modules/; `filter`, `builds` and `on_case` are not used. A file whose
// bytes would change is left alone unless `update`, and on_line gets "differs: PATH (--update overwrites)".
RegenerateCounts regenerate_module_suite(const RegenerateOptions& o);

}  // namespace attncheck
