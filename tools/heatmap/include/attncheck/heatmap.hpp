// Heatmap PNGs for people who would rather look than read a 4-D array: panels of matrices (attention weights per
// (b, h); |error| / tolerance per (i, d)), each labelled, with a colour legend per section. Used by
// `attncheck inspect --png`; the rendering is independent of the CLI so it is tested on its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/problem.hpp"
#include "attncheck/tolerance.hpp"

namespace attncheck {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// An 8-bit RGB raster, row-major, 3 bytes per pixel.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Image() = default;
  Image(int w, int h, Rgb fill);
  Rgb at(int x, int y) const;
  void set(int x, int y, Rgb c);  // ignores pixels outside the image
  void fill_rect(int x, int y, int w, int h, Rgb c);
};

// PNG I/O through libpng; errors throw std::runtime_error naming the file.
void write_png(const std::string& path, const Image& img);
Image read_png(const std::string& path);  // any 8-bit PNG, converted to RGB (for tests and tools)

// 5x7 bitmap text (ASCII letters, digits, common punctuation; others draw as '?'), `scale` pixels per dot.
// Each character advances 6 * scale pixels; a line is 7 * scale pixels tall.
void draw_text(Image& img, int x, int y, const std::string& text, Rgb c, int scale = 1);
int text_width(const std::string& text, int scale = 1);

// Colour maps. viridis: t in [0,1] through matplotlib's viridis (dark purple -> yellow).
// error_ratio: r = |err| / tol; r in [0,1] runs white -> dark blue, r > 1 (outside tolerance, or non-finite) is red.
enum class ColorMap { viridis, error_ratio };
inline constexpr Rgb kNaNColour{160, 160, 160};  // NaN values in a viridis panel (e.g. fully-masked rows, policy nan)
inline constexpr Rgb kFailColour{220, 20, 20};
Rgb colour(ColorMap map, double value, double vmin, double vmax);

struct Panel {
  std::string label;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // rows x cols, row-major
};

struct Section {
  std::string title;
  ColorMap map = ColorMap::viridis;
  double vmin = 0, vmax = 1;         // viridis range; error_ratio always spans [0, 1] plus the red "fail" block
  std::string legend_lo, legend_hi;  // texts under the legend bar's ends
  std::vector<Panel> panels;         // all of the same shape
};

// Layout, in pixels (s = text_scale, T = 7 * s the text height):
//   cell c = clamp(max_panel_px / max(rows, cols), 1, max_cell_px); panel pw = min(cols*c, max_panel_px),
//   ph = min(rows*c, max_panel_px) (a longer dim shows the max over each pixel's block: a failure never hides);
//   grid columns n = min(columns, panels), rows m = ceil(panels / n);
//   box bw = max(pw, widest panel label); legend bar lw = max(legend_width, lo text + 3s + hi text);
//   section width  = max(margin + n * (bw + margin), 2 * margin + title width, 2 * margin + lw);
//   section height = (T + margin) title + m * (T + 3 + ph + margin) panels + (legend_px + 3 + T + margin) legend;
//   image = max section width by (margin + sum of section heights). The first panel's top-left cell is at
//   (margin, top + T + margin + T + 3), top being margin for the first section. Each panel has a 1-pixel grey
//   frame just outside it (inside the margin).
struct HeatmapStyle {
  int max_panel_px = 256;
  int max_cell_px = 16;
  int columns = 4;
  int margin = 10;
  int text_scale = 2;
  int legend_px = 12;  // legend bar height
  int legend_width = 200;
};

Image render_heatmaps(const std::vector<Section>& sections, const HeatmapStyle& style = {});

// The inspect picture of one case: reference attention weights (computed from the inputs by reference_attention)
// for up to `max_panels` (b, h) pairs; with `actual` outputs, a second section of |out error| / tolerance per
// (i, d) from the tolerance model (`model`, e.g. the fixture's). Throws std::invalid_argument on inputs that do
// not match the problem.
Image attention_heatmap(const Problem& p, const Inputs& in, const Outputs* actual = nullptr,
                        const ToleranceModel& model = {}, int max_panels = 16, const HeatmapStyle& style = {});

}  // namespace attncheck
