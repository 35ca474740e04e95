"""The completeness rule, alone: which profiled forwards (and backwards) of one trace are whole.

A capture reads its own trace back and applies this rule before it reports ``ok`` (its self-check,
:func:`attnprof.measure.capture.check_own_trace`); extract applies the same rule to every table it writes
(:mod:`attnprof.analysis.tables`, :mod:`attnprof.analysis.backward`). It lives in a module of its own, which
imports only the trace reader, so that the capture's rerun triggers (its import closure, declared as inputs of
rule capture) hold only the code the capture process runs: an edit of the statistics, the columns or the report
recaptures nothing.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import re

import numpy as np
import pandas as pd

from attnprof.analysis.trace import (assign_forward, busy_time, cpu_ops, events_frame, flow_finishes, forward_ranges,
                                     gpu_events, launches)
from attnprof.model.names import backward_range_name


FORWARD_COLUMNS = [
    "variant", "shape_key", "forward", "cpu_us", "device_us", "device_busy_us", "device_span_us", "kernels", "memcpy", "memset",
    "launch_calls", "launches_without_gpu_event", "gpu_events_without_launch", "duplicate_gpu_events", "duplicate_launches",
    "bad_time_events", "stream_overlap_events", "graph_launches", "range_ok", "complete", "timing_complete", "signature",
    "unattributed_gpu_events",
]


#: Fewest complete forwards a capture must have for its numbers to be published (the study
#: profiled 3 active steps); config key ``profiler.min_complete_forwards``.
DEFAULT_MIN_COMPLETE_FORWARDS = 3


def completeness(ranges: pd.DataFrame, gpu: pd.DataFrame, api: pd.DataFrame, expect_gpu: bool = False) -> pd.DataFrame:
    """Per forward (index = forward number), from the frames of :func:`analyse_trace` (``ranges``,
    ``gpu``, ``api``):

    - launch_calls: API calls that enqueue GPU work, whatever their name (``api["enqueues"]``,
      :func:`attnprof.analysis.trace.enqueues_gpu_work`);
    - launches_without_gpu_event: of those, calls whose correlation id has no kernel, memcpy or
      memset event in the trace (Kineto lost the GPU records);
    - gpu_events_without_launch: GPU events with no launch record whose own External id names an
      aten op of this forward (Kineto lost the CPU-side record);
    - duplicate_gpu_events: the forward's GPU events that share a correlation id with another;
    - duplicate_launches: the forward's launch calls that share a correlation id with another launch
      call of the trace (each launch has its own id; a reused one can hide a lost GPU event behind
      the other launch's);
    - bad_time_events: the forward's GPU events with impossible times (``time_ok`` in
      :func:`attnprof.analysis.trace.gpu_events`, same-stream overlaps included);
    - stream_overlap_events: of those, events that overlap another GPU event on their stream;
    - graph_launches: the forward's launch calls that replay a CUDA graph (one call, the graph's
      several GPU events under its correlation id, each counted; ``api["graph_launch"]``);
    - range_ok: the forward's range has valid times and overlaps no other (forward_ranges);
    - complete: range_ok, and no lost, orphaned or duplicate records (GPU events or launches), and -- when
      ``expect_gpu`` -- at least one GPU event (on a GPU, a forward with no recorded GPU
      activity at all is lost, not empty);
    - timing_complete: complete, and every GPU event has valid times.

    Completeness rule: only complete forwards enter counts; only timing-complete forwards
    enter device times."""
    fwd = pd.Index(ranges["forward"], name="forward")
    gpu_corr = gpu["correlation"].dropna()
    enqueues, graph = api["enqueues"].astype(bool), api["graph_launch"].astype(bool)
    launch = api[(api["forward"] >= 0) & enqueues]
    lost = launch[~launch["correlation"].isin(gpu_corr).fillna(False).astype(bool)]
    reused = api.loc[enqueues, "correlation"].dropna()
    reused = set(reused[reused.duplicated(keep=False)])
    inside = gpu[gpu["forward"] >= 0]

    def per_forward(frame: pd.DataFrame, key: str = "forward") -> pd.Series:
        return frame.groupby(key).size().reindex(fwd, fill_value=0).astype(int)

    out = pd.DataFrame(index=fwd)
    out["launch_calls"] = per_forward(launch)
    out["launches_without_gpu_event"] = per_forward(lost)
    out["gpu_events_without_launch"] = per_forward(gpu[gpu["orphan_forward"] >= 0], "orphan_forward")
    out["duplicate_gpu_events"] = per_forward(inside[inside["duplicate"]])
    out["duplicate_launches"] = per_forward(launch[launch["correlation"].isin(reused)])
    out["bad_time_events"] = per_forward(inside[~inside["time_ok"]])
    out["stream_overlap_events"] = per_forward(inside[inside["stream_overlap"].astype(bool)])
    out["graph_launches"] = per_forward(launch[graph[launch.index]])
    out["range_ok"] = ranges.set_index("forward")["range_ok"].reindex(fwd).astype(bool)
    out["complete"] = (out["range_ok"] & (out["launches_without_gpu_event"] == 0) & (out["gpu_events_without_launch"] == 0)
                       & (out["duplicate_gpu_events"] == 0) & (out["duplicate_launches"] == 0))
    if expect_gpu:
        out["complete"] &= per_forward(inside) > 0
    out["timing_complete"] = out["complete"] & (out["bad_time_events"] == 0)
    return out


def analyse_trace(trace: dict, range_name: str, expect_gpu: bool | None = None) -> dict[str, pd.DataFrame]:
    """Parse a trace once; return frames ``ranges``, ``gpu``, ``api``, ``ops`` (see
    :mod:`attnprof.analysis.trace`) and ``completeness`` (:func:`completeness`). ``expect_gpu``: the
    capture ran on a GPU, so a forward without any GPU event is incomplete (default: the
    trace has ``deviceProperties``). Raises TraceError only through the caller's load."""
    events = events_frame(trace)
    frames = _pass_frames(events, forward_ranges(events, range_name), flow_finishes(trace))
    if expect_gpu is None:
        expect_gpu = bool(trace.get("deviceProperties"))
    frames["completeness"] = completeness(frames["ranges"], frames["gpu"], frames["api"], expect_gpu)
    return frames


def _pass_frames(events: pd.DataFrame, ranges: pd.DataFrame, flows: pd.DataFrame, assign=assign_forward) -> dict:
    """The frames ``ranges``, ``gpu``, ``api`` and ``ops`` of one pass's ``ranges`` (``assign``: the rule that maps
    an event to a range, as in :func:`attnprof.analysis.trace.launches`)."""
    return {"ranges": ranges, "gpu": gpu_events(events, ranges, assign), "api": launches(events, ranges, assign, flows),
            "ops": cpu_ops(events, ranges, assign)}


def forward_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """One row per profiled forward: cpu_us (host time of the forward's range), device_us
    (sum of its kernel+memcpy+memset durations, valid-time events only), device_busy_us (the
    time those events kept the GPU busy: the union of their intervals, :func:`attnprof.analysis.trace.busy_time`;
    below device_us only where events overlap on different streams), device_span_us
    (first start to last end of its valid-time GPU events), counts per category (every GPU
    event, bad times included), and the completeness columns of :func:`completeness`
    (launch_calls, launches_without_gpu_event, bad_time_events, stream_overlap_events,
    graph_launches, complete, timing_complete). All times in us.
    unattributed_gpu_events: trace-wide GPU events outside every forward, same value on
    every row, normally 0."""
    ranges, gpu = frames["ranges"], frames["gpu"]
    if ranges.empty:
        return pd.DataFrame(columns=FORWARD_COLUMNS)
    inside = gpu[gpu["forward"] >= 0]
    ok = inside[inside["time_ok"]]
    valid = ok.groupby("forward")
    counts = inside.groupby(["forward", "category"]).size().unstack(fill_value=0)
    table = pd.DataFrame({"variant": variant, "shape_key": shape_key, "forward": ranges["forward"], "cpu_us": ranges["cpu_us"]})
    table["device_us"] = table["forward"].map(valid["dur"].sum()).fillna(0.0)
    table["device_busy_us"] = table["forward"].map(busy_time(ok["ts"], ok["dur"], ok["forward"])).astype(float).fillna(0.0)
    table["device_span_us"] = table["forward"].map(valid["end"].max() - valid["ts"].min()).fillna(0.0)
    for cat in ("kernel", "memcpy", "memset"):
        col = "kernels" if cat == "kernel" else cat
        table[col] = table["forward"].map(counts[cat] if cat in counts else {}).fillna(0).astype(int)
    comp = frames["completeness"]
    for col in comp.columns:
        table[col] = table["forward"].map(comp[col]).values
    # what the forward ran, as a short hash of its sorted GPU event names: forwards with equal
    # counts but different kernels are told apart (forward_groups)
    names = inside.groupby("forward")["name"].apply(lambda n: hashlib.sha1("\n".join(sorted(n)).encode()).hexdigest()[:12])
    table["signature"] = table["forward"].map(names).astype(object).fillna("")
    table["unattributed_gpu_events"] = int(((gpu["forward"] < 0) & (gpu["orphan_forward"] < 0)).sum())
    return table[FORWARD_COLUMNS]


def _ranges_text(forwards: list[int]) -> str:
    """'0-5, 8' for [0, 1, 2, 3, 4, 5, 8]: each run of consecutive numbers (a constant number less its place)."""
    runs = [[f for _, f in run] for _, run in itertools.groupby(enumerate(forwards), lambda p: p[1] - p[0])]
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def forward_groups(forwards: pd.DataFrame) -> list[dict]:
    """Complete forwards grouped by their (kernels, memcpy, memset) counts, largest group
    first: each {kernels, memcpy, memset, forwards (how many), forward_ids, device_ms (median
    over the group's timing-complete forwards, None if none)}. One group when all forwards
    launch the same work."""
    fw = forwards[forwards["complete"].astype(bool)]
    signature = pd.Series(fw.get("signature", ""), index=fw.index, dtype=object)  # all-NaN on a CPU run
    fw = fw.assign(signature=signature.fillna("").astype(str))
    groups = []
    for (kern, mcp, mst, sig), g in fw.groupby(["kernels", "memcpy", "memset", "signature"]):
        timed = g[g["timing_complete"].astype(bool)]["device_us"]
        groups.append({"kernels": int(kern), "memcpy": int(mcp), "memset": int(mst), "forwards": len(g),
                       "forward_ids": [int(i) for i in g["forward"]], "signature": sig,
                       "device_ms": float(timed.median() / 1e3) if len(timed) else None})
    return sorted(groups, key=lambda g: (-g["forwards"], g["kernels"], g["forward_ids"][0]))


def describe_groups(groups: list[dict]) -> str:
    """'5 kernels + 1 memcpy + 1 memset (1.0773 ms) in 5 forwards; 6 kernels ... in 5'."""
    def one(g):
        work = f"{g['kernels']} kernel{'s' if g['kernels'] != 1 else ''}"
        work += f" + {g['memcpy']} memcpy" if g["memcpy"] else ""
        work += f" + {g['memset']} memset" if g["memset"] else ""
        ms = f" ({g['device_ms']:.4f} ms)" if g["device_ms"] is not None else ""
        return f"{work}{ms} in {g['forwards']} forward{'s' if g['forwards'] != 1 else ''}"
    same_counts = len({(g["kernels"], g["memcpy"], g["memset"]) for g in groups}) < len(groups)
    return "; ".join(one(g) for g in groups) + ("; forwards with the same counts launched different kernels" if same_counts else "")


def assess_forwards(forwards: pd.DataFrame, expected: int | None, minimum: int = DEFAULT_MIN_COMPLETE_FORWARDS) -> dict:
    """Apply the completeness rule to a forward table (:func:`forward_table`).

    ``expected``: forwards the profiler schedule asked for (``active``; None: those present).
    Returns forwards_expected, forwards_profiled (present in the trace), forwards_complete,
    forwards_timed (complete with valid times), incomplete_forwards (e.g. '0-5'),
    bad_time_events, groups (:func:`forward_groups`), note (one sentence per defect, '' when
    none) and sufficient (at least ``minimum`` complete forwards)."""
    present = len(forwards)
    expected = present if expected is None else int(expected)
    if not present:  # a capture whose trace holds no forward (a table of no rows may lack every column)
        forwards = pd.DataFrame({"forward": [], "complete": [], "timing_complete": [], "bad_time_events": []})
    complete = forwards["complete"].astype(bool)
    timed = forwards["timing_complete"].astype(bool)
    incomplete = [int(f) for f in forwards.loc[~complete, "forward"]]
    bad = int(forwards["bad_time_events"].sum())
    groups = forward_groups(forwards) if present else []
    notes = [f"{present} of {expected} profiled forwards are in the trace"] if present != expected else []
    if incomplete:
        notes.append(_incomplete_note(forwards.loc[~complete], incomplete, present))
    if bad:
        notes.append(_bad_times_note(forwards, bad))
    notes += _more_notes(forwards, timed) if present else []
    if len(groups) > 1:
        notes.append("forwards differ: " + describe_groups(groups))
    notes += _stray_notes(forwards) if present else []
    n_complete = int(complete.sum())
    return {"forwards_expected": expected, "forwards_profiled": present, "forwards_complete": n_complete,
            "forwards_timed": int(timed.sum()), "incomplete_forwards": _ranges_text(incomplete), "bad_time_events": bad,
            "groups": groups, "note": "; ".join(notes), "sufficient": n_complete >= minimum, "minimum": minimum}


def _stray_notes(forwards: pd.DataFrame) -> list[str]:
    """The note's sentence on the trace's GPU events launched outside every forward range (or with no launch
    record; forward-table column ``unattributed_gpu_events``): not counted, so the forwards may miss work."""
    stray = int(forwards["unattributed_gpu_events"].max()) if "unattributed_gpu_events" in forwards else 0
    return [f"{stray} GPU event{'s' if stray > 1 else ''} of the trace launched outside every forward range "
            "(or with no launch record): not counted, the forwards may miss work"] if stray else []


#: Why a forward is incomplete, by forward-table column (:func:`assess_forwards`' note).
_INCOMPLETE_WHY = (("launches_without_gpu_event", "launches without a GPU event"),
                   ("gpu_events_without_launch", "GPU events without their launch record"),
                   ("duplicate_gpu_events", "GPU events sharing one launch's correlation id"),
                   ("duplicate_launches", "launch calls sharing a correlation id with another launch"),
                   # backward ranges only (attnprof.analysis.backward): launches on another thread in two windows
                   ("ambiguous_launches", "launches on another thread inside the windows of several ranges"))


def _incomplete_note(bad_rows: pd.DataFrame, incomplete: list[int], present: int) -> str:
    """The note's sentence on the incomplete forwards (``bad_rows``: their rows; ``incomplete``: their numbers)."""
    why = [f"{n} {words}" for col, words in _INCOMPLETE_WHY if (n := int(bad_rows[col].sum()) if col in bad_rows else 0)]
    n_ranges = int((~bad_rows["range_ok"].astype(bool)).sum()) if "range_ok" in bad_rows else 0
    if n_ranges:
        why.append(f"{n_ranges} forward ranges with invalid times or overlapping another")
    return (f"{len(incomplete)} of {present} forwards incomplete (forward{'s' if len(incomplete) > 1 else ''} "
            f"{_ranges_text(incomplete)}: {', '.join(why) or 'no GPU activity recorded'}), left out of every statistic")


def _bad_times_note(forwards: pd.DataFrame, bad: int) -> str:
    """The note's sentence on the ``bad`` GPU events with impossible times."""
    bad_fwd = [int(f) for f in forwards.loc[forwards["bad_time_events"] > 0, "forward"]]
    return (f"{bad} GPU event{'s' if bad > 1 else ''} with impossible times (ts or duration missing, <= 0 or not "
            f"finite, starting before its launch, or ending long after the trace) in forward{'s' if len(bad_fwd) > 1 else ''} "
            f"{_ranges_text(bad_fwd)}: counted, but those forwards are left out of device times")


#: Cross-stream overlap worth a word in the note: the busy time is this much below the summed durations.
BUSY_NOTE_FRACTION = 1e-3


def _more_notes(forwards: pd.DataFrame, timed: pd.Series) -> list[str]:
    """The sentences of :func:`assess_forwards`' note about same-stream overlaps, CUDA-graph
    replays, GPU events that overlap on different streams (the sum of durations and the busy time
    both stated, ms per forward, medians over the timed forwards) and launches from threads that
    are not the range's (backward ranges: ``other_thread_launches``); [] when none applies. Columns
    absent from ``forwards`` (tables written before they existed) say nothing."""
    notes = []

    def where(mask) -> str:
        ids = [int(f) for f in forwards.loc[mask, "forward"]]
        return f"forward{'s' if len(ids) > 1 else ''} {_ranges_text(ids)}"

    col = forwards.get("stream_overlap_events")
    if col is not None and int(col.sum()):
        notes.append(f"{int(col.sum())} of those GPU events overlap another GPU event on the same stream ({where(col > 0)}): a stream "
                     "runs its work in order, so their times are impossible and not summed")
    col = forwards.get("graph_launches")
    if col is not None and int(col.sum()):
        notes.append(f"{where(col > 0)} replay a CUDA graph ({int(col.sum())} graph launches): every GPU event of a replay "
                     "carries its launch's correlation id and is counted")
    if "device_busy_us" in forwards and timed.any():
        t = forwards[timed.to_numpy(bool)]
        over = (t["device_us"] - t["device_busy_us"]) > BUSY_NOTE_FRACTION * t["device_us"]
        if over.any():
            notes.append(f"GPU events overlap on different streams ({where(forwards.index.isin(t.index[over.to_numpy()]))}): "
                         f"the device time sums their durations, {t['device_us'].median() / 1e3:.4f} ms per forward, while "
                         f"the GPU was busy {t['device_busy_us'].median() / 1e3:.4f} ms (device_busy_us)")
    col = forwards.get("other_thread_launches")
    if col is not None and int(col.sum()):
        notes.append(f"{int(col.sum())} launches from threads that are neither the range's nor the autograd engine's inside "
                     f"the windows of {where(col > 0)}: not counted (their GPU events are outside every range)")
    return notes


def incomplete_reason(trace_path, verdict: dict) -> str:
    """Reason of an ``incomplete_trace`` status: the file, both counts and the defects."""
    n = verdict["forwards_complete"]
    return (f"{trace_path}: {n} complete forward{'s' if n != 1 else ''} of {verdict['forwards_expected']} profiled, "
            f"fewer than the minimum of {verdict['minimum']} (profiler.min_complete_forwards); {verdict['note']}")


BACKWARD_COLUMNS = ["backward" if c == "forward" else c for c in FORWARD_COLUMNS] + ["ambiguous_launches",
                                                                                    "other_thread_launches"]


#: The aten-level op the autograd engine runs for every node of the graph it evaluates.
ENGINE_OP = "autograd::engine::evaluate_function"


def backward_threads(events: pd.DataFrame, ranges: pd.DataFrame) -> list[frozenset]:
    """Per backward range (row of ``ranges``, in order): the threads other than the range's own
    that may run its work -- the autograd engine's. The engine threads are identified from the
    trace: the threads that run an ``ENGINE_OP`` op (``autograd::engine::evaluate_function: ...``,
    a ``cpu_op``) starting inside the window [ts, end] of some backward range (``range_ok`` or not)
    other than one of their own. The engine keeps one thread per device for every backward of the
    process, so each range gets them all (less its own thread). A trace that holds no such op
    anywhere (hand-built, or from a profiler that does not record them) cannot name the engine's
    threads: there the thread that runs the most aten ops inside other threads' backward windows
    stands for them (the engine runs the whole backward; a helper thread a few ops), and the other
    threads' launches are counted apart. A thread that only launches (no op) is never the engine's."""
    ops = events[events["cat"] == "cpu_op"]
    engine = ops[ops["name"].astype(str).str.startswith(ENGINE_OP)]
    marked = ops if engine.empty else engine
    t, threads = marked["ts"].to_numpy(float), marked["tid"].to_numpy(object)
    found: collections.Counter = collections.Counter()
    with np.errstate(invalid="ignore"):
        for r in ranges.itertuples():
            found.update(threads[(t >= r.ts) & (t <= r.end) & (threads != r.tid)])
    if engine.empty and len(found) > 1:
        # no engine op names the engine: of the threads running ops in the windows, the one that runs the most
        # (the engine runs the whole backward; a helper thread a few ops); the others' launches are counted apart
        # (other_thread_launches) and named in the backward's note
        top = max(found.values())
        found = {x: n for x, n in found.items() if n == top}
    return [frozenset(set(found) - {r.tid}) for r in ranges.itertuples()]


def _cross_thread(ts: pd.Series, tid: pd.Series, ranges: pd.DataFrame,
                  belonging: bool = True) -> tuple[np.ndarray, np.ndarray, dict]:
    """For each event: the backward range (``range_ok`` ones) on *another* thread whose window holds
    its ts (-1: none or several), how many such windows hold it, and the ranges' masks. With
    ``belonging`` only events of the range's engine threads (column ``threads``, :func:`backward_threads`,
    when ``ranges`` has it) count; with ``belonging`` False, only events of the other threads do."""
    t = ts.to_numpy(float)
    threads = tid.to_numpy(object)
    index = np.full(len(t), -1, dtype="int64")
    count = np.zeros(len(t), dtype="int64")
    masks = {}
    good = ranges[ranges["range_ok"]]
    with np.errstate(invalid="ignore"):
        for r in good.itertuples():
            # without engine threads every thread counts as the range's: all belong, none is another's
            engine = np.array([x in r.threads for x in threads], dtype=bool) if "threads" in good else np.ones(len(t), bool)
            m = (threads != r.tid) & (t >= r.ts) & (t <= r.end) & (engine == belonging)
            masks[int(r.forward)] = m
            count += m
            index = np.where(m, int(r.forward), index)
    return np.where(count == 1, index, -1), count, masks


def assign_backward(ts: pd.Series, tid: pd.Series, ranges: pd.DataFrame) -> pd.Series:
    """Index of the backward range that holds each (ts, tid) event, or -1 (module docstring): the
    same-thread rule first, then the window of a backward range on another thread that belongs to
    it (``ranges["threads"]``, when set: :func:`backward_threads`), for events that no forward range
    (``ranges.attrs["forward_ranges"]``, when set) holds on their own thread and that exactly one
    window holds."""
    out = assign_forward(ts, tid, ranges)
    index, _, _ = _cross_thread(ts, tid, ranges)
    free = (out.to_numpy() < 0) & ~_in_forward(ts, tid, ranges)
    return pd.Series(np.where(free, index, out.to_numpy()), index=ts.index, dtype="int64")


def _in_forward(ts: pd.Series, tid: pd.Series, ranges: pd.DataFrame) -> np.ndarray:
    """Per (ts, tid) event: whether a forward range of its own thread (``ranges.attrs["forward_ranges"]``, when
    set) holds it."""
    fwd = ranges.attrs.get("forward_ranges")
    return assign_forward(ts, tid, fwd).to_numpy() >= 0 if fwd is not None and len(fwd) else np.zeros(len(ts), bool)


def _window_launches(api: pd.DataFrame, ranges: pd.DataFrame, belonging: bool, least: int = 1) -> pd.Series:
    """Per backward range (index = range number): the calls of ``api`` that enqueue GPU work (``enqueues``), that no
    range holds and no forward range of their own thread holds, inside the range's window on another thread
    (:func:`_cross_thread`, ``belonging``) and inside at least ``least`` such windows."""
    out = pd.Series(0, index=pd.Index(ranges["forward"], name="forward"), dtype="int64")
    launch = api[(api["forward"] < 0) & api["enqueues"].astype(bool)]
    _, count, masks = _cross_thread(launch["ts"], launch["tid"], ranges, belonging)
    free = ~_in_forward(launch["ts"], launch["tid"], ranges) & (count >= least)
    for r, m in masks.items():
        out[r] = int((m & free).sum())
    return out


def ambiguous_launches(api: pd.DataFrame, ranges: pd.DataFrame) -> pd.Series:
    """Per backward range (index = range number): calls that enqueue GPU work (``api["enqueues"]``)
    left unattributed because the windows of two or more backward ranges on other threads, each
    with the call's thread among its engine threads, hold them (and no range of their own thread
    or forward does)."""
    return _window_launches(api, ranges, belonging=True, least=2)


def other_thread_launches(api: pd.DataFrame, ranges: pd.DataFrame) -> pd.Series:
    """Per backward range (index = range number): calls that enqueue GPU work, inside the range's
    window, from a thread that is neither the range's nor one of its engine threads
    (:func:`backward_threads`) and not inside a forward range of their own thread: left out of
    every range (module docstring). 0 everywhere when ``ranges`` has no ``threads`` column."""
    return _window_launches(api, ranges, belonging=False)


def _mark_pass_overlaps(fwd_ranges: pd.DataFrame, bwd_ranges: pd.DataFrame) -> None:
    """A forward range and a backward range on one thread that overlap in time (one inside the
    other, or crossing): neither can be told apart from the other's work, so both get
    ``range_ok`` False (incomplete, left out of every statistic; the trace note says so). In
    place. The capture never nests them: each step closes its forward range before it opens the
    backward's."""
    for tid in set(fwd_ranges["tid"]) & set(bwd_ranges["tid"]):
        f = fwd_ranges[fwd_ranges["tid"] == tid]
        b = bwd_ranges[bwd_ranges["tid"] == tid]
        fs, fe = f["ts"].to_numpy(float)[:, None], f["end"].to_numpy(float)[:, None]
        bs, be = b["ts"].to_numpy(float)[None, :], b["end"].to_numpy(float)[None, :]
        overlap = (np.maximum(fs, bs) < np.minimum(fe, be))  # [forward, backward] pairs sharing time
        fwd_ranges.loc[f.index[overlap.any(axis=1)], "range_ok"] = False
        bwd_ranges.loc[b.index[overlap.any(axis=0)], "range_ok"] = False


def analyse_passes(trace: dict, range_name: str, backward_name: str | None = None,
                   expect_gpu: bool | None = None) -> tuple[dict, dict]:
    """Parse a trace once into the frames of both passes, ``(forward, backward)``, each as
    :func:`attnprof.analysis.tables.analyse_trace` returns them (``forward`` column = range number of that
    pass), so that the table functions serve both. The forward frames equal analyse_trace's except
    that GPU events attributed to a backward range are left out of them (so they are not counted as
    launched outside every forward); the backward frames leave out the forwards' GPU events, and
    their completeness has ``ambiguous_launches``. ``backward_name``: default
    :func:`backward_range_name`; a trace without such ranges gives empty backward frames."""
    events = events_frame(trace)
    flows = flow_finishes(trace)
    if expect_gpu is None:
        expect_gpu = bool(trace.get("deviceProperties"))
    fwd_ranges = forward_ranges(events, range_name)
    bwd_ranges = forward_ranges(events, backward_name or backward_range_name(range_name))
    _mark_pass_overlaps(fwd_ranges, bwd_ranges)
    bwd_ranges["threads"] = pd.Series(backward_threads(events, bwd_ranges), index=bwd_ranges.index, dtype=object)
    bwd_ranges.attrs["forward_ranges"] = fwd_ranges
    fwd, bwd = _pass_frames(events, fwd_ranges, flows), _pass_frames(events, bwd_ranges, flows, assign_backward)
    # both gpu frames hold the same events in the same order (same events, same sort): keep each
    # pass's own, and the stray ones in both
    fg, bg = fwd["gpu"], bwd["gpu"]
    assert len(fg) == len(bg) and fg["ts"].equals(bg["ts"]), "GPU events differ between the passes"
    in_fwd = ((fg["forward"] >= 0) | (fg["orphan_forward"] >= 0)).to_numpy()
    in_bwd = ((bg["forward"] >= 0) | (bg["orphan_forward"] >= 0)).to_numpy()
    fwd["gpu"] = fg[~(in_bwd & ~in_fwd)].reset_index(drop=True)
    bwd["gpu"] = bg[~(in_fwd & ~in_bwd)].reset_index(drop=True)
    fwd["completeness"] = completeness(fwd_ranges, fwd["gpu"], fwd["api"], expect_gpu)
    comp = completeness(bwd_ranges, bwd["gpu"], bwd["api"], expect_gpu)
    comp["ambiguous_launches"] = ambiguous_launches(bwd["api"], bwd_ranges).reindex(comp.index, fill_value=0)
    comp["other_thread_launches"] = other_thread_launches(bwd["api"], bwd_ranges).reindex(comp.index, fill_value=0)
    comp["complete"] &= comp["ambiguous_launches"] == 0
    comp["timing_complete"] = comp["complete"] & (comp["bad_time_events"] == 0)
    bwd["completeness"] = comp
    return fwd, bwd


def backward_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """One row per backward range (:data:`BACKWARD_COLUMNS`): :func:`attnprof.analysis.tables.forward_table`
    of the backward frames, its ``forward`` column named ``backward``, plus ``ambiguous_launches`` and
    ``other_thread_launches`` (launches from threads that do not belong to the backward inside its
    window, left out)."""
    table = forward_table(frames, variant, shape_key)
    for col in ("ambiguous_launches", "other_thread_launches"):
        table[col] = table["forward"].map(frames["completeness"][col]).fillna(0).astype(int)
    return table.rename(columns={"forward": "backward"})[BACKWARD_COLUMNS]


_FORWARD_WORD = re.compile(r"\bforward(s?)\b")


def as_backward(note: str) -> str:
    """A note of :func:`attnprof.analysis.tables.assess_forwards` about backward ranges, in their words."""
    return _FORWARD_WORD.sub(r"backward\1", note)
