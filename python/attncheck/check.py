# check(fn, ...): the property suite of the C++ engine (harness/property: generated problems, shrinking, shrunk
# failures saved as fixtures) run against a Python callable in this process. `attncheck property` drives a relay
# worker (_relay.py) whose protocol traffic this process serves over a Unix socket, so fn runs here, with its
# closures, imports and devices. Raises AssertionError naming the minimal failing problem. check_gradients does the
# same for a backward pass over the gradient fixtures (`attncheck verify --pass backward`).
import re
import os
import select
import socket
import subprocess
import sys
import tempfile

from . import _cli
from .cases import default_dir
from .worker import serve_streams


def check(fn, cases=40, seed=20261122, features=None, dtypes=None, properties=None, regressions=None,
          timeout=None, invariance=False, **declarations):
    """Runs every property (or `properties`) on `cases` generated problems each against fn.

    fn is called like worker.serve's fn. features/dtypes restrict what is generated (protocol names: "causal",
    "gqa", "bool_mask", ..., "f32", "f16", ...); other declarations (policy, name, ...) as in worker.hello().
    The shrunk failure is written under `regressions` (default $ATTNCHECK_REGRESSIONS, which the pytest plugin
    sets, else ./attncheck-regressions) and named in the error.
    invariance=True checks rerun, batch and layout invariance whatever fn declares (deterministic,
    batch_invariant, layout_invariant and schedule_knobs are checked when declared anyway; docs/invariance.md).
    Returns the CLI's summary text when every property holds.
    """
    if features is not None:
        declarations["features"] = list(features)
    if dtypes is not None:
        declarations["dtypes"] = list(dtypes)
    declarations.setdefault("name", getattr(fn, "__name__", "python-kernel").replace("_", "-"))
    regressions = os.path.abspath(regressions or os.environ.get("ATTNCHECK_REGRESSIONS") or "attncheck-regressions")
    args = ["property", "--cases", str(cases), "--seed", str(seed), "--regressions", regressions,
            "--impl", declarations["name"]]
    for p in properties or []:
        args += ["--property", p]
    if timeout:
        args += ["--timeout", str(timeout)]
    if invariance:
        args += ["--invariance"]
    returncode, out, err = drive(args, fn, declarations)
    if returncode == 2:
        raise ValueError(f"attncheck property: {err.strip() or out.strip()}")
    if returncode != 0:
        lines = [ln for ln in out.splitlines() if ln.startswith(("FAIL", "            shrunk", "UNAVAILABLE",
                                                                   "NOTHING", "UNSUPPORTED", "properties:"))]
        raise AssertionError(f"{declarations['name']}: property suite failed (seed {seed})\n" + "\n".join(lines)
                             + (f"\nattncheck stderr:\n{err[-2000:]}" if err.strip() else ""))
    return out


def check_gradients(fn, backward, fixtures=None, pattern=None, timeout=None, **declarations):
    """Judges backward's gradients (worker.serve's backward) on every gradient fixture under `fixtures` (default:
    the golden ones, default_dir("backward")) whose name matches `pattern` (verify's --filter), after fn's forward.

    declarations as in check() (features, dtypes, policy, name, ...): a fixture outside them is unsupported.
    Raises AssertionError naming each failing case, and when no fixture was judged at all (nothing may pass by
    accident); ValueError for bad input. Returns the CLI's summary text.
    """
    declarations.setdefault("name", getattr(fn, "__name__", "python-kernel").replace("_", "-"))
    fixtures = os.path.abspath(os.fspath(fixtures) if fixtures is not None else default_dir("backward"))
    args = ["verify", "--pass", "backward", "--fixtures", fixtures, "--impl", declarations["name"]]
    if pattern:
        args += ["--filter", pattern]
    if timeout:
        args += ["--timeout", str(timeout)]
    returncode, out, err = drive(args, fn, declarations, backward)
    counts = re.search(r"results: pass (\d+)  fail (\d+)  unsupported (\d+)  error (\d+)", out)
    if returncode == 2 or counts is None:
        raise ValueError(f"attncheck verify --pass backward: {err.strip() or out.strip()}")
    passed = int(counts.group(1))
    if returncode != 0 or passed == 0:
        table = out.split("failures and errors:")[0].splitlines()
        ok = ("PASS", "UNSUPPORTED", "UNAVAILABLE", "FINITE-REQUIRED", "STATUS")
        lines = [ln for ln in table if "/backward " in ln and not ln.startswith(ok)]  # fail, error, crashed, ...
        why = "gradients fail" if lines else "no gradient fixture was judged (all unsupported or filtered out)"
        lines.append(counts.group(0))
        raise AssertionError(f"{declarations['name']}: {why}\n" + "\n".join(lines)
                             + (f"\nattncheck stderr:\n{err[-2000:]}" if err.strip() else ""))
    return out


def drive(args, fn, declarations, backward=None, module=None, module_backward=None):
    """Runs `attncheck ARGS --worker RELAY` and serves fn (and backward, module, module_backward) in this process to the worker that
    attncheck starts (again after a timeout or a bad output). Returns (exit status, stdout, stderr)."""
    with tempfile.TemporaryDirectory(prefix="attncheck-") as tmp:
        path = os.path.join(tmp, "sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(1)
        relay = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_relay.py")
        args = [_cli.exe()] + list(args) + ["--worker", f"{sys.executable} {relay} {path}"]
        log_out, log_err = open(os.path.join(tmp, "out"), "w+"), open(os.path.join(tmp, "err"), "w+")
        proc = subprocess.Popen(args, stdout=log_out, stderr=log_err, text=True)  # files: no pipe can fill up
        try:
            while proc.poll() is None:
                ready, _, _ = select.select([server], [], [], 0.2)
                if not ready:
                    continue
                conn, _ = server.accept()
                with conn, conn.makefile("r") as rfile, conn.makefile("w") as wfile:
                    try:
                        serve_streams(fn, declarations, rfile, wfile, backward=backward, module=module,
                                      module_backward=module_backward)
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # attncheck ended this worker (timeout, bad output); it restarts the relay
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            server.close()
            log_out.seek(0), log_err.seek(0)
            out, err = log_out.read(), log_err.read()
            log_out.close(), log_err.close()
    return proc.returncode, out, err
