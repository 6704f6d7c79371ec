#!/usr/bin/env bash
# Regeneration is byte-identical: generate the suite twice into fresh directories and compare every file with the
# other run and with the checked-in golden/cases (cmp). Usage: regen_identical.sh ATTNCHECK SOURCE_DIR [SPEC SUBDIR]
# (default golden/suite.json into cases; the backward slice: suite-backward.json backward).
set -euo pipefail
exe=$1 src=$2 spec=${3:-suite.json} sub=${4:-cases}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" generate --spec "$src/golden/$spec" --out "$tmp/a" >/dev/null
"$exe" generate --spec "$src/golden/$spec" --out "$tmp/b" >/dev/null
n=0
for f in "$src"/golden/$sub/*.h5; do
  name=$(basename "$f")
  cmp "$tmp/a/$sub/$name" "$tmp/b/$sub/$name"
  cmp "$f" "$tmp/a/$sub/$name" || {
    echo "checked-in $name differs from a fresh generation; if only the file format changed (e.g. checksums), regenerate"
    echo "it: build/tools/attncheck generate --spec golden/$spec --out golden --update --filter '$name'"; exit 1; }
  n=$((n + 1))
done
extra=$(comm -13 <(ls "$src/golden/$sub") <(ls "$tmp/a/$sub") || true)
[ -z "$extra" ] || { echo "generated but not checked in: $extra"; exit 1; }
echo "$n fixtures byte-identical across two runs and with golden/$sub"
