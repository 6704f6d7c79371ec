# golden_cases(pattern): a pytest parametrisation over golden fixtures whose test ids are the case names
# (fixture attribute `name`, e.g. fp16/B2-Hq4-Hkv2-Lq13-Lk17-D16/causal-tl/normal), matched with fnmatch.
import fnmatch
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def default_dir(kind="cases"):
    """The golden cases (kind "cases"), gradient fixtures ("backward") or module fixtures ("modules") installed in the
    package (`pip install .`), else those of the source tree."""
    installed = os.path.join(_HERE, "golden" if kind == "cases" else "golden_" + kind)
    return installed if os.path.isdir(installed) else os.path.normpath(os.path.join(_HERE, "..", "..", "golden",
                                                                                   kind))


class Case:
    """One golden fixture: .name, .path (also os.fspath(case)), .load() (attncheck.load's dict)."""

    def __init__(self, name, path):
        self.name, self.path = name, path

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"Case({self.name!r})"

    def load(self):
        from .fixture import load
        return load(self.path)


def find(pattern="*", fixtures=None):
    """The cases under `fixtures` (default: default_dir()) whose name matches pattern, sorted by name."""
    import h5py
    root = os.fspath(fixtures) if fixtures is not None else default_dir()
    found = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".h5"):
                path = os.path.join(dirpath, f)
                with h5py.File(path, "r") as h:
                    if h.attrs.get("kind") in (b"module", "module"):
                        continue  # a module fixture (docs/module.md): not an attention case
                    if h.attrs.get("kind") in ("merge", b"merge"):  # attention states (docs/states.md), not a case
                        continue
                    name = h.attrs.get("name", f[:-3])
                name = name.decode() if isinstance(name, bytes) else str(name)
                if fnmatch.fnmatchcase(name, pattern):
                    found.append(Case(name, path))
    return sorted(found, key=lambda c: c.name)


def golden_cases(pattern="*", fixtures=None, argname="case"):
    """@attncheck.golden_cases("fp16/*causal*"): pytest.mark.parametrize over the matching cases (Case objects),
    ids = case names. No match is an error naming the pattern and the directory, never an empty, passing test."""
    import pytest
    cases = find(pattern, fixtures)
    if not cases:
        raise ValueError(f"golden_cases: no case named like {pattern!r} under {fixtures or default_dir()}")
    return pytest.mark.parametrize(argname, cases, ids=[c.name for c in cases])
