#!/usr/bin/python3
"""One bad file never hides the rest: the golden suite plus one truncated and one empty .h5. verify must judge every
other fixture, give each bad file its own input-error row (table, JSON and JUnit reports, and the list after the
summary), and exit 2. Usage: bad_files_among_suite.py ATTNCHECK GOLDEN_CASES_DIR WORKDIR"""
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET


def main():
    exe, cases, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    fixtures = os.path.join(work, "fixtures")
    os.makedirs(fixtures)
    good = sorted(f for f in os.listdir(cases) if f.endswith(".h5"))
    for f in good:
        os.symlink(os.path.abspath(os.path.join(cases, f)), os.path.join(fixtures, f))
    with open(os.path.join(cases, good[0]), "rb") as src:
        data = src.read()
    truncated, empty = os.path.join(fixtures, "m_truncated.h5"), os.path.join(fixtures, "n_empty.h5")
    with open(truncated, "wb") as f:
        f.write(data[: len(data) // 2])
    open(empty, "wb").close()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    for report in ("report.json", "report.xml"):
        path = os.path.join(work, report)
        p = subprocess.run([exe, "verify", "--impl", "reference", "--fixtures", fixtures, "--report", path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        out, err = p.stdout.decode(), p.stderr.decode()
        check(p.returncode == 2, f"{report}: exit {p.returncode}, want 2\n{err[-800:]}")
        passed = sum(1 for line in out.splitlines() if line.startswith("PASS "))
        check(passed == len(good), f"{report}: {passed} PASS rows, want every one of the {len(good)} good fixtures")
        rows = [line for line in out.splitlines() if line.startswith("INPUT-ERROR")]
        check(len(rows) == 2, f"{report}: {len(rows)} INPUT-ERROR rows, want 2:\n" + "\n".join(rows))
        tail = out[out.find("unreadable input files"):]
        for bad in (truncated, empty):
            check(bad in tail, f"{report}: {bad} not listed after the summary:\n{tail}")
        check("exit 2" in err, f"{report}: stderr does not say exit 2: {err[-400:]}")
        check(os.path.exists(path), f"{report}: no report written")
        if not os.path.exists(path):
            continue
        if report.endswith(".json"):
            r = json.load(open(path))
            errs = [c for c in r["cases"] if c["status"] == "input-error"]
            check(sorted(c["file"] for c in errs) == sorted([truncated, empty]), f"JSON input-error rows: {errs}")
            check(all(c["message"].startswith(c["file"]) for c in errs), f"JSON messages do not name the file: {errs}")
            check(r["summary"].get("input-error") == 2 and r["summary"].get("pass") == len(good),
                  f"JSON summary: {r['summary']}")
        else:
            t = ET.parse(path).getroot()
            errs = [c for c in t.iter("testcase") if c.find("error") is not None
                    and c.find("error").get("type") == "input-error"]
            check(len(errs) == 2, f"JUnit: {len(errs)} input-error testcases, want 2")
    for f in failures:
        print("FAILED:", f)
    print(f"bad files among the suite: {len(good)} good fixtures, 2 bad, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
