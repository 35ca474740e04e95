"""The one ranking rule: which variant is fastest at a shape, for one pass (forward or backward), and which ones
this result set cannot rank against it. Page 1 of the report, the findings table (rule speed) and the study's
``fastest_fused`` expectation all state rankings from :func:`rank`, so they cannot disagree.

The rule, over one shape's rows of summary.csv:

* a variant is ranked only when its capture is ``ok``, its result passed the float64 check (``rel_error_ok`` not
  false; for the backward also ``backward_status`` ok and ``grad_rel_error_ok`` not false), it is no dispatcher
  (:data:`attnprof.model.variants.DISPATCHERS`: it runs another variant's kernel) and it has a time; every other
  variant is named in ``left_out`` with the reason;
* the ranked ones are ordered by their median time per pass (device ms on a GPU, host ms on a CPU);
* ``tied``: the ranked variants whose interval overlaps the first one's (the first included). The interval is the
  rerun interval (``<time>_run_lo``/``_run_hi``) when the result set has repeats, else the min-max over the profiled
  forwards; a variant without both ends cannot be told apart and counts as tied. The first is *the fastest* only
  when it is tied with no other (its interval's upper end is under every other's lower end).
"""

from __future__ import annotations

import pandas as pd

from attnprof.analysis.tables import has_run_interval
from attnprof.model.variants import DISPATCHERS

#: The passes a ranking is made for, and the word in their time columns (``device_ms_per_forward``).
PASSES = ("forward", "backward")


def time_prefix(summary: pd.DataFrame) -> str:
    """The time a result set ranks by: ``device_ms`` on a GPU (some row has a device time), else ``cpu_ms``."""
    gpu = "device_ms_per_forward" in summary and bool(summary["device_ms_per_forward"].notna().any())
    return "device_ms" if gpu else "cpu_ms"


def time_columns(summary: pd.DataFrame, pass_: str = "forward") -> tuple[str, str, str]:
    """(median, low, high) columns of summary.csv a ranking of ``pass_`` reads: the rerun interval when the result
    set has one, else the min-max over the profiled forwards (or backwards)."""
    prefix = time_prefix(summary)
    base = prefix if pass_ == "forward" else f"{prefix}_backward"
    median = f"{prefix}_per_{pass_}"
    if has_run_interval(summary, (base,)):
        return median, f"{base}_run_lo", f"{base}_run_hi"
    return median, f"{base}_min", f"{base}_max"


def spread_words(prefix: str, between_run: bool) -> dict[str, str]:
    """How the findings, page 1 and the report's tables name the spread a time is judged against (the interval of
    :func:`time_columns`), decided here only. ``prefix``: the time (``device_ms``, ``cpu_ms``, ``cpu_ms_backward``...);
    ``between_run``: whether the result set has its ``<prefix>_run_lo``/``_run_hi`` (repeats). Returns ``label``, the
    word before the ends ("rerun 0.0574–0.0582 ms"), ``one`` and ``ranges``, one variant's spread and several's, and
    ``high`` and ``low``, its ends.

    A device time's is its rerun interval (attnprof.analysis.stats.between_run_interval); a host time (``cpu_``) has
    no rerun interval: its ends are the lowest and highest capture (attnprof.analysis.stats.host_range), "captures",
    never "rerun"; with one repeat, the fastest and the slowest profiled forward."""
    if between_run and prefix.startswith("cpu_"):
        return {"label": "captures", "one": "range over the captures", "ranges": "ranges over the captures",
                "high": "highest capture", "low": "lowest"}
    if between_run:
        return {"label": "rerun", "one": "rerun interval", "ranges": "rerun intervals",
                "high": "rerun interval's upper end", "low": "lower end"}
    return {"label": "forwards", "one": "range over the forwards", "ranges": "ranges over the forwards (one repeat)",
            "high": "slowest forward", "low": "fastest"}


def present(value) -> bool:
    """Whether a cell holds a value (not None, not NaN)."""
    return value is not None and not (isinstance(value, float) and value != value)


def clean(v):
    """A table cell as a plain Python value: None for missing (None, NaN), numpy scalars unwrapped."""
    if not present(v):
        return None
    if hasattr(v, "item"):
        v = v.item()
    return v


def check_failed(value) -> bool:
    """A check that failed: False, or its text in a table read back as strings."""
    return value is False or str(value).lower() == "false"


def left_out_reason(row: dict, pass_: str, column: str) -> str | None:
    """Why a summary row is not ranked for ``pass_`` (None: it is ranked)."""
    checks = (
        (row.get("status") != "ok", f"status {row.get('status')}"),
        (check_failed(row.get("rel_error_ok")), "wrong result (relative error "
                                          f"{clean(row.get('rel_error'))} above the tolerance)"),
        (row.get("variant") in DISPATCHERS, "a dispatcher: it runs another variant's kernel"),
        (pass_ == "backward" and row.get("backward_status") != "ok", f"backward {row.get('backward_status') or 'not run'}"),
        (pass_ == "backward" and check_failed(row.get("grad_rel_error_ok")), "wrong gradients"),
        (clean(row.get(column)) is None, "no time"),
    )
    return next((why for failed, why in checks if failed), None)


def _overlaps(a: tuple, b: tuple) -> bool:
    """Whether two intervals (low, high) overlap; an interval with a missing end overlaps everything."""
    if None in a or None in b:
        return True
    return a[0] <= b[1] and b[0] <= a[1]


def rank(summary: pd.DataFrame, shape_key: str, pass_: str = "forward", among: list[str] | None = None) -> dict:
    """The ranking of ``shape_key``'s variants (``among`` of them, default all) for ``pass_``, as plain values:
    ``order`` (ranked variants, fastest median first), ``tied`` (the ones the intervals cannot rank against the
    first, that one included; [] when none is ranked), ``clear`` (the first is the fastest outside every interval:
    it is tied with no other and there is another), ``left_out`` (variant -> reason), ``median`` (variant -> its
    median) and the columns they came from (``column``, ``low_column``, ``high_column``)."""
    column, low, high = time_columns(summary, pass_)
    ranked, left_out = _sort_out(summary[summary["shape_key"] == shape_key], pass_, column, among)
    tied = _tied(ranked, low, high)
    return {"shape_key": shape_key, "pass": pass_, "order": [r["variant"] for r in ranked], "tied": tied,
            "clear": len(ranked) > 1 and len(tied) == 1, "left_out": left_out,
            "median": {r["variant"]: r[column] for r in ranked}, "column": column, "low_column": low, "high_column": high}


def _sort_out(rows: pd.DataFrame, pass_: str, column: str, among: list[str] | None) -> tuple[list[dict], dict[str, str]]:
    """(the rows ranked, by median; variant -> why it is left out) of one shape's rows (``among`` them)."""
    records = [r for r in rows.to_dict("records") if among is None or r["variant"] in among]
    why = {r["variant"]: left_out_reason(r, pass_, column) for r in records}
    ranked = sorted((r for r in records if why[r["variant"]] is None), key=lambda r: r[column])
    return ranked, {v: w for v, w in why.items() if w}


def _tied(ranked: list[dict], low: str, high: str) -> list[str]:
    """The ranked variants whose interval (``low``, ``high``) overlaps the first one's, that one included."""
    spans = [(clean(r.get(low)), clean(r.get(high))) for r in ranked]
    return [r["variant"] for r, span in zip(ranked, spans) if _overlaps(spans[0], span)]


def claim(ranking: dict, variant: str) -> str:
    """What a ranking states about a ranked ``variant``: ``fastest`` (the first, when clear), ``tied`` (tied with the
    first, when not clear) or ``ranked`` (any other, and the only one ranked: nothing to rank it against)."""
    order = ranking["order"]
    if len(order) < 2:
        return "ranked"
    if ranking["clear"]:
        return "fastest" if variant == order[0] else "ranked"
    return "tied" if variant in ranking["tied"] else "ranked"


def claims(ranking: dict) -> set[tuple[str, str, str, str]]:
    """What a ranking states, cell by cell: (claim, variant, shape key, pass), claim as :func:`claim` says, or
    ``left out`` for a variant not ranked."""
    key, pass_ = ranking["shape_key"], ranking["pass"]
    return ({(claim(ranking, v), v, key, pass_) for v in ranking["order"]}
            | {("left out", v, key, pass_) for v in ranking["left_out"]})


def wrong_result_warnings(shapes: list[dict]) -> list[str]:
    """The lines the findings job prints on the terminal for every variant left out of a ranking because its result
    (or its gradients) failed the float64 check, from findings.json's ``shapes``: one per (variant, shape, pass)."""
    return [f"WARNING: {v} at {r['shape_key']} ({r['pass']}): {why}; it is left out of every ranking"
            for s in shapes for f in s["findings"] if (r := f.get("ranking"))
            for v, why in r["left_out"].items() if why.startswith("wrong")]
