# A kernel author's numpy scaled dot-product attention (float32 math, like PyTorch's math backend), and the same
# kernel served as an attncheck worker: `attncheck verify --worker "python3 numpy_sdpa.py" --impl numpy-sdpa`, with
# its backward (`verify --pass backward --fixtures golden/backward`: same command).
# Copy it and replace sdpa() with a call into your own kernel.
import numpy as np

FEATURES = ["gqa", "cross", "dqk_ne_dv", "causal", "per_batch_offsets", "key_padding", "bool_mask", "window",
            "softcap", "lse_out", "max_logit"]
DECLARATIONS = {"name": "numpy-sdpa", "description": "numpy SDPA example (examples/python)", "policy": "zero",
                "dtypes": ["f64", "f32", "f16", "bf16"], "layouts": ["bhsd", "bshd"], "features": FEATURES}


def visible(problem, mask, shape):
    """Which keys each query may attend to, [B, Hq, Lq, Lk] (causal, window, key padding, boolean mask)."""
    B, _, Lq, Lk = shape
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    vis = np.ones(shape, dtype=bool)
    for b in range(B):
        diag = i + problem["diagonal_offset"][b]
        ok = np.ones((Lq, Lk), dtype=bool)
        if problem["causal"]:
            ok &= j <= diag
        if problem["window_left"] >= 0:
            ok &= j >= diag - problem["window_left"]
        if problem["window_right"] >= 0:
            ok &= j <= diag + problem["window_right"]
        if problem["key_lengths"] is not None:
            ok &= j < problem["key_lengths"][b]
        vis[b] &= ok
    if mask is not None:
        vis &= np.broadcast_to(mask != 0, shape)
    return vis


def sdpa(q, k, v, *, problem, mask=None, bias=None, keep=None):
    acc = np.float64 if q.dtype == np.float64 else np.float32
    group = q.shape[1] // k.shape[1]
    q, k, v = (np.asarray(x, dtype=acc) for x in (q, k, v))
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * acc(problem["scale"])
    if problem["softcap"] > 0:
        s = acc(problem["softcap"]) * np.tanh(s / acc(problem["softcap"]))
    vis = visible(problem, mask, s.shape)
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    max_logit = m[..., 0]                         # the softmax input's row max; -inf where no key is visible
    m = np.where(np.isfinite(m), m, 0)            # fully masked rows: no max to subtract
    e = np.where(vis, np.exp(s - m), 0)
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(total > 0, total, 1)         # zero policy: a row without keys gives 0
    # Masked keys must not leak: their V may be NaN on purpose, and 0 * NaN is NaN. Non-finite V only counts
    # where a visible key holds it.
    bad = ~np.isfinite(v)
    out = np.einsum("bhij,bhjd->bhid", w, np.where(bad, 0, v))
    if bad.any():
        hit = np.einsum("bhij,bhjd->bhid", vis.astype(acc), bad.astype(acc)) > 0
        out = np.where(hit, np.nan, out)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, (m + np.log(np.where(total > 0, total, 1)))[..., 0], -np.inf)
    res = {"out": out, "lse": lse}
    if problem.get("max_logit") == "rows":       # QK-clip's statistic, per row [B,Hq,Lq] or per head [Hq]
        res["max_logit"] = max_logit
    elif problem.get("max_logit") == "heads":
        res["max_logit"] = max_logit.max(axis=(0, 2))
    return res


def sdpa_backward(q, k, v, *, problem, out, lse, dout, mask=None, bias=None, keep=None):
    """Gradients of sum(dout * out) for sdpa() (docs/backward.md): recomputes the weights, then dV = P^T dO,
    dS = P (dP - D) with D = rowsum(dO * O), the softcap's chain rule, dQ and dK; GQA sums over each group."""
    acc = np.float64 if q.dtype == np.float64 else np.float32
    group = q.shape[1] // k.shape[1]
    q, k, v, dout = (np.asarray(x, dtype=acc) for x in (q, k, v, dout))
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    # As in sdpa(): masked keys may hold NaN on purpose and must not leak; a visible one poisons its query's row.
    bad = ~(np.isfinite(kr).all(axis=-1) & np.isfinite(vr).all(axis=-1))
    kr, vr = np.where(np.isfinite(kr), kr, 0), np.where(np.isfinite(vr), vr, 0)
    x = np.einsum("bhid,bhjd->bhij", q, kr) * acc(problem["scale"])
    c = acc(problem["softcap"])
    s = c * np.tanh(x / c) if c > 0 else x
    vis = visible(problem, mask, s.shape)
    m = np.max(np.where(vis, s, -np.inf), axis=-1, keepdims=True)
    e = np.where(vis, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    total = e.sum(axis=-1, keepdims=True)
    p = e / np.where(total > 0, total, 1)          # fully masked rows: P = 0, so every gradient of the row is 0
    o = np.einsum("bhij,bhjd->bhid", p, vr)
    dp = np.einsum("bhid,bhjd->bhij", dout, vr)
    with np.errstate(invalid="ignore"):  # 0 * inf where a masked key is huge: discarded by the where
        ds = np.where(vis, p * (dp - np.sum(dout * o, axis=-1, keepdims=True)), 0)
    if c > 0:
        ds = ds * (1 - np.tanh(x / c) ** 2)
    B, Hkv = k.shape[:2]
    per_kv = lambda a: a.reshape(B, Hkv, group, *a.shape[2:]).sum(axis=2)  # noqa: E731
    dq = np.einsum("bhij,bhjd->bhid", ds, kr) * acc(problem["scale"])
    dq[(vis & bad[:, :, None, :]).any(axis=-1)] = np.nan
    return {"dq": dq,
            "dk": per_kv(np.einsum("bhij,bhid->bhjd", ds, q)) * acc(problem["scale"]),
            "dv": per_kv(np.einsum("bhij,bhid->bhjd", p, dout))}


if __name__ == "__main__":
    import os
    import sys

    try:
        import attncheck
    except ImportError:  # run from the repository without `pip install ./python`
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
        import attncheck

    attncheck.worker.serve(sdpa, DECLARATIONS, backward=sdpa_backward)
