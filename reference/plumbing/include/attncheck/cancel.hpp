// Ctrl-C for long runs: the CLI installs handlers for SIGINT and SIGTERM; the first signal asks the run to stop at
// its next step (verify's next case, generate's next fixture, power's next configuration, property's next
// property), the second ends the process at once, except inside a durable write, which finishes first. A step that
// has not ended 1 s after the first signal (stuck inside a library call) counts as a second signal (SIGALRM).
// Nothing is left half-written either way: every file is written whole to a temporary and renamed (durable_file.hpp).
#pragma once

#include <stdexcept>
#include <string>

namespace attncheck {
inline namespace plumbing {

// Thrown at a step after a signal; the CLI exits 128 + signal (130 for SIGINT, 143 for SIGTERM).
struct Cancelled : std::runtime_error {
  int signal;
  Cancelled(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
};

void install_cancel_handlers();  // SIGINT and SIGTERM; idempotent
int cancel_signal();             // 0, or the first signal received
// Throws Cancelled when a signal has arrived; `next` names the step that will not be started.
void throw_if_cancelled(const std::string& next = "");

// While one of these lives, a second signal does not end the process; it ends when the last one is destroyed.
// durable_file.cpp holds one from creating a temporary until its rename (or its removal after a failure).
class CancelDeferred {
 public:
  CancelDeferred();
  ~CancelDeferred();
  CancelDeferred(const CancelDeferred&) = delete;
  CancelDeferred& operator=(const CancelDeferred&) = delete;
};

}  // namespace plumbing
}  // namespace attncheck
