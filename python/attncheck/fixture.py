# Fixtures (golden/SCHEMA.md) as dicts of numpy arrays, through h5py: load, save, and reference()/make_fixture()
# which build a fixture from your own arrays with `attncheck import` (the fp64 reference of the CLI computes it).
import os
import tempfile

import numpy as np

from . import _cli


def load(path):
    """{"path", "name", "attrs": {...}, "inputs": {q, k, v, ...}, "expected": {out, lse, ...}} (arrays as stored)."""
    import h5py
    with h5py.File(path, "r") as f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        group = lambda g: {k: g[k][()] for k in g}  # noqa: E731
        return {"path": os.fspath(path), "name": str(attrs.get("name", "")), "attrs": attrs,
                "inputs": group(f["inputs"]), "expected": group(f["expected"])}


def save(path, fixture):
    """Writes a dict as load() returns it (strings as fixed-length, checksummed datasets, like attncheck writes)."""
    import h5py
    with h5py.File(path, "w") as f:
        for k, v in fixture["attrs"].items():
            f.attrs[k] = np.bytes_(v) if isinstance(v, str) else v
        for grp in ("inputs", "expected"):
            g = f.create_group(grp)
            for k, v in fixture[grp].items():
                v = np.asarray(v)
                # Fletcher32 checksums like attncheck's own fixtures: a changed bit is a read error, not a verdict.
                g.create_dataset(k, data=v, fletcher32=v.ndim > 0 and v.size > 0)
                if grp == "inputs" and k in "qkv" and fixture["attrs"].get("dtype") == "bf16":
                    g[k].attrs["encoding"] = np.bytes_("bfloat16")
    return os.fspath(path)


def _flags(problem):
    """Problem keywords -> `attncheck import` flags."""
    p = dict(problem)
    flags = []
    causal = p.pop("causal", False)
    if causal:
        flags += ["--causal", "top_left" if causal is True else str(causal)]
    for key in ("scale", "softcap", "policy", "fill_value", "dropout_p", "dropout_seed", "layout", "dtype", "name",
                "causal_offset", "descale_q", "descale_k", "descale_v", "score_mod", "mask_mod", "max_logit"):
        value = p.pop(key, None)
        if value is not None:
            flags += ["--" + key.replace("_", "-"), repr(value) if isinstance(value, float) else str(value)]
    for key in ("window", "key_lengths"):
        value = p.pop(key, None)
        if value is not None:
            flags += ["--" + key.replace("_", "-"), ",".join(str(int(x)) for x in value)]
    for key in ("want_lse", "want_weights"):
        if p.pop(key, False):
            flags.append("--" + key.replace("_", "-"))
    if p:
        raise TypeError(f"unknown problem fields {sorted(p)}")
    return flags


def make_fixture(path, q, k, v, mask=None, bias=None, keep=None, tolerances=None, aux=None, **problem):
    """Writes a fixture for your tensors with `attncheck import` and returns load(path).

    problem: causal (True = top_left, "bottom_right", ...), scale, softcap, policy, window=(left, right),
    key_lengths, fill_value, dropout_p/dropout_seed (with keep), layout ("bhsd"/"bshd"), dtype, name,
    want_lse, want_weights, max_logit ("rows" or "heads": also expect the max-logit output). Masks are bool or 0/1 integers, broadcast to [B, Hq, Lq, Lk].
    score_mod / mask_mod: FlexAttention's score_mod / mask_mod as expressions over score, b, h, q_idx, kv_idx,
    q_pos and the arrays of `aux` ({name: array of rank 1 to 4}), e.g. score_mod="score + slopes[h] * (kv_idx -
    q_idx)", aux={"slopes": s}; stored in the fixture, so it replays without your code (docs/problem-model.md
    "Expressions").
    """
    arrays = {"q": q, "k": k, "v": v, "mask": mask, "bias": bias, "keep": keep}
    aux = dict(aux or {})
    clash = sorted(set(aux) & (set(arrays) | {"past_key", "past_value"}))
    if clash:
        raise ValueError(f"aux tensors may not be named like an attention input: {clash}")
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "tensors.npz")
        np.savez(npz, **{n: np.asarray(a) for n, a in arrays.items() if a is not None},
                 **{n: np.asarray(a) for n, a in aux.items()})
        extra = ["--tolerances", os.fspath(tolerances)] if tolerances else []
        if aux:
            extra += ["--aux", ",".join(aux)]
        r = _cli.run(["import", npz, "--out", os.fspath(path)] + extra + _flags(problem))
        if r.returncode != 0:
            raise RuntimeError(r.stderr or r.stdout)
    return load(path)


_OUTPUTS = ("out", "lse", "weights", "max_logit")


def reference(q, k, v, mask=None, bias=None, keep=None, **problem):
    """The fp64 reference's {"out", "lse", "weights"} for your tensors (the CLI's code, via `attncheck import`), and
    "max_logit" [B,Hq,Lq] with max_logit="rows" or "heads" (stored as rows in both forms; heads is its maximum over
    b and i)."""
    problem.setdefault("want_weights", True)
    with tempfile.TemporaryDirectory() as tmp:
        e = make_fixture(os.path.join(tmp, "case.h5"), q, k, v, mask, bias, keep, **problem)["expected"]
    return {n: e[n] for n in _OUTPUTS if n in e}


def tolerance(q, k, v, mask=None, bias=None, keep=None, **problem):
    """Per-element tolerances {"out", "lse", "weights"} for outputs of your tensors' problem delivered in its dtype
    (the tolerance model of docs/tolerance.md, as compare and verify apply it); arrays in q's layout. With
    max_logit="rows" or "heads", also "max_logit" in that form ([B,Hq,Lq] or [Hq])."""
    problem.setdefault("want_weights", True)
    with tempfile.TemporaryDirectory() as tmp:
        make_fixture(os.path.join(tmp, "case.h5"), q, k, v, mask, bias, keep, tolerances=tmp, **problem)
        tol = {n: np.load(os.path.join(tmp, n + ".npy")) for n in _OUTPUTS
               if os.path.exists(os.path.join(tmp, n + ".npy"))}
    if problem.get("layout") == "bshd":  # stored [B, L, H, D] like the inputs
        tol["out"] = tol["out"].transpose(0, 2, 1, 3)
    return tol
