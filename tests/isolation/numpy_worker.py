# A worker in another language, written from docs/worker-protocol.md alone: scaled dot-product attention in numpy
# (float64), served over stdin/stdout with tensors in the shared-memory file. Proves the protocol is implementable
# in ~100 lines; tests/isolation/CMakeLists.txt runs it with `attncheck verify --worker`. MODE=crash makes it die on Lq == 15;
# MODE=max_logit also declares and writes the max-logit output, MODE=max_logit_unscaled writes it before the scale
# (a wrong one).
import json
import os
import sys

import numpy as np

DTYPES = {"f64": np.float64, "f32": np.float32, "u8": np.uint8}
proto = os.fdopen(os.dup(1), "w")  # the protocol owns stdout; prints go to stderr
os.dup2(2, 1)
mode = sys.argv[1] if len(sys.argv) > 1 else ""


def send(msg):
    proto.write(json.dumps(msg) + "\n")
    proto.flush()


def tensor(buf, t):
    dt = np.dtype(DTYPES[t["dtype"]])
    flat = np.frombuffer(buf, dtype=np.uint8, count=t["nbytes"], offset=t["offset"]).view(dt)
    return np.lib.stride_tricks.as_strided(flat, t["shape"], [s * dt.itemsize for s in t["strides"]])


def attention(p, ts):
    q, k, v = (tensor(buf, ts[n]).astype(np.float64) for n in "qkv")
    group = p["Hq"] // p["Hkv"]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    raw = np.einsum("bhid,bhjd->bhij", q, k)
    s = raw * p["scale"]
    if p["softcap"] > 0:
        s = p["softcap"] * np.tanh(s / p["softcap"])
    i = np.arange(p["Lq"])[:, None]
    j = np.arange(p["Lk"])[None, :]
    visible = np.ones(s.shape, dtype=bool)
    for b in range(p["B"]):
        diag = i + p["diagonal_offset"][b]
        vis = np.ones((p["Lq"], p["Lk"]), dtype=bool)
        if p["causal"]:
            vis &= j <= diag
        if p["key_lengths"] is not None:
            vis &= j < p["key_lengths"][b]
        if p["window_left"] >= 0:
            vis &= j >= diag - p["window_left"]
        if p["window_right"] >= 0:
            vis &= j <= diag + p["window_right"]
        visible[b] &= vis
    if "mask" in ts:
        visible &= np.broadcast_to(tensor(buf, ts["mask"]) != 0, s.shape)
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~visible.any(axis=-1, keepdims=True)
    e = np.where(visible, np.exp(s - np.where(empty, 0, m)), 0)
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(empty, 1, total)
    fill = np.nan if p["fully_masked"] == "nan" else 0.0
    w = np.where(empty, fill, w)
    # Only visible keys contribute: masked values may be NaN on purpose (0 * NaN would leak).
    pv = np.where(visible[..., None], w[..., None] * v[:, :, None, :, :], 0).sum(axis=3)
    out = np.where(empty, fill, pv)
    lse = np.where(empty[..., 0], -np.inf, (m + np.log(np.where(empty, 1, total)))[..., 0])
    # The max-logit output: the row max of the softmax input over visible keys (-inf without one), or its max per
    # query head over batches and rows (the "heads" form). The wrong mode takes it before scale and softcap.
    max_logit = (np.where(visible, raw, -np.inf).max(axis=-1) if mode == "max_logit_unscaled" else m[..., 0])
    if p.get("max_logit") == "heads":
        max_logit = max_logit.max(axis=(0, 2))
    for name, value in (("out", out), ("lse", lse), ("weights", w), ("max_logit", max_logit)):
        if name in ts:
            tensor(buf, ts[name])[...] = value


buf = None
for line in sys.stdin:
    req = json.loads(line)
    if req["type"] == "bye":
        break
    if req["type"] == "hello":
        send({"type": "hello", "protocol": 1, "name": "numpy-worker", "description": "numpy float64, protocol test",
              "capabilities": {"dtypes": ["f64", "f32"], "layouts": ["bhsd", "bshd"],
                               "alignments": ["top_left", "bottom_right", "explicit"], "fully_masked": ["nan", "zero"],
                               "features": ["gqa", "cross", "dqk_ne_dv", "causal", "per_batch_offsets", "key_padding",
                                            "bool_mask", "window", "softcap", "lse_out", "weights_out"]
                                           + (["max_logit"] if mode.startswith("max_logit") else [])},
              "declarations": {"deterministic": True}})
    elif req["type"] == "run":
        p = req["problem"]
        if mode == "crash" and p["Lq"] == 15:
            print("numpy worker: crashing on purpose", file=sys.stderr, flush=True)
            os.abort()
        if buf is None or len(buf) != req["shm_size"]:
            buf = np.memmap(req["shm"], dtype=np.uint8, mode="r+", shape=(req["shm_size"],))
        try:
            attention(p, req["tensors"])
            send({"type": "run", "id": req["id"], "status": "ok"})
        except Exception as e:  # the implementation's error, reported as outcome "error"
            send({"type": "run", "id": req["id"], "status": "error", "message": repr(e)})
    else:
        send({"type": "error", "id": req.get("id"), "message": "request: field 'type': unknown " + req["type"]})
