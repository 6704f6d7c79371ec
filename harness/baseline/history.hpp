// A series of reports (oldest first) as one trend per group (implementation x dtype, one tensor): the mean share of
// the bound the passing cases use, with each report's failures and capability changes against the report before.
// `attncheck history` writes it as CSV and as a PNG line chart (docs/regression.md#history).
#pragma once

#include <string>
#include <vector>

#include "attncheck/heatmap.hpp"
#include "baseline.hpp"

namespace attncheck::baseline {

struct HistoryPoint {
  bool present = false;      // the group has rows in this report
  double share = 0;          // mean share_of_bound of its pass cases (0 when none passed)
  int cases = 0;             // pass cases averaged
  int failures = 0;          // rows that failed (fail or a failed run)
  int lost = 0, gained = 0;  // cases judged in the previous report and not now, and the reverse
};

struct History {
  std::vector<std::string> labels;                // one per report
  std::vector<std::string> groups;                // "cpu fp16 out", sorted
  std::vector<std::vector<HistoryPoint>> points;  // [group][report]
};

// Throws std::invalid_argument when labels and reports differ in number or fewer than 2 reports are given.
History history(const std::vector<Report>& reports, const std::vector<std::string>& labels, const std::string& tensor);
// label,group,share_of_bound,cases,failures,capability_lost,capability_gained (one row per group and report present)
std::string history_csv(const History& h);

// The chart's geometry, so that a test can find what was drawn: the plot area's corners, report k at
// x = left + k * (right - left) / max(1, reports - 1), share s at y = bottom - min(s, kYMax) / kYMax * (bottom - top).
struct ChartLayout {
  static constexpr int width = 900, left = 70, right = 860, top = 40, bottom = 340;
  static constexpr double kYMax = 1.25;  // shares above 1 (failures) are drawn at the top of the range
  static int x_of(int k, int reports) { return left + k * (right - left) / (reports > 1 ? reports - 1 : 1); }
  static int y_of(double s) {
    return bottom - static_cast<int>((s < kYMax ? (s > 0 ? s : 0) : kYMax) / kYMax * (bottom - top) + 0.5);
  }
};
// Each group's line in its palette colour (group g: palette(g)), a filled 7x7 square at each point; a report with
// failures in the group gets a red (220,20,20) 11x11 frame around the point, a capability loss an orange
// (240,140,0) 7x7 square 10 pixels above it, a gain a green (30,160,60) one. A dashed grey line marks share 1.
// Under the plot: the report labels, one legend row per group (swatch and name), and a row explaining the marks.
Image render_history(const History& h);
Rgb palette(size_t g);

}  // namespace attncheck::baseline
