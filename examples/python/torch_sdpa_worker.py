# PyTorch's scaled_dot_product_attention as an attncheck worker, held to one backend at a time
# (torch.nn.attention.sdpa_kernel): flash, efficient, cudnn or math, on a CUDA device (the default) or on the CPU,
# where PyTorch has math and flash. Usage: torch_sdpa_worker.py BACKEND [cuda|cpu]
# Each case is first tried by PyTorch itself (supports): a backend that refuses a case ("No available kernel")
# reports it unsupported with PyTorch's reason instead of an error. Only `out` is claimed: SDPA returns no lse.
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attncheck

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
TORCH_DTYPES = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def attn_mask(problem, mask, bias, device):
    """The boolean or additive mask SDPA takes: the problem's mask (1 = attend) and causal diagonal folded in."""
    B, Hq, Lq, Lk = problem["B"], problem["Hq"], problem["Lq"], problem["Lk"]
    keep = None
    if mask is not None:
        keep = torch.from_numpy(np.ascontiguousarray(mask) != 0).to(device)
    if problem["causal"] and (problem["alignment"] != "top_left" or mask is not None or bias is not None):
        i = torch.arange(Lq, device=device).view(1, 1, Lq, 1)
        j = torch.arange(Lk, device=device).view(1, 1, 1, Lk)
        off = torch.tensor(problem["diagonal_offset"], device=device).view(-1, 1, 1, 1)
        tri = j <= i + off
        keep = tri if keep is None else keep & tri
    if problem.get("key_lengths"):
        j = torch.arange(Lk, device=device).view(1, 1, 1, Lk)
        lens = torch.tensor(problem["key_lengths"], device=device).view(-1, 1, 1, 1)
        keep = (j < lens) if keep is None else keep & (j < lens)
    if bias is None:
        return keep
    add = torch.from_numpy(np.ascontiguousarray(bias, dtype=np.float32)).to(device)
    if keep is not None:
        add = add.masked_fill(~keep, float("-inf"))
    return add.expand(B, Hq, Lq, Lk)


def run(backend, dev, q, k, v, problem, mask=None, bias=None):
    dt = TORCH_DTYPES[problem["dtype"]]
    q, k, v = (torch.from_numpy(np.ascontiguousarray(x)).to(dev).to(dt) for x in (q, k, v))
    m = attn_mask(problem, mask, bias, dev)
    if m is not None and m.dtype != torch.bool:
        m = m.to(dt)
    is_causal = problem["causal"] and m is None  # top-left: SDPA's own is_causal
    with sdpa_kernel([BACKENDS[backend]]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the refusal's reasons come as warnings before the RuntimeError
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal, scale=problem["scale"],
                                              enable_gqa=problem["Hq"] != problem["Hkv"])


def main():
    backend, dev = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cuda"
    if backend not in BACKENDS:
        sys.exit(f"torch_sdpa_worker.py: BACKEND must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if dev not in ("cuda", "cpu"):
        sys.exit(f"torch_sdpa_worker.py: DEVICE must be cuda or cpu, got {dev!r}")
    available = dev == "cpu" or torch.cuda.is_available()

    def kernel(q, k, v, *, problem, mask=None, bias=None, keep=None):
        out = run(backend, dev, q, k, v, problem, mask, bias)
        if dev == "cuda":
            torch.cuda.synchronize()
        return out.float().cpu().numpy()

    def supports(problem):
        if problem.get("bias_shape") and problem["bias_dtype"] != problem["dtype"]:
            return False, (f"SDPA takes attn_mask in the query's dtype: a {problem['bias_dtype']} bias would be rounded "
                           f"to {problem['dtype']} by this worker, not by the kernel")
        shape = lambda h, l, d: np.zeros((problem["B"], h, l, d), np.float32)  # noqa: E731
        try:
            run(backend, dev, shape(problem["Hq"], problem["Lq"], problem["Dqk"]),
                shape(problem["Hkv"], problem["Lk"], problem["Dqk"]), shape(problem["Hkv"], problem["Lk"], problem["Dv"]),
                problem, None if not problem.get("mask_shape") else np.ones(problem["mask_shape"], np.uint8),
                None if not problem.get("bias_shape") else np.zeros(problem["bias_shape"], np.float32))
        except RuntimeError as e:
            return False, f"torch {torch.__version__} sdpa_kernel({backend}): {str(e).splitlines()[0]}"
        return True

    name = f"torch-sdpa-{backend}" + ("-cpu" if dev == "cpu" else "")
    where = "the CPU" if dev == "cpu" else torch.cuda.get_device_name(0) if available else "no device"
    attncheck.worker.serve(kernel, {
        "name": name, "description": f"PyTorch {torch.__version__} SDPA, {backend} backend, on {where}",
        "available": available, "unavailable_reason": "" if available else "torch.cuda.is_available() is False",
        # The math and cuDNN backends multiply masked values by a zero weight (pytorch#101967): NaN stored in a
        # masked key reaches their output, so their contract needs finite inputs (measured on an H200, docs/gpu.md);
        # so does the CPU flash backend (measured: docs/python.md#pytorch-sdpa-on-the-cpu).
        "masked_inputs": "finite-required" if backend in ("math", "cudnn") or dev == "cpu" else "isolated",
        "policy": "zero", "dtypes": ["f32", "f16", "bf16"], "layouts": ["bhsd"],
        "alignments": ["top_left", "bottom_right", "explicit"], "outputs": ["out"],
        "features": ["gqa", "cross", "dqk_ne_dv", "causal", "per_batch_offsets", "key_padding", "bool_mask", "bias"],
    }, supports)


if __name__ == "__main__":
    main()
