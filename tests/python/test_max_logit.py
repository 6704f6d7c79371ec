# The max-logit output through the Python package: make_fixture/reference/tolerance/compare know it (checked
# against an independent numpy max), and a worker served by attncheck.worker returns it: the example's numpy
# kernel passes the max-logit fixtures it supports, the same kernel with a wrong max-logit fails on it alone.
import os
import subprocess
import sys

import numpy as np
import pytest

import attncheck
from attncheck import _cli

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "golden", "cases")
rng = np.random.default_rng(37)
q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
k = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
v = rng.standard_normal((2, 2, 7, 4)).astype(np.float32)
SCALE = 0.3


def numpy_max_logit():
    """The row max of the scaled scores over the keys a bottom-right causal mask leaves visible (offset 7 - 5)."""
    kk = np.repeat(k.astype(np.float64), 2, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), kk) * SCALE
    return np.where(np.arange(7)[None, :] <= np.arange(5)[:, None] + 2, s, -np.inf).max(-1)


@pytest.mark.parametrize("form", ["rows", "heads"])
def test_reference_and_tolerance_know_max_logit(form):
    kw = dict(causal="bottom_right", scale=SCALE, max_logit=form)
    r = attncheck.reference(q, k, v, **kw)
    assert np.abs(r["max_logit"] - numpy_max_logit()).max() < 1e-12  # stored as rows in both forms
    tol = attncheck.tolerance(q, k, v, **kw)["max_logit"]
    assert tol.shape == ((4,) if form == "heads" else (2, 4, 5))
    assert np.all(np.isfinite(tol)) and np.all(tol > 0) and tol.max() < 1e-3


@pytest.mark.parametrize("form", ["rows", "heads"])
def test_compare_judges_max_logit(tmp_path, form):
    f = attncheck.make_fixture(tmp_path / "case.h5", q, k, v, causal="bottom_right", scale=SCALE, max_logit=form)
    right = numpy_max_logit()
    if form == "heads":
        right = right.max(axis=(0, 2))
    out = f["expected"]["out"].astype(np.float32)
    res = attncheck.compare(f, out=out, max_logit=right.astype(np.float32))
    assert res.passed, str(res)
    wrong = attncheck.compare(f, out=out, max_logit=(right / SCALE).astype(np.float32))  # the unscaled max
    assert not wrong.passed and wrong.tensor == "max_logit", str(wrong)
    missing = attncheck.compare(f, out=out)
    assert not missing.passed and "max_logit" in str(missing)


WRONG_WORKER = """
import attncheck, numpy_sdpa
def unscaled(q, k, v, *, problem, **kw):
    r = numpy_sdpa.sdpa(q, k, v, problem=problem, **kw)
    r["max_logit"] = r["max_logit"] / problem["scale"]
    return r
attncheck.worker.serve(unscaled, dict(numpy_sdpa.DECLARATIONS, name="numpy-sdpa-unscaled-max"))
"""


def verify_worker(worker, impl):
    return subprocess.run([_cli.exe(), "verify", "--worker", worker, "--impl", impl, "--fixtures", GOLDEN,
                           "--filter", "*maxlogit*"], capture_output=True, text=True, timeout=300)


def test_worker_returns_max_logit():
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "numpy_sdpa.py")
    r = verify_worker(f"{sys.executable} {example}", "numpy-sdpa")
    # fp32 and bf16 rows pass; the heads fixture has a bias and a finite fill, which the example does not declare
    assert r.returncode == 0 and "results: pass 2  fail 0  unsupported 1  error 0" in r.stdout, r.stdout + r.stderr


def test_worker_with_a_wrong_max_logit_fails(tmp_path):
    script = tmp_path / "unscaled.py"
    script.write_text(WRONG_WORKER)
    r = verify_worker(f"{sys.executable} {script}", "numpy-sdpa-unscaled-max")
    assert r.returncode == 1 and "results: pass 0  fail 2  unsupported 1  error 0" in r.stdout, r.stdout + r.stderr
    assert "max_logit" in r.stdout
