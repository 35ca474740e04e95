"""Kernel, forward and summary tables built from one capture's trace and status.

All times are microseconds in the per-variant tables and milliseconds in summary.csv
(columns documented in docs/results.md). Only forwards inside the profiler's *active*
steps appear in the trace, and each statistic is computed per forward first.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from attnprof.model.columns import columns_of, formulas
from attnprof.model.names import CAPTURE_FILES
from attnprof.analysis.trace import kernel_label
# the completeness rule lives alone (the capture's self-check imports it without this module); its names are
# kept here too, where the table code and its callers have always found them
from attnprof.analysis.completeness import (  # noqa: F401
    DEFAULT_MIN_COMPLETE_FORWARDS, FORWARD_COLUMNS, analyse_trace, assess_forwards, forward_groups, forward_table, incomplete_reason)

#: kernels.csv's columns, in the order of their declarations (attnprof.model.columns).
KERNEL_COLUMNS = list(columns_of("kernels"))
SUMMARY_COLUMNS = [
    "variant", "shape_key", "status", "batch", "heads", "seq_len", "head_dim", "dtype", "causal", "device",
    "kv_heads", "q_len", "causal_alignment",
    "kernels_per_forward", "memcpy_per_forward", "memset_per_forward",
    "device_ms_per_forward", "device_ms_min", "device_ms_max", "device_ms_q1", "device_ms_q3",
    "cpu_ms_per_forward", "cpu_ms_min", "cpu_ms_max", "cpu_ms_q1", "cpu_ms_q3",
    "timed_ms_median", "timed_ms_q1", "timed_ms_q3", "timed_ms_min", "timed_ms_max", "timed_repeats", "timing_method", "host_load_1m",
    "graph_ms_median", "graph_ms_q1", "graph_ms_q3", "graph_ms_min", "graph_ms_max", "graph_error",
    "forwards_expected", "forwards_profiled", "forwards_complete", "forwards_timed", "incomplete_forwards",
    "bad_time_events", "forward_groups", "trace_note",
    "rel_error", "rel_error_ok", "result_note", "checks_missing", "peak_memory_mb", "held_memory_mb", "forward_memory_mb",
    "forward_gflop", "flop_per_byte", "tflops", "tflops_graph", "oom_bytes", "reason",
    "compile_first_call_s", "compile_cache",
]
#: summary.csv columns of the backward pass (config ``passes``; attnprof.analysis.backward.backward_summary): empty
#: when the backward was not profiled. Appended after the forward's, which keep their order.
BACKWARD_SUMMARY_COLUMNS = [
    "backward_status", "backward_reason", "backwards_profiled", "backwards_complete", "backwards_timed",
    "kernels_per_backward", "memcpy_per_backward", "memset_per_backward",
    "device_ms_per_backward", "device_ms_backward_min", "device_ms_backward_max", "device_ms_backward_q1",
    "device_ms_backward_q3", "cpu_ms_per_backward", "cpu_ms_backward_min", "cpu_ms_backward_max",
    "cpu_ms_backward_q1", "cpu_ms_backward_q3", "backward_note",
    "grad_rel_error_dq", "grad_rel_error_dk", "grad_rel_error_dv", "grad_rel_error_ok",
    "backward_gflop", "backward_flop_per_byte", "backward_tflops",
    "compile_backward_first_call_s", "compile_backward_cache",
]
SUMMARY_COLUMNS += BACKWARD_SUMMARY_COLUMNS
#: FLOPs of one backward over its forward's: FlashAttention's accounting, which PyTorch's
#: benchmarks/transformer/sdpa.py (``calculate_tflops(..., is_backward=True)``) and flash-attn's
#: benchmarks/benchmark_flash_attention.py (``flops(..., mode="bwd")``) both use. The backward of
#: attention does five GEMMs of the forward's size where the forward does two -- S = Q K^T recomputed,
#: dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q (Dao 2023, "FlashAttention-2", Algorithm 2) --
#: hence 5/2. A nominal count of the work, not of what a kernel executes: the naive and math paths keep
#: P from their forward and do four GEMMs, so their TFLOP/s reads high by 5/4 against theirs.
BACKWARD_FLOP_RATIO = 2.5
#: Fewest bytes of one backward over its forward's: it reads q, k, v, the output and its gradient and
#: writes dq, dk and dv, each once (the logsumexp a fused backward also reads, B*H*Sq floats, is left
#: out); against the forward's q, k, v read and the output written (Shape.min_bytes): twice the bytes.
BACKWARD_BYTE_RATIO = 2
#: Times over the repeats (config ``repeats``; :func:`combine_repeats`): (median column, column prefix). The
#: median column holds the median of the repeat medians, the within-capture <prefix>_min/_max/_q1/_q3 columns are
#: those of the repeat whose median that is, and ``<prefix>_run_lo``/``_run_hi`` the interval a rerun's median will
#: hold (attnprof.analysis.stats).
REPEAT_TIMES = (("device_ms_per_forward", "device_ms"), ("cpu_ms_per_forward", "cpu_ms"),
                ("device_ms_per_backward", "device_ms_backward"), ("cpu_ms_per_backward", "cpu_ms_backward"))
#: Counts that every counted repeat must agree on (else they are not published and repeats_note says why).
REPEAT_COUNTS = ("kernels_per_forward", "memcpy_per_forward", "memset_per_forward",
                 "kernels_per_backward", "memcpy_per_backward", "memset_per_backward")
#: summary.csv columns of the repeats: configured, counted (status ok), and what happened to the others.
REPEAT_SUMMARY_COLUMNS = ["repeats", "repeats_ok", "repeats_note",
                          *(f"{prefix}_run_{end}" for _, prefix in REPEAT_TIMES for end in ("lo", "hi")),
                          "device_ms_run_sd_pct", "cpu_ms_run_sd_pct", "device_ms_run_df", "gpus"]
SUMMARY_COLUMNS += REPEAT_SUMMARY_COLUMNS
#: summary.csv columns computed from its other columns (declared with a formula in attnprof.model.columns):
#: :func:`derive_columns` fills them, after every other column.
SUMMARY_FORMULAS = formulas("summary")
SUMMARY_COLUMNS += [c for c in SUMMARY_FORMULAS if c not in SUMMARY_COLUMNS]


def derive_columns(table: pd.DataFrame, formulas_: dict[str, str] | None = None) -> pd.DataFrame:
    """``table`` with each column of ``formulas_`` (name -> ``DataFrame.eval`` expression; default
    :data:`SUMMARY_FORMULAS`, the summary's declared formulas) computed from its other columns, in place of any
    value it held. A row where an input is missing, or the result is not finite (a zero device time), gets NaN.
    A copy; the columns keep their order (a new one goes last). Raises ValueError naming the column for a
    formula over a column the table lacks."""
    out = table.copy()
    numeric = out.apply(lambda col: pd.to_numeric(col, errors="coerce"))  # blanks and None: NaN
    for name, formula in (SUMMARY_FORMULAS if formulas_ is None else formulas_).items():
        try:
            values = pd.to_numeric(numeric.eval(formula), errors="coerce")
        except (pd.errors.UndefinedVariableError, NameError) as err:
            raise ValueError(f"column {name!r}: formula {formula!r} needs a column the table lacks ({err})") from None
        out[name] = numeric[name] = values.replace([math.inf, -math.inf], math.nan)  # a later formula may use it
    return out


def has_run_interval(summary: pd.DataFrame, prefixes: tuple[str, ...] = ("device_ms", "cpu_ms")) -> bool:
    """True when some row of ``summary`` (summary.csv) has a between-run interval for one of the times
    ``prefixes`` (``<prefix>_run_lo``: two repeats or more); False for a result set of one repeat, or one made
    before repeats (no such column)."""
    cols = [f"{p}_run_lo" for p in prefixes if f"{p}_run_lo" in summary]
    return bool(cols) and bool(summary[cols].notna().any().any())
#: repeats.csv: one row per capture (repeat) with its own numbers, the per-repeat table the between-run
#: intervals are computed from (and recomputed from by the tests and by compare).
#: Columns of one capture that repeats.csv keeps and summary.csv does not (it names the GPUs of all repeats in ``gpus``):
#: the GPU fields of status.json's ``gpu`` (:class:`attnprof.model.gpus.Gpu`), each as ``gpu_<field>``.
#: :func:`summary_row` gives them, :func:`combine_repeats` reads them.
CAPTURE_ONLY_COLUMNS = [f"gpu_{field}" for field in ("uuid", "name", "power_limit_w", "max_sm_clock_mhz")]
REPEAT_COLUMNS = ["variant", "shape_key", "repeat", "status", "reason", "kernels_per_forward", "memcpy_per_forward",
                  "memset_per_forward", "device_ms_per_forward", "cpu_ms_per_forward", "kernels_per_backward",
                  "device_ms_per_backward", "cpu_ms_per_backward", "backward_status", "forwards_complete",
                  "host_load_1m", "started_at", *CAPTURE_ONLY_COLUMNS]


def compile_columns(record) -> dict:
    """summary.csv's compile columns from a status record's ``compile`` entry: the first call's
    seconds when it is a finite number >= 0, the cache verdict when it is text; None otherwise
    (a malformed record publishes nothing rather than a wrong number)."""
    record = record if isinstance(record, dict) else {}
    first, cache = record.get("first_call_s"), record.get("cache")
    ok = isinstance(first, (int, float)) and not isinstance(first, bool) and math.isfinite(first) and first >= 0
    return {"compile_first_call_s": first if ok else None, "compile_cache": cache if isinstance(cache, str) else None}


def concat_tables(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-capture tables, skipping empty ones (a capture that did not run); an
    all-empty list gives the first (empty) frame, keeping its columns."""
    kept = [f for f in frames if not f.empty]
    return pd.concat(kept, ignore_index=True) if kept else (frames[0] if frames else pd.DataFrame())


def _forwards(frames: dict, verdict: str = "complete") -> list[int]:
    """The forwards whose completeness column ``verdict`` (complete, timing_complete) is true."""
    c = frames["completeness"]
    return list(c.index[c[verdict]])


def per_forward_counts(rows: pd.DataFrame, key: str, forwards: list[int]) -> pd.DataFrame:
    """Calls of each ``key`` value in each of ``forwards``: columns calls_per_forward (the
    count when every forward has the same, else NaN: never a fractional count that no
    forward had), calls_min, calls_max; index = the key values."""
    rows = rows[rows["forward"].isin(forwards)]
    per_fwd = rows.groupby([key, "forward"]).size().unstack(fill_value=0).reindex(columns=forwards, fill_value=0)
    lo, hi = per_fwd.min(axis=1), per_fwd.max(axis=1)
    return pd.DataFrame({"calls_per_forward": lo.where(lo == hi), "calls_min": lo, "calls_max": hi})


def kernel_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """One row per distinct GPU event name (kernel, memcpy or memset) launched inside the
    complete forwards. calls_per_forward is the per-forward count when all complete forwards
    agree (else empty; calls_min/max give the range). Times (us) come from timing-complete
    forwards only: total_us sums them, us_per_forward = total_us / number of those forwards,
    mean_us is per call, share_pct is of all device time in those forwards. device is the GPU
    the events ran on (``args.device``). Launch metadata is the first call's (constant for a
    given kernel name and shape)."""
    counted, timed = _forwards(frames), _forwards(frames, "timing_complete")
    gpu = frames["gpu"]
    gpu = gpu[gpu["forward"].isin(counted)]
    if gpu.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    counts = per_forward_counts(gpu, "name", counted)
    names = counts.index
    first = gpu.drop_duplicates("name").set_index("name")
    valid = gpu[gpu["forward"].isin(timed) & gpu["time_ok"]]
    agg = valid.groupby("name")["dur"].agg(total_us="sum", mean_us="mean").reindex(names)
    table = pd.DataFrame({
        "variant": variant,
        "shape_key": shape_key,
        "kernel": names,
        "label": [kernel_label(k) for k in names],
        **{c: counts[c].values for c in counts.columns},
        "total_us": agg["total_us"].values,
        "us_per_forward": (agg["total_us"] / len(timed)).values if timed else float("nan"),
        "mean_us": agg["mean_us"].values,
    })
    table["share_pct"] = 100.0 * table["total_us"] / table["total_us"].sum()
    for col in ("category", "device", "grid", "block", "registers_per_thread", "shared_memory_bytes", "est_occupancy_pct",
                "launch_api", "op"):
        table[col] = first.loc[names, col].values
    return table.sort_values(["total_us", "calls_max"], ascending=False)[KERNEL_COLUMNS].reset_index(drop=True)


def _calls_table(frames: dict, which: str, column: str, variant: str, shape_key: str, first_seen: bool) -> pd.DataFrame:
    """Calls per complete forward of each name in ``frames[which]`` (calls_per_forward as in
    :func:`per_forward_counts`, with calls_min/max) and their mean host duration in us; rows in
    name order, or with ``first_seen`` in order of first appearance in the first complete forward."""
    counted = _forwards(frames)
    rows = frames[which]
    rows = rows[rows["forward"].isin(counted)]
    cols = ["variant", "shape_key", column, "calls_per_forward", "calls_min", "calls_max", "mean_us"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    counts = per_forward_counts(rows, "name", counted)
    order = list(counts.index)
    if first_seen:
        first = list(rows[rows["forward"] == rows["forward"].min()].sort_values("ts")["name"].drop_duplicates())
        order = first + [o for o in order if o not in set(first)]
    table = counts.loc[order].assign(variant=variant, shape_key=shape_key, **{column: order},
                                     mean_us=rows.groupby("name")["dur"].mean().reindex(order))
    return table[cols].reset_index(drop=True)


def launch_api_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """CUDA runtime/driver API calls per complete forward by name (:func:`_calls_table`)."""
    return _calls_table(frames, "api", "api", variant, shape_key, first_seen=False)


def op_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """aten ops per complete forward, every nesting level, mean inclusive host duration, in
    order of first appearance (:func:`_calls_table`)."""
    return _calls_table(frames, "ops", "op", variant, shape_key, first_seen=True)


def per_forward_stats(prefix: str, ms: pd.Series, median: str | None = None) -> dict:
    """Summary columns of per-forward times ``ms``: ``median`` (default <prefix>_per_forward: the median),
    <prefix>_min, _max, _q1 and _q3 (pandas' linear quantiles: the inter-quartile range)."""
    return {median or f"{prefix}_per_forward": ms.median(), f"{prefix}_min": ms.min(), f"{prefix}_max": ms.max(),
            f"{prefix}_q1": ms.quantile(0.25), f"{prefix}_q3": ms.quantile(0.75)}


def _memory_columns(status: dict) -> dict:
    """Device memory of a capture's profiled steps, MiB: ``peak_memory_mb`` (torch.cuda.max_memory_allocated
    over the steps), ``held_memory_mb`` (torch.cuda.memory_allocated when they began: the inputs, the
    warm-up's output, library workspaces and whatever else the process held, which in a warm capture
    worker depends on the captures before) and ``forward_memory_mb``, their difference: the most
    memory the steps allocated beyond that, which depends on the variant and the shape only. A
    capture recorded before held memory was recorded has no forward_memory_mb (its peak then also
    covered the warm-up)."""
    peak, held = status.get("peak_memory_bytes"), status.get("held_memory_bytes")
    return {"peak_memory_mb": peak / 2**20 if peak else None,
            "held_memory_mb": held / 2**20 if held is not None and peak else None,
            "forward_memory_mb": (peak - held) / 2**20 if held is not None and peak else None}


#: Host (CPU) times of :data:`REPEAT_TIMES`: stated over the captures without a parametric interval
#: (attnprof.analysis.stats.host_range): ``<prefix>_run_lo``/``_hi`` are the lowest and highest capture medians.
HOST_TIMES = ("cpu_ms_per_forward", "cpu_ms_per_backward")
#: A capture's host time and its own timed calls (perf_counter, repeat 1) that differ by this factor or more are two
#: draws of a different host: the capture is named, its host time not counted.
HOST_CONTRADICTION = 10.0
#: Columns of a capture's trace quality (assess_forwards): a combined row takes them from the repeat its note names.
TRACE_QUALITY_COLUMNS = ("forwards_expected", "forwards_profiled", "forwards_complete", "forwards_timed",
                         "incomplete_forwards", "bad_time_events")


def repeat_noise(per_pair: Mapping[tuple[str, str], list[dict]]) -> dict[tuple[str, str], dict]:
    """The between-process noise of every device time of :data:`REPEAT_TIMES`, each cell's variance moderated over
    the other cells of its variant (attnprof.analysis.stats.moderated_noise).
    per_pair: {(variant, shape_key): the per-repeat rows of :func:`combine_repeats`}. Returns {(variant,
    shape_key): {median column: Noise | None}} for :func:`combine_repeats`' ``noise``. Host times get none
    (:func:`combine_repeats`)."""
    from attnprof.analysis.stats import moderated_noise

    out: dict[tuple[str, str], dict] = {key: {} for key in per_pair}
    for med in [m for m, _ in REPEAT_TIMES if m not in HOST_TIMES]:
        cells = {key: [r.get(med) for r in _counted_repeats(rows) if not pd.isna(r.get(med))]
                 for key, rows in per_pair.items()}
        for key, noise in moderated_noise(cells, {key: key[0] for key in cells}).items():
            out[key][med] = noise
    return out


def _repeat_notes(rows: list[dict], expected: int | None) -> list[str]:
    """What a combined row must say about its repeats: those not ok (with their reason), and rounds that
    ``expected`` asks for and no capture gave (copies: :func:`_copies`)."""
    notes = [f"repeat {r['repeat']} {r.get('status')}: {str(r.get('reason') or '')[:200]}".rstrip(": ")
             for r in rows if r.get("status") != "ok"]
    return notes + _missing_rounds(rows, expected)


def _missing_rounds(rows: list[dict], expected: int | None) -> list[str]:
    """The note on the rounds ``expected`` asks for that no capture record in ``rows`` gave ([] when none)."""
    missing = sorted(set(range(1, (expected or 0) + 1)) - {int(r["repeat"]) for r in rows})
    return [f"repeat{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {expected} missing "
            "(no capture record): not counted"] if missing else []


def _copies(ok: list[dict]) -> tuple[list[dict], list[str]]:
    """``ok`` without the repeats that copy an earlier one (same ``started_at``: one capture process), and a note
    per copy."""
    seen: dict = {}
    kept, notes = [], []
    for r in ok:
        at = r.get("started_at")
        first = r if pd.isna(at) else seen.setdefault(at, r)
        if first is r:
            kept.append(r)
        else:
            notes.append(f"repeat {r['repeat']} is a copy of repeat {first['repeat']} (the same capture start, {at}): "
                         "counted once")
    return kept, notes


def _counted_repeats(rows: list[dict]) -> list[dict]:
    """The repeats of one (variant, shape) that count: status ok, a copy of another counted once (:func:`_copies`).
    What :func:`combine_repeats` states over and :func:`repeat_noise` pools."""
    return _copies([r for r in rows if r.get("status") == "ok"])[0]


def _host_contradicted(r: dict, med: str, timed: float | None) -> bool:
    """True when the capture's host time ``r[med]`` and the timed calls' median ``timed`` (ms) differ by
    :data:`HOST_CONTRADICTION` or more (a forward's host time only: the timed calls are forwards)."""
    v = r.get(med)
    return (med == "cpu_ms_per_forward" and not pd.isna(v) and not pd.isna(timed) and timed > 0 and v > 0
            and max(v / timed, timed / v) >= HOST_CONTRADICTION)


def _counted(ok: list[dict], med: str, timed: float | None) -> tuple[list[dict], list[str]]:
    """The repeats whose ``med`` is counted, and a note for each ok repeat that is not: no such time while
    others have one (its trace note says why), or a host time its own timed calls contradict."""
    have = [r for r in ok if not pd.isna(r.get(med))]
    notes = _missing_time_notes(ok, len(have), med) if have else []
    bad = [r for r in have if _host_contradicted(r, med, timed)]
    kept = [r for r in have if r not in bad] or have  # every draw contradicted: stated, with the note, not dropped
    for r in bad:
        notes.append(f"repeat {r['repeat']}: {med} {r[med]:.3g} ms against {timed:.3g} ms of the timed calls "
                     f"(x{HOST_CONTRADICTION:g} or more apart: another job beside the capture?)"
                     + (": not counted" if r not in kept else ": no other capture to count"))
    return kept, notes


def _missing_time_notes(ok: list[dict], have: int, med: str) -> list[str]:
    """A note for each ok repeat without time ``med`` (``have`` of them have one), naming why from its trace note."""
    return [f"repeat {r['repeat']}: no {med} ({str(r.get('trace_note') or 'no such time in its trace')[:200]}); "
            f"that time is of {have} of {len(ok)} repeats" for r in ok if pd.isna(r.get(med))]


def _combine_time(row: dict, counted: list[dict], med: str, prefix: str, confidence: float, noise) -> None:
    """One time of :data:`REPEAT_TIMES` over the counted repeats, into ``row``: the median, the rerun interval
    (device times: attnprof.analysis.stats.between_run_interval with the pooled ``noise``; host times: the
    min-max over captures, attnprof.analysis.stats.host_range), the sd of the log medians, and the within-capture
    spread of the middle repeat (an even count: the lower of the two middle ones)."""
    from attnprof.analysis.stats import between_run_interval, host_range

    values = [r[med] for r in counted]
    if med in HOST_TIMES:  # no parametric interval; the sd of the log medians only describes the spread
        stats = {**host_range(values), "df": None,
                 "rel_sd": statistics.stdev(math.log(v) for v in values) if len(values) > 1 else None}
    else:
        stats = between_run_interval(values, confidence, noise)
    row[med] = stats["center"]
    row[f"{prefix}_run_lo"], row[f"{prefix}_run_hi"] = stats["lo"], stats["hi"]
    if med.endswith("_per_forward"):
        row[f"{prefix}_run_sd_pct"] = None if stats["rel_sd"] is None else 100 * stats["rel_sd"]
        row[f"{prefix}_run_df"] = stats["df"]
    if counted:
        middle = sorted(counted, key=lambda r: (r[med], int(r["repeat"])))[(len(counted) - 1) // 2]
        for end in ("min", "max", "q1", "q3"):
            row[f"{prefix}_{end}"] = middle.get(f"{prefix}_{end}")


def _trace_notes(row: dict, ok: list[dict]) -> None:
    """Every counted repeat's trace note into ``row``'s (``repeat k: ...`` for repeats after the first), with the
    trace-quality columns of the first repeat that has one, so that its finding's counts match its words."""
    damaged = [r for r in ok if r.get("trace_note")]
    if not damaged:
        return
    row["trace_note"] = "; ".join(r["trace_note"] if int(r["repeat"]) == 1 and len(ok) == 1
                                  else f"repeat {r['repeat']}: {r['trace_note']}" for r in damaged)
    row.update({c: damaged[0].get(c) for c in TRACE_QUALITY_COLUMNS})


def combine_repeats(rows: list[dict], confidence: float | None = None, noise: Mapping[str, object] | None = None,
                    expected: int | None = None) -> dict:
    """One summary.csv row from the per-repeat rows of one (variant, shape), repeat 1 first.

    rows: :func:`summary_row` (plus the backward's columns and ``started_at``) of each repeat, each with a
    ``repeat`` key (1-based). Repeat 1 carries what is measured once (status, correctness, independent timings,
    memory, compile); a row whose repeat 1 is not ``ok`` is repeat 1's row. Otherwise every repeat with status
    ``ok`` is counted, once (a copy of another, same ``started_at``, is not a repeat): each time of
    :data:`REPEAT_TIMES` becomes the median of the counted repeats' medians with its rerun interval at
    ``confidence`` (default attnprof.analysis.stats.CONFIDENCE; device times with ``noise``, {median column:
    Noise} from :func:`repeat_noise`; host times the min-max over captures) and the within-capture spread of the
    middle repeat; counts (:data:`REPEAT_COUNTS`) must agree, else they are left empty. ``repeats_note`` names
    every repeat not counted and why: not ok, missing of the ``expected`` rounds, a copy, a time its trace lacks
    (impossible GPU times), a host time its timed calls contradict; ``trace_note`` holds every repeat's.
    TFLOP/s follows the combined device time (``tflops``; ``backward_tflops``: :func:`backward_tflops`)."""
    from attnprof.analysis.stats import CONFIDENCE

    rows = sorted(rows, key=lambda r: int(r.get("repeat") or 1))
    row = dict(rows[0])
    row.update(repeats=len(rows), gpus=_gpus_used(rows))
    notes = _repeat_notes(rows, expected)
    if row.get("status") != "ok":
        row.update(repeats_ok=0, repeats_note=_not_run_note(rows, expected))
        return {c: row.get(c) for c in SUMMARY_COLUMNS}
    ok, copy_notes = _copies([r for r in rows if r.get("status") == "ok"])
    notes += copy_notes + _unpublished_counts(row, ok)
    notes += _combine_times(row, ok, confidence or CONFIDENCE, noise or {})
    _trace_notes(row, ok)
    row["repeats_ok"] = len(ok)
    row["repeats_note"] = "; ".join(notes)
    if row.get("forward_gflop") and row.get("device_ms_per_forward"):
        row["tflops"] = row["forward_gflop"] / row["device_ms_per_forward"]  # GFLOP/ms = TFLOP/s
    row["backward_tflops"] = backward_tflops(row.get("backward_gflop"), row.get("device_ms_per_backward"))
    return {c: row.get(c) for c in SUMMARY_COLUMNS}


def _not_run_note(rows: list[dict], expected: int | None) -> str:
    """The repeats note of a row whose repeat 1 did not run (its status and reason are the row's): how each repeat
    ended, each status once ("all 3 repeats out_of_memory"; "repeat 1 failed, repeats 2, 3 ok"), never the reason
    again; rounds ``expected`` that have no record."""
    by_status: dict[str, list[str]] = {}
    for r in rows:
        by_status.setdefault(str(r.get("status")), []).append(str(r["repeat"]))
    if len(by_status) == 1:
        (status, reps), = by_status.items()
        words = [f"all {len(reps)} repeats {status}" if len(reps) > 1 else f"repeat {reps[0]} {status}"]
    else:
        words = [f"repeat{'s' if len(reps) > 1 else ''} {', '.join(reps)} {status}" for status, reps in by_status.items()]
    return "; ".join(words + _missing_rounds(rows, expected))


def _gpus_used(rows: list[dict]) -> str | None:
    """The GPUs the repeats ran on, by UUID, ";"-joined (several on a node of several GPUs: a repeat takes
    whichever is free); None when no repeat names one."""
    return ";".join(sorted({r["gpu_uuid"] for r in rows if r.get("gpu_uuid")})) or None


def _combine_times(row: dict, ok: list[dict], confidence: float, noise: Mapping[str, object]) -> list[str]:
    """Each time of :data:`REPEAT_TIMES` over the repeats counted for it (:func:`_counted`; on a CPU run against
    repeat 1's timed calls), into ``row``; returns the notes on repeats not counted."""
    notes = []
    for med, prefix in REPEAT_TIMES:
        counted, time_notes = _counted(ok, med, row.get("timed_ms_median") if row.get("device") == "cpu" else None)
        notes += time_notes
        _combine_time(row, counted, med, prefix, confidence, noise.get(med))
    return notes


def _unpublished_counts(row: dict, ok: list[dict]) -> list[str]:
    """Each count of :data:`REPEAT_COUNTS` on which the counted repeats ``ok`` disagree: emptied in ``row``, and a
    note listing every repeat's."""
    notes = []
    for col in REPEAT_COUNTS:
        if len({r.get(col) for r in ok if not pd.isna(r.get(col))}) > 1:
            listing = ", ".join(f"repeat {r['repeat']}: {r.get(col)}" for r in ok)
            notes.append(f"{col} differs between repeats ({listing}): not published")
            row[col] = None
    return notes


def backward_tflops(backward_gflop, device_ms_per_backward) -> float | None:
    """Achieved TFLOP/s of a backward: ``backward_gflop`` (GFLOP, :data:`BACKWARD_FLOP_RATIO` times the
    forward's FLOPs of Shape.forward_flops, the PyTorch sdpa.py convention) over
    ``device_ms_per_backward`` (trace device time, ms; GFLOP/ms = TFLOP/s). None when either is
    missing, not a number, or not positive (a CPU run has no device time)."""
    if pd.isna(backward_gflop) or pd.isna(device_ms_per_backward) or not (backward_gflop > 0 and device_ms_per_backward > 0):
        return None
    return backward_gflop / device_ms_per_backward


def _timing_columns(status: dict) -> dict:
    """The independent timing's columns (timed_*: single calls; graph_*: CUDA-graph replays) of a record."""
    timing, graph = status.get("timing") or {}, status.get("graph_timing") or {}
    return {**{f"timed_ms_{k}": timing.get(f"{k}_ms") for k in ("median", "q1", "q3", "min", "max")},
            **{f"graph_ms_{k}": graph.get(f"{k}_ms") for k in ("median", "q1", "q3", "min", "max")},
            "timed_repeats": timing.get("repeats"), "timing_method": timing.get("method"), "graph_error": graph.get("error")}


def _forward_statistics(row: dict, forwards: pd.DataFrame, verdict: dict, gpu: bool, minimum: int) -> None:
    """An ok capture's per-forward statistics into ``row`` (:func:`summary_row`): host times of the complete forwards;
    on a GPU (``gpu``) whose complete forwards all did the same work, the counts per forward, and with at least
    ``minimum`` timed forwards the device times and TFLOP/s (FLOP convention of Shape.forward_flops, PyTorch's sdpa
    benchmark); else the trace note says why no device time is published."""
    groups = verdict["groups"]
    if len(groups) > 1:
        row["forward_groups"] = json.dumps(groups)
    complete = forwards[forwards["complete"].astype(bool)]
    row.update(per_forward_stats("cpu_ms", complete["cpu_us"] / 1e3))
    if gpu and len(groups) == 1:  # a CPU run has no device events
        g = groups[0]
        row.update(kernels_per_forward=g["kernels"], memcpy_per_forward=g["memcpy"], memset_per_forward=g["memset"])
        if verdict["forwards_timed"] >= minimum:
            row.update(per_forward_stats("device_ms", complete[complete["timing_complete"].astype(bool)]["device_us"] / 1e3))
            if row.get("forward_gflop") and row["device_ms_per_forward"]:
                row["tflops"] = row["forward_gflop"] / row["device_ms_per_forward"]  # GFLOP/ms = TFLOP/s
        else:
            row["trace_note"] = "; ".join(filter(None, [row["trace_note"], (
                f"device time not published: {verdict['forwards_timed']} forwards with valid GPU times, "
                f"fewer than the minimum of {minimum}")]))
    if row.get("forward_gflop") and row.get("graph_ms_median"):
        row["tflops_graph"] = row["forward_gflop"] / row["graph_ms_median"]


def result_note(status: dict) -> str:
    """summary.csv ``result_note``: what a capture's float64 check says of its result, in words, when it failed
    (``rel_error_ok`` false: a wrong result, left out of every ranking; attnprof.findings.ranking); '' otherwise."""
    if status.get("rel_error_ok") is not False:
        return ""
    error = status.get("rel_error")
    shown = f"{error:.3g}" if isinstance(error, int | float) else "not recorded"
    return (f"wrong result: relative error {shown} against the float64 reference, above the {status.get('dtype')} "
            "tolerance; left out of every ranking")


def _shape_columns(status: dict) -> dict:
    """A capture's shape columns from its status record. Grouped-query and decode shapes
    (attnprof.model.variants.Shape) get effective values, so a square shape without grouping reads
    kv_heads = heads and q_len = seq_len."""
    return {**{k: status.get(k) for k in ("batch", "heads", "seq_len", "head_dim", "dtype", "causal", "device")},
            "kv_heads": status.get("kv_heads") or status.get("heads"), "q_len": status.get("q_len") or status.get("seq_len"),
            "causal_alignment": status.get("causal_alignment")}


def _trace_columns(status: dict, verdict: dict) -> dict:
    """The forward counts of :func:`assess_forwards`' ``verdict`` and its note on the trace; a capture that did not
    run has no trace to describe (its status and reason say why), so its note is empty."""
    return {**{k: verdict[k] for k in TRACE_QUALITY_COLUMNS},
            "trace_note": verdict["note"] if status["status"] in ("ok", "incomplete_trace") else ""}


def _arithmetic_columns(status: dict) -> dict:
    """GFLOP per forward and FLOP per byte (of the minimum bytes moved) where the record counts the forward's
    FLOPs; none otherwise."""
    if not status.get("forward_flops"):
        return {}
    return {"forward_gflop": status["forward_flops"] / 1e9, "flop_per_byte": status["forward_flops"] / status["min_bytes"]}


def summary_row(status: dict, forwards: pd.DataFrame, trace_path: str = "trace.json.gz") -> dict:
    """One summary.csv row from a capture's status record and its forward table.

    Completeness rule (:func:`assess_forwards`): counts come from complete forwards only,
    device times from timing-complete forwards only. A capture with status ok but fewer
    than ``status['min_complete_forwards']`` complete forwards (default
    :data:`DEFAULT_MIN_COMPLETE_FORWARDS`) becomes ``incomplete_trace`` with a reason naming
    ``trace_path`` and both counts, and publishes no statistics. When complete forwards
    differ in their kernel/memcpy/memset counts, the per-forward counts and device times are
    left empty (never a fractional count or a median across different work) and
    forward_groups lists each group. Device times need ``minimum`` timed forwards too.
    cpu_ms_per_forward is the median host time of the complete forwards' ranges. timed_*
    come from the capture's independent timing loop (CUDA events or perf_counter)."""
    minimum = int(status.get("min_complete_forwards") or DEFAULT_MIN_COMPLETE_FORWARDS)
    verdict = assess_forwards(forwards, (status.get("schedule") or {}).get("active"), minimum)
    row = {
        "variant": status["variant"], "shape_key": status["shape_key"], "status": status["status"],
        **_shape_columns(status),
        **_trace_columns(status, verdict),
        **_timing_columns(status),
        "host_load_1m": (status.get("host") or {}).get("load_avg_1m"),
        # the GPU the capture ran on (its job's, as nvidia-smi names it: attnprof.measure.gpus); repeats.csv
        **{col: (status.get("gpu") or {}).get(col.removeprefix("gpu_")) for col in CAPTURE_ONLY_COLUMNS},
        "rel_error": status.get("rel_error"), "rel_error_ok": status.get("rel_error_ok"),
        "result_note": result_note(status),
        "checks_missing": "; ".join(status.get("checks_missing") or []),
        **_memory_columns(status),
        "reason": status.get("reason", ""),
        "oom_bytes": status.get("oom_bytes"),
        # torch.compile variants: the first call (compile) apart from the steady state, and inductor's cache verdict
        **compile_columns(status.get("compile")),
        **_arithmetic_columns(status),
    }
    if status["status"] == "ok" and not verdict["sufficient"]:
        row.update(status="incomplete_trace", reason=incomplete_reason(trace_path, verdict))
    if row["status"] == "ok":
        _forward_statistics(row, forwards, verdict, status.get("device") == "cuda", minimum)
    return {c: row.get(c) for c in (*SUMMARY_COLUMNS, *CAPTURE_ONLY_COLUMNS)}


def repeat_row(status: dict, status_path, forwards: pd.DataFrame) -> dict:
    """One repeats.csv row: :func:`summary_row` of the capture whose record ``status`` (in the current format,
    attnprof.analysis.records.load_status: its ``repeat`` always there, a version-1 record's from its folder ``r<k>``)
    was read from ``status_path``, its trace beside it."""
    trace = Path(status_path).with_name(CAPTURE_FILES["trace"])
    return {**summary_row(status, forwards, str(trace)), "repeat": int(status["repeat"])}
