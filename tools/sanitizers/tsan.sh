#!/usr/bin/env bash
# ThreadSanitizer on attncheck's threaded code: tools/sanitize.sh --tsan [GTEST_ARGS...] (on request, not in CI).
# Builds build-tsan/ (gcc, -fsanitize=thread, ATTNCHECK_TSAN=ON, no CUDA or cuDNN) with the test programs of the
# thread pool (run_on_threads and the reference's parallel_rows: test_reference) and of the threaded CPU
# implementations (cpu and cpu-flash forward: test_cpu; backward: test_backward_cpu, both on parallel_tasks), and
# runs each with more threads than this machine has cores (ATTNCHECK_THREADS=4), so workers really interleave.
# Any report fails: TSan halts on the first one (exit 66). GTEST_ARGS go to every program, e.g.
# --gtest_filter='CpuDeterminism.*'. What ran and what it found: docs/hardening.md, "ThreadSanitizer".
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
mkdir -p build-tsan
CC=gcc CXX=g++ cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DATTNCHECK_TSAN=ON -DATTNCHECK_CUDA=OFF -DATTNCHECK_CUDNN=OFF -DCMAKE_UNITY_BUILD=ON \
  >build-tsan/configure.log 2>&1 \
  || { cat build-tsan/configure.log; exit 1; }
programs=(test_reference test_cpu test_backward_cpu)
cmake --build build-tsan -j"$(nproc)" --target "${programs[@]}" >build-tsan/build.log 2>&1 \
  || { tail -60 build-tsan/build.log; exit 1; }
built=$(date +%s)
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
export ATTNCHECK_THREADS=4
rc=0
for p in "${programs[@]}"; do
  t0=$(date +%s)
  if build-tsan/tests/"$p" --gtest_brief=1 "$@" >build-tsan/"$p".log 2>&1; then
    echo "tsan: $p: $(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests*\./\1 tests/p' build-tsan/"$p".log) passed, no report ($(($(date +%s) - t0)) s)"
  else
    rc=1
    tail -80 build-tsan/"$p".log
    echo "tsan: $p: FAILED (a ThreadSanitizer report or a failing test above; whole log: build-tsan/$p.log)"
  fi
done
echo "tsan: build $((built - start)) s, tests $(($(date +%s) - built)) s"
exit $rc
