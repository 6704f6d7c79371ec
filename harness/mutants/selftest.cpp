// The selftest loop: same seeded cases for every catalogue entry, every property, first failure per property kept.
#include "selftest.hpp"

#include <algorithm>
#include <chrono>

#include "attncheck/declarations.hpp"
#include "attncheck/features.hpp"
#include "attncheck/mods.hpp"
#include "properties.hpp"
#include "mutants.hpp"

namespace attncheck::mutants {

namespace {
// What both can do: sets intersected, flags and-ed, the tighter head-dim limits.
Capabilities intersect(const Capabilities& a, const Capabilities& b) {
  Capabilities c = a;
  auto keep = [](auto& set, const auto& other) { std::erase_if(set, [&](const auto& x) { return !other.count(x); }); };
  keep(c.dtypes, b.dtypes), keep(c.layouts, b.layouts), keep(c.alignments, b.alignments);
  keep(c.fully_masked, b.fully_masked), keep(c.mods, b.mods);
  for (const Feature& f : problem_features())  // every boolean capability of the table
    if (f.boolean()) f.declare(c, f.declared(a) && f.declared(b));
  c.max_head_dim = a.max_head_dim == 0   ? b.max_head_dim
                   : b.max_head_dim == 0 ? a.max_head_dim
                                         : std::min(a.max_head_dim, b.max_head_dim);
  c.head_dim_multiple = std::max(a.head_dim_multiple, b.head_dim_multiple);  // both are 1 or powers of two
  return c;
}

// A catalogue entry seen through the candidate's capabilities, so generated cases stay within what it supports,
// and judged at the candidate's declared precision contract: the question is whether the tolerances that judge
// this candidate are tight enough to kill the mutants.
class Restricted final : public Impl {
 public:
  Restricted(ImplPtr base, const Impl& candidate)
      : base_(std::move(base)), cand_(candidate), caps_(intersect(base_->capabilities(), candidate.capabilities())) {}
  std::string name() const override { return base_->name(); }
  std::string description() const override { return base_->description(); }
  Capabilities capabilities() const override { return caps_; }
  Declarations declarations() const override {
    Declarations d = base_->declarations();
    d.contracts = cand_.declarations().contracts;
    return d;
  }
  Support supports(const Problem& p) const override {
    if (Support s = check_capabilities(caps_, p); !s.ok) return s;
    if (Support s = cand_.supports(p); !s.ok) return s;
    return base_->supports(p);
  }
  void run(const Problem& p, const Inputs& in, Outputs& out) const override { base_->run(p, in, out); }

 private:
  ImplPtr base_;
  const Impl& cand_;
  Capabilities caps_;
};
}  // namespace

namespace {
// Every property on the seeded cases against one implementation; the first failure per property is kept.
EntryResult run_entry(const Impl& impl, const SelftestOptions& o) {
  EntryResult r;
  for (size_t pi = 0; pi < prop::properties().size(); ++pi) {
    const prop::Property& property = prop::properties()[pi];
    if (!o.properties.empty() &&
        std::find(o.properties.begin(), o.properties.end(), property.name) == o.properties.end())
      continue;
    for (int k = 0; k < o.cases_per_property; ++k) {
      prop::SeededChooser chooser(o.seed + 0x1000003ull * pi + static_cast<uint64_t>(k));
      prop::CaseSpec spec = prop::draw_spec(chooser);
      prop::Case built;
      const prop::Outcome out = prop::evaluate(property, impl, spec, o.budget, nullptr, &built);
      if (out.kind == prop::Outcome::unsupported) {
        ++r.unsupported;
        continue;
      }
      ++r.checks;
      if (out.kind == prop::Outcome::fail) {
        r.failures.push_back({property.name, built.name(), out.ratio, out.message});
        break;
      }
      r.max_pass_ratio = std::max(r.max_pass_ratio, out.ratio);
    }
  }
  return r;
}
}  // namespace

SelftestReport run_selftest(const SelftestOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SelftestReport rep;
  std::vector<Entry> entries = catalogue();
  if (o.candidate) entries.push_back({o.candidate, true, "the candidate under test (must pass every property)"});
  rep.entries = entries.size();
  for (size_t index = 0; index < entries.size(); ++index) {
    if (o.runs_entry && !o.runs_entry(index)) continue;
    const Entry& e = entries[index];
    const bool restrict = o.candidate && e.impl != o.candidate;
    EntryResult r = restrict ? run_entry(Restricted(e.impl, *o.candidate), o) : run_entry(*e.impl, o);
    r.name = e.impl->name(), r.bug = e.bug, r.correct = e.correct, r.entry = index;
    // A mutant that survives the candidate's cases but dies on the full space has its bug in a feature the
    // candidate does not support: out of scope for this candidate, reported as such, not counted.
    if (restrict && !e.correct && r.failures.empty() && !run_entry(*e.impl, o).failures.empty()) {
      r.out_of_scope = true;
      ++rep.out_of_scope;
    } else if (e.correct) {
      ++rep.correct;
      rep.false_alarms += !r.failures.empty();
    } else {
      ++rep.mutants;
      rep.killed += !r.failures.empty();
    }
    rep.details.push_back(std::move(r));
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace attncheck::mutants
