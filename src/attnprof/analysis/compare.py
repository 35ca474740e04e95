"""Compare result sets (e.g. before and after a PyTorch upgrade, or two GPU kinds).

The first result set is the baseline; every other one is compared with it, per (variant,
shape) present in both: kernels per forward, kernels added and removed (names normalised
by stripping template arguments and parameter lists), aten ops added and removed, time
ratios judged against noise, status changes, what ``sdpa_auto`` dispatched to, the backward
pass (kernels and time per backward, same noise rule) and torch.compile's first call where both
result sets have them, and the environment and config differences.

Change verdict for a time (forward and backward, per variant and shape): from the two result sets'
repeats (repeats.csv: each repeat's median per forward), the one rule of :mod:`attnprof.analysis.verdict` -- the
ratio (paired per round in an A/B run) with its t interval, each row's variance moderated over the pair's rows, and
*slower*/*faster* (the interval lies beyond ``1 ± noise_floor``; ``noise_floor_host`` for a CPU run's host times),
*same* (it lies inside) or *inconclusive* (with the rounds that would decide it; "probably" where only the joint
control withholds it). A result set with one repeat has no
between-run spread: its times are never called changed. The independent timing's ratio (repeat 1's CUDA
events or perf_counter median) is shown beside it, not judged: it is one measurement per result set.
Counts and kernel names stay exact comparisons.
"""

from __future__ import annotations


import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnprof.analysis.control import ACCOUNTING_CHANGED, check_control, check_control_table, compare_controls, control_counts
from attnprof.analysis.recipe import diff_recipes, recipe_table_problem, restore_names
from attnprof.analysis.records import RecordError, load_record, load_status
from attnprof.analysis.stats import CONFIDENCE, SITTING_DF, SITTING_SD
from attnprof.analysis.tables import HOST_TIMES, concat_tables
from attnprof.analysis.verdict import (CHANGED, ONE_SITTING, Design, Sitting, design_of, judge_rows, paired_rows, paired_verdicts,
                                       unpaired_row)
from attnprof.analysis.verdict_sim import aa_false_changed, detectable
from attnprof.analysis.trace import short_kernel_name
from attnprof.model.formats import FormatError, current_table
from attnprof.model.names import FORMATS, RUN_FILES
from attnprof.model.plan import Layout
from attnprof.model.variants import CONTROL

#: A time's verdicts (attnprof.analysis.verdict's, and "not comparable" where a side has no time), in the order
#: a pair's ``counts`` lists them.
VERDICTS = (*CHANGED, "same", "inconclusive", "not judged", "not comparable")
#: Why an unpaired compare of host times gives no verdict (attnprof.analysis.stats.host_range): a capture's host time
#: is one draw of the host's state, and draws of different sittings differ by more than any threshold worth stating.
HOST_UNJUDGED = ("host times of different sittings are shown, not judged: a verdict on host times needs paired rounds "
                 "(an A/B run, config environments)")
#: Changes smaller than this fraction are not worth reporting (config ``compare.noise_floor``'s default): the
#: practical threshold of the verdict rule (attnprof.analysis.verdict) for device times.
NOISE_FLOOR = 0.02
#: The same for host times (CPU runs; config ``compare.noise_floor_host``): the repeats of one session do not
#: see how far a whole session's host times move. Two CPU default runs minutes apart on a 2-core machine, each
#: with 5 repeats, moved by up to 15 % with tight within-session intervals (sdpa_auto: 0.867x, 95 %: 0.784-0.958; docs/statistics.md).
NOISE_FLOOR_HOST = 0.20


def env_diff(a: dict, b: dict) -> list[dict]:
    """Keys of env.json (config flattened as config.x.y) whose values differ: [{key, a, b}]."""
    fa, fb = (pd.json_normalize(x).to_dict("records")[0] for x in (a, b))
    return [{"key": k, "a": fa.get(k), "b": fb.get(k)} for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def judged_time(summary: pd.DataFrame, noise_floor: float, noise_floor_host: float) -> tuple[str, str, float]:
    """(median column, label, practical threshold) of the time compared in ``summary`` (a summary.csv or
    repeats.csv frame): device time with ``noise_floor`` on GPU runs, CPU (host) time with ``noise_floor_host``
    else. compare and the top-up checkpoint's look 1 (scripts/top_up.py) judge the same time."""
    if summary["device_ms_per_forward"].notna().any():
        return "device_ms_per_forward", "device time per forward (trace)", noise_floor
    return "cpu_ms_per_forward", "CPU time per forward (trace)", noise_floor_host


def repeat_medians(repeats: pd.DataFrame | None, summary_row: pd.Series, variant: str, shape_key: str, col: str) -> list[float]:
    """The per-repeat medians of time column ``col`` (device_ms_per_forward, cpu_ms_per_backward, ...) of one
    (variant, shape) from a result set's repeats.csv (its repeats with status ok); for a result set made
    before repeats (no repeats.csv, or no such column) the summary's one value."""
    if repeats is not None and len(repeats) and col in repeats:
        r = repeats[(repeats["variant"] == variant) & (repeats["shape_key"] == shape_key) & (repeats["status"] == "ok")]
        return [float(v) for v in r[col] if not pd.isna(v)]
    v = _num(summary_row.get(col))
    return [] if v is None else [v]


def _row_keys(c: dict) -> dict:
    """A verdict of attnprof.analysis.verdict.judge_rows under the keys of a compare row: ``ratio_lo``/``ratio_hi``
    the interval the verdict rests on and ``level`` its level (a row "the same" within X: the same-level interval,
    which lies inside; every other row: the changed-level interval)."""
    same = c["verdict"] == "same"
    lo, hi, level = (c["lo_same"], c["hi_same"], c.get("level_same")) if same else (c["lo"], c["hi"], c.get("level"))
    return {"ratio": c["ratio"], "ratio_lo": lo, "ratio_hi": hi, "verdict": c["verdict"], "repeats_a": c["n_a"],
            "repeats_b": c["n_b"], "repeats_needed": c["repeats_needed"], "why": c["why"], "p": c.get("p"),
            "probably": c.get("probably"), "df": c.get("df"), "se": c.get("se"), "level": level}


def _dispatch(findings: dict, shape_key: str, key: str = "headline") -> str | None:
    """``key`` of the first dispatch finding at ``shape_key`` in a findings.json, None where there is none."""
    return next((f.get(key) for shape in findings.get("shapes", []) if shape["shape_key"] == shape_key
                 for f in shape["findings"] if f["rule"] == "dispatch"), None)


#: PyTorch's own words in a capture's reason: what follows "Because:" (attnprof.measure.capture._because:
#: the SDPA dispatcher's warnings, "<backend> kernel not used because: ...").
_BECAUSE = re.compile(r"\bBecause:\s*(.*)$", re.S)


def pytorch_reason(reason) -> str | None:
    """The part of a summary.csv ``reason`` that is PyTorch's own text: the SDPA dispatcher's warnings
    after "Because:" (an unsupported capture), else the exception's message (text up to the first
    period followed by a space, at most 300 characters); None for an empty reason."""
    text = _text(reason)
    if not text:
        return None
    m = _BECAUSE.search(text)
    return m.group(1).strip() if m else text[:300]


def support_changes(sa: pd.DataFrame, sb: pd.DataFrame) -> list[dict]:
    """Why a (variant, shape) is (un)supported, diffed between summaries ``sa`` (A) and ``sb`` (B): one
    entry per (variant, shape) in both whose status differs, or whose status is the same but not ok and
    PyTorch's reasons (:func:`pytorch_reason` of an unsupported capture) differ; each {variant,
    shape_key, status_a, status_b, reason_a, reason_b} with the reasons in PyTorch's own words. An
    out-of-memory reason whose status did not change is left out (its free-memory figures differ every
    run)."""
    out = []
    cols = ["variant", "shape_key", "status", "reason"]
    both = sa.reindex(columns=cols).merge(sb.reindex(columns=cols), on=["variant", "shape_key"], suffixes=("_a", "_b"))
    for r in both.itertuples(index=False):
        if r.variant == CONTROL:
            continue
        ra, rb = pytorch_reason(r.reason_a), pytorch_reason(r.reason_b)
        if r.status_a != r.status_b or (r.status_a == "unsupported" and ra != rb):
            out.append({"variant": r.variant, "shape_key": r.shape_key, "status_a": r.status_a, "status_b": r.status_b,
                        "reason_a": ra if r.status_a != "ok" else None, "reason_b": rb if r.status_b != "ok" else None})
    return out


def device_of(run: dict) -> str:
    """"cuda" or "cpu": the device a result set (compare_pair's dict, its env.json) was captured on."""
    return "cuda" if (run.get("env") or {}).get("device") == "cuda" else "cpu"


def recipe_changes(a: dict, b: dict, classify: Callable[[str, str], str] | None, threshold: float, confidence: float,
                   accounting: dict, sitting: Sitting = ONE_SITTING) -> list[dict]:
    """The recipe diff (attnprof.analysis.recipe.diff_recipes) of every (variant, shape, pass) whose recipe
    tables both result sets have (``a["recipes"]``/``b["recipes"]``: {(variant, shape_key, pass): [table per
    repeat]}); each {variant, shape_key, pass, same, counts, groups, note, verdict}. verdict: "same recipe",
    "recipe changed", or -- when ``accounting["changed"]`` (the control's counts changed,
    attnprof.analysis.control.compare_controls) and steps were added, removed or replaced --
    :data:`attnprof.analysis.control.ACCOUNTING_CHANGED`: such count changes are not attributed to the variant.
    The control's own diff is listed too (variant ``control``). [] when either side has no recipe tables. A step's
    time is judged with its pair's ``sitting``, as the rows are."""
    ra, rb = a.get("recipes") or {}, b.get("recipes") or {}
    out = []
    for key in sorted(set(ra) & set(rb)):
        d = diff_recipes(ra[key], rb[key], classify, threshold, confidence, sitting)
        if d["same"] is None:
            continue
        counted = sum(d["counts"][k] for k in ("added", "removed"))
        verdict = "same recipe" if d["same"] else "recipe changed"
        if accounting.get("changed") and counted and key[0] != CONTROL:
            verdict = ACCOUNTING_CHANGED
        out.append({"variant": key[0], "shape_key": key[1], "pass": key[2], "verdict": verdict, **d})
    return out


@dataclass(frozen=True)
class _Judge:
    """What every row of one pair is judged with (compare_pair): both result sets, the time column compared (``med``)
    and its label, and every time's verdict, judged together ({(variant, shape_key, column): row keys}:
    :func:`time_verdicts`)."""

    a: dict
    b: dict
    med: str
    label: str
    verdicts: dict


def compare_pair(a: dict, b: dict, noise_floor: float = NOISE_FLOOR, confidence: float = CONFIDENCE,
                 noise_floor_host: float = NOISE_FLOOR_HOST, classify: Callable[[str, str], str] | None = None) -> dict:
    """Compare result set ``b`` with baseline ``a``. Each is a dict with keys name, summary,
    kernels, ops, repeats (DataFrames as written by the pipeline; repeats may be None for a result set
    made before repeats), env and findings (parsed JSON), and optionally recipes ({(variant, shape_key, pass):
    [recipe table per repeat]}, attnprof.analysis.recipe) and control_check (the self-check of its control.csv,
    attnprof.analysis.control, as load_result_set reads it; None or absent: its row in summary/ops, if any). ``classify(name, category) -> kernel class``: a
    step's role in the recipe diff (attnprof.findings.kernel_names.kernel_class; default its category).
    Returns a JSON-serialisable dict: rows (one per variant and shape in both, the control left out; the
    time verdict from the repeats, module docstring), dispatch (what sdpa_auto ran, per shape, changed or
    not), support (status and PyTorch's reasons that changed: :func:`support_changes`), accounting (the
    profiler self-check, attnprof.analysis.control), recipes (:func:`recipe_changes`), env_diff."""
    sa, sb = a["summary"], b["summary"]
    # the time compared and its practical threshold: device times, or host times on a CPU run
    med, label, noise_floor = judged_time(sa, noise_floor, noise_floor_host)
    keys = [(v, k) for v, k in sa[["variant", "shape_key"]].merge(sb[["variant", "shape_key"]]).itertuples(index=False)
            if v != CONTROL]
    # the profiler's control is left out of the keys: checked below, never ranked with the attention variants
    # an A/B run's rounds are paired row by row where that row's rounds were captured interleaved
    unpaired = ab_unpaired_rows(a, b, keys)
    paired_keys = [k for k in keys if k not in unpaired]
    paired = bool(paired_keys)
    sitting = sitting_of(a, b) if unpaired else Sitting()
    verdicts, joint = time_verdicts(a, b, keys, med, paired_keys, noise_floor, confidence, sitting)
    judge = _Judge(a, b, med, label, verdicts)
    rows = [_pair_row(judge, variant, shape_key) for variant, shape_key in keys]
    accounting = _accounting(a, b)
    return {"a": a["name"], "b": b["name"], "threshold": noise_floor, "rows": rows, "joint": joint,
            "sitting_sd": sitting.sd or None, "sitting": vars(sitting), "dispatch": dispatch_changes(a, b),
            "env_diff": env_diff(a["env"], b["env"]),
            "torch": {"a": a["env"].get("torch"), "b": b["env"].get("torch")},  # each build, local suffix and all
            "notes": _pair_notes(a, b, unpaired, len(keys)), "accounting": accounting, "paired": paired,
            "unpaired_rows": [f"{v}/{k}" for v, k in keys if (v, k) in unpaired and unpaired[(v, k)]],
            "design": vars(design_of(a["env"], b["env"])) if paired else None,
            "support": support_changes(sa, sb), "recipes": recipe_changes(a, b, classify, noise_floor, confidence, accounting,
                                                                               sitting),
            "only_in_a": _only_in(sa, sb), "only_in_b": _only_in(sb, sa)}


def _summary_row(summary: pd.DataFrame, variant: str, shape_key: str) -> pd.Series:
    """The summary row of one (variant, shape)."""
    return summary[(summary["variant"] == variant) & (summary["shape_key"] == shape_key)].iloc[0]


def _pair_row(judge: _Judge, variant: str, shape_key: str) -> dict:
    """One row of compare_pair: status, kernels per forward, kernels and ops added and removed, the forward time
    and its verdict, the independent timing's ratio, the backward (:func:`_backward_change`, judged where both
    sides have a time) and torch.compile's first call."""
    ra, rb = _summary_row(judge.a["summary"], variant, shape_key), _summary_row(judge.b["summary"], variant, shape_key)
    return {"variant": variant, "shape_key": shape_key, "status_a": ra["status"], "status_b": rb["status"],
            "kernels_a": _num(ra.get("kernels_per_forward")), "kernels_b": _num(rb.get("kernels_per_forward")),
            **_kernel_op_changes(judge.a, judge.b, variant, shape_key), **_forward_time(judge, ra, rb, variant, shape_key),
            **_backward_time(judge, ra, rb, variant, shape_key), **_compile_change(ra, rb)}


def _names(frame: pd.DataFrame | None, variant: str, shape_key: str, col: str, fn=lambda x: x) -> set:
    """The distinct values of ``col`` (through ``fn``) of one (variant, shape) in a kernels or ops table; empty when
    the result set has no such table or it is empty."""
    if frame is None or len(frame) == 0:
        return set()
    f = frame[(frame["variant"] == variant) & (frame["shape_key"] == shape_key)]
    return {fn(n) for n in f[col]}


def _kernel_op_changes(a: dict, b: dict, variant: str, shape_key: str) -> dict:
    """The kernels (names normalised, attnprof.analysis.trace.short_kernel_name) and aten ops of one (variant, shape) that ``b``
    launches and ``a`` does not (added), and the reverse (removed), each sorted."""
    ka = _names(a["kernels"], variant, shape_key, "kernel", short_kernel_name)
    kb = _names(b["kernels"], variant, shape_key, "kernel", short_kernel_name)
    oa, ob = _names(a.get("ops"), variant, shape_key, "op"), _names(b.get("ops"), variant, shape_key, "op")
    return {"kernels_added": sorted(kb - ka), "kernels_removed": sorted(ka - kb),
            "ops_added": sorted(ob - oa), "ops_removed": sorted(oa - ob)}


#: The verdict keys of a row with no time on one side (each of :func:`time_verdicts`'s rows, None).
_NOT_COMPARED = dict.fromkeys(("ratio", "ratio_lo", "ratio_hi", "repeats_a", "repeats_b", "repeats_needed", "p", "probably",
                               "df", "se", "level", "paired", "look", "top_up"))


def _forward_time(judge: _Judge, ra: pd.Series, rb: pd.Series, variant: str, shape_key: str) -> dict:
    """The forward time of one row in both result sets, the independent timing's ratio (shown, not judged) and the
    time verdict from the repeats; "not comparable" when either side has no time or is not ok."""
    ta, tb = _num(ra.get(judge.med)), _num(rb.get(judge.med))
    ia, ib = _num(ra.get("timed_ms_median")), _num(rb.get("timed_ms_median"))
    out = {"time_a_ms": ta, "time_b_ms": tb, "timing": judge.label, "timed_ratio": ib / ia if ia and ib else None}
    if ta and tb and ra["status"] == "ok" and rb["status"] == "ok":
        out.update(judge.verdicts[(variant, shape_key, judge.med)])
    else:
        out.update(_NOT_COMPARED, verdict="not comparable", why="no time in one of the result sets")
    return out


def _backward_time(judge: _Judge, ra: pd.Series, rb: pd.Series, variant: str, shape_key: str) -> dict:
    """:func:`_backward_change` of one row, with the backward time's verdict (``bwd_`` keys) where both sides have
    a backward time."""
    back = _backward_change(ra, rb, judge.med)
    if back["bwd_a_ms"] and back["bwd_b_ms"]:
        v = judge.verdicts[(variant, shape_key, judge.med.replace("per_forward", "per_backward"))]
        back.update(bwd_ratio=v["ratio"], bwd_ratio_lo=v["ratio_lo"], bwd_ratio_hi=v["ratio_hi"], bwd_verdict=v["verdict"],
                    bwd_repeats_needed=v["repeats_needed"], bwd_why=v["why"], bwd_p=v["p"], bwd_probably=v.get("probably"))
    return back


def dispatch_changes(a: dict, b: dict) -> list[dict]:
    """What sdpa_auto dispatched to (headline and statement, from findings) for every shape in both result sets,
    each with ``changed`` (the headlines differ)."""
    shapes = sorted(set(a["summary"]["shape_key"]) & set(b["summary"]["shape_key"]))
    dispatch = ({"shape_key": s, "a": _dispatch(a["findings"], s), "b": _dispatch(b["findings"], s),
                 "statement_a": _dispatch(a["findings"], s, "statement"), "statement_b": _dispatch(b["findings"], s, "statement")}
                for s in shapes)
    return [{**d, "changed": d["a"] != d["b"]} for d in dispatch]


def _self_check(x: dict) -> dict:
    """The profiler self-check of one result set: its control.csv's (load_result_set), else a control row among its
    summary/ops tables."""
    if x.get("control_check") is not None:
        return x["control_check"]
    return check_control(control_counts(x["summary"], x.get("ops"), device_of(x)), device_of(x))


def _accounting(a: dict, b: dict) -> dict:
    """The self-check of both result sets and whether the control's counts changed (compare_controls)."""
    ca, cb = _self_check(a), _self_check(b)
    return {**compare_controls(ca, cb), "a": ca, "b": cb}


def _pair_notes(a: dict, b: dict, unpaired: dict, rows: int) -> list[str]:
    """The pair's notes: one side profiled the backward and the other did not (so the forwards did different
    work), and which of the pair's ``rows`` rows are not paired and why."""
    notes = []
    pa, pb = ((x["env"].get("config") or {}).get("passes") or ["forward"] for x in (a, b))
    if ("backward" in pa) != ("backward" in pb):
        notes.append(f"{a['name'] if 'backward' in pa else b['name']} profiled the backward too: its forwards ran with "
                     "grad (saving what the backward needs; flash and efficient also write their log-sum-exp), the other's "
                     "under no_grad, so forward ratios compare slightly different work")
    causes: dict[str, list[str]] = {}
    for (v, k), why in unpaired.items():
        if why:
            causes.setdefault(why, []).append(f"{v} at {k}")
    notes += [f"{'every row' if len(named) == rows else ', '.join(named)}: {why}" for why, named in causes.items()]
    return notes


def _only_in(sx: pd.DataFrame, sy: pd.DataFrame) -> list[str]:
    """The "variant/shape_key" cells of summary ``sx`` that summary ``sy`` lacks, sorted."""
    return sorted(set(sx["variant"] + "/" + sx["shape_key"]) - set(sy["variant"] + "/" + sy["shape_key"]))


def nothing_in_common(pair: dict) -> str | None:
    """The words for a pair of :func:`compare_runs` whose result sets share no (variant, shape): nothing was compared
    (its page says so, and the compare says it on the terminal); None where a row was compared."""
    if pair["rows"]:
        return None
    held = {side: pair[f"only_in_{side}"] for side in ("a", "b")}
    said = "; ".join(f"{pair[side]} holds {len(cells)} ({', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''})"
                     for side, cells in held.items())
    return (f"{pair['b']} and {pair['a']} share no variant at any shape: nothing was compared ({said}). Compare result "
            "sets captured with the same grid: the same config before and after an upgrade, or an A/B run")


def _backward_change(ra: pd.Series, rb: pd.Series, forward_col: str) -> dict:
    """The backward pass of one (variant, shape) in both result sets (config passes): kernels per
    backward (``bwd_kernels_a``/``_b``), ms per backward (device on a GPU run, host on a CPU run, as
    the forward). The verdict (compare_pair, from the repeats) is filled in by the caller; "not comparable"
    when a backward was profiled but has no time on one side; all None when neither profiled it."""
    col = forward_col.replace("per_forward", "per_backward")
    ta, tb = _num(ra.get(col)), _num(rb.get(col))
    sa, sb = _text(ra.get("backward_status")), _text(rb.get("backward_status"))
    out = {"bwd_status_a": sa, "bwd_status_b": sb,
           "bwd_kernels_a": _num(ra.get("kernels_per_backward")), "bwd_kernels_b": _num(rb.get("kernels_per_backward")),
           "bwd_a_ms": ta, "bwd_b_ms": tb, "bwd_ratio": None, "bwd_ratio_lo": None, "bwd_ratio_hi": None,
           "bwd_verdict": None, "bwd_repeats_needed": None}
    if not (ta and tb) and (sa or sb):  # profiled in one or both, but no time in one of them: say so rather than drop the row
        out["bwd_verdict"] = "not comparable"
    return out


def _text(v) -> str | None:
    """A table cell as text, None for an empty one (None, NaN: pandas' own test)."""
    return None if pd.isna(v) else str(v)


def _compile_change(ra: pd.Series, rb: pd.Series) -> dict:
    """A torch.compile variant's first call (compile) in both result sets, in seconds, with
    inductor's cache verdicts; one measurement each, so no noise verdict: a cache hit against a
    miss explains most of a difference. None when either has no compile record."""
    a, b = _num(ra.get("compile_first_call_s")), _num(rb.get("compile_first_call_s"))
    return {"compile_a_s": a, "compile_b_s": b, "compile_ratio": b / a if a and b else None,
            "compile_cache_a": _text(ra.get("compile_cache")) if a else None,
            "compile_cache_b": _text(rb.get("compile_cache")) if b else None}


def _num(v) -> float | None:
    """A table cell as a float, None for an empty one (None, NaN: pandas' own test)."""
    return None if pd.isna(v) else float(v)


def compare_runs(runs: list[dict], noise_floor: float = NOISE_FLOOR, confidence: float = CONFIDENCE,
                 noise_floor_host: float = NOISE_FLOOR_HOST, classify: Callable[[str, str], str] | None = None) -> dict:
    """Compare every result set after the first with the first (the baseline). Also counts the verdicts per
    pair (``counts``: {verdict: n} over the forward rows); each pair's ``threshold`` is the practical threshold
    of the time it compared (``noise_floor`` for device times, ``noise_floor_host`` for a CPU run's host times)."""
    if len(runs) < 2:
        raise ValueError("compare needs at least two result sets")
    check_one_device(runs)
    pairs = [compare_pair(runs[0], other, noise_floor, confidence, noise_floor_host, classify) for other in runs[1:]]
    for p in pairs:
        p["counts"] = {v: sum(r["verdict"] == v for r in p["rows"]) for v in VERDICTS}
    return {"baseline": runs[0]["name"], "noise_floor": noise_floor, "noise_floor_host": noise_floor_host,
            "confidence": confidence, "pairs": pairs}


def check_one_device(runs: list[dict]) -> None:
    """Refuse result sets of different devices (:func:`device_of`): a GPU result set's device times and kernels
    against a CPU one's host times and aten ops are different devices' work, not a change of the profiler's
    accounting nor of any variant. Raises ValueError naming each result set's device and the fix."""
    devices = {r["name"]: device_of(r) for r in runs}
    if len(set(devices.values())) > 1:
        said = ", ".join(f"{n} on {'a GPU (cuda)' if d == 'cuda' else 'the CPU'}" for n, d in devices.items())
        raise ValueError(f"compare refuses result sets of different devices ({said}, as their env.json record): "
                         "GPU kernels and device times do not compare with CPU ops and host times. Fix: list in "
                         "compare.runs result sets of one device")


# --- A/B pairing (issue 20 part 1: config environments; attnprof.analysis.verdict.paired_verdicts) --------------
# Two result sets of one A/B run were captured round by round on one device, A and B back to back (ABBA): their
# time verdicts pair round k of A with round k of B, row by row where that row's rounds were interleaved. Every
# other row is judged unpaired.

def ab_unpaired_rows(a: dict, b: dict, keys: list[tuple[str, str]]) -> dict:
    """{(variant, shape_key): why} of the rows of ``keys`` that are compared unpaired: every row, with '' (no note
    needed), for result sets that are not two environments of one A/B run; in an A/B run, each row whose own rounds
    were not captured interleaved (:func:`_interleaving_problem`): a row recaptured on one side later (an edited
    custom variant's module recaptures it, a deleted capture) loses its pairing, the other rows keep theirs."""
    if not _ab_environments(a, b):
        return dict.fromkeys(keys, "")
    both = pd.concat([x["repeats"].assign(_side=x["name"]) for x in (a, b)], ignore_index=True)
    whys = {key: _interleaving_problem(both[(both["variant"] == key[0]) & (both["shape_key"] == key[1])]) for key in keys}
    return {key: why for key, why in whys.items() if why is not None}


def _ab_environments(a: dict, b: dict) -> bool:
    """Whether ``a`` and ``b`` are two environments of one A/B run (env.json ``ab``: the same run, different
    environments); each has its repeats.csv (load_result_set requires it, with its ``repeat`` column)."""
    ea, eb = (x["env"].get("ab") or {} for x in (a, b))
    return bool(ea.get("run") and ea.get("run") == eb.get("run") and ea.get("environment") != eb.get("environment"))


def _interleaving_problem(rows: pd.DataFrame) -> str | None:
    """Why one row's rounds in an A/B pair (``rows``: its repeats.csv rows of both sides, ``_side`` naming each) were
    not captured interleaved, naming the side captured late; None when every capture of round k started before
    every capture of round k + 1."""
    if "started_at" not in rows or rows["started_at"].isna().any():
        return ("the repeats.csv do not record when each capture started, so that the rounds were captured "
                "interleaved cannot be checked: compared unpaired")
    spans = rows.groupby("repeat")["started_at"].agg(["min", "max"]).sort_index()
    late = [int(k) for k, nxt in zip(spans.index[:-1], spans["min"].iloc[1:]) if spans.loc[k, "max"] >= nxt]
    if not late:
        return None
    k = late[0]
    side = rows[(rows["repeat"] == k)].sort_values("started_at")["_side"].iloc[-1]
    return (f"round {k} in {side} started after round {k + 1} began: recaptured there later (an edited custom "
            "variant's module, a deleted capture, or another A/B run of the same name), so its rounds share no "
            "moment to cancel: compared unpaired")


def _judged(col: str, paired: bool) -> bool:
    """Whether time column ``col`` gets a verdict: device times always, host times (tables.HOST_TIMES) only paired."""
    return paired or col not in HOST_TIMES


def _repeat_medians(x: dict, key: tuple[str, str], col: str) -> list[float]:
    """:func:`repeat_medians` of one (variant, shape) of the pair's keys, which both summaries have."""
    return repeat_medians(x.get("repeats"), _summary_row(x["summary"], *key), key[0], key[1], col)


def time_verdicts(a: dict, b: dict, keys: list[tuple[str, str]], med: str, paired_keys: list[tuple[str, str]],
                  threshold: float, confidence: float, sitting: Sitting) -> tuple[dict, dict]:
    """Every time verdict of one pair, forwards and backwards judged together by the one rule
    (attnprof.analysis.verdict): the rows of ``paired_keys`` paired over the rounds (with the looks the A/B run was
    captured with), the others unpaired on the repeat medians with ``sitting``'s term. Host times compared unpaired
    get "not judged" (:data:`HOST_UNJUDGED`). Returns ({(variant, shape_key, column): compare row keys plus
    ``paired``, ``look``, ``top_up``}, the pair's joint statement: :func:`joint_statement`, of the paired rows
    where any are)."""
    cols = [c for c in (med, med.replace("per_forward", "per_backward")) if c in a["summary"] and c in b["summary"]]
    paired = set(paired_keys)
    together = [(v, k, c) for v, k in keys if (v, k) in paired for c in cols]
    apart = [(v, k, c) for v, k in keys if (v, k) not in paired for c in cols if _judged(c, False)]
    design = design_of(a["env"], b["env"]) if paired else Design(None, 1)
    raw = paired_verdicts(a["repeats"], b["repeats"], together, threshold, confidence, design) if together else {}
    rows = {(v, k, c): unpaired_row(_repeat_medians(a, (v, k), c), _repeat_medians(b, (v, k), c), (v, c))
            for v, k, c in apart}
    rows = {key: r for key, r in rows.items() if r.a and r.b}
    loose = judge_rows(rows, threshold, confidence, 1, sitting)
    out = {key: {**_row_keys(v), "paired": key in raw, "look": v.get("look", 1), "top_up": v.get("top_up")}
           for key, v in {**loose, **raw}.items()}
    for v, k, c in [(v, k, c) for v, k in keys for c in cols if (v, k, c) not in out]:
        m = unpaired_row(_repeat_medians(a, (v, k), c), _repeat_medians(b, (v, k), c)).moments()[0]
        ratio = math.exp(m) if math.isfinite(m) else None
        out[(v, k, c)] = {**_row_keys(_no_verdict((v, k) in paired, c, ratio)), "paired": False, "look": 1,
                          "top_up": None}
    if together:  # the simulation resamples look 1's rounds, as the run judged them first
        sim = paired_rows(a["repeats"], b["repeats"], together, design.base)
        return out, joint_statement(a["env"], sim, raw, threshold, confidence, design, Sitting())
    return out, joint_statement(a["env"], rows, loose, threshold, confidence, Design(None, 1), sitting)


def _no_verdict(paired: bool, col: str, ratio: float | None) -> dict:
    """The verdict of a row the rule did not judge (a host time of two sittings, or a side without repeats), with
    its ratio of geometric means shown."""
    why = HOST_UNJUDGED if not _judged(col, paired) else "no time on one side"
    return {"verdict": "not judged" if not _judged(col, paired) else "inconclusive", "ratio": ratio, "lo": None,
            "hi": None, "n_a": None, "n_b": None, "repeats_needed": None, "why": why}


def joint_statement(env: dict, rows: dict, raw: dict, threshold: float, confidence: float, design: Design,
                    sitting: Sitting) -> dict:
    """What page 1 states about the pair's rows as a whole (``rows``: {key: attnprof.analysis.verdict.RowData} as
    the rule judged them, ``raw``: its verdicts; ``env``: the baseline's env.json, for top-up's rounds): how many were
    judged, how many lay beyond X (candidates) and how many of those the joint control withheld ("probably"), and --
    simulated with this pair's own rows' noise resampled (attnprof.analysis.verdict_sim) -- the expected number of
    false "changed" rows of an A/A and each row's detectable change (the smallest change found with 80 % power as a
    lone change)."""
    judged = {k: r for k, r in rows.items() if raw.get(k, {}).get("p") is not None}
    out = {"rows": len(judged), "candidates": sum(raw[k]["p"] <= 0.5 for k in judged),
           "withheld": sum(raw[k].get("probably") is not None for k in judged), "expected_false": None,
           "detectable": None, "simulated": 0}
    if not judged:
        return out
    top_up = int(((env.get("config") or {}).get("top_up") or {}).get("rounds") or 0) if design.looks > 1 else 0
    aa = aa_false_changed(judged, threshold, design, top_up, confidence, sitting)
    limits = detectable(judged, threshold, design, top_up, confidence, sitting)
    out.update(expected_false=aa["false_changed"], simulated=aa["sims"],
               detectable={f"{k[0]}/{k[1]}/{k[2]}": lim for k, lim in zip(judged, limits)})
    return out


#: Most seconds between two result sets' captures (the end of one, the start of the other) on the same GPUs for
#: them to count as one sitting: the sittings measured apart (SITTING_SD) were hours to days apart; a rerun minutes
#: later is the same sitting.
SAME_SITTING_GAP_S = 1800.0


def sitting_of(a: dict, b: dict) -> Sitting:
    """Whether two result sets compared unpaired were captured in one sitting, from their records: repeats.csv's
    ``gpu_uuid`` (the same GPUs) and ``started_at`` (no more than :data:`SAME_SITTING_GAP_S` between one's captures
    and the other's). One sitting: no sitting term; otherwise (or where the records do not tell) the sitting term
    (attnprof.analysis.stats.SITTING_SD, SITTING_DF). The words say which and why."""
    spans, gpus = [], []
    for x in (a, b):
        r = x.get("repeats")
        if r is None or "started_at" not in r or "gpu_uuid" not in r or r["started_at"].isna().all():
            return Sitting(SITTING_SD, SITTING_DF, f"{x['name']} does not record when and on which GPU each capture ran: "
                                                   "counted as another sitting")
        spans.append((float(r["started_at"].min()), float(r["started_at"].max())))
        gpus.append(set(r["gpu_uuid"].dropna().astype(str)))
    gap = max(spans[0][0], spans[1][0]) - min(spans[0][1], spans[1][1])
    if gpus[0] and gpus[0] == gpus[1] and gap <= SAME_SITTING_GAP_S:
        return Sitting(0.0, math.inf, f"one sitting: the same GPU, captures {max(gap, 0) / 60:.0f} min apart; no sitting "
                                      "term added")
    why = "other GPUs" if gpus[0] != gpus[1] else f"captures {gap / 3600:.1f} h apart"
    return Sitting(SITTING_SD, SITTING_DF, f"two sittings ({why}): the sitting term added")


# --- Reading a result set (scripts/compare.py) ------------------------------------------------------------------
# compare runs without a rebuild (the README's command allows compare's own rules only), so it computes with no file
# it cannot check: every table and findings.json it reads must match the SHA-256 its writer recorded
# (attnprof.runtime.integrity.file_problem, which scripts/compare.py passes in), hold the columns compare reads, and hold times its writer could write.
# A file that does not is refused, named, with the fix; never read as a change between the result sets.

class ResultSetError(ValueError):
    """A result set compare refuses to read: the message names the file, what is wrong and the fix."""


#: The README's command that re-derives a result set's tables, findings and report from its traces.
RERENDER = ".venv/bin/snakemake --profile workflow/profiles/render {run_dir}/report.pdf --forcerun extract"
#: The time columns compare computes with (summary.csv, repeats.csv): each value a positive number of ms, or empty.
TIME_COLUMNS = ("device_ms_per_forward", "cpu_ms_per_forward", "device_ms_per_backward", "cpu_ms_per_backward")
#: The columns compare reads, per table of a result set; a table without one is damaged (its writer writes them all).
REQUIRED_COLUMNS = {"summary": ("variant", "shape_key", "status", "device_ms_per_forward", "cpu_ms_per_forward"),
                    "repeats": ("variant", "shape_key", "repeat", "status", *TIME_COLUMNS),
                    "kernels": ("variant", "shape_key", "kernel"), "ops": ("variant", "shape_key", "op")}
#: The values compare computes with, per table: times (a positive number) and counts (a whole number, 0 or more).
_VALUES = {"summary": {"time": (*TIME_COLUMNS, "timed_ms_median", "compile_first_call_s"),
                       "count": ("kernels_per_forward", "kernels_per_backward")},
           "repeats": {"time": TIME_COLUMNS, "count": ("repeat", "kernels_per_forward", "kernels_per_backward")}}
#: What each kind of value must be: (test of a number, the words for it).
_KINDS = {"time": (lambda x: (x > 0) & (x < float("inf")), "a time (a positive number of ms)"),
          "count": (lambda x: (x >= 0) & (x % 1 == 0), "a count (a whole number, 0 or more)")}


def rerender_fix(run_dir) -> str:
    """The fix for a result set whose derived files are damaged, missing or unchecked: re-derive them."""
    return f"Fix: re-render the result set from its traces ({RERENDER.format(run_dir=run_dir)}), then compare again"


def load_result_set(name: str, files: dict, file_problem: Callable[[Path, str], str | None]) -> dict:
    """Result set ``name`` as :func:`compare_pair` reads it, from ``files`` ({kind: path, or [paths] for the per-capture
    tables}: summary, kernels, env, findings, repeats, ops (repeat 1's), and, where its captures are here, recipe and
    recipe_backward (every repeat's)); its folder is summary.csv's. Each file but env.json must be what its writer wrote:
    ``file_problem(run_dir, path)`` says why not, or None (attnprof.runtime.integrity.file_problem: its SHA-256 sidecar;
    given by the caller, as analysis reaches no runtime module), and control.csv is read from the folder unless env.json
    says the result set was captured by a version without the control (``captures_control``). env.json and repeats.csv
    are read in the current format (attnprof.model.formats). Raises :class:`ResultSetError` naming every file that is
    missing, unchecked or damaged, or in a format version this code cannot read, or the first column or value compare
    cannot use, each with the fix."""
    run_dir = Path(files["summary"]).parent
    fix = rerender_fix(run_dir)
    env = _record(files["env"], (), f"Fix: restore {files['env']} from the result set's original copy (a re-render "
                  "keeps env.json as captured)", "env")
    control = _control_path(run_dir, env)
    if env["captures_control"] and (why := _control_folder_lost(run_dir)):  # before the sidecars, which it unties
        raise ResultSetError(why)
    problems = [f"{p}: {why}" for p in _checked_files(files, control) if (why := file_problem(run_dir, p))]
    if problems:
        raise ResultSetError(f"result set {name} cannot be compared: " + "; ".join(problems) + f". {fix}")
    run = {"name": name, "env": env, "findings": _record(files["findings"], ("shapes",), fix),
           **{k: _table(files[k], k, fix) for k in ("summary", "kernels", "repeats")},
           "ops": concat_tables([_table(p, "ops", fix) for p in files.get("ops") or []])}
    _check_repeats_cover(run, files["repeats"], fix)
    _check_started_at(run["repeats"], files["repeats"], run_dir)
    run["recipes"] = _recipes(files, fix)
    if control:
        run["control_check"] = _control_check(control, run_dir, device_of(run), env)
    return run


def _control_path(run_dir: Path, env: dict) -> Path | None:
    """The result set's control.csv, which compare reads whatever its inputs say; None for a result set captured before
    the control (env.json ``captures_control`` false) that has none."""
    path = run_dir / RUN_FILES["control"]
    return None if not env["captures_control"] and not path.exists() else path


def _checked_files(files: dict, control: Path | None) -> list:
    """Every file of ``files`` (:func:`load_result_set`) that compare reads and its writer checksummed: all but env.json."""
    return ([files[k] for k in ("summary", "kernels", "repeats", "findings")]
            + [p for kind in ("ops", "recipe", "recipe_backward") for p in files.get(kind) or []] + ([control] if control else []))


def _record(path, keys, fix: str, kind: str | None = None) -> dict:
    """The record at ``path`` (attnprof.analysis.records.load_record: with ``keys``; ``kind``: in the current format);
    ResultSetError with ``fix`` when it cannot be read, or with the format's own fix (attnprof.model.formats) when
    its format version cannot."""
    try:
        return load_record(path, keys, kind)
    except RecordError as exc:
        raise ResultSetError(f"{exc}. {fix}") from None
    except FormatError as exc:
        raise ResultSetError(str(exc)) from None


def _read_csv(path, fix: str) -> pd.DataFrame:
    """``path`` read as a CSV table; an empty or unparsable file raises ResultSetError (damaged)."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ResultSetError(f"{path}: damaged: an empty file (no header, no rows), which its writer never leaves. "
                             f"{fix}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ResultSetError(f"{path}: damaged: not a CSV table ({exc}). {fix}") from None


def _table(path, kind: str, fix: str) -> pd.DataFrame:
    """Table ``kind`` (REQUIRED_COLUMNS' keys) of a result set, read (repeats.csv: in the current format,
    attnprof.model.formats) and checked: its columns, and its times."""
    frame = _read_csv(path, fix)
    if kind in FORMATS:
        try:
            frame = current_table(kind, frame, path)
        except FormatError as exc:
            raise ResultSetError(str(exc)) from None
    missing = [c for c in REQUIRED_COLUMNS[kind] if c not in frame.columns]
    if missing:
        raise ResultSetError(f"{path}: damaged: column{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing "
                             f"(its writer writes {', '.join(REQUIRED_COLUMNS[kind])}). {fix}")
    for what, columns in _VALUES.get(kind, {}).items():
        if why := value_problem(frame, columns, what):
            raise ResultSetError(f"{path}: damaged: {why}. {fix}")
    return frame


def value_problem(frame: pd.DataFrame, columns, kind: str = "time") -> str | None:
    """The first value of ``columns`` in ``frame`` that is not of ``kind`` (:data:`_KINDS`: "time", a positive finite
    number; "count", a whole number, 0 or more; an empty cell holds none, and is fine), named by column, line of the
    file (the header is line 1) and row, or None."""
    test, words = _KINDS[kind]
    for col in (c for c in columns if c in frame.columns):
        raw = frame[col]
        bad = raw.notna() & ~test(pd.to_numeric(raw, errors="coerce"))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            row = frame.iloc[i]
            where = " ".join(str(row[k]) for k in ("variant", "shape_key", "repeat") if k in frame.columns)
            return (f"column {col}, line {i + 2} ({where}): {raw.iloc[i]!r} is not {words}; its writer leaves a cell "
                    "without one empty")
    return None


def _check_repeats_cover(run: dict, path, fix: str) -> None:
    """repeats.csv must list captures where summary.csv has an ok row: a header-only one is damaged, never one repeat."""
    s, r = run["summary"], run["repeats"]
    if (s["status"] == "ok").any() and not len(r):
        raise ResultSetError(f"{path}: damaged: no rows, while {Path(path).with_name(RUN_FILES['summary'])} has "
                             f"{int((s['status'] == 'ok').sum())} ok rows made from them. {fix}")


def _check_started_at(repeats: pd.DataFrame, path, run_dir: Path) -> None:
    """Each row of repeats.csv says when its capture began (``started_at``), which its capture's status.json records
    (``capture_started_at``, to the millisecond): a row that disagrees with the capture on disk was not made from it
    (the table of another result set, or edited with its sidecar), which a sidecar alone cannot tell (docs/trust.md).
    Rows whose capture is not here (a result set copied without its captures) are not judged. Raises ResultSetError
    naming both files, both times and the fix."""
    lay, run = Layout(str(run_dir.parent)), run_dir.name
    for row in repeats[["shape_key", "variant", "repeat", "started_at"]].dropna().itertuples(index=False):
        status = Path(lay.capture_file("status", run, shape=row.shape_key, variant=row.variant, repeat=int(row.repeat)))
        if not status.is_file():
            continue
        try:
            began = float(load_status(status, ())["capture_started_at"])
        except (RecordError, FormatError, TypeError, ValueError):
            continue  # a damaged record is the folder check's to name (attnprof.analysis.records)
        if abs(began - float(row.started_at)) > 0.001:
            raise ResultSetError(f"{path}: not made from this result set's captures: its row for {row.variant} at "
                                 f"{row.shape_key}, repeat {int(row.repeat)}, says the capture began at "
                                 f"{float(row.started_at):.3f}, while {status} records {began:.3f}. "
                                 f"{rerender_fix(run_dir)}")


def _recipes(files: dict, fix: str) -> dict:
    """{(variant, shape_key, pass): [recipe table per repeat, repeat 1 first]} from ``files``' recipe tables
    (.../tables/<shape>/<variant>/r<k>/recipe.csv; none when the result set was copied without its captures), each
    read and checked (attnprof.analysis.recipe.recipe_table_problem); a (variant, shape, pass) whose tables are all
    header-only (a pass not run) is left out."""
    out: dict = {}
    for kind, pass_ in (("recipe", "forward"), ("recipe_backward", "backward")):
        for p in files.get(kind) or []:
            where = Layout.capture_of(p, Layout.TABLES)
            frame = restore_names(_read_csv(p, fix))
            if why := recipe_table_problem(frame):
                raise ResultSetError(f"{p}: damaged: {why}. {fix}")
            out.setdefault((where["variant"], where["shape_key"], pass_), {})[where["repeat"]] = frame
    return {k: [v[r] for r in sorted(v)] for k, v in out.items() if any(len(t) for t in v.values())}


def _control_check(path: Path, run_dir: Path, device: str, env: dict) -> dict:
    """The self-check (attnprof.analysis.control.check_control_table) of control.csv at ``path``. Raises
    ResultSetError when the table cannot be read, or when a result set captured with the control
    (env.json ``captures_control``) lists no capture of it (its control captures deleted: load_result_set checked
    them first, as a re-render would write a control.csv without them): its control was lost, which is damage,
    never a result set from before the self-check."""
    table = _read_csv(path, rerender_fix(run_dir))
    try:
        check = check_control_table(table, device)
    except ValueError as exc:
        raise ResultSetError(f"{path}: damaged: {exc}. {rerender_fix(run_dir)}") from None
    if env["captures_control"] and not len(table):
        raise ResultSetError(f"{path} lists no capture of the control, {_since(run_dir)} {rerender_fix(run_dir)}")
    return check


def _since(run_dir: Path) -> str:
    return (f"while {run_dir / RUN_FILES['env']} records a version that captures it (config.environments present): "
            "the result set is damaged, its profiler self-check lost, never one from before the self-check.")


def _control_folder_lost(run_dir: Path) -> str | None:
    """Why a result set captured with the control, whose captures are here, holds none of the control's, with the
    fix; None where it holds them or its captures are not here."""
    layout, run = Layout.around(run_dir)
    if layout.has_captures(run) and not layout.control_shapes(run):
        control = layout.in_run(Layout.CAPTURES, "<shape>", CONTROL, None)
        return (f"{layout.run_dir(run)}/{Layout.CAPTURES} holds no capture of the control ({control} deleted?), "
                f"{_since(run_dir)} Fix: restore {control} from the original copy of the result set and re-render "
                f"({RERENDER.format(run_dir=run_dir)}); a re-render cannot remake a capture")
    return None
