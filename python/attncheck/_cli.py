# Finding and running the attncheck executable the package drives (reference, compare, property, import).
# The executable installed inside this package (`pip install .`) wins; else ATTNCHECK_EXE; else the build tree next
# to this package (the README's build); else `attncheck` on PATH.
import atexit
import json
import os
import shutil
import subprocess
import sys
import threading

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


class _Server:
    """One `attncheck serve` process per Python process (docs/python.md#long-lived-process): each command runs in a
    child it forks, so a call costs a fork instead of an executable's start. Restarted after a fork of this process
    (the pipes belong to the parent) or when it died; ATTNCHECK_SERVE=0 turns it off."""

    def __init__(self):
        self.lock = threading.Lock()
        self.proc, self.pid, self.exe, self.env = None, None, None, None

    def _start(self, path):
        self.env = dict(os.environ)  # what the server, and so every child, starts with
        self.proc = subprocess.Popen([path, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=self.env)
        self.pid, self.exe = os.getpid(), path

    def run(self, path, args, stdin=None):
        with self.lock:
            if self.proc is None or self.pid != os.getpid() or self.exe != path or self.proc.poll() is not None:
                self._start(path)
            request = {"argv": [str(a) for a in args], "cwd": os.getcwd()}
            if os.environ != self.env:  # else the child has it already: most requests carry no environment
                request["env"] = _environment()
            if stdin:
                request["stdin_bytes"] = len(stdin)
            try:
                self.proc.stdin.write(json.dumps(request).encode("utf-8") + b"\n" + (stdin or b""))
                self.proc.stdin.flush()
                line = self.proc.stdout.readline().decode("utf-8", errors="replace")
            except (BrokenPipeError, OSError):
                line = ""
            if not line:  # the server died: this call runs on its own, the next one starts a new server
                self.proc = None
                return None
            reply = json.loads(line)
            return subprocess.CompletedProcess([path] + list(args), reply["rc"], reply["stdout"], reply["stderr"])

    def close(self):
        if self.proc is not None and self.pid == os.getpid():
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.proc = None


_server = _Server()


def _environment():
    """The environment a command gets, as the server's JSON can carry it (names or values that are not UTF-8,
    which a direct subprocess would pass through, are left out)."""
    def utf8(s):
        try:
            s.encode("utf-8")
            return True
        except UnicodeEncodeError:
            return False
    return {k: v for k, v in os.environ.items() if utf8(k) and utf8(v)}


def _use_server():
    return os.environ.get("ATTNCHECK_SERVE", "1") not in ("0", "", "false", "no")


def run(args, check_usage=True, stdin=None):
    """Runs attncheck ARGS (stdin: bytes the command reads, e.g. an .npz for `import -`); exit 2 (bad input) raises
    ValueError with its message."""
    path = exe()
    r = _server.run(path, args, stdin) if _use_server() else None
    if r is None:
        r = subprocess.run([path] + list(args), capture_output=True, input=stdin or b"")
        r.stdout = r.stdout.decode("utf-8", errors="replace")
        r.stderr = r.stderr.decode("utf-8", errors="replace")
    if check_usage and r.returncode == 2:
        raise ValueError((r.stderr or r.stdout).strip().replace("attncheck: error: ", ""))
    return r


def main():
    """`python -m attncheck ARGS` and the `attncheck` script: the executable itself, in this process."""
    path = exe()
    os.execv(path, [path] + sys.argv[1:])


atexit.register(_server.close)
