#!/usr/bin/env bash
# Every fix proven: for each fix in tools/prove-fixes/fixes.txt (the table in docs/hardening.md, "Fixes and the
# tests that prove them"), build a scratch copy of the committed tree with that fix reverted (its patch in
# tools/prove-fixes/) and run the fix's tests: they must fail there, and pass on the same copy unpatched.
# On request, not in CI (a build per fix): tools/prove-fixes.sh [NAME...]. The copy is a git worktree in
# build-prove/src (committed files only), built in build-prove/src/build: the same place relative to its sources as
# build/ is to the checkout's, so ccache (base_dir) serves the first build from the checkout's objects.
# Exit 0 when every selected fix's tests pass with it and fail without it; a patch that no longer applies fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD list=tools/prove-fixes/fixes.txt
src=$root/build-prove/src bld=$root/build-prove/src/build
mkdir -p build-prove
if [ -d "$src/.git" ] || [ -f "$src/.git" ]; then
  git -C "$src" checkout -q --detach "$(git rev-parse HEAD)" && git -C "$src" reset -q --hard && git -C "$src" clean -qfd
else
  rm -rf "$src" && git worktree add -q --detach "$src" HEAD
fi
cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release ${ATTNCHECK_CMAKE_ARGS:-} >build-prove/configure.log 2>&1 \
  || { tail -30 build-prove/configure.log; exit 1; }

names=() targets=() tests=() whats=()
while IFS='|' read -r name tgt tst what; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if (($#)) && [[ " $* " != *" $name "* ]]; then continue; fi
  names+=("$name") targets+=("$tgt") tests+=("$tst") whats+=("$what")
done <"$list"
((${#names[@]})) || { echo "prove-fixes: no fix selected (names: $(grep -v '^#' $list | cut -d'|' -f1 | xargs))"; exit 2; }

build() { cmake --build "$bld" -j"$(nproc)" --target $1 >build-prove/build.log 2>&1 || { tail -30 build-prove/build.log; return 1; }; }
run() { ctest --test-dir "$bld" -R "$1" --timeout 900 >build-prove/ctest.log 2>&1; }
count() { ctest --test-dir "$bld" -N -R "$1" | sed -n 's/^Total Tests: //p'; }

echo "prove-fixes: unpatched $(git rev-parse --short HEAD): building and running every selected test"
build "$(printf '%s ' "${targets[@]}")"
status=0 rows=()
for i in "${!names[@]}"; do
  n=$(count "${tests[$i]}")
  if [ "${n:-0}" = 0 ]; then rows+=("${names[$i]}|no test matches ${tests[$i]}|NOT PROVEN"); status=1; continue; fi
  if ! run "${tests[$i]}"; then
    rows+=("${names[$i]}|$n tests ${tests[$i]} fail WITH the fix|NOT PROVEN"); status=1; tests[$i]=""; continue
  fi
done
for i in "${!names[@]}"; do
  [ -n "${tests[$i]}" ] || continue
  patch=$root/tools/prove-fixes/${names[$i]}.patch
  git -C "$src" checkout -q -- . 
  if ! git -C "$src" apply "$patch" 2>build-prove/apply.log; then
    rows+=("${names[$i]}|patch no longer applies: update $patch|NOT PROVEN"); status=1; continue
  fi
  echo "prove-fixes: ${names[$i]} reverted (${whats[$i]})"
  if ! build "${targets[$i]}"; then rows+=("${names[$i]}|does not build without the fix|NOT PROVEN"); status=1; continue; fi
  n=$(count "${tests[$i]}")
  if run "${tests[$i]}"; then
    rows+=("${names[$i]}|$n tests ${tests[$i]} still pass without the fix|NOT PROVEN"); status=1
  else
    failed=$(sed -n '/The following tests FAILED:/,$p' build-prove/ctest.log | grep -c ' - ' || true)
    rows+=("${names[$i]}|${tests[$i]}: pass with the fix, $failed of $n fail without it|proven")
  fi
done
git -C "$src" checkout -q -- .
echo
printf '%s\n' "${rows[@]}" | column -t -s'|'
exit $status
