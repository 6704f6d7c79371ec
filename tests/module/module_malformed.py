"""Malformed module fixtures through the CLI: a copy of a module fixture with d_model not divisible by the heads,
one whose wq does not chain with x, one whose dy or expected dWo has the wrong shape, are each refused by `verify`
with exit 2 and a message naming the field; the untouched copy passes on cpu; the Python package's case finder skips module fixtures. Usage: module_malformed.py ATTNCHECK MODULES_DIR WORKDIR"""
import glob
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

binary, modules, work = sys.argv[1:4]
src = sorted(f for f in glob.glob(os.path.join(modules, "*.h5")) if "separate" in f and "H2x2" in f and os.path.basename(f).startswith("fp32"))[0]
shutil.rmtree(work, ignore_errors=True)


def verify(name, edit):
    d = os.path.join(work, name)
    os.makedirs(d)
    dst = os.path.join(d, "case.h5")
    shutil.copy(src, dst)
    if edit:
        with h5py.File(dst, "r+") as f:
            edit(f)
    r = subprocess.run([binary, "verify", "--impl", "cpu", "--fixtures", d], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def odd_d_model(f):
    heads = int(f["attention"].attrs["Hq"])
    f.attrs["d_model"] = np.int64(heads * int(f["attention"].attrs["Dqk"]) + 1)


def wq_not_chaining(f):
    wq = f["inputs/wq"][()]
    del f["inputs/wq"]
    f["inputs/wq"] = wq[:, :-1]


def dy_wrong_shape(f):
    dy = f["inputs/dy"][()]
    del f["inputs/dy"]
    f["inputs/dy"] = dy[:, :, :-1]


def dwo_wrong_shape(f):
    g = f["expected/dwo"][()]
    del f["expected/dwo"]
    f["expected/dwo"] = g.T


failures = []
# The Python package's golden_cases lists attention cases only: module fixtures are not among them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import attncheck.cases  # noqa: E402
if attncheck.cases.find("*", modules):
    failures.append("attncheck.cases.find lists module fixtures as attention cases")
rc, out = verify("good", None)
if rc != 0 or "pass 1" not in out:
    failures.append("untouched copy: rc %d\n%s" % (rc, out))
for name, edit, field in [("d_model", odd_d_model, "d_model: is"), ("wq", wq_not_chaining, "wq: shape"),
                          ("dy", dy_wrong_shape, "/inputs/dy: shape"), ("dwo", dwo_wrong_shape, "/expected/dwo")]:
    rc, out = verify(name, edit)
    if rc != 2 or field not in out or "input-error" not in out.lower().replace("_", "-"):
        failures.append("%s: expected exit 2 naming %s, got rc %d\n%s" % (name, field, rc, out))
    else:
        line = [l for l in out.splitlines() if field in l][0]
        print("%s: exit 2: %s" % (name, line.strip()[:200]))
if failures:
    print("\n".join(failures))
    sys.exit(1)
