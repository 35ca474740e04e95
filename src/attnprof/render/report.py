"""Render the run's report: a self-contained HTML file (jinja2, images embedded as data
URIs, every table cell autoescaped: kernel names are C++ templates full of <, > and &)
and a PDF of the same HTML (WeasyPrint)."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pandas as pd

from attnprof.analysis.compare import NOISE_FLOOR_HOST, VERDICTS
from attnprof.analysis.control import check_control, self_check_line
from attnprof.analysis.stats import CONFIDENCE, SAME_SITTING, look_levels
from attnprof.analysis.tables import CAPTURE_ONLY_COLUMNS, derive_columns, has_run_interval
from attnprof.findings.data import RunData
from attnprof.findings.expectations import WITHIN_NOISE
from attnprof.findings.ranking import PASSES, claims as ranking_claims, rank, spread_words, time_prefix
from attnprof.findings.rules.timing import rule_fidelity, rule_speed
from attnprof.findings.metrics import KERNEL_COUNT
from attnprof.model.fmt import format_number, format_range
from attnprof.model.gpus import differing_kinds, number_text
from attnprof.model.columns import columns_of
from attnprof.model.names import CAPTURE_FILES, CAPTURE_TABLES, RUN_FILES, TIMELINE
from attnprof.model.variants import COMPILED, DISPATCHERS, REGISTRY, uncompiled_of
from attnprof.render.breaks import mark_breaks
from attnprof.render.plots import CAPTIONS, CPU_CAPTIONS, CPU_PLOTS, FULL_WIDTH
from attnprof.analysis.trace import kernel_label

#: variant -> what it changes, for the summary table (the study's "change" column): each built-in variant's
#: description in its one registration (attnprof.model.variants.REGISTRY)
CHANGES = {name: variant.description for name, variant in REGISTRY.items()}


class RenderError(RuntimeError):
    """WeasyPrint logged an error (a missing image, a broken stylesheet): the PDF would be
    silently incomplete, so the job fails instead."""


def _describe(shape_key: str) -> str:
    """attnprof.model.variants.Shape.describe of a shape key, or '' for a key it cannot parse."""
    from attnprof.model.variants import Shape

    try:
        return Shape.from_key(shape_key).describe()
    except ValueError:
        return ""


def file_names() -> dict:
    """The result set's file names as the report names them (attnprof.model.names): ``run``, ``capture`` and
    ``tables`` by name, and ``csv_tables``, the per-capture CSV tables as one brace pattern
    ('{kernels,forwards,launches,ops}.csv')."""
    stems = [name.removesuffix(".csv") for name in CAPTURE_TABLES.values() if name.endswith(".csv")]
    return {"run": RUN_FILES, "capture": CAPTURE_FILES, "tables": CAPTURE_TABLES, "csv_tables": "{" + ",".join(stems) + "}.csv"}


def data_uri(path: Path) -> str:
    """PNG file as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _records(df: pd.DataFrame) -> list[dict]:
    return df.astype(object).where(df.notna(), None).to_dict("records")


def study_counts(expectations: dict) -> dict[str, int]:
    """variant -> the study's kernels per forward, from the expectations of metric KERNEL_COUNT (kernels_plus_memcpy)
    that are the study's own (no ``source`` of their own: those come from other documents)."""
    return {e["variants"][0]: e["expected"] for e in expectations["expectations"]
            if e["metric"] == KERNEL_COUNT and not e.get("source")}


def repeats_text(cfg: dict, summary: pd.DataFrame) -> str:
    """The methods' sentence on repeats: how many, what a repeat re-draws, what the rerun interval means and for which
    rerun (attnprof.analysis.stats: same machine, same sitting), how host times are stated, the largest between-run
    spread of the run and what compare can find against it."""
    n = int(cfg["repeats"])
    if n < 2:
        return ("this result set has one repeat (config <code>repeats</code> 1): its times have no between-run spread, "
                "and the IQR below them (first to third quartile over the forwards) says nothing about a rerun.")
    def col(name):
        return summary[name].dropna() if name in summary else pd.Series(dtype=float)

    dev, host = col("device_ms_run_sd_pct"), col("cpu_ms_run_sd_pct")
    parts = [f"{what} moved by up to {v.max():.1f}&nbsp;%" for what, v in (("device times", dev), ("host times", host))
             if len(v)]
    largest = (f" Between the repeats of this run, {' and '.join(parts)} (standard deviation of the log medians)."
               if parts else "")
    if len(dev):
        largest += (" What a change of these times <code>compare</code> can find depends on the other result set and the "
                    "design (another sitting, the same one, or a paired A/B run): each comparison states it, simulated with "
                    "its own rows' rounds resampled (docs/statistics.md).")
    coverage = 100 * (n - 1) / (n + 1)
    return (f"each (variant, shape) was captured {n} times (repeats), in rounds over the whole grid, each round in a fresh "
            "capture process: a repeat re-draws the process, the CUDA context, the allocations and the libraries' plan "
            "choices, and the time between repeats; the host and the GPU stay the same. The number stated is the median of "
            f"the repeat medians; <i>rerun</i> is the 95&nbsp;% prediction interval for the median a rerun with as many repeats "
            f"will state on the {SAME_SITTING} (Student's t over the log repeat medians, the between-process variance "
            "pooled over the variant's shapes; docs/statistics.md); another day or machine moves a whole block of cells "
            "beyond it, which <code>compare</code> adds. Host times have no such interval: they are the median over the "
            f"captures with the lowest and highest capture (one new capture falls inside with {coverage:.0f}&nbsp;% "
            "probability), and compare judges them only in a paired A/B run. IQR is the within-capture spread "
            "(first to third quartile over the forwards of the median repeat), which a rerun does not hold." + largest)


def build_context(run: str, summary: pd.DataFrame, kernels: pd.DataFrame, launches: pd.DataFrame, findings: dict,
                  env: dict, expectations: dict, plots: dict[str, dict[str, Path]], css: str,
                  run_plots: dict[str, Path] | None = None, calibration: dict | None = None,
                  counters: dict[str, list[dict]] | None = None, control: dict | None = None,
                  repeats: pd.DataFrame | None = None) -> dict:
    """Everything the template needs, as plain Python values. ``plots`` maps shape key ->
    plot name -> PNG path; ``run_plots`` the run-wide plots (scaling, roofline) by name;
    ``calibration`` is calibration.json; ``counters`` maps shape key -> the hardware-counter rows
    of attnprof.findings.counters (Nsight Compute, where rule measure_counters ran); ``control`` the
    profiler's self-check (attnprof.analysis.control.check_control_table of control.csv; None: a result set
    without a control capture): its line in the methods, and when it failed the first line of page 1.
    The summary's declared formulas (attnprof.analysis.tables.derive_columns: GB/s) are computed here too, so
    that a result set written before a formula was declared shows it. The timing findings (rules speed and
    fidelity, which read summary.csv and kernels.csv only) are made again with this engine
    (:func:`timing_findings`), so page 1 and the findings table state the same rankings even for a findings.json
    written by an earlier one."""
    summary, gpu, calibration = derive_columns(summary), bool(env.get("gpu_name")), calibration or {}
    shapes = [_shape_context(shape_key, summary, kernels, launches, findings, env, expectations, plots, counters)
              for shape_key in dict.fromkeys(summary["shape_key"])]
    study = _part1(shapes, gpu)
    cfg = env["config"]
    control = control or check_control(None, "cuda" if gpu else "cpu")
    bound = memory_bound(summary, calibration)
    used = gpus_used(repeats)
    brief = _page1(in_brief(study, shapes, summary, kernels), memory_bound_brief(summary, calibration, bound), used, control)
    return {"run": run, "env": env, "config": cfg, "repeats_text": repeats_text(cfg, summary), "shapes": shapes, "study": study, "expectations_meta": expectations, "css": css,
            "full_width": sorted(FULL_WIDTH), "captions": CAPTIONS if gpu else CPU_CAPTIONS, "timeline_name": TIMELINE, "brief": brief,
            "self_check": control, "self_check_line": self_check_line(control),
            "brief_notes": brief_notes(study, shapes, summary, used), "gpus_used": used, "sweep": sweep_table(summary, gpu, bound),
            "run_plots": {name: data_uri(p) for name, p in (run_plots or {}).items()},
            "calibration": calibration_numbers(calibration), "multi_shape": summary["shape_key"].nunique() > 1,
            "host_load": _load_range(summary, repeats), "files": file_names(), **noise_floors(cfg)}


def noise_floors(cfg: dict) -> dict:
    """compare's noise floors in % (``noise_floor_pct``, ``noise_floor_host_pct``) from the run's config (env.json in
    the current format: attnprof.model.formats gives one recorded before them the defaults)."""
    return {"noise_floor_pct": 100 * cfg["compare"]["noise_floor"],
            "noise_floor_host_pct": 100 * cfg["compare"]["noise_floor_host"]}


def _part1(shapes: list[dict], gpu: bool) -> dict | None:
    """Part 1 of the report: the shape the study's expectations were checked at (else the first), marked; every
    shape's plots as shown (part 1's timeline stands in part 1, beside the summary; a CPU run has no device plots)."""
    study = next((sh for sh in shapes if sh["is_study"]), next(iter(shapes), None))
    for sh in shapes:
        sh["part1"] = sh is study
        sh["timeline"] = sh["plots"].get(TIMELINE)
        hidden = {TIMELINE} if sh["part1"] else set()
        sh["shown_plots"] = {name: uri for name, uri in sh["plots"].items() if _shown(name, gpu) and name not in hidden}
    return study


def _shown(plot: str, gpu: bool) -> bool:
    return gpu or plot in CPU_PLOTS


def _page1(brief: list[dict], memory: list[dict], used: list[dict], control: dict) -> list[dict]:
    """Page 1's findings in order: the profiler's failed self-check first (every count below may be the profiler's),
    GPUs of different kinds, then :func:`in_brief`'s, with the memory-bound sentences before the captures that
    published nothing, which close it."""
    at = next((i for i, b in enumerate(brief) if b.get("kind") == "missing"), len(brief))
    brief = brief[:at] + memory + brief[at:]
    if len(used) > 1 and differing_kinds(used):  # page 1 says it among the findings, not in the small print
        brief.insert(0, {"text": gpu_note(used), "href": "#env", "claims": set()})
    if control["ok"] is False:
        brief.insert(0, {"text": "The profiler's accounting differs from the counts known by construction of its control "
                                 f"workload ({control['why']}): the kernel, memcpy, memset and op counts of this result set "
                                 "are suspect.", "href": "#self-check", "claims": set()})
    return brief


#: The rules whose findings read summary.csv and kernels.csv only: the report makes them again (:func:`timing_findings`).
TIMING_RULES = ("speed", "fidelity")


def timing_findings(stored: list[dict], summary: pd.DataFrame, kernels: pd.DataFrame, shape_key: str) -> list[dict]:
    """A shape's findings with those of :data:`TIMING_RULES` made again from the tables by this engine
    (attnprof.findings.rules.timing: the one ranking rule), in the place of the stored ones (findings.json of an
    earlier engine ranked dispatchers and wrong results); where none is stored, before the correctness rules, where
    the rules run."""
    d = RunData(shape_key, _at(summary, shape_key).reset_index(drop=True), _at(kernels, shape_key),
                pd.DataFrame(columns=["variant", "api", "calls_per_forward"]),
                pd.DataFrame(columns=["variant", "op", "calls_per_forward"]), {})
    fresh = rule_speed(d) + rule_fidelity(d)
    after = ("correctness", "grad_correctness", "backward")
    at = next((i for i, f in enumerate(stored) if f["rule"] in TIMING_RULES + after), len(stored))
    return [f for f in stored[:at]] + fresh + [f for f in stored[at:] if f["rule"] not in TIMING_RULES]


def _at(table: pd.DataFrame, shape_key: str) -> pd.DataFrame:
    """The rows of a table at one shape (an empty table as it is)."""
    return table[table["shape_key"] == shape_key] if len(table) else table


def _shape_context(shape_key: str, summary: pd.DataFrame, kernels: pd.DataFrame, launches: pd.DataFrame, findings: dict,
                   env: dict, expectations: dict, plots: dict, counters: dict | None) -> dict:
    """One shape's part of the report: its summary rows (:func:`_row_context`), findings, expectation checks, plots
    and hardware counters."""
    stored = next((s for s in findings["shapes"] if s["shape_key"] == shape_key), {"findings": [], "expectations": []})
    # each finding with the anchor of its row in the findings table (page 1 links its evidence there)
    found = [{**item, "anchor": f"f-{shape_key}-{i}"}
             for i, item in enumerate(timing_findings(stored["findings"], summary, kernels, shape_key), 1)]
    checks, counts = stored["expectations"], study_counts(expectations)
    table = [_row_context(row, shape_key, kernels, launches, found, env, counts) for row in _records(_at(summary, shape_key))]
    return {"key": shape_key, "describe": _describe(shape_key), "rows": table, "findings": found,
            "expectations": [_check_numbers(c) for c in checks], "expectations_words": expectations_words(checks),
            "is_study": bool(checks), "part1": False,
            "plots": {name: data_uri(p) for name, p in plots.get(shape_key, {}).items()},
            "deviations": sum(c["verdict"] == "different" for c in checks), "counters": (counters or {}).get(shape_key, [])}


#: Rules whose findings the summary row does not list: status and trace quality (the row shows status, reason and
#: trace note itself), backward and compile (stated in their own tables, :func:`backward_numbers`).
_OWN_COLUMNS = ("status", "trace_quality", "backward", "compile")
#: The timing-fidelity ratios of a row without a fidelity finding.
_NO_FIDELITY = {"timed_over_trace": None, "graph_over_trace": None}


def _row_context(row: dict, shape_key: str, kernels: pd.DataFrame, launches: pd.DataFrame, found: list[dict], env: dict,
                 counts: dict) -> dict:
    """One summary row as the report's table shows it: its kernels (:func:`_row_kernels`), launches, the findings
    about it (first-named variant), its timing-fidelity ratios and backward numbers."""
    v = row["variant"]
    row["forward_groups"] = json.loads(row["forward_groups"]) if row.get("forward_groups") else []
    mine = [f for f in found if f["variants"][:1] == [v]]
    beyond = {rule: [f for f in mine if f["rule"] == rule] for rule in ("backward", "compile")}
    return {**row, "change": change_of(v, env), "study_kernels": counts.get(v),
            "findings": [f for f in mine if f["rule"] not in _OWN_COLUMNS], "kernels": _row_kernels(kernels, v, shape_key),
            "launches": _records(_of(launches, v, shape_key)), **_row_numbers(row),
            **_fidelity_ratios(found).get(v, _NO_FIDELITY),
            **backward_numbers(row, bool(env.get("gpu_name")), beyond["backward"]),
            "backward_findings": beyond["backward"], "compile_findings": beyond["compile"]}


def _row_kernels(kernels: pd.DataFrame, variant: str, shape_key: str) -> list[dict]:
    """A row's kernels with a short name for the table (the full name on demand) and the time per forward in ms like
    every other."""
    k = _of(kernels, variant, shape_key)
    if not len(k):
        return _records(k)
    per_forward = k["us_per_forward"] / 1000 if "us_per_forward" in k else None
    return _records(k.assign(label=[kernel_label(n) for n in k["kernel"]], ms_per_forward=per_forward))


def _of(table: pd.DataFrame, variant: str, shape_key: str) -> pd.DataFrame:
    """The rows of a per-variant table (kernels, launches) of one variant at one shape."""
    return table[(table["variant"] == variant) & (table["shape_key"] == shape_key)] if len(table) else table


def _fidelity_ratios(findings: list[dict]) -> dict[str, dict]:
    """variant -> the timing-fidelity ratios its fidelity finding states (attnprof.findings.rules.timing):
    ``timed_over_trace`` (CUDA-event median over trace device time) and ``graph_over_trace`` (CUDA-graph
    median over trace device time), no unit; None where the finding has none."""
    out = {}
    for f in findings:
        if f["rule"] == "fidelity" and len(f["variants"]) == 1:  # the two-variant ones are rankings
            nums = f["numbers"]
            out[f["variants"][0]] = {"timed_over_trace": nums["timed_over_trace"]["value"],
                                     "graph_over_trace": (nums.get("graph_over_trace") or {}).get("value")}
    return out


def _row_numbers(row: dict) -> dict:
    """Numbers of a summary row that the report states and the table does not hold:
    ``timed_spread_pct``, the spread of the independent timing in % of its median (inter-quartile
    range; min-max for result sets without quartiles), and ``oom_gib``, what an out-of-memory
    capture asked for, in GiB (2**30 bytes). None where there is nothing to state."""
    median, spread = row.get("timed_ms_median"), None
    if median:
        if row.get("timed_ms_q1") is not None:
            spread = 100 * (row["timed_ms_q3"] - row["timed_ms_q1"]) / median
        else:
            spread = 100 * (row["timed_ms_max"] - row["timed_ms_min"]) / median
    return {"timed_spread_pct": spread, "oom_gib": row["oom_bytes"] / 2**30 if row.get("oom_bytes") else None}


def backward_numbers(row: dict, gpu: bool, findings: list[dict]) -> dict:
    """The backward columns the report states for a summary row (config passes): ``bwd_ms`` and its
    quartiles ``bwd_q1``/``bwd_q3`` (device ms per backward on a GPU, host ms on a CPU),
    ``backward_over_forward`` as the row's backward finding (``findings``, rule backward) computed
    it, ``bwd_tflops`` (summary.csv ``backward_tflops``), ``grad_worst`` (the largest of the
    gradients' relative errors against float64, no unit) with ``grad_worst_name`` (dq, dk or dv) and
    ``grad_wrong`` (the gradient check failed: the times are marked). None where absent."""
    kind = "device" if gpu else "cpu"
    ratio = next((f["numbers"]["backward_over_forward"]["value"] for f in findings), None)
    errors = {g: row.get(f"grad_rel_error_{g}") for g in ("dq", "dk", "dv") if _ok(row.get(f"grad_rel_error_{g}"))}
    worst = max(errors, key=errors.get) if errors else None
    return {"bwd_ms": row.get(f"{kind}_ms_per_backward"), "bwd_q1": row.get(f"{kind}_ms_backward_q1"),
            "bwd_q3": row.get(f"{kind}_ms_backward_q3"), "backward_over_forward": ratio, "bwd_tflops": row.get("backward_tflops"),
            "grad_worst": errors.get(worst), "grad_worst_name": worst, "grad_wrong": _grad_wrong(row)}


def _grad_wrong(row: dict) -> bool:
    """Whether a summary row's gradient check failed (``grad_rel_error_ok`` false, or its text)."""
    return _false(row.get("grad_rel_error_ok"))


def _check_numbers(check: dict) -> dict:
    """An expectation check with ``tolerance_pct``: its tolerance (a fraction for 'approx') times 100."""
    tol = check.get("tolerance")
    return {**check, "tolerance_pct": 100 * tol if tol is not None else None, "own_source": check.get("own_source", False)}


def calibration_numbers(calibration: dict) -> dict:
    """calibration.json with the numbers the report states: the measured bf16 GEMM and copy rates in
    % of their datasheet figures (``gemm_bf16_pct_of_datasheet``, ``copy_pct_of_datasheet``, where
    the datasheet figure is known) and the copy's size in GiB (``copy_gib``, 2**30 bytes)."""
    out = dict(calibration)
    if "datasheet_tflops_bf16" in calibration:
        out["gemm_bf16_pct_of_datasheet"] = 100 * calibration["gemm_tflops_bf16"] / calibration["datasheet_tflops_bf16"]
    if "datasheet_tb_per_s" in calibration:
        out["copy_pct_of_datasheet"] = 100 * calibration["copy_tb_per_s"] / calibration["datasheet_tb_per_s"]
    if "copy_bytes" in calibration:
        out["copy_gib"] = calibration["copy_bytes"] / 2**30
    return out


def compare_context(doc: dict, css: str) -> dict:
    """What the compare template needs: compare.json (``cmp``) with the practical threshold in %
    (``noise_floor_pct``), the confidence level (0.95 for a compare.json written before it was recorded), each
    pair as :func:`pair_context` gives it, and the CSS."""
    cmp = {**doc, "noise_floor_pct": 100 * doc["noise_floor"], "confidence_pct": 100 * doc.get("confidence", 0.95),
           "noise_floor_host_pct": 100 * doc.get("noise_floor_host", NOISE_FLOOR_HOST)}
    cmp["pairs"] = [pair_context(pair, doc["noise_floor"], doc.get("confidence", CONFIDENCE)) for pair in doc["pairs"]]
    return {"cmp": cmp, "css": css}


def _differ(rows: list[dict], what: str) -> list[str]:
    """'variant at shape' of the rows whose ``what`` (kernels, ops) were added or removed, once each."""
    return list(dict.fromkeys(f"{r['variant']} at {r['shape_key']}" for r in rows
                              if r.get(f"{what}_added") or r.get(f"{what}_removed")))


def pair_context(pair: dict, noise_floor: float, confidence: float = CONFIDENCE) -> dict:
    """One comparison of the compare template: its verdict counts, the rows called changed (``changed``) and the
    (variant, shape) whose kernels differ (``kernels_differ``) or ops (``ops_differ``), the smallest change its
    verdicts could find (``detection``, :func:`detection_limit`), the dispatches that changed (each with its
    dispatcher, ``variant``) and ``claims``: what page 1 states, cell by cell ((verdict, variant, shape key, pass)
    of every row called slower or faster; (``dispatches to`` target, dispatcher, shape key, pass) of each side)."""
    rows = [{**_ROW_DEFAULTS, **r} for r in pair["rows"]]
    changed = [r for r in rows if r["verdict"] in ("slower", "faster")]
    threshold = pair.get("threshold", noise_floor)
    dispatch = _dispatches(pair)
    return {**_PAIR_DEFAULTS, "torch": _torch_builds(pair), **pair, **recipe_context(pair.get("recipes") or []),
            "dispatch_changed": [d for d in dispatch if d.get("a") != d.get("b")],
            "rows": rows, "extra_rows": [r for r in rows if _extra(r)], "counts": _counts(pair, rows), "changed": changed,
            "threshold_pct": 100 * threshold, "kernels_differ": _differ(rows, "kernels"), "ops_differ": _differ(rows, "ops"),
            "sitting_pct": _pct(pair.get("sitting_sd")), "detection": detection_limit(rows, pair),
            "claims": _compare_claims(changed, dispatch), "top_up": _top_up_rows(rows, pair.get("design"), confidence),
            "env_diff": _env_diff_rows(pair.get("env_diff") or [])}


def _env_diff_rows(diff: list[dict]) -> list[dict]:
    """compare.json's environment differences for the page: a variable an A/B environment does not set (a key under
    ``ab.env.`` absent on one side) reads "not set", not "not recorded" (which says a result set lacks the field)."""
    return [{**d, **{side: "not set" for side in ("a", "b") if d.get(side) is None and d["key"].startswith("ab.env.")}}
            for d in diff]


def _top_up_rows(rows: list[dict], design: dict | None, confidence: float) -> dict:
    """The rows that got rounds added after look 1 (attnprof.analysis.verdict): ``rows`` (each with ``added``
    rounds) and how many of them the rounds decided (``decided``), and the interval levels of each look in %
    (``changed_pct``, ``same_pct``: attnprof.analysis.stats.look_levels)."""
    topped = [{**r, "added": r["top_up"]["rounds"] - r["top_up"]["base"]} for r in rows if r.get("top_up")]
    changed, same = look_levels(confidence, (design or {}).get("looks") or 1)
    return {"rows": topped, "decided": sum(r["verdict"] != "inconclusive" for r in topped),
            "changed_pct": 100 * changed, "same_pct": 100 * same}


def _counts(pair: dict, rows: list[dict]) -> dict[str, int]:
    """Rows per verdict: the pair's own counts, each verdict it lacks (a compare.json written before that verdict
    existed) counted from its rows."""
    return {**{v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}, **(pair.get("counts") or {})}


def _pct(fraction) -> float | None:
    return 100 * fraction if fraction else None


#: What a compare row of an older compare.json lacks, as None (or '').
_ROW_DEFAULTS = {"ratio_lo": None, "ratio_hi": None, "bwd_ratio_lo": None, "bwd_ratio_hi": None, "repeats_a": None,
                 "repeats_b": None, "repeats_needed": None, "why": "", "top_up": None}
#: What a pair of an older compare.json lacks: written before notes and the rest were recorded, empty lists; before
#: the joint control and the sitting term were recorded, none stated.
_PAIR_DEFAULTS = {"notes": [], "only_in_a": [], "only_in_b": [], "env_diff": [], "dispatch": [], "support": [],
                  "accounting": None, "paired": False, "joint": None, "sitting_sd": None, "sitting": None, "design": None}


def _extra(row: dict) -> bool:
    """Whether a compare row goes in the backward / torch.compile table: a backward or a compile record in either
    result set."""
    return bool(row.get("bwd_verdict") or row.get("compile_a_s") or row.get("compile_b_s"))


#: A dispatch finding's statement (attnprof.findings.rules.kernels): '<dispatcher> dispatched to <backend>: same
#: kernels as <variant>'.
_DISPATCHED = re.compile(r"^(?P<dispatcher>\S+) dispatched to \S+: same .*? as (?P<target>\S+?)(?:;|$)")


def _dispatches(pair: dict) -> list[dict]:
    """A pair's dispatch entries (compare.json: what a dispatcher ran at each shape in either set), each with the
    dispatcher it is about (``variant``)."""
    return [{**d, "variant": _dispatcher_of(d)} for d in pair.get("dispatch") or []]


def _dispatcher_of(entry: dict) -> str:
    """The dispatcher a compare.json dispatch entry is about, from its statements (the registry's dispatchers,
    attnprof.model.variants.DISPATCHERS, when neither names one)."""
    for side in ("statement_a", "statement_b"):
        m = _DISPATCHED.match(entry.get(side) or "")
        if m:
            return m["dispatcher"]
    return ", ".join(DISPATCHERS)


def _compare_claims(changed: list[dict], dispatch: list[dict]) -> dict[str, set]:
    """``claims`` of :func:`pair_context`: ``both`` (the verdicts) and ``a``/``b`` (each side's dispatches)."""
    out = {"both": {(r["verdict"], r["variant"], r["shape_key"], "forward") for r in changed}, "a": set(), "b": set()}
    for d in dispatch:
        for side in ("a", "b"):
            m = _DISPATCHED.match(d.get(f"statement_{side}") or "")
            if m:
                out[side].add((f"dispatches to {m['target']}", m["dispatcher"], d["shape_key"], "forward"))
    return out


def _torch_builds(pair: dict) -> dict | None:
    """{a, b}: the torch build of each result set of a compare pair (``2.13.0+cpu``), from compare.json, or for one
    written before it recorded them, from its environment difference; None when neither says."""
    if pair.get("torch"):
        return pair["torch"]
    diff = next((d for d in pair.get("env_diff") or [] if d["key"] == "torch"), None)
    return {"a": diff["a"], "b": diff["b"]} if diff else None


def _setting(value) -> str:
    """Jinja filter: an environment or config value as a reader writes it: 'not recorded' for None, a list's items
    and a mapping's ``key=value`` pairs joined by ', ' (a list of mappings: each in parentheses), never a Python repr."""
    if value is None:
        return "not recorded"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_setting(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(f"({_setting(v)})" if isinstance(v, dict) else _setting(v) for v in value) or "none"
    return _fmt(value)


def recipe_context(recipes: list[dict]) -> dict:
    """The compare template's recipe section from a pair's ``recipes`` (attnprof.analysis.compare.recipe_changes):
    ``recipes_changed`` (the (variant, shape, pass) entries whose recipe differs or one of whose kept steps changed
    its time, each group's rows without the kept steps whose time verdict is not slower/faster, so that a table shows
    only what differs; ``kept_hidden`` counts the rows left out), of which ``recipes_differ`` (steps added, removed,
    replaced or moved) and ``recipes_retimed`` (the same steps, some slower or faster), ``recipes_same`` (how many
    entries have the same steps in the same order) and ``recipe_counts`` (rows of each kind over every entry)."""
    changed = [c for c in map(_recipe_shown, recipes) if c is not None]
    differ = [r for r in changed if not r.get("same")]
    return {"recipes_changed": changed, "recipes_same": len(recipes) - len(differ), "recipe_counts": _recipe_totals(recipes),
            "recipes_total": len(recipes), "recipes_differ": differ,
            "recipes_retimed": [r for r in changed if r.get("same")]}


def _recipe_totals(recipes: list[dict]) -> dict[str, int]:
    """Rows of each kind (kept, added, removed...) over every recipe entry."""
    totals: dict[str, int] = {}
    for r in recipes:
        for k, n in (r.get("counts") or {}).items():
            totals[k] = totals.get(k, 0) + n
    return totals


def _kept_unchanged(row: dict) -> bool:
    """A recipe row the tables leave out: a kept step whose time is not slower/faster and whose launch is the same."""
    return row["kind"] == "kept" and row.get("verdict") not in ("slower", "faster") and not row.get("launch_changed")


def _recipe_shown(r: dict) -> dict | None:
    """A recipe entry as the compare's tables show it: each group without its unchanged kept steps (``kept_hidden``
    counts them); None when its steps are the same and none changed."""
    groups = r.get("groups") or []
    shown = [{**g, "rows": [x for x in g["rows"] if not _kept_unchanged(x)]} for g in groups]
    hidden = sum(len(g["rows"]) for g in groups) - sum(len(g["rows"]) for g in shown)
    if r.get("same") and not any(g["rows"] for g in shown):
        return None
    return {**r, "groups": shown, "kept_hidden": hidden}


def detection_limit(rows: list[dict], pair: dict) -> dict | None:
    """The smallest change the verdicts of one comparison find with 80 % power as a lone change, per row from the
    pair's simulation (compare.json ``joint.detectable``: attnprof.analysis.verdict_sim.detectable, each row's own
    rounds resampled). ``pct``: the limit that most rows (more than half of those judged) reach, with how many
    (``within`` of ``rows``), the range over the rows, the rows not found even at the largest change simulated
    (``unreached``) and the repeats per side. None when no row was judged."""
    found = (pair.get("joint") or {}).get("detectable") or {}
    if not found:
        return None
    limits = sorted(100 * v for v in found.values() if v is not None)
    repeats = {(r.get("repeats_a"), r.get("repeats_b")) for r in rows if r.get("p") is not None}
    ra = sorted({a for a, _ in repeats if a is not None})
    rb = sorted({b for _, b in repeats if b is not None})

    def side(v):
        return "?" if not v else (str(v[0]) if len(v) == 1 else format_range(str(v[0]), str(v[-1])))
    most = len(found) // 2 + 1
    pct = limits[min(most, len(limits)) - 1] if limits else None
    within = sum(limit <= pct for limit in limits) if limits else 0
    return {"pct": pct, "within": within, "rows": len(found), "min_pct": limits[0] if limits else None,
            "max_pct": limits[-1] if limits else None, "unreached": len(found) - len(limits),
            "at_threshold": bool(limits) and limits[0] <= 100 * pair.get("threshold", 0) + 1e-6,
            "repeats": f"{side(ra)} / {side(rb)}"}


def _load_range(summary: pd.DataFrame, repeats: pd.DataFrame | None = None) -> str:
    """'min–max' (or one value) of the captures' 1-minute host load average, over every capture (repeats.csv; without
    it: summary.csv, repeat 1's only); '' when not recorded."""
    table = repeats if repeats is not None else summary
    load = pd.to_numeric(table.get("host_load_1m", pd.Series(dtype=float)), errors="coerce").dropna()
    if load.empty:
        return ""
    lo, hi = format_number(load.min(), 2), format_number(load.max(), 2)
    return lo if lo == hi else format_range(lo, hi)


def change_of(variant: str, env: dict) -> str:
    """What a variant changes, in words: the built-in ones' from CHANGES, a user variant's from
    its config entry (its description, else the function it names)."""
    custom = ((env.get("config") or {}).get("custom_variants") or {}).get(variant)
    if custom:
        return custom.get("description") or f"your variant: {custom['function']}"
    return CHANGES.get(variant, variant)


#: a status of summary.csv in words, for page 1
_STATUS_WORDS = {"out_of_memory": "ran out of memory", "unsupported": "is not supported", "error": "failed",
                 "incomplete_trace": "left an incomplete trace"}


def _ok(value) -> bool:
    return value is not None and not (isinstance(value, float) and value != value)


def _false(value) -> bool:
    """A check that failed: False, or its text in a table read back as strings."""
    return value is False or str(value).lower() == "false"


def _interval(row, prefix: str) -> str:
    """' (rerun lo–hi ms)' of a device time, '' where the row has no between-run interval; a host time (``cpu_ms``...)
    has no rerun interval: ' (captures lo–hi ms)', its lowest and highest capture (the label:
    attnprof.findings.ranking.spread_words)."""
    lo, hi = row.get(f"{prefix}_run_lo"), row.get(f"{prefix}_run_hi")
    label = spread_words(prefix, True)["label"]
    return f" ({label} {format_range(lo, hi, 'ms')})" if _ok(lo) and _ok(hi) else ""


def _time(row, prefix: str) -> str:
    """A time per forward as page 1 states it: median of the repeats in ms, with its rerun interval."""
    return f"{_fmt(row[f'{prefix}_per_forward'])} ms{_interval(row, prefix)}"


def _apart(a, b, prefix: str) -> bool:
    """Whether ``a`` is faster than ``b`` outside both rerun intervals (min–max of the forwards with one repeat)."""
    def ends(r, lo, hi):
        return (r.get(f"{prefix}_run_lo"), r.get(f"{prefix}_run_hi")) if _ok(r.get(f"{prefix}_run_lo")) else (r.get(lo), r.get(hi))
    _, a_hi = ends(a, f"{prefix}_min", f"{prefix}_max")
    b_lo, _ = ends(b, f"{prefix}_min", f"{prefix}_max")
    return _ok(a_hi) and _ok(b_lo) and a_hi < b_lo


def _shape_word(shape_key: str, keys: list[str]) -> str:
    """A shape key shortened to the parts that differ between ``keys`` (seq_len and head_dim of a sweep)."""
    parts = [k.split("_") for k in keys]
    common = set.intersection(*map(set, parts)) if len(parts) > 1 else set()
    return "_".join(p for p in shape_key.split("_") if p not in common) or shape_key


def sweep_table(summary: pd.DataFrame, gpu: bool, bound: dict | None = None) -> dict:
    """The cross-shape view of a sweep: one row per variant, one column per shape; each cell the time per forward
    (device on a GPU, host on a CPU; median of the repeats, rerun interval), TFLOP/s -- GB/s at a memory-bound shape
    (``bound``: :func:`memory_bound`) -- and kernels per forward, or the status of a capture that published no
    numbers. ``common`` names what every shape shares."""
    bound = bound or {}
    keys = list(dict.fromkeys(summary["shape_key"]))
    prefix = "device_ms" if gpu else "cpu_ms"
    by = {(r["variant"], r["shape_key"]): r for r in _records(summary)}
    rows = [{"variant": v, "cells": [_sweep_cell(by.get((v, k)), prefix, k in bound) for k in keys],
             "dispatcher": v in DISPATCHERS} for v in dict.fromkeys(summary["variant"])]
    return {"shapes": [{"key": k, "short": _shape_word(k, keys)} for k in keys], "common": _common_parts(keys),
            "rows": rows, "legend": _legend(keys), "others": len(keys) - 1}


def _common_parts(keys: list[str]) -> str:
    """What every shape key of a sweep shares ('b8_h16_bf16_causal'); '' for one shape."""
    parts = [k.split("_") for k in keys]
    return "_".join(p for p in parts[0] if all(p in q for q in parts)) if len(keys) > 1 else ""


def _legend(keys: list[str]) -> list[dict]:
    """Shapes beyond square attention (grouped-query, decode, a lower-right mask), described in words under the
    sweep table."""
    beyond = [k for k in keys if any(mark in k for mark in ("_kv", "_q", "causal-lr"))]
    return [{"short": _shape_word(k, keys), "describe": _describe(k)} for k in beyond if _describe(k)]


def _sweep_cell(r: dict | None, prefix: str, memory_bound: bool) -> dict | None:
    """One cell of the sweep table (None: the variant has no row at that shape); GB/s only at a memory-bound one."""
    if r is None:
        return None
    return {"status": r["status"], "ms": r.get(f"{prefix}_per_forward"), "lo": r.get(f"{prefix}_run_lo"),
            "hi": r.get(f"{prefix}_run_hi"), "tflops": r.get("tflops"), "kernels": r.get("kernels_per_forward"),
            "gbps": r.get("gbps") if memory_bound else None, "memcpy": r.get("memcpy_per_forward"),
            "wrong": _false(r.get("rel_error_ok"))}


def _main_kernel(kernels: pd.DataFrame, variant: str, shape_key: str) -> str:
    """The label of the kernel that takes most of a variant's device time at a shape ('' without kernels)."""
    if kernels is None or not len(kernels) or "us_per_forward" not in kernels:
        return ""
    k = kernels[(kernels["variant"] == variant) & (kernels["shape_key"] == shape_key)]
    if k.empty:
        return ""
    top = k.sort_values("us_per_forward", ascending=False).iloc[0]
    return str(top.get("label") or kernel_label(top["kernel"]))


@dataclass
class _Page1:
    """What page 1's sentences read: the summary's rows (by (variant, shape)), the shapes, the study's shape
    ``skey``, the time they state (``prefix``: device_ms on a GPU, cpu_ms on a CPU) and the shapes' rankings
    (``rankings``: (shape key, pass) -> attnprof.findings.ranking.rank's result, from the ranking findings)."""

    summary: pd.DataFrame
    study: dict | None
    shapes: list[dict]
    kernels: pd.DataFrame | None

    def __post_init__(self):
        self.rows = _records(self.summary)
        self.by = {(r["variant"], r["shape_key"]): r for r in self.rows}
        self.keys = list(dict.fromkeys(self.summary["shape_key"]))
        self.skey = self.study["key"] if self.study else self.keys[0]
        self.many = len(self.keys) > 1
        self.prefix = time_prefix(self.summary)
        self.gpu = self.prefix == "device_ms"
        self.where = "device" if self.gpu else "host"
        # what a statement is judged against, in words (attnprof.findings.ranking.spread_words): the rerun
        # intervals, a host time's ranges over the captures, or with one repeat the ranges over the forwards
        self.host_spans = spread_words("cpu_ms", has_run_interval(self.summary, ("cpu_ms",)))["ranges"]
        self.spans = spread_words(self.prefix, has_run_interval(self.summary, (self.prefix,)))["ranges"]
        self.rankings = self._rankings()

    def _rankings(self) -> dict[tuple[str, str], dict]:
        """(shape key, pass) -> the ranking its ranking finding carries; a shape without one (a findings.json of an
        earlier engine): the same rule on the same summary."""
        out = {(f["ranking"]["shape_key"], f["ranking"]["pass"]): f["ranking"]
               for sh in self.shapes for f in sh["findings"] if f.get("ranking")}
        for key, pass_ in itertools.product(self.keys, PASSES):
            out.setdefault((key, pass_), rank(self.summary, key, pass_))
        return out

    @property
    def thing(self) -> str:
        """What a ranking ranks in words: kernels on a GPU; on a CPU there are no kernels to tell apart."""
        return "kernel" if self.gpu else "variant"

    def wrong_at(self, at: list[dict]) -> str:
        """' (wrong at n of N shapes)' of a sweep; '' for one shape."""
        return f" (wrong at {len(at)} of {len(self.keys)} shapes)" if self.many else ""

    def shapes_text(self, n: int) -> str:
        return f"{n} shape{'' if n == 1 else 's'}"


def in_brief(study: dict | None, shapes: list[dict], summary: pd.DataFrame, kernels: pd.DataFrame | None = None) -> list[dict]:
    """Page 1's findings, 3 to 6 sentences, each with its number, its rerun interval, ``href`` (the anchor of its
    evidence) and ``claims`` (what it states, cell by cell: (claim, variant, shape key, pass)): correctness failures
    first (rel_error_ok false, then grad_rel_error_ok false), then the fastest variant and its margin over the next,
    from the shapes' ranking findings (attnprof.findings.ranking, the rule the findings table states too: a dispatcher
    and a variant with a wrong result are never ranked), what a dispatcher dispatched to and what it costs on the
    host, a hidden copy, FP32 GEMMs, the backward and torch.compile, backwards that failed, and captures that did
    not run."""
    if summary.empty:
        return []
    p = _Page1(summary, study, shapes, kernels)
    out = _wrong_brief(p) + _wrong_grad_brief(p) + _fastest_brief(p) + _dispatch_brief(p) + _work_brief(p)
    return out + _backward_and_compile_brief(p) + _backward_failed_brief(p) + _missing_brief(p)


def _by_variant(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by variant, in their order."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["variant"], []).append(r)
    return out


def _wrong_brief(p: _Page1) -> list[dict]:
    """A variant whose result failed the float64 check: named first, left out of every ranking."""
    return [_wrong_sentence(p, v, at) for v, at in _by_variant([r for r in p.rows if _false(r.get("rel_error_ok"))]).items()]


def _wrong_sentence(p: _Page1, variant: str, at: list[dict]) -> dict:
    worst = max(at, key=lambda r: r.get("rel_error") or 0)
    return {"text": f"{variant} computes a wrong result: relative error {_fmt(worst.get('rel_error'), 2)} against the "
                    f"float64 reference at {worst['shape_key']}{p.wrong_at(at)}; it is left out of every ranking.",
            "href": f"#v-{worst['shape_key']}-{variant}", "claims": {("wrong", variant, r["shape_key"], "forward") for r in at}}


def _wrong_grad_brief(p: _Page1) -> list[dict]:
    """The backward's gradients (config passes with backward): a wrong gradient leads as a wrong result does."""
    return [_wrong_grad_sentence(p, v, at) for v, at in _by_variant([r for r in p.rows if _grad_wrong(r)]).items()]


def _wrong_grad_sentence(p: _Page1, variant: str, at: list[dict]) -> dict:
    worst_row = max(at, key=lambda r: backward_numbers(r, p.gpu, [])["grad_worst"] or 0)
    nums = backward_numbers(worst_row, p.gpu, [])
    what = f"{nums['grad_worst_name']} relative error {_fmt(nums['grad_worst'], 2)}" if nums["grad_worst_name"] else "relative error"
    return {"text": f"{variant} computes wrong gradients in its backward: {what} against the float64 reference at "
                    f"{worst_row['shape_key']}{p.wrong_at(at)}; its backward times are shown, marked, are not those of a "
                    "correct backward and are not ranked.",
            "href": f"#backward-{worst_row['shape_key']}",
            "claims": {("wrong", variant, r["shape_key"], "backward") for r in at}}


def _ranked(r: dict) -> bool:
    """Whether a ranking names a fastest variant: the first ahead outside every interval, or the only one ranked."""
    return len(r["order"]) == 1 or r["clear"]


def _fastest_brief(p: _Page1) -> list[dict]:
    """The fastest variant, shape by shape, as the shapes' forward rankings state it, and the wrong results they left
    out."""
    per_shape = {k: r for k in p.keys if (r := p.rankings[(k, "forward")])["order"]}
    if not per_shape:
        return []
    r = per_shape.get(p.skey) or next(iter(per_shape.values()))
    text = _fastest_text(p, per_shape, r) + _wrong_left_out(per_shape.values())
    return [{"text": text + ".", "href": "#sweep" if p.many else "#study", "claims": _stated(per_shape.values())}]


def _wrong_left_out(rankings) -> str:
    """' (wrong results left out: X, Y)' of the variants ``rankings`` left out for a wrong result; '' for none."""
    wrong = sorted({v for r in rankings for v, why in r["left_out"].items() if why.startswith("wrong")})
    return f" (wrong results left out: {', '.join(wrong)})" if wrong else ""


def _stated(rankings) -> set[tuple]:
    """What page 1 states of ``rankings``: each one's fastest or tied variants (attnprof.findings.ranking.claims)."""
    return {c for r in rankings for c in ranking_claims(r) if c[0] != "ranked"}


def _fastest_text(p: _Page1, per_shape: dict, r: dict) -> str:
    """The sentence of :func:`_fastest_brief` for ranking ``r`` (the study shape's): the only one ranked, the fastest
    and its margin, or the variants tied."""
    if len(r["order"]) == 1:
        best = p.by[(r["order"][0], r["shape_key"])]
        return (f"Only {best['variant']} is ranked at {r['shape_key']} (the others: {_left_out_words(r)}): "
                f"{_time(best, p.prefix)} {p.where} time per forward")
    if r["clear"]:
        others = _elsewhere(p, per_shape, r["order"][0])
        return _lead(p, per_shape, r, others) + _margin(p, per_shape, r) + ("; elsewhere " + "; ".join(others) if others else "")
    return _tie_words(p, r)


def _left_out_words(r: dict) -> str:
    return "; ".join(f"{v}, {why}" for v, why in r["left_out"].items()) or "none in this result set"


def _what(p: _Page1, variant: str, key: str) -> str:
    """A variant with the library's words for its fused kernel (the fusion finding), else its main kernel's name."""
    fused = next((f["headline"].split(": ", 1)[-1] for f in (p.study or {}).get("findings", [])
                  if f["rule"] == "fusion" and f["variants"][:1] == [variant]), "")
    kname = _main_kernel(p.kernels, variant, key) if p.gpu else ""
    return variant + (f" ({fused})" if fused else (f" (kernel {kname})" if kname else ""))


def _lead(p: _Page1, per_shape: dict, r: dict, others: list[str]) -> str:
    """'The fastest kernel at KEY is X: its time': the winner at the study's shape, whose key it names once; 'The
    fastest kernel is X, at all n shapes: its time at KEY' where it wins at every shape of a sweep (``others``, from
    :func:`_elsewhere`, empty)."""
    best, key = r["order"][0], r["shape_key"]
    time = f"{_time(p.by[(best, key)], p.prefix)} {p.where} time per forward"
    if p.many and not others:
        return f"The fastest {p.thing} is {_what(p, best, key)}, at all {len(per_shape)} shapes: {time} at {key}"
    return f"The fastest {p.thing} at {key} is {_what(p, best, key)}: {time}"


def _elsewhere(p: _Page1, per_shape: dict, best: str) -> list[str]:
    """The other winners ('W is fastest at n shapes') and the shapes without a clear fastest; [] where ``best`` wins
    at all."""
    firsts = [q["order"][0] for q in per_shape.values() if _ranked(q)]
    unclear = len(per_shape) - len(firsts)
    others = [f"{w} is fastest at {p.shapes_text(firsts.count(w))}" for w in dict.fromkeys(firsts) if w != best]
    return others + ([f"no clear fastest at {p.shapes_text(unclear)} (the {p.spans} overlap)"] if unclear else [])


def _margin(p: _Page1, per_shape: dict, r: dict) -> str:
    """', r× faster than the next variant, Y, at T', and the range of the margins where the same variant wins."""
    key, col = r["shape_key"], r["column"]
    best, nxt = p.by[(r["order"][0], key)], p.by[(r["order"][1], key)]
    label = _main_kernel(p.kernels, nxt["variant"], key) if p.gpu else ""
    text = (f", {_fmt(nxt[col] / best[col])}\u00d7 faster than the next variant, {nxt['variant']}"
            + (f" ({label})" if label and len(label) <= 40 else "") + f", at {_time(nxt, p.prefix)}")
    margins = [q["median"][q["order"][1]] / q["median"][q["order"][0]] for q in per_shape.values()
               if q["clear"] and q["order"][0] == best["variant"]]
    if p.many and len(margins) > 1:
        text += (f"; where it is ahead outside the {p.spans} ({p.shapes_text(len(margins))}), its margin is "
                 f"{format_range(min(margins), max(margins), '×')}")
    return text


def _tie_words(p: _Page1, r: dict) -> str:
    """No fastest outside the intervals: the first by median and the variants tied with it."""
    key, col = r["shape_key"], r["column"]
    best = p.by[(r["order"][0], key)]
    tied = [p.by[(v, key)] for v in r["tied"][1:]]
    listing = ", ".join(f"{t['variant']}, {_time(t, p.prefix)} ({_fmt(t[col] / best[col])}\u00d7)" for t in tied)
    return (f"No {p.thing} is fastest outside the {p.spans} at {key}: by median {best['variant']}, "
            f"{_time(best, p.prefix)} {p.where} time per forward, tied with {listing}")


def _dispatch_brief(p: _Page1) -> list[dict]:
    """Each dispatcher (attnprof.model.variants.DISPATCHERS): where it went (its dispatch findings) and what it costs
    on the host against the variant it dispatched to, only outside the intervals."""
    went: dict[str, dict[str, list[str]]] = {}
    for sh in p.shapes:
        for f in sh["findings"]:
            if f["rule"] == "dispatch" and len(f["variants"]) == 2:
                went.setdefault(f["variants"][0], {}).setdefault(f["variants"][1], []).append(sh["key"])
    present = set(p.summary["variant"])
    return [_dispatch_sentence(p, disp, went[disp]) for disp in DISPATCHERS if disp in present and went.get(disp)]


def _dispatch_sentence(p: _Page1, disp: str, targets: dict[str, list[str]]) -> dict:
    target = max(targets, key=lambda t: len(targets[t]))
    n_ok = sum(1 for k in p.keys if p.by.get((disp, k), {}).get("status") == "ok")
    text = (f"{disp} is a dispatcher, not a kernel: it dispatches to {target} (the same kernel)"
            + (f" at {len(targets[target])} of {n_ok} shapes" if p.many else ""))
    others = [f"{t} at {', '.join(v)}" for t, v in targets.items() if t != target]
    if others:
        text += f", to {'; '.join(others)}"
    return {"text": text + _host_cost(p, disp, target) + ".", "href": f"#v-{p.skey}-{disp}",
            "claims": {("dispatches to " + t, disp, k, "forward") for t, ks in targets.items() for k in ks}}


def _host_cost(p: _Page1, disp: str, target: str) -> str:
    """What a dispatcher costs on the host against its target at the study's shape, only outside the intervals."""
    a, b = p.by.get((disp, p.skey)), p.by.get((target, p.skey))
    if not (_host_ms(a) and _host_ms(b)):
        return ""
    more = a["cpu_ms_per_forward"] - b["cpu_ms_per_forward"]
    if not (_apart(b, a, "cpu_ms") if more > 0 else _apart(a, b, "cpu_ms")):
        # a difference inside the intervals is no finding: say so, without the numbers of a non-result
        return f"; its host time per forward is not told apart from {target}'s by this run (the {p.host_spans} overlap)"
    higher = sum(1 for k in p.keys if 0 < _host_ms(p.by.get((target, k))) < _host_ms(p.by.get((disp, k))))
    return (f", and costs {_fmt(abs(more))} ms {'more' if more > 0 else 'less'} host time per forward at "
            f"{p.skey}: {_time(a, 'cpu_ms')} against {_time(b, 'cpu_ms')}"
            + (f"; by median more at {higher} of {len(p.keys)} shapes" if p.many else ""))


def _host_ms(row: dict | None) -> float:
    """A row's host time per forward; 0 where there is no row or no time (no sentence, no shape counted)."""
    value = (row or {}).get("cpu_ms_per_forward")
    return value if _ok(value) else 0.0


def _work_brief(p: _Page1) -> list[dict]:
    """Hidden copies and FP32 GEMMs at the study's shape, as the findings state them."""
    out = []
    for f in (p.study or {}).get("findings", []):
        r = p.by.get((f["variants"][0] if f["variants"] else "", p.skey))
        if r is not None and f["rule"] == "hidden_copy":
            out.append(_copy_sentence(p, f, r))
        elif r is not None and f["rule"] == "precision" and "FP32" in f["headline"]:
            out.append(_precision_sentence(p, f, r))
    return out


def _copy_sentence(p: _Page1, f: dict, r: dict) -> dict:
    v = r["variant"]
    fix = next((o for o in p.rows if o["shape_key"] == p.skey and o["variant"] != v and o["status"] == "ok"
                and o.get("memcpy_per_forward") == 0 and o["variant"].startswith(v)), None)
    text = f"{v} launches a {f['headline']}: {_time(r, p.prefix)} per forward"
    if fix is not None:
        text += (f"; {fix['variant']}, without the copy, {_time(fix, p.prefix)}"
                 + ("" if _apart(fix, r, p.prefix) else f"; the {p.spans} overlap"))
    return {"text": text + ".", "href": f"#{f['anchor']}", "claims": set()}


def _precision_sentence(p: _Page1, f: dict, r: dict) -> dict:
    v = r["variant"]
    text = (f"{v} launches {_fmt(r.get('kernels_per_forward'))} kernels per forward, its GEMMs in FP32 "
            f"({f['headline']}), and takes {_time(r, p.prefix)}")
    ranking = p.rankings.get((p.skey, "forward"))
    if ranking and _ranked(ranking) and v in ranking["median"]:  # set beside the fastest only where there is one
        best = ranking["order"][0]
        text += f", {_fmt(ranking['median'][v] / ranking['median'][best])}\u00d7 {best}'s time"
    return {"text": text + ".", "href": f"#{f['anchor']}", "claims": set()}


def _backward_failed_brief(p: _Page1) -> list[dict]:
    """Backwards that did not run (summary.csv ``backward_status`` not ok, where the forward ran), each with
    PyTorch's reason (``backward_reason``)."""
    failed = [r for r in p.rows if r.get("status") == "ok" and r.get("backward_status") not in _BACKWARD_RAN]
    return [_backward_failed_sentence(v, at) for v, at in _by_variant(failed).items()]


#: backward_status of a row whose backward ran, or was not asked for (empty, NaN read back as None).
_BACKWARD_RAN = (None, "", "ok")


def _backward_failed_sentence(variant: str, at: list[dict]) -> dict:
    status = at[0]["backward_status"]
    reason = short_reason(at[0].get("backward_reason"))[:300] or "no reason recorded"
    return {"text": f"{variant}'s backward {_STATUS_WORDS.get(status, status)} at {', '.join(r['shape_key'] for r in at)} "
                    f"(PyTorch: \u201c{reason}\u201d); it has no backward numbers there and is not ranked.",
            "href": f"#backward-{at[0]['shape_key']}", "claims": {("not run", variant, r["shape_key"], "backward") for r in at}}


def _missing_brief(p: _Page1) -> list[dict]:
    """Captures that published nothing, by variant and status, with the shapes by key (never summed up as a
    seq_len: the cause may be the head_dim, the dtype or the heads)."""
    failed = p.summary[p.summary["status"] != "ok"]
    out = []
    for (variant, status), fr in failed.groupby(["variant", "status"], sort=False):
        recs = _records(fr)
        gib = [r["oom_bytes"] / 2**30 for r in recs if _ok(r.get("oom_bytes"))]
        why = " (PyTorch's reasons in its row)" if status == "unsupported" else ""
        out.append({"text": f"{variant} {_STATUS_WORDS.get(status, status)} at {', '.join(fr['shape_key'])}{why}"
                            + (f", asking for up to {_fmt(max(gib))} GiB" if gib else "") + "; it has no numbers there.",
                    "href": f"#v-{recs[0]['shape_key']}-{variant}" if not p.many else "#sweep", "kind": "missing",
                    "claims": {("not run", variant, r["shape_key"], "forward") for r in recs}})
    return out


def memory_bound(summary: pd.DataFrame, calibration: dict) -> dict[str, float]:
    """shape key -> the GPU's measured ridge point (FLOP/B) for the shapes whose arithmetic intensity
    (summary.csv ``flop_per_byte``: forward FLOPs over the minimum traffic) is under it. The ridge is the
    measured GEMM throughput of the shape's dtype over the measured copy bandwidth (calibration.json
    ``gemm_tflops_<dtype>`` / ``copy_tb_per_s``: TFLOP/s over TB/s = FLOP per byte; the roofline model, Williams,
    Waterman and Patterson, CACM 52(4), 2009). {} on a CPU run or without a calibration of that dtype."""
    copy = calibration.get("copy_tb_per_s")
    if summary.empty or not _ok(copy) or "flop_per_byte" not in summary:
        return {}
    out = {}
    for key, rows in summary.groupby("shape_key", sort=False):
        first = _records(rows.head(1))[0]
        tflops = calibration.get(f"gemm_tflops_{first.get('dtype')}")
        if _ok(tflops) and _ok(first.get("flop_per_byte")) and first["flop_per_byte"] < tflops / copy:
            out[key] = tflops / copy
    return out


def memory_bound_brief(summary: pd.DataFrame, calibration: dict, bound: dict[str, float] | None = None) -> list[dict]:
    """Page 1's sentence for each shape whose arithmetic intensity (``flop_per_byte``: forward FLOPs over the minimum
    traffic) is under the measured ridge point of the GPU (calibration.json: ``gemm_tflops_<dtype>`` over
    ``copy_tb_per_s``, in FLOP/B; the roofline model, Williams, Waterman and Patterson, CACM 52(4), 2009): there
    memory throughput, not TFLOP/s, says how close a kernel is to the hardware. It names the fastest variant by
    device time (no dispatcher, no wrong result) and its ``gbps`` (summary.csv; derived: the minimum traffic over the
    device time) with the rerun interval that the device time's gives, as % of the measured copy bandwidth.
    ``bound``: :func:`memory_bound` of the same summary and calibration, when the caller has it already.
    [] on a CPU run, without a calibration, or where every shape is compute-bound."""
    if "gbps" not in summary:
        return []
    bound = memory_bound(summary, calibration) if bound is None else bound
    out = [_memory_sentence(summary, calibration, key, ridge) for key, ridge in bound.items()]
    return [o for o in out if o]


def _memory_sentence(summary: pd.DataFrame, calibration: dict, key: str, ridge: float) -> dict | None:
    """One memory-bound shape's sentence: the first of its ranking (attnprof.findings.ranking.rank: no dispatcher, no
    wrong result), called the fastest only where it is ahead outside the intervals."""
    r = rank(summary, key)
    rec = {x["variant"]: x for x in _records(_at(summary, key))}
    best = rec[r["order"][0]] if r["order"] else {}
    if not _ok(best.get("gbps")):
        return None
    who = "the fastest" if _ranked(r) else "by median the first (tied within the intervals)"
    text = (f"Memory-bound at {key} ({_fmt(best['flop_per_byte'])} FLOP/B, under the measured ridge of {_fmt(ridge)}): "
            f"{who}, {best['variant']}, moves {_fmt(best['gbps'])} GB/s{_gbps_rerun(best)}, "
            f"{_fmt(100 * best['gbps'] / (calibration['copy_tb_per_s'] * 1e3), 2)} % of the measured copy bandwidth")
    # the sweep table shows GB/s at a memory-bound shape; a one-shape run has it in the timing-fidelity table
    href = f"#sweep-{best['variant']}" if summary["shape_key"].nunique() > 1 else f"#fidelity-{key}"
    return {"text": text + ".", "href": href, "claims": _stated([r])}


def _gbps_rerun(row: dict) -> str:
    """' (rerun lo–hi GB/s)' of a row's GB/s: the same bytes over the ends of its device time's rerun interval."""
    lo, hi = row.get("device_ms_run_lo"), row.get("device_ms_run_hi")
    if not (_ok(lo) and _ok(hi) and lo > 0):
        return ""
    scale = row["gbps"] * row["device_ms_per_forward"]  # GB/s x ms: the same bytes over another time
    return f" ({spread_words('device_ms', True)['label']} {format_range(scale / hi, scale / lo, 'GB/s')})"


def _backward_and_compile_brief(p: _Page1) -> list[dict]:
    """Page 1's sentences on the backward pass (:func:`_backward_brief`) and on torch.compile
    (:func:`_compile_brief`) at the study's shape. [] for a forward-only run."""
    return _backward_brief(p) + _compile_brief(p)


def _backward_brief(p: _Page1) -> list[dict]:
    """The fastest backward, as the study shape's backward ranking states it (variants whose gradients passed the
    float64 check, no dispatcher), its time with rerun interval and TFLOP/s, the next, and how many gradients were
    checked (:func:`_gradients_checked`)."""
    r = p.rankings.get((p.skey, "backward"))
    if not r or len(r["order"]) < 2:
        return []
    best, nxt = (p.by[(v, p.skey)] for v in r["order"][:2])
    head = (f"Backward: {best['variant']} is fastest at {p.skey}" if r["clear"]
            else f"Backward: no variant is fastest outside the {p.spans} at {p.skey}; by median {best['variant']}")
    tflops = best.get("backward_tflops") if p.gpu else None
    text = (head + f", {_backward_time(p, best)} per backward"
            + (f", {_fmt(tflops)} TFLOP/s (2.5× the forward's FLOPs)" if _ok(tflops) else "")
            + f"; next {nxt['variant']}, {_backward_time(p, nxt)}" + ("" if r["clear"] else f" (the {p.spans} overlap)"))
    return [{"text": text + _gradients_checked(p.rows) + ".", "href": f"#backward-{p.skey}", "claims": _stated([r])}]


def _backward_time(p: _Page1, row: dict) -> str:
    """A backward's time per backward with its rerun interval (device ms on a GPU, host ms on a CPU)."""
    prefix = p.prefix.split("_")[0]  # device / cpu
    return f"{_fmt(row[f'{prefix}_ms_per_backward'])} ms{_interval(row, f'{prefix}_ms_backward')}"


def _gradients_checked(rows: list[dict]) -> str:
    """'. Gradients ... checked in n captures: m within tolerance'; '' where none was checked."""
    checked = [row["grad_rel_error_ok"] for row in rows if row.get("grad_rel_error_ok") in (True, False)]
    if not checked:
        return ""
    return (f". Gradients dq, dk, dv checked against float64 in {len(checked)} captures: {checked.count(True)} "
            "within tolerance")


def _compile_brief(p: _Page1) -> list[dict]:
    """One sentence for every compiled variant (page 1 keeps its table of contents): its kernels and time per
    forward against the variant it compiles, and its first call, kept out of those numbers."""
    parts, first_calls, href = [], [], None
    for r in p.rows:
        if r["shape_key"] != p.skey or r["variant"] not in COMPILED or r.get("status") != "ok":
            continue
        href = href or f"#v-{p.skey}-{r['variant']}"
        parts.append(_compiled_part(p, r))
        if _ok(r.get("compile_first_call_s")):
            first_calls.append(f"{r['variant']} {_fmt(r['compile_first_call_s'])} s"
                               + (f" (first backward {_fmt(r['compile_backward_first_call_s'])} s)"
                                  if _ok(r.get("compile_backward_first_call_s")) else ""))
    if not parts:
        return []
    text = "torch.compile: " + "; ".join(parts)
    if first_calls:
        text += "; first calls (the compile), kept out of these numbers: " + ", ".join(first_calls)
    return [{"text": text + ".", "href": href, "claims": set()}]


def _compiled_part(p: _Page1, r: dict) -> str:
    base = p.by.get((uncompiled_of(r["variant"]), p.skey))
    n = r.get("kernels_per_forward")
    part = f"{r['variant']} launches {_fmt(n)} kernel{'' if n == 1 else 's'} per forward, {_time(r, p.prefix)}"
    if base is not None and base.get("status") == "ok" and _ok(base.get(f"{p.prefix}_per_forward")):
        part += (f", against {base['variant']}'s {_fmt(base.get('kernels_per_forward'))} kernels and {_time(base, p.prefix)}"
                 + ("" if _apart(r, base, p.prefix) else f" (the {p.spans} overlap)"))
    return part


def gpus_used(repeats: pd.DataFrame | None) -> list[dict]:
    """The GPUs the run's captures ran on, from repeats.csv (each capture's ``gpu_uuid``, ``gpu_name``,
    ``gpu_power_limit_w``, ``gpu_max_sm_clock_mhz``: what its own record says, not env.json, which a later run may
    have rewritten): one dict per UUID (uuid, name, power_limit_w, max_sm_clock_mhz; None where not recorded), in UUID
    order (repeats.csv in the current format: attnprof.analysis.records.load_repeats); [] for a CPU run, a result set
    captured before GPUs were recorded (their cells empty) or without repeats.csv (None)."""
    if repeats is None:
        return []
    out = {}
    for _, r in repeats.dropna(subset=["gpu_uuid"]).iterrows():
        uuid = str(r["gpu_uuid"]).strip()
        out.setdefault(uuid, {**{col.removeprefix("gpu_"): None if pd.isna(v := r.get(col)) else v
                                 for col in CAPTURE_ONLY_COLUMNS}, "uuid": uuid})
    return [out[u] for u in sorted(out)]


def gpu_note(used: list[dict]) -> str | None:
    """Page 1's sentence on a run captured on several GPUs (:func:`gpus_used`): how many, and whether they are alike
    (model, power limit, highest SM clock: :func:`attnprof.model.gpus.differing_kinds`); when they are not, that a
    variant's time mixes them and a ranking compares across them. None for one GPU or none."""
    if len(used) < 2:
        return None
    kinds = differing_kinds(used)
    if any(not g.get("name") for g in used):
        return (f"Captured on {len(used)} GPUs, one capture per GPU at a time; their capture records do not say what "
                "some of them are (a MIG instance, an older record), so whether they are alike is not known: a variant's "
                "repeats may have run on different ones.")
    if kinds:
        return (f"Captured on {len(used)} GPUs of different kinds ({'; '.join(kinds)}): a variant's time mixes the GPUs "
                "its repeats ran on, so a ranking or a ratio here compares across GPU kinds.")
    g = used[0]
    return (f"Captured on {len(used)} GPUs, alike ({g['name']}, {number_text(g.get('power_limit_w'))} W power limit, "
            f"{number_text(g.get('max_sm_clock_mhz'))} MHz highest SM clock), one capture per GPU at a time; a variant's repeats "
            "may run on different GPUs, so its rerun interval holds the spread between GPUs too.")


def short_repeats(summary: pd.DataFrame) -> str:
    """Page 1's words for the rows with times whose times are not of every repeat (summary.csv ``repeats_note``: a
    repeat not ok, missing, a copy, a time its trace lacks, a contradicted host draw): '' when every such row counted
    every repeat. A row that did not run (out of memory, unsupported, failed) has no time: its status says why, on
    page 1 and in its row, not here."""
    if "repeats_note" not in summary:
        return ""
    noted = summary[summary["repeats_note"].map(lambda v: isinstance(v, str) and bool(v)) & (summary["status"] == "ok")]
    if noted.empty:
        return ""
    named = "; ".join(f"{r.variant} at {r.shape_key}: {str(r.repeats_note)[:160]}" for r in noted.head(4).itertuples())
    more = f" and {len(noted) - 4} more" if len(noted) > 4 else ""
    return f" Not every repeat was counted in {len(noted)} row{'s' if len(noted) != 1 else ''} ({named}{more})."


def brief_notes(study: dict | None, shapes: list[dict], summary: pd.DataFrame, used: list[dict] | None = None) -> list[str]:
    """The small print under page 1's findings: on which GPUs (a run on several alike ones, :func:`gpu_note`; GPUs of
    different kinds are a finding of page 1 instead), what a time and its rerun interval are, and whether every trace
    was complete."""
    notes = _alike_gpus(used or [])  # gpus_used
    host, device = spread_words("cpu_ms", True), spread_words("device_ms", True)
    if has_run_interval(summary) and not has_run_interval(summary, ("device_ms",)):  # a CPU run: host times only
        n = int(summary["repeats"].max())
        notes.append(f"Times are host times per forward, the median of {n} repeats (each a fresh capture process); "
                     f"\u201c{host['label']}\u201d gives the lowest and highest capture: a host time has no {device['one']} "
                     "(docs/statistics.md); a ranking is called only outside those ranges." + short_repeats(summary))
    elif has_run_interval(summary):
        n = int(summary["repeats"].max())
        notes.append(f"Times are per forward, the median of {n} repeats (each a fresh capture process); \u201c{device['label']}\u201d "
                     f"is the 95 % interval the median of a rerun with as many repeats will hold on the {SAME_SITTING} (another "
                     "day or machine moves times beyond it: compare adds that); a ranking is called only outside it. Host "
                     f"times: the median over captures, with the lowest and highest (\u201c{host['label']}\u201d)."
                     + short_repeats(summary))
    elif "repeats" in summary:
        notes.append("One repeat per variant and shape: no time has a between-run interval (config repeats).")
    warned = [f for sh in shapes for f in sh["findings"] if f["rule"] in ("trace_quality", "status") and f["kind"] == "warning"]
    notes.append(f"{len(warned)} captures have an incomplete trace or a missing check (named in each variant's row)." if warned
                 else "Every capture's trace was complete.")
    return notes


def _alike_gpus(used: list[dict]) -> list[str]:
    """The small print's note on a run captured on several GPUs of one kind ([] for one GPU, or GPUs of different
    kinds, which page 1 states among its findings)."""
    return [gpu_note(used)] if len(used) > 1 and not differing_kinds(used) else []


def expectations_words(checks: list[dict]) -> str:
    """The study comparison in words: how many of its claims hold, which do not, which the rerun intervals leave open."""
    if not checks:
        return ""
    by: dict[str, list[dict]] = {"same": [], "different": [], WITHIN_NOISE: []}
    for c in checks:
        by.setdefault(c["verdict"], []).append(c)
    diff, noise = by["different"], by[WITHIN_NOISE]
    text = f"{len(by['same'])} of the {len(checks)} claims hold on this run."
    if diff:
        text += " " + ("It does not confirm: " if len(diff) == 1 else f"{len(diff)} do not: ") + "; ".join(map(_claim_observed, diff)) + "."
    if noise:
        text += (" Within the rerun intervals, so neither confirmed nor refuted: "
                 + "; ".join(f"\u201c{c['claim']}\u201d" for c in noise) + ".")
    return text


def _claim_observed(check: dict) -> str:
    """'“claim” (observed 2 ms)' of an expectation check."""
    observed = check.get("observed") or {}
    unit = f" {observed['unit']}" if observed.get("unit") else ""
    return f"\u201c{check['claim']}\u201d (observed {_fmt(observed.get('value'))}{unit})"


def cudnn_version(value) -> str:
    """torch.backends.cudnn.version()'s integer as major.minor.patch: cuDNN 9 encodes
    major*10000 + minor*100 + patch (91900 -> 9.19.0), cuDNN 8 major*1000 + minor*100 + patch
    (8902 -> 8.9.2); anything else comes back as text."""
    if not isinstance(value, int) or value <= 0:
        return "" if value is None else str(value)
    major, rest = (value // 10000, value % 10000) if value >= 10000 else (value // 1000, value % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


#: The advice every CUDA out-of-memory message of PyTorch ends with (c10/cuda/CUDACachingAllocator.cpp: "If reserved
#: but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ... See documentation
#: for Memory Management (...)"): the same for every out-of-memory capture, and half of its message.
_OOM_ADVICE = re.compile(r"\s*If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF.*\Z", re.S)


def short_reason(text) -> str:
    """Jinja filter: a capture's reason as the report prints it: PyTorch's out-of-memory message without its closing
    advice on fragmentation (what was asked, what was free and what was held stay; the capture's status.json keeps
    the whole message); any other reason as it is."""
    if not isinstance(text, str):
        return "" if text is None else str(text)
    short = _OOM_ADVICE.sub("", text)
    return short if short == text else short + " (PyTorch's advice on fragmentation left out: see the capture's status.json)"


def _fmt(value, digits: int = 3) -> str:
    """Jinja filter: numbers with ``digits`` significant digits, '' for missing values."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format_number(value, digits)
    return str(value)


def _range(lo, hi, digits: int = 3) -> str:
    """Jinja filter ``to``: a range of two values, each as :func:`_fmt` writes it, in the one format of a range
    (attnprof.model.fmt.format_range: an en dash between the ends)."""
    return format_range(_fmt(lo, digits), _fmt(hi, digits))


def render_html(context: dict, template_dir: Path, template: str = "report.html.j2") -> str:
    """Render the report template with autoescaping on (every value is HTML-escaped
    unless the template marks it safe; only the embedded CSS is)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _fmt
    env.filters["cudnn"] = cudnn_version
    env.filters["reason"] = short_reason
    env.filters["setting"] = _setting
    env.filters["to"] = _range  # {{ lo | to(hi) }}: a range, its ends in the number format (attnprof.model.fmt)
    env.globals["spread_words"] = spread_words  # the label of a time's interval (attnprof.findings.ranking)
    env.globals["columns"] = columns_of("summary")  # the summary table's headers (attnprof.model.columns)
    return env.get_template(template).render(**context)


def render_pdf(html_path: Path, pdf_path: Path) -> None:
    """Render ``html_path`` to ``pdf_path`` with WeasyPrint. Raises RenderError if WeasyPrint
    logs any error (it would otherwise write a PDF with the broken part missing), ImportError
    with an install hint when WeasyPrint or Pango is missing."""
    try:
        import weasyprint
    except (ImportError, OSError) as exc:  # OSError: Pango not found
        raise ImportError(f"report.pdf needs WeasyPrint and Pango ({exc}); on Debian: apt-get install libpango-1.0-0 "
                          "libpangoft2-1.0-0, then pip install weasyprint. Render elsewhere with "
                          "`snakemake --cores 1 results/<run>/report.pdf`") from exc

    errors: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.ERROR:
                errors.append(record.getMessage())

    handler = Collect()
    logger = logging.getLogger("weasyprint")
    logger.addHandler(handler)
    try:
        # printed, an identifier wraps only after its _, :: or , and an interval not at all (attnprof.render.breaks)
        html = weasyprint.HTML(string=mark_breaks(Path(html_path).read_text(encoding="utf-8")),
                               base_url=str(Path(html_path).parent))
        html.write_pdf(str(pdf_path))
    finally:
        logger.removeHandler(handler)
    if errors:
        Path(pdf_path).unlink(missing_ok=True)
        raise RenderError("WeasyPrint reported errors: " + "; ".join(errors[:5]))
