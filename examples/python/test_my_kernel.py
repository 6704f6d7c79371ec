# The pytest file a kernel author copies: the property suite (generated problems, shrinking) against the kernel
# in this process, the golden suite through the worker protocol, and a deliberately wrong kernel that must be caught
# and shrunk. Run: PYTHONPATH=python python3 -m pytest examples/python (ctest label python runs it).
import os
import subprocess
import sys

import numpy as np
import pytest

import attncheck
from numpy_sdpa import DECLARATIONS, FEATURES, sdpa

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "..", "golden", "cases")


def test_property_suite(tmp_path):
    attncheck.check(sdpa, cases=20, features=FEATURES, regressions=tmp_path, name="numpy-sdpa")


def test_golden_suite_through_worker():
    cmd = [attncheck._cli.exe(), "verify", "--worker", f"{sys.executable} {HERE}/numpy_sdpa.py",
           "--impl", "numpy-sdpa", "--fixtures", GOLDEN]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def causal_off_by_one(q, k, v, *, problem, mask=None, bias=None, keep=None):
    """sdpa with a classic bug: the causal diagonal itself is masked (j < i instead of j <= i)."""
    if problem["causal"]:
        problem = dict(problem, diagonal_offset=[d - 1 for d in problem["diagonal_offset"]])
    return sdpa(q, k, v, problem=problem, mask=mask, bias=bias, keep=keep)


def test_wrong_kernel_is_caught_and_shrunk(tmp_path):
    with pytest.raises(AssertionError) as err:
        attncheck.check(causal_off_by_one, cases=30, features=["causal"], dtypes=["f32", "f64"],
                        properties=["agreement"], regressions=tmp_path, name="off-by-one")
    msg = str(err.value)
    assert "FAIL" in msg and "causal" in msg, msg
    saved = [f for f in os.listdir(tmp_path) if f.endswith(".h5")]
    assert saved, msg
    fixture = attncheck.load(os.path.join(tmp_path, saved[0]))
    a = fixture["attrs"]
    # Shrunk: one batch, one head, a handful of queries and keys (the engine's smallest hostile length is 7).
    assert a["causal"] == 1 and a["B"] == a["Hq"] == 1 and a["Lq"] <= 8 and a["Lk"] <= 8, (a, msg)
    # The saved failure replays: the buggy kernel's output fails compare, the correct one passes.
    p = {"causal": True, "diagonal_offset": [int(x) for x in [0] * int(a["B"])], "scale": float(a["effective_scale"]),
         "softcap": 0.0, "window_left": -1, "window_right": -1, "key_lengths": None}
    if a["alignment"] == "bottom_right":
        p["diagonal_offset"] = [int(a["Lk"] - a["Lq"])] * int(a["B"])
    q, k, v = (fixture["inputs"][n] for n in "qkv")
    if a["layout"] == "BSHD":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    good, bad = sdpa(q, k, v, problem=p)["out"], causal_off_by_one(q, k, v, problem=p)["out"]
    if a["layout"] == "BSHD":
        good, bad = good.transpose(0, 2, 1, 3), bad.transpose(0, 2, 1, 3)
    assert attncheck.compare(fixture, out=good, policy="zero").passed
    assert not attncheck.compare(fixture, out=bad, policy="zero").passed
