# attncheck.torch on CUDA tensors, for the GPU check: assert_attention_close passes PyTorch's SDPA (each CUDA
# backend that takes the case) in fp16 and bf16 and fails a perturbed output; check(fn, device="cuda") passes SDPA
# as a kernel on device tensors and catches a causal off-by-one. Prints one line per check; exit 1 on any surprise.
import sys
import tempfile
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attncheck.torch as at

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
failures = 0


def report(ok, what):
    global failures
    failures += not ok
    print(("ok   " if ok else "FAIL ") + what, flush=True)


def sdpa(backend, q, k, v, **kw):
    with sdpa_kernel([BACKENDS[backend]]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return F.scaled_dot_product_attention(q, k, v, **kw)


g = torch.Generator(device="cuda").manual_seed(11)
for dtype in (torch.float16, torch.bfloat16):
    q = torch.randn(2, 4, 70, 64, device="cuda", generator=g).to(dtype)
    k = torch.randn(2, 4, 130, 64, device="cuda", generator=g).to(dtype)
    v = torch.randn(2, 4, 130, 64, device="cuda", generator=g).to(dtype)
    for backend in BACKENDS:
        try:
            out = sdpa(backend, q, k, v, is_causal=True, scale=0.125)
        except RuntimeError as e:
            print(f"n/a  {backend} {dtype}: {str(e).splitlines()[0]}")
            continue
        try:
            at.assert_attention_close(out, q, k, v, causal=True, scale=0.125)
            report(True, f"assert_attention_close passes torch-sdpa-{backend} {dtype} on {q.device}")
        except AssertionError as e:
            report(False, f"assert_attention_close on torch-sdpa-{backend} {dtype}: {str(e).splitlines()[0]}")
        bad = out.clone()
        bad[1, 2, 40, 7] += 0.05
        try:
            at.assert_attention_close(bad, q, k, v, causal=True, scale=0.125, diagnose=False)
            report(False, f"a perturbed torch-sdpa-{backend} {dtype} output passed")
        except AssertionError as e:
            report("b=1,h=2,i=40,d=7" in str(e), f"the perturbed element is named ({backend} {dtype})")


def sdpa_kernel_fn(q, k, v, *, problem, mask=None, bias=None, keep=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=problem["causal"], scale=problem["scale"],
                                          enable_gqa=problem["Hq"] != problem["Hkv"])


def off_by_one(q, k, v, *, problem, mask=None, bias=None, keep=None):  # sees one key past the diagonal
    Lq, Lk = q.shape[2], k.shape[2]
    m = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(1) if problem["causal"] else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=problem["scale"],
                                          enable_gqa=problem["Hq"] != problem["Hkv"])


with tempfile.TemporaryDirectory() as tmp:
    decl = dict(features=["gqa", "cross", "causal"], alignments=["top_left"], dtypes=["f32", "f16", "bf16"],
                policy="zero", regressions=tmp, properties=["agreement"])
    try:
        at.check(sdpa_kernel_fn, device="cuda", cases=30, name="torch-sdpa-cuda", **decl)
        report(True, "check(fn, device='cuda') passes SDPA on device tensors")
    except AssertionError as e:
        report(False, "check(fn, device='cuda') on SDPA: " + " | ".join(str(e).splitlines()[:6]))
    try:
        at.check(off_by_one, device="cuda", cases=30, name="off-by-one-cuda", **dict(decl, features=["causal"]))
        report(False, "a causal off-by-one on CUDA passed check()")
    except AssertionError as e:
        report("FAIL" in str(e), "check(fn, device='cuda') catches a causal off-by-one")
sys.exit(1 if failures else 0)
