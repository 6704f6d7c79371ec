#!/usr/bin/env bash
# The GPU check: one command, on a machine with an sm_80+ GPU, that runs everything attncheck can say about the
# `cuda` and `cudnn` backends and about PyTorch's and a Triton kernel's attention on that device, and writes one
# JSON and one Markdown summary (plus the step log and the raw reports) into OUT_DIR. A failing step is recorded,
# never fatal: the run always ends with its summary, within the time budget (steps past it are recorded skipped).
#   tools/device-check.sh OUT_DIR                 on the GPU machine, with the bundle tools/device-bundle.sh made
#   tools/device-check.sh --dry-run OUT_DIR       here: builds the bundle, unpacks it elsewhere, checks that every
#                                                 binary's libraries resolve from it, runs the steps that need no
#                                                 device and checks the summary (ctest label device-kit)
# Options: --bundle FILE (default build-device/attncheck-bundle.tar.xz), --build DIR (dry run: the build to bundle,
#          default build),
#          --budget SECONDS (default 420: the steps' share of the 8 minutes the check may take),
#          --steps A,B,... (run only the steps whose names start with one of these; the others are recorded skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dry=0 bundle=build-device/attncheck-bundle.tar.xz build=build budget=420 out="" only=""
while (($#)); do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --bundle) bundle=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --steps) only=$2; shift 2 ;;
    -*) echo "device-check.sh: unknown option '$1'" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: tools/device-check.sh [--dry-run] [--bundle DIR] [--build DIR] [--budget S] OUT_DIR" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/attncheck-device.XXXXXX)
trap 'rm -rf "$work"' EXIT
rm -f "$out"/summary.json "$out"/summary.md "$out"/steps.log "$out"/reports.tar.gz
log=$out/steps.log
steps=$work/steps.jsonl
: >"$steps"
start=$(date +%s)
py=python3

# step NAME TIMEOUT_S CMD...: runs CMD under a timeout, its output appended to steps.log; records the outcome.
step() {
  local name=$1 limit=$2; shift 2
  local now=$(date +%s) rc status sel
  if [ -n "$only" ] && [[ ! $name =~ ^(libraries|list|python-syntax)$ ]]; then
    sel=0
    for p in ${only//,/ }; do [[ $name == "$p"* ]] && sel=1; done
    ((sel)) || { skip "$name" "not selected (--steps $only)"; return; }
  fi
  if ((now - start + 5 > budget)); then
    printf '{"name": "%s", "status": "skipped", "rc": null, "seconds": 0, "note": "time budget of %ss spent"}\n' \
      "$name" "$budget" >>"$steps"
    return
  fi
  ((limit > budget - (now - start))) && limit=$((budget - (now - start)))
  printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" >>"$log"
  if declare -F "$1" >/dev/null; then  # a function of this script: a child bash that has it
    timeout -k 5 "$limit" bash -c "$(declare -f "$1"); $(printf '%q ' "$@")" >>"$log" 2>&1
  else
    timeout -k 5 "$limit" "$@" >>"$log" 2>&1
  fi
  rc=$?
  status=ok
  ((rc != 0)) && status=failed
  ((rc == 124 || rc == 137)) && status=timeout
  printf '===== %s: rc %s in %ss\n' "$name" "$rc" "$(($(date +%s) - now))" >>"$log"
  printf '{"name": "%s", "status": "%s", "rc": %s, "seconds": %s, "note": ""}\n' "$name" "$status" "$rc" \
    "$(($(date +%s) - now))" >>"$steps"
}
skip() {  # skip NAME REASON
  printf '{"name": "%s", "status": "skipped", "rc": null, "seconds": 0, "note": "%s"}\n' "$1" "$2" >>"$steps"
}

# The bundle: the dry run makes one here; either way it is unpacked into a fresh folder, as on the GPU machine.
if ((dry)); then
  tools/device-bundle.sh --build "$build" --out "$work/attncheck-bundle.tar.xz" >>"$log" 2>&1
  rc=$?
  if ((rc == 3)); then echo "device-check.sh: SKIP: the build has no nvcc-built device backend" | tee -a "$log"; exit 77; fi
  ((rc == 0)) || { echo "device-check.sh: building the bundle failed (rc $rc), see $log" >&2; tail -n 20 "$log" >&2; exit 1; }
  bundle=$work/attncheck-bundle.tar.xz
fi
[ -f "$bundle" ] || { echo "device-check.sh: no bundle '$bundle' (make it with tools/device-bundle.sh)" >&2; exit 2; }
packed=$(stat -c %s "$bundle")
unpack() {  # xz where it is installed, else Python's lzma
  if command -v xz >/dev/null; then xz -dc "$1" | tar -C "$2" -xf -
  else $py -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$2"; fi
}
mkdir -p "$work/bundle" && unpack "$bundle" "$work/bundle" || { echo "device-check.sh: cannot unpack '$bundle'" >&2; exit 2; }
bundle=$work/bundle
bin=$bundle/bin
printf '{"packed_bytes": %s, "unpacked_bytes": %s}\n' "$packed" "$(du -sb "$bundle" | cut -f1)" >"$work/bundle.json"

# cuDNN comes from the machine: the nvidia-cudnn wheel next to PyTorch, else the toolkit or the loader's cache.
cudnn_dir=$($py - <<'PY' 2>/dev/null
import glob, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
hits = [p for r in roots for p in glob.glob(r + "/nvidia/**/libcudnn.so.9", recursive=True)]
print(hits[0].rsplit("/", 1)[0] if hits else "")
PY
)
if [ -z "$cudnn_dir" ]; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/libcudnn.so.9" ] && { cudnn_dir=$d; break; }
  done
fi
# Only cuDNN's own libraries go on the loader's path (which outranks the bundle's RUNPATH): a folder that holds
# more (the toolkit's lib64) is reached through links to its libcudnn* alone.
if [ -n "$cudnn_dir" ] && ls "$cudnn_dir" | grep -qv '^libcudnn'; then
  mkdir -p "$work/cudnn" && ln -s "$cudnn_dir"/libcudnn*.so* "$work/cudnn/" && cudnn_dir=$work/cudnn
fi
[ -n "$cudnn_dir" ] && export LD_LIBRARY_PATH=$cudnn_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export bin bundle work py
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

# Where this runs.
{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "dry_run $dry"
  echo "cudnn_dir ${cudnn_dir:-not found}"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader \
    | sed 's/^/gpu /'
  command -v nvcc >/dev/null && echo "nvcc $(nvcc --version | tail -n1)"
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null
  $py -c 'import triton; print("triton", triton.__version__)' 2>/dev/null
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
} >"$work/machine.txt"
cat "$work/machine.txt" >>"$log"

# Every binary's libraries resolve from the bundle or from what the machine provides (C/C++ runtime, cuDNN).
check_libraries() {
  local bad=0 f line
  for f in "$bin"/*; do
    while read -r line; do
      case "$line" in
        *"not found"*) echo "$(basename "$f"): $line"; bad=1 ;;
        *"=> $bundle/"* | *linux-vdso* | *ld-linux*) ;;
        *"=> "/*) lib=${line%% *}
          if [[ ! $lib =~ ^(libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudnn[a-z_]*)\.so ]]; then
            echo "$(basename "$f"): $line (outside the bundle)"; bad=1
          fi ;;
      esac
    done < <(ldd "$f" | sed 's/^[[:space:]]*//')
  done
  echo "libraries: $(ls "$bundle/lib" | wc -l) in the bundle, $(du -sb "$bundle" | cut -f1) bytes in all"
  return $bad
}
step libraries 30 check_libraries
step list 30 bash -c "'$bin/attncheck' list > '$work/list.txt'; rc=\$?; cat '$work/list.txt'; exit \$rc"
step python-syntax 30 $py -m py_compile examples/python/torch_sdpa_worker.py examples/python/triton_attention.py \
  tools/device/torch_bench.py tools/device/torch_cuda_check.py tools/device/summarize.py

if ((dry)); then
  # The bundle's CLI end to end on a few fixtures (the report plumbing the summary reads), and each test binary
  # starts (lists its tests).
  step verify-cpu-flash 120 "$bin/attncheck" verify --impl cpu-flash --fixtures golden/cases --filter 'fp16/*causal*' \
    --report "$work/verify-cpu-flash.json"
  for t in "$bin"/test_*; do step "gtest-list-$(basename "$t")" 30 "$t" --gtest_list_tests; done
  for s in gtest verify-cuda verify-cudnn power long memcheck torch-sdpa python-torch-cuda triton bench; do skip "$s" "dry run: needs a device"; done
else
  gpu_ok=0
  grep -Eq '^cuda +available' "$work/list.txt" && gpu_ok=1
  for t in test_cuda_kernels test_cuda_backward; do
    step "gtest-$t" 60 "$bin/$t" --gtest_filter='*Device*' --gtest_output="json:$work/gtest-$t.json"
  done
  [ -x "$bin/test_cudnn" ] && step gtest-test_cudnn 90 "$bin/test_cudnn" --gtest_output="json:$work/gtest-test_cudnn.json"
  step verify-cuda 90 "$bin/attncheck" verify --impl cuda --pass both --fixtures golden --report "$work/verify-cuda.json"
  # cuDNN compiles an engine per distinct graph: four processes share the suite.
  verify_cudnn() {
    local i pids=() rc=0
    for i in 0 1 2 3; do
      "$bin/attncheck" verify --impl cudnn --pass both --fixtures golden --shard $i/4 \
        --report "$work/verify-cudnn-$i.json" >"$work/verify-cudnn-$i.log" 2>&1 &
      pids+=($!)
    done
    for i in 0 1 2 3; do wait "${pids[$i]}" || rc=1; tail -n 3 "$work/verify-cudnn-$i.log"; done
    return $rc
  }
  step verify-cudnn 150 verify_cudnn
  mkdir -p "$work/memcheck/cases" "$work/memcheck/backward"
  for pat in 'fp16_*causal-tl_normal.h5' 'bf16_*causal-br_tile_edge_dominant.h5' 'fp32_*pad-mask-bias*' 'bf16_*paged*'; do
    f=$(ls golden/cases/$pat 2>/dev/null | head -n1); [ -n "$f" ] && cp "$f" "$work/memcheck/cases/"
  done
  f=$(ls golden/backward/*causal-br_normal_grad.h5 | head -n1); [ -n "$f" ] && cp "$f" "$work/memcheck/backward/"
  if command -v compute-sanitizer >/dev/null; then
    step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 99 "$bin/attncheck" verify --impl cuda \
      --pass both --fixtures "$work/memcheck" --report "$work/memcheck.json"
  else
    skip memcheck "compute-sanitizer not on PATH"
  fi
  for b in flash efficient cudnn math; do
    step "torch-sdpa-$b" 60 "$bin/attncheck" verify --worker "$py examples/python/torch_sdpa_worker.py $b" \
      --impl "torch-sdpa-$b" --fixtures golden/cases --report "$work/torch-sdpa-$b.json"
  done
  step python-torch-cuda 90 env ATTNCHECK_EXE="$bin/attncheck" $py tools/device/torch_cuda_check.py
  step triton 90 "$bin/attncheck" verify --worker "$py examples/python/triton_attention.py" --impl triton-flash \
    --fixtures golden/cases --report "$work/triton.json"
  step long 60 "$bin/attncheck" verify --spec golden/suite-long.json --rows 32 --impl cuda --report "$work/long.json"
  # Speed: the same shapes through attncheck bench (CUDA-event time of the kernels) and PyTorch (CUDA events).
  bench_attncheck() {
    local impl shape dt c
    for impl in cuda cudnn; do
      for shape in 1,16,2048,2048,128 1,8,4096,4096,64 4,8,1,8192,128; do
        for dt in bf16 fp16; do
          for c in "" --causal; do
            [ "$shape" = 4,8,1,8192,128 ] && [ -n "$c" ] && continue
            "$bin/attncheck" bench --impl $impl --shape $shape --dtype $dt $c --reps 5 --warmup 2 --json \
              >>"$work/bench.jsonl" || echo "bench $impl $shape $dt $c failed"
          done
        done
      done
    done
  }
  step bench-attncheck 100 bench_attncheck
  step bench-torch 60 $py tools/device/torch_bench.py "$work/bench-torch.jsonl"
  step power 120 bash -c "'$bin/attncheck' power --candidate cuda --lk 1024,8192 --json > '$work/power.json'"
fi

# The summary: always written, from whatever the steps left.
now=$(date +%s)
printf '{"name": "summary", "status": "ok", "rc": 0, "seconds": 0, "note": "total %ss"}\n' "$((now - start))" >>"$steps"
$py tools/device/summarize.py --work "$work" --out "$out" ${bundle:+--manifest "$bundle/MANIFEST"} >>"$log" 2>&1 \
  || echo "device-check.sh: summarize.py failed, see $log" >&2
tar -C "$work" -czf "$out/reports.tar.gz" $(cd "$work" && ls | grep -E '\.(json|jsonl|txt|log)$') 2>>"$log"
if ((dry)); then
  $py tools/device/summarize.py --check "$out/summary.json" || exit 1
fi
echo "device-check.sh: summary in $out/summary.md and $out/summary.json ($((now - start)) s)"
