// One malformed fixture per reader rule (golden/SCHEMA.md): the library throws std::invalid_argument naming the
// file and the field, and `attncheck inspect` / `compare` / `verify` exit 2 with that message. The files are made
// here by damaging a good fixture with the HDF5 C API.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "attncheck/fixture.hpp"
#include "cli_util.hpp"
#include "h5_edit.hpp"

namespace attncheck {
namespace {

namespace fs = std::filesystem;
using test::run;
using test::set_i64_attr;

const std::string kGood = "fp16_B2-Hq4-Hkv2-Lq13-Lk17-D16_plain_normal.h5";

// A copy of a good fixture, damaged by `edit` (given the open file id).
template <class F>
std::string damaged(const std::string& name, F edit) {
  static const fs::path dir = test::scratch("malformed");
  const fs::path p = dir / (name + ".h5");
  fs::copy_file(test::golden_case(kGood), p, fs::copy_options::overwrite_existing);
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  edit(f);
  H5Fclose(f);
  return p.string();
}

void replace_dataset(hid_t f, const char* path, hid_t type, std::vector<hsize_t> dims) {
  H5Ldelete(f, path, H5P_DEFAULT);
  const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(f, path, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  size_t n = 1;
  for (auto x : dims) n *= x;
  std::vector<double> zeros(n, 0.0);
  H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
  H5Dclose(d);
  H5Sclose(s);
}

// The rule holds in the library and in the CLI: a message "<file>: <field>..." and exit code 2.
void expect_rejected(const std::string& file, const std::string& field_and_what) {
  try {
    read_fixture(file);
    ADD_FAILURE() << file << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(file + ": " + field_and_what), std::string::npos) << e.what();
  }
  const auto r = run("inspect " + file);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(file + ": " + field_and_what), std::string::npos) << r.out;
}

TEST(Malformed, GoodFixtureIsAccepted) {  // the baseline the damaged copies start from
  EXPECT_NO_THROW(read_fixture(test::golden_case(kGood)));
  EXPECT_EQ(run("inspect " + test::golden_case(kGood)).rc, 0);
}

TEST(Malformed, SchemaVersionFromTheFuture) {
  expect_rejected(damaged("future", [](hid_t f) { set_i64_attr(f, "schema_version", 3); }),
                  "schema_version: is 3, from the future");
}

TEST(Malformed, MissingDataset) {
  expect_rejected(damaged("no_k", [](hid_t f) { H5Ldelete(f, "/inputs/k", H5P_DEFAULT); }),
                  "/inputs/k: missing dataset");
  expect_rejected(damaged("no_lse", [](hid_t f) { H5Ldelete(f, "/expected/lse", H5P_DEFAULT); }),
                  "/expected/lse: missing dataset");
}

TEST(Malformed, MissingAttribute) {
  expect_rejected(damaged("no_hkv", [](hid_t f) { H5Adelete(f, "Hkv"); }), "/: missing attribute 'Hkv'");
}

TEST(Malformed, WrongDtype) {
  expect_rejected(damaged("q_fp32",
                          [](hid_t f) {
                            replace_dataset(f, "/inputs/q", H5T_IEEE_F32LE, {2, 4, 13, 16});
                          }),
                  "/inputs/q: dtype must be fp16, got 32-bit float");
  expect_rejected(damaged("out_fp32",
                          [](hid_t f) {
                            replace_dataset(f, "/expected/out", H5T_IEEE_F32LE, {2, 4, 13, 16});
                          }),
                  "/expected/out: dtype must be fp64, got 32-bit float");
}

TEST(Malformed, WrongRank) {
  expect_rejected(damaged("q_rank3",
                          [](hid_t f) {
                            const hid_t v = H5Dopen2(f, "/inputs/v", H5P_DEFAULT);
                            const hid_t t = H5Dget_type(v);
                            replace_dataset(f, "/inputs/q", t, {8, 13, 16});
                            H5Tclose(t);
                            H5Dclose(v);
                          }),
                  "/inputs/q: rank must be 4 with shape [2,4,13,16], got rank 3 shape [8,13,16]");
}

TEST(Malformed, WrongShape) {
  expect_rejected(damaged("out_shape",
                          [](hid_t f) {
                            replace_dataset(f, "/expected/out", H5T_IEEE_F64LE, {2, 4, 13, 15});
                          }),
                  "/expected/out: shape must be [2,4,13,16], got [2,4,13,15]");
}

TEST(Malformed, BeyondMemoryCapIsRejectedBeforeAllocating) {
  // 2^40 keys: allocating would die; the reader must refuse from the attributes alone.
  expect_rejected(damaged("huge", [](hid_t f) { set_i64_attr(f, "Lk", int64_t{1} << 40); }),
                  "size: the tensors of problem [B=2,Hq=4,Hkv=2,Lq=13,Lk=1099511627776");
}

TEST(Malformed, InvalidProblem) {
  expect_rejected(damaged("hkv3", [](hid_t f) { set_i64_attr(f, "Hkv", 3); }), "problem: Hq must be a multiple of Hkv");
}

TEST(Malformed, MaskAndKeepValuesMustBeZeroOrOne) {
  for (const auto& [file, path] :
       {std::pair<std::string, std::string>{"fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_mask_normal.h5", "/inputs/mask"},
        {"fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_drop_normal.h5", "/inputs/keep"}}) {
    const fs::path p = test::scratch("mask_values") / file;
    fs::copy_file(test::golden_case(file), p, fs::copy_options::overwrite_existing);
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
    const hid_t s = H5Dget_space(d);
    std::vector<uint8_t> v(static_cast<size_t>(H5Sget_simple_extent_npoints(s)));
    H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    v[3] = 2;
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Sclose(s);
    H5Dclose(d);
    H5Fclose(f);
    expect_rejected(p.string(), path + ": values must be 0 or 1, got 2 at element 3");
  }
}

TEST(Malformed, NotHdf5) {
  const fs::path p = test::scratch("nothdf5") / "text.h5";
  std::ofstream(p) << "this is not HDF5\n";
  expect_rejected(p.string(), "file: not an HDF5 file");
}

TEST(Malformed, VerifyOnADirectoryWithABadFixtureExits2) {
  const fs::path dir = test::scratch("baddir");
  const std::string bad = damaged("future2", [](hid_t f) { set_i64_attr(f, "schema_version", 7); });
  fs::copy_file(bad, dir / "bad.h5");
  const auto r = run("verify --impl reference --fixtures " + dir.string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("bad.h5: schema_version: is 7, from the future"), std::string::npos) << r.out;
}

TEST(Malformed, CandidateWithoutOutOrWithWrongShapeOrTypeExits2) {
  const std::string fix = test::golden_case(kGood);
  const fs::path dir = test::scratch("badcand");
  auto make = [&](const char* name, hid_t type, std::vector<hsize_t> dims) {
    const fs::path p = dir / name;
    const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(H5Gcreate2(f, "/actual", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!dims.empty()) replace_dataset(f, "/actual/out", type, dims);
    H5Fclose(f);
    return p.string();
  };
  const std::string no_out = make("no_out.h5", H5T_IEEE_F32LE, {});
  const std::string shape = make("shape.h5", H5T_IEEE_F32LE, {2, 13, 4, 16});
  const std::string ints = make("ints.h5", H5T_STD_I32LE, {2, 4, 13, 16});
  auto r = run("compare --expected " + fix + " --actual " + no_out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find(no_out + ": /actual/out: missing dataset"), std::string::npos) << r.out;
  r = run("compare --expected " + fix + " --actual " + shape);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find(shape + ": /actual/out: shape must be [2,4,13,16], got [2,13,4,16]"), std::string::npos)
      << r.out;
  r = run("compare --expected " + fix + " --actual " + ints);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find(ints + ": /actual/out: dtype must be a floating type"), std::string::npos) << r.out;
}

// ---- storage the schema does not define, and values that conversion would clip ---------------------------------

// Replaces attribute `name` of the root group by a variable-length string (what schema_version 1 wrote).
void set_vlen_attr(hid_t f, const char* name, const char* value) {
  H5Adelete(f, name);
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, &value);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

// Replaces dataset `path` by one of `type` holding `values` (converted from int).
void replace_with_ints(hid_t f, const char* path, hid_t type, const std::vector<int>& values) {
  const hid_t d0 = H5Dopen2(f, path, H5P_DEFAULT);
  const hid_t s = H5Dget_space(d0);
  H5Dclose(d0);
  H5Ldelete(f, path, H5P_DEFAULT);
  const hid_t d = H5Dcreate2(f, path, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<int> v(static_cast<size_t>(H5Sget_simple_extent_npoints(s)), 1);
  std::copy(values.begin(), values.end(), v.begin());
  H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Sclose(s);
}

TEST(Malformed, VariableLengthStringsAreRefusedFromSchema2) {
  expect_rejected(damaged("vlen", [](hid_t f) { set_vlen_attr(f, "dtype", "fp16"); }),
                  "/: attribute 'dtype' is a variable-length string");
}

TEST(Malformed, Schema1FilesWithVariableLengthStringsAreStillRead) {
  // golden/regressions/ was written by schema_version 1 (variable-length strings).
  for (const auto& e :
       fs::directory_iterator(fs::path(test::golden_case(kGood)).parent_path().parent_path() / "regressions")) {
    const Fixture f = read_fixture(e.path().string());
    EXPECT_EQ(f.provenance.schema_version, 1) << e.path();
  }
}

TEST(Malformed, SignedMaskValuesAreNotClippedToZero) {
  const std::string file = "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_mask_normal.h5";
  const fs::path p = test::scratch("signed_mask") / file;
  fs::copy_file(test::golden_case(file), p, fs::copy_options::overwrite_existing);
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  replace_with_ints(f, "/inputs/mask", H5T_STD_I8LE, {1, 0, 1, -1});
  H5Fclose(f);
  expect_rejected(p.string(), "/inputs/mask: values must be 0 or 1, got -1 at element 3");
}

TEST(Malformed, H5pyBooleanMasksAreRead) {
  const std::string file = "fp32_B2-Hq4-Hkv2-Lq13-Lk17-D16_mask_normal.h5";
  const fs::path p = test::scratch("bool_mask") / file;
  fs::copy_file(test::golden_case(file), p, fs::copy_options::overwrite_existing);
  const Fixture good = read_fixture(p.string());
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t d0 = H5Dopen2(f, "/inputs/mask", H5P_DEFAULT);
  const hid_t s = H5Dget_space(d0);
  H5Dclose(d0);
  H5Ldelete(f, "/inputs/mask", H5P_DEFAULT);
  const hid_t t = H5Tenum_create(H5T_NATIVE_INT8);  // h5py's bool: enum {FALSE = 0, TRUE = 1}
  int8_t no = 0, yes = 1;
  H5Tenum_insert(t, "FALSE", &no);
  H5Tenum_insert(t, "TRUE", &yes);
  const hid_t d = H5Dcreate2(f, "/inputs/mask", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, good.inputs.mask->bytes.data());
  H5Dclose(d);
  H5Tclose(t);
  H5Sclose(s);
  H5Fclose(f);
  const Fixture back = read_fixture(p.string());
  EXPECT_EQ(back.inputs.mask->bytes, good.inputs.mask->bytes);
}

TEST(Malformed, SignedBf16BitPatternsAreRefused) {
  const std::string file = "bf16_B2-Hq4-Hkv2-Lq13-Lk17-D16_bias_normal.h5";
  const fs::path p = test::scratch("signed_bf16") / file;
  fs::copy_file(test::golden_case(file), p, fs::copy_options::overwrite_existing);
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  replace_with_ints(f, "/inputs/q", H5T_STD_I16LE, {-16512});  // bf16 -1.0 as a signed pattern
  const hid_t d = H5Dopen2(f, "/inputs/q", H5P_DEFAULT);
  const hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, 8);
  const hid_t sp = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(d, "encoding", st, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, st, "bfloat16");
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(st);
  H5Dclose(d);
  H5Fclose(f);
  expect_rejected(p.string(), "/inputs/q: dtype must be bf16 (unsigned uint16 bit patterns");
}

TEST(Malformed, LinksAreRefused) {
  expect_rejected(damaged("soft",
                          [](hid_t f) {
                            H5Ldelete(f, "/inputs/k", H5P_DEFAULT);
                            H5Lcreate_soft("/inputs/q", f, "/inputs/k", H5P_DEFAULT, H5P_DEFAULT);
                          }),
                  "/inputs/k: is a soft link");
  expect_rejected(damaged("external_link",
                          [](hid_t f) {
                            H5Ldelete(f, "/inputs/k", H5P_DEFAULT);
                            H5Lcreate_external("/etc/other.h5", "/k", f, "/inputs/k", H5P_DEFAULT, H5P_DEFAULT);
                          }),
                  "/inputs/k: is an external or user-defined link");
}

// Recreates /inputs/q with its type and shape but the storage `set_storage` puts on its creation properties.
template <class F>
void recreate_q_with_storage(hid_t f, F set_storage) {
  const hid_t d0 = H5Dopen2(f, "/inputs/q", H5P_DEFAULT);
  const hid_t t = H5Dget_type(d0), s = H5Dget_space(d0);
  H5Dclose(d0);
  H5Ldelete(f, "/inputs/q", H5P_DEFAULT);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  set_storage(dcpl, s);
  H5Dclose(H5Dcreate2(f, "/inputs/q", t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  H5Pclose(dcpl);
  H5Tclose(t);
  H5Sclose(s);
}

TEST(Malformed, ExternalStorageIsRefused) {
  // The dataset's bytes would come from an arbitrary file of the machine.
  expect_rejected(damaged("external_storage",
                          [](hid_t f) {
                            recreate_q_with_storage(
                                f, [](hid_t dcpl, hid_t) { H5Pset_external(dcpl, "/etc/hostname", 0, H5F_UNLIMITED); });
                          }),
                  "/inputs/q: uses external storage");
}

TEST(Malformed, VirtualDatasetsAreRefused) {
  expect_rejected(damaged("virtual",
                          [](hid_t f) {
                            recreate_q_with_storage(f, [](hid_t dcpl, hid_t space) {
                              H5Pset_virtual(dcpl, space, "/nonexistent/source.h5", "/q", space);
                            });
                          }),
                  "/inputs/q: is a virtual dataset");
}

TEST(Malformed, EffectiveScaleMustMatchTheProblem) {
  expect_rejected(damaged("eff_scale",
                          [](hid_t f) {
                            H5Adelete(f, "effective_scale");
                            const double v = 0.5;
                            const hid_t s = H5Screate(H5S_SCALAR);
                            const hid_t a =
                                H5Acreate2(f, "effective_scale", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
                            H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
                            H5Aclose(a);
                            H5Sclose(s);
                          }),
                  "effective_scale: is 0.5 but the problem implies 0.25");
}

TEST(Malformed, AFifoIsRefusedWithoutHanging) {
  const fs::path p = test::scratch("fifo") / "fixture.h5";
  fs::remove(p);
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  // Opening a FIFO blocks until a writer appears: the reader must refuse it from its file type first.
  expect_rejected(p.string(), "file: is not a regular file");
}

}  // namespace
}  // namespace attncheck
