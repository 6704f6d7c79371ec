// The property suite: every property of properties() against every implementation in registry(), one GoogleTest
// per pair (e.g. `Property/Suite.Holds/causality__cpu_flash`), cases generated and shrunk by RapidCheck.
// Default: a fixed seed per pair and a modest number of cases within each implementation's size budget.
// ATTNCHECK_PROPERTY_LONG=1 runs 10x the cases with 8x the budget; RC_PARAMS (e.g. "seed=7 max_success=500")
// overrides RapidCheck's parameters. A failure prints the shrunk case and writes it as a regression fixture.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include "properties.hpp"
#include "regression.hpp"

using namespace attncheck;
using namespace attncheck::prop;

namespace {

// Every pick covers its whole range at any RapidCheck size (features must not wait for large sizes) and shrinks
// towards its lower bound, the simplest choice. Cost is bounded by the implementation's budget instead.
struct RcChooser {
  int64_t pick(int64_t lo, int64_t hi) { return *rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi + 1)); }
};

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
    params.maxSuccess = long_mode() ? 250 : 25;
    params.seed = fnv(prop.name + std::string("/") + impl->name());
  }
  int supported = 0, unsupported = 0;
  std::map<std::string, int> reasons, removed_count;
  double max_ratio = 0;
  std::optional<Case> failed;
  std::string failed_msg;

  const auto result = rc::detail::checkTestable(
      [&] {
        RcChooser chooser;
        const CaseSpec spec = draw_spec(chooser);
        Case built;
        std::vector<std::string> removed;
        const Outcome o = evaluate(prop, *impl, spec, budget, &removed, &built);
        if (o.kind == Outcome::unsupported) {
          ++unsupported, ++reasons[o.message];
          return;
        }
        ++supported;
        for (const auto& r : removed) ++removed_count[r];
        if (o.kind == Outcome::fail) {
          failed = built, failed_msg = o.message;  // the last failure is the shrunk one
          RC_FAIL(o.message);
        }
        max_ratio = std::max(max_ratio, o.ratio);
      },
      rc::detail::TestMetadata{prop.name, prop.name}, params);

  std::cout << "[property] " << prop.name << " on " << impl->name() << ": " << supported << " cases checked, "
            << unsupported << " unsupported, max error/tolerance " << max_ratio << " (budget " << budget
            << ", seed " << params.seed << ")\n";
  for (const auto& [why, n] : reasons) std::cout << "  unsupported x" << n << ": " << why << "\n";
  for (const auto& [what, n] : removed_count) std::cout << "  feature not supported, removed x" << n << ": " << what << "\n";

  if (result.template is<rc::detail::FailureResult>()) {
    std::ostringstream rc_msg;
    rc::detail::printResultMessage(result, rc_msg);
    std::string fixture;
    if (failed) fixture = write_regression(*failed, impl->name(), prop.name, failed_msg, params.seed);
    FAIL() << "property '" << prop.name << "' (" << prop.what << ") fails on " << impl->name() << "\n"
           << "shrunk case: " << failed_msg << "\n"
           << (fixture.empty() ? "" : "regression fixture: " + fixture + "\n") << rc_msg.str();
  } else if (!result.template is<rc::detail::SuccessResult>()) {
    std::ostringstream rc_msg;
    rc::detail::printResultMessage(result, rc_msg);
    FAIL() << rc_msg.str();
  }
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
