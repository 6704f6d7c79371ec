// Baseline comparison options and outputs (baseline_cli.hpp).
#include "baseline_cli.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "attncheck/durable_file.hpp"
#include "attncheck/problem.hpp"

namespace attncheck::cli {

void add_baseline_options(CLI::App& sub, BaselineOptions& o) {
  sub.add_option("--max-growth", o.max_growth,
                 "Largest accepted error growth of a group (ratio, default 1.5), or DTYPE=X for one dtype; repeatable");
  sub.add_option("--max-bias-shift", o.max_bias_shift, "Largest accepted bias shift of a group, in ulps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub.add_option("--min-cases", o.min_cases, "Groups with fewer cases are listed, not judged")
      ->capture_default_str()
      ->check(CLI::Range(2, 1000000));
  sub.add_option("--confidence", o.confidence, "Two-sided level of the intervals")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 0.999999));
  sub.add_option("--summary", o.summary, "Write the comparison as Markdown (also appended to $GITHUB_STEP_SUMMARY)");
  sub.add_option("--junit", o.junit, "Write the comparison's regressions as JUnit XML");
}

baseline::Thresholds thresholds(const BaselineOptions& o) {
  baseline::Thresholds t;
  t.max_bias_shift = o.max_bias_shift, t.min_cases = o.min_cases, t.confidence = o.confidence;
  for (const std::string& s : o.max_growth) {
    const auto eq = s.find('=');
    const std::string dtype = eq == std::string::npos ? "" : s.substr(0, eq), value = s.substr(eq + 1);
    double x = 0;
    size_t used = 0;
    try {
      x = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || !(x >= 1))
      throw std::invalid_argument("--max-growth: expected a ratio >= 1 or DTYPE=RATIO (e.g. 1.5 or fp16=2), got '" + s +
                                  "'");
    if (dtype.empty()) {
      t.max_growth = x;
      continue;
    }
    try {
      (void)dtype_from_string(dtype);
    } catch (const std::exception&) {
      throw std::invalid_argument("--max-growth: unknown dtype '" + dtype + "' in '" + s + "'");
    }
    t.max_growth_by_dtype[to_string(dtype_from_string(dtype))] = x;
  }
  return t;
}

void check_baseline_outputs(const BaselineOptions& o) {
  namespace fs = std::filesystem;
  for (const auto& [flag, path] : {std::pair{"--summary", o.summary}, std::pair{"--junit", o.junit}}) {
    if (path.empty()) continue;
    const fs::path dir = fs::path(path).parent_path();
    if (!dir.empty() && !fs::is_directory(dir))
      throw std::invalid_argument(std::string(flag) + ": cannot write '" + path + "': directory '" + dir.string() +
                                  "' does not exist");
  }
}

int report_comparison(const baseline::Comparison& c, const BaselineOptions& o, const std::string& title) {
  const baseline::Thresholds t = thresholds(o);
  for (const std::string& l : baseline::text_lines(c, t)) std::printf("%s\n", l.c_str());
  const std::string md = baseline::markdown(c, t, title);
  if (!o.summary.empty()) write_file_durably(o.summary, md);
  if (const char* gh = std::getenv("GITHUB_STEP_SUMMARY"); gh && *gh) {
    std::ofstream f(gh, std::ios::app);  // GitHub Actions collects every step's appends into the job's summary
    if (!f || !(f << md << "\n"))
      std::fprintf(stderr, "attncheck: warning: cannot append to $GITHUB_STEP_SUMMARY '%s'\n", gh);
  }
  if (!o.junit.empty()) write_file_durably(o.junit, baseline::junit(c, t));
  return c.regressions();
}

}  // namespace attncheck::cli
