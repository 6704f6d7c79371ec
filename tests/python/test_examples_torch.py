# The examples that need PyTorch, run where it is installed (exit 77 otherwise, a skip): PyTorch's SDPA CPU
# backends one at a time through the worker over the golden suite, and the example Triton kernel under Triton's
# interpreter on the CPU, correct and with a causal off-by-one. A plain script (the torch venv need not have
# pytest). Usage: test_examples_torch.py ATTNCHECK GOLDEN_DIR WORK_DIR
import json
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print("torch is not importable by", sys.executable, "- skipped")
    sys.exit(77)

ATTNCHECK, GOLDEN, WORK = sys.argv[1:4]
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")
os.makedirs(WORK, exist_ok=True)


def verify(worker, impl, report, filter_=None, env=None, extra=()):
    cmd = [ATTNCHECK, "verify", "--worker", f"{sys.executable} {worker}", "--impl", impl, "--fixtures", GOLDEN,
           "--report", report] + (["--filter", filter_] if filter_ else []) + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    with open(report) as f:
        return r, json.load(f)


def scale_of(case):
    import h5py
    with h5py.File(case["file"], "r") as f:
        return float(f.attrs["effective_scale"]), int(f.attrs["causal"])


def test_sdpa_cpu_math_passes_the_golden_suite():
    r, rep = verify(f"{EXAMPLES}/torch_sdpa_worker.py math cpu", "torch-sdpa-math-cpu", f"{WORK}/math.json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert rep["summary"]["pass"] > 50, rep["summary"]


def test_sdpa_cpu_flash_fails_only_causal_with_a_negative_scale():
    """Measured with torch 2.15 (docs/python.md): the CPU flash backend returns NaN everywhere for a causal problem
    with a negative scale; every other supported golden case passes."""
    r, rep = verify(f"{EXAMPLES}/torch_sdpa_worker.py flash cpu", "torch-sdpa-flash-cpu", f"{WORK}/flash.json")
    failed = [c for c in rep["cases"] if c["status"] not in ("pass", "unsupported", "finite-required")]
    assert rep["summary"]["pass"] > 50, rep["summary"]
    for c in failed:
        scale, causal = scale_of(c)
        assert c["status"] == "fail" and causal and scale < 0, (c["fixture"], c["message"])
    print(f"     flash: {len(failed)} failing case(s), all causal with a negative scale:",
          sorted({c['fixture'] for c in failed}))


def test_triton_kernel_interpreted_passes():
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    r, rep = verify(f"{EXAMPLES}/triton_attention.py", "triton-flash", f"{WORK}/triton.json",
                    "fp32/B2-Hq4-Hkv2-*", env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert rep["summary"]["pass"] >= 5, rep["summary"]


def test_triton_causal_off_by_one_is_caught():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    sys.path.insert(0, EXAMPLES)
    import attncheck.torch as at
    import triton_attention as ta
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 9, 16, generator=g), torch.randn(1, 1, 11, 16, generator=g),
               torch.randn(1, 1, 11, 8, generator=g))
    out, lse = ta.attention(q, k, v, scale=0.25, causal=True, diagonal_offset=[2], key_lengths=[11])
    at.assert_attention_close(out, q, k, v, lse=lse, causal="bottom_right", scale=0.25)
    bad, _ = ta.attention(q, k, v, scale=0.25, causal=True, diagonal_offset=[1], key_lengths=[11])
    try:
        at.assert_attention_close(bad, q, k, v, causal="bottom_right", scale=0.25)
    except AssertionError as e:
        assert "verdict fail" in str(e), e
        return
    raise AssertionError("a causal off-by-one of the Triton kernel passed")


def test_flex_attention_passes_modifications_and_expressions():
    # FlexAttention (eager, CPU) on the fp32 suite: the modification library and the user expressions, each written
    # as a FlexAttention score_mod / mask_mod (examples/python/flex_worker.py); NaN-poisoned cases are outside its
    # declared contract (finite-required).
    # FlexAttention traces each new score_mod / mask_mod (seconds on a loaded machine): a generous per-case limit.
    slow = ["--timeout", "300"]
    r, rep = verify(f"{EXAMPLES}/flex_worker.py", "flex-attention", f"{WORK}/flex.json", "fp32/*", extra=slow)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    passed = {c["fixture"].rsplit("/", 1)[-1] for c in rep["cases"] if c["status"] == "pass"}
    for tag in ("alibi-pos-32k", "alibi-per-batch", "doc-decode", "chunk7", "prefix", "dilated", "expr-linear-bias",
                "expr-softcap-chunk16"):
        assert tag in passed, (tag, sorted(passed))
    r, rep = verify(f"{EXAMPLES}/flex_worker.py alibi-sign", "flex-attention", f"{WORK}/flex-bug.json", "fp32/*alibi*",
                    extra=slow)
    failed = [c for c in rep["cases"] if c["status"] == "fail"]
    assert r.returncode == 1 and len(failed) >= 2, r.stdout[-3000:]
    # A score_mod that casts back to score.dtype rounds the modified scores to bf16 (FlexAttention traces the mod
    # with the inputs' dtype): caught on the bf16 expression cases; the worker as written passes them.
    r, rep = verify(f"{EXAMPLES}/flex_worker.py score-dtype", "flex-attention", f"{WORK}/flex-dtype.json",
                    "bf16/*sexpr*", extra=slow)
    assert r.returncode == 1 and sum(c["status"] == "fail" for c in rep["cases"]) >= 2, r.stdout[-3000:]
    r, rep = verify(f"{EXAMPLES}/flex_worker.py", "flex-attention", f"{WORK}/flex-bf16.json", "bf16/*sexpr*",
                    extra=slow)
    assert r.returncode == 0, r.stdout[-3000:]


def test_transformers_rope_worker_passes_the_position_fixtures():
    # transformers' own rotary helpers (LlamaRotaryEmbedding, apply_rotary_pos_emb, GPT-J's rotate_every_two,
    # Qwen2VLRotaryEmbedding for mRoPE, Qwen3RMSNorm for QK-norm) in the model's dtype, then SDPA
    # (examples/python/hf_rope_worker.py), on every RoPE / mRoPE / QK-norm / varlen-RoPE fixture; skipped
    # without transformers. The GPT-J pairing ignored (`neox-only`) fails the GPT-J fixtures.
    import importlib.util
    if not importlib.util.find_spec("transformers"):
        print("transformers is not importable - test_transformers_rope_worker skipped")
        return
    r, rep = verify(f"{EXAMPLES}/hf_rope_worker.py", "hf-rope-sdpa", f"{WORK}/hf-rope.json", "*rope*")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    passed = [c["fixture"].rsplit("/", 1)[-1] for c in rep["cases"] if c["status"] == "pass"]
    for tag in ("rope-neox-64k", "rope-gptj-200k", "rope-neox-partial-llama3", "rope-gptj-partial-yarn", "mrope-qwen2vl",
                "rope-varlen-offsets", "qknorm-rope"):
        assert passed.count(tag) >= 2, (tag, sorted(passed))  # at least two dtypes each
    r, rep = verify(f"{EXAMPLES}/hf_rope_worker.py neox-only", "hf-rope-sdpa", f"{WORK}/hf-rope-bug.json", "*gptj*")
    failed = [c for c in rep["cases"] if c["status"] == "fail"]
    assert r.returncode == 1 and len(failed) >= 6, r.stdout[-3000:]


if __name__ == "__main__":
    import script_tests
    script_tests.run(globals())
