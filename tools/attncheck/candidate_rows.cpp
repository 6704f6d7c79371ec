#include "candidate_rows.hpp"

#include <cstdio>

#include <stdexcept>

#include "attncheck/contract.hpp"
#include "attncheck/reference.hpp"

namespace attncheck::cli {

CaseResult judge_forward(const Fixture& f, const std::string& file, const std::string& source, const std::string& impl,
                         const Outputs& cand, const std::string& contract, Judged& judged) {
  Problem& problem = judged.problem;
  problem = f.problem;
  problem.want_lse = cand.lse.has_value();
  problem.want_weights = cand.weights.has_value() && f.problem.want_weights;
  if (!cand.lse) std::printf("note: %s has no /actual/lse: lse not compared\n", source.c_str());
  if (cand.weights && !f.problem.want_weights)
    std::printf("note: %s has no expected weights: /actual/weights not compared\n", file.c_str());
  if (!cand.weights && f.problem.want_weights)
    std::printf("note: %s has no /actual/weights: weights not compared\n", source.c_str());
  ToleranceModel& m = judged.model;
  m = f.tolerance;
  if (!contract.empty()) {
    try {
      m.contract = contract_from_string(contract, problem.dtype);
      validate_contract(*m.contract, problem.dtype);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("--contract: ") + e.what());
    }
    std::printf("note: judged under the declared precision contract %s\n", m.contract->to_string().c_str());
  }
  return judged_result(f.name, file, impl, judge(problem, f.expected, cand, m));
}

void print_rows(const std::vector<CaseResult>& rows, const std::vector<std::vector<std::string>>& diagnoses) {
  print_header();
  for (size_t i = 0; i < rows.size(); ++i) {
    print_row(rows[i]);
    for (const auto& t : rows[i].verdict.tensors) std::printf("  %s\n", t.describe().c_str());
    if (i < diagnoses.size())
      for (const std::string& l : diagnoses[i]) std::printf("    %s\n", l.c_str());
  }
  print_summary(rows);
}

}  // namespace attncheck::cli
