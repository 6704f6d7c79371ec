# Hugging Face transformers' position embedding in front of PyTorch's SDPA, as an attncheck worker: the problems
# with RoPE (the `rope` modification) and QK-norm (`qk_norm`) computed as a transformers model computes them, with
# transformers' own helpers: LlamaRotaryEmbedding (inv_freq with default / linear / llama3 / YaRN scaling, cos and
# sin), Qwen2VLRotaryEmbedding (mRoPE sections), apply_rotary_pos_emb / rotate_half (GPT-NeoX pairing), GPT-J's
# rotate_every_two (interleaved pairing) and Qwen3RMSNorm (QK-norm), all in the problem's dtype, as a model runs.
# The parameters come from the problem's lossless name (docs/worker-protocol.md); positions are the problem's
# (docs/problem-model.md "Rotary position embedding"). Only `out` is claimed: SDPA returns no lse.
#   attncheck verify --worker "python3 examples/python/hf_rope_worker.py" --impl hf-rope-sdpa --fixtures golden/cases
# `hf_rope_worker.py neox-only` rotates every case with rotate_half (GPT-J pairing ignored), to show the check
# sees it.
import sys
import urllib.parse
import warnings

import numpy as np
import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")
from transformers import LlamaConfig, Qwen2VLConfig  # noqa: E402
from transformers.models.gptj.modeling_gptj import rotate_every_two  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm  # noqa: E402

from attncheck import worker  # noqa: E402

_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# transformers computes angles in fp32 (position.float() * inv_freq) and casts cos/sin to the model dtype: an fp32
# model uses fp32 angles, an fp16/bf16 model a table in its own dtype (docs/tolerance.md "Rotary angles").
DECLARATIONS = {"name": "hf-rope-sdpa", "description": "transformers' RoPE / mRoPE / QK-norm helpers + torch SDPA, CPU",
                "policy": "zero", "dtypes": ["f32", "f16", "bf16"], "layouts": ["bhsd", "bshd"],
                "alignments": ["top_left", "bottom_right", "explicit"],
                "features": ["gqa", "cross", "dqk_ne_dv", "causal", "per_batch_offsets", "key_padding", "varlen",
                             "paged_kv"],
                "modifications": ["rope", "qk_norm"], "outputs": ["out"],
                "contract": {"f32": "rope=fp32-angles", "f16": "rope=table-fp16", "bf16": "rope=table-bf16"},
                "masked_inputs": "finite-required"}


def parameters(name):
    """The components of a problem's lossless name: key=value ones (values %XX-decoded) and bare flags (True)."""
    out = {}
    for part in name.split("/")[2:]:
        key, _, value = part.partition("=")
        out[key] = urllib.parse.unquote(value) if value else True
    return out


def ints(p, key):
    return [int(x) for x in p[key].split(",")] if key in p else None


def floats(p, key):
    return [float(x) for x in p[key].split(",")] if key in p else None


def rotary(p, rotary_dim):
    """transformers' rotary embedding module for the problem's parameters (head_dim = rotary_dim: the rotated part)."""
    rope = {"rope_type": "default", "rope_theta": float(p.get("rope_theta", 10000.0))}
    original = int(p.get("rope_original_max", 8192))
    if "rope_linear_factor" in p:
        rope.update(rope_type="linear", factor=float(p["rope_linear_factor"]))
    if "rope_llama3_factor" in p:
        rope.update(rope_type="llama3", factor=float(p["rope_llama3_factor"]),
                    low_freq_factor=float(p.get("rope_low_freq_factor", 1.0)),
                    high_freq_factor=float(p.get("rope_high_freq_factor", 4.0)), original_max_position_embeddings=original)
    if "rope_yarn_factor" in p:
        rope.update(rope_type="yarn", factor=float(p["rope_yarn_factor"]), beta_fast=float(p.get("rope_beta_fast", 32.0)),
                    beta_slow=float(p.get("rope_beta_slow", 1.0)), original_max_position_embeddings=original)
    common = dict(hidden_size=rotary_dim, num_attention_heads=1, head_dim=rotary_dim, max_position_embeddings=original)
    if "rope_mrope_section" in p:
        if rope["rope_type"] != "default" or len(ints(p, "rope_mrope_section")) != 3:
            raise NotImplementedError("mRoPE here: three sections, no frequency scaling (Qwen2-VL)")
        rope["mrope_section"] = ints(p, "rope_mrope_section")
        return Qwen2VLRotaryEmbedding(Qwen2VLConfig(rope_parameters=rope, **common).get_text_config())
    return LlamaRotaryEmbedding(LlamaConfig(rope_parameters=rope, **common))


def positions(problem, p, b, rows, query, seq=None, base=0):
    """RoPE position ids of `rows` (query rows or key indices) of batch b: [1, n], or [3, 1, n] with mRoPE."""
    off = ints(p, "rope_offsets")
    off = 0 if off is None else off[b if seq is None else seq]
    axis = np.asarray(rows, dtype=np.int64)
    if query:  # a query sits at the key index on its causal diagonal
        axis = axis + (problem["diagonal_offset"][b] if seq is None else seq_diag(problem, p, seq))
    ids = ints(p, "rope_position_ids")
    if ids is None:
        return torch.from_numpy(axis - base + off)[None]
    sections = len(ints(p, "rope_mrope_section"))
    table = np.asarray(ids, dtype=np.int64).reshape(sections, problem["B"], problem["Lk"])
    return torch.from_numpy(table[:, b, axis] + off)[:, None, :]


def seq_diag(problem, p, s):
    """The diagonal's key index offset of packed sequence s (query row r sits at key index r + this)."""
    cq, ck = ints(p, "cu_seqlens_q"), ints(p, "cu_seqlens_k")
    align = problem["alignment"]
    local = (ck[s + 1] - ck[s]) - (cq[s + 1] - cq[s]) if align == "bottom_right" else problem["causal_offset"] if align != "top_left" else 0
    return ck[s] - cq[s] + local


def rotate(x, pos, emb, interleaved):
    """x [H, L, D] rotated on its leading rotary_dim dims at `pos`, the way transformers models do."""
    r = emb.inv_freq.numel() * 2
    cos, sin = emb(x, pos)  # [1, L, r], cast to x's dtype (a table in the model's dtype)
    rot, rest = x[..., :r], x[..., r:]
    if interleaved and "neox-only" not in sys.argv[1:]:  # GPT-J: pairs (2f, 2f+1), cos/sin per pair repeated
        cos, sin = (t[..., : r // 2].repeat_interleave(2, dim=-1) for t in (cos, sin))
        rot = rot * cos + rotate_every_two(rot[None])[0] * sin
    else:
        rot = apply_rotary_pos_emb(rot[None], rot[None], cos, sin, unsqueeze_dim=1)[0][0]
    return torch.cat([rot, rest], dim=-1)


def norm(x, weights, eps):
    n = Qwen3RMSNorm(x.shape[-1], eps=eps).to(x.dtype)
    with torch.no_grad():
        n.weight.copy_(torch.tensor(weights))
        return n(x)


def sdpa(q, k, v, *, problem, mask=None, bias=None, keep=None):
    p, dt = parameters(problem["name"]), _TORCH[problem["dtype"]]
    B, Hq, Hkv, Lq, Lk = (problem[n] for n in ("B", "Hq", "Hkv", "Lq", "Lk"))
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dt) for x in (q, k, v))
    if "page_size" in p:  # the page pools read through the block table: [B, Hkv, Lk, D]
        ps, table = int(p["page_size"]), np.asarray(ints(p, "block_table")).reshape(B, -1)
        j = np.arange(Lk)
        tk, tv = (torch.stack([t[table[b, j // ps], :, j % ps].transpose(0, 1) for b in range(B)]) for t in (tk, tv))
    rotary_dim = int(p.get("rotary_dim", 0))
    emb = rotary(p, rotary_dim) if rotary_dim else None
    qn, kn, eps = floats(p, "q_norm_weight"), floats(p, "k_norm_weight"), float(p.get("qk_norm_eps", 1e-6))
    key_len = problem["key_lengths"] or [Lk] * B
    out = torch.full((B, Hq, Lq, problem["Dv"]), float("nan"))
    cq, ck = ints(p, "cu_seqlens_q"), ints(p, "cu_seqlens_k")
    # (batch, sequence, query rows, key rows): one block per batch entry, or per packed sequence
    blocks = [(b, None, range(Lq), range(key_len[b])) for b in range(B)] if cq is None else \
        [(0, s, range(cq[s], cq[s + 1]), range(ck[s], ck[s + 1])) for s in range(len(cq) - 1)]
    with torch.no_grad():
        for b, s, qr, kr in blocks:
            if len(qr) == 0:
                continue
            if len(kr) == 0:  # no key: the zero policy (SDPA's own for fully masked rows since PyTorch 2.5)
                out[b][:, list(qr)] = 0.0
                continue
            xq, xk, xv = tq[b][:, list(qr)], tk[b][:, list(kr)], tv[b][:, list(kr)]
            if qn is not None:
                xq, xk = norm(xq, qn, eps), norm(xk, kn, eps)
            if emb is not None:
                base = 0 if s is None else ck[s]
                xq = rotate(xq, positions(problem, p, b, list(qr), True, s, base), emb, "rotary_interleaved" in p)
                xk = rotate(xk, positions(problem, p, b, list(kr), False, s, base), emb, "rotary_interleaved" in p)
            i = torch.tensor(list(qr)).view(-1, 1)
            j = torch.tensor(list(kr)).view(1, -1)
            diag = problem["diagonal_offset"][b] if s is None else seq_diag(problem, p, s)
            visible = (j <= i + diag) if problem["causal"] else torch.ones(len(qr), len(kr), dtype=torch.bool)
            o = F.scaled_dot_product_attention(xq[None], xk[None], xv[None], attn_mask=visible, scale=problem["scale"],
                                               enable_gqa=Hq != Hkv)[0]
            out[b][:, list(qr)] = o.float()
    return out.numpy()


def supports(problem):
    p = parameters(problem["name"])
    if "rope_mrope_section" in p and len(ints(p, "rope_mrope_section")) != 3:
        return False, "mRoPE through Qwen2VLRotaryEmbedding: three sections"
    if problem["window_left"] >= 0 or problem["window_right"] >= 0 or problem["softcap"] > 0:
        return False, "windows and softcap are not wired into this worker"
    return True


if __name__ == "__main__":
    worker.serve(sdpa, DECLARATIONS, supports=supports)
