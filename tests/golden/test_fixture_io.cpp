// Fixture I/O round trips: every problem field, every dtype and both layouts survive write -> read bit for bit,
// and writing the same fixture twice (a second apart, so a timestamp would differ) gives identical bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <unistd.h>

#include "attncheck/fixture.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;

// One scratch directory per process, removed at exit.
fs::path temp_dir() {
  struct Dir {
    fs::path p = fs::temp_directory_path() / ("attncheck_fixture_io_" + std::to_string(::getpid()));
    Dir() { fs::create_directories(p); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  };
  static Dir d;
  return d.p;
}

void fill(Tensor& t, uint64_t& s, double amp) {
  for (int64_t n = 0; n < t.numel(); ++n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t.set_offset(n, ((s >> 11) * 0x1.0p-53 * 2 - 1) * amp);
  }
}

// Every feature at once: GQA, Lq != Lk, Dqk != Dv, per-batch offsets, padding, mask, bias, window, softcap,
// finite fill, dropout, weights and lse.
Fixture everything(DType dt, Layout layout) {
  Problem p;
  p.B = 2;
  p.Hq = 4;
  p.Hkv = 2;
  p.Lq = 5;
  p.Lk = 7;
  p.Dqk = 6;
  p.Dv = 3;
  p.dtype = dt;
  p.layout = layout;
  p.scale = 0.3;
  p.causal = true;
  p.alignment = Alignment::explicit_;
  p.causal_offsets = {1, 3};
  p.key_lengths = {7, 4};
  p.mask_shape = std::array<int64_t, 4>{2, 1, 5, 7};
  p.bias_shape = std::array<int64_t, 4>{1, 4, 1, 7};
  p.bias_dtype = dt == DType::f64 ? DType::f64 : DType::f32;
  p.window_left = 3;
  p.window_right = 1;
  p.softcap = 20;
  p.fill = MaskFill::finite;
  p.fill_value = -1e4;
  p.fully_masked = FullyMasked::uniform;
  p.dropout_p = 0.25;
  p.dropout_seed = 0xdeadbeefcafeull;
  p.want_weights = true;
  p.want_lse = true;
  Inputs in;
  in.q = make_qkv(p, 0);
  in.k = make_qkv(p, 1);
  in.v = make_qkv(p, 2);
  uint64_t s = 42;
  fill(in.q, s, 2);
  fill(in.k, s, 2);
  fill(in.v, s, 1);
  in.mask = Tensor(DType::u8, {2, 1, 5, 7});
  for (int64_t n = 0; n < in.mask->numel(); ++n) in.mask->set_offset(n, (n * 7) % 5 != 0);
  in.bias = Tensor(p.bias_dtype, {1, 4, 1, 7});
  fill(*in.bias, s, 0.5);
  in.keep = make_keep_mask(p);
  Provenance prov;
  prov.attncheck_version = attncheck_version();
  prov.seed = 42;
  prov.distribution = "test";
  prov.command = "test_fixture_io";
  ToleranceModel tol;
  tol.lambda = 2.5, tol.rel_floor = 1e-5;
  return make_fixture("test/everything", p, std::move(in), prov, tol);
}

bool same_doubles(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

class RoundTrip : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(RoundTrip, EveryFieldSurvives) {
  const auto [dt, layout] = GetParam();
  const Fixture f = everything(dt, layout);
  const fs::path path = temp_dir() / fixture_file_name(std::string("rt/") + to_string(dt) + to_string(layout));
  write_fixture(path.string(), f);
  const Fixture g = read_fixture(path.string());
  EXPECT_EQ(g.name, f.name);
  EXPECT_EQ(g.problem.name(), f.problem.name());
  const Problem &a = f.problem, &b = g.problem;
  EXPECT_EQ(b.scale, a.scale);
  EXPECT_EQ(b.causal_offsets, a.causal_offsets);
  EXPECT_EQ(b.key_lengths, a.key_lengths);
  EXPECT_EQ(b.mask_shape, a.mask_shape);
  EXPECT_EQ(b.bias_shape, a.bias_shape);
  EXPECT_EQ(b.bias_dtype, a.bias_dtype);
  EXPECT_EQ(b.window_left, a.window_left);
  EXPECT_EQ(b.window_right, a.window_right);
  EXPECT_EQ(b.softcap, a.softcap);
  EXPECT_EQ(b.fill, a.fill);
  EXPECT_EQ(b.fill_value, a.fill_value);
  EXPECT_EQ(b.fully_masked, a.fully_masked);
  EXPECT_EQ(b.dropout_p, a.dropout_p);
  EXPECT_EQ(b.dropout_seed, a.dropout_seed);
  EXPECT_EQ(b.want_weights, a.want_weights);
  EXPECT_EQ(b.want_lse, a.want_lse);
  EXPECT_EQ(b.layout, a.layout);
  EXPECT_EQ(g.inputs.q.bytes, f.inputs.q.bytes);
  EXPECT_EQ(g.inputs.q.strides, f.inputs.q.strides);
  EXPECT_EQ(g.inputs.k.bytes, f.inputs.k.bytes);
  EXPECT_EQ(g.inputs.v.bytes, f.inputs.v.bytes);
  EXPECT_EQ(g.inputs.mask->bytes, f.inputs.mask->bytes);
  EXPECT_EQ(g.inputs.bias->bytes, f.inputs.bias->bytes);
  EXPECT_EQ(g.inputs.keep->bytes, f.inputs.keep->bytes);
  EXPECT_TRUE(same_doubles(g.expected.out, f.expected.out));
  EXPECT_TRUE(same_doubles(g.expected.lse, f.expected.lse));
  EXPECT_TRUE(same_doubles(g.expected.weights, f.expected.weights));
  EXPECT_TRUE(same_doubles(g.expected.score_mag, f.expected.score_mag));
  EXPECT_TRUE(same_doubles(g.expected.out_abs, f.expected.out_abs));
  EXPECT_EQ(g.provenance.seed, 42u);
  EXPECT_EQ(g.provenance.distribution, "test");
  EXPECT_EQ(g.provenance.command, "test_fixture_io");
  EXPECT_EQ(g.tolerance.lambda, 2.5);
  EXPECT_EQ(g.tolerance.rel_floor, 1e-5);
  // The stored expected values are the reference's for the stored inputs (not something the reader made up).
  const ReferenceResult again = reference_attention(g.problem, g.inputs);
  EXPECT_TRUE(same_doubles(again.out, g.expected.out));
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, RoundTrip,
                         ::testing::Combine(::testing::Values(DType::f64, DType::f32, DType::f16, DType::bf16),
                                            ::testing::Values(Layout::BHSD, Layout::BSHD)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

TEST(FixtureIO, WritingTwiceGivesIdenticalBytes) {
  const Fixture f = everything(DType::f16, Layout::BSHD);
  const fs::path a = temp_dir() / "a.h5", b = temp_dir() / "b.h5";
  write_fixture(a.string(), f);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a stored timestamp would now differ
  write_fixture(b.string(), f);
  const std::string sa = slurp(a), sb = slurp(b);
  ASSERT_GT(sa.size(), 1000u);
  EXPECT_TRUE(sa == sb) << "fixture bytes differ between two writes";
}

// The exact block mask survives write -> read; one that is not the problem's exact block mask is refused, naming
// the dataset (a block listed that is empty in truth).
TEST(FixtureIO, BlockMaskRoundTripAndAWrongOneRefused) {
  Problem p;
  p.B = 1, p.Hq = 2, p.Hkv = 1, p.Lq = 10, p.Lk = 21, p.Dqk = p.Dv = 4, p.dtype = DType::f32, p.want_lse = true;
  p.causal = true, p.alignment = Alignment::top_left;
  Inputs in;
  in.q = make_qkv(p, 0), in.k = make_qkv(p, 1), in.v = make_qkv(p, 2);
  uint64_t s = 3;
  for (Tensor* t : {&in.q, &in.k, &in.v}) fill(*t, s, 1.0);
  Fixture f = make_fixture("block-mask", p, in, {});
  f.block_mask = derive_block_mask(p, f.inputs, 4, 8);  // tails on both axes
  const fs::path a = temp_dir() / "bm.h5";
  write_fixture(a.string(), f);
  const Fixture r = read_fixture(a.string());
  ASSERT_TRUE(r.block_mask);
  EXPECT_EQ(r.block_mask->q_block, 4);
  EXPECT_EQ(r.block_mask->kv_block, 8);
  EXPECT_EQ(r.block_mask->kv_num_blocks, f.block_mask->kv_num_blocks);
  EXPECT_EQ(r.block_mask->kv_indices, f.block_mask->kv_indices);
  EXPECT_EQ(r.block_mask->full_kv_num_blocks, f.block_mask->full_kv_num_blocks);
  EXPECT_EQ(r.block_mask->full_kv_indices, f.block_mask->full_kv_indices);
  // Query block 0 (rows 0..3, causal top-left) sees keys 0..3 only: key block 2 (keys 16..20) listed as partial.
  Fixture wrong = f;
  BlockMask& m = *wrong.block_mask;
  ASSERT_EQ(m.kv_num_blocks[0], 1);
  m.kv_num_blocks[0] = 2, m.kv_indices[1] = 2;
  const fs::path b = temp_dir() / "bm_wrong.h5";
  write_fixture(b.string(), wrong);
  try {
    read_fixture(b.string());
    ADD_FAILURE() << "a wrong block mask was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/expected/block_mask/kv_num_blocks: is not the exact block mask"),
              std::string::npos)
        << e.what();
  }
}

TEST(FixtureIO, NoTemporaryFileLeftBehind) {
  const fs::path dir = temp_dir() / "clean";
  fs::create_directories(dir);
  write_fixture((dir / "x.h5").string(), everything(DType::f32, Layout::BHSD));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().filename() == "x.h5" ? 1 : 100;
  EXPECT_EQ(files, 1);
}

TEST(FixtureIO, CandidateRoundTrip) {
  const Fixture f = everything(DType::bf16, Layout::BSHD);
  Outputs o = make_outputs(f.problem);
  for (int64_t n = 0; n < o.out.numel(); ++n) o.out.set_offset(n, 0.5 * static_cast<double>(n % 9) - 2);
  const fs::path path = temp_dir() / "cand.h5";
  write_candidate(path.string(), f.problem, o);
  const Outputs c = read_candidate(path.string(), f.problem);
  EXPECT_EQ(c.out.to_double(), o.out.to_double());
  EXPECT_TRUE(c.lse.has_value());
  EXPECT_TRUE(c.weights.has_value());
}

}  // namespace
}  // namespace attncheck
