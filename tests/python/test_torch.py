# attncheck.torch on CPU tensors: assert_attention_close passes PyTorch's SDPA (math backend) in fp32, fp16, bf16 and
# on strided inputs, fails a perturbed output naming the perturbed element, and names the tensor of bad input;
# check() passes a correct kernel on torch tensors and catches a causal off-by-one and a kernel returning the wrong
# dtype. A plain script (the torch venv need not have pytest); exit 77 when torch is not importable.
import os
import re
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not importable by", sys.executable, "- skipped")
    sys.exit(77)

import numpy as np

import attncheck.torch as at
from numpy_sdpa import FEATURES, sdpa, visible

g = torch.Generator().manual_seed(7)


def qkv(dtype, B=1, Hq=2, Hkv=1, Lq=5, Lk=7, D=8):
    make = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32).to(dtype)  # noqa: E731
    return make(B, Hq, Lq, D), make(B, Hkv, Lk, D), make(B, Hkv, Lk, D)


def sdpa_math(q, k, v, **kw):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)


def raises(kind, fragment, f, *args, **kw):
    try:
        f(*args, **kw)
    except kind as e:
        assert fragment in str(e), f"{fragment!r} not in: {e}"
        return str(e)
    raise AssertionError(f"no {kind.__name__} ({fragment!r})")


def test_sdpa_passes_every_dtype():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q, k, v = qkv(dtype)
        at.assert_attention_close(sdpa_math(q, k, v, is_causal=True, scale=0.3), q, k, v, causal=True, scale=0.3)


def test_strided_inputs():
    base = torch.randn(1, 5, 2, 8, generator=g)  # [B, L, H, D] memory, used as a bhsd view and as bshd
    q = base.transpose(1, 2)
    assert not q.is_contiguous()
    at.assert_attention_close(sdpa_math(q, q, q), q, q, q)
    out = sdpa_math(q, q, q).transpose(1, 2)
    at.assert_attention_close(out, base, base, base, layout="bshd")


def test_perturbed_output_fails_at_the_perturbed_element():
    q, k, v = qkv(torch.float32)
    out = sdpa_math(q, k, v, is_causal=True).clone()
    out[0, 1, 3, 2] += 1e-2
    msg = raises(AssertionError, "worst element out[b=0,h=1,i=3,d=2]", at.assert_attention_close, out, q, k, v,
                 causal=True)
    assert "verdict fail" in msg and "bound" in msg, msg


def test_bad_input_names_the_tensor():
    q, k, v = qkv(torch.float32)
    out = sdpa_math(q, k, v)
    raises(ValueError, "k: expected device cpu (q's), got meta", at.assert_attention_close, out, q,
           k.to("meta"), v)
    raises(ValueError, "v: expected dtype torch.float32 (q's), got torch.float64", at.assert_attention_close, out,
           q, k, v.double())
    raises(AssertionError, "out: expected dtype torch.float32 (q's), got torch.float64",
           at.assert_attention_close, out.double(), q, k, v)
    raises(AssertionError, "out: expected shape [1, 2, 5, 8], got [1, 2, 8, 5]", at.assert_attention_close,
           out.transpose(2, 3), q, k, v)
    raises(ValueError, "q: expected rank 4 (bhsd), got shape [2, 5, 8]", at.assert_attention_close, out, q[0],
           k, v)
    raises(ValueError, "q: dtype torch.int32 is not supported", at.assert_attention_close, out,
           q.to(torch.int32), k.to(torch.int32), v.to(torch.int32))
    raises(ValueError, "descale_q/k/v: only for fp8 inputs", at.assert_attention_close, out, q, k, v, descale_v=2.0)


def test_fp8_inputs_with_descales():
    """FA3 / cuDNN fp8: codes times per-tensor descales, out in bf16; forgetting one descale is caught."""
    if not hasattr(torch, "float8_e4m3fn"):
        return
    q, k, v = qkv(torch.float32, Lq=9, Lk=12, D=16)
    ds = {"descale_q": 0.5, "descale_k": 0.25, "descale_v": 4.0}
    for fp8 in (torch.float8_e4m3fn, torch.float8_e5m2):
        q8, k8, v8 = ((t / ds["descale_" + n]).to(fp8) for n, t in zip("qkv", (q, k, v)))
        real = [t.float() * ds["descale_" + n] for n, t in zip("qkv", (q8, k8, v8))]
        out = sdpa_math(*real, is_causal=True).to(torch.bfloat16)
        at.assert_attention_close(out, q8, k8, v8, causal=True, **ds)
        no_v_descale = sdpa_math(real[0], real[1], v8.float(), is_causal=True).to(torch.bfloat16)
        raises(AssertionError, "verdict fail", at.assert_attention_close, no_v_descale, q8, k8, v8, causal=True,
               **ds)
        raises(AssertionError, "out: expected dtype torch.bfloat16", at.assert_attention_close, out.float(), q8,
               k8, v8, causal=True, **ds)


def numpy_backed(q, k, v, *, problem, mask=None, bias=None, keep=None):
    """The example's numpy kernel behind torch tensors: exercises the conversions, not a new attention."""
    host = lambda t: None if t is None else (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # noqa: E731
    r = sdpa(host(q), host(k), host(v), problem=problem, mask=host(mask))
    return {"out": torch.from_numpy(np.asarray(r["out"])).to(q.dtype), "lse": torch.from_numpy(r["lse"])}


def causal_off_by_one(q, k, v, *, problem, mask=None, bias=None, keep=None):
    if problem["causal"]:
        problem = dict(problem, diagonal_offset=[d - 1 for d in problem["diagonal_offset"]])
    return numpy_backed(q, k, v, problem=problem, mask=mask)


def wrong_dtype(q, k, v, *, problem, mask=None, bias=None, keep=None):
    return numpy_backed(q, k, v, problem=problem, mask=mask)["out"].double()


def test_check_correct_and_buggy_kernels():
    with tempfile.TemporaryDirectory() as tmp:
        decl = dict(features=FEATURES, dtypes=["f32", "f16", "bf16"], policy="zero", regressions=tmp)
        at.check(numpy_backed, device="cpu", cases=10, name="torch-numpy", **decl)
        msg = raises(AssertionError, "FAIL", at.check, causal_off_by_one, cases=20, features=["causal"],
                     dtypes=["f32"], properties=["agreement"], regressions=tmp, name="off-by-one")
        assert "causal" in msg and any(f.endswith(".h5") for f in os.listdir(tmp)), msg
        raises(AssertionError, "out: expected dtype torch.float32 (the q it was given), got torch.float64",
               at.check, wrong_dtype, cases=3, features=[], dtypes=["f32"], properties=["agreement"],
               regressions=tmp, name="wrong-dtype")


def autograd_attention(q, k, v, *, problem, mask=None, bias=None, keep=None, detach_total=False):
    """Attention in torch ops autograd can differentiate (softcap, bias, masks, dropout's keep-mask replayed);
    detach_total=True is a classic backward bug with a correct forward: the softmax denominator taken as constant."""
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    group = q.shape[1] // k.shape[1]
    qa, ka, va = q.to(acc), k.to(acc).repeat_interleave(group, 1), v.to(acc).repeat_interleave(group, 1)
    s = qa @ ka.transpose(-1, -2) * problem["scale"]
    if problem["softcap"] > 0:
        s = problem["softcap"] * torch.tanh(s / problem["softcap"])
    if bias is not None:
        s = s + bias.to(acc)
    vis = torch.from_numpy(visible(problem, None if mask is None else mask.numpy(), tuple(s.shape)))
    m = torch.where(vis, s, -torch.inf).amax(-1, keepdim=True).detach()
    e = torch.where(vis, torch.exp(s - torch.where(torch.isfinite(m), m, 0)), 0)
    total = e.sum(-1, keepdim=True)
    p = e / torch.where(total > 0, total.detach() if detach_total else total, 1)
    if keep is not None:
        p = p * keep / (1 - problem["dropout_p"])
    out = p @ va
    return {"out": out.to(q.dtype), "lse": (m + torch.log(total)).squeeze(-1).detach()}


def test_check_backward_through_autograd():
    # Autograd turns a NaN planted in a masked key into NaN gradients (0 * NaN through torch.where), so this
    # kernel declares what PyTorch's own kernels do: masked inputs must be finite (docs/isolation.md).
    decl = dict(features=FEATURES + ["bias", "dropout"], dtypes=["f32", "f64"], policy="zero",
                masked_inputs="finite-required")
    text = at.check(autograd_attention, backward=True, name="torch-autograd", **decl)
    assert int(text.split("results: pass ")[1].split()[0]) >= 25, text
    buggy = lambda *a, **kw: autograd_attention(*a, detach_total=True, **kw)  # noqa: E731
    raises(AssertionError, "gradients fail", at.check, buggy, backward=True, pattern="fp32/*", name="detached",
           **decl)
    no_grad = lambda *a, **kw: {n: t.detach() for n, t in autograd_attention(*a, **kw).items()}  # noqa: E731
    raises(AssertionError, "fn's out does not require grad", at.check, no_grad, backward=True,
           pattern="fp32/*plain/normal*", name="no-grad", **decl)


def fp8_dequantised(q, k, v, *, problem, mask=None, bias=None, keep=None, forget_descale_k=False):
    """An fp8 kernel as FlashAttention-3 is called: float8 codes and per-tensor descales in, bfloat16 out."""
    assert q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2), q.dtype
    d = {n: problem["descale_" + n] for n in "qkv"}
    if forget_descale_k:
        d["k"] = 1.0
    x = {n: t.to(torch.float32) * d[n] for n, t in (("q", q), ("k", k), ("v", v))}
    out = sdpa_math(x["q"], x["k"], x["v"], scale=problem["scale"])
    return out.to(torch.bfloat16)


def test_check_on_fp8_codes():
    with tempfile.TemporaryDirectory() as tmp:
        decl = dict(features=[], dtypes=["e4m3", "e5m2"], policy="zero", regressions=tmp,
                    properties=["fp8_descale_exponent"])
        text = at.check(fp8_dequantised, cases=6, name="torch-fp8", **decl)
        assert re.search(r"PASS +torch-fp8 +fp8_descale_exponent +[1-9]\d* cases", text), text
        buggy = lambda *a, **kw: fp8_dequantised(*a, forget_descale_k=True, **kw)  # noqa: E731
        raises(AssertionError, "FAIL", at.check, buggy, cases=6, name="torch-fp8-k", **decl)


if __name__ == "__main__":
    import script_tests
    script_tests.run(globals())
