"""Backward pass (config passes): attribution of the autograd engine's launches to the backward
ranges on a hand-built trace, a CPU capture with forward and backward, and forward-only outputs
unchanged on real H200 traces."""
import pandas as pd
import pytest

from attnprof.analysis.backward import (BACKWARD_COLUMNS, analyse_passes, backward_summary, backward_tables,
                               empty_backward_tables)
from attnprof.measure.capture import capture
from attnprof.model.names import backward_range_name
from attnprof.analysis.tables import (BACKWARD_SUMMARY_COLUMNS, SUMMARY_COLUMNS, analyse_trace, forward_table, kernel_table,
                             summary_row)
from conftest import fixture_status, fixture_trace
from test_capture import spec

MAIN, ENGINE, OTHER, STREAM = 1, 2, 3, 7  # threads: the caller's, autograd's CUDA engine thread, a third; a stream


def rng(name, ts, dur, tid=MAIN):
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "pid": 10, "tid": tid}


def launch(ts, corr, tid, api="cudaLaunchKernel", ext=None):
    return {"ph": "X", "cat": "cuda_runtime", "name": api, "ts": ts, "dur": 1, "pid": 10, "tid": tid,
            "args": {"correlation": corr, **({"External id": ext} if ext else {})}}


def gpu(name, ts, corr, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": 2, "pid": 0, "tid": STREAM,
            "args": {"correlation": corr, "device": 0}}


def op(name, ts, ext, tid):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 3, "pid": 10, "tid": tid, "args": {"External id": ext}}


def step(t0, corr0, ext0):
    """One profiled step at t0: forward [t0, t0+10] on MAIN launching one kernel; backward
    [t0+20, t0+50] on MAIN, whose work is a preprocessing kernel launched on MAIN and, on the
    ENGINE thread, an aten::mm with one kernel and a memset."""
    c = corr0
    return [
        rng("attn_fwd", t0, 10), launch(t0 + 2, c, MAIN), gpu("fwd_kernel", t0 + 5, c),
        rng("attn_bwd", t0 + 20, 30),
        launch(t0 + 21, c + 1, MAIN), gpu("bwd_preprocess", t0 + 23, c + 1),
        op("aten::mm", t0 + 24, ext0, ENGINE), launch(t0 + 25, c + 2, ENGINE, ext=ext0), gpu("bwd_kernel", t0 + 27, c + 2),
        launch(t0 + 30, c + 3, ENGINE, api="cudaMemsetAsync"), gpu("Memset (Device)", t0 + 31, c + 3, cat="gpu_memset"),
    ]


def synthetic(extra=()) -> dict:
    events = step(100, 1, 50) + step(200, 11, 60)
    # outside every window: a launch on the engine thread after the last backward, and one on
    # the engine thread during a forward (never a forward's: the forward keeps the same-thread rule)
    events += [launch(300, 90, ENGINE), gpu("stray_after", 302, 90), launch(105, 91, ENGINE), gpu("stray_in_fwd", 107, 91)]
    return {"traceEvents": events + list(extra), "deviceProperties": [{"id": 0, "name": "synthetic"}]}


def test_backward_range_name():
    assert backward_range_name("attn_fwd") == "attn_bwd" and backward_range_name("x") == "x_bwd"


def test_engine_thread_launches_belong_to_the_backward_range():
    fwd, bwd = analyse_passes(synthetic(), "attn_fwd", expect_gpu=True)
    bt = backward_tables(bwd, "v", "s")
    b = bt["backwards"]
    assert list(b.columns) == BACKWARD_COLUMNS and list(b["backward"]) == [0, 1]
    # counted by hand: per backward 2 kernels (1 on the caller's thread, 1 on the engine's) and 1 memset
    assert list(b["kernels"]) == [2, 2] and list(b["memset"]) == [1, 1] and list(b["memcpy"]) == [0, 0]
    assert list(b["launch_calls"]) == [3, 3] and b["complete"].all() and b["timing_complete"].all()
    assert list(b["device_us"]) == [6.0, 6.0] and list(b["cpu_us"]) == [30.0, 30.0]
    assert list(b["unattributed_gpu_events"]) == [2, 2] and list(b["ambiguous_launches"]) == [0, 0]
    k = bt["kernels_backward"].set_index("kernel")
    assert set(k.index) == {"bwd_preprocess", "bwd_kernel", "Memset (Device)"}
    assert (k["calls_per_backward"] == 1).all() and k.loc["bwd_kernel", "op"] == "aten::mm"
    ops = bt["ops_backward"].set_index("op")
    assert ops.loc["aten::mm", "calls_per_backward"] == 1  # the engine thread's op, attributed too
    # the forwards: one kernel each, and the backward's events are not "outside every forward"
    f = forward_table(fwd, "v", "s")
    assert list(f["kernels"]) == [1, 1] and f["complete"].all() and list(f["unattributed_gpu_events"]) == [2, 2]
    assert list(kernel_table(fwd, "v", "s")["kernel"]) == ["fwd_kernel"]


def test_the_forward_rule_alone_loses_the_engine_threads_work():
    """What the issue is about: by (ts, tid) alone, the backward range keeps only its own thread's launch."""
    frames = analyse_trace(synthetic(), "attn_bwd", expect_gpu=True)
    assert list(forward_table(frames, "v", "s")["kernels"]) == [1, 1]


def test_ambiguous_launch_is_unattributed_and_makes_both_ranges_incomplete():
    # a backward range on a third thread overlapping backward 1's window [220, 250]; a launch of
    # the engine thread at 245 lies in both windows
    extra = [rng("attn_bwd", 240, 20, tid=OTHER), launch(245, 95, ENGINE), gpu("which_one", 247, 95)]
    _, bwd = analyse_passes(synthetic(extra), "attn_fwd", expect_gpu=True)
    b = backward_tables(bwd, "v", "s")["backwards"]
    # ranges in time order: 0 at 120 (MAIN), 1 at 220 (MAIN), 2 at 240 (OTHER)
    assert list(b["ambiguous_launches"]) == [0, 1, 1]
    assert list(b["complete"]) == [True, False, False]
    assert list(b["kernels"]) == [2, 2, 0]  # the ambiguous kernel is in neither
    assert b.loc[1, "unattributed_gpu_events"] == 2 + 1  # the two strays and the ambiguous one
    status = {"status": "ok", "device": "cuda", "schedule": {"active": 3}, "min_complete_forwards": 2,
              "passes": {"backward": {"status": "ok", "reason": ""}}}
    row = backward_summary(status, b)
    assert row["backward_status"] == "incomplete_trace" and row["backwards_complete"] == 1
    assert "launches on another thread inside the windows of several ranges" in row["backward_reason"]
    assert "backwards incomplete" in row["backward_note"]


def test_backward_summary_columns():
    _, bwd = analyse_passes(synthetic(), "attn_fwd", expect_gpu=True)
    b = backward_tables(bwd, "v", "s")["backwards"]
    status = {"status": "ok", "device": "cuda", "schedule": {"active": 2}, "min_complete_forwards": 2,
              "passes": {"backward": {"status": "ok", "reason": ""}}}
    row = backward_summary(status, b)
    assert set(row) == set(BACKWARD_SUMMARY_COLUMNS) and set(BACKWARD_SUMMARY_COLUMNS) <= set(SUMMARY_COLUMNS)
    assert (row["kernels_per_backward"], row["memcpy_per_backward"], row["memset_per_backward"]) == (2, 0, 1)
    assert row["device_ms_per_backward"] == pytest.approx(0.006) and row["cpu_ms_per_backward"] == pytest.approx(0.03)
    assert row["backward_status"] == "ok" and row["backward_note"] == "2 GPU events of the trace launched outside every " \
        "backward range (or with no launch record): not counted, the backwards may miss work"
    # not asked for: every backward column empty
    assert set(backward_summary({"status": "ok"}, b).values()) == {None}


@pytest.fixture(scope="module")
def cpu_backward(tmp_path_factory):
    """In-process CPU captures with passes [forward, backward] at the tests' tiny shape."""
    tmp = tmp_path_factory.mktemp("bwd")
    out = {}
    for variant, extra in (("naive", {}), ("sdpa_math", {}), ("sdpa_flash", {"_test_fail_phase": "backward"})):
        trace = tmp / f"{variant}.json.gz"
        out[variant] = (capture(spec(variant, passes=["forward", "backward"], **extra), trace), trace)
    return out


@pytest.mark.parametrize("variant", ["naive", "sdpa_math"])
def test_cpu_capture_profiles_the_backward(cpu_backward, variant):
    from attnprof.analysis.trace import load_trace

    rec, trace_path = cpu_backward[variant]
    assert rec["status"] == "ok" and rec["rel_error_ok"] and rec["checks_missing"] == []
    assert rec["passes"]["backward"]["status"] == "ok" and rec["backward_range_name"] == "attn_bwd"
    assert rec["trace_check"]["backward"]["forwards_complete"] == 2
    fwd, bwd = analyse_passes(load_trace(trace_path), "attn_fwd", expect_gpu=False)
    tables = backward_tables(bwd, variant, "s")
    assert len(tables["backwards"]) == 2 and tables["backwards"]["complete"].all()
    assert "aten::_softmax_backward_data" in set(tables["ops_backward"]["op"])  # the backward's own ops
    assert "aten::_softmax_backward_data" not in set(fwd["ops"][fwd["ops"]["forward"] >= 0]["name"])
    row = summary_row(rec, forward_table(fwd, variant, "s"))
    row.update(backward_summary(rec, tables["backwards"]))
    assert row["status"] == "ok" and row["cpu_ms_per_forward"] > 0
    assert row["backward_status"] == "ok" and row["backwards_complete"] == 2 and row["cpu_ms_per_backward"] > 0
    assert row["cpu_ms_backward_min"] <= row["cpu_ms_per_backward"] <= row["cpu_ms_backward_max"]
    assert row["kernels_per_backward"] is None  # a CPU run has no device events, as for the forward


def test_failed_backward_keeps_the_forward(cpu_backward):
    rec, trace_path = cpu_backward["sdpa_flash"]
    assert rec["status"] == "ok" and rec["rel_error_ok"]
    assert rec["passes"]["backward"]["status"] == "out_of_memory"
    assert "backward" not in rec["trace_check"]
    from attnprof.analysis.trace import load_trace

    frames = analyse_trace(load_trace(trace_path), "attn_fwd", expect_gpu=False)
    assert forward_table(frames, "sdpa_flash", "s")["complete"].sum() == 2
    assert analyse_trace(load_trace(trace_path), "attn_bwd")["ranges"].empty  # profiled forward-only
    row = backward_summary(rec, empty_backward_tables()["backwards"])
    assert row["backward_status"] == "out_of_memory" and "_test_fail_phase: backward" in row["backward_reason"]
    assert row["cpu_ms_per_backward"] is None


@pytest.mark.parametrize("variant", ["naive", "sdpa_cudnn"])
def test_forward_only_h200_traces_give_the_same_forward_tables(variant):
    trace, status = fixture_trace(variant), fixture_status(variant)
    old = analyse_trace(trace, status["range_name"], expect_gpu=True)
    fwd, bwd = analyse_passes(trace, status["range_name"], expect_gpu=True)
    pd.testing.assert_frame_equal(forward_table(fwd, variant, "s"), forward_table(old, variant, "s"))
    pd.testing.assert_frame_equal(kernel_table(fwd, variant, "s"), kernel_table(old, variant, "s"))
    assert bwd["ranges"].empty and backward_tables(bwd, variant, "s")["backwards"].empty


def test_a_backward_range_around_its_forward_leaves_both_unpublished():
    """attn_bwd opened around attn_fwd on the same thread (a mistaken nesting): the forward's kernel
    would count in both passes; both ranges must be incomplete instead, with the reason."""
    import copy

    trace = synthetic()
    ev = trace["traceEvents"]
    fwd0 = next(e for e in ev if e.get("name") == "attn_fwd")
    bwd0 = next(e for e in ev if e.get("name") == "attn_bwd")
    bwd = copy.deepcopy(bwd0)
    bwd["ts"], bwd["dur"] = fwd0["ts"] - 1, (bwd0["ts"] + bwd0["dur"]) - (fwd0["ts"] - 1)  # spans forward 0 and backward 0
    ev[ev.index(bwd0)] = bwd
    fwd, bwdf = analyse_passes(trace, "attn_fwd", expect_gpu=True)
    assert not fwd["completeness"].loc[0, "complete"] and not bwdf["completeness"].loc[0, "complete"]
    assert fwd["completeness"]["complete"].iloc[1:].all()  # the other steps stand
