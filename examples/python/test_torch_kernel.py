# A kernel author's PyTorch kernel, checked with attncheck.torch: a blocked attention with an online softmax (the
# flash algorithm in plain torch ops, on the CPU or any device), through the property suite and against one
# explicit case. Skipped where torch is not installed. Run: python -m pytest examples/python
import pytest

torch = pytest.importorskip("torch")
import attncheck.torch as at  # noqa: E402


def blocked_attention(q, k, v, *, scale, causal_offset=None, block=16):
    """q [B,Hq,Lq,D], k/v [B,Hkv,Lk,D]: keys in blocks of `block`, running max and sum in fp32, one rescale per
    block. causal_offset: key j is visible to query i when j <= i + offset (None: no causal mask)."""
    B, Hq, Lq, _ = q.shape
    group = Hq // k.shape[1]
    k, v = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    qf = q.float() * scale
    m = torch.full((B, Hq, Lq, 1), float("-inf"))
    s_sum = torch.zeros(B, Hq, Lq, 1)
    acc = torch.zeros(B, Hq, Lq, v.shape[-1])
    i = torch.arange(Lq).view(-1, 1)
    for j0 in range(0, k.shape[2], block):
        s = qf @ k[:, :, j0:j0 + block].transpose(-1, -2)
        if causal_offset is not None:
            j = torch.arange(j0, j0 + s.shape[-1]).view(1, -1)
            s = s.masked_fill(j > i + causal_offset, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = torch.where(m_new == float("-inf"), 0.0, m_new)  # nothing visible yet: stay empty, no NaN
        p = torch.exp(s - m_safe)
        alpha = torch.exp(m - m_safe)
        s_sum = s_sum * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ v[:, :, j0:j0 + block]
        m = m_new
    out = torch.where(s_sum > 0, acc / s_sum.clamp_min(1e-30), 0.0)  # a row with no visible key: zeros
    return out.to(q.dtype)


def kernel(q, k, v, *, problem, mask=None, bias=None, keep=None):
    offsets = problem["diagonal_offset"] if problem["causal"] else [None]
    if len(set(offsets)) > 1:
        raise NotImplementedError("one causal offset for the whole batch")
    return blocked_attention(q, k, v, scale=problem["scale"], causal_offset=offsets[0])


def test_blocked_kernel_passes_the_property_suite(tmp_path):
    at.check(kernel, device="cpu", cases=15, features=["gqa", "cross", "dqk_ne_dv", "causal"],
             dtypes=["f32", "f16", "bf16"], policy="zero", regressions=tmp_path, name="torch-blocked")


def test_one_case_with_assert_attention_close():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 33, 16, generator=g), torch.randn(2, 2, 40, 16, generator=g),
               torch.randn(2, 2, 40, 8, generator=g))
    out = blocked_attention(q, k, v, scale=0.25, causal_offset=7)
    at.assert_attention_close(out, q, k, v, causal="bottom_right", scale=0.25)
    with pytest.raises(AssertionError, match="verdict fail"):  # the block size must not matter; the offset must
        at.assert_attention_close(blocked_attention(q, k, v, scale=0.25, causal_offset=6), q, k, v,
                                  causal="bottom_right", scale=0.25)
