// write_repro (repro.hpp).
#include "repro.hpp"

#include <filesystem>
#include <optional>

#include "attncheck/error_scales.hpp"

#include "reduce.hpp"

namespace attncheck::diagnose {

Repro write_repro(const Fixture& original, const Problem& judged, const Impl& impl, const Diagnosis& d,
                  const Options& o, const std::string& dir) {
  const Reduction r = reduce(prop::Case{{}, judged, original.inputs}, impl, d.top(), o);
  Repro out{judged.short_name(), r.reduced.p.short_name(), r.diagnosis.top(), r.reruns, ""};
  Provenance prov;
  prov.attncheck_version = attncheck_version();
  prov.seed = original.provenance.seed;
  prov.distribution = original.provenance.distribution;
  prov.command = "attncheck verify --impl " + impl.name() + " --diagnose --repro: the smallest case found (" +
                 std::to_string(r.reruns) + " runs) on which " + impl.name() + " fails with diagnosis " + out.top +
                 " (original diagnosis " + d.top() + "), reduced from case " + original.name + " (" + out.before + ")";
  const std::string name = r.reduced.p.short_name() + "/repro-" + out.top;
  const Fixture f = make_fixture(name, r.reduced.p, r.reduced.in, prov, original.tolerance);
  const std::filesystem::path path =
      std::filesystem::path(dir) / fixture_file_name("repro/" + impl.name() + "/" + original.name);
  write_fixture(path.string(), f);
  out.path = path.string();
  return out;
}

Repro write_invariance_repro(const Fixture& original, const Problem& judged, const Impl& impl,
                             const invariance::Check& failed, const invariance::Options& o,
                             const ToleranceModel& tolerance, const std::string& dir) {
  invariance::Options one = o;  // only the failed check
  one.rerun = failed.kind == invariance::Kind::rerun, one.batch = failed.kind == invariance::Kind::batch;
  one.schedule = failed.kind == invariance::Kind::schedule, one.layout = failed.kind == invariance::Kind::layout;
  auto fails = [&](const prop::Case& d) {
    Outputs first;
    if (!impl.supports(d.p).ok || !run_impl(impl, d.p, d.in, first).ok) return false;
    std::optional<ExpectedAttention> ref;  // computed only when a variant is judged within tolerance
    one.within_tolerance = [&](const Outputs& x) {
      if (!ref) ref = expected_attention(d.p, d.in);
      const Verdict v = judge(d.p, *ref, x, tolerance);
      return v.pass ? std::string() : v.worst().describe();
    };
    for (const invariance::Check& c : invariance::check_forward(impl, d.p, d.in, first, one))
      if (c.kind == failed.kind) return c.result == invariance::Check::violated;
    return false;
  };
  const Reduction r = reduce_while(prop::Case{{}, judged, original.inputs}, fails);
  const std::string tag = invariance::tag(failed.kind);
  Repro out{judged.short_name(), r.reduced.p.short_name(), tag, r.reruns, ""};
  Provenance prov;
  prov.attncheck_version = attncheck_version();
  prov.seed = original.provenance.seed;
  prov.distribution = original.provenance.distribution;
  prov.command = "attncheck verify --impl " + impl.name() + " --invariance " + invariance::name(failed.kind) +
                 " --diagnose --repro: the smallest case found (" + std::to_string(r.reruns) + " trials) on which " +
                 impl.name() + " is " + tag + ", reduced from case " + original.name + " (" + out.before + ")";
  const std::string name = r.reduced.p.short_name() + "/repro-" + tag;
  const Fixture f = make_fixture(name, r.reduced.p, r.reduced.in, prov, original.tolerance);
  const std::filesystem::path path =
      std::filesystem::path(dir) /
      fixture_file_name("repro/" + impl.name() + "/" + invariance::name(failed.kind) + "/" + original.name);
  write_fixture(path.string(), f);
  out.path = path.string();
  return out;
}

}  // namespace attncheck::diagnose
