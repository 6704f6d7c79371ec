# The pytest plugin, run by pytester in inner pytest sessions: golden_cases parametrises with the case names as ids
# (the expected set is derived from the file names, not from the plugin's matching), a pattern without a match is a
# collection error, and attncheck.check writes shrunk failures to --attncheck-regressions, else to the ini value,
# else to ./attncheck-regressions in the directory pytest started in.
import os

import pytest

pytest_plugins = ["pytester"]
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "golden", "cases")

PARAMETRISED = """
import attncheck

@attncheck.golden_cases("fp16/*causal*")
def test_case(case):
    assert case.load()["attrs"]["dtype"] == "fp16"
"""

FAILING_KERNEL = """
import attncheck
import pytest
from numpy_sdpa import sdpa

def off_by_one(q, k, v, *, problem, mask=None, bias=None, keep=None):
    if problem["causal"]:
        problem = dict(problem, diagonal_offset=[d - 1 for d in problem["diagonal_offset"]])
    return sdpa(q, k, v, problem=problem, mask=mask)

def test_caught():
    with pytest.raises(AssertionError):
        attncheck.check(off_by_one, cases=10, features=["causal"], dtypes=["f32"], properties=["agreement"])

def test_fixture(attncheck_regressions):
    assert attncheck_regressions.endswith("{expect}")
"""


def test_ids_are_case_names(pytester):
    pytester.makepyfile(test_golden=PARAMETRISED)
    r = pytester.runpytest_subprocess("-p", "attncheck.pytest_plugin", "-q")
    # fp16 cases whose file name says causal; the file name is the case name with '/' written as '_'.
    stems = sorted(f[:-3] for f in os.listdir(GOLDEN) if f.startswith("fp16_") and "causal" in f)
    assert len(stems) > 3
    r.assert_outcomes(passed=len(stems))
    listed = pytester.runpytest_subprocess("-p", "attncheck.pytest_plugin", "--collect-only", "-q").outlines
    ids = sorted(line.split("[", 1)[1][:-1].replace("/", "_") for line in listed if "::test_case[" in line)
    assert ids == stems


def test_no_match_is_an_error(pytester):
    pytester.makepyfile("import attncheck\n@attncheck.golden_cases('fp17/*')\ndef test_x(case):\n    pass\n")
    r = pytester.runpytest_subprocess("-p", "attncheck.pytest_plugin", "-q")
    r.assert_outcomes(errors=1)
    assert any("no case named like 'fp17/*'" in line for line in r.outlines)


@pytest.mark.parametrize("how", ["option", "ini", "default"])
def test_regressions_directory(pytester, how):
    expect = {"option": "from-option", "ini": "from-ini", "default": "attncheck-regressions"}[how]
    pytester.makepyfile(test_kernel=FAILING_KERNEL.replace("{expect}", expect))
    args = ["-p", "attncheck.pytest_plugin", "-q"]
    if how == "option":
        args.append("--attncheck-regressions=from-option")
    if how == "ini":
        pytester.makeini("[pytest]\nattncheck_regressions = from-ini\n")
    os.environ.pop("ATTNCHECK_REGRESSIONS", None)
    r = pytester.runpytest_subprocess(*args)
    r.assert_outcomes(passed=2)
    saved = os.listdir(pytester.path / expect)
    assert any(f.endswith(".h5") for f in saved), saved


def test_under_xdist(pytester):
    """Two xdist workers: the parametrised cases all run once, and a failing check in a worker writes its shrunk
    case to the directory of the controlling session (each worker has its own attncheck process)."""
    pytest.importorskip("xdist")
    pytester.makepyfile(test_golden=PARAMETRISED, test_kernel=FAILING_KERNEL.replace("{expect}", "from-option"))
    os.environ.pop("ATTNCHECK_REGRESSIONS", None)
    r = pytester.runpytest_subprocess("-p", "attncheck.pytest_plugin", "-p", "xdist", "-n", "2", "-q",
                                      "--attncheck-regressions=from-option")
    stems = [f for f in os.listdir(GOLDEN) if f.startswith("fp16_") and "causal" in f]
    r.assert_outcomes(passed=len(stems) + 2)
    assert "bringing up nodes..." in r.outlines, r.outlines  # xdist's, so the run really was distributed
    assert any(f.endswith(".h5") for f in os.listdir(pytester.path / "from-option"))
