// `attncheck list`'s text of one implementation (describe_impl.hpp).
#include "describe_impl.hpp"

#include <cstdarg>
#include <cstdio>
#include <string>
#include <string_view>

#include "attncheck/declarations.hpp"
#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"

namespace attncheck::verify {
namespace {

__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string s(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(s.data(), s.size(), format, again);
  va_end(again);
  s.pop_back();
  out += s;
}

// Adds item to a list joined by sep. Appended piece by piece, not as sep + item: gcc 12 warns falsely
// (-Wrestrict, GCC PR 105329) on the inlined concatenation.
void append(std::string& list, const char* sep, std::string_view item) {
  if (!list.empty()) list += sep;
  list += item;
}

template <class Set>
std::string join(const Set& s) {
  std::string o;
  for (auto x : s) append(o, ",", to_string(x));
  return o.empty() ? "none" : o;
}

// Two lines under each implementation: what it supports, and what it does not (so a gap is never silent).
void capabilities_text(std::string& out, const Capabilities& c) {
  std::string yes, no;
  for (const Feature& f : problem_features())  // every boolean capability of the feature table
    if (f.boolean()) {
      const bool on = f.declared(c);
      std::string& list = on ? yes : no;
      append(list, " ", f.name);
    }
  appendf(out, "    dtypes %s; layouts %s; alignments %s; fully-masked %s\n", join(c.dtypes).c_str(),
          join(c.layouts).c_str(), join(c.alignments).c_str(), join(c.fully_masked).c_str());
  appendf(out, "    supports: %s\n", yes.empty() ? "-" : yes.c_str());
  if (!no.empty()) appendf(out, "    not supported: %s\n", no.c_str());
  std::string mods, missing;  // the library modifications (mods.hpp), by name
  for (const ModEntry& m : modifications()) {
    std::string& list = c.mods.count(m.name) ? mods : missing;
    append(list, " ", m.name);
  }
  appendf(out, "    modifications: %s\n", mods.empty() ? "none" : mods.c_str());
  if (!mods.empty() && !missing.empty()) appendf(out, "    modifications not supported: %s\n", missing.c_str());
  if (c.max_head_dim > 0 || c.head_dim_multiple > 1)
    appendf(out, "    head dims: max %lld, multiple of %lld\n", static_cast<long long>(c.max_head_dim),
            static_cast<long long>(c.head_dim_multiple));
  if (!c.notes.empty()) appendf(out, "    notes: %s\n", c.notes.c_str());
}

// What the implementation declares (attncheck/declarations.hpp): policy, determinism, outputs, contracts.
void declarations_text(std::string& out, const Declarations& d) {
  std::string line = d.fully_masked_policy ? std::string("fully-masked ") + to_string(*d.fully_masked_policy)
                                           : "follows the problem's fully-masked policy";
  line += d.deterministic ? "; deterministic" : "; not declared deterministic";
  line += d.batch_invariant ? "; batch-invariant" : "; not declared batch-invariant";
  if (d.masked_inputs == MaskedInputs::finite_required) line += "; masked inputs: finite-required";
  if (d.schedule_knobs)
    line += "; schedule knobs: " + knob_list(d.schedule_knobs) + " (bitwise: " + knob_list(d.schedule_bitwise) + ")";
  if (d.layout_invariant) line += "; layout-invariant";
  line += "; outputs";
  for (const auto& o : d.outputs) line += " " + o;
  for (const auto& [t, c] : d.contracts) line += std::string("; contract ") + to_string(t) + " " + c.to_string();
  appendf(out, "    declares: %s\n", line.c_str());
}

// Whether the implementation has a backward pass, asked on a plain problem in each dtype it declares (per-problem
// limits, such as cpu-flash's broadcast dBias, show as unsupported rows of `verify --pass backward`).
void backward_text(std::string& out, const Impl& impl) {
  std::string yes, no;
  for (DType t : impl.capabilities().dtypes) {
    Problem p;  // 1 x 1 x 64 x 64, head dim 64: inside every backend's shape limits
    p.Lq = p.Lk = p.Dqk = p.Dv = 64;
    p.want_lse = true;
    p.dtype = t;
    const Support s = impl.supports_backward(p);
    if (s.ok)
      append(yes, ",", to_string(t));
    else if (no.empty())
      no = std::string(to_string(t)) + ": " + s.reason;
  }
  const std::string line = yes.empty()
                               ? "not supported: " + no.substr(no.find(": ") + 2)
                               : "dq dk dv dbias in " + yes + (no.empty() ? "" : "; not " + no) + " (docs/backward.md)";
  appendf(out, "    backward: %s\n", line.c_str());
}

}  // namespace

std::string describe_implementation(const Impl& impl) {
  std::string out;
  const Support a = impl.available();
  appendf(out, "%-16s %-12s %s\n", impl.name().c_str(), a.ok ? "available" : "unavailable",
          a.ok ? impl.description().c_str() : a.reason.c_str());
  capabilities_text(out, impl.capabilities());
  declarations_text(out, impl.declarations());
  backward_text(out, impl);
  return out;
}

}  // namespace attncheck::verify
