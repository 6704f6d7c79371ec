#include "candidate_rows.hpp"

#include <cstdio>

namespace attncheck::cli {

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
