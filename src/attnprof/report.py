"""Render the run's report: a self-contained HTML file (jinja2, images embedded as data
URIs, every table cell autoescaped: kernel names are C++ templates full of <, > and &)
and a PDF of the same HTML (WeasyPrint)."""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path

import jinja2
import pandas as pd

from .compare import NOISE_FLOOR, NOISE_FLOOR_HOST
from .stats import detectable_change
from .findings.expectations import WITHIN_NOISE
from .findings.metrics import KERNEL_COUNT
from .fmt import format_number
from .names import CAPTURE_FILES, CAPTURE_TABLES, RUN_FILES, TIMELINE
from .plots import CAPTIONS, CPU_CAPTIONS, CPU_PLOTS, FULL_WIDTH
from .trace import kernel_label

#: variant -> what it changes, for the summary table (the study's "change" column): one entry per
#: built-in variant of attnprof.variants.VARIANTS (tests/test_names.py keeps the two in step)
CHANGES = {
    "naive": "matmul, scale, masked_fill (out of place), softmax, matmul",
    "naive_inplace": "as naive, with masked_fill_ (in place)",
    "sdpa_math": "SDPA, backend pinned to MATH",
    "sdpa_efficient": "SDPA, backend pinned to EFFICIENT_ATTENTION",
    "sdpa_flash": "SDPA, backend pinned to FLASH_ATTENTION",
    "sdpa_cudnn": "SDPA, backend pinned to CUDNN_ATTENTION",
    "sdpa_auto": "SDPA, no backend pinned (PyTorch chooses)",
    "naive_compiled": "naive under torch.compile (inductor fuses the elementwise work)",
    "flex_attention": "flex_attention under torch.compile, causal block mask built once",
}


class RenderError(RuntimeError):
    """WeasyPrint logged an error (a missing image, a broken stylesheet): the PDF would be
    silently incomplete, so the job fails instead."""


def _describe(shape_key: str) -> str:
    """attnprof.variants.Shape.describe of a shape key, or '' for a key it cannot parse."""
    from .variants import Shape

    try:
        return Shape.from_key(shape_key).describe()
    except ValueError:
        return ""


def file_names() -> dict:
    """The result set's file names as the report names them (attnprof.names): ``run``, ``capture`` and
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
    """The methods' sentence on repeats: how many, what a repeat re-draws, what the rerun interval means
    (attnprof.stats), and the largest between-run spread of the run."""
    n = int(cfg.get("repeats", 1))
    if n < 2:
        return ("this result set has one repeat (config <code>repeats</code> 1): its times have no between-run spread, "
                "and the IQR below them (first to third quartile over the forwards) says nothing about a rerun.")
    def spread(col):
        return summary[col].dropna() if col in summary else pd.Series(dtype=float)

    dev, host = spread("device_ms_run_sd_pct"), spread("cpu_ms_run_sd_pct")
    parts = [f"{what} by up to {v.max():.1f}&nbsp;%" for what, v in (("device times", dev), ("host times", host)) if len(v)]
    largest = (f" Between the repeats of this run, {' and '.join(parts)} (standard deviation of the log medians)."
               if parts else "")
    if not len(dev):  # a CPU run: its host times are what compare judges
        dev = host
    if len(dev):  # what compare could find against a rerun with as many repeats (attnprof.stats.detectable_change)
        floor = (cfg.get("compare") or {}).get("noise_floor", NOISE_FLOOR)
        lim = [100 * detectable_change(v / 100, n, floor) for v in (dev.min(), dev.median(), dev.max())]
        largest += (f" Against a rerun with as many repeats, <code>compare</code> would find (80&nbsp;% power) a change of "
                    f"{lim[1]:.1f}&nbsp;% at the median spread of this run ({lim[0]:.1f}&ndash;{lim[2]:.1f}&nbsp;% over its "
                    "variants and shapes). Calibrated on an H200 (docs/statistics.md): two sweeps minutes apart gave no "
                    "changed verdict in 61 pairs, and a known 3.3&nbsp;% change was found with 3.3&nbsp;% inside its interval.")
    return (f"each (variant, shape) was captured {n} times (repeats), in rounds over the whole grid, each round in a fresh "
            "capture process: a repeat re-draws the process, the CUDA context, the allocations and the libraries' plan "
            "choices, and the time between repeats; the host and the GPU stay the same. The number stated is the median of "
            "the repeat medians; <i>rerun</i> is the 95&nbsp;% prediction interval for the median a rerun with as many repeats "
            "will state (Student's t over the log repeat medians; docs/statistics.md); IQR is the within-capture spread "
            "(first to third quartile over the forwards of the median repeat), which a rerun does not hold." + largest)


def build_context(run: str, summary: pd.DataFrame, kernels: pd.DataFrame, launches: pd.DataFrame, findings: dict,
                  env: dict, expectations: dict, plots: dict[str, dict[str, Path]], css: str,
                  run_plots: dict[str, Path] | None = None, calibration: dict | None = None,
                  counters: dict[str, list[dict]] | None = None) -> dict:
    """Everything the template needs, as plain Python values. ``plots`` maps shape key ->
    plot name -> PNG path; ``run_plots`` the run-wide plots (scaling, roofline) by name;
    ``calibration`` is calibration.json; ``counters`` maps shape key -> the hardware-counter rows
    of attnprof.counters_findings (Nsight Compute, where rule measure_counters ran)."""
    shapes = []
    by_shape = {s["shape_key"]: s for s in findings["shapes"]}
    counts = study_counts(expectations)
    for shape_key in dict.fromkeys(summary["shape_key"]):
        rows = summary[summary["shape_key"] == shape_key]
        f = by_shape.get(shape_key, {"findings": [], "expectations": []})
        fidelity = _fidelity_ratios(f["findings"])
        per_variant = {}
        for item in f["findings"]:
            if item["rule"] in ("status", "trace_quality"):  # the summary row shows status, reason and trace note itself
                continue
            if item["rule"] in ("backward", "compile"):  # stated in their own tables (backward_numbers)
                continue
            for v in item["variants"][:1]:
                per_variant.setdefault(v, []).append(item)
        beyond = {(item["rule"], item["variants"][0]): [item] for item in f["findings"] if item["rule"] in ("backward", "compile")}
        table = []
        for row in _records(rows):
            v = row["variant"]
            k = kernels[(kernels["variant"] == v) & (kernels["shape_key"] == shape_key)] if len(kernels) else kernels
            k = k.assign(label=[kernel_label(n) for n in k["kernel"]]) if len(k) else k
            la = launches[(launches["variant"] == v) & (launches["shape_key"] == shape_key)] if len(launches) else launches
            row["forward_groups"] = json.loads(row["forward_groups"]) if row.get("forward_groups") else []
            table.append({**row, "change": change_of(v, env), "study_kernels": counts.get(v),
                          "findings": per_variant.get(v, []), "kernels": _records(k), "launches": _records(la),
                          **_row_numbers(row), **fidelity.get(v, {"timed_over_trace": None, "graph_over_trace": None}),
                          **backward_numbers(row, bool(env.get("gpu_name")), beyond.get(("backward", v), [])),
                          "backward_findings": beyond.get(("backward", v), []), "compile_findings": beyond.get(("compile", v), [])})
        shapes.append({
            "key": shape_key, "describe": _describe(shape_key), "rows": table, "findings": f["findings"],
            "expectations": [_check_numbers(c) for c in f["expectations"]],
            "is_study": bool(f["expectations"]), "part1": False,
            "plots": {name: data_uri(p) for name, p in plots.get(shape_key, {}).items()},
            "deviations": sum(1 for c in f["expectations"] if c["verdict"] == "different"),
            "counters": (counters or {}).get(shape_key, []),
        })
    # part 1 of the report: the shape the study's expectations were checked at (else the first)
    study = next((sh for sh in shapes if sh["is_study"]), shapes[0] if shapes else None)
    if study is not None:
        study["part1"] = True
    gpu = bool(env.get("gpu_name"))
    for sh in shapes:  # the timeline of part 1 stands in part 1, beside the summary; a CPU run has no device plots
        sh["timeline"] = sh["plots"].get(TIMELINE)
        sh["shown_plots"] = {name: uri for name, uri in sh["plots"].items()
                             if (gpu or name in CPU_PLOTS) and not (sh["part1"] and name == TIMELINE)}
    cfg = env.get("config", {})
    return {"run": run, "env": env, "config": cfg, "repeats_text": repeats_text(cfg, summary), "shapes": shapes, "study": study, "expectations_meta": expectations, "css": css,
            "full_width": sorted(FULL_WIDTH), "captions": CAPTIONS if gpu else CPU_CAPTIONS, "timeline_name": TIMELINE, "brief": in_brief(study, shapes, summary),
            "run_plots": {name: data_uri(p) for name, p in (run_plots or {}).items()},
            "calibration": calibration_numbers(calibration or {}), "multi_shape": summary["shape_key"].nunique() > 1,
            "host_load": _load_range(summary), "files": file_names(),
            # compare's noise floor in % (a result set recorded before the compare config had none: its default)
            "noise_floor_pct": 100 * (cfg.get("compare") or {}).get("noise_floor", NOISE_FLOOR)}


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
    quartiles ``bwd_q1``/``bwd_q3`` (device ms per backward on a GPU, host ms on a CPU), and
    ``backward_over_forward`` as the row's backward finding (``findings``, rule backward) computed
    it. None where absent."""
    kind = "device" if gpu else "cpu"
    ratio = next((f["numbers"]["backward_over_forward"]["value"] for f in findings), None)
    return {"bwd_ms": row.get(f"{kind}_ms_per_backward"), "bwd_q1": row.get(f"{kind}_ms_backward_q1"),
            "bwd_q3": row.get(f"{kind}_ms_backward_q3"), "backward_over_forward": ratio}


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
    pair's verdict counts, the rows called changed (``changed``) and the (variant, shape) whose kernels differ
    (``kernels_differ``), and the CSS."""
    cmp = {**doc, "noise_floor_pct": 100 * doc["noise_floor"], "confidence_pct": 100 * doc.get("confidence", 0.95),
           "noise_floor_host_pct": 100 * doc.get("noise_floor_host", NOISE_FLOOR_HOST)}
    pairs = []
    for pair in doc["pairs"]:
        rows = [{"ratio_lo": None, "ratio_hi": None, "bwd_ratio_lo": None, "bwd_ratio_hi": None, "repeats_a": None,
                 "repeats_b": None, "repeats_needed": None, "why": "", **r} for r in pair["rows"]]
        counts = pair.get("counts") or {v: sum(r["verdict"] == v for r in rows)
                                        for v in ("slower", "faster", "same", "inconclusive", "not comparable")}
        # the backward / torch.compile table: rows with a backward or a compile record in either result set
        extra = [r for r in rows if r.get("bwd_verdict") or r.get("compile_a_s") or r.get("compile_b_s")]
        changed = [r for r in rows if r["verdict"] in ("slower", "faster")]
        kernels_differ = list(dict.fromkeys(f"{r['variant']} at {r['shape_key']}" for r in rows
                                            if r.get("kernels_added") or r.get("kernels_removed")))
        threshold = pair.get("threshold", doc["noise_floor"])
        pairs.append({**pair, "rows": rows, "extra_rows": extra, "counts": counts, "changed": changed,
                      "threshold_pct": 100 * threshold,
                      "kernels_differ": kernels_differ})
    cmp["pairs"] = pairs
    return {"cmp": cmp, "css": css}


def _load_range(summary: pd.DataFrame) -> str:
    """'min–max' (or one value) of the captures' 1-minute host load average; '' when not recorded."""
    load = pd.to_numeric(summary.get("host_load_1m", pd.Series(dtype=float)), errors="coerce").dropna()
    if load.empty:
        return ""
    lo, hi = format_number(load.min(), 2), format_number(load.max(), 2)
    return lo if lo == hi else f"{lo}\u2013{hi}"


def change_of(variant: str, env: dict) -> str:
    """What a variant changes, in words: the built-in ones' from CHANGES, a user variant's from
    its config entry (its description, else the function it names)."""
    custom = ((env.get("config") or {}).get("custom_variants") or {}).get(variant)
    if custom:
        return custom.get("description") or f"your variant: {custom['function']}"
    return CHANGES.get(variant, variant)


def in_brief(study: dict | None, shapes: list[dict], summary: pd.DataFrame) -> list[str]:
    """Sentences for the report's first page, each taken from a finding, an expectation check
    or a status of this run: how many of the study's expectations hold (and which deviate),
    the fastest variant, variants that did not run, trace defects or missing checks, backwards
    that did not run, and last the rankings and ratios that do not hold outside the spread or
    against the independent timing (so that the page opens with what holds)."""
    out = []
    between = "device_ms_run_lo" in summary and bool(summary[["device_ms_run_lo", "cpu_ms_run_lo"]].notna().any().any())
    spread = "their rerun intervals" if between else "the spread of the profiled forwards"
    if between:
        n = int(summary["repeats"].max())
        sd = pd.concat([summary[c] for c in ("device_ms_run_sd_pct", "cpu_ms_run_sd_pct")]).dropna()
        dev = summary["device_ms_run_sd_pct"].dropna() if "device_ms_run_sd_pct" in summary else sd
        out.append(f"Every time is the median of {n} repeats, each a fresh capture process, with the 95 % interval a "
                   f"rerun's median will hold (\"rerun\"); rankings and verdicts are stated only outside it. "
                   + (f"Device times differ between repeats by {dev.min():.1f}-{dev.max():.1f} % (standard deviation)."
                      if len(dev) else f"Times differ between repeats by up to {sd.max():.1f} % (standard deviation)."))
    elif "repeats" in summary:
        out.append("One repeat per variant and shape: no time has a between-run interval (config repeats).")
    if study and study["expectations"]:
        exp = study["expectations"]
        devs = [c for c in exp if c["verdict"] == "different"]
        others = sum(bool(c.get("own_source")) for c in exp)
        whose = f" (the study's and {others} from PyTorch's own documents)" if others else " of the study"
        text = f"{sum(c['verdict'] == 'same' for c in exp)} of {len(exp)} expectations{whose} hold at its shape"
        if devs:
            text += "; deviating: " + "; ".join(
                f"{c['id']} (expected {_fmt(c['expected'])}, observed {_fmt((c.get('observed') or {}).get('value'))}"
                f"{' ' + c['observed']['unit'] if (c.get('observed') or {}).get('unit') else ''})" for c in devs)
            text += " (section 2 gives each claim and the evidence)"
        noisy = [c["id"] for c in exp if c["verdict"] == WITHIN_NOISE]
        if noisy:
            text += (f"; within {spread}, so neither holding nor deviating: {', '.join(noisy)}")
        out.append(text + ".")
    doubtful, rankings = [], []
    for f in (study or {}).get("findings", []):
        if f["rule"] == "speed" and f["headline"] == "fastest variant" and f["kind"] != "warning":
            out.append(f["statement"] + ".")
        elif f["rule"] == "speed" and f["kind"] == "warning":
            doubtful.append(f["statement"] + ".")
        elif f["rule"] == "fidelity" and f["kind"] == "artefact":
            rankings.append(f)
    if len(rankings) == 1:
        doubtful.append(rankings[0]["statement"] + ".")
    elif rankings:  # one sentence for them all: each has its reason in the findings table
        pairs = ", ".join(" ahead of ".join(f["variants"][:2]) for f in rankings)
        doubtful.append(f"{len(rankings)} rankings by trace time do not hold outside {spread} or against "
                        f"the independent timing: {pairs} (the findings table gives each reason).")
    failed = summary[summary["status"] != "ok"]
    for (variant, status), rows in failed.groupby(["variant", "status"], sort=False):
        out.append(f"{variant}: {status} at {', '.join(rows['shape_key'])}.")
    warned = [f for sh in shapes for f in sh["findings"] if f["rule"] in ("trace_quality", "status") and f["kind"] == "warning"]
    gpu = bool((summary.get("device") == "cuda").any()) if "device" in summary else False
    complete = ("Every capture's trace was complete: every launch found its GPU event, no impossible times, forwards alike."
                if gpu else "Every capture's trace was complete: every profiled forward range is in it, valid and alike.")
    out.append(f"{len(warned)} captures with an incomplete trace or a missing check (named in each variant's row)." if warned
               else complete)
    # a backward that was asked for and did not run is stated here too, with PyTorch's reason in the backward table
    if "backward_status" in summary:
        nb = summary[summary["backward_status"].notna() & (summary["backward_status"] != "ok") & (summary["status"] == "ok")]
        for (variant, status), rows in nb.groupby(["variant", "backward_status"], sort=False):
            out.append(f"{variant} backward: {status} at {', '.join(rows['shape_key'])} (its forward is published).")
    return out + doubtful


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
        html = weasyprint.HTML(filename=str(html_path), base_url=str(Path(html_path).parent))
        html.write_pdf(str(pdf_path))
    finally:
        logger.removeHandler(handler)
    if errors:
        Path(pdf_path).unlink(missing_ok=True)
        raise RenderError("WeasyPrint reported errors: " + "; ".join(errors[:5]))
