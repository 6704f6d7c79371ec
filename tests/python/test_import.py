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
# Every import error names the file: a mask, bias or keep of the wrong shape, and an array of the wrong dtype.
for name, arrays in (("mask_shape.npz", dict(q=q, k=k, v=v, mask=np.ones((3, 5), np.bool_))),
                     ("bias_shape.npz", dict(q=q, k=k, v=v, bias=np.zeros((2, 4, 7, 5), np.float32))),
                     ("keep_shape.npz", dict(q=q, k=k, v=v, keep=np.ones((2, 4, 7), np.uint8))),
                     ("qkv_int.npz", dict(q=q.astype(np.int32), k=k.astype(np.int32), v=v.astype(np.int32)))):
    path = os.path.join(scratch, name)
    np.savez(path, **arrays)
    extra = ["--dropout-p", "0.1"] if "keep" in arrays else []
    r = run("import", path, "--out", os.path.join(scratch, "x.h5"), *flags, *extra)
    assert r.returncode == 2 and path in r.stderr, (name, r.returncode, r.stderr)
    print(f"{name}: rejected with exit 2 naming the file: {r.stderr.strip()}")
# A .npy header whose shape is not a tuple of non-negative integers (an extent past int64, a negative one) is an
# input error naming the file (the first threw std::out_of_range, "stoll", naming nothing; found by fuzz_npz).
for name, shape in (("huge_extent.npz", b"(99999999999999999999, 4, 7, 16)"), ("negative_extent.npz", b"(-2, 4, 7, 16)")):
    path = os.path.join(scratch, name)
    np.savez(path, q=q, k=k, v=v)
    raw = open(path, "rb").read()
    old_shape = b"(2, 4, 7, 16)"
    at = raw.index(b"'shape': " + old_shape) + len(b"'shape': ")
    end = raw.index(b"\n", at)  # the header's space padding absorbs the length change
    rest = raw[at + len(old_shape):end].rstrip(b" ")  # ", }"
    pad = end - at - len(shape) - len(rest)
    assert pad >= 0, name
    open(path, "wb").write(raw[:at] + shape + rest + b" " * pad + raw[end:])
    r = run("import", path, "--out", os.path.join(scratch, "x.h5"), *flags)
    assert r.returncode == 2 and path in r.stderr and "shape" in r.stderr, (name, r.returncode, r.stderr)
    print(f"{name}: rejected with exit 2 naming the file: {r.stderr.strip()}")
# The fixture reader takes h5py's enum bool as a mask (not "non-numeric type")...
fix = os.path.join(scratch, "cases", "stored_npz.h5")
with h5py.File(fix, "r+") as f:
    del f["inputs/mask"]
    f["inputs/mask"] = mask
    assert f["inputs/mask"].dtype == np.bool_
r = run("verify", "--fixtures", os.path.join(scratch, "cases"), "--impl", "reference")
assert r.returncode == 0 and "fail 0" in r.stdout, r.stdout + r.stderr
print("fixture reader: an h5py bool mask is read")
# ...and refuses an int8 -1 in /inputs/mask too (not clipped to 0).
with h5py.File(fix, "r+") as f:
    del f["inputs/mask"]
    f["inputs/mask"] = bad
r = run("verify", "--fixtures", os.path.join(scratch, "cases"), "--impl", "reference", "--filter", "*")
assert r.returncode == 2 and "values must be 0 or 1, got -1" in r.stdout + r.stderr, r.stdout + r.stderr
print("fixture reader: int8 -1 in /inputs/mask rejected, naming the index")

# A KV-cache append (past_key/past_value; k, v the new tokens) with --scores-out masked and a causal offset equal
# to the past length (ONNX's is_causal with past_key): the fixture expects present = concat(past, new), the
# attention over the present keys and the masked scores, all matching numpy; BSHD past arrays alike.
pq = rng.standard_normal((2, 4, 3, 16)).astype(np.float32)
pk, pv = rng.standard_normal((2, 2, 5, 16)).astype(np.float32), rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
nk, nv = rng.standard_normal((2, 2, 3, 16)).astype(np.float32), rng.standard_normal((2, 2, 3, 8)).astype(np.float32)
K, V = np.concatenate([pk, nk], axis=2), np.concatenate([pv, nv], axis=2)
s = np.einsum("bhid,bhjd->bhij", pq.astype(np.float64), np.repeat(K, 2, axis=1).astype(np.float64)) * 0.25
s = np.where(np.arange(8)[None, :] <= np.arange(3)[:, None] + 5, s, -np.inf)
e = np.exp(s - s.max(-1, keepdims=True))
want = np.einsum("bhij,bhjd->bhid", e / e.sum(-1, keepdims=True), np.repeat(V, 2, axis=1).astype(np.float64))
for layout, tr in (("bhsd", lambda a: a), ("bshd", lambda a: a.transpose(0, 2, 1, 3))):
    path, out = os.path.join(scratch, f"past_{layout}.npz"), os.path.join(scratch, f"past_{layout}.h5")
    np.savez(path, q=tr(pq), k=tr(nk), v=tr(nv), past_key=tr(pk), past_value=tr(pv))
    r = run("import", path, "--out", out, "--layout", layout, "--scale", "0.25", "--causal", "top-left",
            "--causal-offset", "5", "--scores-out", "masked")
    assert r.returncode == 0, (layout, r.stdout, r.stderr)
    with h5py.File(out, "r") as f:
        assert f.attrs["past_len"] == 5 and f.attrs["Lk"] == 8
        assert np.array_equal(f["expected/present_key"][()], tr(K)) and np.array_equal(f["expected/present_value"][()], tr(V))
        got_s = f["expected/scores"][()]
        assert np.array_equal(np.isinf(got_s), np.isinf(s)) and np.allclose(got_s, s, rtol=0, atol=1e-12), "masked scores differ"
        err = np.abs(tr(f["expected/out"][()]) - want).max()
    assert err < 1e-12, f"past ({layout}): reference differs from numpy by {err}"
    print(f"past ({layout}): present, masked scores and out match numpy (max diff {err:.2e})")
np.savez(os.path.join(scratch, "past_only.npz"), q=pq, k=nk, v=nv, past_key=pk)
r = run("import", os.path.join(scratch, "past_only.npz"), "--out", os.path.join(scratch, "x.h5"))
assert r.returncode == 2 and "past_key and past_value come together" in r.stderr, r.stderr
r = run("import", os.path.join(scratch, "past_bhsd.npz"), "--out", os.path.join(scratch, "x.h5"), "--scores-out", "raw")
assert r.returncode == 2 and "--scores-out: unknown value 'raw'" in r.stderr, r.stderr
print("past_key alone and --scores-out raw: rejected with exit 2")

# fp8 inputs as uint8 codes (torch's .view(torch.uint8)) with --dtype fp8_e4m3 and per-tensor descales: the
# fixture's reference is that of the decoded values times the descales (an independent e4m3 decoder here), stored
# as codes; a descale on a non-fp8 problem is exit 2 naming the field.
def e4m3(code):  # OCP e4m3fn: bias 7, no infinities, S.1111.111 NaN
    s, e, m = (-1.0) ** (code >> 7), (code >> 3) & 15, code & 7
    return np.nan if (code & 0x7F) == 0x7F else s * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


codes = {n: rng.integers(0, 256, size=a.shape, dtype=np.uint8) for n, a in (("q", q), ("k", k), ("v", v))}
for n in codes:  # no NaN codes, and values of moderate size: exponent field below 10
    c = codes[n]
    codes[n] = np.where((c & 0x78) >= 0x50, c & 0xCF, c).astype(np.uint8)
decode = np.vectorize(e4m3)
ds = {"q": 0.5, "k": 0.25, "v": 4.0}
real = {n: decode(c) * ds[n] for n, c in codes.items()}
path, out = os.path.join(scratch, "fp8.npz"), os.path.join(scratch, "fp8.h5")
np.savez(path, mask=mask, **codes)
r = run("import", path, "--out", out, "--dtype", "fp8_e4m3", "--descale-q", "0.5", "--descale-k", "0.25",
        "--descale-v", "4", *flags)
assert r.returncode == 0, (r.stdout, r.stderr)
with h5py.File(out, "r") as f:
    assert np.array_equal(f["inputs/q"][()], codes["q"]) and f.attrs["descale_v"] == 4.0
    err = np.abs(f["expected/out"][()] - independent(real["q"], real["k"], real["v"], mask)).max()
assert err < 1e-12, f"fp8: reference differs from the decoded numpy result by {err}"
print(f"fp8 codes with descales: imported, expected out matches numpy (max diff {err:.2e})")
np.savez(path, q=q, k=k, v=v)
r = run("import", path, "--out", out, "--descale-v", "4")
assert r.returncode == 2 and "descale_v" in r.stderr, r.stderr
print("a descale on an fp32 problem: rejected with exit 2:", r.stderr.strip())
