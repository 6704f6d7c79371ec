// The device time of the calling thread's last run of a device implementation, timed with CUDA events around its
// kernels (attncheck/device_timer.hpp), for `bench`: the kernels alone, without the uploads, downloads and plan
// building that the wall clock of Impl::run also counts. Negative when no device run recorded one. The note says
// what ran where the implementation chose it at run time (cudnn: the engine its heuristics proposed).
#pragma once

#include <string>

namespace attncheck {

double last_device_seconds();
const std::string& last_device_note();
void record_device_seconds(double seconds, std::string note = "");

}  // namespace attncheck
