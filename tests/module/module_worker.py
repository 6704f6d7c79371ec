# A numpy attention module (float64) served through attncheck.worker's module message, written from
# docs/module.md and docs/worker-protocol.md: `attncheck verify --worker "python3 module_worker.py MODE" --fixtures
# golden/modules [--pass both]`. MODE "correct"; "scale-d-model": scores scaled by 1/sqrt(d_model) = 1/sqrt(Hq*Dqk)
# instead of the attention's scale; "grad-out-bias": Wo's bias gradient left at zero (docs/module.md's mistakes).
# It runs modules only: the forward, and its backward by hand (module_backward).
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


def forward(x, problem, x2, w, b, wo, bo, mask, bias, keep, mode):
    """The module's forward in float64, with what its backward needs."""
    a = problem["attention"]
    B, Hq, Hkv, Lq, Dqk, Dv = (a[k] for k in ("B", "Hq", "Hkv", "Lq", "Dqk", "Dv"))
    kv = x if x2 is None else x2

    def heads(src, which, H, D):
        W, bias_ = projection(problem, which, w, b)
        z = src @ W.T + (0 if bias_ is None else bias_)  # [B, L, H*D]
        return z.reshape(B, src.shape[1], H, D).transpose(0, 2, 1, 3)

    f = {"q": heads(x, 0, Hq, Dqk), "k": heads(kv, 1, Hkv, Dqk), "v": heads(kv, 2, Hkv, Dv)}
    k, v = np.repeat(f["k"], Hq // Hkv, axis=1), np.repeat(f["v"], Hq // Hkv, axis=1)
    scale = 1 / np.sqrt(Hq * Dqk) if mode == "scale-d-model" else a["scale"]
    s = f["raw"] = np.einsum("bhid,bhjd->bhij", f["q"], k) * scale
    if a["softcap"] > 0:
        s = a["softcap"] * np.tanh(s / a["softcap"])
    if bias is not None:
        s = s + np.broadcast_to(bias, s.shape)
    vis = visible(a, s.shape, mask)
    m = np.max(np.where(vis, s, -np.inf), axis=-1, keepdims=True)
    e = np.where(vis, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    total = e.sum(axis=-1, keepdims=True)
    fm = {"nan": np.nan, "zero": 0.0, "uniform": 1.0 / s.shape[-1]}[a["fully_masked"]]
    f["p"] = np.where(total > 0, e / np.where(total > 0, total, 1), fm)
    f["drop"] = 1.0
    if a["dropout_p"] > 0:
        f["drop"] = np.where(np.broadcast_to(keep, s.shape) != 0, 1 / (1 - a["dropout_p"]), 0)
    o = np.einsum("bhij,bhjd->bhid", f["p"] * f["drop"], v)
    f["merged"] = o.transpose(0, 2, 1, 3).reshape(B, Lq, Hq * Dv)
    f["y"] = f["merged"] @ wo.T + (0 if bo is None else bo)
    return f


def _arrays(x, x2, wq, wk, wv, bq, bk, bv, wqkv, bqkv, wo, bo, bias):
    f = lambda t: None if t is None else np.asarray(t, dtype=np.float64)  # noqa: E731
    w = f(wqkv) if wqkv is not None else [f(wq), f(wk), f(wv)]
    b = f(bqkv) if wqkv is not None else [f(bq), f(bk), f(bv)]
    return f(x), f(x2), w, b, f(wo), f(bo), f(bias)


def module(x, *, problem, x2=None, wq=None, wk=None, wv=None, bq=None, bk=None, bv=None, wqkv=None, bqkv=None,
           wo, bo=None, mask=None, bias=None, keep=None, mode="correct"):
    x, x2, w, b, wo, bo, bias = _arrays(x, x2, wq, wk, wv, bq, bk, bv, wqkv, bqkv, wo, bo, bias)
    f = forward(x, problem, x2, w, b, wo, bo, mask, bias, keep, mode)
    out = {"y": f["y"]}
    if problem["attention"]["want_weights"]:
        out["weights"] = f["p"].mean(axis=1, keepdims=True) if problem["average_weights"] else f["p"]
    return out


def module_backward(x, *, problem, dy, x2=None, wq=None, wk=None, wv=None, bq=None, bk=None, bv=None, wqkv=None,
                    bqkv=None, wo, bo=None, mask=None, bias=None, keep=None, mode="correct"):
    """The gradients of sum(dy * y), by hand: Wo, the heads' merge, dropout, the softmax, the softcap and the
    scores, then each projection (rows scattered back into the packing; dx summed over the paths that read x)."""
    a = problem["attention"]
    B, Hq, Hkv, Lq, Lk, Dqk, Dv = (a[k] for k in ("B", "Hq", "Hkv", "Lq", "Lk", "Dqk", "Dv"))
    G = Hq // Hkv
    x, x2, w, b, wo, bo, bias = _arrays(x, x2, wq, wk, wv, bq, bk, bv, wqkv, bqkv, wo, bo, bias)
    dy = np.asarray(dy, dtype=np.float64)
    f = forward(x, problem, x2, w, b, wo, bo, mask, bias, keep, mode)
    g = {"dwo": dy.reshape(-1, dy.shape[-1]).T @ f["merged"].reshape(-1, Hq * Dv)}
    if bo is not None:
        g["dbo"] = np.zeros_like(bo) if mode == "grad-out-bias" else dy.sum(axis=(0, 1))
    do = (dy @ wo).reshape(B, Lq, Hq, Dv).transpose(0, 2, 1, 3)
    k, v = np.repeat(f["k"], G, axis=1), np.repeat(f["v"], G, axis=1)
    dv = np.einsum("bhij,bhid->bhjd", f["p"] * f["drop"], do)
    dp = np.einsum("bhid,bhjd->bhij", do, v) * f["drop"]
    ds = f["p"] * (dp - (dp * f["p"]).sum(axis=-1, keepdims=True))
    if bias is not None:
        axes = tuple(d for d in range(4) if bias.shape[d] == 1 and ds.shape[d] > 1)
        g["dbias"] = ds.sum(axis=axes, keepdims=True)
    if a["softcap"] > 0:
        ds = ds * (1 - np.tanh(f["raw"] / a["softcap"]) ** 2)
    scale = 1 / np.sqrt(Hq * Dqk) if mode == "scale-d-model" else a["scale"]
    dq = np.einsum("bhij,bhjd->bhid", ds, k) * scale
    dk = np.einsum("bhij,bhid->bhjd", ds, f["q"]) * scale
    fold = lambda t: t.reshape(B, Hkv, G, Lk, t.shape[-1]).sum(axis=2)  # noqa: E731  (GQA: sum each group)
    kv = x if x2 is None else x2
    dx, dkv = np.zeros_like(x), np.zeros_like(kv)
    if w.__class__ is not list:
        g["dwqkv"] = np.zeros_like(w)
        if b is not None:
            g["dbqkv"] = np.zeros_like(b)
    for which, dh, src in ((0, dq, x), (1, fold(dk), kv), (2, fold(dv), kv)):
        H, D = dh.shape[1], dh.shape[3]
        dz = dh.transpose(0, 2, 1, 3).reshape(B, src.shape[1], H * D)
        W, _ = projection(problem, which, w, b)
        dW, db = dz.reshape(-1, H * D).T @ src.reshape(-1, src.shape[-1]), dz.sum(axis=(0, 1))
        if w.__class__ is list:
            g["dw" + "qkv"[which]] = dW
            if b[which] is not None:
                g["db" + "qkv"[which]] = db
        else:
            idx = [rows(problem, which, h, d) for h in range(H) for d in range(D)]
            g["dwqkv"][idx] = dW
            if b is not None:
                g["dbqkv"][idx] = db
        if which == 0:
            dx += dz @ W
        else:
            dkv += dz @ W
    if x2 is None:
        dx += dkv
    else:
        g["dx2"] = dkv
    g["dx"] = dx
    return g


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "correct"
    attncheck.worker.serve(None, {"name": "numpy-module", "description": "numpy module (tests/module)"},
                           module=lambda x, **kw: module(x, mode=mode, **kw),
                           module_backward=lambda x, **kw: module_backward(x, mode=mode, **kw))
