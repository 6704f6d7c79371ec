// `attncheck power --merge DIR` (docs/states.md "Power"): every merge variant (merge_power.hpp) on every merge
// fixture under DIR, each failure diagnosed (harness/diagnose); a fault is caught when it fails with its tag, a
// correct variant must never fail.
#pragma once

#include <string>
#include <vector>

namespace attncheck::power {

struct MergeTableRow {
  std::string variant, expect;  // expect: the tag the fault should get; "" for a correct variant
  int failed = 0;               // fixtures on which it failed
  std::string tags;             // "TAG N, ..." over the failures, or ""
  std::string verdict;          // pass, FALSE-ALARM, caught, MISSED, "caught, WRONG TAG N"
};

struct MergeTable {
  size_t fixtures = 0;
  std::vector<MergeTableRow> rows;
  // A merge fixture that cannot be read, and a .h5 file that does not even open as HDF5 (it may be one), each
  // "FILE: reason": every other fixture still counts.
  std::vector<std::string> unreadable;
  bool accepted() const;  // every fault caught with its tag, no false alarm
};

// std::invalid_argument naming --merge when DIR is not a directory or holds no merge fixture.
MergeTable merge_table(const std::string& dir);

// Prints the table and its verdict line (unreadable files listed after it, with a line on stderr); returns the exit
// code: 0 accepted, 1 not, 2 when a file could not be read.
int print_merge_table(const MergeTable& t);

}  // namespace attncheck::power
