# attncheck for PyTorch kernels: assert_attention_close(out, q, k, v, **problem) judges an output tensor against the
# fp64 reference and tolerance model in the style of torch.testing.assert_close, and check(fn, device=...) runs the
# property suite (attncheck.check) against a kernel that takes and returns torch tensors on any device, or with
# backward=True its gradients through torch.autograd against the gradient fixtures (attncheck.check_gradients).
# Tensors are copied to the host only to be judged; the kernel sees tensors on `device` in the problem's dtype.
import io
import json
import os
import tempfile

import numpy as np
import torch

from . import _cli
from .check import check as _check_numpy
from .check import check_gradients
from .compare import Result
from .fixture import _flags

# torch dtype <-> the problem's dtype name (attncheck import / docs/worker-protocol.md).
_NAMES = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_TORCH = {name: dt for dt, name in _NAMES.items()}
_TORCH.update({w: getattr(torch, n) for n, w in (("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")) if hasattr(torch, n)})
# fp8 inputs travel as their uint8 codes (`attncheck import --dtype fp8_e4m3`), with per-tensor descales.
_FP8 = {getattr(torch, n): d for n, d in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2"))
        if hasattr(torch, n)}


def _tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    return t


def _host(name, t):
    """A tensor's values as a numpy array for `attncheck import`/`compare` (bf16 as uint16 bit patterns)."""
    t = t.detach().to("cpu")
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    if t.dtype in _FP8:
        return t.contiguous().view(torch.uint8).numpy()
    if t.dtype in _NAMES or t.dtype == torch.bool or not t.is_floating_point():
        return t.numpy()
    raise ValueError(f"{name}: dtype {t.dtype} is not supported here (float64, float32, float16, bfloat16, "
                     "float8_e4m3fn, float8_e5m2)")


def _shape(t):
    return list(t.shape)


def _check_inputs(q, k, v, layout, others):
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name}: expected rank 4 ({layout}), got shape {_shape(t)}")
    if q.dtype not in _NAMES and q.dtype not in _FP8:
        raise ValueError(f"q: dtype {q.dtype} is not supported here (float64, float32, float16, bfloat16, "
                         "float8_e4m3fn, float8_e5m2)")
    for name, t in (("k", k), ("v", v)) + tuple(others):
        if t is None:
            continue
        _tensor(name, t)
        if t.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (q's), got {t.device}")
        if name in ("k", "v") and t.dtype != q.dtype:
            raise ValueError(f"{name}: expected dtype {q.dtype} (q's), got {t.dtype}")
    h = 2 if layout == "bshd" else 1
    if _shape(k) != _shape(v)[:3] + [q.shape[3]] or k.shape[0] != q.shape[0]:
        raise ValueError(f"k: expected shape [B, ., ., Dqk] matching q {_shape(q)} and v {_shape(v)} ({layout}), "
                         f"got {_shape(k)}")
    if q.shape[h] % k.shape[h] != 0:
        raise ValueError(f"k: heads {k.shape[h]} must divide q's heads {q.shape[h]} ({layout})")


def _expected_out_shape(q, v, layout):
    s = _shape(q)
    s[3] = v.shape[3]
    return s


def _assert_like(name, t, shape, dtype, device):
    """Output metadata as torch.testing.assert_close checks it: a mismatch is an AssertionError naming the tensor."""
    _tensor(name, t)
    if t.device != device:
        raise AssertionError(f"{name}: expected device {device} (q's), got {t.device}")
    if dtype is not None and t.dtype != dtype:
        raise AssertionError(f"{name}: expected dtype {dtype} (q's), got {t.dtype}")
    if _shape(t) != list(shape):
        raise AssertionError(f"{name}: expected shape {list(shape)}, got {_shape(t)}")


def assert_attention_close(out, q, k, v, *, lse=None, mask=None, bias=None, layout="bhsd", policy=None,
                           diagnose=True, descale_q=None, descale_k=None, descale_v=None, **problem):
    """Raises AssertionError unless out (and lse, when given) is within attncheck's bound of the fp64 reference.

    q [B,Hq,Lq,Dqk], k/v [B,Hkv,Lk,D] in `layout` ("bhsd" or "bshd" = [B,L,H,D]), any device, stride and dtype in
    float64/32/16 and bfloat16; out in q's layout, dtype and device; lse [B,Hq,Lq] floating. mask (bool, broadcast
    to [B,Hq,Lq,Lk]) and bias as in attncheck.reference; problem keywords too (causal, scale, softcap, window, ...).
    The message has the verdict, the worst element with its expected value and bound, and the CLI's table and
    diagnosis. Returns None.

    fp8 inputs (torch.float8_e4m3fn, float8_e5m2) hold codes whose values are descale_q * q, descale_k * k,
    descale_v * v (per-tensor floats, default 1; FlashAttention-3 and cuDNN take them so); out is then bfloat16, the
    delivered dtype of an fp8 problem here (docs/problem-model.md "fp8 inputs").
    """
    _check_inputs(q, k, v, layout, (("mask", mask), ("bias", bias)))
    descales = {"descale_q": descale_q, "descale_k": descale_k, "descale_v": descale_v}
    if q.dtype in _FP8:
        problem["dtype"] = _FP8[q.dtype]
        problem.update({n: float(x) for n, x in descales.items() if x is not None})
    elif any(x is not None for x in descales.values()):
        raise ValueError(f"descale_q/k/v: only for fp8 inputs (float8_e4m3fn, float8_e5m2), q is {q.dtype}")
    out_dtype = torch.bfloat16 if q.dtype in _FP8 else q.dtype
    _assert_like("out", out, _expected_out_shape(q, v, layout), out_dtype, q.device)
    if lse is not None:
        h = 2 if layout == "bshd" else 1
        _assert_like("lse", lse, [q.shape[0], q.shape[h], q.shape[3 - h]], None, q.device)
        if not lse.is_floating_point():
            raise AssertionError(f"lse: expected a floating dtype, got {lse.dtype}")
    arrays = {n: _host(n, t) for n, t in (("q", q), ("k", k), ("v", v), ("mask", mask), ("bias", bias))
              if t is not None}
    if q.dtype == torch.bfloat16:
        problem["dtype"] = "bf16"
    actual = {"out": _host("out", out)}
    if out.dtype == torch.bfloat16:  # bit patterns -> their exact float32 values
        actual["out"] = (actual["out"].astype(np.uint32) << 16).view(np.float32)
    if lse is not None:
        actual["lse"] = lse.detach().to("cpu", torch.float64).numpy()
    flags = _flags(dict(problem, layout=layout, want_lse=lse is not None))
    # One request, no file: the tensors and the outputs go to `import - --judge` as an .npz on its stdin
    # (docs/python.md#speed-of-the-python-route). Only a failure takes the route below, for the message and diagnosis.
    payload = io.BytesIO()
    np.savez(payload, **arrays, **actual)
    r = _cli.run(["import", "-", "--judge"] + flags, stdin=payload.getvalue())
    if r.returncode == 0:
        return None
    if r.returncode != 1:
        raise RuntimeError(f"attncheck import: {r.stderr or r.stdout}")
    with tempfile.TemporaryDirectory(prefix="attncheck-") as tmp:
        inputs, case, cand, rep = (os.path.join(tmp, f) for f in ("in.npz", "case.h5", "cand.npz", "report.json"))
        np.savez(inputs, **arrays)
        r = _cli.run(["import", inputs, "--out", case] + flags)
        if r.returncode != 0:
            raise RuntimeError(f"attncheck import: {r.stderr or r.stdout}")
        np.savez(cand, **actual)
        args = ["compare", "--expected", case, "--actual", cand, "--report", rep, "--name", "torch"]
        r = _cli.run(args + (["--policy", policy] if policy else []) + (["--diagnose"] if diagnose else []))
        with open(rep) as f:
            result = Result(json.load(f), r.stdout.strip())
    if not result.passed:
        index = result.index or {}
        where = ",".join(f"{n}={index[n]}" for n in ("b", "h", "i", "j", "d") if n in index)
        raise AssertionError(f"attention output is not close: verdict {result.verdict}; worst element "
                             f"{result.tensor}[{where}]: actual {result.actual}, expected {result.expected} "
                             f"(fp64 reference), bound {result.bound}\n{result.text}")


def _to_device(a, dtype, device):
    """A protocol view (numpy, logical order, maybe strided; bf16 widened to float32) as a tensor on device, in the
    problem's dtype, with the same strides (a bshd problem's q is a permuted view, as a kernel would get it)."""
    t = torch.from_numpy(np.array(a, order="K"))
    if dtype is not None:
        t = t.to(dtype)
    return t.to(device)


def check(fn, device="cpu", backward=False, fixtures=None, pattern=None, **kwargs):
    """attncheck.check for a kernel on torch tensors: fn(q, k, v, *, problem, mask=None, bias=None, keep=None) gets
    tensors on `device` in the problem's dtype (bool mask, bias in its dtype) and returns out, or a dict with out,
    lse, weights, max_logit, on that device. out must have q's dtype and shape [B,Hq,Lq,Dv]; an output on another device, of
    another dtype or shape is a kernel error naming the tensor and the expected value. kwargs as attncheck.check.

    backward=True judges fn's gradients instead: fn's forward is run again with q, k, v (and a bias) requiring
    grad, and torch.autograd.grad(out, ..., dout) gives dq, dk, dv (dbias) on every gradient fixture under
    `fixtures` (default the golden ones) matching `pattern`; kwargs are declarations as for attncheck.check_gradients.
    """
    device = torch.device(device)

    def inputs(q, k, v, problem, mask, bias, keep, grad):
        dtype = _TORCH[problem["dtype"]]
        tq, tk, tv = (_to_device(a, dtype, device).requires_grad_(grad) for a in (q, k, v))
        extra = {}
        if mask is not None:
            extra["mask"] = _to_device(mask, torch.bool, device)
        if bias is not None:
            extra["bias"] = _to_device(bias, _TORCH.get(problem.get("bias_dtype"), dtype), device).requires_grad_(grad)
        if keep is not None:
            extra["keep"] = _to_device(keep, torch.bool, device)
        return dtype, tq, tk, tv, extra

    def outputs(res):
        if not isinstance(res, dict):
            res = dict(zip(("out", "lse", "weights"), res if isinstance(res, tuple) else (res,)))
        return res

    def kernel(q, k, v, *, problem, mask=None, bias=None, keep=None):
        dtype, tq, tk, tv, extra = inputs(q, k, v, problem, mask, bias, keep, False)
        res = outputs(fn(tq, tk, tv, problem=problem, **extra))
        B, Hq, Lq, Lk, Dv = (problem[n] for n in ("B", "Hq", "Lq", "Lk", "Dv"))
        shapes = {"out": [B, Hq, Lq, Dv], "lse": [B, Hq, Lq], "weights": [B, Hq, Lq, Lk],
                  "max_logit": [Hq] if problem.get("max_logit") == "heads" else [B, Hq, Lq]}
        host = {}
        for name, t in res.items():
            if t is None:
                continue
            if name not in shapes:
                raise ValueError(f"fn returned {name!r}; expected out, lse, weights or max_logit")
            try:
                out_dtype = _TORCH[problem["out_dtype"]] if "out_dtype" in problem else dtype  # fp8: bf16
                _assert_like(name, t, shapes[name], out_dtype if name == "out" else None, tq.device)
            except AssertionError as e:
                raise ValueError(str(e).replace("(q's)", "(the q it was given)")) from None
            host[name] = t.detach().to("cpu", torch.float64).numpy()
        return host

    def gradients(q, k, v, *, problem, out, lse, dout, mask=None, bias=None, keep=None):
        dtype, tq, tk, tv, extra = inputs(q, k, v, problem, mask, bias, keep, True)
        o = outputs(fn(tq, tk, tv, problem=problem, **extra)).get("out")
        if not isinstance(o, torch.Tensor) or not o.requires_grad:
            raise ValueError("fn's out does not require grad: backward=True needs a kernel torch.autograd can "
                             "differentiate (no .detach(), no numpy in between)")
        wrt = {"dq": tq, "dk": tk, "dv": tv}
        if "bias" in extra:
            wrt["dbias"] = extra["bias"]
        grads = torch.autograd.grad(o, list(wrt.values()), _to_device(dout, o.dtype, device), allow_unused=True)
        # An input the output does not depend on has gradient zero (autograd says None).
        return {name: (torch.zeros_like(t) if g is None else g).detach().to("cpu", torch.float64).numpy()
                for (name, t), g in zip(wrt.items(), grads)}

    kernel.__name__ = getattr(fn, "__name__", "torch-kernel")
    if backward:
        return check_gradients(kernel, gradients, fixtures=fixtures, pattern=pattern, **kwargs)
    return _check_numpy(kernel, **kwargs)
