# Resolves ATTNCHECK_CUDA (AUTO/ON/OFF) into two parts, used by impls/cuda/:
#   ATTNCHECK_CUDA_DEVICE    the kernels compiled by nvcc for sm_80 and sm_90 (`cuda` backend). Needs nvcc.
#   ATTNCHECK_CUDA_EMULATED  the same kernel headers compiled by g++ on the host SIMT emulation (`cuda-emulated`).
#                            Needs only the toolkit's headers (cuda_fp16.h, cuda_bf16.h, cuda_runtime.h) and
#                            Boost.Context, not nvcc: AUTO builds it whenever those are found.
# ON requires nvcc (configure error otherwise); AUTO quietly builds what it can; OFF builds neither.
# enable_language(CUDA) must happen here, in the top directory: every executable links the CUDA objects.
include_guard(GLOBAL)

set(ATTNCHECK_CUDA_DEVICE OFF)
set(ATTNCHECK_CUDA_EMULATED OFF)
if(NOT ATTNCHECK_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)  # SASS for sm_80 and sm_90, PTX of sm_90 for newer devices
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(ATTNCHECK_CUDA_DEVICE ON)
  elseif(ATTNCHECK_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ATTNCHECK_CUDA=ON but no working CUDA compiler (nvcc) was found. Put nvcc on PATH "
                        "(e.g. /usr/local/cuda/bin), or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc, or configure "
                        "with -DATTNCHECK_CUDA=AUTO (emulation only) or OFF.")
  else()
    find_package(CUDAToolkit QUIET)  # headers only: the emulation does not need nvcc
  endif()
  find_path(ATTNCHECK_CUDA_INCLUDE_DIR cuda_fp16.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_package(Boost 1.66 QUIET COMPONENTS context)
  if(ATTNCHECK_CUDA_INCLUDE_DIR AND TARGET Boost::context)
    set(ATTNCHECK_CUDA_EMULATED ON)
  elseif(ATTNCHECK_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ATTNCHECK_CUDA=ON: the host emulation needs the CUDA headers (cuda_fp16.h: "
                        "'${ATTNCHECK_CUDA_INCLUDE_DIR}') and Boost.Context (Debian: libboost-context-dev).")
  endif()
  message(STATUS "attncheck CUDA: device kernels (nvcc) ${ATTNCHECK_CUDA_DEVICE}, "
                 "host emulation ${ATTNCHECK_CUDA_EMULATED}")
endif()
