#!/usr/bin/python3
"""Single bit flips in the stored values of golden fixtures are always reported. For a sample of fixtures (one per
dtype of golden/cases, one of golden/backward), every dataset of /inputs and /expected, and a bit of every class of
its element type (sign, exponent, high and low mantissa bit; for integer codes: top and bottom bit) at a few element
positions, flip that bit in the file's bytes (not through HDF5) and run `attncheck verify` over all the damaged
copies at once, plus `inspect` on one copy per fixture: every copy must be an input error (exit 2) naming the file,
the dataset and the checksum; none may be judged. Fixtures must carry Fletcher32 checksums (golden/SCHEMA.md).
Usage: bit_flips.py ATTNCHECK GOLDEN_DIR WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

REGENERATE = ("regenerate the golden fixtures with checksums: build/tools/attncheck generate --spec "
              "golden/suite.json --out golden --update (golden/suite-backward.json for golden/backward; "
              "--filter GLOB for one case)")


def bit_classes(dset):
    """(class name, bit index within the element) for the dataset's element type."""
    dt, size = dset.dtype, dset.dtype.itemsize
    enc = dset.attrs.get("encoding", b"")
    enc = enc.decode() if isinstance(enc, bytes) else str(enc)
    if dt.kind == "f":  # sign, lowest exponent bit, highest and lowest mantissa bit
        mant = {2: 10, 4: 23, 8: 52}[size]
        return [("sign", 8 * size - 1), ("exponent", mant), ("mantissa-high", mant - 1), ("mantissa-low", 0)]
    if enc == "bfloat16":
        return [("sign", 15), ("exponent", 7), ("mantissa-high", 6), ("mantissa-low", 0)]
    if enc in ("float8_e4m3fn", "float8_e5m2"):
        mant = 3 if enc == "float8_e4m3fn" else 2
        return [("sign", 7), ("exponent", mant), ("mantissa-high", mant - 1), ("mantissa-low", 0)]
    return [("high", 8 * size - 1), ("low", 0)]


def stored_extent(dset):
    """File offset of the dataset's first element and its stored byte count (one chunk, no compression)."""
    if dset.chunks is None:
        return dset.id.get_offset(), dset.id.get_storage_size()
    if dset.id.get_num_chunks() != 1 or dset.compression is not None:
        return None, 0
    info = dset.id.get_chunk_info(0)
    return info.byte_offset, dset.size * dset.dtype.itemsize


def sample(golden):
    cases = sorted(f for f in os.listdir(os.path.join(golden, "cases")) if f.endswith(".h5"))
    picked, seen = [], set()
    for f in cases:  # the first fixture of each dtype (names start with the dtype)
        dtype = f.split("_")[0]
        if dtype not in seen:
            seen.add(dtype)
            picked.append(os.path.join(golden, "cases", f))
    backward = sorted(f for f in os.listdir(os.path.join(golden, "backward")) if f.endswith(".h5"))
    return picked + [os.path.join(golden, "backward", backward[0])]


def main():
    exe, golden, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    damaged = os.path.join(work, "damaged")
    os.makedirs(damaged)
    failures, flips, first_copy = [], {}, {}

    def check(cond, what):
        if not cond:
            failures.append(what)

    for path in sample(golden):
        base = os.path.basename(path)[:-3]
        data = open(path, "rb").read()
        with h5py.File(path, "r") as h:
            names = [f"/{g}/{k}" for g in ("inputs", "expected") if g in h for k in h[g]
                     if isinstance(h[g][k], h5py.Dataset) and h[g][k].size > 0]
            for name in names:
                d = h[name]
                if d.fletcher32 is not True:
                    failures.append(f"{path}: {name} carries no Fletcher32 checksum; {REGENERATE}")
                    continue
                offset, nbytes = stored_extent(d)
                if offset is None:
                    failures.append(f"{path}: {name} is stored in several or compressed chunks; this test flips "
                                    "the bytes of one uncompressed chunk")
                    continue
                size, n = d.dtype.itemsize, d.size
                for cls, bit in bit_classes(d):
                    for elem in sorted({0, n // 2, n - 1}):
                        at = offset + elem * size + bit // 8
                        copy = bytearray(data)
                        copy[at] ^= 1 << (bit % 8)
                        out = os.path.join(damaged, f"{base}{name.replace('/', '~')}~{cls}~{elem}.h5")
                        open(out, "wb").write(copy)
                        flips[out] = name
                        first_copy.setdefault(path, out)
    report = os.path.join(work, "report.json")
    p = subprocess.run([exe, "verify", "--impl", "reference", "--pass", "both", "--fixtures", damaged, "--report",
                        report], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900)
    check(p.returncode == 2, f"verify: exit {p.returncode}, want 2\n{p.stderr.decode()[-800:]}")
    rows = {}
    if os.path.exists(report):
        for c in json.load(open(report))["cases"]:
            rows.setdefault(c["file"], []).append(c)
    for copy, name in sorted(flips.items()):
        got = rows.get(copy, [])
        ok = [c for c in got if c["status"] == "input-error" and c["message"].startswith(copy) and name in c["message"]
              and "checksum" in c["message"]]
        check(len(got) == 1 and ok, f"{os.path.basename(copy)}: want one input-error row naming the file, {name} and "
                                    f"the checksum, got {[(c['status'], c['message'][:200]) for c in got]}")
    for path, copy in sorted(first_copy.items()):
        p = subprocess.run([exe, "inspect", copy], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        err = p.stderr.decode()
        check(p.returncode == 2 and copy in err and flips[copy] in err and "checksum" in err,
              f"inspect {os.path.basename(copy)}: exit {p.returncode}, want 2 naming the file, {flips[copy]} and the "
              f"checksum: {err[-400:]}")
    for f in failures:
        print("FAILED:", f)
    print(f"bit flips: {len(flips)} single-bit flips in {len(first_copy)} fixtures, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
