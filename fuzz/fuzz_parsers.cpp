// libFuzzer target for the CLI's text parsers: the first input byte picks one, the rest is its text — a suite spec
// (`generate --spec`, `verify --spec`), a case name (what `--filter` matches and `parse_name` rebuilds a problem
// from), a precision contract (`--contract`), a baseline report (`--baseline`), a memory or work budget
// (`--max-memory`, `--max-work`). The contract is std::invalid_argument naming the input; a crash, a sanitizer
// report, a hang or another exception type is a finding. tools/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "attncheck/budget.hpp"
#include "attncheck/contract.hpp"
#include "attncheck/problem.hpp"
#include "attncheck/suite.hpp"
#include "baseline.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const unsigned which = data[0] % 5;
  try {
    switch (which) {
      case 0: (void)attncheck::parse_suite(text, "fuzz.json"); break;
      case 1: (void)attncheck::parse_name(text); break;
      case 2:
        for (attncheck::DType t : {attncheck::DType::f16, attncheck::DType::bf16, attncheck::DType::e4m3})
          (void)attncheck::contract_from_string(text, t);
        break;
      case 3: (void)attncheck::baseline::parse_report(text, "fuzz.json"); break;
      case 4:
        (void)attncheck::parse_bytes("--max-memory", text), (void)attncheck::parse_flops("--max-work", text);
        break;
    }
  } catch (const std::invalid_argument&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parser %u threw %s, not std::invalid_argument\n", which, e.what());
    std::abort();
  }
  return 0;
}
