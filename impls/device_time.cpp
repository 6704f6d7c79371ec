// Per-thread store of the last device run's kernel time (attncheck/device_time.hpp).
#include "attncheck/device_time.hpp"

namespace attncheck {
namespace {
thread_local double t_seconds = -1.0;
}  // namespace

double last_device_seconds() { return t_seconds; }
void record_device_seconds(double seconds) { t_seconds = seconds; }

}  // namespace attncheck
