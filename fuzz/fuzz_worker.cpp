// libFuzzer target: one input is a worker's message line (docs/worker-protocol.md), read the way the client reads a
// hello: JSON, then capabilities, declarations and a problem. A worker is another program, so its messages are
// untrusted. The contract is worker::ProtocolError naming the message and field (the client turns a JSON parse error
// into one); a crash, a sanitizer report, a hang or another exception type is a finding. tools/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "worker_json.hpp"

namespace w = attncheck::worker;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  w::json j;
  try {
    j = w::json::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const w::json::exception&) {  // what the client turns into a ProtocolError
    return 0;
  }
  // The whole message and, when it is an object, each part the client reads from a hello.
  std::vector<const w::json*> parts{&j};
  if (j.is_object())
    for (const char* key : {"capabilities", "declarations", "problem"})
      if (j.contains(key)) parts.push_back(&j[key]);
  for (const w::json* part : parts) {
    try {
      (void)w::capabilities_from_json(*part, "hello");
    } catch (const w::ProtocolError&) {
    }
    try {
      (void)w::declarations_from_json(*part, "hello", attncheck::Declarations{});
    } catch (const w::ProtocolError&) {
    }
    try {
      (void)w::problem_from_json(*part, "run 1");
    } catch (const w::ProtocolError&) {
    }
    try {
      (void)w::str_field(*part, "reply", "type"), (void)w::int_field(*part, "reply", "id");
    } catch (const w::ProtocolError&) {
    }
  }
  return 0;  // anything else thrown ends in std::terminate: libFuzzer records the input
}
