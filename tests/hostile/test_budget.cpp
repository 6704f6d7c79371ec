// The work budget: a small fixture can declare shapes that mean hours of reference work (its datasets
// chunked and never written, so HDF5 reads them as zeros from a ~60 KB file), and a spec can ask for them. Every
// verb that reads such a file now refuses it from the attributes, exit 2, naming --max-work / --max-memory; the
// flags override the defaults (sized for the machine).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "../golden/cli_util.hpp"
#include "../golden/h5_edit.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
using test::run;
using test::run_shell;
using test::set_i64_attr;

const std::string kCase = "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";
constexpr hsize_t kL = hsize_t{1} << 17;  // Lq = Lk = 131072: ~0.4 GB of tensors, 8.8e12 reference FLOPs

// Every dataset of `group` recreated with Lq (13) and Lk (17) extents replaced by kL: chunked, deflated, never
// written (no storage allocated; reads give the fill value 0).
void blow_up(hid_t f, const char* group) {
  const hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
  hsize_t n = 0;
  H5Gget_num_objs(g, &n);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < n; ++i) {
    char buf[256];
    H5Gget_objname_by_idx(g, i, buf, sizeof buf);
    names.push_back(buf);
  }
  for (const auto& name : names) {
    const hid_t d = H5Dopen2(g, name.c_str(), H5P_DEFAULT);
    const hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(s)));
    H5Sget_simple_extent_dims(s, dims.data(), nullptr);
    H5Dclose(d);
    H5Sclose(s);
    std::vector<hsize_t> chunk(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == 13 || dims[i] == 17) dims[i] = kL;
      chunk[i] = std::min<hsize_t>(dims[i], 64);
    }
    H5Ldelete(g, name.c_str(), H5P_DEFAULT);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl, 9);
    const hid_t big = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    H5Dclose(H5Dcreate2(g, name.c_str(), t, big, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5Sclose(big);
    H5Pclose(dcpl);
    H5Tclose(t);
  }
  H5Gclose(g);
}

// A ~60 KB fixture declaring Lq = Lk = 131072 (hours of reference work here), and a candidate for it.
fs::path work_bomb(const fs::path& dir, const char* name) {
  const fs::path p = dir / name;
  fs::copy_file(test::golden_case(kCase), p, fs::copy_options::overwrite_existing);
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  set_i64_attr(f, "Lq", int64_t(kL));
  set_i64_attr(f, "Lk", int64_t(kL));
  set_i64_attr(f, "want_weights", 0);  // weights [B,Hq,Lq,Lk] would be a memory bomb instead
  H5Ldelete(f, "/expected/weights", H5P_DEFAULT);
  H5Adelete(f, "effective_scale");
  blow_up(f, "/inputs");
  blow_up(f, "/expected");
  H5Fclose(f);
  return p;
}

TEST(Budget, AWorkBombFixtureIsRefusedByEveryVerbBeforeAnyWork) {
  const fs::path dir = test::scratch("budget_fixture");
  const fs::path bomb = work_bomb(dir, "bomb.h5");
  EXPECT_LT(fs::file_size(bomb), 200u * 1024);
  const std::string b = bomb.string(), timeout = "timeout -s KILL 60 " + std::string(ATTNCHECK_EXE) + " ";
  for (const std::string& verb : {"verify --impl reference --fixtures " + dir.string(), "inspect " + b,
                                  "compare --expected " + b + " --actual " + b}) {
    const auto r =
        run_shell(timeout + verb);  // not hours of reference work (verify) or of error scales (inspect, compare)
    EXPECT_EQ(r.rc, 2) << verb << "\n" << r.out;
    EXPECT_NE(r.out.find(b + ": work: fp32/B2-Hq4-Hkv2-Lq131072-Lk131072-D16/plain means 8.8e+12 FLOPs of "
                             "reference work, more than the work budget of"),
              std::string::npos)
        << verb << "\n"
        << r.out;
    EXPECT_NE(r.out.find("(raise it with --max-work)"), std::string::npos) << r.out;
  }
}

TEST(Budget, TheFlagsOverrideTheDefaults) {
  const fs::path dir = test::scratch("budget_flags");
  const std::string b = work_bomb(dir, "bomb.h5").string();
  // Enough work allowed: the reader goes on to the memory check, refused by a small --max-memory.
  auto r = run("inspect " + b + " --max-work 1e13 --max-memory 100M");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(b + ": size: the tensors of problem [B=2,Hq=4,Hkv=2,Lq=131072,Lk=131072,Dqk=16,Dv=16] need"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("more than the memory budget of 104857600 bytes (raise it with --max-memory)"),
            std::string::npos)
      << r.out;
  // A tiny work budget refuses a golden fixture (2·B·Hq·Lq·Lk·(Dqk+Dv) = 2·2·4·13·17·32 = 113152 FLOPs).
  r = run("inspect " + test::golden_case(kCase) + " --max-work 100000");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("work: fp32/B2-Hq4-Hkv2-Lq13-Lk17-D16/plain means 1.13e+05 FLOPs"), std::string::npos) << r.out;
  EXPECT_EQ(run("inspect " + test::golden_case(kCase) + " --max-work 120000").rc, 0);
  for (const std::string bad : {"--max-work 0", "--max-work lots", "--max-memory 12Q", "--max-memory -1"}) {
    r = run("inspect " + test::golden_case(kCase) + " " + bad);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find(bad.substr(0, bad.find(' ')) + ": expected"), std::string::npos) << r.out;
  }
}

TEST(Budget, AWorkBombSpecIsRefusedBeforeGenerating) {
  const fs::path dir = test::scratch("budget_spec");
  std::ofstream(dir / "bomb.json") << R"({"schema_version": 1, "subdir": "c", "cases": [
      {"dtype": "fp32", "B": 1, "Hq": 1, "Hkv": 1, "Lq": 262144, "Lk": 262144, "D": 64}]})";
  const auto r = run_shell("timeout -s KILL 60 " + std::string(ATTNCHECK_EXE) + " generate --spec " +
                           (dir / "bomb.json").string() + " --out " + dir.string());
  // not ~20 hours of reference work (killed here after a minute)
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("bomb.json: cases[0]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("work: fp32/B1-Hq1-Hkv1-Lq262144-Lk262144-D64/plain means 1.76e+13 FLOPs"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir / "c") && !fs::is_empty(dir / "c"));
}

}  // namespace
}  // namespace attncheck
