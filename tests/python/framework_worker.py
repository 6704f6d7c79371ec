# PyTorch / JAX SDPA as attncheck workers, run only when the framework is importable: otherwise exit 77, which
# ctest reports as skipped (never as a pass), with the reason. Usage: framework_worker.py torch|jax [serve]
# Without "serve" it runs `attncheck verify --worker "<this> FRAMEWORK serve"` over the golden suite.
import os
import subprocess
import sys

import numpy as np

framework = sys.argv[1]
try:
    if framework == "torch":
        import torch
        import torch.nn.functional as F
    else:
        import jax
        import jax.numpy as jnp
except ImportError as e:
    print(f"SKIP: {framework} is not importable here ({e}); pip install {framework} to run this worker")
    sys.exit(77)

FEATURES = ["gqa", "cross", "causal", "bool_mask"]

# Fully masked rows: PyTorch's CPU SDPA returns NaN before 2.5 and zeros from 2.5 on; JAX fills masked scores with a
# finite value, so such a row is uniform.
if framework == "torch":
    POLICY = "zero" if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5) else "nan"
else:
    POLICY = "uniform"

# Failures that are the framework's own bugs, each with its upstream report (or how attncheck found it). The test
# mode passes when exactly these fail: a new failure, or one of these passing again, fails the test, so the list
# is kept true rather than silencing the framework.
KNOWN_FAILURES = {
    "torch": {
        "causal-tl-scaled": "is_causal with a negative scale returns NaN on the CPU flash path "
                            "(found by attncheck; the math path is right)",
    },
    "jax": {},
}


def torch_sdpa(q, k, v, *, problem, mask=None, bias=None, keep=None):
    dt = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[problem["dtype"]]
    q, k, v = (torch.from_numpy(np.ascontiguousarray(x)).to(dt) for x in (q, k, v))
    if problem["causal"] and problem["alignment"] != "top_left":
        raise NotImplementedError("is_causal is top-left only")
    attn_mask, causal = None, problem["causal"]
    if mask is not None:  # torch refuses attn_mask with is_causal: fold the causal mask in
        attn_mask = torch.from_numpy(np.ascontiguousarray(mask) != 0)
        if causal:
            attn_mask = attn_mask & torch.ones(problem["Lq"], problem["Lk"], dtype=torch.bool).tril()
            causal = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal,
                                         scale=problem["scale"], enable_gqa=problem["Hq"] != problem["Hkv"])
    return out.float().numpy()


def jax_sdpa(q, k, v, *, problem, mask=None, bias=None, keep=None):
    t = lambda x: jnp.asarray(np.swapaxes(x, 1, 2))  # noqa: E731  jax wants [B, L, H, D]
    m = None if mask is None else jnp.asarray(np.broadcast_to(mask != 0, (problem["B"], problem["Hq"], problem["Lq"], problem["Lk"])))
    if problem["causal"] and problem["alignment"] != "top_left":
        raise NotImplementedError("is_causal is top-left only")
    out = jax.nn.dot_product_attention(t(q), t(k), t(v), mask=m, scale=problem["scale"], is_causal=problem["causal"])
    return np.swapaxes(np.asarray(out, dtype=np.float32), 1, 2)


if len(sys.argv) > 2 and sys.argv[2] == "serve":
    import attncheck
    attncheck.worker.serve(torch_sdpa if framework == "torch" else jax_sdpa,
                           {"name": f"{framework}-sdpa", "policy": POLICY,
                            "dtypes": ["f32", "f16", "bf16"], "layouts": ["bhsd"], "alignments": ["top_left"],
                            # Both multiply masked values by a zero weight (PyTorch's CPU paths: pytorch#101967;
                            # XLA's attention likewise, measured): NaN stored in a masked key reaches the output, so
                            # their contract needs finite inputs. The poisoned cases are reported apart, not passed.
                            "masked_inputs": "finite-required",
                            "features": FEATURES})
else:
    import json
    import tempfile
    exe, golden = sys.argv[2:4]
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [exe, "verify", "--worker", f"{sys.executable} {os.path.abspath(__file__)} {framework} serve",
               "--impl", f"{framework}-sdpa", "--fixtures", golden, "--report", report]
        rc = subprocess.run(cmd).returncode
        if rc not in (0, 1) or not os.path.exists(report):
            sys.exit(f"verify exited {rc} without a report")
        cases = json.load(open(report))["cases"]
    known = KNOWN_FAILURES[framework]
    failed = {c["fixture"] for c in cases if c["status"] not in ("pass", "unsupported", "finite-required")}
    apart = sorted(c["fixture"] for c in cases if c["status"] == "finite-required")
    print(f"finite-required (non-finite values in masked K/V, not judged under the declared contract): {apart}")
    if not any("poison_masked" in f for f in apart):
        sys.exit("the poisoned-masked cases were not reported apart")
    unexpected = sorted(f for f in failed if not any(k in f for k in known))
    fixed = sorted(k for k in known if not any(k in f for f in failed))
    for f in sorted(failed - set(unexpected)):
        print(f"known upstream failure: {f}: {next(v for k, v in known.items() if k in f)}")
    if not any(c["status"] == "pass" for c in cases):
        sys.exit("no case passed")
    if unexpected or fixed:
        sys.exit(f"unexpected failures: {unexpected}; known failures that no longer fail: {fixed}")
