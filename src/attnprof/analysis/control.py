"""The profiler's self-check (issue 20): the control capture's counts against the ones known by construction.

The control (:data:`attnprof.model.variants.CONTROL`) runs a fixed workload per forward, so its counts are
known before any trace is read (:data:`attnprof.model.variants.CONTROL_COUNTS`): on a GPU, kernels, memcpys and
memsets per forward (summary.csv's kernels_per_forward, memcpy_per_forward, memset_per_forward); on the CPU,
the calls of each of its aten ops per forward (ops.csv's calls_per_forward, every nesting level). When a
result set's control counts differ from the known ones, the profiler's accounting (not the workload) changed
-- an upgrade that records every op twice (PyTorch issue 195746: exact doubling of op counts) -- and count
changes of the attention variants cannot be trusted to be theirs.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnprof.model.plan import Layout
from attnprof.model.variants import CONTROL, CONTROL_COUNTS

#: The words compare and the reports use for a pair whose control counts changed.
ACCOUNTING_CHANGED = "profiler accounting changed"
#: The words for a result set without a control capture (the committed examples made before it).
NO_CONTROL = "no control capture in this result set (captured before the self-check existed)"
#: What the control runs per forward, in words, by device (the report's self-check line;
#: attnprof.measure.forwards._control_forward): on the CPU the copy is a host copy, no memcpy.
CONTROL_WORK = {"cuda": "1 GEMM, 1 elementwise, 1 memcpy DtoD per step", "cpu": "1 GEMM, 1 elementwise, 1 copy per step"}
#: The per-forward counts of a capture of the control that control.csv holds: the GPU ones (kernels, memcpy,
#: memset: summary_row's kernels/memcpy/memset_per_forward) and the CPU ones (each op's calls per forward,
#: ops.csv), under the keys of CONTROL_COUNTS.
COUNT_KEYS = tuple(dict.fromkeys(k for counts in CONTROL_COUNTS.values() for k in counts))
#: control.csv's columns (RUN_FILES["control"]): one row per capture (repeat) of the control.
CONTROL_COLUMNS = ("variant", "shape_key", "repeat", "status", "reason", "forwards_complete", *COUNT_KEYS)
_GPU_COLUMNS = {"kernels": "kernels_per_forward", "memcpy": "memcpy_per_forward", "memset": "memset_per_forward"}


def control_counts(summary: pd.DataFrame | None, ops: pd.DataFrame | None, device: str) -> dict | None:
    """The control's observed counts per forward, keyed as :data:`CONTROL_COUNTS[device]`, from a
    result set's ``summary`` (summary.csv; GPU counts) or its repeat-1 ``ops`` tables (ops.csv rows,
    concatenated; CPU op calls); a count the tables do not hold is None. Returns None when the result
    set has no control row (made before the control existed)."""
    table = summary if device == "cuda" else ops
    if table is None or not len(table) or CONTROL not in set(table["variant"]):
        return None
    return _gpu_counts(table) if device == "cuda" else _cpu_counts(table)


def _gpu_counts(summary: pd.DataFrame) -> dict:
    """The control's kernels, memcpys and memsets per forward from its summary.csv row (None where unpublished)."""
    row = summary[summary["variant"] == CONTROL].iloc[0]
    return {k: (None if pd.isna(row.get(_GPU_COLUMNS[k])) else int(row[_GPU_COLUMNS[k]])) for k in CONTROL_COUNTS["cuda"]}


def _cpu_counts(ops: pd.DataFrame) -> dict:
    """The control's calls per forward of each op of :data:`CONTROL_COUNTS` ["cpu"] from its ops.csv rows: 0 for an
    op the rows lack, None for one without a count."""
    own = ops[ops["variant"] == CONTROL].drop_duplicates("op").set_index("op")["calls_per_forward"]
    return {k: (int(own[k]) if k in own and not pd.isna(own[k]) else 0 if k not in own else None)
            for k in CONTROL_COUNTS["cpu"]}


def check_control(observed: dict | None, device: str) -> dict:
    """The self-check of one result set: ``{"ok": bool | None, "expected", "observed", "why"}``; ok
    None (and why saying so) when the result set has no control capture; False when any count
    differs from :data:`CONTROL_COUNTS` or is missing (a control whose forwards were incomplete or
    differed from each other publishes none), with why naming each difference."""
    expected = CONTROL_COUNTS["cuda" if device == "cuda" else "cpu"]
    if observed is None:
        return {"ok": None, "expected": expected, "observed": None,
                "why": f"{NO_CONTROL}: the profiler's accounting is not checked"}
    diffs = [f"{k}: {observed.get(k) if observed.get(k) is not None else 'not published'} per forward, "
             f"{v} by construction" for k, v in expected.items() if observed.get(k) != v]
    return {"ok": not diffs, "expected": expected, "observed": observed,
            "why": (f"{ACCOUNTING_CHANGED}: the control's counts differ from those known by construction ("
                    + "; ".join(diffs) + ")") if diffs else "the control's counts are those known by construction"}


def compare_controls(a: dict, b: dict) -> dict:
    """The self-check of a pair of result sets (each :func:`check_control`'s result): ``{"changed": bool,
    "why"}``; changed when either fails its check or their observed counts differ (both checked
    ones). A pair where either has no control is not changed, and why says it is unchecked."""
    if a["observed"] is None or b["observed"] is None:
        return {"changed": False, "why": "not checked: " + (a["why"] if a["observed"] is None else b["why"])}
    whys = [f"{side}: {c['why']}" for side, c in (("A", a), ("B", b)) if not c["ok"]]
    if a["observed"] != b["observed"]:
        whys.append(f"the control's counts differ between A ({a['observed']}) and B ({b['observed']})")
    if whys:
        return {"changed": True, "why": f"{ACCOUNTING_CHANGED}: " + "; ".join(whys) +
                ". Kernel and op count changes of the attention variants are not attributed to them"}
    return {"changed": False, "why": "the control's counts are those known by construction in both result sets"}


def control_row(row: dict, ops: pd.DataFrame | None) -> dict:
    """control.csv's row (:data:`CONTROL_COLUMNS`) of one capture of the control: ``row`` is the capture's
    summary row (attnprof.analysis.tables.summary_row, with ``repeat``), ``ops`` its ops.csv (calls per
    forward of each aten op, every nesting level). A count the capture did not publish (a GPU count on a CPU
    run, a capture that failed or whose forwards differed) is None; an op of :data:`CONTROL_COUNTS` the
    ops table lacks while it has others is 0 calls."""
    out = {k: row.get(k) for k in ("variant", "shape_key", "repeat", "status", "reason", "forwards_complete")}
    out.update({key: None if pd.isna(row.get(col)) else int(row[col]) for key, col in _GPU_COLUMNS.items()})
    cpu = control_counts(None, ops.assign(variant=CONTROL) if ops is not None else None, "cpu")
    out.update(cpu or dict.fromkeys(CONTROL_COUNTS["cpu"]))
    return out


def control_table(rows: list[dict]) -> pd.DataFrame:
    """control.csv of a result set from :func:`control_row`'s rows, in :data:`CONTROL_COLUMNS` (a header
    only when the result set has no control capture), counts as nullable integers."""
    frame = pd.DataFrame(rows, columns=list(CONTROL_COLUMNS))
    return frame.astype({k: "Int64" for k in COUNT_KEYS})


def check_control_table(table: pd.DataFrame | None, device: str) -> dict:
    """The self-check of a result set from its control.csv (``table``; None or no rows: a result set made
    before the control, see :func:`check_control`): every repeat's counts against :data:`CONTROL_COUNTS`.
    Returns :func:`check_control`'s dict for repeat 1, or for the first repeat that fails (its why then
    naming the repeat), with ``repeats`` (the repeats checked) and ``shape_key`` added. Raises ValueError
    naming the missing columns when ``table`` is not a control.csv."""
    missing = [] if table is None else [c for c in CONTROL_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"not a control table: columns {missing} missing (expected {list(CONTROL_COLUMNS)})")
    if table is None or not len(table):
        return {**check_control(None, device), "repeats": [], "shape_key": None}
    checks, unchecked = _repeat_checks(table, device)
    if not checks:
        return {**check_control(None, device), "repeats": [], "shape_key": None, "unchecked": unchecked,
                "problem": f"no capture of the control completed: {', '.join(unchecked)}"}
    shape_key, chosen = _chosen_check(checks)
    return {**chosen, "repeats": [k for k, _, _ in checks], "shape_key": shape_key, "unchecked": unchecked}


def _chosen_check(checks: list[tuple]) -> tuple[str, dict]:
    """The (shape_key, check) that speaks for a result set of :func:`_repeat_checks`' ``checks``: the first repeat
    that fails, its why naming the repeat; else repeat 1's (the first checked)."""
    repeat, shape_key, chosen = next(((k, s, c) for k, s, c in checks if not c["ok"]), checks[0])
    if not chosen["ok"]:
        chosen = {**chosen, "why": chosen["why"].replace(f"{ACCOUNTING_CHANGED}: ", f"{ACCOUNTING_CHANGED}: in repeat {repeat}, ", 1)}
    return shape_key, chosen


def _repeat_checks(table: pd.DataFrame, device: str) -> tuple[list[tuple], list[str]]:
    """:func:`check_control` of each repeat of a control.csv whose capture is ok, in repeat order, as (repeat,
    shape_key, check); and the repeats left unchecked ("repeat N (status)"): a capture that failed or whose trace
    was incomplete published no counts to trust."""
    keys = CONTROL_COUNTS["cuda" if device == "cuda" else "cpu"]
    checks, unchecked = [], []
    for r in table.sort_values("repeat").to_dict("records"):
        if r.get("status") != "ok":
            unchecked.append(f"repeat {int(r['repeat'])} ({r.get('status')})")
            continue
        observed = {k: None if pd.isna(r[k]) else int(r[k]) for k in keys}
        checks.append((int(r["repeat"]), r["shape_key"], check_control(observed, device)))
    return checks, unchecked


def read_control_table(path, device: str) -> dict:
    """:func:`check_control_table` of the control.csv at ``path`` (a result set's, attnprof.model.names
    RUN_FILES["control"]), never raising: a file that cannot be read (empty, not CSV, columns missing), or one
    that lists no capture although the result set holds control captures (attnprof.model.plan.Layout.control_shapes),
    gives the check of a result set without a control with ``problem`` naming the file and the cause, so that the
    report says the self-check could not be read rather than that the control was never captured."""
    path = Path(path)
    problem = None
    try:
        table = pd.read_csv(path)
        check = check_control_table(table, device)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, ValueError) as exc:
        problem, check = f"{path}: {exc}", check_control_table(None, device)
    else:
        layout, run = Layout.around(path.parent)
        if not len(table) and (captured := layout.control_shapes(run)):
            problem = (f"{path} lists no control capture, but the result set holds "
                       f"{layout.in_run(Layout.CAPTURES, captured[0], CONTROL, None)}: the table is damaged (delete it "
                       "and run again to remake it)")
    return {**check, "problem": problem} if problem else check


def self_check_line(check: dict) -> str:
    """The report's self-check sentence (methods section) of :func:`check_control_table`'s result:
    "Profiler self-check: the control workload (...) counted 2 kernels, 1 memcpy, 0 memset per forward, as
    constructed", the differences when it failed, or :data:`NO_CONTROL`."""
    if check.get("problem"):
        return f"Profiler self-check: control.csv could not be used ({check['problem']}); the profiler's accounting is not checked."
    if check["observed"] is None:
        return f"Profiler self-check: {NO_CONTROL}; the profiler's accounting is not checked."
    counted = ", ".join(f"{'not published' if v is None else v} {k}" for k, v in check["observed"].items())
    work = CONTROL_WORK["cuda" if "kernels" in check["observed"] else "cpu"]
    n = len(check.get("repeats") or [])
    where = f" at {check['shape_key']}, {n} repeat{'s' if n != 1 else ''}" if n else ""
    if check.get("unchecked"):
        where += f" (not checked: {', '.join(check['unchecked'])})"
    if check["ok"]:
        return f"Profiler self-check: the control workload ({work}) counted {counted} per forward{where}, as constructed."
    return (f"Profiler self-check FAILED: the control workload ({work}) counted {counted} per forward{where}; "
            f"{check['why']}.")
