// The one switch between the two compilers of the kernel headers: nvcc sees the CUDA runtime, g++ sees the host
// SIMT emulation (emu/simt.hpp), which provides threadIdx, __shared__, __syncthreads and the warp collectives.
// Kernel code must not contain inline PTX (mma, ldmatrix, cp.async): it could not be emulated or verified here.
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define ATTNCHECK_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#else
#include "../emu/simt.hpp"
#endif
