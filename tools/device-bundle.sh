#!/usr/bin/env bash
# Packs what the GPU check (tools/device-check.sh) runs on a machine that has a GPU but none of this project's
# Debian libraries: the attncheck CLI and the device test executables of the cuda and cudnn labels, from a build
# with the nvcc-built `cuda` backend, stripped, with a RUNPATH of $ORIGIN/../lib and every shared library they
# need copied into lib/ — except the C/C++ runtime (glibc, libstdc++, libgcc_s: newer on the GPU machine's
# image), the driver (libcuda) and cuDNN, which device-check.sh finds in the cuDNN wheel there.
# The result is one compressed tarball (bin/, lib/, MANIFEST), small enough to travel with the source tree.
# Usage: tools/device-bundle.sh [--build DIR] [--out FILE]   (defaults: build, build-device/attncheck-bundle.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
out=build-device/attncheck-bundle.tar.xz
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "device-bundle.sh: unknown argument '$1' (usage: [--build DIR] [--out FILE])" >&2; exit 2 ;;
  esac
done
for tool in patchelf strip ldd xz; do
  command -v $tool >/dev/null || { echo "device-bundle.sh: '$tool' not found (tools/bootstrap.sh installs it)" >&2; exit 2; }
done
[ -f "$build/CMakeCache.txt" ] || { echo "device-bundle.sh: no configured build in '$build' (run tools/bootstrap.sh)" >&2; exit 2; }
if ! grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$build/CMakeCache.txt"; then
  echo "device-bundle.sh: '$build' was configured without nvcc, so it has no device backend: nothing to bundle" >&2
  exit 3
fi

# The executables the check runs, built if they are not yet (test_cudnn only where the cudnn backend is built).
known=$(cmake --build "$build" --target help)
targets=(attncheck test_cuda_kernels test_cuda_backward)
grep -q ' test_cudnn$' <<<"$known" && targets+=(test_cudnn)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

# Not bundled: provided by the GPU machine (runtime, driver) or found there (cuDNN from its wheel).
provided='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudnn[a-z_]*)\.so'

final=$out
out=$(mktemp -d /tmp/attncheck-bundle.XXXXXX)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  # The build's own outputs, by path: a search by name also finds stale copies (the install test's prefix).
  exe=$build/tests/$t
  [ "$t" = attncheck ] && exe=$build/tools/attncheck
  [ -x "$exe" ] || { echo "device-bundle.sh: built target '$t' not found at $exe" >&2; exit 1; }
  cp "$exe" "$out/bin/$t"
  # ldd lists the whole closure (libraries of libraries too), resolved on this machine.
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
    [[ $soname =~ $provided ]] && continue
    [ -f "$out/lib/$soname" ] || cp -L "$path" "$out/lib/$soname"
  done
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/*
for f in "$out"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$out"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done

# What was bundled, from which commit and build, for the summary.
{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "device_code $(grep -rho -- '--generate-code=[^ ]*' "$build"/impls/cuda/CMakeFiles/*/flags.make | sort -u | tr '\n' ' ')"
  echo "nvcc $("$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")" --version | tail -n1)"
  echo "built_on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -n1)"
  (cd "$out" && find bin lib -type f -printf '%p %s\n' | sort)
} >"$out/MANIFEST"
mkdir -p "$(dirname "$final")"
tar -C "$out" -cf - . | xz -T0 -2 >"$final.tmp" && mv "$final.tmp" "$final"
echo "device-bundle.sh: $final: $(stat -c %s "$final") bytes packed, $(du -sb "$out" | cut -f1) unpacked" \
  "($(ls "$out/bin" | tr '\n' ' ')+ $(ls "$out/lib" | wc -l) libraries)"
