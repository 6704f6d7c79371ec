# The README's h5py route, minus PyTorch: read a fixture with h5py alone, run an independent numpy SDPA on its
# inputs, write /actual/out as float16 and /actual/lse as float32, and `attncheck compare` must pass; a perturbed
# output or lse must fail (exit 1). The same candidate as an .npz (np.savez: out, lse) must give the same verdicts.
# Usage: h5py_candidate.py ATTNCHECK FIXTURE SCRATCH_DIR. h5py is a bootstrap dependency: without it this fails.
import os
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"h5py/numpy not available ({e}): install python3-h5py (tools/bootstrap.sh does)")
    sys.exit(1)

exe, fixture, scratch = sys.argv[1:4]
os.makedirs(scratch, exist_ok=True)

with h5py.File(fixture, "r") as f:
    q, k, v = (f["inputs"][n][()] for n in "qkv")  # float16 [B, H, L, D]: exactly what the implementation gets
    assert q.dtype == np.float16 and f.attrs["layout"].decode() == "BHSD" and f.attrs["causal"] == 1
    scale = float(f.attrs["effective_scale"])
    expected = f["expected"]["out"][()]

# scaled_dot_product_attention(q, k, v, is_causal=True) in float32, like PyTorch's math backend.
s = np.einsum("bhid,bhjd->bhij", q.astype(np.float32), k.astype(np.float32)) * np.float32(scale)
lq, lk = s.shape[-2:]
s = np.where(np.tril(np.ones((lq, lk), dtype=bool)), s, -np.inf)
m = s.max(axis=-1, keepdims=True)
p = np.exp(s - m)
lse = (m + np.log(p.sum(axis=-1, keepdims=True)))[..., 0]  # float32 [B, H, Lq], as the README writes it
p /= p.sum(axis=-1, keepdims=True)
out = np.einsum("bhij,bhjd->bhid", p, v.astype(np.float32)).astype(np.float16)


def compare(name, data, lse_data):
    path = os.path.join(scratch, name)
    if name.endswith(".npz"):  # the same candidate without h5py: members out, lse
        np.savez(path, out=data, lse=lse_data)
    else:
        with h5py.File(path, "w") as c:
            c["actual/out"] = data
            c["actual/lse"] = lse_data
    return subprocess.run([exe, "compare", "--expected", fixture, "--actual", path]).returncode


rc = compare("numpy_sdpa.h5", out, lse)
if rc != 0:
    sys.exit(f"numpy SDPA: expected exit 0, got {rc}")
with h5py.File(fixture, "r") as f:
    expected_lse = f["expected"]["lse"][()]
rc = compare("expected_copy.h5", expected, expected_lse)  # the expected values themselves, in float64
if rc != 0:
    sys.exit(f"copy of /expected/out and /expected/lse: expected exit 0, got {rc}")
bad = out.copy()
bad[1, 2, 3, 4] += np.float16(0.05)
rc = compare("perturbed.h5", bad, lse)
if rc != 1:
    sys.exit(f"perturbed output: expected exit 1, got {rc}")
bad_lse = lse.copy()
bad_lse[0, 1, 2] += np.float32(np.log(2.0))
rc = compare("perturbed_lse.h5", out, bad_lse)
if rc != 1:
    sys.exit(f"lse off by log 2: expected exit 1, got {rc}")
rc = compare("numpy_sdpa.npz", out, lse)
if rc != 0:
    sys.exit(f"numpy SDPA as .npz: expected exit 0, got {rc}")
rc = compare("perturbed.npz", bad, lse)
if rc != 1:
    sys.exit(f"perturbed output as .npz: expected exit 1, got {rc}")
rc = compare("perturbed_lse.npz", out, bad_lse)
if rc != 1:
    sys.exit(f"lse off by log 2 as .npz: expected exit 1, got {rc}")
rc = compare("transposed.npz", out.transpose(0, 2, 1, 3), lse)  # BSHD bytes for a BHSD fixture: a shape error
if rc != 2:
    sys.exit(f"out with the wrong shape as .npz: expected exit 2, got {rc}")
print("h5py and .npz candidate routes: numpy SDPA (out and lse) passes, perturbed out or lse fails")
