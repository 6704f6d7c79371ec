# The Python side of docs/worker-protocol.md: serve(fn, declarations) turns a Python attention kernel into a worker
# that `attncheck verify|property|selftest --worker "python3 mine.py"` drives. Tensors are numpy views of the shared
# memory file (inputs read-only); fn returns out, or a dict with out/lse/weights. A worker given a backward callable
# speaks protocol 2 and answers `backward` requests (`attncheck verify --pass backward --worker ...`); one given a
# module callable declares "module" and answers `module` requests (module fixtures, docs/module.md).
import json
import os
import sys

import numpy as np

PROTOCOLS = (1, 2)  # 2 adds the backward message
_DTYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16, "u8": np.uint8,
           "e4m3": np.uint8, "e5m2": np.uint8, "i8": np.int8}  # i8: a quantized KV cache's codes
_FP8 = ("e4m3", "e5m2")  # 8-bit codes; a kernel declaring one of them in `dtypes` gets the `fp8` feature
_ALL_FEATURES = ["gqa", "cross", "dqk_ne_dv", "causal", "per_batch_offsets", "key_padding", "bool_mask", "bias",
                 "window", "softcap", "dropout", "finite_fill", "weights_out", "lse_out"]


def hello(declarations, asks_supports=False, protocol=1):
    """The worker's hello message from a flat declarations dict (see docs/python.md)."""
    d = dict(declarations or {})
    policy = d.get("policy", "zero")
    dtypes = list(d.get("dtypes", ["f64", "f32", "f16", "bf16"] if d.get("attention", True) else []))
    features = list(d.get("features", _ALL_FEATURES))
    if any(t in _FP8 for t in dtypes) and "fp8" not in features:
        features.append("fp8")  # the protocol drops fp8 dtypes without it; declaring the dtype is the opt-in
    caps = {"dtypes": dtypes, "layouts": d.get("layouts", ["bhsd", "bshd"]),
            "alignments": d.get("alignments", ["top_left", "bottom_right", "explicit"]),
            "fully_masked": d.get("fully_masked", [policy]), "features": features,
            "max_head_dim": d.get("max_head_dim", 0), "head_dim_multiple": d.get("head_dim_multiple", 1)}
    if "modifications" in d:  # library entries and user expressions the kernel evaluates (their parameters: `name`)
        caps["modifications"] = list(d["modifications"])
    decl = {"fully_masked_policy": policy, "deterministic": bool(d.get("deterministic", False)),
            "batch_invariant": bool(d.get("batch_invariant", False)), "backward": bool(d.get("backward", False)),
            "module": bool(d.get("module", False)), "module_backward": bool(d.get("module_backward", False))}
    for key in ("outputs", "contract", "masked_inputs", "schedule_knobs", "schedule_bitwise", "layout_invariant"):
        if key in d:
            decl[key] = d[key]
    available = d.get("available", True)
    return {"type": "hello", "protocol": protocol, "name": d.get("name", "python-worker"),
            "description": d.get("description", "Python kernel (attncheck.worker)"), "available": bool(available),
            "unavailable_reason": d.get("unavailable_reason", ""), "supports": bool(asks_supports), "capabilities": caps,
            "declarations": decl}


def _view(buf, t, writeable):
    dt = np.dtype(_DTYPES[t["dtype"]])
    flat = np.frombuffer(buf, dtype=np.uint8, count=t["nbytes"], offset=t["offset"]).view(dt)
    a = np.lib.stride_tricks.as_strided(flat, t["shape"], [s * dt.itemsize for s in t["strides"]], writeable=writeable)
    return a


def to_bf16_bits(x):
    """float array -> bfloat16 bit patterns (uint16), round to nearest even, NaN stays NaN."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def from_bf16_bits(u):
    return (np.asarray(u, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _fp8_table(fmt):
    """The value of each of the 256 codes: OCP e4m3fn (bias 7, no infinity, NaN at S.1111.111) or e5m2 (bias 15,
    IEEE-like: infinities and NaNs at exponent 31)."""
    ebits, mbits, bias = (4, 3, 7) if fmt == "e4m3" else (5, 2, 15)
    values = np.empty(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
        if fmt == "e4m3" and e == 15 and m == 7:
            v = np.nan
        elif fmt == "e5m2" and e == 31:
            v = np.inf if m == 0 else np.nan
        elif e == 0:
            v = m / (1 << mbits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        values[code] = sign * v
    return values


_FP8_VALUES = {}


def from_fp8_codes(codes, fmt):
    """uint8 codes of `fmt` ("e4m3" or "e5m2") -> their exact values as float32 (the descale not applied)."""
    if fmt not in _FP8_VALUES:
        _FP8_VALUES[fmt] = _fp8_table(fmt)
    return _FP8_VALUES[fmt][np.asarray(codes, dtype=np.uint8)]


def _store(dst, value, dtype):
    value = np.broadcast_to(np.asarray(value), dst.shape)
    dst[...] = to_bf16_bits(value) if dtype == "bf16" else value.astype(dst.dtype)


def run_case(fn, buf, req):
    """Calls fn for one run request and writes its outputs into the shared memory."""
    p, ts = req["problem"], req["tensors"]
    args = _inputs(buf, ts, ("q", "k", "v", "mask", "bias", "keep"))
    if "schedule" in req:  # a schedule check, sent only to a kernel that declares schedule_knobs
        args["schedule"] = req["schedule"]
    res = fn(args.pop("q"), args.pop("k"), args.pop("v"), problem=p, **args)
    if not isinstance(res, dict):
        res = dict(zip(("out", "lse", "weights"), res if isinstance(res, tuple) else (res,)))
    for name in ("out", "lse", "weights", "max_logit"):
        if name in ts:
            if res.get(name) is None:
                raise ValueError(f"fn returned no {name!r}, which the problem asks for")
            _store(_view(buf, ts[name], True), res[name], ts[name]["dtype"])


def _inputs(buf, ts, names):
    """The named input tensors of a request as numpy views (bf16 widened to float32; fp8 codes as the float32
    values of the codes, which the problem's descale_q/k/v then scale)."""
    args = {}
    for name in names:
        if name in ts:
            a, dtype = _view(buf, ts[name], False), ts[name]["dtype"]
            args[name] = from_bf16_bits(a) if dtype == "bf16" else from_fp8_codes(a, dtype) if dtype in _FP8 else a
    return args


def run_backward(backward, buf, req):
    """Calls backward for one backward request and writes dq, dk, dv (and dbias) into the shared memory."""
    p, ts = req["problem"], req["tensors"]
    args = _inputs(buf, ts, ("q", "k", "v", "mask", "bias", "keep", "out", "lse", "dout"))
    res = backward(args.pop("q"), args.pop("k"), args.pop("v"), problem=p, **args)
    for name in ("dq", "dk", "dv", "dbias"):
        if name in ts:
            if res.get(name) is None:
                raise ValueError(f"backward returned no {name!r}, which the problem asks for")
            _store(_view(buf, ts[name], True), res[name], ts[name]["dtype"])


_MODULE_INPUTS = ("x2", "wq", "wk", "wv", "bq", "bk", "bv", "wqkv", "bqkv", "wo", "bo", "mask", "bias", "keep")


def run_module(module, buf, req):
    """Calls module for one module request and writes y (and weights) into the shared memory."""
    p, ts = req["problem"], req["tensors"]
    args = _inputs(buf, ts, ("x",) + _MODULE_INPUTS)
    res = module(args.pop("x"), problem=p, **args)
    if not isinstance(res, dict):
        res = dict(zip(("y", "weights"), res if isinstance(res, tuple) else (res,)))
    for name in ("y", "weights"):
        if name in ts:
            if res.get(name) is None:
                raise ValueError(f"module returned no {name!r}, which the problem asks for")
            _store(_view(buf, ts[name], True), res[name], ts[name]["dtype"])


def run_module_backward(module_backward, buf, req):
    """Calls module_backward for one module_backward request and writes every gradient the request names."""
    p, ts = req["problem"], req["tensors"]
    args = _inputs(buf, ts, ("x", "dy") + _MODULE_INPUTS)
    res = module_backward(args.pop("x"), problem=p, **args)
    for name in ts:
        if name.startswith("d") and name != "dy":
            if res.get(name) is None:
                raise ValueError(f"module_backward returned no {name!r}, which the problem asks for")
            _store(_view(buf, ts[name], True), res[name], ts[name]["dtype"])


def _answer_supports(supports, problem):
    """supports(problem) -> True, or (False, reason); an exception is a refusal naming it."""
    if supports is None:
        return True, ""
    try:
        r = supports(problem)
    except Exception as e:  # a refusal, never a crash of the worker
        return False, f"supports raised {type(e).__name__}: {e}"
    ok, reason = (r, "") if isinstance(r, bool) else (bool(r[0]), str(r[1]))
    return ok, ("" if ok else reason or "refused by the worker's supports()")


def serve_streams(fn, declarations, rfile, wfile, supports=None, backward=None, module=None, module_backward=None):
    """The protocol loop over two text streams; returns at bye or end of input."""
    declarations = dict(declarations or {}, backward=backward is not None, module=module is not None,
                        module_backward=module is not None and module_backward is not None, attention=fn is not None)
    protocol = 1
    def send(msg):
        wfile.write(json.dumps(msg) + "\n")
        wfile.flush()

    buf, mapped = None, None
    for line in rfile:
        try:
            req = json.loads(line)
            kind = req["type"]
        except (ValueError, KeyError, TypeError) as e:
            send({"type": "error", "message": f"request: not a JSON object with field 'type': {e}"})
            continue
        if kind == "bye":
            return
        if kind == "hello":
            common = [v for v in PROTOCOLS if v in req.get("protocols", [])]
            if not common:
                send({"type": "error", "message": f"hello: field 'protocols': {req.get('protocols')} has none of "
                                                  f"{list(PROTOCOLS)}"})
                return
            protocol = max(common)
            send(hello(declarations, supports is not None, protocol))
        elif kind == "supports" and req.get("pass") in ("module", "module_backward"):  # asked only when declared
            send({"type": "supports", "id": req.get("id"), "ok": True, "reason": ""})
        elif kind == "supports":
            ok, reason = _answer_supports(supports, req.get("problem", {}))
            send({"type": "supports", "id": req.get("id"), "ok": ok, "reason": reason})
        elif kind in ("run", "backward", "module", "module_backward") and \
                {"run": fn, "backward": backward, "module": module, "module_backward": module_backward}[kind]:
            if mapped != (req["shm"], req["shm_size"]):
                buf = np.memmap(req["shm"], dtype=np.uint8, mode="r+", shape=(req["shm_size"],))
                mapped = (req["shm"], req["shm_size"])
            try:
                if kind == "module":
                    run_module(module, buf, req)
                elif kind == "module_backward":
                    run_module_backward(module_backward, buf, req)
                else:
                    run_case(fn, buf, req) if kind == "run" else run_backward(backward, buf, req)
                send({"type": kind, "id": req["id"], "status": "ok"})
            except Exception as e:  # the kernel's own error: outcome "error" with its message
                send({"type": kind, "id": req["id"], "status": "error", "message": f"{type(e).__name__}: {e}"})
        else:
            send({"type": "error", "id": req.get("id"), "message": f"request: field 'type': unknown {kind!r}"})


def serve(fn, declarations=None, supports=None, backward=None, module=None, module_backward=None):
    """Serve fn over stdin/stdout until attncheck says bye. Prints of fn go to stderr (stdout is the protocol's).

    supports(problem), when given, is asked per case inside the declared capabilities: True, or (False, reason)
    for a case the kernel cannot run (reported unsupported with that reason, never run).

    fn(q, k, v, *, problem, mask=None, bias=None, keep=None) gets numpy arrays in logical order
    (q [B,Hq,Lq,Dqk], k/v [B,Hkv,Lk,D]; bf16 widened to float32) and the problem dict of the protocol, and returns
    out [B,Hq,Lq,Dv] or a dict {"out", "lse", "weights", "max_logit"} (lse/weights when
    problem["want_lse"/"want_weights"]; max_logit, for a kernel that declares the feature "max_logit", when
    problem["max_logit"] is "rows" [B,Hq,Lq] or "heads" [Hq]).
    A kernel that declares schedule_knobs also gets schedule={"threads", "num_splits", "reversed"} (0 = its own
    choice) on the runs of a schedule check (docs/invariance.md#schedule).

    backward(q, k, v, *, problem, out, lse, dout, mask=None, bias=None, keep=None), when given, returns the
    gradients of sum(dout * out) as a dict {"dq", "dk", "dv"} (and "dbias" for a problem with a bias), each in
    logical order (dk, dv summed over each KV head's query heads); docs/worker-protocol.md "Protocol 2".

    module(x, *, problem, x2=None, wq=None, wk=None, wv=None, bq=None, bk=None, bv=None, wqkv=None, bqkv=None,
    wo, bo=None, mask=None, bias=None, keep=None), when given, runs an attention module's forward on the module
    fixtures (docs/module.md): x [B,Lq,d_in] (x2 [B,Lk,d_in2]), weights [out, in], biases [out] as present,
    the attention's mask, bias and keep; problem is the module message's problem (d_in, d_in2, d_out, packing,
    qkv_bias, out_bias, average_weights, and the attention inside as problem["attention"]). It returns y [B,Lq,d_out]
    or a dict {"y", "weights"} (weights [B,Hq,Lq,Lk], or [B,1,Lq,Lk] averaged, when
    problem["attention"]["want_weights"]). fn may be None for a module-only worker (it then declares no dtype, so
    every attention case is unsupported). module_backward(x, *, problem, dy, <module's inputs>), with module, answers
    `verify --pass backward` on module fixtures: a dict of the gradients of sum(dy * y), one per input named with a
    leading d ("dx", "dx2", "dwq".. or "dwqkv", "dbqkv", "dwo", "dbo", and "dbias" for an attention bias), each
    shaped like that input.
    """
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve_streams(fn, declarations, sys.stdin, proto, supports, backward, module, module_backward)
