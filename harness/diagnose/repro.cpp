// write_repro (repro.hpp).
#include "repro.hpp"

#include <filesystem>

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

}  // namespace attncheck::diagnose
