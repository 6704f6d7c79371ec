// Prints the diagnoser's validation tables (docs/diagnosis.md quotes them): the selftest mutants on the golden
// fixtures, and the detection-power faults on grid problems; with `mods`, the classic selftest mutants declaring
// the modification library on the fixtures through a modification instead. Fails when any diagnosed failure's top
// tag is not its injected cause (every mutant and fault diagnosed as what it is), listing each such miss.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "validate.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FIXTURES_DIR [PER_CAUSE] [verbose] [mods]\n", argv[0]);
    return 2;
  }
  const int per = argc > 2 ? std::atoi(argv[2]) : 6;
  bool verbose = false, mods = false;
  for (int a = 3; a < argc; ++a) (std::string(argv[a]) == "mods" ? mods : verbose) = true;
  using namespace attncheck::diagnose;
  std::vector<std::pair<std::string, std::vector<ValidationRow>>> tables;
  if (mods) {
    tables.emplace_back(
        "classic selftest mutants declaring the modification library, on the golden fixtures through "
        "a modification",
        validate_on_mutants(argv[1], per, 12, true));
  } else {
    tables.emplace_back("selftest mutants on golden/cases", validate_on_mutants(argv[1], per, 12));
    tables.emplace_back("detection-power faults on Lk=1024 grid problems", validate_on_power(per, 12));
  }
  int wrong = 0;
  for (const auto& [title, rows] : tables) {
    std::printf("## %s\n\n%s\n", title.c_str(), validation_table(rows).c_str());
    for (const auto& r : rows) {
      // A classic bug needs its own feature (dropout, a negative scale...), which few modification fixtures have.
      if (r.cases == 0) {
        std::printf("NOT EXERCISED: %s (no failure to diagnose)\n", r.mutant.c_str());
        wrong += !mods;
      }
      if (r.hits < r.cases)
        std::printf("MISDIAGNOSED: %s (injected %s) on %d of %d failures\n", r.mutant.c_str(), r.injected.c_str(),
                    r.cases - r.hits, r.cases);
      wrong += r.cases - r.hits;
    }
    if (verbose)
      for (const auto& r : rows)
        for (const auto& m : r.misses) std::printf("miss %s on %s\n", r.mutant.c_str(), m.c_str());
  }
  return wrong ? 1 : 0;
}
