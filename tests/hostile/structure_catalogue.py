#!/usr/bin/python3
"""Structure-damaged fixtures: HDF5's own data structures (global heap and the variable-length references into it,
object headers, v1 and v2 B-trees, local and fractal heaps, symbol-table nodes) damaged field by field in copies of
a golden fixture written four ways, then each file run through inspect, compare, verify and import.

A crafted file of this kind crashes or hangs HDF5 1.10 inside the library (docs/hardening.md "Untrusted HDF5
files"); attncheck must answer every one with exit 0, 1 or 2 (exit 2 naming the file) within 10 s, never a signal
or a hang. Usage:
  structure_catalogue.py ATTNCHECK FIXTURE WORKDIR [--sample] [--only-write] [--signals] [ATTNCHECK OPTIONS...]
--sample keeps every 10th mutation of the global heap and its references and every 200th of the rest, plus the
ones that crashed or hung attncheck before its reads were isolated (ctest); without it, the whole catalogue (about
6500 files). ATTNCHECK_CATALOGUE_STRIDE=K runs each verb on every K-th file (every verb
on the known crashers). --only-write writes the catalogue without running it. --signals instead checks that SIGTERM and SIGINT
end a read stuck inside HDF5 within 2 s, with exit 143 / 130, nothing on stdout and no report. Further options go to
every attncheck verb.
"""
import concurrent.futures
import os
import signal
import shutil
import struct
import subprocess
import sys
import time

import h5py
import numpy as np

SIGNATURES = [b"GCOL", b"TREE", b"HEAP", b"SNOD", b"OHDR", b"OCHK", b"FRHP", b"FHDB", b"FHIB", b"BTHD", b"BTIN",
              b"BTLF", b"FSHD", b"FSSE", b"SMTB"]


def copy_attrs(src, dst, vlen):
    for k, v in src.attrs.items():
        if isinstance(v, bytes):
            dst.attrs[k] = v.decode() if vlen else np.bytes_(v)  # h5py stores str as variable length
        else:
            dst.attrs[k] = v


def write_base(src_path, out_path, how):
    """The fixture rewritten: 'vlen' (schema 1, every string attribute variable length: the global heap),
    'chunked' (every dataset chunked: v1 B-trees of chunks), 'latest' (the newest format: v2 object headers, dense
    attribute storage in a fractal heap indexed by a v2 B-tree, variable-length strings), 'vlen-data' (a
    variable-length float dataset beside the inputs)."""
    libver = "latest" if how == "latest" else "earliest"
    with h5py.File(src_path, "r") as src, h5py.File(out_path, "w", libver=libver) as dst:
        copy_attrs(src, dst, vlen=how in ("vlen", "latest", "vlen-data"))
        if how in ("vlen", "latest", "vlen-data"):
            dst.attrs["schema_version"] = np.int64(1)
        if how == "latest":
            for i in range(12):  # beyond 8 attributes: dense storage
                dst.attrs[f"note_{i:02d}"] = f"extra attribute {i}"

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                g = dst.require_group(name)
                copy_attrs(obj, g, vlen=how != "chunked")
                return
            data = obj[()]
            kw = {}
            if how == "chunked" and data.ndim:
                kw["chunks"] = tuple(max(1, s // 2) for s in data.shape)
            d = dst.create_dataset(name, data=data, **kw)
            copy_attrs(obj, d, vlen=how != "chunked")
        src.visititems(visit)
        if how == "vlen-data":
            dt = h5py.vlen_dtype(np.float32)
            d = dst.create_dataset("inputs/extra", (4,), dtype=dt)
            for i in range(4):
                d[i] = np.arange(i + 1, dtype=np.float32)


def put(buf, at, data):
    if at < 0 or at + len(data) > len(buf):
        return None
    b = bytearray(buf)
    b[at:at + len(data)] = data
    return bytes(b)


def mutations(base):
    """(name, bytes) for every damaged field of every structure found in `base`."""
    out = []
    u64, u32, u16 = (lambda x: struct.pack("<Q", x)), (lambda x: struct.pack("<I", x)), (lambda x: struct.pack("<H", x))
    for sig in SIGNATURES:
        at = base.find(sig)
        n = 0
        while at >= 0:
            tag = f"{sig.decode()}@{at}"
            # Every byte of the first 32 after the signature: all ones, zero, one more (versions, flags, counts,
            # sizes and the low bytes of addresses).
            for o in range(4, 36):
                for name, val in (("ff", b"\xff"), ("00", b"\x00"), ("inc", bytes([(base[at + o] + 1) % 256]) if at + o < len(base) else None)):
                    if val is None:
                        continue
                    m = put(base, at + o, val)
                    if m and m != base:
                        out.append((f"{tag}+{o}={name}", m))
            # 8-byte fields at every offset up to 48: an address or length pointing at itself (a cycle), beyond the
            # file, or huge.
            for o in range(4, 48, 4):
                for name, val in (("self", u64(at)), ("huge", u64(0xFFFFFFFFFFFFFFF0)), ("beyond", u64(len(base) + 4096))):
                    m = put(base, at + o, val)
                    if m and m != base:
                        out.append((f"{tag}+{o}:u64={name}", m))
            n += 1
            at = base.find(sig, at + 1)
    # Variable-length references into the global heap (length u32, collection address u64, object index u32): found
    # as the address of each GCOL collection wherever it is stored.
    gcol = base.find(b"GCOL")
    while gcol >= 0:
        addr = u64(gcol)
        ref = base.find(addr)
        k = 0
        while ref >= 0 and k < 6:
            tag = f"vlen-ref@{ref}"
            for name, at, val in (("len=max", ref - 4, u32(0xFFFFFFFF)), ("len=2^31", ref - 4, u32(0x7FFFFFFF)),
                                  ("len+1000", ref - 4, u32((struct.unpack_from("<I", base, ref - 4)[0] + 1000) & 0xFFFFFFFF)),
                                  ("index=0", ref + 8, u32(0)), ("index=ffff", ref + 8, u32(0xFFFF)),
                                  ("index=max", ref + 8, u32(0xFFFFFFFF)), ("addr+8", ref, u64(gcol + 8)),
                                  ("addr=0", ref, u64(0)), ("addr=huge", ref, u64(1 << 60))):
                m = put(base, at, val)
                if m and m != base:
                    out.append((f"{tag}:{name}", m))
            k += 1
            ref = base.find(addr, ref + 1)
        # Objects inside the collection: index u16, refcount u16, reserved u32, size u64, data (8-aligned).
        size = struct.unpack_from("<Q", base, gcol + 8)[0] if gcol + 16 <= len(base) else 0
        obj, end, j = gcol + 16, min(gcol + size, len(base)), 0
        while obj + 16 <= end and j < 4:
            osize = struct.unpack_from("<Q", base, obj + 8)[0]
            for name, at, val in (("obj-size=huge", obj + 8, u64(1 << 62)), ("obj-size+64", obj + 8, u64(osize + 64)),
                                  ("obj-index=0", obj, u16(0)), ("obj-index=max", obj, u16(0xFFFF))):
                m = put(base, at, val)
                if m and m != base:
                    out.append((f"GCOL@{gcol}:obj{j}:{name}", m))
            if osize == 0 or osize > size:
                break
            obj += 16 + ((osize + 7) // 8) * 8
            j += 1
        gcol = base.find(b"GCOL", gcol + 1)
    return out


# Mutations that crashed (SIGSEGV) or hung HDF5 1.10.8 inside `attncheck inspect` before reads were isolated.
KNOWN_BAD = {"latest/GCOL@2048+44:u64=huge", "latest/GCOL@2048:obj2:obj-size+64", "latest/GCOL@2048+24:u64=self",
             "vlen-data/GCOL@2048+8=ff", "vlen-data/vlen-ref@1284:len=max", "vlen-data/vlen-ref@1372:len=2^31",
             "vlen-data/vlen-ref@1644:index=max", "vlen/GCOL@2048+24:u64=huge", "vlen/vlen-ref@1372:len=max",
             "vlen/vlen-ref@1452:len=2^31"}


def keep(how, name, i, sample):
    if not sample:
        return True
    heap = name.startswith("GCOL") or name.startswith("vlen-ref")
    return f"{how}/{name}" in KNOWN_BAD or i % (10 if heap else 200) == 0


def build(fixture, work, sample):
    cat = os.path.join(work, "catalogue")
    shutil.rmtree(cat, ignore_errors=True)
    os.makedirs(cat)
    files = []
    for how in ("vlen", "chunked", "latest", "vlen-data"):
        base_path = os.path.join(work, f"base-{how}.h5")
        write_base(fixture, base_path, how)
        with open(base_path, "rb") as f:
            base = f.read()
        for i, (name, data) in enumerate(mutations(base)):
            if not keep(how, name, i, sample):
                continue
            safe = "".join(c if c.isalnum() or c in "+-=@." else "_" for c in name)
            d = os.path.join(cat, f"{how}_{safe}")  # one directory per file: verify reads a directory
            os.makedirs(d)
            p = os.path.join(d, "f.h5")
            with open(p, "wb") as f:
                f.write(data)
            files.append((f"{how}/{name}", p))
    return files


def candidate_for(fixture, path):
    with h5py.File(fixture, "r") as src, h5py.File(path, "w") as dst:
        g = dst.create_group("actual")
        g["out"] = src["expected/out"][()].astype(np.float32)
        g["lse"] = src["expected/lse"][()].astype(np.float32)


def run(cmd):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
        return p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        return "hang", (e.stdout or b"").decode(errors="replace")


# A file on which HDF5 1.10.8 loops (the length of a variable-length string reference set to 2^32 - 1).
HANGS = "vlen/vlen-ref@1372:len=max"


def signals(exe, files, work):
    hang = dict(files)[HANGS]
    report = os.path.join(work, "report.json")
    failures = 0
    for sig, want in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        for verb in (["inspect", hang], ["verify", "--impl", "reference", "--fixtures", os.path.dirname(hang),
                                         "--report", report]):
            p = subprocess.Popen([exe] + verb + ["--read-timeout", "60"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            time.sleep(1.0)  # well inside the read: the file is loaded and the reading process started
            sent = time.monotonic()
            p.send_signal(sig)
            try:
                out, err = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            took = time.monotonic() - sent
            # verify prints its table header before reading; nothing else may appear on stdout
            stdout_ok = out == b"" if verb[0] == "inspect" else b"PASS" not in out and b"FAIL" not in out
            ok = p.returncode == want and took < 2.0 and stdout_ok and not os.path.exists(report)
            failures += not ok
            print(f"signal {sig.name} during {verb[0]} of a hanging file: exit {p.returncode} after {took:.2f} s"
                  f"{'' if ok else '  <-- want exit ' + str(want) + ' within 2 s, no output, no report'}")
            if not ok:
                print(err.decode(errors="replace")[-600:])
    return 1 if failures else 0


def main():
    args = sys.argv[1:]
    sample, only_write, sigs = "--sample" in args, "--only-write" in args, "--signals" in args
    args = [a for a in args if a not in ("--sample", "--only-write", "--signals")]
    exe, fixture, work, extra = args[0], args[1], args[2], args[3:]
    os.makedirs(work, exist_ok=True)
    files = build(fixture, work, sample)
    if sigs:
        return signals(exe, files, work)
    missing = KNOWN_BAD - {n for n, _ in files} if sample else set()
    if missing:  # the format of h5py's output changed: the sample no longer holds the files it is meant to
        print("structure catalogue: known crashers not produced:", sorted(missing))
        return 1
    print(f"structure catalogue: {len(files)} files")
    if only_write:
        return 0
    cand = os.path.join(work, "candidate.h5")
    candidate_for(fixture, cand)
    # ATTNCHECK_CATALOGUE_STRIDE=K (the sanitizer run) runs the j-th verb of the i-th file only where (i + j) % K == 0,
    # every verb of the files that once crashed or hung attncheck.
    stride = int(os.environ.get("ATTNCHECK_CATALOGUE_STRIDE", "1"))
    if stride < 1:
        print(f"ATTNCHECK_CATALOGUE_STRIDE must be a positive number, got {stride}")
        return 1
    jobs = []
    for i, (name, p) in enumerate(files):
        out = os.path.join(os.path.dirname(p) + "-import", "imported.h5")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        verbs = (("inspect", [exe, "inspect", p]),
                 ("compare", [exe, "compare", "--expected", p, "--actual", cand]),
                 ("inspect --actual", [exe, "inspect", fixture, "--actual", p]),
                 ("verify", [exe, "verify", "--impl", "reference", "--fixtures", os.path.dirname(p)]),
                 ("import", [exe, "import", p, "--out", out, "--want-lse", "--want-weights"]))
        for j, (verb, cmd) in enumerate(verbs):
            if name in KNOWN_BAD or (i + j) % stride == 0:
                jobs.append((name, p, verb, cmd + extra))
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda j: run(j[3]), jobs))
    tally, bad = {}, []
    for (name, p, verb, _), (rc, text) in zip(jobs, results):
        kind = name.split("/")[0] + " " + verb
        outcome = "hang" if rc == "hang" else f"signal {-rc}" if rc < 0 else f"exit {rc}"
        tally.setdefault(kind, {}).setdefault(outcome, 0)
        tally[kind][outcome] += 1
        if rc not in (0, 1, 2) or (rc == 2 and p not in text):
            bad.append(f"{name} via {verb}: {outcome}\n{text[-600:]}")
    for kind in sorted(tally):
        print(f"structure {kind} | " + " ".join(f"{k}: {v}" for k, v in sorted(tally[kind].items())))
    for b in bad[:20]:
        print("NOT HANDLED:", b)
    print(f"{len(bad)} of {len(jobs)} runs crashed, hung or exited 2 without naming the file")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
