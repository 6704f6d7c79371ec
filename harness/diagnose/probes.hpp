// Active probes: the candidate re-run on problems derived from the failing one (poison in never-visible K/V/bias
// slots replaced by 0, each active mask, feature or score/mask modification removed, GQA expanded to MHA, the
// default scale made explicit, a negative scale made positive, Lk cut to a tile multiple, fp64 inputs). Which
// changes make the failure disappear is evidence for or against each cause. Bounded by a re-run budget.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "diagnosis.hpp"

namespace attncheck::diagnose {

struct ProbeEvidence {
  std::vector<ProbeResult> results;
  int reruns = 0;
  // tag -> +1 when a probe that removes the tag's trigger passes, -1 when it still fails.
  std::map<std::string, int> votes;
  std::map<std::string, std::string> why;  // tag -> the probe that voted last
  // Tags of sole-trigger probes whose change made the failure disappear: every other cause is voted down.
  std::vector<std::string> sole;
};

ProbeEvidence run_probes(const prop::Case& c, const Impl& impl, int budget, const ToleranceModel& m);

}  // namespace attncheck::diagnose
