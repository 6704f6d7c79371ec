# Project options. ATTNCHECK_CUDA / ATTNCHECK_CUDNN take AUTO, ON or OFF:
#   ON with a missing toolkit is a configure error; AUTO quietly skips; OFF builds and tests everything else.
include_guard(GLOBAL)

function(attncheck_tristate name doc)
  set(${name} AUTO CACHE STRING "${doc} (AUTO, ON, OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" value)
  if(NOT value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF, got '${${name}}'")
  endif()
  set(${name} ${value} PARENT_SCOPE)
endfunction()

attncheck_tristate(ATTNCHECK_CUDA "Build the CUDA kernels (nvcc) and their host emulation")
attncheck_tristate(ATTNCHECK_CUDNN "Build the cuDNN SDPA backend")
string(CONCAT _native_help "Raise the CPU backend's baseline to this machine (-march=native); not needed for "
                           "speed: its kernels dispatch at run time")
option(ATTNCHECK_NATIVE "${_native_help}" OFF)
option(ATTNCHECK_WARNINGS_AS_ERRORS "Treat compiler warnings as errors" OFF)

find_program(ATTNCHECK_CCACHE ccache)
if(ATTNCHECK_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${ATTNCHECK_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${ATTNCHECK_CCACHE})
endif()

# Warnings for our own targets.
function(attncheck_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(ATTNCHECK_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
