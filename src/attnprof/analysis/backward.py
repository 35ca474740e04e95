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

The completeness rule of :func:`attnprof.analysis.completeness.completeness` applies to backward ranges as it
does to forwards (every launch finds its GPU event, no orphaned or duplicate GPU records, some
GPU activity on a GPU, valid times for device times), plus ``ambiguous_launches == 0``.

Outputs (per capture, next to the forward tables): ``backwards.csv`` (one row per backward
range, :data:`BACKWARD_COLUMNS`: the forward table's columns, ``forward`` renamed ``backward``,
plus ``ambiguous_launches`` and ``other_thread_launches``), ``kernels_backward.csv`` and ``ops_backward.csv`` (the kernel and
op tables of the backward ranges, ``*_per_forward`` columns renamed ``*_per_backward``). All three
are header-only when the capture profiled no backward. summary.csv gets
:data:`attnprof.analysis.tables.BACKWARD_SUMMARY_COLUMNS`, empty unless the backward was profiled.

Kept apart from the forward modules so that a forward-only run's outputs are byte for byte what
they were.
"""

from __future__ import annotations


import pandas as pd

from attnprof.analysis.tables import (BACKWARD_BYTE_RATIO, BACKWARD_FLOP_RATIO, BACKWARD_SUMMARY_COLUMNS, DEFAULT_MIN_COMPLETE_FORWARDS,
                                     compile_columns, assess_forwards, backward_tflops, kernel_table, op_table,
                                     per_forward_stats)
# the ranges of both passes and their completeness: with the completeness rule (the capture's self-check reads them)
from attnprof.analysis.completeness import (  # noqa: F401
    BACKWARD_COLUMNS, ENGINE_OP, ambiguous_launches, analyse_passes, as_backward, assign_backward, backward_table,
    backward_threads, other_thread_launches)
from attnprof.model.columns import columns_of


def _per_backward(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(columns=lambda c: c.replace("per_forward", "per_backward"))


def backward_tables(frames: dict, variant: str, shape_key: str) -> dict[str, pd.DataFrame]:
    """The per-capture backward tables: ``backwards``, ``kernels_backward``, ``ops_backward``."""
    return {"backwards": backward_table(frames, variant, shape_key),
            "kernels_backward": _per_backward(kernel_table(frames, variant, shape_key)),
            "ops_backward": _per_backward(op_table(frames, variant, shape_key))}


def empty_backward_tables() -> dict[str, pd.DataFrame]:
    """The backward tables of a capture that profiled no backward: headers only (the registry's columns, in the
    order :func:`backward_tables` writes them: attnprof.model.columns)."""
    return {table: pd.DataFrame(columns=list(columns_of(table))) for table in ("backwards", "kernels_backward", "ops_backward")}


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
    row.update(_gradient_columns(status))
    row.update(_backward_arithmetic(status))
    row.update(_compile_backward_columns(status))
    if status.get("status") == "ok" and bwd.get("status") == "ok":
        _trace_statistics(row, status, backwards)
    return row


def _gradient_columns(status: dict) -> dict:
    """The gradients' float64 check of a capture (record ``grad_rel_error``: phase grad_correctness): relative error
    of dq, dk, dv and whether they pass; {} when the record has none."""
    grad = status.get("grad_rel_error")
    if not isinstance(grad, dict):
        return {}
    return {**{f"grad_rel_error_{n}": grad.get(n) for n in ("dq", "dk", "dv")},
            "grad_rel_error_ok": status.get("grad_rel_error_ok")}


def _backward_arithmetic(status: dict) -> dict:
    """A backward's GFLOP and FLOP per byte (:data:`BACKWARD_FLOP_RATIO` and ``BACKWARD_BYTE_RATIO`` times the
    forward's ``forward_flops`` and ``min_bytes``), each where the record has what it needs."""
    if not status.get("forward_flops"):
        return {}
    out = {"backward_gflop": BACKWARD_FLOP_RATIO * status["forward_flops"] / 1e9}
    if status.get("min_bytes"):
        out["backward_flop_per_byte"] = BACKWARD_FLOP_RATIO * status["forward_flops"] / (BACKWARD_BYTE_RATIO * status["min_bytes"])
    return out


def _compile_backward_columns(status: dict) -> dict:
    """A compiled variant's first backward call, in seconds, and inductor's cache verdict (record
    ``compile_backward``); None for both without one."""
    comp = status.get("compile_backward") if isinstance(status.get("compile_backward"), dict) else {}
    first = compile_columns({"first_call_s": comp.get("first_backward_s"), "cache": comp.get("cache")})
    return {"compile_backward_first_call_s": first["compile_first_call_s"], "compile_backward_cache": first["compile_cache"]}


def _trace_statistics(row: dict, status: dict, backwards: pd.DataFrame) -> None:
    """Fill ``row`` (in place) from the backwards of the trace (``backwards``: backwards.csv) of a capture whose
    forward and backward both ran: their counts and note, or incomplete_trace with too few complete backwards; the
    host time of complete ones; on a GPU, when all launched the same work, the counts per backward and, with enough
    timing-complete backwards, their device time and TFLOP/s."""
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
        return
    complete = fw[fw["complete"].astype(bool)]
    row.update(per_forward_stats("cpu_ms_backward", complete["cpu_us"] / 1e3, "cpu_ms_per_backward"))
    groups = verdict["groups"]
    if status.get("device") == "cuda" and len(groups) == 1:
        g = groups[0]
        row.update(kernels_per_backward=g["kernels"], memcpy_per_backward=g["memcpy"], memset_per_backward=g["memset"])
        if verdict["forwards_timed"] >= minimum:
            row.update(per_forward_stats("device_ms_backward", complete[complete["timing_complete"].astype(bool)]["device_us"] / 1e3,
                                         "device_ms_per_backward"))
            row["backward_tflops"] = backward_tflops(row["backward_gflop"], row["device_ms_per_backward"])
