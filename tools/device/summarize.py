# Folds what tools/device-check.sh left in its work folder (steps.jsonl, machine.txt, list.txt, verify reports,
# power.json, bench lines) into OUT/summary.json and OUT/summary.md. Standard library only: it runs with whatever
# python3 the GPU machine has. `--check FILE` validates a summary's structure (the dry run's last step).
import argparse
import glob
import json
import os
import sys

SCHEMA = 1
REQUIRED = {"schema": int, "machine": dict, "bundle": dict, "steps": list, "verify": dict, "power": (dict, type(None)),
            "bench": list}


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_lines(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    return rows


def machine(work):
    m = {}
    if os.path.exists(os.path.join(work, "machine.txt")):
        with open(os.path.join(work, "machine.txt")) as f:
            for line in f:
                key, _, value = line.strip().partition(" ")
                if key:
                    m.setdefault(key, value)
    return m


def ratio(case):
    """|actual - expected| / tolerance at the case's worst element (the element the report names)."""
    e, a, tol = case.get("expected"), case.get("actual"), case.get("tolerance")
    if not all(isinstance(x, (int, float)) for x in (e, a, tol)) or tol <= 0:
        return None
    return abs(a - e) / tol


def verify_reports(work):
    """Per report name: status counts and the non-passing, non-unsupported cases (at most 40 listed)."""
    groups = {}
    for path in sorted(glob.glob(os.path.join(work, "*.json"))):
        j = load_json(path)
        if not isinstance(j, dict) or "cases" not in j:
            continue
        name = os.path.basename(path)[:-5]
        if name.startswith("verify-cudnn-"):
            name = "verify-cudnn"  # the shards of one run
        g = groups.setdefault(name, {"counts": {}, "failures": [], "largest_ratio_passing": 0.0, "unsupported_reasons": {}})
        for c in j["cases"]:
            st = c.get("status", "?")
            g["counts"][st] = g["counts"].get(st, 0) + 1
            r = ratio(c)
            if st == "pass" and r is not None:
                g["largest_ratio_passing"] = max(g["largest_ratio_passing"], r)
            elif st == "unsupported":
                reason = (c.get("message") or "")[:120]
                g["unsupported_reasons"][reason] = g["unsupported_reasons"].get(reason, 0) + 1
            elif st not in ("pass", "unavailable") and len(g["failures"]) < 40:
                g["failures"].append({"impl": c.get("impl"), "fixture": c.get("fixture"), "status": st,
                                      "tensor": c.get("tensor"), "err_over_tol": r,
                                      "message": (c.get("message") or "")[:300],
                                      "diagnosis": (c.get("diagnosis") or {}).get("tags") if isinstance(c.get("diagnosis"), dict) else None})
    for g in groups.values():
        g["unsupported_reasons"] = dict(sorted(g["unsupported_reasons"].items(), key=lambda kv: -kv[1])[:8])
    return groups


def gtests(work):
    res = {}
    for path in sorted(glob.glob(os.path.join(work, "gtest-*.json"))):
        j = load_json(path)
        if not isinstance(j, dict):
            continue
        t = {"tests": j.get("tests", 0), "failures": j.get("failures", 0), "disabled": j.get("disabled", 0),
             "skipped": 0, "failed": []}
        for suite in j.get("testsuites", []):
            for case in suite.get("testsuite", []):
                if case.get("result") == "SKIPPED":
                    t["skipped"] += 1
                if case.get("failures"):
                    t["failed"].append(f"{suite.get('name')}.{case.get('name')}")
        res[os.path.basename(path)[6:-5]] = t
    return res


def power(work):
    j = load_json(os.path.join(work, "power.json"))
    if not isinstance(j, dict):
        return None
    keep = ("faults", "detected", "undetectable", "missed", "not_applicable", "false_alarms", "accepted", "seconds",
            "candidate", "candidate_cells", "candidate_false_alarms")
    p = {k: j.get(k) for k in keep}
    cand = [c for c in j.get("cells", []) if c.get("variant") == j.get("candidate")]
    p["candidate_worst_ratio"] = max((c["ratio"] for c in cand if isinstance(c.get("ratio"), (int, float))), default=None)
    p["candidate_cells_by_lk_dtype"] = {}
    for c in cand:
        key = f"Lk={c.get('lk')} {c.get('dtype')}"
        cur = p["candidate_cells_by_lk_dtype"].get(key)
        r = c.get("ratio") if isinstance(c.get("ratio"), (int, float)) else None
        if r is not None and (cur is None or r > cur):
            p["candidate_cells_by_lk_dtype"][key] = r
    p["coverage"] = j.get("coverage", [])
    return p


def bench(work):
    rows = []
    for r in load_lines(os.path.join(work, "bench.jsonl")) + load_lines(os.path.join(work, "bench-torch.jsonl")):
        rows.append({"impl": r.get("impl"), "shape": r.get("shape"), "dtype": r.get("dtype"),
                     "causal": bool(r.get("causal")), "device_seconds": r.get("device_seconds"),
                     "device_gflops": r.get("device_gflops"), "wall_seconds": r.get("seconds"),
                     "error": r.get("error"), "note": r.get("device_note") or ""})
    return rows


def summarize(work, out, manifest):
    steps = load_lines(os.path.join(work, "steps.jsonl"))
    s = {"schema": SCHEMA, "machine": machine(work), "bundle": load_json(os.path.join(work, "bundle.json")) or {},
         "steps": steps, "verify": verify_reports(work), "gtest": gtests(work), "power": power(work),
         "bench": bench(work)}
    if manifest and os.path.exists(manifest):
        with open(manifest) as f:
            s["bundle"]["manifest"] = [line.rstrip("\n") for line in f if not line.startswith(("bin/", "lib/"))]
    if os.path.exists(os.path.join(work, "list.txt")):
        with open(os.path.join(work, "list.txt")) as f:
            s["available"] = {ln.split()[0]: ln.split()[1] for ln in f if ln[:1].isalnum() and len(ln.split()) > 1}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(markdown(s))


def fmt(x, spec=".3g"):
    return "—" if x is None else format(x, spec)


def markdown(s):
    m = s["machine"]
    lines = ["# attncheck GPU check", "",
             f"- date: {m.get('date', '?')}; dry run: {m.get('dry_run', '?')}",
             f"- GPU: {m.get('gpu', 'none')}", f"- {m.get('nvcc', 'nvcc: not found')}",
             f"- torch: {m.get('torch', 'not importable')}; triton: {m.get('triton', 'not importable')}",
             f"- cuDNN library folder: {m.get('cudnn_dir', '?')}",
             f"- bundle: {s['bundle'].get('packed_bytes', '?')} bytes packed, {s['bundle'].get('unpacked_bytes', '?')} "
             "unpacked; " + "; ".join(s["bundle"].get("manifest", [])),
             f"- available: {', '.join(f'{k} {v}' for k, v in s.get('available', {}).items())}", "",
             "## Steps", "", "| step | status | rc | seconds | note |", "|---|---|---|---|---|"]
    for st in s["steps"]:
        lines.append(f"| {st.get('name')} | {st.get('status')} | {st.get('rc')} | {st.get('seconds')} | {st.get('note', '')} |")
    if s.get("gtest"):
        lines += ["", "## Device tests (GoogleTest)", "", "| executable | tests | failures | skipped | failed |",
                  "|---|---|---|---|---|"]
        for name, t in s["gtest"].items():
            lines.append(f"| {name} | {t['tests']} | {t['failures']} | {t['skipped']} | {', '.join(t['failed'][:5])} |")
    lines += ["", "## Verify", "", "| report | pass | fail | unsupported | other | largest err/tol of a pass |",
              "|---|---|---|---|---|---|"]
    for name, g in s["verify"].items():
        c = g["counts"]
        other = sum(v for k, v in c.items() if k not in ("pass", "fail", "unsupported"))
        lines.append(f"| {name} | {c.get('pass', 0)} | {c.get('fail', 0)} | {c.get('unsupported', 0)} | {other} | "
                     f"{fmt(g['largest_ratio_passing'])} |")
    for name, g in s["verify"].items():
        if g["failures"]:
            lines += ["", f"### {name}: not passed ({len(g['failures'])} listed)", ""]
            for x in g["failures"]:
                tags = f" [{', '.join(x['diagnosis'])}]" if x.get("diagnosis") else ""
                lines.append(f"- {x['status']} {x['impl']} {x['fixture']}: {x['tensor'] or ''} err/tol "
                             f"{fmt(x['err_over_tol'])}{tags} {x['message'][:160]}")
    p = s.get("power")
    if p:
        lines += ["", "## Detection power with the device kernel as a correct variant", "",
                  f"faults {p['faults']}: caught {p['detected']}, undetectable {p['undetectable']}, MISSED "
                  f"{p['missed']}, n/a {p['not_applicable']}; false alarms {p['false_alarms']}; accepted "
                  f"{p['accepted']}; candidate {p['candidate']}: {p['candidate_cells']} cells, "
                  f"{p['candidate_false_alarms']} false alarms, worst err/tol {fmt(p['candidate_worst_ratio'])}", "",
                  "| cell | candidate's worst err/tol |", "|---|---|"]
        for k, v in p["candidate_cells_by_lk_dtype"].items():
            lines.append(f"| {k} | {fmt(v)} |")
    if s["bench"]:
        lines += ["", "## Speed (device time from CUDA events; GFLOP/s = 4·B·H·Lq·Lk·D/s, causal half)", "",
                  "| shape | dtype | causal | impl | device ms | TFLOP/s |", "|---|---|---|---|---|---|"]
        for r in sorted(s["bench"], key=lambda r: (str(r["shape"]), r["dtype"], r["causal"], str(r["impl"]))):
            ms = None if r["device_seconds"] is None or r["device_seconds"] < 0 else r["device_seconds"] * 1e3
            tf = None if r["device_gflops"] is None or r["device_gflops"] < 0 else r["device_gflops"] / 1e3
            lines.append(f"| {'x'.join(map(str, r['shape'] or []))} | {r['dtype']} | {r['causal']} | {r['impl']} | "
                         f"{fmt(ms, '.4g')} | {fmt(tf, '.4g')} {r['error'] or ''} {r['note']} |")
    return "\n".join(lines) + "\n"


def check(path):
    s = load_json(path)
    problems = []
    if not isinstance(s, dict):
        problems.append("not a JSON object")
    else:
        for key, typ in REQUIRED.items():
            if not isinstance(s.get(key), typ):
                problems.append(f"field '{key}': expected {typ}, got {type(s.get(key)).__name__}")
        for i, st in enumerate(s.get("steps") or []):
            if not {"name", "status", "seconds"} <= set(st) or st["status"] not in ("ok", "failed", "timeout", "skipped"):
                problems.append(f"steps[{i}]: {st}")
        if not s.get("steps") or s["steps"][-1].get("name") != "summary":
            problems.append("steps: the last step is not 'summary'")
        if str((s.get("machine") or {}).get("dry_run")) == "1":  # here every step that ran must have passed
            for st in s.get("steps") or []:
                if st.get("status") in ("failed", "timeout"):
                    problems.append(f"dry run: step {st.get('name')} {st.get('status')} (rc {st.get('rc')})")
    md = os.path.join(os.path.dirname(path), "summary.md")
    if not os.path.exists(md) or "## Steps" not in open(md).read():
        problems.append("summary.md missing or without its Steps table")
    for name in os.listdir(os.path.dirname(path)):
        size = os.path.getsize(os.path.join(os.path.dirname(path), name))
        if size >= 16 << 20:
            problems.append(f"{name}: {size} bytes, over the 16 MiB a returned file may have")
    if len(os.listdir(os.path.dirname(path))) > 8:
        problems.append("more than 8 files in the output folder")
    for p in problems:
        print(f"summary check: {path}: {p}", file=sys.stderr)
    return not problems


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--manifest")
    ap.add_argument("--check")
    a = ap.parse_args()
    if a.check:
        sys.exit(0 if check(a.check) else 1)
    summarize(a.work, a.out, a.manifest)
