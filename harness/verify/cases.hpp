// Which cases a verify run judges: every fixture file under a directory (attention, module and merge fixtures) or
// every case of a suite spec, narrowed by a filter, by the pass (the backward pass alone: only cases with
// gradients) and by a shard (sharding.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attncheck/fixture.hpp"
#include "attncheck/suite.hpp"
#include "backward_row.hpp"
#include "sharding.hpp"

namespace attncheck::verify {

struct Selection {
  std::string fixtures = "golden";  // searched recursively for *.h5
  std::string spec;                 // instead: the cases of this suite spec, each generated when its turn comes
  int64_t rows = 0;                 // with spec: the reference computes about this many sampled query rows
  std::string filter;               // matches()
  Pass pass = Pass::forward;
  std::optional<Shard> shard;
};

struct Case {
  std::string file;
  std::string name;  // "" for a file whose header cannot be read
  size_t unit = 0;   // its place in the whole run's sorted list: the shard unit
};

struct Cases {
  std::vector<Case> list;                         // the cases this process judges, in order
  std::map<std::string, std::string> unreadable;  // file -> why: one input-error row each, every other file judged
  std::set<std::string> merges;                   // files of kind merge (docs/states.md)
  std::string spec;                               // Selection::spec, and its cases
  SuiteSpec suite;
  int64_t rows = 0;
};

// Filter: globs separated by ':', matched against the case name or the file name. A pattern starting with '-'
// and every pattern after it exclude (GoogleTest's "POS:POS:-NEG:NEG"). Unlike GoogleTest, a '-' inside a pattern
// is literal, because case names contain '-' ("fp16/B2-Hq4-...") and must paste back into --filter unchanged.
bool matches(const std::string& filter, const std::string& name, const std::string& file);

// The cases of a selection. Nothing left to judge, or an option that does not fit the selection, is
// std::invalid_argument naming the option (--fixtures, --spec, --rows, --filter, --pass).
Cases find_cases(const Selection& s);

// Why a file could not be read: nullopt when `read` returns; the message of any error but Ctrl-C (Cancelled, which
// propagates), with the file named.
std::optional<std::string> read_error(const std::string& file, const std::function<void()>& read);

// A case's fixture: read from its file, or built from the suite spec. A spec case that cannot be built, or a file
// that cannot be read, throws.
Fixture load_case(const Cases& cases, const Case& c);

}  // namespace attncheck::verify
