# A numpy attention module (float64) served through attncheck.worker's module message, written from
# docs/module.md and docs/worker-protocol.md: `attncheck verify --worker "python3 module_worker.py MODE" --fixtures
# golden/modules`. MODE "correct", or "scale-d-model": scores scaled by 1/sqrt(d_model) = 1/sqrt(Hq*Dqk) instead of
# the attention's scale (docs/module.md's scale-d-model mistake). It runs modules only.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import attncheck  # noqa: E402


def rows(problem, which, h, d):
    """The row of a packed weight holding dim d of head h of projection `which` (0 q, 1 k, 2 v)."""
    a = problem["attention"]
    Hq, Hkv, Dqk, Dv = a["Hq"], a["Hkv"], a["Dqk"], a["Dv"]
    if problem["packing"] == "packed":
        return [h * Dqk + d, Hq * Dqk + h * Dqk + d, Hq * Dqk + Hkv * Dqk + h * Dv + d][which]
    G = Hq // Hkv
    block = G * Dqk + Dqk + Dv
    return [(h // G) * block + (h % G) * Dqk + d, h * block + G * Dqk + d, h * block + G * Dqk + Dqk + d][which]


def projection(problem, which, w, b):
    """The [H*D, in] weight and [H*D] bias of one projection, rows head-major."""
    a = problem["attention"]
    H, D = (a["Hq"], a["Dqk"]) if which == 0 else (a["Hkv"], a["Dqk"] if which == 1 else a["Dv"])
    if problem["packing"] == "separate":
        return w[which], b[which]
    idx = [rows(problem, which, h, d) for h in range(H) for d in range(D)]
    return w[idx], None if b is None else b[idx]


def visible(a, shape, mask):
    B, _, Lq, Lk = shape
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    vis = np.ones(shape, dtype=bool)
    for b in range(B):
        diag = i + a["diagonal_offset"][b]
        ok = np.ones((Lq, Lk), dtype=bool)
        if a["causal"]:
            ok &= j <= diag
        if a["window_left"] >= 0:
            ok &= j >= diag - a["window_left"]
        if a["window_right"] >= 0:
            ok &= j <= diag + a["window_right"]
        if a["key_lengths"] is not None:
            ok &= j < a["key_lengths"][b]
        vis[b] &= ok
    if mask is not None:
        vis &= np.broadcast_to(mask != 0, shape)
    return vis


def module(x, *, problem, x2=None, wq=None, wk=None, wv=None, bq=None, bk=None, bv=None, wqkv=None, bqkv=None,
           wo, bo=None, mask=None, bias=None, keep=None, mode="correct"):
    a = problem["attention"]
    B, Hq, Hkv, Lq, Lk, Dqk, Dv = (a[k] for k in ("B", "Hq", "Hkv", "Lq", "Lk", "Dqk", "Dv"))
    f = lambda t: None if t is None else np.asarray(t, dtype=np.float64)  # noqa: E731
    x, x2, wo, bo = f(x), f(x2), f(wo), f(bo)
    w = f(wqkv) if wqkv is not None else [f(wq), f(wk), f(wv)]
    b = f(bqkv) if wqkv is not None else [f(bq), f(bk), f(bv)]
    kv = x if x2 is None else x2

    def heads(src, which, H, D):
        W, bias_ = projection(problem, which, w, b)
        z = src @ W.T + (0 if bias_ is None else bias_)  # [B, L, H*D]
        return z.reshape(B, src.shape[1], H, D).transpose(0, 2, 1, 3)

    q, k, v = heads(x, 0, Hq, Dqk), heads(kv, 1, Hkv, Dqk), heads(kv, 2, Hkv, Dv)
    k, v = np.repeat(k, Hq // Hkv, axis=1), np.repeat(v, Hq // Hkv, axis=1)
    scale = 1 / np.sqrt(Hq * Dqk) if mode == "scale-d-model" else a["scale"]
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if a["softcap"] > 0:
        s = a["softcap"] * np.tanh(s / a["softcap"])
    if bias is not None:
        s = s + np.broadcast_to(np.asarray(bias, dtype=np.float64), s.shape)
    vis = visible(a, s.shape, mask)
    m = np.max(np.where(vis, s, -np.inf), axis=-1, keepdims=True)
    e = np.where(vis, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    total = e.sum(axis=-1, keepdims=True)
    fm = {"nan": np.nan, "zero": 0.0, "uniform": 1.0 / Lk}[a["fully_masked"]]
    p = np.where(total > 0, e / np.where(total > 0, total, 1), fm)
    pd = p
    if a["dropout_p"] > 0:
        pd = np.where(np.broadcast_to(keep, p.shape) != 0, p / (1 - a["dropout_p"]), 0)
    o = np.einsum("bhij,bhjd->bhid", pd, v)
    y = o.transpose(0, 2, 1, 3).reshape(B, Lq, Hq * Dv) @ wo.T + (0 if bo is None else bo)
    out = {"y": y}
    if a["want_weights"]:
        out["weights"] = p.mean(axis=1, keepdims=True) if problem["average_weights"] else p
    return out


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "correct"
    attncheck.worker.serve(None, {"name": "numpy-module", "description": "numpy module (tests/module)"},
                           module=lambda x, **kw: module(x, mode=mode, **kw))
