"""Rules of the capture's own health: variants that did not run or lost a later check, trace
defects the completeness rule found (attnprof.analysis.tables.assess_forwards), and results that fail the
float64 check (relative error ||out - ref|| / ||ref||, no unit, against the dtype's tolerance), the
forward's output's and the backward's gradients' (dq, dk, dv; config ``passes`` with ``backward``).
"""

from __future__ import annotations

import json
import math

import pandas as pd

from attnprof.findings.data import RunData
from attnprof.findings.refs import clean, fmt_ref, finding, ref_summary


def rule_status(d: RunData) -> list[dict]:
    """Variants that did not run (or whose trace was incomplete), with the reason; and
    variants that ran but lost a later check (correctness, timing...), naming the check."""
    out = []
    for _, row in d.summary.iterrows():
        if row["status"] != "ok":
            reason = str(row["reason"]) if isinstance(row["reason"], str) else ""
            out.append(finding("status", d, [row["variant"]], f"{row['variant']} did not run here: {row['status']} ({reason[:300]})",
                               {}, [{"kind": "status", "name": row["status"]}],
                               kind="failure" if row["status"] in ("failed", "incomplete_trace") else "observation",
                               headline=f"{row['status']}: {reason[:160]}"))
        elif isinstance(row.get("checks_missing"), str) and row["checks_missing"]:
            out.append(finding("status", d, [row["variant"]], f"{row['variant']} was profiled, but a later check did not run to the end: "
                               f"{row['checks_missing'][:400]}; the trace and its tables stand", {},
                               [{"kind": "status", "name": "checks_missing"}], kind="warning",
                               headline=f"check missing: {row['checks_missing'][:120]}"))
    return out


def rule_trace_quality(d: RunData) -> list[dict]:
    """Defects of a trace the completeness rule found (attnprof.analysis.tables.assess_forwards):
    forwards that lost GPU events or have impossible GPU times, forwards missing from the
    trace, and complete forwards that launched different work (with each group's counts)."""
    noted = [row for _, row in d.summary.iterrows() if row["status"] == "ok" and isinstance(row.get("trace_note"), str)
             and row["trace_note"]]
    return [_trace_quality_of(d, row) for row in noted]


def _trace_quality_of(d: RunData, row) -> dict:
    v = row["variant"]
    nums = {c: ref_summary(d, v, c) for c in ("forwards_expected", "forwards_profiled", "forwards_complete", "forwards_timed",
                                              "bad_time_events")}
    groups = json.loads(row["forward_groups"]) if isinstance(row.get("forward_groups"), str) and row["forward_groups"] else []
    if len(groups) > 1:
        headline = f"forwards differ: {' / '.join(str(g['kernels']) for g in groups)} kernels"
    elif nums["forwards_complete"]["value"] != nums["forwards_expected"]["value"]:
        headline = f"{fmt_ref(nums['forwards_complete'])} of {fmt_ref(nums['forwards_expected'])} forwards complete"
    else:
        headline = f"{fmt_ref(nums['bad_time_events'])} GPU events with impossible times"
    return finding("trace_quality", d, [v], f"{v}: {row['trace_note']}", nums, [{"kind": "metric", "name": "forwards_complete"}],
                   kind="warning", headline=headline)


def rule_correctness(d: RunData) -> list[dict]:
    """Relative error against the float64 reference, flagged above the dtype's tolerance."""
    out = []
    for _, row in d.summary[(d.summary["status"] == "ok") & d.summary["rel_error"].notna()].iterrows():
        if not bool(row["rel_error_ok"]):
            nums = {"rel_error": ref_summary(d, row["variant"], "rel_error")}
            out.append(finding("correctness", d, [row["variant"]], f"{row['variant']}: relative error {fmt_ref(nums['rel_error'])} "
                               f"against float64 is above the {row['dtype']} tolerance", nums, [{"kind": "metric", "name": "rel_error"}],
                               kind="failure", headline=f"relative error {fmt_ref(nums['rel_error'])} above tolerance"))
    return out


#: The gradients the backward's float64 check compares (summary.csv ``grad_rel_error_<name>``).
GRADIENTS = ("dq", "dk", "dv")


def rule_grad_correctness(d: RunData) -> list[dict]:
    """Gradients against the float64 reference (capture phase ``grad_correctness``, summary.csv
    ``grad_rel_error_dq``/``_dk``/``_dv``): a backward whose check failed (``grad_rel_error_ok``
    false) is a failure naming each gradient above the dtype's tolerance (the forward's); its times
    stay published, marked. Rows without a gradient check (forward-only runs, a backward that did
    not run) give nothing."""
    if "grad_rel_error_ok" not in d.summary:
        return []
    return [_wrong_gradients(d, v) for v in d.summary["variant"] if _grad_failed(d, v)]


def _grad_failed(d: RunData, variant: str) -> bool:
    """Whether a variant that ran has a gradient check that failed (a bool, or its text in a table read back as
    strings; no check: False)."""
    ok = clean(d.row(variant).get("grad_rel_error_ok")) if d.ok(variant) else None
    return ok is not None and str(ok).lower() != "true"


def _wrong_gradients(d: RunData, variant: str) -> dict:
    row = d.row(variant)
    # an error that is no finite number (a NaN or inf gradient, a value the record lost or garbled) is the worst
    # there is: named first, never passed over for a finite one that may well be within tolerance
    values = {g: pd.to_numeric(pd.Series([row.get(f"grad_rel_error_{g}")]), errors="coerce").iloc[0] for g in GRADIENTS}
    bad = [g for g, v in values.items() if not math.isfinite(v)]
    nums = {f"grad_rel_error_{g}": ref_summary(d, variant, f"grad_rel_error_{g}") for g in GRADIENTS if g not in bad}
    worst = max(nums, key=lambda n: nums[n]["value"]) if nums else None
    listing = ", ".join([f"{g} not finite" for g in bad] + [f"{n.removeprefix('grad_rel_error_')} {fmt_ref(r)}" for n, r in nums.items()])
    return finding("grad_correctness", d, [variant],
                   f"{variant}: its backward's gradients fail the float64 check ({listing}; {row['dtype']} tolerance "
                   "as for the forward); its backward times are shown, marked, and are not those of a correct backward",
                   nums, [{"kind": "metric", "name": worst}] if worst else [], kind="failure",
                   headline=_gradient_headline(bad, worst, nums))


def _gradient_headline(bad: list[str], worst: str | None, nums: dict) -> str:
    if bad:
        return f"wrong gradient: {', '.join(bad)} not finite (NaN or inf, or no error recorded)"
    if worst:
        return f"wrong gradient: {worst.removeprefix('grad_rel_error_')} relative error {fmt_ref(nums[worst])}"
    return "wrong gradient"
