# Finding and running the attncheck executable the package drives (reference, compare, property, import).
# The executable installed inside this package (`pip install .`) wins; else ATTNCHECK_EXE; else the build tree next
# to this package (the README's build); else `attncheck` on PATH.
import os
import shutil
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def exe():
    own = os.path.join(_HERE, "attncheck")
    if os.path.isfile(own) and os.access(own, os.X_OK):
        return own
    env = os.environ.get("ATTNCHECK_EXE")
    if env:
        return env
    built = os.path.join(_HERE, "..", "..", "build", "tools", "attncheck")
    if os.path.exists(built):
        return os.path.normpath(built)
    found = shutil.which("attncheck")
    if found and not _is_console_script(found):
        return found
    raise RuntimeError("attncheck executable not found: `pip install .` at the repository root, build it (README) "
                       "or set ATTNCHECK_EXE")


def _is_console_script(path):
    """pip's `attncheck` wrapper runs main() below: finding it on PATH would exec itself forever."""
    with open(path, "rb") as f:
        return f.read(2) == b"#!" and b"attncheck._cli" in f.read(4096)


def run(args, check_usage=True):
    """Runs attncheck ARGS; exit 2 (bad input) raises ValueError with its message."""
    r = subprocess.run([exe()] + list(args), capture_output=True, text=True)
    if check_usage and r.returncode == 2:
        raise ValueError((r.stderr or r.stdout).strip().replace("attncheck: error: ", ""))
    return r


def main():
    """`python -m attncheck ARGS` and the `attncheck` script: the executable itself, in this process."""
    path = exe()
    os.execv(path, [path] + sys.argv[1:])
