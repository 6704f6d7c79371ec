// Makes the CUDA driver library loadable for the deviceless cuDNN tests: the real libcuda.so.1 when installed,
// otherwise the toolkit's stub (soname libcuda.so.1, path from configure time). cuDNN then finds it by soname.
#pragma once

#include <dlfcn.h>

#include <string>

#include <gtest/gtest.h>

#include "backend_desc.hpp"

// Loads the driver once; returns what went wrong, empty when loaded.
inline const std::string& driver_load_error() {
  static const std::string error = [] {
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) return std::string();
    std::string why = std::string("libcuda.so.1: ") + dlerror();
#ifdef ATTNCHECK_CUDA_DRIVER_STUB
    if (dlopen(ATTNCHECK_CUDA_DRIVER_STUB, RTLD_NOW | RTLD_GLOBAL)) return std::string();
    why += std::string("; stub ") + ATTNCHECK_CUDA_DRIVER_STUB + ": " + dlerror();
#else
    why += "; no driver stub was found at configure time (ATTNCHECK_CUDA_DRIVER_STUB)";
#endif
    return why;
  }();
  return error;
}

// Building an execution plan for a named GPU that is not this machine's may stop only at the last step, loading the
// compiled kernel: into the toolkit's stub driver ("cuLibraryLoadData"), or into a real driver whose GPU is another
// architecture ("no kernel image is available", e.g. the sm_80 plan on an H200).
inline void expect_stopped_at_kernel_load(const attncheck::cudnn::CudnnError& e) {
  const std::string what = e.what();
  EXPECT_EQ(e.status(), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) << what;
  EXPECT_TRUE(what.find("cuLibraryLoadData") != std::string::npos ||
              what.find("no kernel image is available") != std::string::npos)
      << what;
}
