// Candidate files from hostile or careless writers: a bf16 `encoding` stored as a variable-length string
// is refused (HDF5 1.10's variable-length string reader is not safe on crafted files), the fixed-length one is read;
// the memory cap counts only the outputs a candidate holds (an out-only candidate of a large fixture is valid).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <cstring>

#include "../golden/cli_util.hpp"
#include "attncheck/fixture.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
using test::run;

const std::string kFp16 = "fp16_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";
const std::string kBf16 = "bf16_B1-Hq1-Hkv1-Lq65-Lk63-D8_plain_normal.h5";

void put_string_attr(hid_t loc, const char* name, const char* value, bool variable) {
  H5Adelete(loc, name);
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, variable ? H5T_VARIABLE : std::strlen(value));
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  if (variable)
    H5Awrite(a, t, &value);
  else
    H5Awrite(a, t, value);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

TEST(HostileStorage, CandidateBf16EncodingMustBeAFixedLengthString) {
  // Candidates declare no schema: a variable-length `encoding` is refused, the fixed-length form is read.
  const fs::path dir = test::scratch("hostile_vlen_cand");
  const Fixture fx = read_fixture(test::golden_case(kBf16));
  for (const bool variable : {true, false}) {
    const fs::path p = dir / (variable ? "vlen.h5" : "fixed.h5");
    const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(H5Gcreate2(f, "/actual", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    const hsize_t dims[4] = {1, 1, 65, 8};
    const hid_t s = H5Screate_simple(4, dims, nullptr);
    const hid_t d = H5Dcreate2(f, "/actual/out", H5T_STD_U16LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<uint16_t> bits(65 * 8, 0x3f80);
    H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data());
    put_string_attr(d, "encoding", "bfloat16", variable);
    H5Dclose(d);
    H5Sclose(s);
    H5Fclose(f);
    if (variable) {
      EXPECT_THROW(read_candidate(p.string(), fx.problem), std::invalid_argument);
      const auto r = run("compare --expected " + test::golden_case(kBf16) + " --actual " + p.string());
      EXPECT_EQ(r.rc, 2) << r.out;
      EXPECT_NE(r.out.find("/actual/out: attribute 'encoding' is a variable-length string"), std::string::npos)
          << r.out;
    } else {
      const Outputs o = read_candidate(p.string(), fx.problem);  // kept in its stored type: bf16 bit patterns
      ASSERT_EQ(o.out.dtype, DType::bf16);
      EXPECT_EQ(o.out.data<uint16_t>()[0], 0x3f80);
    }
  }
}

TEST(HostileStorage, OutOnlyCandidateIsNotChargedForAbsentWeights) {
  // Cap between "out" and "out + lse + weights": an out-only candidate fits and must be read.
  const Fixture fx = read_fixture(test::golden_case(kFp16));
  const Problem& p = fx.problem;
  const fs::path path = test::scratch("hostile_outonly") / "out_only.h5";
  Outputs o;
  o.out = Tensor(DType::f64, {p.B, p.Hq, p.Lq, p.Dv});
  write_candidate(path.string(), p, o);
  const double rows = double(p.B * p.Hq * p.Lq);
  FixtureReadOptions cap;
  cap.max_bytes = static_cast<uint64_t>(8 * rows * (double(p.Dv) + 1));
  EXPECT_NO_THROW(read_candidate(path.string(), p, cap));
  cap.max_bytes = static_cast<uint64_t>(8 * rows * double(p.Dv)) - 1;
  EXPECT_THROW(read_candidate(path.string(), p, cap), std::invalid_argument);
}

}  // namespace
}  // namespace attncheck
