// Helpers shared by the property files: running an implementation on a case, reference results with error
// scales, and element-wise comparison with the tolerance model's messages (case, index, expected, actual, tol).
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/reference.hpp"
#include "attncheck/tolerance.hpp"
#include "properties.hpp"

namespace attncheck::prop {

struct Ran {
  std::vector<double> out, lse, w;           // logical order: out [B,Hq,Lq,Dv], lse [B,Hq,Lq], w [B,Hq,Lq,Lk]
  std::vector<double> s;                     // raw scores [B,Hq,Lq,Lk], when the case asks for them
  std::vector<double> present_k, present_v;  // [B,Hkv,Lk,D], when the case has a past (KV-cache append)
};

// Runs `impl`; nullopt (with the reason) when it does not support the case.
std::optional<Ran> run(const Impl& impl, const Case& c, std::string* why);

struct Tol {
  ExpectedAttention ref;
  std::vector<double> out, lse, w, s;  // s: raw scores, when the case asks for them
};
// The reference (with weights, whatever the case asks) and the tolerance model's per-element tolerances, at the
// precision contract `impl` declares for the case's dtype (its declarations(); the default contract otherwise).
Tol tolerances(const Impl& impl, const Case& c);

// Collects comparisons; the first failure keeps its message, the ratio is the worst over all.
struct Checker {
  const Impl& impl;
  const Case& c;
  Outcome result;
  Checker(const Impl& i, const Case& cs) : impl(i), c(cs) {}
  // Compare `actual` to `expected` element-wise within `tol` (non-finite expected must match in kind).
  bool compare(const std::string& what, const std::vector<int64_t>& shape, const std::vector<double>& expected,
               const std::vector<double>& actual, const std::vector<double>& tol);
  bool fail(const std::string& msg);
  Outcome done() { return result; }
};

std::vector<int64_t> out_shape(const Problem& p);
std::vector<int64_t> lse_shape(const Problem& p);
std::vector<int64_t> w_shape(const Problem& p);
std::vector<double> add(const std::vector<double>& a, const std::vector<double>& b);
// out, lse and weights of the case within the tolerance model of the reference (the `agreement` property).
Outcome agreement(const Impl& impl, const Case& c);
// Same case with lse and weights requested when the implementation can produce them.
Case with_stats(const Impl& impl, Case c);

// Compare the implementation's results on two cases whose exact results coincide (after mapping b's results
// onto a's indices): within twice a's tolerance.
Outcome compare_pair(const Impl& impl, const Case& a, const Ran& ra, const Ran& rb_mapped);

// The `prepare` of a property that takes any case as drawn.
inline void prep_none(CaseSpec&) {}

// Equal values, or both NaN: what the bitwise properties compare (a NaN's payload is not a result).
inline bool same_bits(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Runs impl on c into `var`, or returns unsupported from the enclosing check.
#define RUN_OR_UNSUP(var, impl, c)           \
  std::string why_##var;                     \
  const auto var = run(impl, c, &why_##var); \
  if (!var) return Outcome::unsup(why_##var)

}  // namespace attncheck::prop
