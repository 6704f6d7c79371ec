#!/usr/bin/env python3
# Times attncheck's CPU implementations against PyTorch CPU SDPA and ONNX Runtime's Attention (opset 23) on the
# same shapes, back to back in one run, and prints one table of GFLOP/s and ratios. Run by hand (not in CI):
#   python3 tools/peer_bench.py [--attncheck build/tools/attncheck] [--threads 2] [--reps 3] [--rounds 5] [--quick]
import argparse
import json
import os
import platform
import subprocess
import sys
import time

SHAPES = [  # (B, H, Lq, Lk, D, causal)
    (1, 16, 2048, 2048, 128, False),
    (1, 16, 2048, 2048, 128, True),
    (1, 8, 4096, 4096, 64, False),
    (4, 8, 1, 8192, 128, False),
    (1, 4, 8192, 8192, 128, True),
]
QUICK = [(1, 8, 1024, 1024, 64, False), (1, 8, 1024, 1024, 64, True), (4, 8, 1, 4096, 128, False)]


def median(xs):
    """Median of the values that are not None (the lower middle one for an even count); None when there are none."""
    xs = sorted(x for x in xs if x is not None)
    return xs[(len(xs) - 1) // 2] if xs else None


def flops(s):
    b, h, lq, lk, d, causal = s
    f = 4.0 * b * h * lq * lk * d
    return f / 2 if causal else f


def median_seconds(fn, reps, warmup=1):
    """(wall, process CPU) seconds of fn(), each the median over reps."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    wall.sort()
    cpu.sort()
    return wall[len(wall) // 2], cpu[len(cpu) // 2]


def settle(a):
    """Pause before each measurement, so the one before cannot overlap it: PyTorch's OpenMP threads spin about 10 ms
    of CPU after a call (measured with process_time() across a sleep; ONNX Runtime's: none measurable)."""
    time.sleep(a.settle)


def attncheck_gflops(exe, impl, s, dtype, threads, reps):
    b, h, lq, lk, d, causal = s
    cmd = [exe, "bench", "--impl", impl, "--shape", f"{b},{h},{lq},{lk},{d}", "--dtype", dtype,
           "--threads", str(threads), "--reps", str(reps), "--json"] + (["--causal"] if causal else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    j = json.loads(r.stdout)
    return j, None


def torch_runner(threads):
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        return None, f"torch not importable: {e}"
    torch.set_num_threads(threads)

    def run(s, dtype, reps):
        b, h, lq, lk, d, causal = s
        dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.rand(b, h, n, d, generator=g).mul_(2).sub_(1).to(dt) for n in (lq, lk, lk))
        f = torch.nn.functional.scaled_dot_product_attention
        with torch.inference_mode():
            return median_seconds(lambda: f(q, k, v, is_causal=causal), reps)

    return run, f"torch {torch.__version__} (cpu capability {torch.backends.cpu.get_cpu_capability()})"


def ort_runner(threads):
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except Exception as e:  # noqa: BLE001
        return None, f"onnxruntime/onnx not importable: {e}"

    def run(s, dtype, reps):
        b, h, lq, lk, d, causal = s
        et = {"fp32": TensorProto.FLOAT, "bf16": TensorProto.BFLOAT16}[dtype]
        inputs = [helper.make_tensor_value_info(n, et, [b, h, L, d]) for n, L in (("q", lq), ("k", lk), ("v", lk))]
        node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=int(causal))
        graph = helper.make_graph([node], "attn", inputs, [helper.make_tensor_value_info("y", et, [b, h, lq, d])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        try:
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(str(e).splitlines()[0][:80])
        if dtype != "fp32":
            raise RuntimeError("bf16 inputs: no numpy bf16 feed")
        rng = np.random.default_rng(0)
        feed = {n: rng.uniform(-1, 1, (b, h, L, d)).astype(np.float32) for n, L in (("q", lq), ("k", lk), ("v", lk))}
        return median_seconds(lambda: sess.run(None, feed), reps)

    return run, f"onnxruntime {ort.__version__} (opset-23 Attention, CPU EP)"


def measure(a, impls, s, dtype, torch_run, ort_run, peers_first=False):
    """One round of one cell: each attncheck implementation and each peer, back to back (the peers first when
    peers_first: alternating the order between rounds keeps a steady drift of the machine's speed from favouring
    whichever side runs first)."""
    res = {}
    if peers_first:
        time_peers(a, s, dtype, torch_run, ort_run, res)
    for impl in impls:
        settle(a)
        j, err = attncheck_gflops(a.attncheck, impl, s, dtype, a.threads, a.reps)
        res[impl] = j["gflops"] if j else None
        res[impl + ":cpu"] = flops(s) / j["cpu_seconds"] / 1e9 if j else None
        if j:
            res["isa"] = j["isa"]
            res["sgemm"] = j["sgemm_gflops"]
            res["peak"] = j["fma_peak_gflops"]
            res[impl + ":bw"] = j["fraction_of_bandwidth"]
            res.setdefault("bound", j["bound"])
        elif err:
            print(f"# {impl} {s} {dtype}: {err}", file=sys.stderr)
    if not peers_first:
        time_peers(a, s, dtype, torch_run, ort_run, res)
    return res


def time_peers(a, s, dtype, torch_run, ort_run, res):
    for name, run in (("torch", torch_run), ("ort", ort_run)):
        res[name] = res[name + ":cpu"] = None
        if run is None:
            continue
        settle(a)
        try:
            wall, cpu = run(s, dtype, a.reps)
            res[name], res[name + ":cpu"] = flops(s) / wall / 1e9, flops(s) / cpu / 1e9
        except Exception as e:  # noqa: BLE001 - an unsupported case is reported, not fatal
            print(f"# {name} {s} {dtype}: {e}", file=sys.stderr)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--attncheck", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "attncheck"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each cell this many times, alternating attncheck and the peers; GF/s are the median "
                         "over rounds, ratios the median of the per-round (paired) ratios")
    ap.add_argument("--settle", type=float, default=0.2, help="seconds of pause before each measurement")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--impls", default="cpu-flash,cpu")
    ap.add_argument("--quick", action="store_true", help="small shapes (a minute) instead of the full SHAPES list")
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    impls = a.impls.split(",")
    torch_run, torch_note = torch_runner(a.threads)
    ort_run, ort_note = ort_runner(a.threads)
    print(f"# CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average at start "
          f"{os.getloadavg()[0]:.1f}; threads {a.threads}; reps {a.reps} (median); rounds {a.rounds}; settle {a.settle} s")
    print(f"# peers: {torch_note}; {ort_note}")
    rows = []
    for s in QUICK if a.quick else SHAPES:
        for dtype in a.dtypes.split(","):
            rounds = [measure(a, impls, s, dtype, torch_run, ort_run, n % 2 == 1) for n in range(a.rounds)]
            rows.append((s, dtype, rounds))
            print(f"# done {s} {dtype} (load {os.getloadavg()[0]:.1f})", file=sys.stderr)

    def f(rounds, key, digits=1):
        v = median([r.get(key) for r in rounds])
        return "—" if v is None else f"{v:.{digits}f}"

    def paired(rounds, num, den):
        # Paired: each round's two figures were measured back to back, so a load change between rounds cancels.
        return [r[num] / r[den] for r in rounds if r.get(num) is not None and r.get(den)]

    def ratio(rounds, num, den):
        v = median(paired(rounds, num, den))
        return "—" if v is None else f"{v:.2f}"

    def spread(rounds, num, den):
        v = paired(rounds, num, den)
        return "—" if not v else f"{min(v):.2f}–{max(v):.2f}"

    isa = next((r["isa"] for _, _, rounds in rows for r in rounds if "isa" in r), "?")
    print(f"# attncheck target (isa): {isa}; load average at end {os.getloadavg()[0]:.1f}")
    print("# GF/s = 4·B·H·Lq·Lk·D (causal: half) / median wall seconds (median over rounds); ratios: median of the")
    print("# per-round ratios, each round timing attncheck and the peers back to back (peers first in every second round),")
    print("# 'per round' their lowest and highest; 'CPU' ratios use process CPU seconds instead")
    print("# (less sensitive to other processes on a shared machine; spinning threads count as used).")
    print("# bound: memory when the least bytes moved (Q, K, V, O) over the same-run read bandwidth take longer than")
    print("# the FLOPs at the FMA peak (decode); then /bandwidth (GB/s moved over that bandwidth) is the figure of merit,")
    print("# else /SGEMM.")
    head = ["shape B×H×Lq×Lk×D", "dtype"] + [f"{i} GF/s" for i in impls] + ["PyTorch GF/s", "ORT GF/s", "SGEMM GF/s"]
    head += [f"{i}/PyTorch" for i in impls] + [f"{impls[0]}/PyTorch per round"] + [f"{impls[0]}/ORT", f"{impls[0]}/SGEMM", "bound",
                                                 f"{impls[0]}/bandwidth"]
    head += [f"{i}/PyTorch CPU" for i in impls] + [f"{impls[0]}/ORT CPU"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for s, dtype, rs in rows:
        b, h, lq, lk, d, causal = s
        i0 = impls[0]
        cells = [f"{b}×{h}×{lq}×{lk}×{d}" + (" causal" if causal else ""), dtype]
        cells += [f(rs, i) for i in impls] + [f(rs, "torch"), f(rs, "ort"), f(rs, "sgemm")]
        cells += [ratio(rs, i, "torch") for i in impls] + [spread(rs, i0, "torch")] + [ratio(rs, i0, "ort"), ratio(rs, i0, "sgemm"),
                                                           next((r["bound"] for r in rs if "bound" in r), "—"),
                                                           f(rs, i0 + ":bw", 2)]
        cells += [ratio(rs, i + ":cpu", "torch:cpu") for i in impls] + [ratio(rs, i0 + ":cpu", "ort:cpu")]
        print("| " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
