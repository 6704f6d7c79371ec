// Times device work between two CUDA events on the default stream, for `bench`: the kernels alone, without the
// host-side uploads, downloads and plan building that the wall clock of Impl::run also counts.
#pragma once

#include <cuda_runtime.h>

namespace attncheck {

class DeviceTimer {
 public:
  DeviceTimer() {
    if (cudaEventCreate(&start_) != cudaSuccess || cudaEventCreate(&stop_) != cudaSuccess) ok_ = false;
  }
  ~DeviceTimer() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
  }
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  void start() { ok_ = ok_ && cudaEventRecord(start_) == cudaSuccess; }
  void stop() { ok_ = ok_ && cudaEventRecord(stop_) == cudaSuccess; }
  // Seconds between start() and stop() once the stop event completed, or -1 when an event call failed (timing is
  // evidence for bench only; a failure here never fails the run itself).
  double seconds() {
    float ms = 0;
    if (!ok_ || cudaEventSynchronize(stop_) != cudaSuccess || cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess)
      return -1.0;
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  bool ok_ = true;
};

}  // namespace attncheck
