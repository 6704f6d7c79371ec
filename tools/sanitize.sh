#!/usr/bin/env bash
# Sanitizer CI mode: tools/sanitize.sh [ctest args...]. Builds build-asan/ once with ASan + UBSan (gcc,
# ATTNCHECK_SANITIZE=ON, no CUDA/cuDNN) and runs the ctest labels reference, golden, cli and hostile under it.
# Any report fails: ASan halts on the first error, UBSan is -fno-sanitize-recover, LeakSanitizer exits non-zero.
# Third-party reports are suppressed only through the commented files in tools/sanitizers/. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
mkdir -p build-asan
CC=gcc CXX=g++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DATTNCHECK_SANITIZE=ON -DATTNCHECK_CUDA=OFF -DATTNCHECK_CUDNN=OFF >build-asan/configure.log 2>&1 \
  || { cat build-asan/configure.log; exit 1; }
# Every target: gtest_discover_tests lists a test only once its executable is built, so building a hand-picked
# subset could drop tests silently.
cmake --build build-asan -j"$(nproc)" >build-asan/build.log 2>&1 || { tail -60 build-asan/build.log; exit 1; }
built=$(date +%s)

supp=$PWD/tools/sanitizers
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=0:verify_asan_link_order=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp
export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
# verify_asan_link_order=0: tests/hostile's thread shim is LD_PRELOADed ahead of libasan on purpose.
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L '^(reference|golden|cli|hostile)$' "$@"
echo "sanitize: build $((built - start)) s, tests $(($(date +%s) - built)) s"
