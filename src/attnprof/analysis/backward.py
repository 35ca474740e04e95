"""The backward pass: its ranges in the trace, their attribution, tables and summary columns.

Config ``passes`` (default ``[forward]``, the study's setting) adds ``backward``: every profiled
step then runs the forward with grad enabled inside the forward range (``profiler.range_name``,
default ``attn_fwd``) and its backward inside a range of its own (:func:`attnprof.model.names.backward_range_name`,
``attn_bwd``); see :func:`attnprof.measure.capture._profile_phase`. In such a run the forward numbers are
those of a *forward with grad*: the forward saves what its backward needs (the flash and
efficient kernels also write the logsumexp, the naive path keeps its softmax), so its kernels can
differ from the ``no_grad`` forward of a forward-only run, whose numbers stay as they were. The
independent timing (``timed_ms_*``, ``graph_ms_*``) and the float64 check stay forward-only,
under ``no_grad``, in both cases.

Attribution. The record_function range of a backward is opened on the thread that calls
``torch.autograd.grad``, but autograd runs the CUDA nodes on its own engine thread (one per
device): their aten ops and launch calls carry another ``tid``. A GPU event is attributed as
everywhere else -- GPU event -> correlation id -> its runtime launch call -> the launch's (ts, tid)
-- and (ts, tid) -> backward range by :func:`assign_backward`:

* same thread: the range of that thread that contains ts (the forward rule,
  :func:`attnprof.analysis.trace.assign_forward`);
* another thread that belongs to the backward -- an autograd engine thread (:func:`backward_threads`:
  a thread that runs ``autograd::engine::evaluate_function`` ops inside another thread's backward
  range) -- the backward range whose window [ts, end] contains ts (the calling thread is blocked
  inside ``autograd.grad`` while the engine runs, so the window bounds the work),
  unless the event lies inside a forward range of its own thread (a forward's work is never a
  backward's). The rule is for backward ranges only; forward ranges keep the same-thread rule.
  A launch inside the windows of two or more backward ranges (possible only when backwards of
  different threads overlap) is attributed to none; each of those ranges counts it in
  ``ambiguous_launches`` and is incomplete.
* any other thread (a helper thread, a data loader, another stream's worker): never the
  backward's, even inside its window. Its launches are left out (their GPU events count as
  launched outside every range) and each range whose window holds one counts it in
  ``other_thread_launches``, which the note states; the range stays complete (its own work is).

The completeness rule of :func:`attnprof.analysis.tables.completeness` applies to backward ranges as it
does to forwards (every launch finds its GPU event, no orphaned or duplicate GPU records, some
GPU activity on a GPU, valid times for device times), plus ``ambiguous_launches == 0``.

Outputs (per capture, next to the forward tables): ``backwards.csv`` (one row per backward
range, :data:`BACKWARD_COLUMNS`: the forward table's columns, ``forward`` renamed ``backward``,
plus ``ambiguous_launches`` and ``other_thread_launches``), ``kernels_backward.csv`` and ``ops_backward.csv`` (the kernel and
op tables of the backward ranges, ``*_per_forward`` columns renamed ``*_per_backward``). All three
are header-only when the capture profiled no backward. summary.csv gets
:data:`attnprof.analysis.tables.BACKWARD_SUMMARY_COLUMNS`, empty unless the backward was profiled.

Kept apart from the forward modules so that a forward-only run's outputs are byte for byte what
they were, and the findings package can call :func:`backward_kernels_finding` without this
module reaching into it.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from attnprof.model.names import backward_range_name
from attnprof.analysis.tables import (BACKWARD_BYTE_RATIO, BACKWARD_FLOP_RATIO, BACKWARD_SUMMARY_COLUMNS, DEFAULT_MIN_COMPLETE_FORWARDS,
                                     FORWARD_COLUMNS, KERNEL_COLUMNS, compile_columns, assess_forwards, backward_tflops, completeness,
                                     forward_table, kernel_table, op_table)
from attnprof.analysis.trace import assign_forward, cpu_ops, events_frame, flow_finishes, forward_ranges, gpu_events, is_launch_api, launches

PASSES = ("forward", "backward")
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
    found: dict = {}
    with np.errstate(invalid="ignore"):
        for r in ranges.itertuples():
            inside = (t >= r.ts) & (t <= r.end) & (threads != r.tid)
            for x in threads[inside]:
                found[x] = found.get(x, 0) + 1
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
    good = ranges[ranges["range_ok"]] if "range_ok" in ranges else ranges
    with np.errstate(invalid="ignore"):
        for r in good.itertuples():
            m = (threads != r.tid) & (t >= r.ts) & (t <= r.end)
            if "threads" in good:
                engine = np.array([x in r.threads for x in threads], dtype=bool)
                m &= engine if belonging else ~engine
            elif not belonging:
                m &= False
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
    fwd = ranges.attrs.get("forward_ranges")
    in_forward = assign_forward(ts, tid, fwd).to_numpy() >= 0 if fwd is not None and len(fwd) else np.zeros(len(ts), bool)
    index, _, _ = _cross_thread(ts, tid, ranges)
    free = (out.to_numpy() < 0) & ~in_forward
    return pd.Series(np.where(free, index, out.to_numpy()), index=ts.index, dtype="int64")


def _unattributed_launches(api: pd.DataFrame, ranges: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The calls of ``api`` that enqueue GPU work (``enqueues``, else a name of
    :data:`attnprof.analysis.trace.LAUNCH_API`) and that no range holds, with a mask of those that a forward
    range of their own thread holds."""
    enqueues = api["enqueues"].astype(bool) if "enqueues" in api else is_launch_api(api["name"])
    launch = api[(api["forward"] < 0) & enqueues]
    fwd = ranges.attrs.get("forward_ranges")
    in_forward = (assign_forward(launch["ts"], launch["tid"], fwd).to_numpy() >= 0 if fwd is not None and len(fwd)
                  and len(launch) else np.zeros(len(launch), bool))
    return launch, in_forward


def ambiguous_launches(api: pd.DataFrame, ranges: pd.DataFrame) -> pd.Series:
    """Per backward range (index = range number): calls that enqueue GPU work (``api["enqueues"]``)
    left unattributed because the windows of two or more backward ranges on other threads, each
    with the call's thread among its engine threads, hold them (and no range of their own thread
    or forward does)."""
    out = pd.Series(0, index=pd.Index(ranges["forward"], name="forward"), dtype="int64")
    launch, in_forward = _unattributed_launches(api, ranges)
    if launch.empty or ranges.empty:
        return out
    _, count, masks = _cross_thread(launch["ts"], launch["tid"], ranges)
    ambiguous = (count >= 2) & ~in_forward
    for r, m in masks.items():
        out[r] = int((m & ambiguous).sum())
    return out


def other_thread_launches(api: pd.DataFrame, ranges: pd.DataFrame) -> pd.Series:
    """Per backward range (index = range number): calls that enqueue GPU work, inside the range's
    window, from a thread that is neither the range's nor one of its engine threads
    (:func:`backward_threads`) and not inside a forward range of their own thread: left out of
    every range (module docstring). 0 everywhere when ``ranges`` has no ``threads`` column."""
    out = pd.Series(0, index=pd.Index(ranges["forward"], name="forward"), dtype="int64")
    launch, in_forward = _unattributed_launches(api, ranges)
    if launch.empty or ranges.empty:
        return out
    _, _, masks = _cross_thread(launch["ts"], launch["tid"], ranges, belonging=False)
    for r, m in masks.items():
        out[r] = int((m & ~in_forward).sum())
    return out


def _mark_pass_overlaps(fwd_ranges: pd.DataFrame, bwd_ranges: pd.DataFrame) -> None:
    """A forward range and a backward range on one thread that overlap in time (one inside the
    other, or crossing): neither can be told apart from the other's work, so both get
    ``range_ok`` False (incomplete, left out of every statistic; the trace note says so). In
    place. The capture never nests them: each step closes its forward range before it opens the
    backward's."""
    if fwd_ranges.empty or bwd_ranges.empty:
        return
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
    fwd = {"ranges": fwd_ranges, "gpu": gpu_events(events, fwd_ranges), "api": launches(events, fwd_ranges, flows=flows),
           "ops": cpu_ops(events, fwd_ranges)}
    bwd = {"ranges": bwd_ranges, "gpu": gpu_events(events, bwd_ranges, assign_backward),
           "api": launches(events, bwd_ranges, assign_backward, flows), "ops": cpu_ops(events, bwd_ranges, assign_backward)}
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


def _per_backward(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(columns=lambda c: c.replace("per_forward", "per_backward"))


def backward_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """One row per backward range (:data:`BACKWARD_COLUMNS`): :func:`attnprof.analysis.tables.forward_table`
    of the backward frames, its ``forward`` column named ``backward``, plus ``ambiguous_launches`` and
    ``other_thread_launches`` (launches from threads that do not belong to the backward inside its
    window, left out)."""
    table = forward_table(frames, variant, shape_key)
    for col in ("ambiguous_launches", "other_thread_launches"):
        values = frames["completeness"].get(col, pd.Series(dtype="int64"))
        table[col] = table["forward"].map(values).fillna(0).astype(int) if len(table) else pd.Series(dtype="int64")
    return table.rename(columns={"forward": "backward"})[BACKWARD_COLUMNS]


def backward_tables(frames: dict, variant: str, shape_key: str) -> dict[str, pd.DataFrame]:
    """The per-capture backward tables: ``backwards``, ``kernels_backward``, ``ops_backward``."""
    return {"backwards": backward_table(frames, variant, shape_key),
            "kernels_backward": _per_backward(kernel_table(frames, variant, shape_key)),
            "ops_backward": _per_backward(op_table(frames, variant, shape_key))}


def empty_backward_tables() -> dict[str, pd.DataFrame]:
    """The backward tables of a capture that profiled no backward: headers only."""
    return {"backwards": pd.DataFrame(columns=BACKWARD_COLUMNS),
            "kernels_backward": _per_backward(pd.DataFrame(columns=KERNEL_COLUMNS)),
            "ops_backward": _per_backward(pd.DataFrame(columns=["variant", "shape_key", "op", "calls_per_forward",
                                                                "calls_min", "calls_max", "mean_us"]))}


_FORWARD_WORD = re.compile(r"\bforward(s?)\b")


def as_backward(note: str) -> str:
    """A note of :func:`attnprof.analysis.tables.assess_forwards` about backward ranges, in their words."""
    return _FORWARD_WORD.sub(r"backward\1", note)


def backward_summary(status: dict, backwards: pd.DataFrame) -> dict:
    """The summary.csv columns of the backward pass (:data:`attnprof.analysis.tables.BACKWARD_SUMMARY_COLUMNS`)
    from a capture's status record and its ``backwards.csv``; all None when the config did not ask
    for the backward. ``backward_status``: the backward's own outcome (``record["passes"]``: ok,
    unsupported, out_of_memory, failed with PyTorch's reason in ``backward_reason``), or
    ``incomplete_trace`` when its trace has fewer complete backwards than
    ``min_complete_forwards``; the forward's numbers are published either way. The counts and
    times follow the forward's rules (:func:`attnprof.analysis.tables.summary_row`): counts from complete
    backwards when they all launched the same work, device times from timing-complete ones (on a
    GPU only), host time of each backward's range from complete ones.

    Also: the gradients' float64 check (``grad_rel_error_dq``/``_dk``/``_dv`` and
    ``grad_rel_error_ok``, from the record's ``grad_rel_error``: phase ``grad_correctness``), published
    whatever the trace (a wrong gradient keeps its times; the findings mark them); the FLOPs and
    minimum bytes of a backward (``backward_gflop``, ``backward_flop_per_byte``:
    :data:`attnprof.analysis.tables.BACKWARD_FLOP_RATIO` and ``BACKWARD_BYTE_RATIO`` times the forward's
    ``forward_flops`` and ``min_bytes``) and ``backward_tflops`` over the device time per backward; a
    compiled variant's first backward call (``compile_backward_first_call_s``, seconds, and
    ``compile_backward_cache``, from the record's ``compile_backward``)."""
    row = dict.fromkeys(BACKWARD_SUMMARY_COLUMNS)
    passes = status.get("passes") or {}
    if "backward" not in passes:
        return row
    bwd = passes["backward"]
    row.update(backward_status=bwd.get("status"), backward_reason=bwd.get("reason") or "")
    grad = status.get("grad_rel_error")
    if isinstance(grad, dict):
        row.update({f"grad_rel_error_{n}": grad.get(n) for n in ("dq", "dk", "dv")},
                   grad_rel_error_ok=status.get("grad_rel_error_ok"))
    if status.get("forward_flops"):
        row["backward_gflop"] = BACKWARD_FLOP_RATIO * status["forward_flops"] / 1e9
        if status.get("min_bytes"):
            row["backward_flop_per_byte"] = BACKWARD_FLOP_RATIO * status["forward_flops"] / (BACKWARD_BYTE_RATIO * status["min_bytes"])
    comp = status.get("compile_backward") if isinstance(status.get("compile_backward"), dict) else {}
    first = compile_columns({"first_call_s": comp.get("first_backward_s"), "cache": comp.get("cache")})
    row.update(compile_backward_first_call_s=first["compile_first_call_s"], compile_backward_cache=first["compile_cache"])
    if status.get("status") != "ok" or bwd.get("status") != "ok":
        return row
    fw = backwards.rename(columns={"backward": "forward"})
    minimum = int(status.get("min_complete_forwards") or DEFAULT_MIN_COMPLETE_FORWARDS)
    verdict = assess_forwards(fw, (status.get("schedule") or {}).get("active"), minimum)
    note = as_backward(verdict["note"])
    row.update(backwards_profiled=verdict["forwards_profiled"], backwards_complete=verdict["forwards_complete"],
               backwards_timed=verdict["forwards_timed"], backward_note=note)
    if not verdict["sufficient"]:
        row.update(backward_status="incomplete_trace",
                   backward_reason=f"{verdict['forwards_complete']} complete backwards of {verdict['forwards_expected']} "
                                   f"profiled, fewer than the minimum of {minimum}; {note}")
        return row
    complete = fw[fw["complete"].astype(bool)]
    cpu_ms = complete["cpu_us"] / 1e3
    row.update(_stats("cpu_ms", cpu_ms))
    groups = verdict["groups"]
    if status.get("device") == "cuda" and len(groups) == 1:
        g = groups[0]
        row.update(kernels_per_backward=g["kernels"], memcpy_per_backward=g["memcpy"], memset_per_backward=g["memset"])
        if verdict["forwards_timed"] >= minimum:
            row.update(_stats("device_ms", complete[complete["timing_complete"].astype(bool)]["device_us"] / 1e3))
            row["backward_tflops"] = backward_tflops(row["backward_gflop"], row["device_ms_per_backward"])
    return row


def _stats(prefix: str, ms: pd.Series) -> dict:
    """<prefix>_per_backward (median), <prefix>_backward_min, _max, _q1, _q3 (pandas' linear quantiles)."""
    return {f"{prefix}_per_backward": ms.median(), f"{prefix}_backward_min": ms.min(), f"{prefix}_backward_max": ms.max(),
            f"{prefix}_backward_q1": ms.quantile(0.25), f"{prefix}_backward_q3": ms.quantile(0.75)}


def backward_kernels_finding(kernels_backward: pd.DataFrame) -> list[dict]:
    """What each variant's backward ran, from the run's ``kernels_backward.csv`` rows (any shapes,
    any variants): per (shape_key, variant) with backward kernels, the ``main`` kernel (largest
    share of backward device time), the ``extra`` kernels besides it (the preprocessing and
    post-processing a fused backward adds -- flash's dot(dO, O) and dQ conversion, say -- or the
    unfused chain of the math path) and the memcpys/memsets, each {kernel, label, category,
    calls_per_backward, us_per_backward, share_pct}, and a ``statement``. Meant for the findings
    (kept here, a plain function over the table, so that the findings package can call it)."""
    out = []
    if kernels_backward.empty:
        return out
    for (shape_key, variant), k in kernels_backward.groupby(["shape_key", "variant"], sort=False):
        k = k.sort_values(["share_pct", "calls_max"], ascending=False, na_position="last")
        rows = [{c: (None if pd.isna(r[c]) else r[c]) for c in ("kernel", "label", "category", "calls_per_backward",
                                                                "us_per_backward", "share_pct")}
                for _, r in k.iterrows()]
        kernels = [r for r in rows if r["category"] == "kernel"]
        if not kernels:
            continue
        main, extra = kernels[0], kernels[1:]
        copies = [r for r in rows if r["category"] != "kernel"]

        def part(r):
            share = f" ({r['share_pct']:.0f} %)" if r["share_pct"] is not None else ""
            return f"{r['label']}{share}"

        statement = (f"{variant} backward: {len(kernels)} kernel{'s' if len(kernels) != 1 else ''}, "
                     f"main {part(main)} of backward device time")
        if extra:
            statement += "; besides it " + ", ".join(part(r) for r in extra)
        if copies:
            statement += "; " + ", ".join(part(r) for r in copies)
        out.append({"shape_key": shape_key, "variant": variant, "main": main, "extra": extra, "copies": copies,
                    "statement": statement})
    return out
