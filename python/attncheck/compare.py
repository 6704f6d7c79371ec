# compare(fixture, out=..., lse=..., weights=..., max_logit=...): the verdict of `attncheck compare` on your outputs, as an object
# with the worst element, its index and its bound, and a readable str().
import json
import os
import tempfile

import numpy as np

from . import _cli


class Result:
    def __init__(self, report, text):
        case = report["cases"][0]
        self.passed = case["status"] == "pass"
        self.verdict = case["status"]
        self.tensor = case.get("tensor")
        self.index = case.get("worst_index")
        self.expected, self.actual, self.bound = case.get("expected"), case.get("actual"), case.get("tolerance")
        self.max_abs_err = case.get("max_abs_err")
        self.tensors = case.get("tensors", [])
        # The accuracy profile per tensor (docs/regression.md): share_of_bound, rms_rel, bias_ulp, ulp_hist, ...
        self.accuracy = {t["tensor"]: t["accuracy"] for t in self.tensors if "accuracy" in t}
        self.text = text

    def __bool__(self):
        return self.passed

    def __str__(self):
        return self.text

    def __repr__(self):
        return (f"Result(verdict={self.verdict!r}, tensor={self.tensor!r}, index={self.index}, "
                f"expected={self.expected}, actual={self.actual}, bound={self.bound})")


def compare(fixture, out=None, lse=None, weights=None, policy=None, max_logit=None):
    """Judges out (the fixture's layout), lse [B,Hq,Lq], weights [B,Hq,Lq,Lk] and max_logit ([B,Hq,Lq], or [Hq] for
    a fixture of the heads form) against a fixture (path or load())."""
    import h5py
    path = fixture["path"] if isinstance(fixture, dict) else os.fspath(fixture)
    if out is None:
        raise TypeError("compare: out= is required")
    with tempfile.TemporaryDirectory() as tmp:
        cand, rep = os.path.join(tmp, "candidate.h5"), os.path.join(tmp, "report.json")
        with h5py.File(cand, "w") as c:
            for name, a in (("out", out), ("lse", lse), ("weights", weights), ("max_logit", max_logit)):
                if a is not None:
                    a = np.asarray(a)
                    c["actual/" + name] = a.astype(np.float32) if a.dtype.kind != "f" else a
        args = ["compare", "--expected", path, "--actual", cand, "--report", rep, "--name", "python"]
        r = _cli.run(args + (["--policy", policy] if policy else []))
        with open(rep) as f:
            report = json.load(f)
    return Result(report, r.stdout.strip())
