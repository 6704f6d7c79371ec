// The heatmap PNG library on its own: colour maps at their documented end points, the documented layout
// (image size, where the first cell lands), a PNG that libpng decodes back to the same pixels, max-pooling that
// keeps a lone failure visible, and the inspect picture of a case with one-hot attention and a perturbed output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "attncheck/heatmap.hpp"

using namespace attncheck;

namespace {
// Colours written out from the documentation (matplotlib viridis ends; white -> (30,60,160); red fail).
constexpr Rgb kViridisLo{68, 1, 84}, kViridisHi{253, 231, 37}, kGrey{160, 160, 160}, kWhite{255, 255, 255},
    kErrOne{30, 60, 160}, kRed{220, 20, 20}, kFrame{190, 190, 190};

std::string temp_png(const char* name) { return ::testing::TempDir() + name; }
}  // namespace

namespace attncheck {
static std::ostream& operator<<(std::ostream& o, Rgb c) {
  return o << "(" << +c.r << "," << +c.g << "," << +c.b << ")";
}
}  // namespace attncheck

TEST(Heatmap, ColourMapEnds) {
  EXPECT_EQ(colour(ColorMap::viridis, 0.0, 0, 1), kViridisLo);
  EXPECT_EQ(colour(ColorMap::viridis, 1.0, 0, 1), kViridisHi);
  EXPECT_EQ(colour(ColorMap::viridis, 7.0, 0, 1), kViridisHi) << "clamped";
  EXPECT_EQ(colour(ColorMap::viridis, std::nan(""), 0, 1), kGrey);
  EXPECT_EQ(colour(ColorMap::error_ratio, 0.0, 0, 1), kWhite);
  EXPECT_EQ(colour(ColorMap::error_ratio, 1.0, 0, 1), kErrOne);
  EXPECT_EQ(colour(ColorMap::error_ratio, 1.01, 0, 1), kRed);
  EXPECT_EQ(colour(ColorMap::error_ratio, INFINITY, 0, 1), kRed);
  EXPECT_EQ(colour(ColorMap::error_ratio, std::nan(""), 0, 1), kRed);
}

TEST(Heatmap, LayoutAndPngRoundTrip) {
  // One 4x6 panel: cell = clamp(64 / 6, 1, 8) = 8 -> panel 48x32. Width: the legend wins, 10+100+10 = 120.
  // Height: 10 + (7+10) title + (7+3+32+10) panel row + (12+3+7+10) legend = 111.
  Panel p{"p", 4, 6, std::vector<double>(24, 0.0)};
  p.values[0] = 1.0;                   // (0,0): top of the range
  p.values[3 * 6 + 5] = std::nan("");  // (3,5)
  Section s{"t", ColorMap::viridis, 0, 1, "0", "1", {p}};
  HeatmapStyle st;
  st.max_panel_px = 64;
  st.max_cell_px = 8;
  st.columns = 4;
  st.margin = 10;
  st.text_scale = 1;
  st.legend_px = 12;
  st.legend_width = 100;
  const std::string path = temp_png("layout.png");
  write_png(path, render_heatmaps({s}, st));

  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG") << "PNG signature";
  const Image img = read_png(path);
  ASSERT_EQ(img.width, 120);
  ASSERT_EQ(img.height, 111);
  // First cell at (margin, margin + T + margin + T + 3) = (10, 37), 8x8 pixels.
  EXPECT_EQ(img.at(10, 37), kViridisHi);
  EXPECT_EQ(img.at(17, 44), kViridisHi);
  EXPECT_EQ(img.at(18, 37), kViridisLo) << "cell (0,1)";
  EXPECT_EQ(img.at(10 + 5 * 8, 37 + 3 * 8), kGrey) << "cell (3,5) is NaN";
  EXPECT_EQ(img.at(8, 37), kWhite) << "margin";
  EXPECT_EQ(img.at(9, 37), kFrame) << "frame";
  EXPECT_EQ(img.at(10 + 48, 37), kFrame) << "frame right of the panel";
  EXPECT_EQ(img.at(10 + 49, 37), kWhite) << "right of the frame";
  // Legend bar under the panel row: y = 10 + 17 + 52 = 79; its left end is vmin, its right end vmax.
  EXPECT_EQ(img.at(10, 79), kViridisLo);
  EXPECT_EQ(img.at(109, 79), kViridisHi);
}

TEST(Heatmap, DownsamplingKeepsALoneFailureVisible) {
  // 1x600 error ratios squeezed into 64 pixels: the one element outside tolerance must still show red.
  Panel p{"e", 1, 600, std::vector<double>(600, 0.0)};
  p.values[431] = 5.0;
  Section s{"err", ColorMap::error_ratio, 0, 1, "0", "1", {p}};
  HeatmapStyle st;
  st.max_panel_px = 64;
  st.text_scale = 1;
  st.margin = 10;
  const Image img = render_heatmaps({s}, st);
  const int y = 10 + 7 + 10 + 7 + 3;  // the panel's only pixel row
  int red = 0;
  for (int x = 10; x < 10 + 64; ++x) red += img.at(x, y) == kRed;
  EXPECT_EQ(red, 1);
  // Pixel x covers cells [x*600/64, (x+1)*600/64): pixel 46 covers 431..440.
  EXPECT_EQ(img.at(10 + 46, y), kRed);
}

TEST(Heatmap, InspectPictureOfOneHotAttentionAndAPerturbedOutput) {
  // Lq = Lk = 3, Dqk = 1: q = 1, k = (+50, -50, -50) * row-dependent sign, so every row's weight is one-hot.
  Problem pr;
  pr.dtype = DType::f32;
  pr.Lq = 3;
  pr.Lk = 3;
  pr.Dqk = 1;
  pr.Dv = 2;
  pr.scale = 1.0;
  Inputs in{make_qkv(pr, 0), make_qkv(pr, 1), make_qkv(pr, 2), {}, {}, {}, {}, {}};
  for (int i = 0; i < 3; ++i) in.q.put(0, 0, i, 0, 1.0);
  in.k.put(0, 0, 0, 0, 50.0);
  in.k.put(0, 0, 1, 0, -50.0);
  in.k.put(0, 0, 2, 0, -50.0);
  for (int j = 0; j < 3; ++j) {
    in.v.put(0, 0, j, 0, j + 1.0);
    in.v.put(0, 0, j, 1, -(j + 1.0));
  }
  // The candidate: exact (v of key 0 for every row) except out[i=2, d=1], which is off by 0.5.
  Outputs actual = make_outputs(pr);
  for (int i = 0; i < 3; ++i) {
    actual.out.put(0, 0, i, 0, 1.0);
    actual.out.put(0, 0, i, 1, -1.0);
  }
  actual.out.put(0, 0, 2, 1, -1.5);
  HeatmapStyle st;
  st.max_panel_px = 48;
  st.max_cell_px = 16;
  st.margin = 10;
  st.text_scale = 1;
  const std::string path = temp_png("inspect.png");
  write_png(path, attention_heatmap(pr, in, &actual, {}, 16, st));
  const Image img = read_png(path);
  // Weights section: cell = 16 px; the first cell at (10, 37) is key 0 of query 0, weight 1 -> top of the scale.
  EXPECT_EQ(img.at(10 + 8, 37 + 8), kViridisHi);
  EXPECT_EQ(img.at(10 + 16 + 8, 37 + 8), kViridisLo) << "key 1 of query 0 has weight ~0";
  // Error section starts below: top = 10 + (7+10) + (7+3+48+10) + (12+3+7+10) = 127; its first cell at
  // (10, 127 + 27); cells are 16 px (48 / 3 rows). (i=0, d=0) exact -> white; (i=2, d=1) 0.5 off -> red.
  const int y0 = 127 + 7 + 10 + 7 + 3;
  EXPECT_EQ(img.at(10 + 8, y0 + 8), kWhite);
  EXPECT_EQ(img.at(10 + 16 + 8, y0 + 2 * 16 + 8), kRed);
  EXPECT_EQ(img.at(10 + 16 + 8, y0 + 1 * 16 + 8), kWhite);
}

TEST(Heatmap, WriteErrorNamesTheFile) {
  try {
    write_png("/nonexistent-dir/x.png", Image(2, 2, {}));
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.png"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_png("/nonexistent-dir/x.png"), std::runtime_error);
}
