// `attncheck inspect FIXTURE.h5 [--actual CANDIDATE.h5]`: a human summary of a fixture (problem, shapes, features,
// value statistics, provenance, tolerance) and, with a candidate, its verdict and worst elements, so nobody has
// to read a 4-D array to see what a case is or where an implementation goes wrong. A failing candidate also gets
// its diagnosis from the outputs alone (anatomy and likely causes, docs/diagnosis.md; no probes: nothing is re-run).
// The summary and the candidate's verdict are harness/verify/inspect.hpp; this file parses the options and draws
// the heatmap (tools/heatmap).
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "attncheck/fixture.hpp"
#include "attncheck/heatmap.hpp"
#include "command.hpp"
#include "inspect.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::string fixture, actual, png;
  int top = 5;
  int max_panels = 16;
};
Options g;

// The heatmap picture (tools/heatmap): reference weights per (b, h) and, with a candidate, |out error| / tolerance.
void write_heatmap(const Fixture& f) {
  std::optional<Outputs> cand;
  if (!g.actual.empty()) cand = read_candidate(g.actual, f.problem);
  const Image img = attention_heatmap(f.problem, f.inputs, cand ? &*cand : nullptr, f.tolerance, g.max_panels);
  write_png(g.png, img);
  std::printf("png         %s (%dx%d)\n", g.png.c_str(), img.width, img.height);
}

int run_inspect() {
  if (g.max_panels < 1) throw std::invalid_argument("--max-panels must be >= 1, got " + std::to_string(g.max_panels));
  const Fixture f = read_fixture(g.fixture);
  verify::print_fixture(stdout, g.fixture, f);
  if (!g.png.empty()) write_heatmap(f);
  // With a candidate, the exit code is its verdict (0 pass, 1 fail), like compare.
  if (!g.actual.empty()) return verify::print_candidate(stdout, f, g.actual, g.top) ? 0 : 1;
  return 0;
}

const Register reg{
    {"inspect", "Summarise a fixture (and a candidate's errors)", [](CLI::App& sub) {
       sub.add_option("fixture", g.fixture, "Golden fixture (.h5)")->required();
       sub.add_option("--actual", g.actual, "Candidate file with /actual/out [, lse, weights]");
       sub.add_option("--top", g.top, "How many worst elements to list")->capture_default_str();
       sub.add_option("--png", g.png,
                      "Write a heatmap PNG: reference attention weights per (b,h) and, with --actual, "
                      "|out error| / tolerance per (i,d)");
       sub.add_option("--max-panels", g.max_panels, "At most this many (b,h) panels in the PNG")->capture_default_str();
       return std::function<int()>(run_inspect);
     }}};

}  // namespace
}  // namespace attncheck::cli
