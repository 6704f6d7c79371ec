// SIGINT / SIGTERM handling for cancel.hpp. The handler only stores, loads and calls async-signal-safe functions
// (write, alarm, _exit): the run itself notices the signal at its next step and unwinds normally; SIGALRM, armed by
// the first signal, ends a run whose step does not end within 1 s.
#include "attncheck/cancel.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace attncheck {
inline namespace plumbing {
namespace {
std::atomic<int> g_signal{0};    // the first signal received
std::atomic<int> g_deferred{0};  // live CancelDeferred objects
std::atomic<int> g_exit_now{0};  // a second signal arrived while a write was deferring it

// How long the current step may take to end after the first signal before the process ends anyway.
constexpr unsigned kGraceSeconds = 1;

void say(const char* s) { [[maybe_unused]] ssize_t n = ::write(2, s, std::strlen(s)); }

void on_signal(int sig) {
  int none = 0;
  if (sig != SIGALRM && g_signal.compare_exchange_strong(none, sig)) {
    say("\nattncheck: interrupted: stopping after the current step (again to stop at once; at once anyway if the "
        "step has not ended within 1 s)\n");
    // A step can be stuck inside a library call that never returns to look at the flag (a hung read, a plugin's
    // kernel): the alarm acts as the second signal.
    ::alarm(kGraceSeconds);
    return;
  }
  if (sig == SIGALRM && g_signal.load() == 0) return;  // not ours: no signal asked to stop
  // Second signal: store first, then look at the writers (CancelDeferred's destructor does the reverse), so that
  // one of the two always sees the other.
  g_exit_now.store(1);
  if (g_deferred.load() == 0) {
    say(sig == SIGALRM ? "attncheck: stopped (the current step did not end within 1 s)\n" : "attncheck: stopped\n");
    ::_exit(128 + g_signal.load());
  }
}
}  // namespace

void install_cancel_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and waits continue; the run checks the flag between steps
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGALRM, &sa, nullptr);
}

int cancel_signal() { return g_signal.load(); }

void throw_if_cancelled(const std::string& next) {
  const int sig = g_signal.load();
  if (sig == 0) return;
  throw Cancelled(sig, std::string("interrupted by ") +
                           (sig == SIGINT    ? "SIGINT"
                            : sig == SIGTERM ? "SIGTERM"
                                             : "a signal") +
                           (next.empty() ? "" : " before " + next) + "; no report or fixture was left half-written");
}

CancelDeferred::CancelDeferred() { g_deferred.fetch_add(1); }

CancelDeferred::~CancelDeferred() {
  if (g_deferred.fetch_sub(1) == 1 && g_exit_now.load()) {
    say("attncheck: stopped\n");
    ::_exit(128 + g_signal.load());
  }
}

}  // namespace plumbing
}  // namespace attncheck
