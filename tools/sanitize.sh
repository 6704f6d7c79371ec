#!/usr/bin/env bash
# Sanitizer CI mode: tools/sanitize.sh [ctest args...]. Builds build-asan/ once with ASan + UBSan (gcc,
# ATTNCHECK_SANITIZE=ON, no CUDA/cuDNN) and runs the ctest labels reference, golden, cli, hostile, isolation,
# property, power, diagnose and python under it, the last five with the fixed subset below ($skip).
# On request, other labels, whole: tools/sanitize.sh --labels 'isolation|power' [ctest args...] builds what those labels'
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
labels='^(reference|golden|cli|hostile|isolation|property|power|diagnose|python)$'
# Left out of CI's run, to keep it within CI's time (docs/hardening.md "Sanitizers" says why each, and what still
# covers its code): the selftests and power runs through isolated plugins, the mutant-diagnosis table, and the
# power and diagnose tests that repeat their checks on large grids (1k-128k keys). Each took 30-280 s under ASan
# (PowerGrid.NoFalseAlarmAndNoFaultMissedAt8kKeys, ~70 CPU-s in Release, was not tried under ASan). Also left out:
# the benchmark loops (cli.bench.json keeps bench's own code under ASan), the suite run once per shard and the mutant
# table over the golden suite (the whole-suite verify tests run the same readers and kernels once).
# The property suite runs 4 cases per pair (ATTNCHECK_PROPERTY_CASES; the same seeds as its 25-80 in other runs).
skip='^(attncheck_selftest|isolation\.selftest\..*|isolation\.power\..*|isolation\.property\.example|'\
'diagnose\.mutants|Reduce\.(ACutKeepsWhatEveryKeptRowSees|EveryMutantsFailureReducesToASmallCaseWithTheSameDiagnosis|'\
'VarlenFailuresReduceToOneSequenceWithTheSameDiagnosis)|ModelReach\.(Rope|Mla|ModificationAndCache)FaultsGetTheirTags|'\
'PowerGrid\.(NoFalseAlarm.*|HazardInputsCatchEveryFaultAt1kKeys)|'\
'ToleranceModel\.(SkippedTileAt128kKeysIsCaughtInEveryDtype|ADroppedKeyOfNineTimesAverageWeightAt128kBf16IsCaught|'\
'TinyTermsAbsorbedByA128kKeySumAreCovered)|ContractNoise\.DeclaredRoundingsPassOnEveryValueDistribution|'\
'BackwardPower\.FaultsDetectedCorrectVariantsInsideAtLongContext|'\
'cli\.bench\.(no_input_copy_cpu|no_input_copy_cpu-flash|decode_memory_bound|num_splits|isa_forced)|cli\.backward\.bench|'\
'Verify\.ShardsPartitionTheSuite|SuiteKills\.EveryMutantFailsAGoldenFixtureAndNoCorrectVariantDoes|'\
'ExactCases\.TheSuiteHoldsOneVisibleKeyAndUniformRowsInEveryLowPrecisionDtype)$'
export ATTNCHECK_PROPERTY_CASES=4
# The malformed-input catalogues (tests/hostile: the C++ one and structure_catalogue.py) run each verb on every 4th
# case of a kind (every verb still meets every kind; the structure catalogue's known crashers go through every verb).
export ATTNCHECK_CATALOGUE_STRIDE=4
dir=build-asan cuda=(-DATTNCHECK_CUDA=OFF)
if [ "${1:-}" = --labels ]; then
  [ -n "${2:-}" ] || { echo "sanitize: --labels needs a regex of ctest labels, e.g. 'isolation|power'"; exit 2; }
  labels="^(${2})\$" extra=1 skip='^$'
  unset ATTNCHECK_PROPERTY_CASES ATTNCHECK_CATALOGUE_STRIDE
  shift 2
elif [ "${1:-}" = --cuda-emu ]; then
  # The CUDA kernels on the host SIMT emulation (label cuda), in their own build-asan-cuda/: the emulation on,
  # nvcc off (no device code is built), so CI's build-asan/ never runs the emulator inside the cli/golden tests.
  labels='^(cuda)$' dir=build-asan-cuda cuda=(-DATTNCHECK_CUDA=AUTO -DCMAKE_CUDA_COMPILER=) emu=1 skip='^$'
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
# Only what these labels run (not the cpu, cuda, cudnn or bench tests); the check of test names below makes sure no
# test of these labels is lost because its executable is missing from this list.
targets=(attncheck example_plugin example_plugin_bad_abi example_plugin_buggy example_plugin_failing
         example_plugin_no_entry example_plugin_noweights refuse_threads
         merge_plugin_correct merge_plugin_nan merge_plugin_sentinel merge_plugin_layout merge_plugin_unnormalised
         merge_plugin_split merge_plugin_base merge_plugin_no_entry
         module_plugin_correct module_plugin_qkv_order module_plugin_head_split module_plugin_out_bias
         module_plugin_no_entry
         test_reference test_neg_inf_bias test_contract test_backward_reference
         test_fixture_io test_generate test_suite_coverage test_suite_kills test_exact_cases test_backward_fixture
         test_cli test_cli_errors test_malformed test_plugin test_run_impl test_heatmap test_inspect_png
         test_hostile_storage test_hostile_durable test_hostile_threads test_hostile_budget test_hostile_catalogue
         test_hostile_cli_edges test_hostile_cancel replay_readers replay_npz replay_worker replay_parsers
         example_plugin_bf16p example_plugin_bf16p_undeclared example_plugin_bwd_no_d example_plugin_v1
         example_plugin_zero example_plugin_no_max_logit example_plugin_max_logit_bug example_plugin_alibi_sign
         example_plugin_rope_interleave example_plugin_no_mods example_plugin_partial_as_full
         example_plugin_mla_v_stride example_plugin_kv_scale_group0 hostile_abort
         hostile_alloc hostile_crash hostile_crash_backward hostile_exit0 hostile_hang hostile_oob hostile_oob_backward
         hostile_write_input
         test_abi test_worker_json test_compare_policy test_properties test_regression test_backward_selftest
         test_tolerance_model test_contract_noise test_sampled_rows test_backward_power test_scale_probe
         test_poison_probe test_mask_edges test_no_signature test_model_reach test_paged_diagnosis
         test_compare_diagnose test_reduce diagnose_validate)
if [ -n "${emu:-}" ]; then
  targets=(attncheck test_cuda_emu test_cuda_kernels test_cuda_backward test_cuda_merge test_emu_guard test_cuda_mods)
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
# One goal for the whole list (CMakeLists.txt, ATTNCHECK_TARGET_SET): named one by one, Make builds them in turn.
cmake $dir -DATTNCHECK_TARGET_SET="$(IFS=';'; echo "${targets[*]}")" >>$dir/configure.log 2>&1 \
  || { cat $dir/configure.log; exit 1; }
cmake --build $dir -j"$(nproc)" --target attncheck_target_set >$dir/build.log 2>&1 \
  || { tail -60 $dir/build.log; exit 1; }
built=$(date +%s)

supp=$PWD/tools/sanitizers
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1:verify_asan_link_order=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp
export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
# verify_asan_link_order=0: tests/hostile's thread shim is LD_PRELOADed ahead of libasan on purpose.
# gtest_discover_tests lists a test only once its executable is built: every test of these labels in the release
# build (build/, made by tools/bootstrap.sh before this in CI) must be listed in build-asan/ too, except those of
# what build-asan/ leaves out: the CUDA and cuDNN implementations (names with cuda/cudnn) and the CUDA emulator's
# bounds guard (EmuGuard), which tools/sanitize.sh --cuda-emu runs.
names() { ctest --test-dir "$1" -N -L "$labels" | sed -n 's/^ *Test *#[0-9]*: //p' | sort; }
if [ -d build ]; then
  lost=$(comm -23 <(names build) <(names $dir) | grep -Eiv 'cuda|cudnn|^EmuGuard\.' || true)
  if [ -n "$lost" ] && [ -n "${extra:-}" ]; then
    echo "sanitize: in build/ but not built in $dir/, not run:"
    echo "$lost" | sed 's/^/  /'
  elif [ -n "$lost" ]; then
    echo "sanitize: tests of $labels in build/ but not in $dir/ (an executable missing from the target list in" \
         "tools/sanitize.sh?):"
    echo "$lost" | sed 's/^/  /'
    exit 1
  fi
  # The tests this build cannot have are listed, never left out silently.
  comm -23 <(names build) <(names $dir) | grep -Ei 'cuda|cudnn|^EmuGuard\.' | sed 's/^/  /' \
    | { grep . && echo "sanitize: the tests above are in build/ but not in $dir/ (nvcc, cuDNN or the emulator), not run here" || true; }
fi
# A plugin a test loads is built only when it is on the target list: each one named in a test's command must exist.
missing=$(ctest --test-dir $dir -N -L "$labels" -E "$skip" --show-only=json-v1 | python3 -c '
import json, os, re, sys
built = os.path.abspath(sys.argv[1]) + "/"
for t in json.load(sys.stdin)["tests"]:
    for a in t.get("command", []):
        for so in re.findall(r"[^ ;=]+\.so\b", a):
            if so.startswith(built) and not os.path.exists(so): print(t["name"] + ": " + so)' $dir)
if [ -n "$missing" ]; then
  echo "sanitize: plugins these tests load were not built in $dir/ (a target missing from the list in tools/sanitize.sh?):"
  echo "$missing" | sed 's/^/  /'
  exit 1
fi
ctest --test-dir $dir --output-on-failure -j"$(nproc)" -L "$labels" -E "$skip" "$@"
# The emulator's bounds guard (test_emu_guard) is labelled isolation; CI's build-asan/ cannot build it.
[ -z "${emu:-}" ] || ctest --test-dir $dir --output-on-failure -j"$(nproc)" -R '^EmuGuard\.' "$@"
echo "sanitize: build $((built - start)) s, tests $(($(date +%s) - built)) s"
