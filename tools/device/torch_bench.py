# The speed side of the GPU check: PyTorch SDPA (each CUDA backend alone) and the check's Triton kernel on the
# shapes `attncheck bench` times, each the median of CUDA-event times after warm-up; one JSON object per line in
# the same units as `attncheck bench --json` (GFLOP/s = 4·B·H·Lq·Lk·D / s, causal counted half).
# Usage: torch_bench.py OUT.jsonl
import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from triton_attention import attention as triton_attention  # noqa: E402

SHAPES = [(1, 16, 2048, 2048, 128), (1, 8, 4096, 4096, 64), (4, 8, 1, 8192, 128)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def median_seconds(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def main():
    out = open(sys.argv[1], "a")
    for (B, H, Lq, Lk, D) in SHAPES:
        for dtype in ("bf16", "fp16"):
            dt = torch.bfloat16 if dtype == "bf16" else torch.float16
            for causal in (False, True):
                if causal and Lq == 1:
                    continue
                g = torch.Generator(device="cuda").manual_seed(0)
                q = torch.rand(B, H, Lq, D, device="cuda", generator=g).mul_(2).sub_(1).to(dt)
                k = torch.rand(B, H, Lk, D, device="cuda", generator=g).mul_(2).sub_(1).to(dt)
                v = torch.rand(B, H, Lk, D, device="cuda", generator=g).mul_(2).sub_(1).to(dt)
                flops = 4.0 * B * H * Lq * Lk * D * (0.5 if causal else 1.0)
                scale = D ** -0.5
                runs = {}
                for name, backend in BACKENDS.items():
                    def f(backend=backend):
                        with sdpa_kernel([backend]), warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
                    runs[f"torch-sdpa-{name}"] = f
                runs["triton-flash"] = lambda: triton_attention(q, k, v, scale=scale, causal=causal,
                                                                diagonal_offset=[0] * B, key_lengths=[Lk] * B)
                for name, fn in runs.items():
                    rec = {"impl": name, "shape": [B, H, Lq, Lk, D], "dtype": dtype, "causal": causal}
                    try:
                        s = median_seconds(fn)
                        rec.update({"device_seconds": s, "device_gflops": flops / s / 1e9})
                    except Exception as e:  # a backend that refuses the shape: recorded, not fatal
                        rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    print(json.dumps(rec))


if __name__ == "__main__":
    main()
