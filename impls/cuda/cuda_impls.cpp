// The CUDA backends for the registry: `cuda` (the kernels compiled by nvcc, on a device; only when nvcc was
// found) and `cuda-emulated` (the same kernel headers compiled by g++ on the host SIMT emulation).
#include "attncheck/impl.hpp"

namespace attncheck {
namespace cuda {
#ifdef ATTNCHECK_CUDA_DEVICE
std::vector<ImplPtr> make_device_impls();  // device.cu
#endif
std::vector<ImplPtr> make_emulated_impls();  // emulated.cpp
}  // namespace cuda

std::vector<ImplPtr> make_cuda_impls() {
  std::vector<ImplPtr> all;
#ifdef ATTNCHECK_CUDA_DEVICE
  for (auto& i : cuda::make_device_impls()) all.push_back(i);
#endif
  for (auto& i : cuda::make_emulated_impls()) all.push_back(i);
  return all;
}

}  // namespace attncheck
