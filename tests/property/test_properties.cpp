// The property suite: every property of properties() against every implementation in registry(), one GoogleTest
// per pair (e.g. `Property/Suite.Holds/causality__cpu_flash`), cases generated and shrunk by RapidCheck.
// Default: a fixed seed per pair and a modest number of cases within each implementation's size budget.
// ATTNCHECK_PROPERTY_LONG=1 runs 500 cases (default 80) with 8x the budget; RC_PARAMS (e.g. "seed=7 max_success=500")
// overrides RapidCheck's parameters; ATTNCHECK_PROPERTY_CASES=N caps the cases per pair with the same seeds (how
// tools/sanitize.sh runs the suite). A failure prints the shrunk case and writes it as a regression fixture.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include "rc_runner.hpp"

using namespace attncheck;
using namespace attncheck::prop;

namespace {

struct Pair {
  std::string property, impl;
};
void PrintTo(const Pair& p, std::ostream* os) { *os << p.property << " on " << p.impl; }

std::vector<Pair> pairs() {
  std::vector<Pair> v;
  for (const auto& p : properties())
    for (const auto& i : registry()) v.push_back({p.name, i->name()});
  return v;
}

uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

class Suite : public ::testing::TestWithParam<Pair> {};

TEST_P(Suite, Holds) {
  const Property& prop = *find_property(GetParam().property);
  const ImplPtr impl = find_impl(GetParam().impl);
  ASSERT_TRUE(impl);
  if (const Support a = impl->available(); !a.ok) GTEST_SKIP() << "unavailable: " << a.reason;
  const int64_t budget = default_budget(*impl);

  rc::detail::TestParams params = rc::detail::configuration().testParams;
  if (!std::getenv("RC_PARAMS")) {
    // The schedule and layout properties run each case four or five more times (other settings, other layouts).
    const std::string name = prop.name;
    const bool reruns = name == "schedule_invariance" || name == "layout_invariance";
    params.maxSuccess = long_mode() ? 500 : reruns ? 25 : 80;
    params.seed = fnv(prop.name + std::string("/") + impl->name());
    if (const char* cap = std::getenv("ATTNCHECK_PROPERTY_CASES")) {
      const int n = std::atoi(cap);
      if (n < 1) FAIL() << "ATTNCHECK_PROPERTY_CASES must be a positive number of cases, got '" << cap << "'";
      params.maxSuccess = std::min<int>(static_cast<int>(params.maxSuccess), n);
    }
  }
  const RcRun r = rc_run(prop, *impl, params, budget);
  std::cout << "[property] " << prop.name << " on " << impl->name() << ": " << r.supported << " cases checked, "
            << r.unsupported << " unsupported, max error/tolerance " << r.max_ratio << " (budget " << budget
            << ", seed " << params.seed << ")\n";
  if (!r.worst.empty()) std::cout << "  closest to its tolerance: " << r.worst << "\n";
  std::cout << "  max error/tolerance by dtype:";
  for (const auto& [dt, ratio] : r.max_ratio_by_dtype) std::cout << " " << dt << " " << ratio;
  std::cout << "\n";
  for (const auto& [why, n] : r.reasons) std::cout << "  unsupported x" << n << ": " << why << "\n";
  for (const auto& [what, n] : r.removed)
    std::cout << "  feature not supported, removed x" << n << ": " << what << "\n";
  if (r.failed)
    FAIL() << "property '" << prop.name << "' (" << prop.what << ") fails on " << impl->name() << "\n"
           << "shrunk case: " << r.message << "\n"
           << (r.fixture.empty() ? "" : "regression fixture: " + r.fixture + "\n");
  if (r.gave_up) FAIL() << r.message;
  const int supported = r.supported;
  if (supported == 0) GTEST_SKIP() << impl->name() << " supports no generated case of " << prop.name;
}

std::string pair_name(const ::testing::TestParamInfo<Pair>& info) {
  std::string s = info.param.property + "__" + info.param.impl;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Property, Suite, ::testing::ValuesIn(pairs()), pair_name);

}  // namespace
