# A fused attention forward written in Triton (online softmax in base 2, as flash kernels do: exp2 of
# log2(e)-prefolded scores, P rounded to the input dtype before P·V), served as an attncheck worker. It returns out
# and the natural-log lse. Runs on a CUDA device; without one, under Triton's interpreter (TRITON_INTERPRET=1, set
# before triton is imported), which executes the same kernel on CPU tensors with numpy: slow, but the same program,
# so the kernel's index arithmetic and masking are checked on any machine (tests/python/test_examples_torch.py).
# Usage: python triton_attention.py   (an attncheck worker: attncheck verify --worker "python triton_attention.py")
import os

import numpy as np
import torch
import triton
import triton.language as tl

import attncheck

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@triton.jit
def _attention_fwd(Q, K, V, Out, Lse, Diag, KeyLen,
                   sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
                   Hq, group, Lq, Lk, Dqk, Dv, qk_scale,
                   CAUSAL: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // group  # GQA: consecutive query heads share one KV head
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=(offs_m[:, None] < Lq) & (offs_d[None, :] < Dqk), other=0.0)
    diag = tl.load(Diag + b)        # key j is on query i's diagonal when j == i + diag
    klen = tl.load(KeyLen + b)      # keys >= klen are padding
    # Keys at or past hi are never visible to this query block and are never loaded: a masked key may hold NaN or
    # inf (padding, poisoned caches), and 0 * NaN in P·V would leak it. Causal: one past the last row's diagonal.
    hi = klen
    if CAUSAL:
        hi = tl.minimum(klen, tl.maximum(0, tl.minimum(pid_m * BLOCK_M + BLOCK_M, Lq) + diag))
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * skb + hk * skh + offs_n[:, None] * skn + offs_d[None, :] * skd,
                    mask=(offs_n[:, None] < hi) & (offs_d[None, :] < Dqk), other=0.0)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale
        visible = offs_n[None, :] < hi
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + diag)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet stays empty
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * svb + hk * svh + offs_n[:, None] * svn + offs_dv[None, :] * svd,
                    mask=(offs_n[:, None] < hi) & (offs_dv[None, :] < Dv), other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    empty = l_i == 0.0  # fully masked row: out 0, lse -inf (the problem model's `zero` policy)
    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
    tl.store(Out + b * sob + h * soh + offs_m[:, None] * som + offs_dv[None, :] * sod, out.to(Out.dtype.element_ty),
             mask=(offs_m[:, None] < Lq) & (offs_dv[None, :] < Dv))
    tl.store(Lse + bh * Lq + offs_m, lse, mask=offs_m < Lq)


def attention(q, k, v, *, scale, causal, diagonal_offset, key_lengths):
    """q [B,Hq,Lq,Dqk], k [B,Hkv,Lk,Dqk], v [B,Hkv,Lk,Dv] tensors on one device (CUDA, or CPU under the
    interpreter), any strides -> out [B,Hq,Lq,Dv] in q's dtype, lse [B,Hq,Lq] fp32, on that device."""
    B, Hq, Lq, Dqk = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    out = torch.empty((B, Hq, Lq, Dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Lq), dtype=torch.float32, device=q.device)
    diag = torch.tensor(diagonal_offset, dtype=torch.int64, device=q.device)
    klen = torch.tensor(key_lengths, dtype=torch.int64, device=q.device)
    block_d = lambda d: max(16, triton.next_power_of_2(d))  # noqa: E731
    ieee = q.dtype == torch.float32
    bm, bn = (32, 32) if ieee or max(Dqk, Dv) > 128 else (64, 64)
    grid = (triton.cdiv(Lq, bm), B * Hq)
    _attention_fwd[grid](q, k, v, out, lse, diag, klen, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                         Hq, Hq // Hkv, Lq, Lk, Dqk, Dv, scale * 1.4426950408889634, CAUSAL=causal, IEEE=ieee,
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_DQK=block_d(Dqk), BLOCK_DV=block_d(Dv))
    return out, lse


def interpreted():
    return os.environ.get("TRITON_INTERPRET", "0") not in ("0", "")


def device():
    return "cuda" if torch.cuda.is_available() and not interpreted() else "cpu"


def kernel(q, k, v, *, problem, mask=None, bias=None, keep=None):
    dt = TORCH_DTYPES[problem["dtype"]]
    q, k, v = (torch.from_numpy(np.ascontiguousarray(x)).to(device()).to(dt) for x in (q, k, v))
    B = problem["B"]
    offsets = problem["diagonal_offset"]
    out, lse = attention(q, k, v, scale=problem["scale"], causal=problem["causal"],
                         diagonal_offset=offsets if len(offsets) == B else offsets * B,
                         key_lengths=problem.get("key_lengths") or [problem["Lk"]] * B)
    return {"out": out.float().cpu().numpy(), "lse": lse.cpu().numpy()}


if __name__ == "__main__":
    available = torch.cuda.is_available() or interpreted()
    attncheck.worker.serve(kernel, {
        "name": "triton-flash", "description": f"fused attention forward in Triton {triton.__version__} "
                                               f"({'interpreted on CPU' if interpreted() else 'CUDA'}; "
                                               "examples/python/triton_attention.py)",
        "available": available,
        "unavailable_reason": "" if available else "no CUDA device (TRITON_INTERPRET=1 runs it on the CPU)",
        "policy": "zero", "dtypes": ["f32", "f16", "bf16"], "layouts": ["bhsd", "bshd"],
        "alignments": ["top_left", "bottom_right", "explicit"], "outputs": ["out", "lse"],
        "features": ["gqa", "cross", "dqk_ne_dv", "causal", "per_batch_offsets", "key_padding", "lse_out"],
    })
