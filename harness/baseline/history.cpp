// The history of a series of reports (history.hpp): per group and report, the mean share of the bound, failures and
// capability changes; as CSV and as a line chart drawn with the heat-map module's raster and font.
#include "history.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace attncheck::baseline {

History history(const std::vector<Report>& reports, const std::vector<std::string>& labels, const std::string& tensor) {
  if (reports.size() < 2)
    throw std::invalid_argument("history: needs at least 2 reports, got " + std::to_string(reports.size()));
  if (labels.size() != reports.size())
    throw std::invalid_argument("--labels: " + std::to_string(labels.size()) + " labels for " +
                                std::to_string(reports.size()) + " reports");
  History h;
  h.labels = labels;
  std::set<std::string> names;
  for (const Report& r : reports)
    for (const Row& row : r.rows) names.insert(row.impl + " " + row.dtype + " " + tensor);
  h.groups.assign(names.begin(), names.end());
  std::map<std::string, size_t> index;
  for (size_t g = 0; g < h.groups.size(); ++g) index[h.groups[g]] = g;
  h.points.assign(h.groups.size(), std::vector<HistoryPoint>(reports.size()));
  std::map<std::pair<std::string, std::string>, bool> judged_before;  // (impl, fixture) -> judged in the last report
  for (size_t k = 0; k < reports.size(); ++k) {
    std::map<std::pair<std::string, std::string>, bool> judged_now;
    for (const Row& row : reports[k].rows) {
      HistoryPoint& p = h.points[index[row.impl + " " + row.dtype + " " + tensor]][k];
      p.present = true;
      judged_now[{row.impl, row.fixture}] = row.judged();
      if (row.failed()) ++p.failures;
      if (row.status != "pass") continue;
      for (const TensorStats& t : row.tensors)
        if (t.tensor == tensor && t.has_accuracy) p.share += t.share, ++p.cases;
    }
    for (auto& g : h.points)
      if (g[k].cases > 0) g[k].share /= g[k].cases;
    if (k > 0) {
      auto dtype_of = [&](const std::string& impl, const std::string& fixture) {
        for (const Report* r : {&reports[k], &reports[k - 1]})
          for (const Row& row : r->rows)
            if (row.impl == impl && row.fixture == fixture) return row.dtype;
        return std::string();
      };
      for (const auto& [key, was] : judged_before) {
        const auto it = judged_now.find(key);
        const bool is = it != judged_now.end() && it->second;
        if (was != is) {
          HistoryPoint& p = h.points[index[key.first + " " + dtype_of(key.first, key.second) + " " + tensor]][k];
          (was ? p.lost : p.gained)++;
        }
      }
      std::set<std::string> impls_before;  // a case of an implementation seen for the first time is no gain
      for (const auto& [key, was] : judged_before) impls_before.insert(key.first);
      for (const auto& [key, is] : judged_now)
        if (is && !judged_before.count(key) && impls_before.count(key.first))
          h.points[index[key.first + " " + dtype_of(key.first, key.second) + " " + tensor]][k].gained++;
    }
    judged_before = std::move(judged_now);
  }
  return h;
}

std::string history_csv(const History& h) {
  std::ostringstream o;
  o << "label,group,share_of_bound,cases,failures,capability_lost,capability_gained\n";
  for (size_t k = 0; k < h.labels.size(); ++k)
    for (size_t g = 0; g < h.groups.size(); ++g) {
      const HistoryPoint& p = h.points[g][k];
      if (!p.present) continue;
      char share[32];
      std::snprintf(share, sizeof share, "%.6g", p.share);
      o << h.labels[k] << ',' << h.groups[g] << ',' << (p.cases ? share : "") << ',' << p.cases << ',' << p.failures
        << ',' << p.lost << ',' << p.gained << '\n';
    }
  return o.str();
}

Rgb palette(size_t g) {
  static const Rgb colours[] = {{31, 119, 180}, {44, 160, 44},   {148, 103, 189}, {140, 86, 75}, {23, 190, 207},
                                {188, 189, 34}, {227, 119, 194}, {127, 127, 127}, {0, 0, 128},   {128, 0, 128}};
  return colours[g % (sizeof colours / sizeof colours[0])];
}

namespace {
void line(Image& img, int x0, int y0, int x1, int y1, Rgb c, bool dashed = false) {
  const int n = std::max(std::abs(x1 - x0), std::abs(y1 - y0));
  for (int s = 0; s <= n; ++s) {
    if (dashed && (s / 4) % 2) continue;
    const int x = n ? x0 + (x1 - x0) * s / n : x0, y = n ? y0 + (y1 - y0) * s / n : y0;
    img.fill_rect(x, y, 2, 2, c);
  }
}
void frame(Image& img, int cx, int cy, int half, Rgb c) {
  img.fill_rect(cx - half, cy - half, 2 * half + 1, 1, c);
  img.fill_rect(cx - half, cy + half, 2 * half + 1, 1, c);
  img.fill_rect(cx - half, cy - half, 1, 2 * half + 1, c);
  img.fill_rect(cx + half, cy - half, 1, 2 * half + 1, c);
}
}  // namespace

Image render_history(const History& h) {
  using L = ChartLayout;
  const int n = static_cast<int>(h.labels.size()), row_h = 20;
  const int height = L::bottom + 40 + static_cast<int>(h.groups.size() + 1) * row_h + 10;
  Image img(L::width, height, {255, 255, 255});
  const Rgb grey{200, 200, 200}, dark{60, 60, 60}, red{220, 20, 20}, orange{240, 140, 0}, green{30, 160, 60};
  draw_text(img, L::left, 12, "share of the bound used (mean over passing cases)", dark, 2);
  for (double s : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const int y = L::y_of(s);
    line(img, L::left, y, L::right, y, s == 1.0 ? Rgb{150, 150, 150} : Rgb{235, 235, 235}, s == 1.0);
    char t[16];
    std::snprintf(t, sizeof t, "%.2f", s);
    draw_text(img, L::left - text_width(t, 2) - 6, y - 7, t, dark, 2);
  }
  img.fill_rect(L::left, L::top, 1, L::bottom - L::top, grey);
  img.fill_rect(L::left, L::bottom, L::right - L::left, 1, grey);
  for (int k = 0; k < n; ++k) {
    const std::string lab = h.labels[static_cast<size_t>(k)].substr(0, 14);
    draw_text(img, std::clamp(L::x_of(k, n) - text_width(lab, 1) / 2, 0, L::width - text_width(lab, 1)), L::bottom + 8,
              lab, dark, 1);
  }
  for (size_t g = 0; g < h.groups.size(); ++g) {
    const Rgb c = palette(g);
    const auto& pts = h.points[g];
    for (int k = 0; k + 1 < n; ++k)
      if (pts[static_cast<size_t>(k)].cases && pts[static_cast<size_t>(k + 1)].cases)
        line(img, L::x_of(k, n), L::y_of(pts[static_cast<size_t>(k)].share), L::x_of(k + 1, n),
             L::y_of(pts[static_cast<size_t>(k + 1)].share), c);
    for (int k = 0; k < n; ++k) {
      const HistoryPoint& p = pts[static_cast<size_t>(k)];
      if (!p.present) continue;
      const int x = L::x_of(k, n), y = L::y_of(p.cases ? p.share : 0);
      if (p.cases) img.fill_rect(x - 3, y - 3, 7, 7, c);
      if (p.failures) frame(img, x, y, 5, red);
      if (p.lost) img.fill_rect(x - 3, y - 13, 7, 7, orange);
      if (p.gained) img.fill_rect(x - 3, y + 10, 7, 7, green);
    }
    const int ly = L::bottom + 30 + static_cast<int>(g) * row_h;
    img.fill_rect(L::left, ly, 14, 14, c);
    draw_text(img, L::left + 22, ly, h.groups[g], dark, 2);
  }
  const int my = L::bottom + 30 + static_cast<int>(h.groups.size()) * row_h;
  frame(img, L::left + 7, my + 7, 5, red);
  img.fill_rect(L::left + 250, my + 4, 7, 7, orange);
  img.fill_rect(L::left + 470, my + 4, 7, 7, green);
  draw_text(img, L::left + 22, my + 1, "failures", dark, 2);
  draw_text(img, L::left + 262, my + 1, "capability lost", dark, 2);
  draw_text(img, L::left + 482, my + 1, "capability gained", dark, 2);
  return img;
}

}  // namespace attncheck::baseline
