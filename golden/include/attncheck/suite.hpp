// The golden suite's text spec (golden/suite.json): every case by its parameters, so the checked-in fixtures can
// be rebuilt byte-identically by `attncheck generate`. Format in golden/SCHEMA.md ("Suite spec").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/fixture.hpp"
#include "attncheck/generate.hpp"
#include "attncheck/problem.hpp"

namespace attncheck {

struct CaseSpec {
  std::string name;  // unique; default "<Problem::short_name()>/<distribution>"
  Problem problem;
  gen::Distribution distribution = gen::Distribution::normal;
  uint64_t seed = 0;       // the generator seed: case_seed(spec seed, name)
  bool gradients = false;  // also dout and the reference gradients (attncheck/fixture_gradients.hpp)
  bool exact_out = false;  // an exact case: out judged for equality (check_exact_out refuses a false claim)
  // {q_block, kv_block}: the fixture carries the exact block mask at these sizes (Fixture::block_mask); empty: none.
  std::vector<int64_t> block_mask;
};

struct SuiteSpec {
  std::string file_name;         // the spec's file name (no directory): recorded in each fixture's provenance
  std::string subdir = "cases";  // fixtures go to <out>/<subdir>/
  std::vector<CaseSpec> cases;
};

// The generator seed of a case: its spec seed mixed with its name (FNV-1a, then the SplitMix64 finaliser), so no
// two fixtures of a suite share values (one spec seed across cases and dtypes still gives distinct rows).
uint64_t case_seed(uint64_t spec_seed, const std::string& name);

// Parses and validates a spec; throws std::invalid_argument "<path>: cases[i] (<name>): <field>: <what>" on
// unknown keys, bad values, invalid problems or duplicate names. A case whose "dtype" is a list expands into one
// case per dtype.
SuiteSpec read_suite(const std::string& path);
// The same from the spec's text (`path` names it in messages and gives the file name; the fuzz target's entry).
SuiteSpec parse_suite(const std::string& text, const std::string& path);

// The fixture of one case: deterministic inputs from (distribution, seed), the reference in double, provenance
// with the canonical command "attncheck generate --spec <file_name>".
Fixture build_case(const CaseSpec& c, const std::string& spec_file_name);
// The same with the reference on about `rows` sampled query rows (sample_rows; rows <= 0: every row), for long
// contexts verified on demand (`verify --spec --rows`); never written as a fixture.
Fixture build_case_rows(const CaseSpec& c, const std::string& spec_file_name, int64_t rows);

}  // namespace attncheck
