// The properties every implementation must satisfy, as plain functions of (implementation, case). The RapidCheck
// suite (test_properties.cpp) and `attncheck selftest` (mutants) both run this one list.
#pragma once

#include <string>
#include <vector>

#include "attncheck/accuracy.hpp"
#include "attncheck/impl.hpp"
#include "case.hpp"

namespace attncheck::prop {

struct Outcome {
  enum Kind { pass, fail, unsupported } kind = pass;
  std::string message;  // fail: case name, worst index, expected, actual, error, tolerance; unsupported: reason
  double ratio = 0.0;   // largest error / tolerance seen by the comparisons of this check (0 when none)
  // The accuracy profile of each comparison (accuracy.hpp), in the order made: its tensor's name and profile. The
  // expected side is the reference, or for a metamorphic property the implementation's own other run.
  std::vector<std::pair<std::string, Accuracy>> profiles;
  static Outcome unsup(std::string why) { return {unsupported, std::move(why), 0.0, {}}; }
};

struct Property {
  const char* name;
  const char* what;
  // Steer a generated spec towards cases where the property says something (e.g. force a mask).
  void (*prepare)(CaseSpec&);
  Outcome (*check)(const Impl&, const Case&);
};

const std::vector<Property>& properties();
const Property* find_property(const std::string& name);
// Every property's name, comma-separated (for the message of an unknown name).
std::string property_names();

// The work budget (CaseSpec::cost) for an implementation: ATTNCHECK_PROPERTY_BUDGET, times 8 in long mode
// (ATTNCHECK_PROPERTY_LONG=1), divided for implementations known to be slow (emulated kernels).
int64_t default_budget(const Impl& impl);
bool long_mode();

// prepare -> normalise -> restrict to capabilities -> budget -> build -> check; exceptions become failures.
// `removed` receives the features restrict_to took out; `built` (optional) the case that was checked.
Outcome evaluate(const Property& prop, const Impl& impl, CaseSpec spec, int64_t budget,
                 std::vector<std::string>* removed = nullptr, Case* built = nullptr);

// Part lists (properties_basic.cpp, properties_meta.cpp, properties_model.cpp).
std::vector<Property> basic_properties();
std::vector<Property> metamorphic_properties();
std::vector<Property>
model_properties();  // properties_model.cpp: invariants of sinks, raw scores, append, varlen, paged, fp8
std::vector<Property> invariance_properties();  // properties_invariance.cpp: rerun and batch invariance
std::vector<Property> merge_properties();       // properties_merge.cpp: an implementation's merge of attention states
std::vector<Property> mods_properties();        // properties_mods.cpp: the modification library, RoPE positions

}  // namespace attncheck::prop
