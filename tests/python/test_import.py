# `attncheck import` round trip: user tensors (.npz stored and deflated, h5py with a bool mask) become a fixture
# whose expected output matches an independent numpy computation of the flags, and `verify` replays it; masks
# with values other than 0/1 (int8 -1, 2) and float masks are exit 2 naming the index. Usage: test_import.py EXE DIR
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

exe, scratch = sys.argv[1:3]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(os.path.join(scratch, "cases"))
rng = np.random.default_rng(7)
q = rng.standard_normal((2, 4, 7, 16)).astype(np.float32)
k = rng.standard_normal((2, 2, 9, 16)).astype(np.float32)
v = rng.standard_normal((2, 2, 9, 8)).astype(np.float32)
mask = rng.random((2, 1, 7, 9)) > 0.3
flags = ["--causal", "bottom-right", "--scale", "0.3", "--softcap", "2.5", "--policy", "zero"]


def independent(q, k, v, mask):  # float64 numpy: GQA, bottom-right causal, softcap, mask, zero policy
    k, v = np.repeat(k, 2, axis=1).astype(np.float64), np.repeat(v, 2, axis=1).astype(np.float64)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k) * 0.3
    s = 2.5 * np.tanh(s / 2.5)
    vis = (np.arange(9)[None, :] <= np.arange(7)[:, None] + 2) & mask
    e = np.where(vis, np.exp(s - np.where(vis, s, -np.inf).max(-1, keepdims=True, initial=-1e300)), 0)
    t = e.sum(-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", e / np.where(t > 0, t, 1), v)


def run(*args):
    return subprocess.run([exe, *args], capture_output=True, text=True)


def write(name, m, compressed=False):
    path = os.path.join(scratch, name)
    if name.endswith(".npz"):
        (np.savez_compressed if compressed else np.savez)(path, q=q, k=k, v=v, mask=m)
    else:
        with h5py.File(path, "w") as f:
            f["q"], f["k"], f["v"], f["mask"] = q, k, v, m
    return path


want = independent(q, k, v, mask)
for name, m, comp in (("stored.npz", mask, False), ("deflated.npz", mask.astype(np.int8), True),
                      ("h5py_bool.h5", mask, False), ("uint8.h5", mask.astype(np.uint8), False)):
    out = os.path.join(scratch, "cases", name.replace(".", "_") + ".h5")
    r = run("import", write(name, m, comp), "--out", out, *flags)
    assert r.returncode == 0, (name, r.stdout, r.stderr)
    with h5py.File(out, "r") as f:
        got = f["expected/out"][()]
        assert np.array_equal(f["inputs/q"][()], q) and np.array_equal(f["inputs/mask"][()], mask.astype(np.uint8))
        assert f.attrs["causal"] == 1 and f.attrs["alignment"] in (b"bottom_right", "bottom_right")
    err = np.abs(got - want).max()
    assert err < 1e-12, f"{name}: reference differs from the independent numpy result by {err}"
    print(f"{name}: imported, expected out matches numpy (max diff {err:.2e})")

# verify replays every imported fixture against the built-in CPU implementations.
r = run("verify", "--fixtures", os.path.join(scratch, "cases"), "--impl", "reference", "--impl", "cpu")
assert r.returncode == 0 and "fail 0" in r.stdout, r.stdout + r.stderr
print("verify replays the imported fixtures: pass")

bad = mask.astype(np.int8)
bad[1, 0, 3, 2] = -1
for name, m, needle in (("minus_one.npz", bad, "got -1 at index [1,0,3,2]"),
                        ("minus_one.h5", bad, "got -1 at index [1,0,3,2]"),
                        ("two.npz", mask.astype(np.uint8) * 2, "got 2 at index [0,0,0,"),
                        ("float.npz", mask.astype(np.float32), "mask: dtype float32 is not a mask type")):
    r = run("import", write(name, m), "--out", os.path.join(scratch, "x.h5"), *flags)
    assert r.returncode == 2 and needle in r.stderr, (name, r.returncode, r.stderr)
    print(f"{name}: rejected with exit 2: {r.stderr.strip()}")
# The fixture reader takes h5py's enum bool as a mask (it used to say "non-numeric type")...
fix = os.path.join(scratch, "cases", "stored_npz.h5")
with h5py.File(fix, "r+") as f:
    del f["inputs/mask"]
    f["inputs/mask"] = mask
    assert f["inputs/mask"].dtype == np.bool_
r = run("verify", "--fixtures", os.path.join(scratch, "cases"), "--impl", "reference")
assert r.returncode == 0 and "fail 0" in r.stdout, r.stdout + r.stderr
print("fixture reader: an h5py bool mask is read")
# ...and refuses an int8 -1 in /inputs/mask too (it used to be clipped to 0).
with h5py.File(fix, "r+") as f:
    del f["inputs/mask"]
    f["inputs/mask"] = bad
r = run("verify", "--fixtures", os.path.join(scratch, "cases"), "--impl", "reference", "--filter", "*")
assert r.returncode == 2 and "values must be 0 or 1, got -1" in r.stderr, r.stdout + r.stderr
print("fixture reader: int8 -1 in /inputs/mask rejected, naming the index")
