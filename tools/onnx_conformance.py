#!/usr/bin/env python3
# Judges ONNX's own Attention conformance outputs with attncheck's fp64 reference and tolerance model: each
# `test_attention_*` case of the installed onnx package is mapped per docs/onnx-mapping.md, imported
# (`attncheck import`) and ONNX's expected outputs are compared (`attncheck compare`). Run by hand, not in CI:
#   python3 tools/onnx_conformance.py [--attncheck build/tools/attncheck] [--filter REGEX] [--keep DIR]
#                                     [--default-contract] [-v]
# Needs numpy and onnx (pip); no h5py (the candidate is an .npz).
import argparse
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx.backend.test.case.node import attention as onnx_attention
except ImportError as e:
    print(f"onnx_conformance.py needs numpy and onnx ({e}): pip install onnx", file=sys.stderr)
    sys.exit(2)


class NotImportable(Exception):
    pass


def collect():
    """Every case the installed generators export, in ONNX's own numbers: expect() is captured, not written."""
    cases = []

    def capture(node, inputs, outputs, name, **kw):
        opsets = kw.get("opset_imports") or []
        cases.append({"name": name, "node": node, "inputs": inputs, "outputs": outputs,
                      "opset": max((o.version for o in opsets if o.domain in ("", "ai.onnx")), default=None)})

    onnx_attention.expect = capture
    for fn in sorted(n for n in dir(onnx_attention.Attention) if n.startswith("export")):
        np.random.seed(0)  # the generators draw np.random.rand: seeded so a run can be replayed
        getattr(onnx_attention.Attention, fn)()
    return cases


def is_bf16(a):
    return a.dtype.name == "bfloat16"


def as_stored(a):
    """bf16 as uint16 bit patterns (attncheck's encoding); other floats unchanged."""
    return a.view(np.uint16) if is_bf16(a) else a


def to_bshd(a, heads):
    """ONNX's 3-D [B, L, H*D] as [B, L, H, D]: the same bytes, attncheck's BSHD layout."""
    return a.reshape(a.shape[0], a.shape[1], heads, a.shape[2] // heads)


def map_case(c):
    """(import flags, npz arrays, candidate arrays, mapping text, [compare --contract value]) or NotImportable."""
    node = c["node"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    # expect() lists the arrays of the named inputs/outputs only: '' marks an omitted optional one.
    ins = dict(zip([n for n in node.input if n], c["inputs"], strict=True))
    outs = dict(zip([n for n in node.output if n], c["outputs"], strict=True))
    q, k, v = ins["Q"], ins["K"], ins["V"]
    mode = attrs.get("qk_matmul_output_mode", 0)
    if ("past_key" in ins) != ("past_value" in ins) or ("past_key" in ins) != ("present_key" in outs):
        raise NotImportable("past_key/past_value without present_key/present_value (or one of a pair alone)")
    flags, words = ["--policy", "zero"], []
    if q.ndim == 3:
        hq, hkv = attrs["q_num_heads"], attrs["kv_num_heads"]
        q, k, v = to_bshd(q, hq), to_bshd(k, hkv), to_bshd(v, hkv)
        flags += ["--layout", "bshd"]
        words.append("3d->BSHD")
        lk, heads_q = k.shape[1], hq
    else:
        words.append("BHSD")
        lk, heads_q, hkv = k.shape[2], q.shape[1], k.shape[1]
    if heads_q != hkv:
        words.append(f"gqa{heads_q}/{hkv}")
    if is_bf16(q):
        flags += ["--dtype", "bf16"]
    arrays = {"q": as_stored(q), "k": as_stored(k), "v": as_stored(v)}
    past = ins["past_key"].shape[2] if "past_key" in ins else 0
    # past/present are 4-D [B,Hkv,L,D] even for 3-D Q/K/V; attncheck keeps them in the problem's layout.
    three_d = ins["Q"].ndim == 3
    kv_layout = (lambda a: a.transpose(0, 2, 1, 3)) if three_d else (lambda a: a)
    if past:
        arrays["past_key"] = as_stored(kv_layout(ins["past_key"]))
        arrays["past_value"] = as_stored(kv_layout(ins["past_value"]))
        lk += past
        words.append(f"past={past}" + (" (past/present transposed to BSHD)" if three_d else ""))
    if "scale" in attrs:
        flags += ["--scale", repr(float(attrs["scale"]))]
        words.append(f"scale={attrs['scale']:.6g}")
    if attrs.get("softcap", 0) > 0:
        flags += ["--softcap", repr(float(attrs["softcap"]))]
        words.append(f"softcap={attrs['softcap']:g}")
    lengths = ins.get("nonpad_kv_seqlen")
    if attrs.get("is_causal", 0):
        # ONNX: j <= i + offset; offset 0 without a cache, nonpad_kv_seqlen[b] - Lq with it (bottom-right).
        # With past_key: offset = past length (explicit). Masks and positions refer to the present keys.
        flags += ["--causal", "bottom-right" if lengths is not None else "top-left"]
        flags += ["--causal-offset", str(past)] if past else []
        words.append("causal-br" if lengths is not None else f"causal-offset={past}" if past else "causal-tl")
    if lengths is not None:
        flags += ["--key-lengths", ",".join(str(int(x)) for x in lengths)]
        words.append("key_lengths=" + ",".join(str(int(x)) for x in lengths))
    if attrs.get("left_window_size", -1) >= 0 or attrs.get("right_window_size", -1) >= 0:
        w = (attrs.get("left_window_size", -1), attrs.get("right_window_size", -1))
        flags += [f"--window={w[0]},{w[1]}"]
        words.append(f"window={w[0]},{w[1]}")
    if "attn_mask" in ins:
        m = ins["attn_mask"]
        pad = lk - m.shape[-1]  # ONNX pads a short mask to the keys with False / -inf
        if m.dtype == np.bool_:
            if pad > 0:
                m = np.concatenate([m, np.zeros(m.shape[:-1] + (pad,), np.bool_)], axis=-1)
            arrays["mask"] = m
            words.append(f"mask{list(ins['attn_mask'].shape)}")
        else:
            m = m.astype(np.float32) if is_bf16(m) else m  # bf16 values are exact in fp32
            if pad > 0:
                m = np.concatenate([m, np.full(m.shape[:-1] + (pad,), -np.inf, m.dtype)], axis=-1)
            arrays["bias"] = m
            words.append(f"bias{list(ins['attn_mask'].shape)}:{m.dtype}")
        if pad > 0:
            words.append(f"padded+{pad}")
    y = outs["Y"]
    cand = {"out": as_stored(to_bshd(y, heads_q) if y.ndim == 3 else y)}
    if "qk_matmul_output" in outs:  # mode 0, 1, 2: raw scores at a stage; 3: the softmax (weights)
        key = "weights" if mode == 3 else "scores"
        flags += ["--want-weights"] if mode == 3 else ["--scores-out", ["scaled", "capped", "masked"][mode]]
        cand[key] = as_stored(outs["qk_matmul_output"])
        words.append(key if mode == 3 else f"scores={flags[-1]}")
    if past:
        cand["present_key"] = as_stored(kv_layout(outs["present_key"]))
        cand["present_value"] = as_stored(kv_layout(outs["present_value"]))
    # The spec: "If softmax precision is not provided, the same precision as the input of softmax (Q and K) is
    # used": a 16-bit case's softmax runs in fp16/bf16, which the candidate declares as its precision contract
    # (attncheck's 16-bit default is an fp32 softmax). softmax_precision is a TensorProto type number.
    dtype = "bf16" if is_bf16(ins["Q"]) else {"float16": "fp16", "float32": "fp32", "float64": "fp64"}[ins["Q"].dtype.name]
    softmax = dtype
    if "softmax_precision" in attrs:
        softmax = {1: "fp32", 10: "fp16", 11: "fp64", 16: "bf16"}[attrs["softmax_precision"]]
    contract = [] if softmax == "fp32" and dtype in ("fp16", "bf16", "fp32") else [f"scores={softmax}"]
    if "softmax_precision" in attrs:
        words.append(f"softmax_precision={softmax}")
    words += [f"contract {contract[0]}"] if contract else []
    return flags, arrays, cand, " ".join(words), contract


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def worst_line(text):
    """compare's detail lines for the tensors outside tolerance: 'out[b=..]: expected .. actual .. |err| .. > tol ..'."""
    lines = [l.strip() for l in text.splitlines()]
    return "; ".join(l for l in lines if re.match(r"\w+\[b=.*> tol", l)) or (lines[-1] if lines else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--attncheck", default=os.path.join(here, "..", "build", "tools", "attncheck"))
    ap.add_argument("--filter", default="", help="regex on the case name")
    ap.add_argument("--keep", default="", help="keep the .npz inputs, fixtures and candidates in this directory")
    ap.add_argument("--default-contract", action="store_true",
                    help="judge 16-bit cases under attncheck's default contract (fp32 softmax), not ONNX's softmax precision")
    ap.add_argument("-v", "--verbose", action="store_true", help="print compare's whole output for every case")
    a = ap.parse_args()
    if not os.access(a.attncheck, os.X_OK):
        print(f"--attncheck: {a.attncheck} is not an executable (build it: cmake --build build -j2)", file=sys.stderr)
        return 2
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
        return judge_all(a, a.keep)
    with tempfile.TemporaryDirectory(prefix="onnx_conformance_") as work:
        return judge_all(a, work)


def judge_all(a, work):
    rows, counts = [], {"pass": 0, "FAIL": 0, "not importable": 0}
    for c in collect():
        if not re.search(a.filter, c["name"]):
            continue
        name = c["name"].removeprefix("test_attention_")
        try:
            flags, arrays, cand, mapping, contract = map_case(c)
        except NotImportable as e:
            rows.append((name, c["opset"], "-", f"not importable: {e}"))
            counts["not importable"] += 1
            continue
        base = os.path.join(work, name)
        np.savez(base + ".inputs.npz", **arrays)
        np.savez(base + ".onnx.npz", **cand)
        rc, text = run([a.attncheck, "import", base + ".inputs.npz", "--out", base + ".h5", "--name", "onnx/" + name] + flags)
        if rc != 0:
            reason = text.strip().splitlines()[-1] if text.strip() else f"exit {rc}"
            rows.append((name, c["opset"], mapping, f"not importable: import refused: {reason}"))
            counts["not importable"] += 1
            continue
        rc, text = run([a.attncheck, "compare", "--expected", base + ".h5", "--actual", base + ".onnx.npz",
                        "--name", "onnx-stored"] + (["--contract", contract[0]] if contract and not a.default_contract else []))
        if a.verbose:
            print(f"--- {name}: {' '.join(flags)}\n{text}")
        if rc == 0:
            verdict = "pass"
        elif rc == 1:
            verdict = "FAIL " + worst_line(text)
        else:
            verdict = f"FAIL (compare exit {rc}): " + (text.strip().splitlines() or [""])[-1]
        counts["pass" if rc == 0 else "FAIL"] += 1
        rows.append((name, c["opset"], mapping, verdict))
    w = max((len(r[0]) for r in rows), default=4)
    m = max((len(r[2]) for r in rows), default=7)
    print(f"{'case':<{w}}  opset  {'mapping':<{m}}  verdict")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]!s:<5}  {r[2]:<{m}}  {r[3]}")
    print(f"onnx {onnx.__version__}: {len(rows)} cases: pass {counts['pass']}  FAIL {counts['FAIL']}  "
          f"not importable {counts['not importable']}" + (f"  (files: {work})" if a.keep else ""))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
