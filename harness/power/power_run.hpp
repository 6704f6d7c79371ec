// What `attncheck power` makes of the grid: a brought implementation as the engine's candidate, the grid's parts
// chosen by name, the table and the JSON report, the merge of sharded reports, and the exit rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "attncheck/impl.hpp"
#include "power.hpp"

namespace attncheck::power {

// The candidate as the engine's callbacks: run through run_impl, judged at its declared contract; nullopt for none.
std::optional<Candidate> candidate_of(const ImplPtr& impl);

// A part of the grid by name (`--dtype fp16,bf16`, `--logits hazard`); an unknown name is std::invalid_argument
// naming the option and the names it takes.
std::vector<DType> grid_dtypes(const std::vector<std::string>& names);
std::vector<Logits> grid_logits(const std::vector<std::string>& names);

// The report as JSON (`power --json`). `candidate`: its name, or "". `units`: each cell carries its configuration as
// its unit (a sharded run's report, which `merge` puts back in order).
nlohmann::json report_json(const Report& r, uint64_t seed, int64_t rows, const std::string& candidate, bool units);
// A merge of shards' reports, whose cells are those of the whole grid: summarised again as run_grid summarises
// them; returns the exit code the unsharded run would have had.
int merge_report(nlohmann::json& j);

// The table: error/tolerance per variant, dtype and logits at each Lk, the coverage per fault, the candidate's line
// (when there is one) and the totals, on stdout.
void print_report(const Report& r, const Impl* candidate);
// 0 when the grid is accepted and a candidate ran on some cell; else 1 (the candidate's reason on stderr).
int exit_code(const Report& r, const Impl* candidate);

}  // namespace attncheck::power
