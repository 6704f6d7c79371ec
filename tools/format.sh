#!/usr/bin/env bash
# Formats the C, C++ and CUDA sources with Debian's clang-format 14 and the repository's .clang-format.
#   tools/format.sh [--check] [PATH...]
# --check: change nothing; list the files that differ (with the number of lines that would change) and exit 1 when
# there is one. Without it, format them in place. PATHs (files or folders) limit it to those; default: every tracked
# source file.
set -euo pipefail
cd "$(dirname "$0")/.."

clang_format=${CLANG_FORMAT:-/usr/bin/clang-format}
[ -x "$clang_format" ] || { echo "format.sh: $clang_format not found (apt-get install clang-format)" >&2; exit 2; }

check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
mapfile -t files < <(git ls-files -- "${@:-.}" | grep -E '\.(c|h|cpp|hpp|cu|cuh)$')

differ=0 lines=0
for f in "${files[@]}"; do
  if ((check)); then
    n=$("$clang_format" --style=file "$f" | diff "$f" - | grep -c '^<' || true)
    if ((n > 0)); then
      echo "$f: $n lines"
      differ=$((differ + 1)) lines=$((lines + n))
    fi
  else
    "$clang_format" --style=file -i "$f"
  fi
done
if ((check)); then
  echo "format.sh: $differ of ${#files[@]} files differ ($lines lines)"
  ((differ == 0))
fi
