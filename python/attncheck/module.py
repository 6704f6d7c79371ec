# Modules in Python (docs/module.md): import_module writes a module fixture from x, the weights and flags
# (`attncheck import --module`; with dy, the reference gradients too), compare_module judges y (and weights, and
# gradients) against one (`attncheck compare-module`), and check_module does both for a PyTorch
# nn.MultiheadAttention, reading its weights and running its forward (and, with grad=True, its backward).
# check_module_function judges a plain Python module function (numpy, or anything returning arrays) on the module
# fixtures through the worker protocol's module message.
import os
import re
import tempfile

import numpy as np

from . import _cli
from .cases import default_dir
from .check import drive


class ModuleResult:
    def __init__(self, rc, text):
        self.passed = rc == 0
        self.text = text
        self.diagnosis = [l.split("diagnosis:", 1)[1].strip() for l in text.splitlines() if "diagnosis:" in l]

    def __bool__(self):
        return self.passed

    def __str__(self):
        return self.text


def import_module(arrays, out, heads, kv_heads=None, *, packing=None, causal=None, scale=None, dtype=None,
                  need_weights=False, average_weights=False, name=None):
    """Writes the module fixture `out` from a dict of numpy arrays (x [, x2], wq/wk/wv or wqkv, biases, wo [, bo],
    key_padding_mask (True = ignore) or mask (1 = attend), dy [B, Lq, d_out] for gradients); weights are [out, in]
    as nn.Linear stores them."""
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "module.npz")
        np.savez(npz, **{k: np.asarray(v) for k, v in arrays.items() if v is not None})
        args = ["import", "--module", npz, "--out", os.fspath(out), "--heads", str(heads)]
        for flag, v in (("--kv-heads", kv_heads), ("--packing", packing), ("--causal", causal), ("--scale", scale),
                        ("--dtype", dtype), ("--name", name)):
            if v is not None:
                args += [flag, str(v)]
        args += ["--want-weights"] if need_weights else []
        args += ["--average-weights"] if average_weights else []
        r = _cli.run(args)
        if r.returncode != 0:
            raise RuntimeError((r.stderr or r.stdout).strip())
    return os.fspath(out)


def compare_module(fixture, y, weights=None, grads=None):
    """The verdict of `attncheck compare-module` on y [B, Lq, d_out] (and weights) for a module fixture; grads
    (a dict "dx", "dwqkv", "dwo", ... shaped like the inputs) are judged too when the fixture has dy."""
    with tempfile.TemporaryDirectory() as tmp:
        cand = os.path.join(tmp, "candidate.npz")
        arrays = {"y": np.asarray(y)}
        if weights is not None:
            arrays["weights"] = np.asarray(weights)
        for k, v in (grads or {}).items():
            arrays[k] = np.asarray(v)
        np.savez(cand, **arrays)
        r = _cli.run(["compare-module", "--expected", os.fspath(fixture), "--actual", cand])
    return ModuleResult(r.returncode, (r.stdout + r.stderr).strip())


def _np(t):
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def mha_arrays(module):
    """The weights of an nn.MultiheadAttention as import_module's arrays ([out, in], its own packing)."""
    if module.bias_k is not None or module.add_zero_attn:
        raise NotImplementedError("check_module: add_bias_kv and add_zero_attn are not in the module problem model")
    a = {}
    if module._qkv_same_embed_dim:
        a["wqkv"] = _np(module.in_proj_weight)  # [3E, E], rows q | k | v (packing "packed")
        if module.in_proj_bias is not None:
            a["bqkv"] = _np(module.in_proj_bias)
    else:
        a["wq"], a["wk"], a["wv"] = (_np(w) for w in (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight))
        if module.in_proj_bias is not None:
            E = module.embed_dim
            a["bq"], a["bk"], a["bv"] = (_np(module.in_proj_bias[i * E:(i + 1) * E]) for i in range(3))
    a["wo"] = _np(module.out_proj.weight)
    if module.out_proj.bias is not None:
        a["bo"] = _np(module.out_proj.bias)
    return a


def mha_grads(module, x, x2, batch_first):
    """The gradients an nn.MultiheadAttention's backward left in its parameters and in x (x2), named like
    import_module's arrays with a leading d and in the fixture's [B, L, E] layout."""
    t = (lambda v: v) if batch_first else (lambda v: v.transpose(0, 1))
    g = {"dx": _np(t(x.grad))}
    if x2 is not None:
        g["dx2"] = _np(t(x2.grad))
    if module._qkv_same_embed_dim:
        g["dwqkv"] = _np(module.in_proj_weight.grad)
        if module.in_proj_bias is not None:
            g["dbqkv"] = _np(module.in_proj_bias.grad)
    else:
        for n, w in (("dwq", module.q_proj_weight), ("dwk", module.k_proj_weight), ("dwv", module.v_proj_weight)):
            g[n] = _np(w.grad)
        if module.in_proj_bias is not None:
            E = module.embed_dim
            for i, n in enumerate(("dbq", "dbk", "dbv")):
                g[n] = _np(module.in_proj_bias.grad[i * E:(i + 1) * E])
    g["dwo"] = _np(module.out_proj.weight.grad)
    if module.out_proj.bias is not None:
        g["dbo"] = _np(module.out_proj.bias.grad)
    return g


def check_module(module, x, x2=None, *, key_padding_mask=None, causal=False, need_weights=True,
                 average_attn_weights=True, fixture=None, grad=False, seed=0):
    """Checks a PyTorch nn.MultiheadAttention end to end: its weights and x (x2 for cross attention) become a
    module fixture, its forward (eval mode: dropout must be off) is judged against the fp64 reference with the
    module tolerance. causal=True passes a top-left causal attn_mask. grad=True also runs its backward for an
    upstream gradient dy ~ N(0, 1) (from `seed`) and judges dx (dx2) and every parameter's gradient with the
    module gradient bound. Raises AssertionError on a failure (with the diagnosis); returns the ModuleResult. x, x2
    follow the module's batch_first."""
    import torch
    if module.training and module.dropout > 0:
        raise ValueError("check_module: call module.eval() first (its dropout mask cannot be reproduced)")
    if grad:  # leaves of their own, so their .grad is this call's
        x = x.detach().clone().requires_grad_(True)
        x2 = None if x2 is None else x2.detach().clone().requires_grad_(True)
        module.zero_grad(set_to_none=True)
    kv = x if x2 is None else x2
    bx, bkv = (t if module.batch_first else t.transpose(0, 1) for t in (x, kv))  # [B, L, E]
    Lq, Lk = bx.shape[1], bkv.shape[1]
    attn_mask = torch.triu(torch.ones(Lq, Lk, dtype=torch.bool), 1) if causal else None
    with torch.enable_grad() if grad else torch.no_grad():
        y, w = module(x, kv, kv, key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
                      average_attn_weights=average_attn_weights)
    by = y if module.batch_first else y.transpose(0, 1)
    grads, dy = None, None
    if grad:
        dy = torch.randn(by.shape, generator=torch.Generator().manual_seed(seed)).to(y.dtype)  # [B, Lq, E]
        y.backward(dy if module.batch_first else dy.transpose(0, 1))
        grads = mha_grads(module, x, x2, module.batch_first)
    arrays = dict(mha_arrays(module), x=_np(bx.detach()))
    if x2 is not None:
        arrays["x2"] = _np(bkv.detach())
    if dy is not None:
        arrays["dy"] = _np(dy)
    if key_padding_mask is not None:
        arrays["key_padding_mask"] = key_padding_mask.cpu().numpy().astype(np.uint8)
    dtype = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}[x.dtype]
    with tempfile.TemporaryDirectory() as tmp:
        path = fixture or os.path.join(tmp, "module.h5")
        import_module(arrays, path, module.num_heads, packing="packed" if "wqkv" in arrays else None,
                      causal="top-left" if causal else None, dtype=dtype, need_weights=need_weights,
                      average_weights=need_weights and average_attn_weights)
        # y in float32 (judged as delivered: finer than the module dtype is fine); weights in the dtype delivered,
        # since the bound adds their rounding to it (bf16 as uint16 bits)
        r = compare_module(path, by.detach().float().cpu().numpy(), None if w is None else _np(w), grads)
    if not r:
        raise AssertionError("check_module: %s fails the module reference:\n%s" % (type(module).__name__, r.text))
    return r


def check_module_function(fn, fixtures=None, pattern=None, timeout=None, backward=None, **declarations):
    """Judges fn, an attention module's forward, on every module fixture under `fixtures` (default: the golden
    ones, default_dir("modules")) whose name matches `pattern` (verify's --filter), in this process.

    fn(x, *, problem, x2=None, wq=None, wk=None, wv=None, bq=None, bk=None, bv=None, wqkv=None, bqkv=None, wo,
    bo=None, mask=None, bias=None, keep=None) is called as worker.serve's `module` (docs/python.md "Modules"):
    numpy inputs (bf16 widened to float32), returns y [B, Lq, d_out] or {"y", "weights"}. backward, when given, is
    worker.serve's `module_backward` (same arguments plus dy; returns the gradients "dx", "dwq".., "dwo", "dbo",
    "dbias" as present) and is judged too (`verify --pass both`). declarations: name, description. Raises AssertionError naming each failing case with its diagnosis (head-split, qkv-order, ...), and
    when no fixture was judged at all; ValueError for bad input. Returns the CLI's summary text."""
    declarations.setdefault("name", getattr(fn, "__name__", "python-module").replace("_", "-"))
    fixtures = os.path.abspath(os.fspath(fixtures) if fixtures is not None else default_dir("modules"))
    args = ["verify", "--fixtures", fixtures, "--impl", declarations["name"], "--diagnose"]
    if backward is not None:
        args += ["--pass", "both"]
    if pattern:
        args += ["--filter", pattern]
    if timeout:
        args += ["--timeout", str(timeout)]
    returncode, out, err = drive(args, None, declarations, module=fn, module_backward=backward)
    counts = re.search(r"results: pass (\d+)  fail (\d+)  unsupported (\d+)  error (\d+)", out)
    if returncode == 2 or counts is None:
        raise ValueError(f"attncheck verify: {err.strip() or out.strip()}")
    if returncode != 0 or int(counts.group(1)) == 0:
        table = out.split("failures and errors:")[0].splitlines()
        ok = ("PASS", "UNSUPPORTED", "UNAVAILABLE", "FINITE-REQUIRED", "STATUS")
        lines = [ln for ln in table if ln.strip() and not ln.startswith(ok) and not ln.startswith("results:")]
        why = "module fails" if lines else "no module fixture was judged (all unsupported or filtered out)"
        lines.append(counts.group(0))
        raise AssertionError(f"{declarations['name']}: {why}\n" + "\n".join(lines)
                             + (f"\nattncheck stderr:\n{err[-2000:]}" if err.strip() else ""))
    return out
