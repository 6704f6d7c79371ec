// `attncheck list`: every implementation, available or not (with the reason), and its capabilities.
#include <cstdio>
#include <string>

#include "attncheck/features.hpp"
#include "attncheck/impl.hpp"
#include "attncheck/mods.hpp"
#include "command.hpp"
#include "attncheck/declarations.hpp"
#include "plugins.hpp"

namespace attncheck::cli {
namespace {

std::vector<std::string> g_plugins;

template <class Set>
std::string join(const Set& s) {
  std::string o;
  for (auto x : s) o += (o.empty() ? "" : ",") + std::string(to_string(x));
  return o.empty() ? "none" : o;
}

// Two lines under each implementation: what it supports, and what it does not (so a gap is never silent).
void print_capabilities(const Capabilities& c) {
  std::string yes, no;
  for (const Feature& f : problem_features())  // every boolean capability of the feature table
    if (f.flag) {
      const bool on = c.*f.flag;
      std::string& list = on ? yes : no;
      list += (list.empty() ? "" : " ") + std::string(f.name);
    }
  std::printf("    dtypes %s; layouts %s; alignments %s; fully-masked %s\n", join(c.dtypes).c_str(),
              join(c.layouts).c_str(), join(c.alignments).c_str(), join(c.fully_masked).c_str());
  std::printf("    supports: %s\n", yes.empty() ? "-" : yes.c_str());
  if (!no.empty()) std::printf("    not supported: %s\n", no.c_str());
  std::string mods, missing;  // the library modifications (mods.hpp), by name
  for (const ModEntry& m : modifications()) {
    std::string& list = c.mods.count(m.name) ? mods : missing;
    list += (list.empty() ? "" : " ") + std::string(m.name);
  }
  std::printf("    modifications: %s\n", mods.empty() ? "none" : mods.c_str());
  if (!mods.empty() && !missing.empty()) std::printf("    modifications not supported: %s\n", missing.c_str());
  if (c.max_head_dim > 0 || c.head_dim_multiple > 1)
    std::printf("    head dims: max %lld, multiple of %lld\n", static_cast<long long>(c.max_head_dim),
                static_cast<long long>(c.head_dim_multiple));
  if (!c.notes.empty()) std::printf("    notes: %s\n", c.notes.c_str());
}

// What the implementation declares (attncheck/declarations.hpp): policy, determinism, outputs, contracts.
void print_declarations(const Declarations& d) {
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
  std::printf("    declares: %s\n", line.c_str());
}

// Whether the implementation has a backward pass, asked on a plain problem in each dtype it declares (per-problem
// limits, such as cpu-flash's broadcast dBias, show as unsupported rows of `verify --pass backward`).
void print_backward(const Impl& impl) {
  std::string yes, no;
  for (DType t : impl.capabilities().dtypes) {
    Problem p;  // 1 x 1 x 64 x 64, head dim 64: inside every backend's shape limits
    p.Lq = p.Lk = p.Dqk = p.Dv = 64;
    p.want_lse = true;
    p.dtype = t;
    const Support s = impl.supports_backward(p);
    if (s.ok)
      yes += (yes.empty() ? "" : ",") + std::string(to_string(t));
    else if (no.empty())
      no = std::string(to_string(t)) + ": " + s.reason;
  }
  const std::string line = yes.empty()
                               ? "not supported: " + no.substr(no.find(": ") + 2)
                               : "dq dk dv dbias in " + yes + (no.empty() ? "" : "; not " + no) + " (docs/backward.md)";
  std::printf("    backward: %s\n", line.c_str());
}

int run_list() {
  load_plugins(g_plugins);
  for (const auto& impl : maybe_isolate(registry())) {
    const Support a = impl->available();
    std::printf("%-16s %-12s %s\n", impl->name().c_str(), a.ok ? "available" : "unavailable",
                a.ok ? impl->description().c_str() : a.reason.c_str());
    print_capabilities(impl->capabilities());
    print_declarations(impl->declarations());
    print_backward(*impl);
  }
  return 0;
}

const Register reg{{"list", "List implementations, their availability and capabilities", [](CLI::App& sub) {
                      add_plugin_option(sub, g_plugins);
                      return std::function<int()>(run_list);
                    }}};

}  // namespace
}  // namespace attncheck::cli
