# A Python worker that is right within tolerance but sums the keys of every row in as many chunks as the schedule's
# threads (one chunk under its own schedule), merged at the end, while declaring the threads knob bitwise: the
# schedule check must catch it, which shows the schedule reaching a Python kernel (tests/invariance/CMakeLists.txt, label
# invariance). Served with attncheck.worker.serve.
import os
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "python"))
import attncheck.worker  # noqa: E402
from numpy_sdpa import FEATURES, visible  # noqa: E402


def chunked_sdpa(q, k, v, *, problem, mask=None, bias=None, keep=None, schedule=None):
    chunks = max(1, (schedule or {}).get("threads", 0))
    group = q.shape[1] // k.shape[1]
    q, k, v = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * np.float32(problem["scale"])
    vis = visible(problem, mask, s.shape)
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(vis, np.exp(s - m), 0).astype(np.float32)
    vv = np.where(vis[..., None], v[:, :, None, :, :], 0)  # masked values never reach the sum
    total = np.zeros(s.shape[:3] + (1,), dtype=np.float32)
    acc = np.zeros(q.shape[:3] + (v.shape[-1],), dtype=np.float32)
    for part in np.array_split(np.arange(s.shape[-1]), chunks):  # per chunk in key order, then chunk after chunk
        t = np.zeros_like(total)
        a = np.zeros_like(acc)
        for j in part:
            t += e[..., j, None]
            a += e[..., j, None] * vv[:, :, :, j, :]
        total += t
        acc += a
    out = acc / np.where(total > 0, total, 1)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, (m + np.log(np.where(total > 0, total, 1)))[..., 0], -np.inf)
    return {"out": out, "lse": lse}


if __name__ == "__main__":
    attncheck.worker.serve(chunked_sdpa, {"name": "schedule-worker", "description": "keys in one chunk per thread",
                                          "policy": "zero", "dtypes": ["f32"], "layouts": ["bhsd", "bshd"],
                                          "features": [f for f in FEATURES if f != "softcap"], "deterministic": True,
                                          "schedule_knobs": ["threads"], "schedule_bitwise": ["threads"]})
