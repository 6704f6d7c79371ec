# The attncheck Python package's API: reference() against an independent numpy computation, compare() verdicts
# with the worst element, index and bound, load()/save() round trip, and the worker's protocol helpers.
import io
import json
import os
import re

import h5py
import numpy as np
import pytest

import attncheck
import numpy_sdpa as numpy_sdpa_example
from attncheck import worker

rng = np.random.default_rng(3)
q = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
k = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)
v = rng.standard_normal((1, 2, 6, 4)).astype(np.float32)


def numpy_sdpa(scale):
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * scale
    s = np.where(np.arange(6)[None, :] <= np.arange(5)[:, None] + 1, s, -np.inf)  # bottom-right: offset 6-5
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w, np.einsum("bhij,bhjd->bhid", w, v.astype(np.float64))


def test_reference_matches_numpy():
    r = attncheck.reference(q, k, v, causal="bottom_right", scale=0.2)
    w, out = numpy_sdpa(0.2)
    assert np.abs(r["out"] - out).max() < 1e-13 and np.abs(r["weights"] - w).max() < 1e-13


def test_reference_bad_mask_names_index():
    mask = np.ones((5, 6), dtype=np.int8)
    mask[2, 3] = -1
    with pytest.raises(ValueError, match=r"got -1 at index \[2,3\]"):
        attncheck.reference(q, k, v, mask=mask)


def test_compare_and_roundtrip(tmp_path):
    f = attncheck.make_fixture(tmp_path / "case.h5", q, k, v, causal="bottom_right", scale=0.2, want_lse=True)
    out = f["expected"]["out"].astype(np.float32)
    ok = attncheck.compare(f, out=out, lse=f["expected"]["lse"])
    assert ok.passed and ok.verdict == "pass" and "PASS" in str(ok)
    # fp64 expectations rounded once to fp32: within half an ulp everywhere, inside the bound
    a = ok.accuracy["out"]
    assert a["ulp_dtype"] == "fp32" and a["n"] == out.size and 0 <= a["share_of_bound"] < 1
    assert a["ulp_hist"]["0"] + a["ulp_hist"]["le_0.5"] == out.size and a["effective_bits"] > 23
    bad = out.copy()
    bad[0, 1, 3, 2] += 1e-3
    r = attncheck.compare(f, out=bad)
    assert not r and r.tensor == "out" and r.index == {"b": 0, "h": 1, "i": 3, "d": 2}
    assert abs(r.actual - r.expected - 1e-3) < 1e-6 and 0 < r.bound < 1e-3 and "FAIL" in str(r)
    attncheck.save(tmp_path / "copy.h5", f)  # load -> save -> load keeps every array and attribute
    g = attncheck.load(tmp_path / "copy.h5")
    assert all(np.array_equal(f[s][n], g[s][n]) for s in ("inputs", "expected") for n in f[s])
    with h5py.File(tmp_path / "copy.h5", "r") as h:  # checksummed like attncheck's own fixtures
        assert all(h[s][n].fletcher32 for s in ("inputs", "expected") for n in h[s] if h[s][n].size > 0)
    assert attncheck.compare(g, out=bad).index == r.index


def test_tolerance_is_the_bound_compare_applies(tmp_path):
    tol = attncheck.tolerance(q, k, v, causal="bottom_right", scale=0.2)
    f = attncheck.make_fixture(tmp_path / "case.h5", q, k, v, causal="bottom_right", scale=0.2)
    out = f["expected"]["out"].astype(np.float32)
    out[0, 0, 4, 1] += 0.1
    r = attncheck.compare(f, out=out)
    assert tol["out"].shape == out.shape and tol["lse"].shape == (1, 2, 5) and tol["weights"].shape == (1, 2, 5, 6)
    assert r.index == {"b": 0, "h": 0, "i": 4, "d": 1} and r.bound == tol["out"][0, 0, 4, 1] > 0


def test_worker_hello_and_protocol_errors():
    requests = io.StringIO(json.dumps({"type": "hello", "protocols": [1]}) + "\n" + "not json\n" +
                           json.dumps({"type": "frobnicate", "id": 3}) + "\n" + json.dumps({"type": "bye"}) + "\n")
    replies = io.StringIO()
    worker.serve_streams(lambda *a, **kw: None, {"name": "t", "features": ["causal"]}, requests, replies)
    hello, err1, err2 = (json.loads(x) for x in replies.getvalue().splitlines())
    assert hello["protocol"] == 1 and hello["name"] == "t" and hello["capabilities"]["features"] == ["causal"]
    assert err1["type"] == "error" and "field 'type'" in err1["message"]
    assert err2 == {"type": "error", "id": 3, "message": "request: field 'type': unknown 'frobnicate'"}


def test_worker_declares_modifications_only_when_asked():
    # A worker listing library entries or expressions is offered those cases (FlexAttention's worker does);
    # one that lists none is never sent a case that uses one.
    assert "modifications" not in worker.hello({"name": "t"})["capabilities"]
    caps = worker.hello({"name": "t", "modifications": ["alibi", "mask_expr"]})["capabilities"]
    assert caps["modifications"] == ["alibi", "mask_expr"]


def test_worker_supports_hook_refuses_with_its_reason():
    msg = lambda m: json.dumps(m) + "\n"  # noqa: E731
    requests = io.StringIO(msg({"type": "hello", "protocols": [1]}) +
                           msg({"type": "supports", "id": 1, "problem": {"Dqk": 64}}) +
                           msg({"type": "supports", "id": 2, "problem": {"Dqk": 320}}) +
                           msg({"type": "supports", "id": 3, "problem": {}}) + msg({"type": "bye"}))
    replies = io.StringIO()
    supports = lambda p: p["Dqk"] <= 256 or (False, f"Dqk={p['Dqk']} > 256")  # noqa: E731
    worker.serve_streams(lambda *a, **kw: None, {"name": "t"}, requests, replies, supports)
    hello, ok, refused, raised = (json.loads(x) for x in replies.getvalue().splitlines())
    assert hello["supports"] is True
    assert ok == {"type": "supports", "id": 1, "ok": True, "reason": ""}
    assert refused == {"type": "supports", "id": 2, "ok": False, "reason": "Dqk=320 > 256"}
    assert raised["ok"] is False and raised["reason"] == "supports raised KeyError: 'Dqk'"
    # Without the hook, hello asks for no supports requests.
    replies = io.StringIO()
    worker.serve_streams(lambda *a, **kw: None, {"name": "t"}, io.StringIO(msg({"type": "hello", "protocols": [1]})),
                         replies)
    assert json.loads(replies.getvalue())["supports"] is False


def test_bf16_bits_round_to_nearest_even():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5, np.inf, np.nan], dtype=np.float32)
    bits = worker.to_bf16_bits(x)
    assert list(bits[:5]) == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80] and np.isnan(worker.from_bf16_bits(bits)[5])


def test_hello_declares_batch_invariance():
    replies = io.StringIO()
    worker.serve_streams(lambda *a, **kw: None, {"name": "t", "batch_invariant": True},
                         io.StringIO(json.dumps({"type": "hello", "protocols": [1]}) + "\n"), replies)
    hello = json.loads(replies.getvalue().splitlines()[0])
    assert hello["declarations"]["batch_invariant"] is True and hello["declarations"]["deterministic"] is False


def test_worker_speaks_protocol_2_and_declares_backward_only_with_a_backward():
    msg = lambda m: json.dumps(m) + "\n"  # noqa: E731
    for backward, protocols, want in ((None, [1, 2], (2, False)), (lambda *a, **kw: {}, [1, 2], (2, True)),
                                      (lambda *a, **kw: {}, [1], (1, True))):
        replies = io.StringIO()
        worker.serve_streams(lambda *a, **kw: None, {"name": "t"}, io.StringIO(msg({"type": "hello",
                             "protocols": protocols})), replies, backward=backward)
        hello = json.loads(replies.getvalue())
        assert (hello["protocol"], hello["declarations"]["backward"]) == want


# The example's numpy backward (examples/python/numpy_sdpa.py) through check_gradients over the golden gradient
# fixtures: it passes what it declares; one with dQ halved fails; declaring nothing the
# fixtures have is an error, not a pass.
def half_dq(q, k, v, **kw):
    g = numpy_sdpa_example.sdpa_backward(q, k, v, **kw)
    return dict(g, dq=g["dq"] * 0.5)


def test_check_gradients_passes_the_example_and_fails_a_wrong_backward():
    ex = numpy_sdpa_example
    decl = dict(features=ex.FEATURES, dtypes=["f32", "f64"], policy="zero")
    text = attncheck.check_gradients(ex.sdpa, ex.sdpa_backward, name="numpy-sdpa", **decl)
    passed = int(text.split("results: pass ")[1].split()[0])
    assert passed >= 20, text
    with pytest.raises(AssertionError, match=r"gradients fail\nFAIL +half-dq/backward"):
        attncheck.check_gradients(ex.sdpa, half_dq, name="half-dq", pattern="fp32/*", **decl)
    with pytest.raises(AssertionError, match="no gradient fixture was judged"):
        attncheck.check_gradients(ex.sdpa, ex.sdpa_backward, name="nothing", dtypes=["f16"], pattern="fp32/*")


def unguarded(q, k, v, **kw):
    """A backward whose gradients turn NaN when any key or value is not finite (autograd through torch.where)."""
    g = numpy_sdpa_example.sdpa_backward(q, k, v, **kw)
    poisoned = not (np.isfinite(k).all() and np.isfinite(v).all())
    return {n: a * np.nan for n, a in g.items()} if poisoned else g


def test_check_gradients_keeps_the_finite_required_contract():
    ex = numpy_sdpa_example
    decl = dict(features=ex.FEATURES, dtypes=["f32"], policy="zero", pattern="fp32/*")
    text = attncheck.check_gradients(ex.sdpa, unguarded, name="finite-only", masked_inputs="finite-required", **decl)
    assert "outside the declared contract (masked_inputs: finite-required" in text, text
    with pytest.raises(AssertionError, match="poison_masked/grad"):
        attncheck.check_gradients(ex.sdpa, unguarded, name="isolated", **decl)


def test_expressions_match_numpy_and_replay_with_verify(tmp_path):
    """score_mod / mask_mod as expressions with aux tensors: the fp64 reference equals numpy's, and the fixture
    replays with `attncheck verify` (the expression and tensors are stored in it)."""
    r = np.random.default_rng(5)
    q6, k6, v6 = (r.standard_normal((2, 2, 6, 8)).astype(np.float32) for _ in range(3))
    slopes = np.array([0.5, 0.25])
    doc = np.array([[0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 2, 2]])
    f = attncheck.make_fixture(tmp_path / "expr.h5", q6, k6, v6, scale=0.25, want_weights=True, aux={"slopes": slopes, "doc": doc},
                               score_mod="score + slopes[h] * (kv_idx - q_idx)",
                               mask_mod="doc[b, q_idx] == doc[b, kv_idx] && kv_idx <= q_idx")
    s = np.einsum("bhid,bhjd->bhij", q6.astype(np.float64), k6.astype(np.float64)) * 0.25
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    s = s + slopes[None, :, None, None] * (j - i)
    visible = (doc[:, None, :, None] == doc[:, None, None, :]) & (j <= i)
    s = np.where(visible, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    assert np.abs(f["expected"]["weights"] - w).max() < 1e-13
    assert f["attrs"]["score_expr"] == "score + slopes[h] * (kv_idx - q_idx)" and f["attrs"]["expr_tensors"] == "slopes[2];doc[2,6]"
    run = attncheck._cli.run(["verify", "--fixtures", str(tmp_path), "--impl", "cpu", "--impl", "cpu-flash"])
    assert run.returncode == 0 and run.stdout.count("PASS") == 2, run.stdout + run.stderr


def test_expression_errors_name_the_expression():
    with pytest.raises(ValueError, match=r"score_expr 'score \+ slope\[h\]': '\[' at position 13 follows 'slope'"):
        attncheck.make_fixture("unused.h5", q, k, v, aux={"slopes": np.ones(2)}, score_mod="score + slope[h]")
    with pytest.raises(ValueError, match=r"index 2 of slopes \(dimension 0\) is not an integer in \[0, 2\)"):
        attncheck.reference(q, k, v, aux={"slopes": np.ones(2)}, score_mod="score + slopes[h + 1]")


def fp8_sdpa(descale_v_forgotten=False):
    """The numpy example on fp8 codes: values = code value x descale (the FlashAttention-3 convention), out in bf16."""
    def kernel(q, k, v, *, problem, **kw):
        dq, dk, dv = (problem.get("descale_" + n, 1.0) for n in "qkv")  # fp8 problems only
        return numpy_sdpa_example.sdpa(q * dq, k * dk, v * (1.0 if descale_v_forgotten else dv), problem=problem, **kw)
    return kernel


def test_fp8_codes_through_check(tmp_path):
    # The worker decodes the codes with its own table: every e4m3 / e5m2 value, checked against the formats' rules.
    e4 = worker.from_fp8_codes(np.arange(256), "e4m3")
    assert e4[0x38] == 1.0 and e4[0x7E] == 448.0 and e4[0x01] == 2.0 ** -9 and np.isnan(e4[0x7F]) and e4[0xB8] == -1.0
    e5 = worker.from_fp8_codes(np.arange(256), "e5m2")
    assert e5[0x3C] == 1.0 and e5[0x7B] == 57344.0 and e5[0x01] == 2.0 ** -16 and e5[0x7C] == np.inf
    decl = dict(features=["gqa", "cross", "dqk_ne_dv", "causal"], dtypes=["f32", "e4m3", "e5m2"], policy="zero",
                properties=["agreement", "fp8_descale_exponent", "fp8_equals_values"])
    text = attncheck.check(fp8_sdpa(), cases=8, name="numpy-fp8", regressions=tmp_path, **decl)
    for prop in ("fp8_descale_exponent", "fp8_equals_values"):  # judged on fp8 cases, not skipped
        assert re.search(r"PASS +numpy-fp8 +" + prop + r" +[1-9]\d* cases", text), text
    with pytest.raises(AssertionError, match="numpy-fp8-v: property suite failed"):
        attncheck.check(fp8_sdpa(descale_v_forgotten=True), cases=8, name="numpy-fp8-v", regressions=tmp_path, **decl)
