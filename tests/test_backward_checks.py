"""The backward as complete as the forward (issue 25): the gradients' float64 check (the blockwise
reference against a whole-tensor one, and a deliberately wrong backward flagged with its times kept),
backward TFLOP/s by its stated FLOP convention, and a compiled variant's first backward timed apart."""
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from attnprof.analysis.backward import analyse_passes, backward_summary, backward_tables
from attnprof.analysis.tables import BACKWARD_FLOP_RATIO, SUMMARY_COLUMNS, combine_repeats, forward_table, summary_row
from attnprof.analysis.trace import load_trace
from attnprof.findings.data import RunData
from attnprof.findings.rules.status import rule_grad_correctness
from attnprof.measure.capture import capture
from attnprof.measure.forwards import gradient_relative_errors
from attnprof.model.variants import Shape
from attnprof.findings.brief import backward_numbers, in_brief
from attnprof.runtime.isolation import run_isolated
from test_backward import synthetic
from test_capture import SHAPE, spec

USER_DIR = Path(__file__).resolve().parent / "user_variants"
BWD = ["forward", "backward"]


def whole_reference_grads(q, k, v, grad_out, offset):
    """float64 gradients by autograd through attention written out on whole tensors (key/value heads
    repeated for grouped-query, a boolean mask from indices): no blocks, no shared code."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    i = torch.arange(q.shape[2])[:, None]
    j = torch.arange(k.shape[2])[None, :]
    scores = (q @ kk.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    out = torch.softmax(scores.masked_fill(j > i + offset, float("-inf")), dim=-1) @ vv
    return torch.autograd.grad(out, (q, k, v), grad_out.double())


def test_blockwise_gradient_reference_matches_a_whole_tensor_one():
    """Grouped-query, lower-right causal, several query blocks: dq exact, dk doubled (error 1), dv
    plus a known perturbation (error ||delta|| / ||dv_ref||, computed from the whole-tensor reference)."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 24, 8, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 40, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    grad_out = torch.randn(2, 4, 24, 8, generator=gen, dtype=torch.float64)
    offset = 40 - 24
    dq, dk, dv = whole_reference_grads(q, k, v, grad_out, offset)
    delta = 1e-3 * torch.randn(dv.shape, generator=gen, dtype=torch.float64)
    errors = gradient_relative_errors((dq, 2 * dk, dv + delta), q, k, v, grad_out, True, block=5, offset=offset)
    assert errors["dq"] < 1e-12
    assert errors["dk"] == pytest.approx(1.0, rel=1e-12)
    assert errors["dv"] == pytest.approx((delta.norm() / dv.norm()).item(), rel=1e-9)


def test_gradient_reference_rejects_gradients_of_the_wrong_shape():
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    with pytest.raises(ValueError, match=r"gradients .* do not match q \(1, 2, 8, 4\)"):
        gradient_relative_errors((q, k[..., :2], v), q, k, v, q, True)


@pytest.fixture(scope="module")
def user_variants():
    """The capture imports a user's module from the path, as Snakemake's would."""
    import sys

    sys.path.insert(0, str(USER_DIR))
    yield
    sys.path.remove(str(USER_DIR))


@pytest.fixture(scope="module")
def captured(tmp_path_factory, user_variants):
    """In-process CPU captures with passes [forward, backward]: a correct built-in, the wrong-dk user
    variant, a forward-only run, a backward that failed, and a gradient check that failed itself."""
    tmp = tmp_path_factory.mktemp("grad")
    runs = {"naive": spec("naive", passes=BWD),
            "wrong_dk": spec("wrong_dk", passes=BWD, custom={"function": "attnprof_test_wrong_grad:forward"}),
            "forward_only": spec("naive"),
            "bwd_failed": spec("sdpa_math", passes=BWD, _test_fail_phase="backward"),
            "check_failed": spec("sdpa_math", passes=BWD, _test_fail_phase="grad_correctness")}
    return {name: (capture(s, tmp / f"{name}.json.gz"), tmp / f"{name}.json.gz") for name, s in runs.items()}


def summary_of(rec, trace_path):
    fwd, bwd = analyse_passes(load_trace(trace_path), "attn_fwd", expect_gpu=False)
    row = summary_row(rec, forward_table(fwd, rec["variant"], SHAPE.key))
    row.update(backward_summary(rec, backward_tables(bwd, rec["variant"], SHAPE.key)["backwards"]))
    return row


def test_correct_gradients_pass_the_check(captured):
    rec, path = captured["naive"]
    assert rec["phases"]["grad_correctness"]["status"] == "ok" and rec["checks_missing"] == []
    assert rec["grad_rel_error_ok"] is True and rec["grad_rel_error_tolerance"] == rec["rel_error_tolerance"]
    assert set(rec["grad_rel_error"]) == {"dq", "dk", "dv"} and max(rec["grad_rel_error"].values()) < 1e-5
    row = summary_of(rec, path)
    assert row["grad_rel_error_ok"] is True and row["grad_rel_error_dk"] == rec["grad_rel_error"]["dk"]


def test_a_wrong_backward_is_flagged_and_keeps_its_times(captured):
    rec, path = captured["wrong_dk"]
    assert rec["status"] == "ok" and rec["rel_error_ok"] is True  # the forward is right
    errors = rec["grad_rel_error"]
    assert rec["grad_rel_error_ok"] is False
    assert errors["dk"] == pytest.approx(1.0, abs=1e-5)  # dk doubled: ||2g - g|| / ||g|| = 1
    assert errors["dq"] < 1e-5 and errors["dv"] < 1e-5
    row = summary_of(rec, path)
    assert row["backward_status"] == "ok" and row["backwards_complete"] == 2 and row["cpu_ms_per_backward"] > 0  # times kept
    assert row["grad_rel_error_ok"] is False
    # the finding (a failure naming dk) and page 1, which leads with it; the report marks the backward's times
    ok_row = summary_of(*captured["naive"])
    summary = pd.DataFrame([{c: r.get(c) for c in SUMMARY_COLUMNS} for r in (ok_row, row)])
    d = RunData(shape_key=SHAPE.key, summary=summary, kernels=pd.DataFrame(), launches=pd.DataFrame(), ops=pd.DataFrame(),
                status={})
    (f,) = rule_grad_correctness(d)
    assert f["variants"] == ["wrong_dk"] and f["kind"] == "failure" and f["headline"].startswith("wrong gradient: dk ")
    brief = in_brief(None, [], summary)
    assert brief[0]["text"].startswith("wrong_dk computes wrong gradients in its backward: dk relative error")
    assert brief[0]["href"] == f"#backward-{SHAPE.key}"
    marked = backward_numbers(row, False, [])
    assert marked["grad_wrong"] and marked["grad_worst_name"] == "dk" and marked["bwd_ms"] == row["cpu_ms_per_backward"]
    assert not backward_numbers(ok_row, False, [])["grad_wrong"]


def test_the_gradient_phase_says_why_it_did_not_run(captured):
    assert captured["forward_only"][0]["phases"]["grad_correctness"] == {
        "status": "skipped", "reason": "forward-only run (passes has no backward)", "seconds": 0.0}
    rec = captured["bwd_failed"][0]
    assert rec["phases"]["grad_correctness"]["reason"] == "backward pass out_of_memory" and "grad_rel_error" not in rec
    rec = captured["check_failed"][0]  # a failed check loses the check only: the trace and the backward stand
    assert rec["status"] == "ok" and rec["passes"]["backward"]["status"] == "ok"
    assert rec["phases"]["grad_correctness"]["status"] == "out_of_memory" and "grad_rel_error" not in rec
    assert rec["checks_missing"][0].startswith("grad_correctness: out_of_memory: ")
    row = summary_of(*captured["check_failed"])
    assert row["grad_rel_error_ok"] is None and row["cpu_ms_per_backward"] > 0


# --- backward TFLOP/s ------------------------------------------------------------------------------

def test_backward_tflops_by_the_flashattention_convention():
    """The synthetic trace's backwards take 0.006 ms of device time (2 kernels + 1 memset of 2 µs each).
    Causal square b1 h2 s64 d32, counted by hand: forward 1*2*(4*64*64*32 + 2*64*64)/2 = 532480 FLOP
    (PyTorch sdpa.py), backward 2.5x = 1331200 FLOP; minimum bytes fp32 4*1*2*64*32*4 = 65536, twice for
    the backward."""
    shape = Shape(1, 2, 64, 32, "fp32", True)
    assert shape.forward_flops() == 532480 and shape.min_bytes() == 65536 and BACKWARD_FLOP_RATIO == 2.5
    _, bwd = analyse_passes(synthetic(), "attn_fwd", expect_gpu=True)
    status = {"status": "ok", "device": "cuda", "schedule": {"active": 2}, "min_complete_forwards": 2,
              "passes": {"backward": {"status": "ok", "reason": ""}}, "forward_flops": 532480.0, "min_bytes": 65536}
    row = backward_summary(status, backward_tables(bwd, "v", "s")["backwards"])
    assert row["backward_gflop"] == pytest.approx(1331200 / 1e9)
    assert row["backward_tflops"] == pytest.approx(1331200 / 0.006e-3 / 1e12)  # FLOP / s / 1e12
    assert row["backward_flop_per_byte"] == pytest.approx(1331200 / (2 * 65536))
    # a CPU run: no device time, no TFLOP/s
    assert backward_summary({**status, "device": "cpu"}, backward_tables(bwd, "v", "s")["backwards"])["backward_tflops"] is None


def test_backward_tflops_follows_the_median_of_the_repeats():
    """Three repeats with backward device times 4, 9 and 5 ms: the median, 5 ms, is none of the mean
    (6 ms), the first (4) or the last; backward TFLOP/s is 10 GFLOP / 5 ms = 2."""
    base = {c: None for c in SUMMARY_COLUMNS}
    rows = [{**base, "variant": "v", "shape_key": "s", "status": "ok", "repeat": i + 1, "backward_gflop": 10.0,
             "device_ms_per_backward": ms, "backward_tflops": 10.0 / ms} for i, ms in enumerate((4.0, 9.0, 5.0))]
    out = combine_repeats(rows)
    assert out["device_ms_per_backward"] == pytest.approx(5.0) and out["backward_tflops"] == pytest.approx(2.0)


# --- the compiled backward's first call --------------------------------------------------------------

@pytest.mark.slow
def test_a_compiled_backward_is_timed_apart_and_kept_out_of_the_steady_state(tmp_path, monkeypatch):
    # a cold inductor cache: the first backward compiles (with a warm one it only loads, and is as fast as a steady one)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    shape = Shape(1, 2, 32, 16, "fp32", True)
    s = {**spec("naive_compiled", passes=BWD), "shape": shape.as_dict()}
    rec = run_isolated(s, tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=600)
    assert rec["status"] == "ok" and rec["passes"]["backward"]["status"] == "ok", rec.get("reason")
    comp = rec["compile_backward"]
    # the first backward compiled (longer than a steady one) and looked up inductor's cache
    assert comp["first_backward_s"] > comp["second_backward_s"] and comp["cache"] == "miss"
    assert rec["grad_rel_error_ok"] is True
    fwd, bwd = analyse_passes(load_trace(tmp_path / "t.json.gz"), "attn_fwd", expect_gpu=False)
    backwards = backward_tables(bwd, "naive_compiled", shape.key)["backwards"]
    assert len(backwards) == s["schedule"]["active"]  # the profiled backwards only
    # no profiled backward holds the compile: each is shorter than the first call
    assert backwards["cpu_us"].max() / 1e6 < comp["first_backward_s"]
    row = backward_summary(rec, backwards)
    assert row["compile_backward_first_call_s"] == comp["first_backward_s"] and row["compile_backward_cache"] == comp["cache"]


@pytest.mark.parametrize("dk", [float("nan"), float("inf"), "abc"])
def test_a_gradient_error_that_is_no_finite_number_is_the_one_named(dk):
    """A NaN or inf dk (a NaN gradient gives a NaN error) or a garbled record: the finding names dk, not the finite dq,
    which would pass on its own (2.7e-07 here)."""
    row = {"variant": "g", "shape_key": "s", "status": "ok", "dtype": "fp32", "grad_rel_error_ok": False,
           "grad_rel_error_dq": 2.7e-7, "grad_rel_error_dk": dk, "grad_rel_error_dv": 3.1e-7}
    d = RunData(shape_key="s", summary=pd.DataFrame([row]), kernels=pd.DataFrame(), launches=pd.DataFrame(),
                ops=pd.DataFrame(), status={})
    (f,) = rule_grad_correctness(d)
    assert f["headline"].startswith("wrong gradient: dk not finite") and "dk not finite" in f["statement"]
    assert "grad_rel_error_dk" not in f["numbers"] and set(f["numbers"]) == {"grad_rel_error_dq", "grad_rel_error_dv"}
