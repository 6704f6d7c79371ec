#!/usr/bin/env bash
# Fuzz the fixture and candidate readers with libFuzzer: tools/fuzz.sh [SECONDS] (default 60; CI runs 60, run it
# for hours by hand). Builds build-fuzz/ with clang (ATTNCHECK_FUZZ=ON: ASan+UBSan, every library instrumented),
# seeds from fuzz/corpus (small golden fixtures and a candidate), keeps what it learns in build-fuzz/corpus.
# A crash, sanitizer report, hang (> 10 s) or exception other than std::invalid_argument exits non-zero and leaves
# the input in build-fuzz/findings/; add it to tests/hostile/catalogue_cases.cpp as a catalogue case.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
mkdir -p build-fuzz/corpus build-fuzz/findings
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNCHECK_FUZZ=ON \
  -DATTNCHECK_CUDA=OFF -DATTNCHECK_CUDNN=OFF -DBUILD_TESTING=OFF >build-fuzz/configure.log 2>&1 \
  || { cat build-fuzz/configure.log; exit 1; }
cmake --build build-fuzz -j"$(nproc)" --target fuzz_readers >build-fuzz/build.log 2>&1 || { tail -40 build-fuzz/build.log; exit 1; }
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Leaks are findings, except those wholly inside HDF5 (fuzz/lsan.supp says which and why).
export LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0
build-fuzz/fuzz/fuzz_readers -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/findings/ build-fuzz/corpus fuzz/corpus 2>build-fuzz/fuzz.log \
  || { tail -60 build-fuzz/fuzz.log; echo "fuzz: finding in build-fuzz/findings/"; exit 1; }
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ +DONE" build-fuzz/fuzz.log || true
echo "fuzz: ${secs} s, no finding"
