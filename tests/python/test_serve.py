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


def test_a_command_that_cannot_answer_is_answered_by_the_server():
    # A child writes its own reply; when it ends without one (it could not enter the directory, or a signal ended
    # it), the server answers with what the command wrote, and the next request is answered as usual.
    lines = [{"argv": ["list"], "cwd": "/nonexistent-attncheck-dir"}]
    crash = os.environ.get("ATTNCHECK_CRASH_PLUGIN")
    if crash:  # crashes on the cases with Lq 15 or 17, loaded into the command's own process
        lines.append({"argv": ["verify", "--plugin", crash, "--in-process", "--impl", "hostile-crash",
                               "--fixtures", GOLDEN, "--filter", "fp32/B1-Hq1-Hkv1-Lq1[57]-*"]})
    lines.append({"argv": ["list"]})
    p = subprocess.run([_cli.exe(), "serve"], input="".join(json.dumps(r) + "\n" for r in lines),
                       capture_output=True, text=True, timeout=60)
    replies = [json.loads(line) for line in p.stdout.splitlines()]
    assert p.returncode == 0 and len(replies) == len(lines), p.stdout
    assert replies[0]["rc"] == 2 and "cwd: cannot enter '/nonexistent-attncheck-dir'" in replies[0]["stderr"]
    if crash:
        assert replies[1]["rc"] == 128 + 11, replies[1]
        assert "ended by signal 11" in replies[1]["stderr"]
    assert replies[-1]["rc"] == 0 and replies[-1]["stdout"] == direct(["list"]).stdout


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


def _npz(**arrays):
    import io
    import numpy as np
    b = io.BytesIO()
    np.savez(b, **arrays)
    return b.getvalue()


def _small_case(wrong=0.0):
    """q, k, v and a candidate out computed here in float64 (causal, top-left), wrong by `wrong` at one element."""
    import numpy as np
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 2, 6, 8)).astype(np.float32) for _ in range(3))
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(8)
    s = np.where(np.tril(np.ones((6, 6), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    out = np.einsum("bhij,bhjd->bhid", w / w.sum(-1, keepdims=True), v.astype(np.float64)).astype(np.float32)
    out[0, 1, 4, 3] += wrong
    return {"q": q, "k": k, "v": v, "out": out}


def test_stdin_payload_reaches_its_command_and_only_it():
    # Requests written at once: the server reads ahead of the first, and no child may read the next request's
    # bytes as its own stdin. A request without a payload reads an empty stdin.
    good, bad = _npz(**_small_case()), _npz(**_small_case(wrong=1e-2))
    def req(payload=None, argv=("import", "-", "--judge", "--causal", "top_left")):
        r = {"argv": list(argv)}
        if payload is not None:
            r["stdin_bytes"] = len(payload)
        return json.dumps(r).encode() + b"\n" + (payload or b"")
    stream = req(good) + req(bad) + req() + req(good)
    p = subprocess.run([_cli.exe(), "serve"], input=stream, capture_output=True, timeout=60)
    replies = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert [r["rc"] for r in replies] == [0, 1, 2, 0], replies
    assert "zip" in replies[2]["stderr"]


def test_a_payload_cut_short_ends_the_server():
    p = subprocess.run([_cli.exe(), "serve"], input=b'{"argv": ["import", "-"], "stdin_bytes": 100}\nabc',
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b""


@pytest.mark.parametrize("wrong", [0.0, 1e-3])
@pytest.mark.parametrize("serve", ["1", "0"])
def test_judging_in_one_request_agrees_with_import_then_compare(tmp_path, monkeypatch, wrong, serve):
    monkeypatch.setenv("ATTNCHECK_SERVE", serve)
    import numpy as np
    arrays = _small_case(wrong)
    flags = ["--causal", "top_left", "--want-lse"]
    one = _cli.run(["import", "-", "--judge", "--report", str(tmp_path / "one.json")] + flags, stdin=_npz(**arrays))
    np.savez(tmp_path / "in.npz", **{n: arrays[n] for n in "qkv"})
    np.savez(tmp_path / "cand.npz", out=arrays["out"])
    assert _cli.run(["import", str(tmp_path / "in.npz"), "--out", str(tmp_path / "case.h5")] + flags).returncode == 0
    two = _cli.run(["compare", "--expected", str(tmp_path / "case.h5"), "--actual", str(tmp_path / "cand.npz"),
                    "--report", str(tmp_path / "two.json")])
    assert one.returncode == two.returncode == (1 if wrong else 0), one.stdout + one.stderr
    a, b = (json.load(open(tmp_path / f))["cases"][0] for f in ("one.json", "two.json"))
    for key in ("status", "max_abs_err", "worst_index", "tolerance", "expected", "actual", "tensors"):
        assert a.get(key) == b.get(key), key


def test_judge_flags_are_checked():
    payload = _npz(**_small_case())
    with pytest.raises(ValueError, match="--out: needed"):
        _cli.run(["import", "-"], stdin=payload)
    with pytest.raises(ValueError, match="--report: only with --judge"):
        _cli.run(["import", "-", "--out", "x.h5", "--report", "r.json"], stdin=payload)
    arrays = _small_case()
    del arrays["out"]
    with pytest.raises(ValueError, match="no member 'out'"):
        _cli.run(["import", "-", "--judge"], stdin=_npz(**arrays))
