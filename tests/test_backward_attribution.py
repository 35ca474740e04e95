"""Attribution of trace events to backward ranges (attnprof.analysis.backward: backward_threads, assign_backward,
ambiguous_launches, other_thread_launches) on hand-built traces, each expected range worked out by hand from the
events' (ts, tid) and the module docstring's rules. Written for the surviving mutants of the mutmut run over
backward.py (docs/mutations.md); the notes on the ones argued equivalent are in that file."""
import pandas as pd

from attnprof.analysis.backward import (ENGINE_OP, ambiguous_launches, analyse_passes, assign_backward, backward_tables,
                                        backward_threads, other_thread_launches)
from attnprof.analysis.trace import events_frame, forward_ranges
from test_backward import ENGINE, MAIN, OTHER, gpu, launch, op, rng

HELPER = 4  # a thread that launches but runs no aten op (a data loader, say): never the engine's


def _passes(events: list) -> dict:
    _, bwd = analyse_passes({"traceEvents": events, "deviceProperties": [{"id": 0}]}, "attn_fwd", expect_gpu=True)
    return bwd


def _by_ts(api: pd.DataFrame) -> dict:
    """{launch ts: backward range} of the backward frames' API calls."""
    return dict(zip(api["ts"], api["forward"]))


def test_engine_threads_are_those_whose_engine_ops_start_in_the_closed_window():
    """Backward 0's window is [120, 150] on MAIN. Engine ops starting at 120 (ENGINE) and at 150 (thread 5) are
    inside it (closed window); at 119 (thread 8) and 151 (thread 6) outside every window. MAIN's own engine op
    (the CPU nodes run on the calling thread) is not another thread's. Each range gets all engine threads."""
    ev = events_frame({"traceEvents": [
        rng("attn_bwd", 120, 30), rng("attn_bwd", 220, 30),
        op(f"{ENGINE_OP}: MmBackward0", 120, 1, ENGINE), op(f"{ENGINE_OP}: MmBackward0", 150, 2, 5),
        op(f"{ENGINE_OP}: MmBackward0", 151, 3, 6), op(f"{ENGINE_OP}: MmBackward0", 119, 4, 8),
        op(f"{ENGINE_OP}: SoftmaxBackward0", 130, 5, MAIN), op("aten::mm", 300, 6, 9),
    ]})
    ranges = forward_ranges(ev, "attn_bwd")
    assert backward_threads(ev, ranges) == [frozenset({ENGINE, 5}), frozenset({ENGINE, 5})]


def test_engine_launches_in_an_unpublished_backwards_window_are_nobodys():
    """Two overlapping backward ranges on MAIN, [120, 150] and [140, 160], are both not range_ok (forward_ranges);
    backward 2 at [220, 250] is. The engine's launches at 125 (only in window 0) and 155 (only in window 1)
    belong to no range; those at 225 and 230 to range 2."""
    events = [rng("attn_bwd", 120, 30), rng("attn_bwd", 140, 20), rng("attn_bwd", 220, 30),
              op("aten::mm", 124, 50, ENGINE), launch(125, 1, ENGINE, ext=50), gpu("k0", 127, 1),
              launch(155, 2, ENGINE), gpu("k1", 157, 2),
              op("aten::mm", 224, 60, ENGINE), launch(225, 3, ENGINE, ext=60), gpu("k2", 227, 3),
              launch(230, 4, ENGINE, api="cudaMemsetAsync"), gpu("m2", 231, 4, cat="gpu_memset")]
    bwd = _passes(events)
    assert list(bwd["ranges"]["range_ok"]) == [False, False, True]
    assert _by_ts(bwd["api"]) == {125.0: -1, 155.0: -1, 225.0: 2, 230.0: 2}


def _overlapping(forwards: bool = True) -> list:
    """Backward 0 [120, 150] on MAIN, backward 1 [140, 160] on OTHER, backward 2 [220, 250] on MAIN; ENGINE runs
    aten::mm inside windows 0 and 2 (so it is the engine thread of every range), HELPER runs no op.

    By hand (ts tid api: range): 121 MAIN: 0 (same thread); 125 ENGINE, 130 ENGINE memset: 0 (window 0 only);
    145 MAIN: 0 (same thread, although inside window 1); 146 ENGINE, 147 ENGINE ``INVALID`` (linked to its
    kernel, so it enqueues): in windows 0 and 1, ambiguous, -1; 148 HELPER launch: -1, another thread's, in
    windows 0 and 1; 149 HELPER cudaEventRecord: -1, enqueues nothing; 155 ENGINE: 1 (window 1 only);
    221 MAIN, 225 ENGINE, 230 ENGINE: 2. With ``forwards``: forward ranges [100, 110] and [200, 210] on MAIN,
    launches at 102 and 202 (-1 in the backward frames)."""
    events = [rng("attn_bwd", 120, 30), rng("attn_bwd", 140, 20, tid=OTHER), rng("attn_bwd", 220, 30),
              launch(121, 1, MAIN), gpu("pre0", 123, 1),
              op("aten::mm", 124, 50, ENGINE), launch(125, 2, ENGINE, ext=50), gpu("k0", 127, 2),
              launch(130, 3, ENGINE, api="cudaMemsetAsync"), gpu("m0", 131, 3, cat="gpu_memset"),
              launch(145, 4, MAIN), gpu("main_in_window_1", 160, 4),
              launch(146, 5, ENGINE), gpu("both", 162, 5),
              launch(147, 6, ENGINE, api="INVALID"), gpu("both_unnamed", 164, 6),
              launch(148, 7, HELPER), gpu("helper", 166, 7),
              launch(149, 8, HELPER, api="cudaEventRecord"),
              launch(155, 9, ENGINE), gpu("k1", 168, 9),
              launch(221, 11, MAIN), gpu("pre2", 223, 11),
              op("aten::mm", 224, 60, ENGINE), launch(225, 12, ENGINE, ext=60), gpu("k2", 227, 12),
              launch(230, 13, ENGINE, api="cudaMemsetAsync"), gpu("m2", 231, 13, cat="gpu_memset")]
    if forwards:
        events += [rng("attn_fwd", 100, 10), launch(102, 20, MAIN), gpu("f0", 104, 20),
                   rng("attn_fwd", 200, 10), launch(202, 21, MAIN), gpu("f1", 204, 21)]
    return events


EXPECTED = {121.0: 0, 125.0: 0, 130.0: 0, 145.0: 0, 146.0: -1, 147.0: -1, 148.0: -1, 149.0: -1, 155.0: 1,
            221.0: 2, 225.0: 2, 230.0: 2}


def test_only_calls_that_enqueue_work_and_no_range_holds_count_as_ambiguous_or_other_thread():
    """ambiguous: 146 and 147 (the unnamed call enqueues: its kernel carries its correlation id) in windows 0
    and 1. Other thread: HELPER's launch at 148 in windows 0 and 1; not its cudaEventRecord (enqueues nothing),
    not MAIN's 145 inside OTHER's window (range 0 holds it, so it is not left out)."""
    bwd = _passes(_overlapping())
    api, ranges = bwd["api"], bwd["ranges"]
    assert list(ranges["tid"]) == [MAIN, OTHER, MAIN] and list(ranges["threads"]) == [frozenset({ENGINE})] * 3
    assert _by_ts(api) == {**EXPECTED, 102.0: -1, 202.0: -1}
    assert list(ambiguous_launches(api, ranges)) == [2, 2, 0]
    assert list(other_thread_launches(api, ranges)) == [1, 1, 0]
    b = backward_tables(bwd, "v", "s")["backwards"]
    assert list(b["ambiguous_launches"]) == [2, 2, 0] and list(b["other_thread_launches"]) == [1, 1, 0]
    assert list(b["complete"]) == [False, False, True]


def test_attribution_without_forward_ranges():
    """The same trace with no forward range: the backward attribution is the same, whether the ranges carry an
    empty forward_ranges frame (analyse_passes) or none at all."""
    bwd = _passes(_overlapping(forwards=False))
    api, ranges = bwd["api"], bwd["ranges"]
    assert ranges.attrs["forward_ranges"].empty
    assert _by_ts(api) == EXPECTED
    assert list(ambiguous_launches(api, ranges)) == [2, 2, 0]
    assert list(other_thread_launches(api, ranges)) == [1, 1, 0]
    bare = ranges.copy()
    bare.attrs = {}
    assert dict(zip(api["ts"], assign_backward(api["ts"], api["tid"], bare))) == EXPECTED
    assert list(ambiguous_launches(api, bare)) == [2, 2, 0]
    assert list(other_thread_launches(api, bare)) == [1, 1, 0]


def test_no_other_thread_launches_without_a_threads_column():
    """other_thread_launches' contract: 0 everywhere when the ranges do not name their engine threads."""
    bwd = _passes(_overlapping())
    assert list(other_thread_launches(bwd["api"], bwd["ranges"].drop(columns="threads"))) == [0, 0, 0]


def test_a_launch_in_the_engine_threads_forward_0_inside_a_backward_window_is_the_forwards():
    """Forward 0 (the trace's first) runs on ENGINE at [125, 135], inside backward 0's window [120, 150] on MAIN;
    forward 1 on MAIN at [200, 210]. ENGINE's launch at 130 is forward 0's, never the backward's; its launch at
    140 (after its aten::mm at 139, in the window) is backward 0's."""
    events = [rng("attn_bwd", 120, 30), rng("attn_fwd", 125, 10, tid=ENGINE), launch(130, 1, ENGINE), gpu("f0", 132, 1),
              op("aten::mm", 139, 50, ENGINE), launch(140, 2, ENGINE, ext=50), gpu("b0", 142, 2),
              rng("attn_fwd", 200, 10), launch(202, 3, MAIN), gpu("f1", 204, 3)]
    bwd = _passes(events)
    assert list(bwd["ranges"].attrs["forward_ranges"]["tid"]) == [ENGINE, MAIN]
    assert list(bwd["ranges"]["threads"]) == [frozenset({ENGINE})]
    assert _by_ts(bwd["api"]) == {130.0: -1, 140.0: 0, 202.0: -1}
    assert list(backward_tables(bwd, "v", "s")["backwards"]["kernels"]) == [1]


def test_a_helper_threads_launch_in_its_own_forward_0_is_not_an_other_thread_launch():
    """HELPER (no aten op: not the engine's) runs forward 0 at [125, 135] inside backward 0's window [120, 150]:
    its launch at 130 is its forward's work, not left out of the backward; its launch at 145, after its forward,
    is counted in other_thread_launches. ENGINE's launch at 125 is backward 0's."""
    events = [rng("attn_bwd", 120, 30), rng("attn_fwd", 125, 10, tid=HELPER), launch(130, 1, HELPER), gpu("f0", 132, 1),
              launch(145, 2, HELPER), gpu("h", 147, 2),
              op("aten::mm", 124, 50, ENGINE), launch(125, 3, ENGINE, ext=50), gpu("b0", 127, 3),
              rng("attn_fwd", 200, 10), launch(202, 4, MAIN), gpu("f1", 204, 4)]
    bwd = _passes(events)
    assert list(bwd["ranges"].attrs["forward_ranges"]["tid"]) == [HELPER, MAIN]
    assert _by_ts(bwd["api"]) == {125.0: 0, 130.0: -1, 145.0: -1, 202.0: -1}
    assert list(other_thread_launches(bwd["api"], bwd["ranges"])) == [1]
    assert list(ambiguous_launches(bwd["api"], bwd["ranges"])) == [0]


def test_without_aten_ops_no_thread_is_the_engines():
    """A trace with no aten op cannot name the engine's threads (backward_threads: a thread that only launches is
    never the engine's): ENGINE's launch at 125 in backward 0's window [120, 150] is left out and counted as
    another thread's; MAIN's own launch at 121 is the backward's."""
    events = [rng("attn_bwd", 120, 30), launch(121, 1, MAIN), gpu("pre", 123, 1), launch(125, 2, ENGINE), gpu("k", 127, 2)]
    bwd = _passes(events)
    assert list(bwd["ranges"]["threads"]) == [frozenset()] and bwd["ops"].empty
    assert _by_ts(bwd["api"]) == {121.0: 0, 125.0: -1}
    b = backward_tables(bwd, "v", "s")["backwards"]
    assert list(b["kernels"]) == [1] and list(b["other_thread_launches"]) == [1]
