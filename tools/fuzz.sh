#!/usr/bin/env bash
# Fuzz attncheck's readers and parsers with libFuzzer: tools/fuzz.sh [SECONDS] (default 60, what CI runs; e.g. 3600
# for an hour). Builds build-fuzz/ with clang (ATTNCHECK_FUZZ=ON: ASan+UBSan, every library instrumented) and runs
# each target of fuzz/CMakeLists.txt in turn: fuzz_readers (HDF5 fixtures and candidates, from memory) for half of
# SECONDS, fuzz_npz, fuzz_worker and fuzz_parsers for a sixth each. Each seeds from its corpus in the tree and keeps
# what it learns in build-fuzz/corpus-<target>. A crash, sanitizer report, hang (> 10 s) or exception outside the
# target's contract exits non-zero and leaves the input in build-fuzz/findings/; add it to the hostile catalogue
# (tests/hostile/catalogue_cases.cpp) or a parser's tests. fuzz_readers checks leaks once, at the end of its run
# (docs/hardening.md, "Fuzzing": HDF5 itself leaks on damaged files, and a check after every such input cost 8x
# the executions); such a report names the allocation, not the input.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
targets=(fuzz_readers fuzz_npz fuzz_worker fuzz_parsers)
mkdir -p build-fuzz/findings
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNCHECK_FUZZ=ON \
  -DATTNCHECK_CUDA=OFF -DATTNCHECK_CUDNN=OFF -DBUILD_TESTING=OFF \
  -DATTNCHECK_TARGET_SET="$(IFS=';'; echo "${targets[*]}")" \
  >build-fuzz/configure.log 2>&1 || { cat build-fuzz/configure.log; exit 1; }
# One goal for the four targets (CMakeLists.txt, ATTNCHECK_TARGET_SET): named one by one, Make builds them in turn.
cmake --build build-fuzz -j"$(nproc)" --target attncheck_target_set >build-fuzz/build.log 2>&1 \
  || { tail -40 build-fuzz/build.log; exit 1; }
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Leaks are findings, except those wholly inside HDF5 (fuzz/lsan.supp says which and why).
export LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0
for t in "${targets[@]}"; do
  case $t in
    fuzz_readers) s=$((secs / 2)) seeds=fuzz/corpus leaks=0 ;;
    *) s=$((secs / 6)) seeds=fuzz/corpus-${t#fuzz_} leaks=1 ;;
  esac
  ((s >= 5)) || s=5
  mkdir -p "build-fuzz/corpus-$t"
  build-fuzz/fuzz/"$t" -max_total_time="$s" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -detect_leaks=$leaks \
    -artifact_prefix=build-fuzz/findings/ "build-fuzz/corpus-$t" "$seeds" 2>"build-fuzz/$t.log" \
    || { tail -60 "build-fuzz/$t.log"; echo "fuzz: $t: finding: the input is in build-fuzz/findings/ (a leak reported at the end of the run comes with its allocation above, not an input)"; exit 1; }
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "build-fuzz/$t.log")
  rate=$(grep -o 'exec/s: [0-9]*' "build-fuzz/$t.log" | tail -1)  # libFuzzer's own figure, after loading the seeds
  echo "fuzz: $t: ${s} s, ${runs:-?} executions (${rate:-exec/s: ?}), no finding"
done
