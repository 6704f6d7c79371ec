// Baseline comparison of two verify/compare reports (docs/regression.md): new failures, capability changes, and
// accuracy drift inside the tolerance per group (implementation x dtype x feature x tensor) with a confidence
// interval, so that a kernel that got measurably less accurate but still passes is caught.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace attncheck::baseline {

// One tensor of a judged row, as a report stores it. Schema 1 reports have no accuracy profile: rms_rel is then
// absent and the drift falls back to max_abs_err (noisier; docs/regression.md).
struct TensorStats {
  std::string tensor;
  bool has_accuracy = false;
  double rms_rel = 0, share = 0, bias_mag_ulp = 0, max_abs_err = 0;
  double unit = 0;  // unit roundoff of the dtype the ulps were counted in (0 when unknown)
};

struct Row {
  std::string fixture, impl, status, dtype;
  std::vector<std::string> features;  // empty in schema 1 reports
  std::vector<TensorStats> tensors;   // judged rows only
  bool judged() const { return status == "pass" || status == "fail"; }
  bool failed() const;  // verify's rule (status.hpp is_failure); a status no report spells counts as failed
};

struct Report {
  int schema_version = 1;  // a report without the field is schema 1
  std::string origin;      // path, for messages
  double tol_scale = 1;    // the run's --tol-scale: shares of the bound are comparable only at equal scales
  std::vector<Row> rows;
};

// Throws std::invalid_argument naming the file and the field when the text is not an attncheck JSON report, or
// when its schema_version is newer than this build reads.
Report parse_report(const std::string& json_text, const std::string& origin);
Report load_report(const std::string& path);
inline constexpr int kNewestSchema = 2;

struct Thresholds {
  double max_growth = 1.5;                            // a group regresses when its growth's whole interval is above
  std::map<std::string, double> max_growth_by_dtype;  // overrides per dtype ("fp16" -> 2.0)
  double max_bias_shift = 0.25;                       // ulps of the output dtype, likewise for the bias shift
  int min_cases = 6;                                  // groups with fewer cases are listed, never judged
  double confidence = 0.99;                           // two-sided level of the t intervals
  double growth_for(const std::string& dtype) const;
};

struct Interval {
  double estimate = 0, lo = 0, hi = 0;
};

// The per-case log ratio statistic: the geometric mean of error_now / error_before with its t interval.
struct GroupDrift {
  std::string impl, dtype, feature, tensor;  // feature "all" = every case of impl x dtype
  int n = 0;
  Interval growth;      // ratio (geometric mean), interval exp(mean +- t s / sqrt n)
  Interval bias_shift;  // ulps, mean of per-case bias_mag_ulp differences
  double bias_before = 0, bias_now = 0;
  double share_before = 0, share_now = 0;  // mean share of the bound used
  bool judged = false;                     // n >= min_cases
  bool growth_regression = false, bias_regression = false, improvement = false;
  std::string name() const;  // "cpu fp16 causal out"
};

// A case whose status changed between the reports.
struct CaseChange {
  std::string impl, fixture, before, now;  // statuses; "missing" when absent
  std::string kind;  // new-failure, capability-loss (regressions); still-failing, capability-gain, fixed (notes)
  bool regression() const { return kind == "new-failure" || kind == "capability-loss"; }
};

struct CaseRatio {
  std::string impl, fixture, tensor;
  double ratio = 1;
};

struct Comparison {
  std::vector<CaseChange> changes;
  std::vector<GroupDrift> groups;
  std::vector<CaseRatio> largest;  // the largest per-case error ratios (at most 10), for the summary
  std::vector<std::string> notes;  // implementations only in one report, schema fallbacks
  int regressions() const;         // new failures + capability losses + regressed groups
};

// `now_fixtures_only`: compare only the fixtures present in `now` (verify --baseline with a filter or a shard);
// implementations absent from `now` are never compared (a note says so).
Comparison compare_reports(const Report& before, const Report& now, const Thresholds& t,
                           bool now_fixtures_only = false);

// The two-sided Student t quantile: t such that P(|T| <= t) = level for df degrees of freedom.
double t_quantile(double level, int df);
// mean +- t s / sqrt(n) of xs (n >= 2); {mean, mean, mean} for n == 1.
Interval mean_interval(const std::vector<double>& xs, double level);

// Text for the terminal, Markdown for pull requests, JUnit XML (one testcase per judged group and per case change).
std::vector<std::string> text_lines(const Comparison& c, const Thresholds& t);
std::string markdown(const Comparison& c, const Thresholds& t, const std::string& title);
std::string junit(const Comparison& c, const Thresholds& t);

}  // namespace attncheck::baseline
