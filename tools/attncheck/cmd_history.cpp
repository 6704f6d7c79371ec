// `attncheck history R1.json R2.json R3.json ... --png trend.png --csv trend.csv`: a series of reports, oldest
// first, as the share of the bound used per group (implementation x dtype) over time, with failures and capability
// changes marked (docs/regression.md#history). Exit 0, or 2 on bad input.
#include <cstdio>
#include <filesystem>

#include "attncheck/durable_file.hpp"
#include "command.hpp"
#include "history.hpp"

namespace attncheck::cli {
namespace {

struct Options {
  std::vector<std::string> reports, labels;
  std::string png, csv, tensor = "out";
};
Options g;

int run() {
  if (g.png.empty() && g.csv.empty()) throw std::invalid_argument("history: give --png FILE and/or --csv FILE");
  if (!g.png.empty() && std::filesystem::path(g.png).extension() != ".png")
    throw std::invalid_argument("--png: '" + g.png + "' must end in .png");
  std::vector<baseline::Report> reports;
  std::vector<std::string> labels = g.labels;
  for (const auto& r : g.reports) {
    reports.push_back(baseline::load_report(r));
    if (g.labels.empty()) labels.push_back(std::filesystem::path(r).stem().string());
  }
  const baseline::History h = baseline::history(reports, labels, g.tensor);
  if (!g.csv.empty()) write_file_durably(g.csv, baseline::history_csv(h));
  if (!g.png.empty()) write_png(g.png, baseline::render_history(h));
  std::printf("%zu reports, %zu groups%s%s%s%s\n", reports.size(), h.groups.size(), g.png.empty() ? "" : ": ",
              g.png.c_str(), g.csv.empty() ? "" : " ", g.csv.c_str());
  return 0;
}

const Register reg{
    {"history", "Draw a series of reports as the share of the bound used per group over time (PNG, CSV)",
     [](CLI::App& sub) {
       sub.add_option("reports", g.reports, "Reports (.json), oldest first")->required()->expected(2, -1);
       sub.add_option("--labels", g.labels, "One label per report (commit, date); default: file names")->delimiter(',');
       sub.add_option("--png", g.png, "Write the chart");
       sub.add_option("--csv", g.csv, "Write the same data as CSV");
       sub.add_option("--tensor", g.tensor, "Which tensor's share (out, lse, weights)")->capture_default_str();
       return std::function<int()>(run);
     }}};

}  // namespace
}  // namespace attncheck::cli
