// libFuzzer target: one input is the bytes of an .npz file (a zip of .npy members, stored or deflated), parsed the
// way `compare --actual x.npz` and `import` parse users' files. The contract is std::invalid_argument naming the
// file and member; a crash, a sanitizer report, a hang or another exception type is a finding. tools/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "attncheck/user_arrays.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)attncheck::parse_npz(std::string(reinterpret_cast<const char*>(data), size), "fuzz.npz", uint64_t{64} << 20);
  } catch (const std::invalid_argument&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse_npz threw %s, not std::invalid_argument\n", e.what());
    std::abort();
  }
  return 0;
}
