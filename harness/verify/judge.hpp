// The judging of a verify run: each case of find_cases (cases.hpp) against each implementation, under the
// implementation's declared fully-masked policy and precision contract, with the diagnosis of a failure and the
// invariance checks as rows of their own. Availability is asked once per implementation; an unavailable one has
// every case reported as such, never as unsupported or passed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attncheck/impl.hpp"
#include "case_result.hpp"
#include "cases.hpp"
#include "invariance_rows.hpp"

namespace attncheck::verify {

struct Judging {
  Pass pass = Pass::forward;
  double tol_scale = 1.0;    // explicit multiplier of every tolerance, recorded in the report
  bool diagnose = false;     // each failure diagnosed (harness/diagnose)
  int diagnose_reruns = 12;  // re-run budget per diagnosed failure
  std::string repro;         // with diagnose: each failure's smallest repro written here as a fixture
  invariance::Options invariance = invariance_options("", 3, "declared");  // the checks asked for: none
  std::vector<int64_t> block_mask;  // {Q_BLOCK, KV_BLOCK}: the exact block mask handed to each forward run
};

// What the caller sees while the cases are judged (each optional).
struct Observer {
  std::function<void(const std::string& label)> step;  // before each run: "<impl> <case>"
  // Each row as soon as it is judged, with the lines printed under it (its diagnosis).
  std::function<void(const CaseResult& row, const std::vector<std::string>& lines)> row;
};

struct Judged {
  std::vector<CaseResult> rows;  // in judging order: per case, per implementation, its invariance rows after it
  int64_t unchecksummed = 0;     // fixtures read without checksums
  std::vector<std::string> notes() const;  // the run's notes for the table and the report
};

// The implementations named (or every registered one for none or "all"). An unknown name is std::invalid_argument
// naming --impl and every known one.
std::vector<ImplPtr> select_impls(const std::vector<std::string>& names);

// --repro DIR: needs --diagnose; the directory is created. Otherwise std::invalid_argument naming --repro.
void prepare_repro_dir(const std::string& repro, bool diagnose);

Judged judge_cases(Cases& cases, const std::vector<ImplPtr>& impls, const Judging& j, const Observer& seen = {});

}  // namespace attncheck::verify
