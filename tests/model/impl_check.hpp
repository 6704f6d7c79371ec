// For the model feature tests: every implementation that declares a feature (cpu, cpu-flash, the reference as an
// implementation) matches the fp64 reference on each problem, and the same outputs are judged wrong against a
// problem without the feature (a guard against passing by accident).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "attncheck/generate.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "properties.hpp"

namespace attncheck {

// A test mutant with cpu's capabilities whose run is `run(cpu, problem, inputs, outputs)` (cpu on a changed case).
class CpuMutant final : public Impl {
 public:
  using Run = std::function<void(const Impl&, const Problem&, const Inputs&, Outputs&)>;
  CpuMutant(std::string name, Run run) : name_(std::move(name)), run_(std::move(run)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test mutant of cpu: " + name_; }
  Capabilities capabilities() const override { return find_impl("cpu")->capabilities(); }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override { run_(*find_impl("cpu"), p, in, out); }

 private:
  std::string name_;
  Run run_;
};

inline void expect_impls_match_reference(const std::vector<Problem>& problems,
                                         const std::function<Problem(Problem)>& without_feature) {
  for (const char* name : {"cpu", "cpu-flash", "reference"}) {
    const ImplPtr impl = find_impl(name);
    ASSERT_TRUE(impl) << name;
    for (const Problem& p : problems) {
      const Inputs in = gen::generate_inputs(p, gen::Distribution::normal, 5);
      Outputs out;
      const Support s = run_impl(*impl, p, in, out);
      ASSERT_TRUE(s.ok) << name << " " << p.name() << ": " << s.reason;
      const Verdict v = judge(p, expected_attention(p, in), out);
      EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
      const Problem other = without_feature(p);
      EXPECT_FALSE(judge(other, expected_attention(other, in), out).pass) << name << " " << p.name();
    }
  }
}

// The message validate(p) throws, or "accepted".
inline std::string validation_message(const Problem& p) {
  try {
    validate(p);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}
// The message validate(p, in) throws, or "accepted".
inline std::string input_message(const Problem& p, const Inputs& in) {
  try {
    validate(p, in);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

// A feature's property passes for cpu and fails for the mutant `bad` on each case of seeds 1-6 (spec: B 2, Hq 2,
// Hkv 1, Lq 9, Lk 12, causal on odd seeds; `shape` may change it) that `counts` accepts; at least one counts.
inline void expect_property_kills(const char* property, const Impl& bad,
                                  const std::function<bool(const prop::Case&)>& counts,
                                  const std::function<void(prop::CaseSpec&)>& shape = {}) {
  const prop::Property& prop = *prop::find_property(property);
  int killed = 0, checked = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    prop::CaseSpec s;
    s.B = 2, s.Hq = 2, s.Hkv = 1, s.Lq = 9, s.Lk = 12, s.seed = seed, s.causal = seed % 2;
    if (shape) shape(s);
    prop.prepare(s);
    const prop::Case c = prop::build_case(s);
    if (!counts(c)) continue;
    ++checked;
    const prop::Outcome good = prop.check(*find_impl("cpu"), c);
    EXPECT_EQ(good.kind, prop::Outcome::pass) << property << ": " << good.message;
    const bool kill = prop.check(bad, c).kind == prop::Outcome::fail;
    killed += kill;
    if (!kill)
      ADD_FAILURE() << property << " did not kill " << bad.name() << " on " << c.spec.str() << " " << c.p.name();
  }
  EXPECT_GT(checked, 0) << property;
  EXPECT_EQ(killed, checked) << property;
}

}  // namespace attncheck
