// The one switch between the two compilers of the kernel headers: nvcc sees the CUDA runtime, g++ sees the host
// SIMT emulation (emu/simt.hpp), which provides threadIdx, __shared__, __syncthreads and the warp collectives.
// Kernel code must not contain inline PTX (mma, ldmatrix, cp.async): it could not be emulated or verified here.
#pragma once

// Kernels and everything that names them live in an inline namespace that differs per compiler: the nvcc host
// pass emits launch stubs with the kernels' names, and the g++ build emits the emulated kernels; with the same
// mangled names the linker would keep one of them for both backends (an ODR clash that sent `cuda-emulated` to
// the device stubs). Plain data (AttnParams) stays outside, since both backends exchange it.
#if defined(__CUDACC__)
#define ATTNCHECK_KERNEL_NS nvcc_build
#else
#define ATTNCHECK_KERNEL_NS emulated_build
#endif

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define ATTNCHECK_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
// On the device a global access is not checked (compute-sanitizer does that); the emulation checks every one.
#define ATTNCHECK_CHECK_GLOBAL(base, index, elem_bytes, store) ((void)0)
#else
#include "../emu/simt.hpp"
#define ATTNCHECK_CHECK_GLOBAL(base, index, elem_bytes, store) \
  ::attncheck::emu::check_global(base, index, elem_bytes, store)
#endif
