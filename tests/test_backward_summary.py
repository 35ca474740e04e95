"""The per-range launch counts of the backward pass (ambiguous_launches, other_thread_launches) and the summary
columns of a backward that do not depend on its trace (gradient check, FLOPs, compiled first call), on hand-built
traces and status records; every expected value counted by hand from the events below."""
import pandas as pd
import pytest

from attnprof.analysis.backward import (ambiguous_launches, analyse_passes, backward_summary, backward_tables,
                                        empty_backward_tables, other_thread_launches)
from attnprof.analysis.tables import BACKWARD_BYTE_RATIO, BACKWARD_FLOP_RATIO, BACKWARD_SUMMARY_COLUMNS
from test_backward import ENGINE, MAIN, OTHER, gpu, launch, rng, step

HELPER = 4  # a thread that only launches (no aten op): never the engine's


def _per_range(values) -> pd.Series:
    """What both counts return: one int64 per backward range, indexed by range number (named like completeness')."""
    return pd.Series(values, index=pd.Index(range(len(values)), name="forward"), dtype="int64")


def _analyse(events):
    _, bwd = analyse_passes({"traceEvents": events, "deviceProperties": [{"id": 0}]}, "attn_fwd", expect_gpu=True)
    return bwd, backward_tables(bwd, "v", "s")["backwards"]


def test_every_launch_attributed_gives_zero_counts_for_every_range():
    """Two backward ranges ([120, 150] and [220, 250] on MAIN) and no forward: every launch (on MAIN, or on the
    ENGINE thread inside a window) is a backward's, so no launch is left over: both counts 0 for both ranges,
    and both ranges complete."""
    events = [e for t0, c, x in ((100, 1, 50), (200, 11, 60)) for e in step(t0, c, x) if e["ts"] >= t0 + 20]  # backwards only
    assert not any(e["name"] == "attn_fwd" for e in events)
    bwd, b = _analyse(events)
    assert (bwd["api"]["forward"] >= 0).all()  # the premise: nothing unattributed
    pd.testing.assert_series_equal(ambiguous_launches(bwd["api"], bwd["ranges"]), _per_range([0, 0]))
    pd.testing.assert_series_equal(other_thread_launches(bwd["api"], bwd["ranges"]), _per_range([0, 0]))
    assert list(b["ambiguous_launches"]) == [0, 0] and list(b["other_thread_launches"]) == [0, 0]
    assert list(b["complete"]) == [True, True] and list(b["kernels"]) == [2, 2]


def test_counts_per_range_with_a_range_that_holds_no_backward():
    """Backward ranges in time order: 0 [120, 150] MAIN, 1 a zero-length one at 170 on MAIN (range_ok False:
    it holds no backward, so nothing is counted in it), 2 [220, 250] MAIN, 3 [240, 260] on OTHER.
    The ENGINE thread (the one running aten ops in the windows) belongs to all of them.
    - ENGINE launch at 245: inside the windows of 2 and 3 -> ambiguous in both;
    - HELPER launches (a thread with no op, never the engine's): 135 (window 0), 172 (just after the zero-length
      range 1, in no window; range 1 keeps 0 in both counts), 248 (windows 2 and 3: other-thread, not
      ambiguous), 255 (window 3 only) -> other-thread counts 1, 0, 1, 2;
    - the ENGINE launches at 105 (during forward 0, outside every backward window) and 300 (after the last
      window) are in no window: counted nowhere."""
    events = step(100, 1, 50) + step(200, 11, 60) + [
        launch(300, 90, ENGINE), gpu("stray_after", 302, 90), launch(105, 91, ENGINE), gpu("stray_in_fwd", 107, 91),
        rng("attn_bwd", 170, 0),
        rng("attn_bwd", 240, 20, tid=OTHER), launch(245, 95, ENGINE), gpu("ambiguous", 247, 95),
        launch(135, 96, HELPER), gpu("helper_0", 137, 96), launch(172, 97, HELPER), gpu("helper_1", 174, 97),
        launch(248, 98, HELPER), gpu("helper_23", 249, 98), launch(255, 99, HELPER), gpu("helper_3", 257, 99)]
    bwd, b = _analyse(events)
    assert list(bwd["ranges"]["range_ok"]) == [True, False, True, True]
    assert list(bwd["ranges"]["tid"]) == [MAIN, MAIN, MAIN, OTHER]
    pd.testing.assert_series_equal(ambiguous_launches(bwd["api"], bwd["ranges"]), _per_range([0, 0, 1, 1]))
    pd.testing.assert_series_equal(other_thread_launches(bwd["api"], bwd["ranges"]), _per_range([1, 0, 1, 2]))
    # the table shows the same counts; an ambiguous launch makes its ranges incomplete, another thread's does not
    assert list(b["ambiguous_launches"]) == [0, 0, 1, 1] and list(b["other_thread_launches"]) == [1, 0, 1, 2]
    assert list(b["complete"]) == [True, False, False, False]


def _status(**extra) -> dict:
    return {"status": "ok", "device": "cuda", "schedule": {"active": 2}, "min_complete_forwards": 2,
            "passes": {"backward": {"status": "ok", "reason": ""}}, **extra}


def test_gradient_check_flops_and_compiled_first_call_are_published_whatever_the_trace():
    """A trace with no complete backward (empty table: incomplete_trace) still publishes the record's gradient
    check (three different errors, one per gradient), the backward's FLOPs and FLOP per byte (forward 4 GFLOP,
    minimum 2 GB: backward 2.5 x 4 = 10 GFLOP, exact in binary, and 10e9 / (2 x 2e9) = 2.5 FLOP/byte) and the
    compiled backward's first call (12.5 s, cache miss; the second call's time is not a column)."""
    assert (BACKWARD_FLOP_RATIO, BACKWARD_BYTE_RATIO) == (2.5, 2)
    status = _status(grad_rel_error={"dq": 1.5e-7, "dk": 2.5e-7, "dv": 4.0e-7}, grad_rel_error_ok=True,
                     forward_flops=4e9, min_bytes=2e9,
                     compile_backward={"first_backward_s": 12.5, "second_backward_s": 0.02, "cache": "miss"})
    row = backward_summary(status, empty_backward_tables()["backwards"])
    assert set(row) == set(BACKWARD_SUMMARY_COLUMNS)
    assert row["backward_status"] == "incomplete_trace" and row["cpu_ms_per_backward"] is None
    assert (row["grad_rel_error_dq"], row["grad_rel_error_dk"], row["grad_rel_error_dv"]) == (1.5e-7, 2.5e-7, 4.0e-7)
    assert row["grad_rel_error_ok"] is True
    assert row["backward_gflop"] == 10.0 and row["backward_flop_per_byte"] == pytest.approx(2.5)
    assert (row["compile_backward_first_call_s"], row["compile_backward_cache"]) == (12.5, "miss")
    # a failed check is published as it is
    failed = backward_summary(_status(grad_rel_error={"dq": 0.5, "dk": 1e-7, "dv": 1e-7}, grad_rel_error_ok=False),
                              empty_backward_tables()["backwards"])
    assert (failed["grad_rel_error_dq"], failed["grad_rel_error_ok"]) == (0.5, False)


def test_missing_or_malformed_records_publish_nothing():
    """No gradient check in the record (it failed), no FLOPs, a compile_backward that is no dict: those columns
    stay None; a first call that is no finite number >= 0 is not published, its cache verdict still is."""
    row = backward_summary(_status(compile_backward="garbled"), empty_backward_tables()["backwards"])
    cols = ["grad_rel_error_dq", "grad_rel_error_dk", "grad_rel_error_dv", "grad_rel_error_ok", "backward_gflop",
            "backward_flop_per_byte", "compile_backward_first_call_s", "compile_backward_cache"]
    assert [row[c] for c in cols] == [None] * len(cols)
    row = backward_summary(_status(compile_backward={"first_backward_s": -1.0, "cache": "hit"}),
                           empty_backward_tables()["backwards"])
    assert (row["compile_backward_first_call_s"], row["compile_backward_cache"]) == (None, "hit")
