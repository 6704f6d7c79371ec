#!/usr/bin/env bash
# Sanitizer CI mode: tools/sanitize.sh [ctest args...]. Builds build-asan/ once with ASan + UBSan (gcc,
# ATTNCHECK_SANITIZE=ON, no CUDA/cuDNN) and runs the ctest labels reference, golden, cli and hostile under it.
# On request, other labels: tools/sanitize.sh --labels 'isolation|power' [ctest args...] builds what those labels'
# tests run (found from the release build's test list, build/) and runs them; docs/hardening.md has what ran green.
# Any report fails: ASan halts on the first error, UBSan is -fno-sanitize-recover, LeakSanitizer exits non-zero.
# Third-party reports are suppressed only through the commented files in tools/sanitizers/. .ci/run calls it after
# the fuzz step. A unity build (CMAKE_UNITY_BUILD) and non-PIE executables keep it within CI's budget: the
# measured cost is in docs/hardening.md. tools/sanitize.sh --tsan [gtest args] is the separate ThreadSanitizer run
# (tools/sanitizers/tsan.sh, build-tsan/); tools/sanitize.sh --cuda-emu [ctest args] runs the label cuda (the CUDA
# kernels on the host emulation, whose fiber switches are announced to ASan) in its own build-asan-cuda/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" != --tsan ] || { shift; exec tools/sanitizers/tsan.sh "$@"; }
start=$(date +%s)
labels='^(reference|golden|cli|hostile)$'
dir=build-asan cuda=(-DATTNCHECK_CUDA=OFF)
if [ "${1:-}" = --labels ]; then
  [ -n "${2:-}" ] || { echo "sanitize: --labels needs a regex of ctest labels, e.g. 'isolation|power'"; exit 2; }
  labels="^(${2})\$" extra=1
  shift 2
elif [ "${1:-}" = --cuda-emu ]; then
  # The CUDA kernels on the host SIMT emulation (label cuda), in their own build-asan-cuda/: the emulation on,
  # nvcc off (no device code is built), so CI's build-asan/ never runs the emulator inside the cli/golden tests.
  labels='^(cuda)$' dir=build-asan-cuda cuda=(-DATTNCHECK_CUDA=AUTO -DCMAKE_CUDA_COMPILER=) emu=1
  shift
fi
mkdir -p $dir
CC=gcc CXX=g++ cmake -S . -B $dir -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DATTNCHECK_SANITIZE=ON "${cuda[@]}" -DATTNCHECK_CUDNN=OFF -DCMAKE_UNITY_BUILD=ON \
  >$dir/configure.log 2>&1 \
  || { cat $dir/configure.log; exit 1; }
if [ -n "${emu:-}" ]; then
  grep -q "device kernels (nvcc) OFF, host emulation ON" $dir/configure.log \
    || { grep "attncheck CUDA" $dir/configure.log; echo "sanitize: --cuda-emu needs the host emulation on and nvcc off"; exit 1; }
fi
# Only what the four labels run (not the cpu, property, power, diagnose or isolation tests); the test count check
# below makes sure no test of these labels is lost because its executable is missing from this list.
targets=(attncheck example_plugin example_plugin_bad_abi example_plugin_buggy example_plugin_failing
         example_plugin_no_entry example_plugin_noweights refuse_threads
         merge_plugin_correct merge_plugin_nan merge_plugin_sentinel merge_plugin_layout merge_plugin_unnormalised
         merge_plugin_split merge_plugin_base merge_plugin_no_entry
         module_plugin_correct module_plugin_qkv_order module_plugin_head_split module_plugin_out_bias
         module_plugin_no_entry
         test_reference test_neg_inf_bias test_contract test_backward_reference
         test_fixture_io test_generate test_suite_v2 test_suite_kills test_exact_cases test_backward_fixture
         test_cli test_cli_errors test_malformed test_plugin test_run_impl test_heatmap test_inspect_png
         test_hostile_storage test_hostile_durable test_hostile_threads test_hostile_budget test_hostile_catalogue
         test_hostile_cli_edges test_hostile_cancel replay_readers replay_npz replay_worker replay_parsers)
if [ -n "${emu:-}" ]; then
  targets=(attncheck test_cuda_emu test_cuda_kernels test_cuda_backward test_emu_guard)
elif [ -n "${extra:-}" ]; then
  # Every executable or library of build/ that one of these tests names on its command line (tests that reach
  # attncheck or a plugin through a compile definition get them from the list above).
  [ -d build ] || { echo "sanitize: --labels needs the release build in build/ (tools/bootstrap.sh) to find the tests"; exit 2; }
  known=$(cmake --build build-asan --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
  while read -r t; do
    grep -qx "$t" <<<"$known" && targets+=("$t")
  done < <(ctest --test-dir build -N -L "$labels" --show-only=json-v1 | python3 -c '
import json, os, sys
for t in json.load(sys.stdin)["tests"]:
    for a in t.get("command") or []:
        if a.startswith(os.path.abspath("build") + "/") and os.path.isfile(a):
            n = os.path.basename(a)
            print(n[3:-3] if n.startswith("lib") and n.endswith(".so") else n)' | sort -u)
fi
cmake --build $dir -j"$(nproc)" --target "${targets[@]}" >$dir/build.log 2>&1 \
  || { tail -60 $dir/build.log; exit 1; }
built=$(date +%s)

supp=$PWD/tools/sanitizers
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1:verify_asan_link_order=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp
export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
# verify_asan_link_order=0: tests/hostile's thread shim is LD_PRELOADed ahead of libasan on purpose.
# gtest_discover_tests lists a test only once its executable is built: the release build (build/, made by
# tools/bootstrap.sh before this in CI) must not list more tests in these labels than build-asan/.
count() { ctest --test-dir "$1" -N -L "$labels" | sed -n 's/^Total Tests: //p'; }
names() { ctest --test-dir "$1" -N -L "$labels" | sed -n 's/^ *Test *#[0-9]*: //p' | sort; }
if [ -d build ] && [ "$(count build)" != "$(count $dir)" ]; then
  if [ -z "${extra:-}${emu:-}" ]; then
    echo "sanitize: build/ has $(count build) tests in $labels, build-asan/ $(count build-asan): an executable is" \
         "missing from the target list in tools/sanitize.sh"
    exit 1
  fi
  # On request, the tests of what this build leaves out (CUDA and cuDNN are off) are listed, never run silently.
  echo "sanitize: in build/ but not in $dir/ (built only with nvcc or cuDNN), not run:"
  comm -23 <(names build) <(names $dir) | sed 's/^/  /'
fi
ctest --test-dir $dir --output-on-failure -j"$(nproc)" -L "$labels" "$@"
# The emulator's bounds guard (test_emu_guard) is labelled isolation; CI's build-asan/ cannot build it.
[ -z "${emu:-}" ] || ctest --test-dir $dir --output-on-failure -j"$(nproc)" -R '^EmuGuard\.' "$@"
echo "sanitize: build $((built - start)) s, tests $(($(date +%s) - built)) s"
