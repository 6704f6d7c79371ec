# attncheck.check() with the invariance group: the shuffled kernel (a new key order on every call) declares nothing
# here, so only check(..., invariance=True) runs the rerun property on it, and it must fail with the tag.
# Usage: python3 check_invariance.py ATTNCHECK_EXE
import os
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
os.environ["ATTNCHECK_EXE"] = sys.argv[1]
from shuffled_worker import shuffled_sdpa  # noqa: E402  (it puts python/ on the path)
import attncheck  # noqa: E402

decl = dict(policy="zero", dtypes=["f32"], features=["gqa", "cross", "causal", "key_padding", "lse_out"])
try:
    attncheck.check(shuffled_sdpa, cases=10, properties=["rerun"], invariance=True, regressions=tempfile.mkdtemp(),
                    **decl)
except AssertionError as e:
    assert "nondeterministic" in str(e), e
    print("caught:", str(e).splitlines()[1][:200])
else:
    raise SystemExit("check(invariance=True) passed a kernel that sums in a random order")
