#!/usr/bin/env python3
"""Detection threshold of baseline comparison (docs/regression.md): for each judged "all" group of a benign pair of
reports (BEFORE, NOW: e.g. another SIMD target or summation order), the smallest error growth G that
`attncheck compare-reports` flags when every pass case's rms_rel in NOW is multiplied by G. The pair's own scatter
stays in, so the threshold is the one a real run would see. Prints one line per group; extra arguments go to
compare-reports (e.g. --max-growth 1.25).

  tools/regression_calibrate.py build/tools/attncheck before.json now.json [--tensor out] [-- OPTIONS]
"""
import argparse, json, os, re, subprocess, sys, tempfile


def scaled(report, g):
    r = json.loads(json.dumps(report))
    for c in r["cases"]:
        if c.get("status") != "pass":
            continue
        for t in c.get("tensors", []):
            a = t.get("accuracy")
            if a and a.get("rms_rel") is not None:
                a["rms_rel"] *= g
    return r


def flagged(exe, before, now, g, group, extra, tmp):
    path = os.path.join(tmp, "now.json")
    with open(path, "w") as f:
        json.dump(scaled(now, g), f)
    out = subprocess.run([exe, "compare-reports", before, path] + extra, capture_output=True, text=True).stdout
    return ("REGRESSION accuracy " + group + ":") in out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe"), ap.add_argument("before"), ap.add_argument("now")
    ap.add_argument("--tensor", default="out")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    now = json.load(open(a.now))
    out = subprocess.run([a.exe, "compare-reports", a.before, a.now] + a.extra, capture_output=True, text=True).stdout
    groups = re.findall(r"^  group (\S+ \S+ all " + a.tensor + r"): error x(\S+) .*?(\d+) cases", out, re.M)
    with tempfile.TemporaryDirectory() as tmp:
        for group, ratio, n in groups:
            lo, hi = 1.0, 64.0
            if not flagged(a.exe, a.before, now, hi, group, a.extra, tmp):
                print(f"{group}: {n} cases, benign ratio {ratio}, not flagged even at x{hi:g}")
                continue
            while hi / lo > 1.01:
                mid = (lo * hi) ** 0.5
                lo, hi = (lo, mid) if flagged(a.exe, a.before, now, mid, group, a.extra, tmp) else (mid, hi)
            print(f"{group}: {n} cases, benign ratio {ratio}, flagged from x{hi:.2f}")


if __name__ == "__main__":
    sys.exit(main())
