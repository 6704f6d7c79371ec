# A Python worker that is right within tolerance but sums the keys of every row in a new random order on each call
# (float32, like a kernel whose reduction follows a thread schedule), while declaring itself deterministic: the
# rerun check must catch it (tests/invariance/CMakeLists.txt, label invariance). Served with attncheck.worker.serve.
import os
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "python"))
import attncheck.worker  # noqa: E402
from numpy_sdpa import FEATURES, visible  # noqa: E402

rng = np.random.default_rng()  # unseeded on purpose: another order on every call


def shuffled_sdpa(q, k, v, *, problem, mask=None, bias=None, keep=None):
    group = q.shape[1] // k.shape[1]
    q, k, v = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * np.float32(problem["scale"])
    vis = visible(problem, mask, s.shape)
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(vis, np.exp(s - m), 0).astype(np.float32)
    perm = rng.permutation(s.shape[-1])
    total = np.add.reduce(e[..., perm], axis=-1, keepdims=True)
    w = e / np.where(total > 0, total, 1)
    vv = np.where(vis[..., None], v[:, :, None, :, :], 0)  # masked values never reach the sum
    out = np.zeros(q.shape[:3] + (v.shape[-1],), dtype=np.float32)
    for j in perm:  # one key after another, in this call's order
        out += w[..., j, None] * vv[:, :, :, j, :]
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, (m + np.log(np.where(total > 0, total, 1)))[..., 0], -np.inf)
    return {"out": out, "lse": lse}


if __name__ == "__main__":
    attncheck.worker.serve(shuffled_sdpa, {"name": "shuffled-worker", "description": "keys in a random order per call",
                                           "policy": "zero", "dtypes": ["f32"], "layouts": ["bhsd", "bshd"],
                                           "features": [f for f in FEATURES if f != "softcap"], "deterministic": True})
