# The long-lived `attncheck serve` process the package runs its commands through: each reply equals what a fresh
# process gives (exit code, stdout, stderr), a request's directory and environment are its own, options never
# carry from one request to the next, and a malformed request is an error, never a hang.
import json
import os
import subprocess

import pytest

from attncheck import _cli

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "golden", "cases")
CASE = sorted(f for f in os.listdir(GOLDEN) if f.startswith("fp32_") and f.endswith(".h5"))[0]


def direct(args):
    return subprocess.run([_cli.exe()] + args, capture_output=True, text=True)


def served(args):
    r = _cli._server.run(_cli.exe(), args)
    assert r is not None, "the server did not answer"
    return r


@pytest.mark.parametrize("args", [
    ["list"],
    ["--no-such-flag"],                                           # a usage error: exit 2
    ["inspect", os.path.join(GOLDEN, CASE)],
    ["verify", "--impl", "cpu", "--fixtures", GOLDEN, "--filter", "fp32/*causal*"],
    ["verify", "--impl", "nope", "--fixtures", GOLDEN],          # exit 2, the reason on stderr
    ["verify", "--impl", "cpu", "--fixtures", GOLDEN, "--filter", "fp32/*causal*", "--tol-scale", "1e-9"],  # exit 1
])
def test_reply_is_what_a_fresh_process_gives(args):
    d, s = direct(args), served(args)
    assert (s.returncode, s.stdout, s.stderr) == (d.returncode, d.stdout, d.stderr)


def test_options_do_not_carry_between_requests():
    args = ["verify", "--impl", "cpu", "--fixtures", GOLDEN, "--filter", "fp32/*causal*"]
    assert served(args + ["--tol-scale", "1e-9"]).returncode == 1
    again = served(args)
    assert again.returncode == 0, again.stdout + again.stderr


def test_directory_and_environment_are_the_requests(tmp_path, monkeypatch):
    monkeypatch.chdir(GOLDEN)
    assert _cli.run(["inspect", CASE]).returncode == 0  # a relative path, found from this process's directory
    monkeypatch.setenv("ATTNCHECK_THREADS", "many")
    with pytest.raises(ValueError, match="ATTNCHECK_THREADS"):
        _cli.run(["verify", "--impl", "cpu", "--fixtures", ".", "--filter", "fp32/*causal*"])
    monkeypatch.delenv("ATTNCHECK_THREADS")
    assert _cli.run(["verify", "--impl", "cpu", "--fixtures", ".", "--filter", "fp32/*causal*"]).returncode == 0


def test_malformed_requests_are_errors():
    p = subprocess.run([_cli.exe(), "serve"], input='{"argv": "verify"}\nnot json\n{"argv": ["list"]}\n',
                       capture_output=True, text=True, timeout=60)
    replies = [json.loads(line) for line in p.stdout.splitlines()]
    assert p.returncode == 0 and len(replies) == 3
    assert replies[0]["rc"] == 2 and "argv" in replies[0]["stderr"]
    assert replies[1]["rc"] == 2 and "attncheck serve: error" in replies[1]["stderr"]
    assert replies[2]["rc"] == 0 and replies[2]["stdout"].strip()  # the server goes on after bad requests


def test_a_forked_python_process_gets_its_own_server():
    assert served(["list"]).returncode == 0
    pid = os.fork()
    if pid == 0:  # the child must not write into its parent's pipes
        code = 1
        try:
            code = 0 if _cli.run(["list"]).returncode == 0 and _cli._server.pid == os.getpid() else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert served(["list"]).returncode == 0  # the parent's server still answers
