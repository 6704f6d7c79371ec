"""`attncheck import --module` and `compare-module` through the Python package, with numpy only: an
nn.MultiheadAttention-style module written here from scratch in float64 (packed in_proj [3E, E], biases, key
padding, averaged weights) passes; the same module with d_model scaling, or without its output bias, fails and is
diagnosed with that tag; --heads that do not divide d_model is exit 2 naming --heads. With dy, the module's
backward written here in float64 passes, and the same with dWo transposed, dbo left zero or dx without its key and
value paths fails diagnosed with that grad-* tag.
Usage: module_import.py WORKDIR (PYTHONPATH=python, ATTNCHECK_EXE set by ctest)."""
import os
import shutil
import sys

import numpy as np

import attncheck

work = sys.argv[1]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
rng = np.random.default_rng(35)
B, L, E, H = 2, 5, 8, 2
D = E // H
x = rng.standard_normal((B, L, E)).astype(np.float32)
w_in = (rng.uniform(-1, 1, (3 * E, E)) / np.sqrt(E)).astype(np.float32)
b_in = rng.uniform(-0.5, 0.5, 3 * E).astype(np.float32)
w_out = (rng.uniform(-1, 1, (E, E)) / np.sqrt(E)).astype(np.float32)
b_out = rng.uniform(-0.5, 0.5, E).astype(np.float32)
kpm = np.zeros((B, L), dtype=bool)
kpm[1, -2:] = True  # batch 1: its last two keys are padding


def mha(scale_by_d_model=False, out_bias=True):
    """nn.MultiheadAttention's forward, float64, batch first: y [B, L, E] and head-averaged weights [B, L, L]."""
    xd = x.astype(np.float64)
    qkv = xd @ w_in.astype(np.float64).T + b_in  # [B, L, 3E]
    q, k, v = (qkv[..., i * E:(i + 1) * E].reshape(B, L, H, D).transpose(0, 2, 1, 3) for i in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(E if scale_by_d_model else D)
    s = np.where(kpm[:, None, None, :], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(B, L, E)
    y = o @ w_out.astype(np.float64).T + (b_out if out_bias else 0)
    return y, p.mean(1)


def mha_backward(dy, fault=None):
    """The gradients of sum(dy * y) of mha() above, by hand in float64: dx, dwqkv, dbqkv, dwo, dbo."""
    xd, wi, wo = x.astype(np.float64), w_in.astype(np.float64), w_out.astype(np.float64)
    qkv = xd @ wi.T + b_in
    q, k, v = (qkv[..., i * E:(i + 1) * E].reshape(B, L, H, D).transpose(0, 2, 1, 3) for i in range(3))
    s = np.where(kpm[:, None, None, :], -np.inf, q @ k.transpose(0, 1, 3, 2) / np.sqrt(D))
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(B, L, E)
    g = {"dwo": np.einsum("blc,ble->ce", dy, o), "dbo": dy.sum((0, 1))}
    if fault == "grad-wo-transposed":
        g["dwo"] = g["dwo"].T
    if fault == "grad-out-bias":
        g["dbo"] = np.zeros_like(g["dbo"])
    do = (dy @ wo).reshape(B, L, H, D).transpose(0, 2, 1, 3)
    dp = do @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq, dk, dv = ds @ k / np.sqrt(D), ds.transpose(0, 1, 3, 2) @ q / np.sqrt(D), p.transpose(0, 1, 3, 2) @ do
    dz = np.concatenate([t.transpose(0, 2, 1, 3).reshape(B, L, E) for t in (dq, dk, dv)], -1)  # [B, L, 3E]
    g["dwqkv"], g["dbqkv"] = np.einsum("blr,ble->re", dz, xd), dz.sum((0, 1))
    g["dx"] = dz[..., :E] @ wi[:E] if fault == "grad-x-kv-path" else dz @ wi
    return g


dy = rng.standard_normal((B, L, E)).astype(np.float32)
arrays = dict(x=x, wqkv=w_in, bqkv=b_in, wo=w_out, bo=b_out, key_padding_mask=kpm)
case = attncheck.import_module(arrays, os.path.join(work, "mha.h5"), H, need_weights=True, average_weights=True)
failures = []
r = attncheck.compare_module(case, *mha())
print("correct:", "pass" if r else "FAIL\n" + r.text)
if not r:
    failures.append("the correct module fails")
for tag, kw in (("scale-d-model", dict(scale_by_d_model=True)), ("out-bias", dict(out_bias=False))):
    r = attncheck.compare_module(case, *mha(**kw))
    print(tag + ":", "caught, diagnosis", r.diagnosis if not r else "MISSED")
    if r or r.diagnosis != [tag]:
        failures.append("%s: expected a failure diagnosed %s, got %s\n%s" % (tag, tag, r.diagnosis, r.text))
grad_case = attncheck.import_module(dict(arrays, dy=dy), os.path.join(work, "mha_grad.h5"), H, need_weights=True,
                                   average_weights=True)
r = attncheck.compare_module(grad_case, *mha(), grads=mha_backward(dy.astype(np.float64)))
print("correct backward:", "pass" if r else "FAIL\n" + r.text)
if not r or "candidate/backward" not in r.text:
    failures.append("the correct backward fails (or was not judged)\n" + r.text)
for tag in ("grad-wo-transposed", "grad-out-bias", "grad-x-kv-path"):
    r = attncheck.compare_module(grad_case, *mha(), grads=mha_backward(dy.astype(np.float64), tag))
    print(tag + ":", "caught, diagnosis", r.diagnosis if not r else "MISSED")
    if r or r.diagnosis != [tag]:
        failures.append("%s: expected a failure diagnosed %s, got %s\n%s" % (tag, tag, r.diagnosis, r.text))
try:
    attncheck.import_module(arrays, os.path.join(work, "bad.h5"), 3)
    failures.append("--heads 3 with d_model 8 was accepted")
except ValueError as e:
    print("--heads 3:", e)
    if "--heads 3" not in str(e):
        failures.append("--heads 3: the error does not name the flag: %s" % e)
if failures:
    print("\n".join(failures))
    sys.exit(1)
