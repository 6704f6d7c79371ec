# attncheck.check_module_function on a plain numpy module function (module_worker.module, and its backward), in this
# process: correct, it passes the fp32 module fixtures forward and backward; with scores scaled by 1/sqrt(d_model)
# it raises AssertionError naming the failing cases with the diagnosis scale-d-model.
import functools
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import module_worker  # noqa: E402  (puts the repository's python/ on the path)
import attncheck  # noqa: E402

out = attncheck.check_module_function(module_worker.module, pattern="fp32/*", name="numpy-module",
                                      backward=module_worker.module_backward)
assert "results: pass 34  fail 0" in out, out  # 17 fixtures, forward and backward
try:
    attncheck.check_module_function(functools.partial(module_worker.module, mode="scale-d-model"), pattern="fp32/*",
                                    name="numpy-module-scale")
except AssertionError as e:
    text = str(e)
    assert "diagnosis: scale-d-model" in text and "fail 14" in text, text
else:
    raise SystemExit("check_module_function passed a module that scales by d_model")
print("check_module_function: correct passes forward and backward, scale-d-model fails with its tag")
