// validate_on_mutants (validate.hpp): the mutants' golden failures, diagnosed, tallied per mutant.
#include "validate.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "attncheck/fixture.hpp"
#include "diagnosis.hpp"
#include "attncheck/mods.hpp"
#include "mutants.hpp"

namespace attncheck::diagnose {

const std::map<std::string, std::string>& injected_tags() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> t = {{"wrong-scale", "scale"},
                                            {"no-max-subtraction", "no-max-subtraction"},
                                            {"causal-off-by-one", "causal-diagonal"},
                                            {"causal-wrong-alignment", "causal-alignment"},
                                            {"mask-after-softmax", "mask-after-softmax"},
                                            {"softmax-wrong-axis", "softmax-axis"},
                                            {"gqa-tiled", "gqa-mapping"},
                                            {"partial-tile-dropped", "skipped-keys"},
                                            {"partial-tile-zero", "tile-tail"},
                                            {"fp16-accumulation", "low-precision-accumulation"},
                                            {"finite-fill-uniform", "mask-fill"},
                                            {"dropout-no-rescale", "dropout-scale"},
                                            {"lse-off-by-scale", "lse-unscaled-max"},
                                            {"masked-values-read", "nan-leak"},
                                            {"mask-before-scale", "negative-scale-mask"}};
    for (const ModEntry& e : logit_modifications())  // the logit stage applied late: its order tag
      t[std::string(e.name) + "-after-mask"] = logit_order_tag(e);
    return t;
  }();
  return m;
}

std::string ValidationRow::majority() const {
  std::string best = "-";
  int n = 0;
  for (const auto& [tag, k] : top_tags)
    if (k > n || (k == n && tag == injected)) best = tag, n = k;
  return best;
}

std::vector<ValidationRow> validate_on_mutants(const std::string& fixtures_dir, int per_mutant, int max_reruns,
                                               bool on_modifications) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(fixtures_dir))
    if (e.is_regular_file() && e.path().extension() == ".h5") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Fixture> fixtures;
  for (const auto& f : files) {
    Fixture x = read_fixture(f);
    if (!on_modifications || !used_modifications(x.problem).empty()) fixtures.push_back(std::move(x));
  }
  std::vector<ValidationRow> rows;
  for (const mutants::Entry& m : mutants::catalogue()) {
    // The modification mutants have no single cause tag (a score modification's sign is `alibi-sign` on ALiBi and
    // has no tag of its own on T5 or an expression): the power faults validate those tags one entry at a time.
    if (m.correct || !injected_tags().count(m.impl->name())) continue;
    const ImplPtr impl = on_modifications ? mutants::declaring_library(m) : m.impl;
    ValidationRow row{m.impl->name(),
                      injected_tags().count(m.impl->name()) ? injected_tags().at(m.impl->name()) : "?",
                      0,
                      0,
                      {},
                      {},
                      {}};
    for (const Fixture& f : fixtures) {
      if (row.cases >= per_mutant) break;
      Outputs out;
      if (!run_impl(*impl, f.problem, f.inputs, out).ok) continue;
      if (judge(f.problem, f.expected, out, f.tolerance).pass) continue;
      prop::Case c{{}, f.problem, f.inputs};
      Options o;
      o.rerun = impl.get(), o.max_reruns = max_reruns, o.tolerance = f.tolerance;
      const Diagnosis d = diagnose(c, f.expected, out, o);
      ++row.cases;
      row.hits += d.top() == row.injected;
      if (d.top() != row.injected) {
        std::string why = f.name;
        for (const std::string& l : d.text()) why += "\n    " + l;
        row.misses.push_back(why);
      }
      ++row.top_tags[d.top()];
      row.reruns.push_back(d.reruns);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string validation_table(const std::vector<ValidationRow>& rows) {
  std::ostringstream o;
  o << "| mutant / fault | injected cause | failing cases diagnosed | top tag = injected | top tags (count) |\n";
  o << "|---|---|---|---|---|\n";
  int cases = 0, hits = 0;
  std::vector<int> reruns;
  for (const ValidationRow& r : rows) {
    std::string tags;
    for (const auto& [t, n] : r.top_tags) tags += (tags.empty() ? "" : ", ") + t + " (" + std::to_string(n) + ")";
    o << "| " << r.mutant << " | " << r.injected << " | " << r.cases << " | " << r.hits << " | " << tags << " |\n";
    cases += r.cases, hits += r.hits;
    reruns.insert(reruns.end(), r.reruns.begin(), r.reruns.end());
  }
  std::sort(reruns.begin(), reruns.end());
  o << "\nhit rate: " << hits << " of " << cases << " diagnosed failures";
  if (cases) o << " (" << (100 * hits + cases / 2) / cases << "%)";
  o << "; median re-runs per diagnosis: " << (reruns.empty() ? 0 : reruns[reruns.size() / 2]) << "\n";
  return o.str();
}

}  // namespace attncheck::diagnose
