// The selftest loop: same seeded cases for every catalogue entry, every property, first failure per property kept.
#include "selftest.hpp"

#include <algorithm>
#include <chrono>

#include "properties.hpp"
#include "mutants.hpp"

namespace attncheck::mutants {

SelftestReport run_selftest(const SelftestOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SelftestReport rep;
  for (const Entry& e : catalogue()) {
    EntryResult r;
    r.name = e.impl->name(), r.bug = e.bug, r.correct = e.correct;
    for (size_t pi = 0; pi < prop::properties().size(); ++pi) {
      const prop::Property& property = prop::properties()[pi];
      for (int k = 0; k < o.cases_per_property; ++k) {
        prop::SeededChooser chooser(o.seed + 0x1000003ull * pi + static_cast<uint64_t>(k));
        prop::CaseSpec spec = prop::draw_spec(chooser);
        prop::Case built;
        const prop::Outcome out = prop::evaluate(property, *e.impl, spec, o.budget, nullptr, &built);
        if (out.kind == prop::Outcome::unsupported) {
          ++r.unsupported;
          continue;
        }
        ++r.checks;
        if (out.kind == prop::Outcome::fail) {
          r.failures.push_back({property.name, built.name(), out.ratio, out.message});
          break;
        }
        r.max_pass_ratio = std::max(r.max_pass_ratio, out.ratio);
      }
    }
    if (e.correct) {
      ++rep.correct;
      rep.false_alarms += !r.failures.empty();
    } else {
      ++rep.mutants;
      rep.killed += !r.failures.empty();
    }
    rep.details.push_back(std::move(r));
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace attncheck::mutants
