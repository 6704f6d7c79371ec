# A math-path kernel (PyTorch's math backend, JAX's XLA attention, ONNX Runtime's CPU Attention do the same): the
# weights of masked keys are exactly 0, but out = weights @ V multiplies every value, so a NaN or inf stored in a
# masked key's value reaches the output (0 * NaN = NaN). With the argument "finite-required" it declares that its
# contract needs finite inputs everywhere (docs/isolation.md#masked-inputs); without it, the default (isolated).
import os
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "python"))
import attncheck.worker  # noqa: E402
from numpy_sdpa import FEATURES, visible  # noqa: E402


def math_path(q, k, v, *, problem, mask=None, bias=None, keep=None):
    group = q.shape[1] // k.shape[1]
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.einsum("bhid,bhjd->bhij", q, k) * problem["scale"]
        vis = visible(problem, mask, s.shape)
        s = np.where(vis, s, -np.inf)
        m = np.max(s, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        e = np.where(vis, np.exp(s - m), 0)
        total = e.sum(axis=-1, keepdims=True)
        w = e / np.where(total > 0, total, 1)
        out = np.einsum("bhij,bhjd->bhid", w, v)  # every value times its weight, masked ones too
    return out


if __name__ == "__main__":
    decl = {"name": "math-path", "description": "numpy math path (masked values times 0)", "policy": "zero",
            "dtypes": ["f64", "f32"], "layouts": ["bhsd", "bshd"], "features": [f for f in FEATURES if f not in ("softcap", "lse_out")]}
    if sys.argv[1:] == ["finite-required"]:
        decl["masked_inputs"] = "finite-required"
    attncheck.worker.serve(math_path, decl)
