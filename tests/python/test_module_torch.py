# attncheck.check_module on PyTorch's nn.MultiheadAttention (packed in_proj and separate q/k/v weights for cross
# attention with kdim/vdim, biases on and off, batch_first both ways, key padding, causal, weights averaged or per
# head, fp32 and bf16; the fast path next to the slow one) and on from-scratch modules of the seeds' kind (Wqkv
# reshaped to (B, S, 3, nh, hs), heads split with view + transpose): the correct one passes, one whose heads are split
# with a bare view fails diagnosed head-split. With grad=True the backward too (fp32: batch_first both ways, biases
# on/off, key padding + causal, cross with dx2; bf16; a zeroed out_proj.bias gradient is caught as grad-out-bias).
# A plain script; exit 77 when torch is not importable.
import sys
import tempfile
import traceback

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch is not importable by", sys.executable, "- skipped")
    sys.exit(77)

import attncheck

torch.manual_seed(35)
failures = []


def run(name, fn):
    try:
        fn()
        print("ok  ", name)
    except Exception:  # noqa: BLE001 - every failure is reported, the script exits 1
        failures.append(name)
        print("FAIL", name)
        traceback.print_exc()


def mha_case(batch_first, bias, dtype, cross=False, kpm=False, causal=False, average=True, need_weights=True,
             grad=False):
    E, H, B, Lq, Lk = 16, 4, 2, 6, 9 if cross else 6
    kw = dict(kdim=12, vdim=10) if cross else {}
    m = nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first, **kw).eval().to(dtype)
    x = torch.randn(B, Lq, E).to(dtype)
    x2 = torch.randn(B, Lk, 12).to(dtype) if cross else None
    if not batch_first:
        x = x.transpose(0, 1)
        x2 = None if x2 is None else x2.transpose(0, 1)
    mask = None
    if kpm:
        mask = torch.zeros(B, Lk, dtype=torch.bool)
        mask[1, -3:] = True
    if cross:  # kdim != vdim: x2 gives keys, values come from x2 too, so vdim must match x2's features here
        m = nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first, kdim=12, vdim=12).eval().to(dtype)
    def fn():
        r = attncheck.check_module(m, x, x2, key_padding_mask=mask, causal=causal, need_weights=need_weights,
                                   average_attn_weights=average, grad=grad)
        assert ("candidate/backward" in r.text) == grad, r.text  # the gradients were judged (only when asked)
    return fn


for bf in (True, False):
    for bias in (True, False):
        run(f"nn.MHA self fp32 batch_first={bf} bias={bias}", mha_case(bf, bias, torch.float32))
run("nn.MHA self fp32 key padding, per-head weights", mha_case(True, True, torch.float32, kpm=True, average=False))
run("nn.MHA self fp32 causal", mha_case(True, True, torch.float32, causal=True))
run("nn.MHA cross fp32 kdim=vdim=12 (separate q/k/v weights)", mha_case(True, True, torch.float32, cross=True, kpm=True))
run("nn.MHA self bf16", mha_case(True, True, torch.bfloat16))
run("nn.MHA self fp32 fast path (need_weights=False)", mha_case(True, True, torch.float32, need_weights=False))

# The backward (grad=True): autograd's gradients of x (x2) and of every parameter against the module reference's.
for bf in (True, False):
    run(f"nn.MHA self fp32 backward batch_first={bf}", mha_case(bf, True, torch.float32, grad=True))
run("nn.MHA self fp32 backward, no biases", mha_case(True, False, torch.float32, grad=True))
run("nn.MHA self fp32 backward, key padding + causal", mha_case(True, True, torch.float32, kpm=True, causal=True,
                                                                grad=True))
run("nn.MHA cross fp32 backward (separate q/k/v weights, dx2)", mha_case(True, True, torch.float32, cross=True,
                                                                         kpm=True, grad=True))
run("nn.MHA self bf16 backward", mha_case(True, True, torch.bfloat16, grad=True))


def zeroed_out_bias_grad():
    """A hook that zeroes out_proj.bias's gradient (a missing bias gradient): caught, diagnosed grad-out-bias."""
    m = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    m.out_proj.bias.register_hook(torch.zeros_like)
    try:
        attncheck.check_module(m, torch.randn(2, 6, 16), grad=True)
    except AssertionError as e:
        assert "diagnosis: grad-out-bias" in str(e), str(e)
        return
    raise AssertionError("a zeroed out_proj.bias gradient passed")


run("nn.MHA backward with out_proj.bias's gradient zeroed: caught, grad-out-bias", zeroed_out_bias_grad)

class SeedMHA(nn.Module):
    """The seeds' MultiHeadAttention: one Wqkv, reshape(B, S, 3, nh, hs), SDPA-free softmax, Wo."""

    def __init__(self, E, H, bare_view=False):
        super().__init__()
        self.H, self.bare_view = H, bare_view
        self.Wqkv = nn.Linear(E, 3 * E)
        self.Wo = nn.Linear(E, E)

    def forward(self, x):
        B, S, C = x.shape
        q, k, v = self.Wqkv(x).reshape(B, S, 3, C).unbind(2)
        if self.bare_view:  # the head-split bug: [B, S, C] viewed as [B, nh, S, hs]
            q, k, v = (t.reshape(B, self.H, S, C // self.H) for t in (q, k, v))
        else:
            q, k, v = (t.view(B, S, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-2, -1) / (C // self.H) ** 0.5, dim=-1)
        o = a @ v
        o = o.reshape(B, S, C) if self.bare_view else o.transpose(1, 2).reshape(B, S, C)
        return self.Wo(o)


def seed_case(bare_view):
    def fn():
        m = SeedMHA(16, 4, bare_view)
        x = torch.randn(2, 5, 16)
        with torch.no_grad():
            y = m(x)
        # Wqkv(x).reshape(B, S, 3, C) then .view(B, S, nh, hs): rows [q | k | v], head-major = packing "packed"
        arrays = dict(x=x.numpy(), wqkv=m.Wqkv.weight.detach().numpy(), bqkv=m.Wqkv.bias.detach().numpy(),
                      wo=m.Wo.weight.detach().numpy(), bo=m.Wo.bias.detach().numpy())
        with tempfile.TemporaryDirectory() as tmp:
            case = attncheck.import_module(arrays, tmp + "/seed.h5", 4, packing="packed")
            r = attncheck.compare_module(case, y.numpy())
        if bare_view:
            assert not r and r.diagnosis == ["head-split"], r.text
        else:
            assert r, r.text
    return fn


def seed002_walkthrough():
    """Seed 002's worked example run as its code reads (x @ W with W [d, d_out], softmax(omega / sqrt(d_k))): every
    query's context vector against the module reference (Wo = identity). docs/module.md lists which of the seed's
    printed tables its code does not reproduce."""
    sentence = "The sun rises in the east"
    dc = {s: i for i, s in enumerate(sorted(sentence.split()))}
    torch.manual_seed(123)
    embed = torch.nn.Embedding(50_000, 3)
    x = embed(torch.tensor([dc[s] for s in sentence.split()])).detach()
    torch.manual_seed(123)
    W_query, W_key, W_value = torch.rand(3, 2), torch.rand(3, 2), torch.rand(3, 4)
    keys, values = x @ W_key, x @ W_value
    weights = torch.softmax((x @ W_query) @ keys.T / 2 ** 0.5, dim=-1)
    context = weights @ values
    arrays = dict(x=x.numpy()[None], wq=W_query.T.numpy(), wk=W_key.T.numpy(), wv=W_value.T.numpy(),
                  wo=torch.eye(4).numpy())
    with tempfile.TemporaryDirectory() as tmp:
        case = attncheck.import_module(arrays, tmp + "/seed002.h5", 1, need_weights=True)
        r = attncheck.compare_module(case, context.numpy()[None], weights.numpy()[None, None])
    assert r, r.text


run("seed 002 worked example (x @ W, d_k = 2, d_v = 4)", seed002_walkthrough)
run("seed MultiHeadAttention (view + transpose)", seed_case(False))
run("seed MultiHeadAttention with a bare view: caught, head-split", seed_case(True))
if failures:
    print("failed:", ", ".join(failures))
    sys.exit(1)
