// Runs one property against one implementation under RapidCheck: generated specs (shrinkable), coverage counts,
// the largest error/tolerance ratio, and on failure the shrunk case written as a regression fixture.
// Shared by the suite (test_properties.cpp) and the fixture round-trip test (test_regression.cpp).
#pragma once

#include <rapidcheck.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "properties.hpp"
#include "regression.hpp"

namespace attncheck::prop {

// Every pick covers its whole range at any RapidCheck size (features must not wait for large sizes) and shrinks
// towards its lower bound, the simplest choice. Cost is bounded by the implementation's budget instead.
struct RcChooser {
  int64_t pick(int64_t lo, int64_t hi) { return *rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi + 1)); }
};

struct RcRun {
  bool failed = false, gave_up = false;
  std::string message;  // the shrunk failure (case, index, expected, actual, error, tolerance) and RapidCheck's
  std::string fixture;  // regression fixture path ("" when none)
  std::optional<Case> shrunk;
  int supported = 0, unsupported = 0;
  std::map<std::string, int> reasons, removed;
  double max_ratio = 0;  // over passing cases
  std::map<std::string, double> max_ratio_by_dtype;
  std::string worst;  // the passing comparison closest to its tolerance
  // The accuracy profile over passing cases, per compared tensor and dtype (merge_accuracy of each case's).
  std::map<std::pair<std::string, std::string>, Accuracy> accuracy;
};

inline RcRun rc_run(const Property& prop, const Impl& impl, const rc::detail::TestParams& params, int64_t budget,
                    bool write_fixture = true) {
  RcRun out;
  std::string failed_msg;
  const auto result = rc::detail::checkTestable(
      [&] {
        RcChooser chooser;
        const CaseSpec spec = draw_spec(chooser);
        Case built;
        std::vector<std::string> removed;
        const Outcome o = evaluate(prop, impl, spec, budget, &removed, &built);
        if (o.kind == Outcome::unsupported) {
          ++out.unsupported, ++out.reasons[o.message];
          return;
        }
        ++out.supported;
        for (const auto& r : removed) ++out.removed[r];
        if (o.kind == Outcome::fail) {
          out.shrunk = built, failed_msg = o.message;  // the last failure seen is the shrunk one
          RC_FAIL(o.message);
        }
        if (o.ratio > out.max_ratio) out.worst = o.message;
        out.max_ratio = std::max(out.max_ratio, o.ratio);
        double& by = out.max_ratio_by_dtype[to_string(built.p.dtype)];
        by = std::max(by, o.ratio);
        for (const auto& [tensor, a] : o.profiles) merge_accuracy(out.accuracy[{tensor, to_string(a.ulp_dtype)}], a);
      },
      rc::detail::TestMetadata{prop.name, prop.name}, params);
  std::ostringstream rc_msg;
  rc::detail::printResultMessage(result, rc_msg);
  if (result.template is<rc::detail::FailureResult>()) {
    out.failed = true;
    if (out.shrunk && write_fixture)
      out.fixture = write_regression(*out.shrunk, impl.name(), prop.name, failed_msg, params.seed);
    out.message = failed_msg + "\n" + rc_msg.str();
  } else if (!result.template is<rc::detail::SuccessResult>()) {
    out.gave_up = true;
    out.message = rc_msg.str();
  }
  return out;
}

}  // namespace attncheck::prop
