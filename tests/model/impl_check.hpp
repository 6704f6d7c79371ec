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
      const Verdict v = judge(p, reference_attention(p, in), out);
      EXPECT_TRUE(v.pass) << name << " " << p.name() << ": " << v.worst().describe();
      const Problem other = without_feature(p);
      EXPECT_FALSE(judge(other, reference_attention(other, in), out).pass) << name << " " << p.name();
    }
  }
}

}  // namespace attncheck
