"""The report page (report.html, report.pdf) of one result set: its tables, findings and page 1
(attnprof.findings.brief) turned into the template's context (report/report.html.j2) and nothing else: a shape's
summary rows with their kernels, launches and findings, the sweep table across shapes, the study comparison's table,
the methods' sentences on repeats, the calibration and the environment. Every table cell is autoescaped by the
template (kernel names are C++ templates full of <, > and &); the HTML and PDF themselves: attnprof.render.common."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from attnprof.analysis.control import check_control, self_check_line
from attnprof.analysis.stats import SAME_SITTING
from attnprof.analysis.tables import derive_columns
from attnprof.analysis.trace import kernel_label
from attnprof.findings.brief import backward_numbers, check_failed, expectations_words, page1
from attnprof.findings.data import at_shape, records
from attnprof.findings.metrics import KERNEL_COUNT
from attnprof.findings.rules.kernels import occupancy_not_estimated
from attnprof.model.fmt import format_number, format_range
from attnprof.model.names import CAPTURE_FILES, CAPTURE_TABLES, RUN_FILES, TIMELINE
from attnprof.model.variants import DISPATCHERS, REGISTRY, Shape
from attnprof.render.common import data_uri
from attnprof.render.plots import CAPTIONS, CPU_CAPTIONS, CPU_PLOTS, FULL_WIDTH

def _describe(shape_key: str) -> str:
    """attnprof.model.variants.Shape.describe of a shape key, or '' for a key it cannot parse."""
    try:
        return Shape.from_key(shape_key).describe()
    except ValueError:
        return ""


#: The result set's file names as the report names them (attnprof.model.names): ``run``, ``capture`` and ``tables`` by
#: name, and ``csv_tables``, the per-capture CSV tables as one brace pattern ('{kernels,forwards,launches,ops}.csv').
FILE_NAMES = {"run": RUN_FILES, "capture": CAPTURE_FILES, "tables": CAPTURE_TABLES,
              "csv_tables": "{" + ",".join(n.removesuffix(".csv") for n in CAPTURE_TABLES.values() if n.endswith(".csv")) + "}.csv"}


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
    dev, host = (summary.get(c, pd.Series(dtype=float)).dropna() for c in ("device_ms_run_sd_pct", "cpu_ms_run_sd_pct"))
    parts = [f"{what} moved by up to {v.max():.1f}&nbsp;%" for what, v in (("device times", dev), ("host times", host))
             if len(v)]
    largest = (f" Between the repeats of this run, {' and '.join(parts)} (standard deviation of the log medians)."
               if parts else "")
    coverage = 100 * (n - 1) / (n + 1)
    gpu = bool(len(dev))
    rerun = ". Host times have no rerun interval"
    if gpu:
        largest += (" What a change of these times <code>compare</code> can find depends on the other result set and the "
                    "design (another sitting, the same one, or a paired A/B run): each comparison states it, simulated with "
                    "its own rows' rounds resampled (docs/statistics.md).")
        rerun = (f"; <i>rerun</i> is the 95&nbsp;% prediction interval for the median a rerun with as many repeats will "
                 f"state on the {SAME_SITTING} (Student's t over the log repeat medians, the between-process variance "
                 "pooled over the variant's shapes; docs/statistics.md); another day or machine moves a whole block of "
                 "cells beyond it, which <code>compare</code> adds. Host times have no such interval")
    return (f"each (variant, shape) was captured {n} times (repeats), in rounds over the whole grid, each round in a fresh "
            f"capture process: a repeat re-draws the process, {'the CUDA context, ' if gpu else ''}the allocations and the "
            f"libraries' plan choices, and the time between repeats; {'the host and the GPU stay' if gpu else 'the machine stays'}"
            f" the same. The number stated is the median of the repeat medians{rerun}: they are the median over the "
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
    (attnprof.findings.brief.timing_findings), so page 1 and the findings table state the same rankings even for a
    findings.json written by an earlier one. Page 1's statements are attnprof.findings.brief.page1's, laid out."""
    summary, gpu, calibration = derive_columns(summary), bool(env.get("gpu_name")), calibration or {}
    control = control or check_control(None, "cuda" if gpu else "cpu")
    brief = page1(summary, kernels, findings, calibration, repeats, control)
    shapes = [_shape_context(shape_key, summary, kernels, launches, findings, env, expectations, plots, counters, brief)
              for shape_key in dict.fromkeys(summary["shape_key"])]
    study = _part1(shapes, gpu)
    cfg = env["config"]
    return {"run": run, "env": env, "config": cfg, "repeats_text": repeats_text(cfg, summary), "shapes": shapes, "study": study, "expectations_meta": expectations, "css": css,
            "full_width": sorted(FULL_WIDTH), "captions": CAPTIONS if gpu else CPU_CAPTIONS, "timeline_name": TIMELINE,
            "brief": brief["statements"], "brief_notes": brief["notes"], "self_check": control, "self_check_line": self_check_line(control),
            "gpus_used": brief["gpus_used"], "sweep": sweep_table(summary, gpu, brief["memory_bound"]),
            "run_plots": {name: data_uri(p) for name, p in (run_plots or {}).items()},
            "calibration": calibration_numbers(calibration), "multi_shape": summary["shape_key"].nunique() > 1,
            "host_load": _load_range(summary, repeats), "files": FILE_NAMES,
            # compare's noise floors in % (env.json in the current format: attnprof.model.formats gives the defaults to
            # one recorded before them)
            "noise_floor_pct": 100 * cfg["compare"]["noise_floor"], "noise_floor_host_pct": 100 * cfg["compare"]["noise_floor_host"]}


def _part1(shapes: list[dict], gpu: bool) -> dict | None:
    """Part 1 of the report: the shape page 1 speaks of (attnprof.findings.brief.page1's ``study``: the shape the
    study's expectations were checked at, else the first), marked ``part1`` by :func:`_shape_context`; every shape's
    plots as shown (part 1's timeline stands in part 1, beside the summary; a CPU run has no device plots)."""
    study = next((sh for sh in shapes if sh["part1"]), None)
    for sh in shapes:
        sh["timeline"] = sh["plots"].get(TIMELINE)
        sh["shown_plots"] = {name: uri for name, uri in sh["plots"].items()
                             if (gpu or name in CPU_PLOTS) and not (sh["part1"] and name == TIMELINE)}
    return study


def _shape_context(shape_key: str, summary: pd.DataFrame, kernels: pd.DataFrame, launches: pd.DataFrame, findings: dict,
                   env: dict, expectations: dict, plots: dict, counters: dict | None, brief: dict) -> dict:
    """One shape's part of the report: its summary rows (:func:`_row_context`), findings, expectation checks, plots
    and hardware counters; its findings as page 1 reads them (``brief``: attnprof.findings.brief.page1), each with
    the anchor of its row in the findings table (page 1 links its evidence there)."""
    stored = next((s for s in findings["shapes"] if s["shape_key"] == shape_key), {"findings": [], "expectations": []})
    found = brief["shapes"][shape_key]
    checks, counts = stored["expectations"], study_counts(expectations)
    table = [_row_context(row, shape_key, kernels, launches, found, env, counts) for row in records(at_shape(summary, shape_key))]
    return {"key": shape_key, "describe": _describe(shape_key), "rows": table, "findings": found,
            "expectations": [_check_numbers(c) for c in checks], "expectations_words": expectations_words(checks),
            "is_study": shape_key == brief["study"] and bool(checks), "part1": shape_key == brief["study"],
            "plots": {name: data_uri(p) for name, p in plots.get(shape_key, {}).items()},
            "deviations": sum(c["verdict"] == "different" for c in checks), "counters": (counters or {}).get(shape_key, [])}


#: Rules whose findings the summary row does not list: status and trace quality (the row shows status, reason and
#: trace note itself), backward and compile (stated in their own tables, :func:`backward_numbers`).
_OWN_COLUMNS = ("status", "trace_quality", "backward", "compile")


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
            "launches": records(_of(launches, v, shape_key)), **_row_numbers(row),
            **_fidelity_ratios(mine),
            **backward_numbers(row, bool(env.get("gpu_name")), beyond["backward"]),
            "backward_findings": beyond["backward"], "compile_findings": beyond["compile"]}


def _row_kernels(kernels: pd.DataFrame, variant: str, shape_key: str) -> list[dict]:
    """A row's kernels with a short name for the table (the full name on demand), the time per forward in ms like
    every other, and ``occupancy_artefact``: its 0 % occupancy is the profiler's (a driver-API launch:
    attnprof.findings.rules.kernels.occupancy_not_estimated)."""
    k = _of(kernels, variant, shape_key)
    if not len(k):
        return records(k)
    per_forward = k["us_per_forward"] / 1000 if "us_per_forward" in k else None
    artefact = [occupancy_not_estimated(e, api) for e, api in zip(k.get("est_occupancy_pct", [None] * len(k)),
                                                                   k.get("launch_api", [None] * len(k)))]
    return records(k.assign(label=[kernel_label(n) for n in k["kernel"]], ms_per_forward=per_forward,
                            occupancy_artefact=artefact))


def _of(table: pd.DataFrame, variant: str, shape_key: str) -> pd.DataFrame:
    """The rows of a per-variant table (kernels, launches) of one variant at one shape."""
    return table[(table["variant"] == variant) & (table["shape_key"] == shape_key)] if len(table) else table


def _fidelity_ratios(mine: list[dict]) -> dict[str, float | None]:
    """The timing-fidelity ratios a variant's fidelity finding states (``mine``: the findings that name it first;
    attnprof.findings.rules.timing): ``timed_over_trace`` (CUDA-event median over trace device time) and
    ``graph_over_trace`` (CUDA-graph median over trace device time), no unit; None where it has none."""
    own = next((f["numbers"] for f in mine if f["rule"] == "fidelity" and len(f["variants"]) == 1), {})  # 2: rankings
    return {k: (own.get(k) or {}).get("value") for k in ("timed_over_trace", "graph_over_trace")}


def _row_numbers(row: dict) -> dict:
    """Numbers of a summary row that the report states and the table does not hold:
    ``timed_spread_pct``, the spread of the independent timing in % of its median (inter-quartile
    range; min-max for result sets without quartiles), and ``oom_gib``, what an out-of-memory
    capture asked for, in GiB (2**30 bytes). None where there is nothing to state."""
    median = row.get("timed_ms_median")
    lo, hi = ("timed_ms_q1", "timed_ms_q3") if row.get("timed_ms_q1") is not None else ("timed_ms_min", "timed_ms_max")
    return {"timed_spread_pct": 100 * (row[hi] - row[lo]) / median if median else None,
            "oom_gib": row["oom_bytes"] / 2**30 if row.get("oom_bytes") else None}


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
    """What a variant changes, in words (the summary table's "change" column): a built-in one's description in its
    one registration (attnprof.model.variants.REGISTRY), a user variant's from its config entry (its description,
    else the function it names)."""
    custom = ((env.get("config") or {}).get("custom_variants") or {}).get(variant)
    if custom:
        return custom.get("description") or f"your variant: {custom['function']}"
    return REGISTRY[variant].description if variant in REGISTRY else variant


def _shape_word(shape_key: str, keys: list[str]) -> str:
    """A shape key shortened to the parts that differ between ``keys`` (seq_len and head_dim of a sweep)."""
    common = _common_parts(keys).split("_")
    return "_".join(p for p in shape_key.split("_") if p not in common) or shape_key


def sweep_table(summary: pd.DataFrame, gpu: bool, bound: dict) -> dict:
    """The cross-shape view of a sweep: one row per variant, one column per shape; each cell the time per forward
    (device on a GPU, host on a CPU; median of the repeats, rerun interval), TFLOP/s -- GB/s at a memory-bound shape
    (``bound``: :func:`memory_bound`) -- and kernels per forward, or the status of a capture that published no
    numbers. ``common`` names what every shape shares."""
    keys = list(dict.fromkeys(summary["shape_key"]))
    prefix = "device_ms" if gpu else "cpu_ms"
    by = {(r["variant"], r["shape_key"]): r for r in records(summary)}
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
            "wrong": check_failed(r.get("rel_error_ok"))}
