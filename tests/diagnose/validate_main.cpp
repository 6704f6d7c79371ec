// Prints the diagnoser's validation table over the selftest mutants and the golden fixtures (docs/diagnosis.md is
// made from it) and fails when a mutant's most frequent top tag is not its injected cause.
#include <cstdio>
#include <cstdlib>

#include "validate.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FIXTURES_DIR [PER_MUTANT]\n", argv[0]);
    return 2;
  }
  const int per = argc > 2 ? std::atoi(argv[2]) : 6;
  const auto rows = attncheck::diagnose::validate_on_mutants(argv[1], per, 12);
  std::printf("%s", attncheck::diagnose::validation_table(rows).c_str());
  int wrong = 0;
  for (const auto& r : rows)
    if (r.cases == 0 || r.majority() != r.injected) {
      std::printf("MISDIAGNOSED: %s (injected %s, majority %s, %d cases)\n", r.mutant.c_str(), r.injected.c_str(),
                  r.majority().c_str(), r.cases);
      ++wrong;
    }
  for (const auto& r : rows)
    for (const auto& m : r.misses) std::printf("miss %s on %s\n", r.mutant.c_str(), m.c_str());
  return wrong ? 1 : 0;
}
