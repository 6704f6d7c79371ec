#!/usr/bin/env python3
"""A merge worker written from docs/worker-protocol.md (2c) alone, in numpy fp32, with one switchable mistake.

usage: merge_worker.py [correct|nan|sentinel|layout|unnormalised|split|base|scale]
  correct       the merge as docs/states.md defines it, under any declared convention
  nan           empty states get weight 0 but their O is still multiplied in; 0/0 for a row of empty states
  sentinel      the declared empty lse (+inf, a finite sentinel) used as a real lse
  layout        lse/max/sum read and written as contiguous [N,B,H,L], ignoring the strides ([B,L,H] layouts)
  unnormalised  normalised O summed without dividing by the sum of the weights (unnormalised: sums taken as 1)
  split         the last state (split) is left out
  base          exp/log in base e whatever base the states declare
  scale         an fp8 output (odtype, oscale) stored without dividing by its scale
"""
import json
import os
import sys

import numpy as np

BUG = sys.argv[1] if len(sys.argv) > 1 else "correct"
DT = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8}
# fp8 formats: mantissa bits, exponent bias, exponent of the smallest normal, largest finite value
FP8 = {"fp8_e4m3": (3, 7, -6, 448.0), "fp8_e5m2": (2, 15, -14, 57344.0)}


def fp8_bits(x, fmt):
    """x saturated at the format's largest value and rounded to nearest even, as fp8 bits (NaN: S.1111.111)."""
    man, bias, min_exp, top = FP8[fmt]
    x = np.asarray(x, dtype=np.float64)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    a = np.minimum(np.abs(np.nan_to_num(x, nan=0.0)), top)
    _, e = np.frexp(a)
    q = np.maximum(e - 1, min_exp) - man                     # the grid spacing's exponent
    r = np.ldexp(np.rint(np.ldexp(a, -q)), q)
    _, e2 = np.frexp(r)
    sub = (e2 - 1 < min_exp) | (r == 0)
    field = np.where(sub, 0, e2 - 1 + bias).astype(np.uint8)
    mant = np.where(sub, np.ldexp(r, man - min_exp), np.ldexp(r, man - (e2 - 1)) - (1 << man)).astype(np.uint8)
    return np.where(np.isnan(x), sign | 0x7F, sign | (field << man) | mant).astype(np.uint8)


def view(buf, t, contiguous=False):
    dt = np.dtype(DT[t["dtype"]])
    flat = np.frombuffer(buf, dtype=np.uint8, count=t["nbytes"], offset=t["offset"]).view(dt)
    if contiguous:  # the layout mistake: the buffer taken as row-major in its logical shape
        return flat.reshape(t["shape"])
    return np.lib.stride_tricks.as_strided(flat, t["shape"], [s * dt.itemsize for s in t["strides"]])


def widen(a, dtype):
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def store(dst, x, dtype):
    x = np.asarray(x, dtype=np.float32)
    if dtype == "bf16":
        b = x.view(np.uint32)
        r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
        dst[...] = np.where(np.isnan(x), np.uint16(0x7FC0), r)
    else:
        dst[...] = x.astype(dst.dtype)


def merge(buf, req):
    p, ts = req["problem"], req["tensors"]
    conv = dict(kv.split("=") for kv in p["conventions"].split(",")[1:])
    form = p["conventions"].split(",")[0]
    two = conv["base"] == "2" and BUG != "base"
    sentinel = {"-inf": -np.inf, "+inf": np.inf}.get(conv["empty"])
    sentinel = np.float32(float(conv["empty"])) if sentinel is None else np.float32(sentinel)
    flat = BUG == "layout"
    odt = conv.get("odtype")  # an fp8 output: stored = O / oscale, saturated

    def put_o(t, x):
        if odt:
            view(buf, t)[...] = fp8_bits(x if BUG == "scale" else x / np.float64(conv["oscale"]), odt)
        else:
            store(view(buf, t), x, t["dtype"])
    o = widen(view(buf, ts["o"]), ts["o"]["dtype"])                      # [N,B,H,L,D]
    x = view(buf, ts["lse" if form == "normalised" else "max"], flat).astype(np.float32)  # [N,B,H,L]
    n_used = x.shape[0] - 1 if BUG == "split" else x.shape[0]
    o, x = o[:n_used], x[:n_used]
    if form == "normalised":
        l = np.ones_like(x)
        empty = x == sentinel
    else:
        l_stored = view(buf, ts["sum"], flat).astype(np.float32)[:n_used]
        empty = (x == sentinel) | (l_stored == 0)
        l = np.ones_like(x) if BUG == "unnormalised" else l_stored
    if BUG == "sentinel":
        empty = np.zeros_like(empty)
    xe = np.where(empty, np.float32(-np.inf), x)
    with np.errstate(all="ignore"):
        X = xe.max(axis=0)                                               # [B,H,L]
        w = (np.exp2 if two else np.exp)(xe - X)
        if BUG != "nan":
            w = np.where(empty, np.float32(0), w)
        S = (w * l).sum(axis=0)
        if BUG == "nan":
            acc = (w[..., None] * o).sum(axis=0)                         # 0 * NaN leaks
        else:
            acc = np.where(empty[..., None], np.float32(0), w[..., None] * o).sum(axis=0)
        none = np.all(empty, axis=0) if BUG not in ("nan",) else np.zeros_like(X, dtype=bool)
        lse = X + (np.log2(S) if two else np.log(S))
        if form == "normalised":
            out = acc if BUG == "unnormalised" else acc / S[..., None]
    if form == "normalised":
        stat = np.where(none, sentinel, lse)
        put_o(ts["out"], np.where(none[..., None], 0, out))
        view(buf, ts["out_lse"], flat)[...] = stat
    else:
        put_o(ts["out"], np.where(none[..., None], 0, acc))
        view(buf, ts["out_max"], flat)[...] = np.where(none, sentinel, X)
        view(buf, ts["out_sum"], flat)[...] = np.where(none, 0, S)


def main():
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def send(m):
        proto.write(json.dumps(m) + "\n")
        proto.flush()

    buf, mapped = None, None
    for line in sys.stdin:
        req = json.loads(line)
        kind = req["type"]
        if kind == "bye":
            return
        if kind == "hello":
            send({"type": "hello", "protocol": 1, "name": "merge-worker", "description": f"numpy fp32 merge ({BUG})",
                  "available": True, "supports": False,
                  "capabilities": {"dtypes": ["f32"], "layouts": ["bhsd"], "alignments": ["top_left"],
                                   "fully_masked": ["zero"], "features": []},
                  "declarations": {"merge": True}})
        elif kind == "merge":
            if mapped != (req["shm"], req["shm_size"]):
                buf = np.memmap(req["shm"], dtype=np.uint8, mode="r+", shape=(req["shm_size"],))
                mapped = (req["shm"], req["shm_size"])
            try:
                merge(buf, req)
                send({"type": "merge", "id": req["id"], "status": "ok"})
            except Exception as e:  # the merge's own error: outcome "error" with its message
                send({"type": "merge", "id": req["id"], "status": "error", "message": f"{type(e).__name__}: {e}"})
        else:
            send({"type": "error", "id": req.get("id"), "message": f"request: field 'type': unknown {kind!r}"})


if __name__ == "__main__":
    main()
