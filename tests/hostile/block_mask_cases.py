"""Candidate block masks for the block-mask CLI tests (tests/hostile/CMakeLists.txt): each a copy of the exact block mask
that `attncheck block-mask --write` wrote for the fixture with one change. Usage: block_mask_cases.py EXACT.npz OUTDIR.
The fixture's grid at 16 x 32 (b=0, h=0) is "..PPP.. / ....P.. / ....PP. / ....PP. / ....PPP": row 0 lists
partial key blocks 2, 3, 4; row 4 lists the tail block 6 (keys 192..199 of Lk = 200)."""
import os
import sys

import numpy as np

exact = dict(np.load(sys.argv[1]))
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
assert list(exact["kv_indices"][0, 0, 0, :3]) == [2, 3, 4] and exact["kv_num_blocks"][0, 0, 0] == 3
assert 6 in list(exact["kv_indices"][0, 0, 4, : exact["kv_num_blocks"][0, 0, 4]])


def write(name, change):
    m = {k: v.copy() for k, v in exact.items()}
    change(m)
    np.savez(os.path.join(out, name + ".npz"), **m)


def to_full(m, b, h, q, block):
    """Moves `block` from row (b, h, q)'s partial list to its full list."""
    n = m["kv_num_blocks"][b, h, q]
    listed = [x for x in m["kv_indices"][b, h, q, :n] if x != block]
    m["kv_num_blocks"][b, h, q] = len(listed)
    m["kv_indices"][b, h, q, : len(listed)] = listed
    f = m["full_kv_num_blocks"][b, h, q]
    m["full_kv_indices"][b, h, q, f] = block
    m["full_kv_num_blocks"][b, h, q] = f + 1


# Verdicts: failures (exit 1) and a note (exit 0).
write("partial_as_full", lambda m: to_full(m, 0, 0, 0, 3))
write("missing", lambda m: m["kv_num_blocks"].__setitem__((0, 0, 0), 2))  # block 4 of row 0 dropped
write("tail_as_full", lambda m: to_full(m, 0, 0, 4, 6))
write("empty_listed", lambda m: (m["kv_indices"].__setitem__((0, 0, 1, 1), 0), m["kv_num_blocks"].__setitem__((0, 0, 1), 2)))
# Inconsistent block masks: input errors (exit 2).
write("count_beyond", lambda m: m["kv_num_blocks"].__setitem__((0, 0, 0), 8))
write("index_range", lambda m: m["kv_indices"].__setitem__((0, 0, 0, 0), 7))
write("duplicate", lambda m: m["kv_indices"].__setitem__((0, 0, 0, 1), 2))
write("both", lambda m: (m["full_kv_indices"].__setitem__((0, 0, 0, 0), 2), m["full_kv_num_blocks"].__setitem__((0, 0, 0), 1)))
write("float_indices", lambda m: m.__setitem__("kv_indices", m["kv_indices"].astype(np.float32)))
write("no_indices", lambda m: m.pop("kv_indices"))
