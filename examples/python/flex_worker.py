# PyTorch's FlexAttention (torch.nn.attention.flex_attention, eager on the CPU) as an attncheck worker: causal,
# windows, key padding, boolean masks, bias and softcap, the modification library's ALiBi, document, chunked,
# prefix-LM and dilated-window masks, and the user's expressions, each written as a FlexAttention user writes a
# score_mod or mask_mod. The modifications' parameters come from the problem's lossless name
# (docs/worker-protocol.md), the expressions are translated from muparser's syntax to torch (below).
#   attncheck verify --worker "python3 examples/python/flex_worker.py" --impl flex-attention --fixtures golden/cases
# `flex_worker.py alibi-sign` adds the ALiBi bias with the wrong sign (attention-gym's example had it so), and
# `flex_worker.py score-dtype` casts the expression's score back to `score.dtype`, to show that the check sees both.
import ast
import hashlib
import math
import os
import sys
import urllib.parse

import numpy as np
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from attncheck import worker

FEATURES = ["gqa", "cross", "dqk_ne_dv", "causal", "per_batch_offsets", "key_padding", "bool_mask", "bias", "window", "softcap",
            "lse_out"]
MODIFICATIONS = ["alibi", "document", "chunked", "prefix_lm", "dilated_window", "score_expr", "mask_expr"]
DECLARATIONS = {"name": "flex-attention", "description": "torch.nn.attention.flex_attention, eager, CPU",
                "policy": "zero", "dtypes": ["f32", "f16", "bf16"], "layouts": ["bhsd", "bshd"],
                "features": FEATURES, "modifications": MODIFICATIONS,
                # Masked keys' values still enter P·V inside a partial block (0 x NaN): like PyTorch's own kernels,
                # FlexAttention needs finite K and V everywhere.
                "masked_inputs": "finite-required"}
_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def parameters(name):
    """The key=value components of a problem's lossless name (values %XX-decoded)."""
    out = {}
    for part in name.split("/")[2:]:
        if "=" in part:
            key, value = part.split("=", 1)
            out[key] = urllib.parse.unquote(value)
    return out


def numbers(text, kind=float):
    return [kind(x) if x not in ("inf", "-inf") else float(x) for x in text.split(",")]


# ---- muparser expressions -> torch, through Python's own parser --------------------------------------------------
_FUNCS = {"floor": torch.floor, "ceil": torch.ceil, "abs": torch.abs, "tanh": torch.tanh, "exp": torch.exp,
          "ln": torch.log, "log": torch.log, "log2": torch.log2, "log10": torch.log10, "sqrt": torch.sqrt,
          "sin": torch.sin, "cos": torch.cos, "sign": torch.sign, "rint": torch.round,
          "min": lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)),
          "max": lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
          "mod": lambda a, b: torch.fmod(torch.as_tensor(a), torch.as_tensor(b))}


class _ToTorch(ast.NodeTransformer):
    """`a && b` / `a || b` (Python `and` / `or` after the textual swap) become logical_and / logical_or; tensor
    subscripts take integer indices."""

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        fn = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
        expr = node.values[0]
        for v in node.values[1:]:
            expr = ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), fn, ast.Load()), [expr, v], [])
        return expr

    def visit_Subscript(self, node):
        self.generic_visit(node)
        idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        idx = [ast.Call(ast.Name("_index", ast.Load()), [i], []) for i in idx]
        node.slice = ast.Tuple(idx, ast.Load()) if len(idx) > 1 else idx[0]
        return node


def compile_expression(text, names):
    """The expression as a Python function of (b, h, q_idx, kv_idx, q_pos, score) whose globals are `names` (the
    auxiliary tensors): plain Python code, which FlexAttention traces like any score_mod."""
    if "?" in text:
        raise NotImplementedError("the ternary c ? x : y is not translated")
    body = _ToTorch().visit(ast.parse(text.replace("&&", " and ").replace("||", " or ").replace("^", "**"),
                                      mode="eval")).body
    args = ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in ("b", "h", "q_idx", "kv_idx", "q_pos", "score")],
                         kwonlyargs=[], kw_defaults=[], defaults=[])
    tree = ast.fix_missing_locations(ast.Expression(ast.Lambda(args, body)))
    scope = dict(names, torch=torch, _index=lambda x: torch.as_tensor(x).long(), **_FUNCS)
    return eval(compile(tree, "<expression>", "eval"), scope)


def aux_tensors(params):
    """expr_tensors "name[d0,d1];..." with expr_values, as torch tensors."""
    out, values = {}, numbers(params["expr_values"]) if "expr_values" in params else []
    at = 0
    for spec in filter(None, params.get("expr_tensors", "").split(";")):
        name, dims = spec.rstrip("]").split("[")
        shape = [int(d) for d in dims.split(",")]
        n = math.prod(shape)
        out[name] = torch.tensor(values[at:at + n], dtype=torch.float64).reshape(shape)
        at += n
    return out


def save_block_mask(bm, name, directory):
    """DIR/<n>.npz with the BlockMask's tensors and DIR/<n>.name with the problem's lossless name, for
    `attncheck block-mask --problem "$(cat <n>.name)" --actual <n>.npz`."""
    base = os.path.join(directory, hashlib.sha1(name.encode()).hexdigest()[:16])
    full = {} if bm.full_kv_num_blocks is None else {"full_kv_num_blocks": bm.full_kv_num_blocks.numpy(),
                                                      "full_kv_indices": bm.full_kv_indices.numpy()}
    np.savez(base + ".npz", kv_num_blocks=bm.kv_num_blocks.numpy(), kv_indices=bm.kv_indices.numpy(),
             block_size=np.array(bm.BLOCK_SIZE), **full)
    with open(base + ".name", "w") as f:
        f.write(name)


def supports(problem):
    p = parameters(problem["name"])
    for key in ("score_expr", "mask_expr"):
        if key in p and "?" in p[key]:
            return False, f"{key}: the ternary c ? x : y is not translated to torch here"
    return True


def sdpa(q, k, v, *, problem, mask=None, bias=None, keep=None):
    p, dtype = parameters(problem["name"]), _TORCH[problem["dtype"]]
    B, Hq, Lq, Lk = (problem[n] for n in ("B", "Hq", "Lq", "Lk"))
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype) for x in (q, k, v))
    offset = torch.tensor(problem["diagonal_offset"], dtype=torch.int64)
    key_len = torch.tensor(problem["key_lengths"] or [Lk] * B, dtype=torch.int64)
    wl, wr = problem["window_left"], problem["window_right"]
    # Closures capture tensors, ints and bools only: FlexAttention traces score_mod and refuses a captured float.
    capped, cap = problem["softcap"] > 0, torch.tensor(problem["softcap"], dtype=torch.float32)
    tmask = None if mask is None else torch.from_numpy(np.broadcast_to(mask, (B, Hq, Lq, Lk)).copy()).bool()
    tbias = None if bias is None else torch.from_numpy(np.broadcast_to(bias, (B, Hq, Lq, Lk)).astype(np.float32).copy())
    slopes, sign = None, 1 if "alibi-sign" in sys.argv[1:] else -1
    if "alibi_slopes" in p:
        slopes = torch.tensor(numbers(p["alibi_slopes"]), dtype=torch.float32).reshape(-1, Hq)
    docs = torch.tensor(numbers(p["doc_ids"], int)).reshape(B, Lk) if "doc_ids" in p else None
    prefix = torch.tensor(numbers(p["prefix_lengths"], int)) if "prefix_lengths" in p else None
    chunk = int(p["chunk_size"]) if "chunk_size" in p else None
    dil = (int(p["dilated_window"]), int(p["dilation"])) if "dilated_window" in p else None
    aux = aux_tensors(p)
    score_expr = compile_expression(p["score_expr"], aux) if "score_expr" in p else None
    mask_expr = compile_expression(p["mask_expr"], aux) if "mask_expr" in p else None

    def score_mod(score, b, h, q_idx, kv_idx):
        pos = q_idx + offset[b]
        if capped:
            score = cap * torch.tanh(score / cap)
        if tbias is not None:
            score = score + tbias[b, h, q_idx, kv_idx]
        if slopes is not None:
            score = score + sign * slopes[b % slopes.shape[0], h] * torch.abs(pos - kv_idx)
        if score_expr is not None:
            # Not .to(score.dtype): FlexAttention traces the mod with score in the inputs' dtype (bf16) while it
            # computes scores in fp32, so that cast would round every modified score to bf16
            # (`flex_worker.py score-dtype` does, and fails on bf16 and fp16 cases).
            out_dtype = score.dtype if "score-dtype" in sys.argv[1:] else torch.float32
            score = torch.as_tensor(score_expr(b, h, q_idx, kv_idx, pos, score)).to(out_dtype)
        return score

    def mask_mod(b, h, q_idx, kv_idx):
        pos = q_idx + offset[b]
        ok = kv_idx < key_len[b]
        if problem["causal"]:
            ok = ok & (kv_idx <= pos)
        if wl >= 0:
            ok = ok & (pos - kv_idx <= wl)
        if wr >= 0:
            ok = ok & (kv_idx - pos <= wr)
        if tmask is not None:
            ok = ok & tmask[b, h, q_idx, kv_idx]
        if docs is not None:
            inside = (pos >= 0) & (pos < Lk)
            ok = ok & inside & (docs[b, pos.clamp(0, Lk - 1)] == docs[b, kv_idx])
        if chunk is not None:
            ok = ok & (torch.div(pos, chunk, rounding_mode="floor") == torch.div(kv_idx, chunk, rounding_mode="floor"))
        if prefix is not None:
            ok = ok & ((kv_idx < prefix[b]) | (kv_idx <= pos))
        if dil is not None:
            d = pos - kv_idx
            ok = ok & (torch.remainder(d, dil[1]) == 0) & (torch.abs(d) <= dil[0] * dil[1])
        if mask_expr is not None:
            ok = ok & (torch.as_tensor(mask_expr(b, h, q_idx, kv_idx, pos, 0.0)) != 0)
        return ok

    block_mask = create_block_mask(mask_mod, B, Hq, Lq, Lk, device="cpu", BLOCK_SIZE=16)
    if os.environ.get("ATTNCHECK_FLEX_BLOCK_MASKS"):  # keep FlexAttention's BlockMask to judge it (docs/block-mask.md)
        save_block_mask(block_mask, problem["name"], os.environ["ATTNCHECK_FLEX_BLOCK_MASKS"])
    out, lse = flex_attention(tq, tk, tv, score_mod=score_mod, block_mask=block_mask, scale=problem["scale"],
                              enable_gqa=Hq != problem["Hkv"], return_lse=True)
    return {"out": out.float().numpy(), "lse": lse.double().numpy()}


if __name__ == "__main__":
    worker.serve(sdpa, DECLARATIONS, supports=supports)
