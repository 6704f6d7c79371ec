// libFuzzer target: one input is the bytes of an HDF5 file, read as a fixture (header, full read,
// gradients) and as a candidate, the way `attncheck verify/compare/inspect` read files other people wrote. The
// readers' contract is std::invalid_argument (exit 2 from the CLI); a crash, a sanitizer report, a hang or
// another exception type is a finding. Built and run by tools/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "attncheck/budget.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/fixture_gradients.hpp"

namespace {

std::string g_path;

attncheck::Problem tiny_problem() {
  attncheck::Problem p;
  p.B = p.Hq = p.Hkv = p.Lq = p.Lk = p.Dqk = p.Dv = 1;
  p.dtype = attncheck::DType::f32;
  p.want_lse = true;
  return p;
}

// The readers may throw only std::invalid_argument; anything else aborts, so libFuzzer records the input.
template <class F>
void expect_only_invalid_argument(const char* what, F fn) {
  try {
    fn();
  } catch (const std::invalid_argument&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw %s, not std::invalid_argument\n", what, e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Small budgets: a file may declare any shape, and the budget is what must stop it.
  attncheck::set_budget({uint64_t{64} << 20, 1e9});
  attncheck::set_read_isolation(false);  // the library's own crashes and hangs are the findings here
  const char* dir = std::getenv("TMPDIR");
  g_path = std::string(dir ? dir : "/tmp") + "/attncheck_fuzz_" + std::to_string(getpid()) + ".h5";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(g_path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  attncheck::Problem p = tiny_problem();
  expect_only_invalid_argument("read_fixture_header", [&] { p = attncheck::read_fixture_header(g_path).problem; });
  expect_only_invalid_argument("read_fixture", [&] { (void)attncheck::read_fixture(g_path); });
  for (const attncheck::Problem& q : {tiny_problem(), p}) {
    expect_only_invalid_argument("read_candidate", [&] { (void)attncheck::read_candidate(g_path, q); });
    expect_only_invalid_argument("read_candidate_gradients",
                                 [&] { (void)attncheck::read_candidate_gradients(g_path, q); });
  }
  return 0;
}
