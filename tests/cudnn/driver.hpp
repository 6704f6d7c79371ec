// Makes the CUDA driver library loadable for the deviceless cuDNN tests: the real libcuda.so.1 when installed,
// otherwise the toolkit's stub (soname libcuda.so.1, path from configure time). cuDNN then finds it by soname.
#pragma once

#include <dlfcn.h>

#include <string>

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
