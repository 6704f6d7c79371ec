#!/usr/bin/python3
"""One bad file never hides the rest, for `power --merge DIR`: the merge fixtures of golden/states plus a copy of one
with its /inputs/o deleted and a truncated copy. The table must still count every good fixture, each bad file be
listed after it naming the file, and the run exit 2. Usage: bad_merge_fixtures.py ATTNCHECK STATES_DIR WORKDIR"""
import os
import shutil
import subprocess
import sys

import h5py


def main():
    exe, states, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    fixtures = os.path.join(work, "fixtures")
    os.makedirs(fixtures)
    good = sorted(f for f in os.listdir(states) if f.startswith("merge_") and f.endswith(".h5"))
    for f in good:
        os.symlink(os.path.abspath(os.path.join(states, f)), os.path.join(fixtures, f))
    damaged, truncated = os.path.join(fixtures, "merge_zz_damaged.h5"), os.path.join(fixtures, "merge_zz_truncated.h5")
    shutil.copy(os.path.join(states, good[0]), damaged)
    with h5py.File(damaged, "r+") as f:
        del f["inputs/o"]
    with open(os.path.join(states, good[0]), "rb") as src, open(truncated, "wb") as dst:
        data = src.read()
        dst.write(data[: len(data) // 2])
    p = subprocess.run([exe, "power", "--merge", fixtures], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    out, err = p.stdout.decode(), p.stderr.decode()
    failures = []
    if p.returncode != 2:
        failures.append(f"exit {p.returncode}, want 2\n{err[-800:]}")
    rows = [l.split() for l in out.splitlines() if len(l.split()) > 3 and l.split()[0] == "last-split-dropped"]
    if not rows or str(len(good)) not in rows[0]:
        failures.append(f"the table does not count all {len(good)} good fixtures:\n{out[-1500:]}")
    tail = out[out.find("unreadable input files"):]
    for bad in (damaged, truncated):
        if bad not in tail:
            failures.append(f"{bad} not listed after the table:\n{tail}")
    if "exit 2" not in err:
        failures.append(f"stderr does not say exit 2: {err[-400:]}")
    for f in failures:
        print("FAILED:", f)
    print(f"bad merge fixtures: {len(good)} good, 2 bad, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
