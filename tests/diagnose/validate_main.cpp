// Prints the diagnoser's validation tables (docs/diagnosis.md quotes them): the selftest mutants on the golden
// fixtures, and the detection-power faults on grid problems. Fails when a mutant's or fault's most frequent top tag
// is not its injected cause (known misses, listed in docs/diagnosis.md, are printed but not counted).
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "validate.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FIXTURES_DIR [PER_CAUSE] [verbose]\n", argv[0]);
    return 2;
  }
  const int per = argc > 2 ? std::atoi(argv[2]) : 6;
  const bool verbose = argc > 3;
  using namespace attncheck::diagnose;
  // Not yet diagnosed correctly (docs/diagnosis.md, "Known misses"): reported, not counted as failures.
  const std::set<std::string> known_misses = {"bf16-pv-acc", "row-4ulp"};
  int wrong = 0;
  for (const auto& [title, rows] : {std::pair{"selftest mutants on golden/cases", validate_on_mutants(argv[1], per, 12)},
                                    std::pair{"detection-power faults on Lk=1024 grid problems", validate_on_power(per, 12)}}) {
    std::printf("## %s\n\n%s\n", title, validation_table(rows).c_str());
    for (const auto& r : rows) {
      if (r.cases > 0 && r.majority() == r.injected) continue;
      if (known_misses.count(r.mutant)) {
        std::printf("known miss: %s (injected %s, majority %s)\n", r.mutant.c_str(), r.injected.c_str(), r.majority().c_str());
        continue;
      }
      std::printf("MISDIAGNOSED: %s (injected %s, majority %s, %d cases)\n", r.mutant.c_str(), r.injected.c_str(),
                  r.majority().c_str(), r.cases);
      ++wrong;
    }
    if (verbose)
      for (const auto& r : rows)
        for (const auto& m : r.misses) std::printf("miss %s on %s\n", r.mutant.c_str(), m.c_str());
  }
  return wrong ? 1 : 0;
}
