#!/usr/bin/env bash
# Installs what is missing on Debian 12 (apt-get), then configures and builds attncheck into build/.
# Used by both README commands and by .ci/run, so a fresh machine and CI take exactly the same path.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make ccache pkg-config libeigen3-dev libhdf5-dev hdf5-tools libgtest-dev librapidcheck-dev
          libbenchmark-dev libhwy-dev libcli11-dev nlohmann-json3-dev libfmt-dev libboost-context-dev libpng-dev python3-h5py
          python3-numpy python3-pytest python3-pytest-xdist zlib1g-dev patchelf libmuparser-dev
          clang libclang-rt-14-dev)  # clang + libFuzzer: tools/fuzz.sh (the readers' fuzz target, run by .ci/run)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc is found through PATH; the toolkit's usual home is added when it is not on PATH already.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${ATTNCHECK_CMAKE_ARGS:-} >build-configure.log 2>&1 \
  || { cat build-configure.log; exit 1; }
cmake --build build -j"$(nproc)"
