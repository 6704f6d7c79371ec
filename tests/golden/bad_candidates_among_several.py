#!/usr/bin/python3
"""One bad file never hides the rest, for compare: one fixture and four candidates (two good copies of its expected
outputs, one truncated, one empty). Each good one must be judged (PASS), each bad one get its own input-error row
(table, JSON report, the list after the summary), exit 2. One candidate alone keeps its plain error (exit 2), and
--name, which names one candidate, is refused with several. Usage: bad_candidates_among_several.py ATTNCHECK
FIXTURE WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

import h5py


def main():
    exe, fixture, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    good = [os.path.join(work, n) for n in ("a_good.h5", "c_good.h5")]
    with h5py.File(fixture, "r") as f:
        out, lse = f["expected/out"][()], f["expected/lse"][()]
    for g in good:
        with h5py.File(g, "w") as c:
            c["actual/out"] = out
            c["actual/lse"] = lse
    truncated, empty = os.path.join(work, "b_truncated.h5"), os.path.join(work, "d_empty.h5")
    with open(good[0], "rb") as src, open(truncated, "wb") as dst:
        data = src.read()
        dst.write(data[: len(data) // 2])
    open(empty, "wb").close()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    def compare(*args):
        p = subprocess.run([exe, "compare", "--expected", fixture, *args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    report = os.path.join(work, "report.json")
    rc, out_text, err = compare("--actual", good[0], truncated, good[1], empty, "--report", report)
    check(rc == 2, f"exit {rc}, want 2\n{err[-800:]}")
    rows = out_text.splitlines()
    passed = [l for l in rows if l.startswith("PASS ")]
    check(len(passed) == 2 and all(any(os.path.basename(g) in l for l in passed) for g in good),
          f"{len(passed)} PASS rows, want one per good candidate:\n{out_text[-1500:]}")
    bad_rows = [l for l in rows if l.startswith("INPUT-ERROR")]
    check(len(bad_rows) == 2, f"{len(bad_rows)} INPUT-ERROR rows, want 2:\n{out_text[-1500:]}")
    tail = out_text[out_text.find("unreadable input files"):]
    for bad in (truncated, empty):
        check(bad in tail, f"{bad} not listed after the summary:\n{tail}")
    check("exit 2" in err, f"stderr does not say exit 2: {err[-400:]}")
    if os.path.exists(report):
        r = json.load(open(report))
        errs = [c for c in r["cases"] if c["status"] == "input-error"]
        check(sorted(c["file"] for c in errs) == sorted([truncated, empty]), f"JSON input-error rows: {errs}")
        check(all(c["message"].startswith(c["file"]) for c in errs), f"JSON messages do not name the file: {errs}")
        check(r["summary"].get("input-error") == 2 and r["summary"].get("pass") == 2, f"JSON summary: {r['summary']}")
    else:
        check(False, "no report written")
    rc, out_text, err = compare("--actual", truncated)
    check(rc == 2 and truncated in err and "INPUT-ERROR" not in out_text,
          f"one bad candidate: exit {rc}, want 2 with the error naming it on stderr:\n{err[-400:]}")
    rc, out_text, err = compare("--actual", good[0], good[1], "--name", "mine")
    check(rc == 2 and "--name" in err, f"--name with two candidates: exit {rc}, want 2 naming --name:\n{err[-400:]}")
    for f in failures:
        print("FAILED:", f)
    print(f"bad candidates among several: 2 good, 2 bad, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
