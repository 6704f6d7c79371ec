# Finding and running the attncheck executable the package drives (reference, compare, property, import).
# ATTNCHECK_EXE wins; else the build tree next to this package (the README's build), else `attncheck` on PATH.
import os
import shutil
import subprocess


def exe():
    env = os.environ.get("ATTNCHECK_EXE")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "..", "build", "tools", "attncheck")
    if os.path.exists(built):
        return os.path.normpath(built)
    found = shutil.which("attncheck")
    if found:
        return found
    raise RuntimeError("attncheck executable not found: build it (README) or set ATTNCHECK_EXE")


def run(args, check_usage=True):
    """Runs attncheck ARGS; exit 2 (bad input) raises ValueError with its message."""
    r = subprocess.run([exe()] + list(args), capture_output=True, text=True)
    if check_usage and r.returncode == 2:
        raise ValueError((r.stderr or r.stdout).strip().replace("attncheck: error: ", ""))
    return r
