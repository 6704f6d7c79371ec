// Heatmap rendering: colour maps, panel layout (see HeatmapStyle in heatmap.hpp for the exact geometry) and the
// legend strip. Pure raster code; PNG encoding is in png_io.cpp.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "attncheck/heatmap.hpp"

namespace attncheck {

Image::Image(int w, int h, Rgb fill) : width(w), height(h) {
  if (w <= 0 || h <= 0)
    throw std::invalid_argument("Image: size must be positive, got " + std::to_string(w) + "x" + std::to_string(h));
  rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  fill_rect(0, 0, w, h, fill);
}

Rgb Image::at(int x, int y) const {
  if (x < 0 || y < 0 || x >= width || y >= height)
    throw std::out_of_range("Image::at(" + std::to_string(x) + ", " + std::to_string(y) + ") outside " +
                            std::to_string(width) + "x" + std::to_string(height));
  const size_t o = (static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3;
  return {rgb[o], rgb[o + 1], rgb[o + 2]};
}

void Image::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  const size_t o = (static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3;
  rgb[o] = c.r;
  rgb[o + 1] = c.g;
  rgb[o + 2] = c.b;
}

void Image::fill_rect(int x, int y, int w, int h, Rgb c) {
  for (int yy = y; yy < y + h; ++yy)
    for (int xx = x; xx < x + w; ++xx) set(xx, yy, c);
}

namespace {

constexpr Rgb kWhite{255, 255, 255}, kBlack{0, 0, 0}, kErrorDark{30, 60, 160}, kFrame{190, 190, 190};

// matplotlib's viridis sampled at t = 0, 1/8, ..., 1; linear in between.
constexpr Rgb kViridis[9] = {{68, 1, 84},    {71, 44, 122}, {59, 82, 139},  {44, 113, 142}, {33, 145, 140},
                             {39, 173, 129}, {94, 201, 98}, {170, 220, 50}, {253, 231, 37}};

Rgb lerp(Rgb a, Rgb b, double t) {
  auto mix = [t](uint8_t x, uint8_t y) { return static_cast<uint8_t>(std::lround(x + (y - x) * t)); };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

// Max over the block of cells a pixel covers (NaN only when every cell is NaN), so a downsampled error map never
// hides an element outside tolerance.
double pooled(const Panel& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  double m = std::nan("");
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const double v = p.values[static_cast<size_t>(r * p.cols + c)];
      if (!std::isnan(v) && (std::isnan(m) || v > m)) m = v;
    }
  return m;
}

// The legend bar stretches when its two texts would not fit side by side under it.
int legend_width(const Section& s, const HeatmapStyle& st) {
  return std::max(st.legend_width,
                  text_width(s.legend_lo, st.text_scale) + 3 * st.text_scale + text_width(s.legend_hi, st.text_scale));
}

struct Geometry {
  int pw = 0, ph = 0, box_w = 0, n = 0, m = 0, width = 0, height = 0;
};

Geometry geometry(const Section& s, const HeatmapStyle& st) {
  const int T = 7 * st.text_scale;
  Geometry g;
  const int64_t rows = s.panels.front().rows, cols = s.panels.front().cols;
  const int64_t c = std::clamp<int64_t>(st.max_panel_px / std::max(rows, cols), 1, st.max_cell_px);
  g.pw = static_cast<int>(std::min<int64_t>(cols * c, st.max_panel_px));
  g.ph = static_cast<int>(std::min<int64_t>(rows * c, st.max_panel_px));
  g.box_w = g.pw;
  for (const Panel& p : s.panels) g.box_w = std::max(g.box_w, text_width(p.label, st.text_scale));
  g.n = std::min(st.columns, static_cast<int>(s.panels.size()));
  g.m = (static_cast<int>(s.panels.size()) + g.n - 1) / g.n;
  g.width = st.margin + g.n * (g.box_w + st.margin);
  g.width = std::max(g.width, 2 * st.margin + text_width(s.title, st.text_scale));
  g.width = std::max(g.width, 2 * st.margin + legend_width(s, st));
  g.height = (T + st.margin) + g.m * (T + 3 + g.ph + st.margin) + (st.legend_px + 3 + T + st.margin);
  return g;
}

void draw_panel(Image& img, const Panel& p, const Section& s, int x0, int y0, int pw, int ph) {
  for (int y = 0; y < ph; ++y) {
    const int64_t r0 = y * p.rows / ph, r1 = std::max(r0 + 1, (y + 1) * p.rows / ph);
    for (int x = 0; x < pw; ++x) {
      const int64_t c0 = x * p.cols / pw, c1 = std::max(c0 + 1, (x + 1) * p.cols / pw);
      img.set(x0 + x, y0 + y, colour(s.map, pooled(p, r0, r1, c0, c1), s.vmin, s.vmax));
    }
  }
}

void draw_legend(Image& img, const Section& s, const HeatmapStyle& st, int x0, int y0) {
  const int w = legend_width(s, st);
  // error_ratio: the first three quarters run over [0, 1], the last quarter is the "outside tolerance" block.
  const int grad_w = s.map == ColorMap::error_ratio ? w * 3 / 4 : w;
  for (int x = 0; x < w; ++x) {
    Rgb c = kFailColour;
    if (x < grad_w) {
      const double t = grad_w > 1 ? static_cast<double>(x) / (grad_w - 1) : 0.0;
      c = s.map == ColorMap::viridis ? colour(s.map, s.vmin + t * (s.vmax - s.vmin), s.vmin, s.vmax)
                                     : colour(s.map, t, 0, 1);
    }
    img.fill_rect(x0 + x, y0, 1, st.legend_px, c);
  }
  const int ty = y0 + st.legend_px + 3;
  draw_text(img, x0, ty, s.legend_lo, kBlack, st.text_scale);
  draw_text(img, x0 + w - text_width(s.legend_hi, st.text_scale), ty, s.legend_hi, kBlack, st.text_scale);
}

}  // namespace

Rgb colour(ColorMap map, double v, double vmin, double vmax) {
  if (map == ColorMap::error_ratio) {
    if (!(v <= 1.0)) return kFailColour;  // > 1, +inf and NaN all mean "outside tolerance"
    return lerp(kWhite, kErrorDark, std::max(v, 0.0));
  }
  if (std::isnan(v)) return kNaNColour;
  double t = vmax > vmin ? (v - vmin) / (vmax - vmin) : 0.5;
  t = std::clamp(t, 0.0, 1.0) * 8;
  const int k = std::min(static_cast<int>(t), 7);
  return lerp(kViridis[k], kViridis[k + 1], t - k);
}

Image render_heatmaps(const std::vector<Section>& sections, const HeatmapStyle& st) {
  if (sections.empty()) throw std::invalid_argument("render_heatmaps: no sections");
  if (st.max_panel_px < 1 || st.max_cell_px < 1 || st.columns < 1 || st.margin < 0 || st.text_scale < 1 ||
      st.legend_px < 1 || st.legend_width < 2)
    throw std::invalid_argument("render_heatmaps: style values must be positive");
  std::vector<Geometry> geo;
  int width = 0, height = st.margin;
  for (const Section& s : sections) {
    if (s.panels.empty()) throw std::invalid_argument("render_heatmaps: section '" + s.title + "' has no panels");
    for (const Panel& p : s.panels) {
      if (p.rows < 1 || p.cols < 1 || p.values.size() != static_cast<size_t>(p.rows * p.cols))
        throw std::invalid_argument("render_heatmaps: panel '" + p.label + "' is " + std::to_string(p.rows) + "x" +
                                    std::to_string(p.cols) + " with " + std::to_string(p.values.size()) + " values");
      if (p.rows != s.panels.front().rows || p.cols != s.panels.front().cols)
        throw std::invalid_argument("render_heatmaps: panels of section '" + s.title + "' differ in shape");
    }
    geo.push_back(geometry(s, st));
    width = std::max(width, geo.back().width);
    height += geo.back().height;
  }
  Image img(width, height, kWhite);
  const int T = 7 * st.text_scale;
  int top = st.margin;
  for (size_t k = 0; k < sections.size(); ++k) {
    const Section& s = sections[k];
    const Geometry& g = geo[k];
    draw_text(img, st.margin, top, s.title, kBlack, st.text_scale);
    for (size_t i = 0; i < s.panels.size(); ++i) {
      const int col = static_cast<int>(i) % g.n, row = static_cast<int>(i) / g.n;
      const int x0 = st.margin + col * (g.box_w + st.margin);
      const int y0 = top + T + st.margin + row * (T + 3 + g.ph + st.margin);
      draw_text(img, x0, y0, s.panels[i].label, kBlack, st.text_scale);
      // A 1-pixel frame just outside the panel, so a white error map stays visible on the white page.
      img.fill_rect(x0 - 1, y0 + T + 2, g.pw + 2, g.ph + 2, kFrame);
      draw_panel(img, s.panels[i], s, x0, y0 + T + 3, g.pw, g.ph);
    }
    draw_legend(img, s, st, st.margin, top + T + st.margin + g.m * (T + 3 + g.ph + st.margin));
    top += g.height;
  }
  return img;
}

}  // namespace attncheck
