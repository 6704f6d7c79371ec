// libFuzzer target: one input is the bytes of an HDF5 file, read as a fixture (header, full read,
// gradients) and as a candidate, the way `attncheck verify/compare/inspect` read files other people wrote. The
// readers' contract is std::invalid_argument (exit 2 from the CLI); a crash, a sanitizer report, a hang, another
// exception type or an HDF5 object left open after a read is a finding. The input is read from memory through
// HDF5's core driver (an ImageScope, the path every untrusted read takes), so no file is written per input. Built
// and run by tools/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; leaks: docs/hardening.md, "Fuzzing").
#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "attncheck/budget.hpp"
#include "attncheck/fixture.hpp"
#include "attncheck/fixture_gradients.hpp"
#include "untrusted.hpp"

namespace {

// A name no file has: the readers open the ImageScope's bytes under it.
const std::string g_path = "/proc/attncheck-fuzz-input.h5";

attncheck::Problem tiny_problem() {
  attncheck::Problem p;
  p.B = p.Hq = p.Hkv = p.Lq = p.Lk = p.Dqk = p.Dv = 1;
  p.dtype = attncheck::DType::f32;
  p.want_lse = true;
  return p;
}

// The readers may throw only std::invalid_argument; anything else aborts, so libFuzzer records the input.
// Returns the message of the std::invalid_argument, "" when `fn` returned.
template <class F>
std::string expect_only_invalid_argument(const char* what, F fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw %s, not std::invalid_argument\n", what, e.what());
    std::abort();
  }
  return "";
}

// HDF5 objects open in any file (files, groups, datasets, named datatypes, attributes): none may be left once
// a reader returned or threw. One left open keeps its file's metadata alive for the rest of the process, which
// LeakSanitizer cannot see (HDF5's identifier table still points at it).
ssize_t open_objects() { return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Small budgets: a file may declare any shape, and the budget is what must stop it.
  attncheck::set_budget({uint64_t{64} << 20, 1e9});
  attncheck::set_read_isolation(false);  // the library's own crashes and hangs are the findings here
  // Speed (docs/hardening.md, "Fuzzing"): every open creates HDF5's metadata cache, a ~0.6 MB zeroed block that
  // HDF5's free lists return to malloc at close (list limit 256 kB), so under ASan each open paid fresh pages.
  // Keeping it on the free list costs nothing in coverage. The readers' arithmetic (error scales) runs on one
  // thread: a thread start per input under ASan cost more than the reading.
  H5set_free_list_limits(64 << 20, 16 << 20, -1, -1, -1, -1);
  ::setenv("ATTNCHECK_THREADS", "1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    const attncheck::h5::FileImage image{g_path, std::string(reinterpret_cast<const char*>(data), size)};
    const attncheck::h5::ImageScope scope(image, true);  // one open of the file for all the reads below
    // Every reader is deterministic in (bytes, problem), and each starts the same way: the full read with the
    // header read, every reader with opening the file (Reader::open_file, the only place that names the field
    // "file"). So a call that could only repeat a failure already seen is left out: the full read after a failed
    // header, the candidate reads after a file that did not open, and the second pair when the header's problem
    // is the one the first pair used.
    const attncheck::Problem tiny = tiny_problem();
    std::optional<attncheck::Problem> p;
    const std::string header = expect_only_invalid_argument(
        "read_fixture_header", [&] { p = attncheck::read_fixture_header(g_path).problem; });
    if (p) expect_only_invalid_argument("read_fixture", [&] { (void)attncheck::read_fixture(g_path); });
    const bool opened = header.rfind(g_path + ": file: ", 0) != 0;
    const attncheck::Problem* second = p && p->name() != tiny.name() ? &*p : nullptr;
    for (const attncheck::Problem* q : {&tiny, second}) {
      if (!q || !opened) continue;
      expect_only_invalid_argument("read_candidate", [&] { (void)attncheck::read_candidate(g_path, *q); });
      expect_only_invalid_argument("read_candidate_gradients",
                                   [&] { (void)attncheck::read_candidate_gradients(g_path, *q); });
    }
  }
  if (const ssize_t n = open_objects(); n != 0) {
    std::fprintf(stderr, "the readers left %zd HDF5 objects open (H5Fget_obj_count)\n", n);
    std::abort();
  }
  return 0;
}
