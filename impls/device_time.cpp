// Per-thread store of the last device run's kernel time and note (attncheck/device_time.hpp).
#include "attncheck/device_time.hpp"

#include <utility>

namespace attncheck {
namespace {
thread_local double t_seconds = -1.0;
thread_local std::string t_note;
}  // namespace

double last_device_seconds() { return t_seconds; }
const std::string& last_device_note() { return t_note; }
void record_device_seconds(double seconds, std::string note) {
  t_seconds = seconds;
  t_note = std::move(note);
}

}  // namespace attncheck
