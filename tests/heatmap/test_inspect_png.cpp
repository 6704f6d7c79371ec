// `attncheck inspect FIXTURE --png OUT.png [--actual CANDIDATE]` end to end on a checked-in fixture: the PNG is
// written and decodes with libpng, an exact candidate paints no error cell red, a candidate with one element off
// paints exactly one cell red, and bad output paths or options are exit 2 with a message.
#include <gtest/gtest.h>

#include <filesystem>

#include "../golden/cli_util.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/heatmap.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
constexpr Rgb kRed{220, 20, 20};
const std::string kFixture = std::string(GOLDEN_DIR) + "/cases/fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";

int64_t count(const Image& img, Rgb c) {
  int64_t n = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) n += img.at(x, y) == c;
  return n;
}

// The fixture's expected out as a candidate, with element (b=1, h=3, i=6, d=15) moved by `off` tolerances.
std::string candidate(const Fixture& f, const fs::path& dir, const char* name, double off) {
  const Problem& p = f.problem;
  Outputs o;
  o.out = Tensor(DType::f64, {p.B, p.Hq, p.Lq, p.Dv}, storage_order(p.layout));
  const std::vector<double> tol = out_tolerance(p, f.expected, f.tolerance);
  size_t n = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i)
        for (int64_t d = 0; d < p.Dv; ++d, ++n)
          o.out.put(b, h, i, d, f.expected.out[n] + (b == 1 && h == 3 && i == 6 && d == 15 ? off * tol[n] : 0.0));
  const std::string path = (dir / name).string();
  write_candidate(path, p, o);
  return path;
}

}  // namespace

TEST(InspectPng, WeightsOnly) {
  const fs::path dir = test::scratch("inspect_png");
  const auto r = test::run("inspect " + kFixture + " --png " + (dir / "w.png").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("png "), std::string::npos) << r.out;
  const Image img = read_png((dir / "w.png").string());
  // B*Hq = 8 panels of 13x17 in 4 columns; the same picture as the library draws for this fixture.
  const Fixture f = read_fixture(kFixture);
  const Image lib = attention_heatmap(f.problem, f.inputs);
  EXPECT_EQ(img.width, lib.width);
  EXPECT_EQ(img.height, lib.height);
  EXPECT_EQ(img.rgb, lib.rgb);
  EXPECT_EQ(count(img, kRed), 0) << "no error section without --actual";
}

TEST(InspectPng, ErrorMapMarksExactlyTheElementOutsideTolerance) {
  const fs::path dir = test::scratch("inspect_png_err");
  const Fixture f = read_fixture(kFixture);
  auto r = test::run("inspect " + kFixture + " --actual " + candidate(f, dir, "exact.h5", 0.0) + " --png " +
                     (dir / "exact.png").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  r = test::run("inspect " + kFixture + " --actual " + candidate(f, dir, "off.h5", 20.0) + " --png " +
                (dir / "off.png").string());
  ASSERT_EQ(r.rc, 1) << "a failing candidate keeps inspect's exit code 1\n" << r.out;
  const Image exact = read_png((dir / "exact.png").string()), off = read_png((dir / "off.png").string());
  ASSERT_EQ(exact.width, off.width);
  ASSERT_EQ(exact.height, off.height);
  // Error panels are 13x16 (i, d) with 16-pixel cells (256 / 16 = 16): one element off adds one 16x16 red cell;
  // the rest of the red is the legend's "outside tolerance" block, present in both.
  EXPECT_EQ(count(off, kRed) - count(exact, kRed), 16 * 16);
}

TEST(InspectPng, BadArgumentsAreExit2) {
  auto r = test::run("inspect " + kFixture + " --png /nonexistent-dir/x.png");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent-dir/x.png"), std::string::npos) << r.out;
  r = test::run("inspect " + kFixture + " --png /tmp/x.png --max-panels 0");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--max-panels must be >= 1, got 0"), std::string::npos) << r.out;
}

}  // namespace attncheck
