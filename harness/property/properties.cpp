// The property list, the evaluation pipeline (prepare, restrict, budget, build, check) and the comparison helpers.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "attncheck/declarations.hpp"
#include "prop_util.hpp"

namespace attncheck::prop {

std::optional<Ran> run(const Impl& impl, const Case& c, std::string* why) {
  Outputs o;
  const Support s = run_impl(impl, c.p, c.in, o);
  if (!s.ok) {
    if (why) *why = s.reason;
    return std::nullopt;
  }
  Ran r;
  r.out = o.out.to_double();
  if (o.lse) r.lse = o.lse->to_double();
  if (o.weights) r.w = o.weights->to_double();
  if (o.scores) r.s = o.scores->to_double();
  if (o.present_k) r.present_k = o.present_k->to_double(), r.present_v = o.present_v->to_double();
  return r;
}

Tol tolerances(const Impl& impl, const Case& c) {
  Problem p = c.p;
  p.want_weights = true;
  ToleranceModel m;
  m.contract = impl.declarations().contract_for(p.dtype);
  Tol t;
  t.ref = expected_attention(p, c.in);
  t.out = out_tolerance(p, t.ref, m);
  t.lse = lse_tolerance(p, t.ref, m);
  t.w = weights_tolerance(p, t.ref, m);
  if (p.scores_out != ScoresOut::none) t.s = scores_tolerance(p, t.ref, m);
  return t;
}

std::vector<int64_t> out_shape(const Problem& p) { return {p.B, p.Hq, p.Lq, p.Dv}; }
std::vector<int64_t> lse_shape(const Problem& p) { return {p.B, p.Hq, p.Lq}; }
std::vector<int64_t> w_shape(const Problem& p) { return {p.B, p.Hq, p.Lq, p.Lk}; }

std::vector<double> add(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r(a.size());
  for (size_t n = 0; n < a.size(); ++n) r[n] = a[n] + b[n];
  return r;
}

Case with_stats(const Impl& impl, Case c) {
  const Capabilities caps = impl.capabilities();
  c.p.want_lse = caps.lse_out;
  c.p.want_weights = caps.weights_out;
  return c;
}

bool Checker::compare(const std::string& what, const std::vector<int64_t>& shape, const std::vector<double>& expected,
                      const std::vector<double>& actual, const std::vector<double>& tol) {
  if (actual.size() != expected.size())
    return fail(what + ": " + std::to_string(actual.size()) + " elements, expected " + std::to_string(expected.size()));
  const TensorVerdict v = compare_values(what, shape, expected, actual, tol);
  // Profiled in the ulps of the dtype the tensor is delivered in (Outputs, problem.hpp): out in out_dtype, the
  // KV cache in the inputs' dtype, the statistics (lse, weights, scores) in stat_dtype.
  const DType delivered = what.rfind("out", 0) == 0       ? c.p.out_dtype()
                          : what.rfind("present", 0) == 0 ? c.p.dtype
                                                          : c.p.stat_dtype();
  result.profiles.emplace_back(what, profile_accuracy(expected, actual, tol, delivered));
  if (std::isfinite(v.expected) && std::isfinite(v.actual) && v.tolerance > 0) {
    const double ratio = std::abs(v.actual - v.expected) / v.tolerance;
    if (ratio > result.ratio && result.kind == Outcome::pass)  // a passing outcome's message: its worst element
      result.message = c.name() + ": " + v.describe();
    result.ratio = std::max(result.ratio, ratio);
  } else if (!v.pass)
    result.ratio = std::max(result.ratio, HUGE_VAL);
  if (!v.pass) return fail(v.describe());
  return true;
}

bool Checker::fail(const std::string& msg) {
  if (result.ratio <= 1.0) result.ratio = HUGE_VAL;  // not a tolerance comparison (bitwise, exact zero, ...)
  if (result.kind != Outcome::fail) {
    result.kind = Outcome::fail;
    result.message = impl.name() + " on " + c.name() + ": " + msg + "\n  spec: " + c.spec.str();
  }
  return false;
}

const std::vector<Property>& properties() {
  static const std::vector<Property> all = [] {
    std::vector<Property> v = basic_properties();
    for (auto& p : metamorphic_properties()) v.push_back(p);
    for (auto& p : model_properties()) v.push_back(p);
    for (auto& p : invariance_properties()) v.push_back(p);
    for (auto& p : merge_properties()) v.push_back(p);
    for (auto& p : mods_properties()) v.push_back(p);
    return v;
  }();
  return all;
}

const Property* find_property(const std::string& name) {
  for (const auto& p : properties())
    if (name == p.name) return &p;
  return nullptr;
}

std::string property_names() {
  std::string s;
  for (const auto& p : properties()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

bool long_mode() {
  const char* e = std::getenv("ATTNCHECK_PROPERTY_LONG");
  return e && *e && std::string(e) != "0";
}

int64_t default_budget(const Impl& impl) {
  int64_t budget = 300000;
  if (const char* e = std::getenv("ATTNCHECK_PROPERTY_BUDGET")) budget = std::max<int64_t>(1000, std::atoll(e));
  if (long_mode()) budget *= 8;
  // Emulated GPU kernels run every thread of every block on the host: give them a smaller share.
  if (impl.name().find("emulated") != std::string::npos) budget /= 4;
  return budget;
}

Outcome evaluate(const Property& prop, const Impl& impl, CaseSpec spec, int64_t budget,
                 std::vector<std::string>* removed, Case* built) {
  prop.prepare(spec);
  // A contract that requires finite inputs everywhere is never handed poison (docs/isolation.md#masked-inputs).
  if (impl.declarations().masked_inputs == MaskedInputs::finite_required) spec.poison = false;
  normalise(spec);
  auto r = restrict_to(spec, impl.capabilities());
  apply_budget(spec, budget);
  normalise(spec);
  if (removed) *removed = std::move(r);
  Case c = build_case(spec);
  if (built) *built = c;
  try {
    return prop.check(impl, c);
  } catch (const std::exception& e) {
    Outcome o;
    o.kind = Outcome::fail;
    o.message = impl.name() + " on " + c.name() + ": threw: " + e.what() + "\n  spec: " + spec.str();
    o.ratio = HUGE_VAL;
    return o;
  }
}

}  // namespace attncheck::prop
