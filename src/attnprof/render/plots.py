"""matplotlib figures of one shape's results. Each function takes the run's tables
(pandas frames as written to summary.csv / kernels.csv, filtered to one shape) and
writes a PNG; variants that did not run are drawn as labelled gaps, not dropped."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from attnprof.model.names import CPU_PLOTS, SCALING_PLOTS, SHAPE_PLOTS, TIMELINE  # noqa: E402, F401 (CPU_PLOTS: re-exported)
from attnprof.analysis.tables import has_run_interval  # noqa: E402

COLORS = {"kernel": "#4C72B0", "memcpy": "#DD8452", "memset": "#8C8C8C", "cpu": "#55A868", "device": "#4C72B0"}
#: Figures are drawn at the size they are printed (A4 landscape, 10 mm margins: 10.8 in of text
#: width), so that matplotlib's point sizes are the printed ones: no text under 7 pt.
HALF_IN, FULL_IN = 5.3, 10.8
#: The tallest a figure may be and still share a page of the PDF with its heading and a two-line caption:
#: A4 landscape less report.css's margins is 186 mm (7.3 in) high. A taller figure would leave its heading
#: alone at the foot of a page.
PAGE_FIGURE_MAX_IN = 6.0
#: Figures printed across the page (the others two to a row); names from attnprof.model.names.
FULL_WIDTH = {"kernel_split", "timeline", "scaling_time", "scaling_tflops", "scaling_memory"}
#: One sentence per figure, for the report's captions.
CAPTIONS = {
    "device_time": "Device time per forward of each variant: the median of the repeats, whiskers the 95 % interval a rerun's median will hold (with one repeat: median over the timed forwards, whiskers from the fastest to the slowest forward).",
    "kernels_per_forward": "Kernels, memcpys and memsets each variant launches per forward, counted in the trace.",
    "kernel_split": "Where each variant's device time goes, by kind of kernel, as a share of its own device time in repeat 1 (total per forward at the right: repeat 1's kernels, the mean over its profiled forwards; the times elsewhere are the median of the repeats).",
    "cpu_vs_device": "Host time to issue a forward against the device time it launches (log scale): a longer CPU bar means launch-bound.",
    "timeline": "One profiled forward per variant as the trace records it: launch calls on the CPU row, kernels, memcpys and memsets on the GPU row; each row has its own time scale.",
    "scaling_time": "Device time per forward against seq_len, one panel per head_dim; a variant's x at the top marks a point that ran out of memory.",
    "scaling_tflops": "Achieved TFLOP/s (PyTorch's sdpa.py FLOP convention over the trace device time) against seq_len.",
    "scaling_memory": "Device memory the profiled forwards allocated beyond what the process held when they began (their inputs, library workspaces), against seq_len.",
    "roofline": "Achieved TFLOP/s against arithmetic intensity, under the measured and the datasheet ceilings of this GPU; "
                "backwards, where profiled, filled (2.5x the forward's FLOPs over 2x its bytes).",
}
#: Captions where a CPU run draws something else (no device events: host time instead).
CPU_CAPTIONS = {**CAPTIONS, "timeline": "One profiled forward per variant as the trace records it (CPU run: no GPU): the "
                "forward's range and the top-level aten ops it called; each row has its own time scale.", "device_time": "CPU run: host time per forward of each variant (the forward's record_function range; "
                "no device events on a CPU): the median of the captures' medians, whiskers from the lowest to the highest "
                "capture (with one repeat: median over the complete forwards, whiskers from the fastest to the slowest)."}
#: Kernel classes (attnprof.findings.kernel_class) and their colours in the split and timeline plots.
CLASS_COLORS = {"fused attention": "#8172B3", "attention pre/post": "#B8AED8", "Triton (inductor)": "#DA8BC3", "GEMM": "#4C72B0", "FP32 GEMM": "#C44E52", "softmax": "#55A868",
                "mask": "#CCB974", "cast/copy": "#64B5CD", "elementwise": "#937860", "other kernel": "#B0B0B0", "memcpy": "#DD8452", "memset": "#8C8C8C"}
LAUNCH_COLOR = "#3A3A3A"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 1)))
plt.rcParams.update({"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7.5,
                     "xtick.labelsize": 7.5, "ytick.labelsize": 7.5, "figure.titlesize": 9.5})


def _save(fig, path: Path, dpi: int) -> None:
    fig.savefig(path, dpi=dpi, metadata={"Software": None}, bbox_inches="tight", pad_inches=0.04)
    plt.close(fig)


def _height(n_rows: int, per_row: float = 0.22, extra: float = 0.9) -> float:
    return per_row * n_rows + extra


def _variant_rows(ax, summary: pd.DataFrame, y) -> None:
    """Name the variants' rows (at ``y``, first at the top) and write the status of variants that did not run at
    their (empty) bar."""
    for yi, (_, row) in zip(y, summary.iterrows()):
        if row["status"] != "ok":
            ax.text(0, yi, f"  {row['status']}", va="center", fontsize=8, color="#B00020")
    ax.set_yticks(y, summary["variant"])
    ax.invert_yaxis()


def device_time(summary: pd.DataFrame, path: Path, dpi: int = 144) -> None:
    """Median device time per forward (ms) per variant, with the between-run interval (the 95 % interval a
    rerun's median will hold, ``<prefix>_run_lo``/``_run_hi``; attnprof.analysis.stats) as whiskers, or, for a result
    set with one repeat, the min-max range over the profiled forwards. On a CPU run (no device events)
    draws CPU time per forward instead and says so in the title."""
    on_device = summary["device_ms_per_forward"].notna().any()
    prefix = "device_ms" if on_device else "cpu_ms"
    col = f"{prefix}_per_forward"
    between = has_run_interval(summary, (prefix,))
    lo, hi = (f"{prefix}_run_lo", f"{prefix}_run_hi") if between else (f"{prefix}_min", f"{prefix}_max")
    fig, ax = plt.subplots(figsize=(HALF_IN, _height(len(summary))), layout="constrained")
    y = np.arange(len(summary))
    vals = summary[col].fillna(0).to_numpy(float)
    xerr = np.clip(np.vstack([vals - summary[lo].fillna(summary[col]).fillna(0).to_numpy(float),
                              summary[hi].fillna(summary[col]).fillna(0).to_numpy(float) - vals]), 0, None)
    ax.barh(y, vals, xerr=xerr, color=COLORS["device" if on_device else "cpu"], capsize=3)
    ends = vals + xerr[1]  # each label right of its whisker, so the whisker never crosses it
    for yi, v, end in zip(y, vals, ends):
        if v > 0:
            ax.text(end, yi, f" {v:.3g}", va="center", fontsize=7.5)
    _variant_rows(ax, summary, y)
    ax.set_xlabel(("ms per forward (median of repeats; whiskers: 95 % rerun interval)" if on_device
                   else "ms per forward (median of captures; whiskers: lowest to highest capture)") if between
                  else "ms per forward (median; whiskers: min to max over forwards; 1 repeat)")
    ax.set_title("Device time per forward (kernels + memcpy + memset)" if on_device else "CPU run: host time per forward")
    ax.set_xlim(0, max(np.nanmax(summary[hi].to_numpy(float)) if summary[hi].notna().any() else 0, vals.max(), 1e-9) * 1.3)
    _save(fig, path, dpi)


def kernels_per_forward(summary: pd.DataFrame, path: Path, dpi: int = 144) -> None:
    """Stacked bars: kernels, memcpys and memsets launched per forward (median)."""
    fig, ax = plt.subplots(figsize=(HALF_IN, _height(len(summary))), layout="constrained")
    y = np.arange(len(summary))
    left = np.zeros(len(summary))
    for cat, col in (("kernel", "kernels_per_forward"), ("memcpy", "memcpy_per_forward"), ("memset", "memset_per_forward")):
        vals = summary[col].fillna(0).to_numpy(float)
        ax.barh(y, vals, left=left, color=COLORS[cat], label=cat)
        left += vals
    for yi, total in zip(y, left):
        if total > 0:
            ax.text(total, yi, f" {total:g}", va="center", fontsize=7.5)
    _variant_rows(ax, summary, y)
    ax.set_xlabel("GPU events per forward")
    ax.set_title("Kernels, memcpys and memsets per forward")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_xlim(0, max(left.max(), 1) * 1.15)
    _save(fig, path, dpi)


def kernel_split(summary: pd.DataFrame, kernels: pd.DataFrame, path: Path, dpi: int = 144) -> None:
    """Each variant's device time per forward split by kind of kernel
    (:func:`attnprof.findings.kernel_class`: fused attention, GEMM, FP32 GEMM, softmax, mask,
    cast/copy, other kernels, memcpy, memset), as % of that variant's own device time; the
    total per forward (µs, ``us_per_forward`` summed) is written at the bar's end."""
    from attnprof.findings.kernel_names import KERNEL_CLASSES, kernel_class

    k = kernels[kernels["variant"].isin(summary["variant"])].copy() if len(kernels) else kernels
    fig, ax = plt.subplots(figsize=(FULL_IN, _height(len(summary), 0.26, 1.0)), layout="constrained")
    y = np.arange(len(summary))
    if k.empty:
        ax.text(0.5, 0.5, "no device events in this run", ha="center", va="center", transform=ax.transAxes)
    else:
        k["class"] = [kernel_class(n, c) for n, c in zip(k["kernel"], k["category"])]
        table = k.pivot_table(index="variant", columns="class", values="us_per_forward", aggfunc="sum", fill_value=0.0)
        table = table.reindex(summary["variant"]).fillna(0.0)
        totals = table.sum(axis=1)
        shares = table.div(totals.where(totals > 0), axis=0).fillna(0.0) * 100
        left = np.zeros(len(summary))
        for cls in (c for c in KERNEL_CLASSES if c in shares):
            vals = shares[cls].to_numpy(float)
            ax.barh(y, vals, left=left, color=CLASS_COLORS[cls], label=cls, edgecolor="white", linewidth=0.5)
            for yi, lo_, v in zip(y, left, vals):
                if v >= 7:
                    ax.text(lo_ + v / 2, yi, f"{v:.0f} %", ha="center", va="center", fontsize=7, color="white")
            left += vals
        for yi, total in zip(y, totals):
            if total > 0:
                ax.text(101, yi, f"{total:.0f} µs" if total >= 1000 else f"{total:.4g} µs", va="center", fontsize=7.5)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="kind of kernel")
    _variant_rows(ax, summary, y)
    ax.set_xlim(0, 114)
    ax.set_xlabel("% of the variant's device time per forward (total per forward at the right)")
    ax.set_title("Device time per forward, by kind of kernel")
    _save(fig, path, dpi)


def cpu_vs_device(summary: pd.DataFrame, path: Path, dpi: int = 144) -> None:
    """Grouped bars per variant: host (CPU) time and device time per forward, ms, log
    scale. A variant whose CPU bar is longer is launch-bound at this shape."""
    fig, ax = plt.subplots(figsize=(HALF_IN, _height(len(summary), 0.3, 1.1)), layout="constrained")
    y = np.arange(len(summary))
    h = 0.38
    cpu = summary["cpu_ms_per_forward"].to_numpy(float)
    dev = summary["device_ms_per_forward"].to_numpy(float)
    ax.barh(y - h / 2, np.nan_to_num(cpu), height=h, color=COLORS["cpu"], label="CPU time of the forward")
    ax.barh(y + h / 2, np.nan_to_num(dev), height=h, color=COLORS["device"], label="device time")
    _variant_rows(ax, summary, y)
    both = np.concatenate([cpu, dev])
    positive = both[np.isfinite(both) & (both > 0)]
    if positive.size:
        ax.set_xscale("log")
        ax.set_xlim(positive.min() / 2, positive.max() * 2)
    ax.set_xlabel("ms per forward (median, log scale)")
    ax.set_title("CPU time vs device time per forward")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    _save(fig, path, dpi)


def make_all(summary: pd.DataFrame, kernels: pd.DataFrame, out_dir: Path, dpi: int) -> list[Path]:
    """Write every plot of SHAPE_PLOTS for one shape into ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device_time(summary, out_dir / "device_time.png", dpi)
    kernels_per_forward(summary, out_dir / "kernels_per_forward.png", dpi)
    kernel_split(summary, kernels, out_dir / "kernel_split.png", dpi)
    cpu_vs_device(summary, out_dir / "cpu_vs_device.png", dpi)
    return [out_dir / f"{name}.png" for name in SHAPE_PLOTS]


SCALING = {"device_ms_per_forward": ("device ms per forward (trace, median of repeats; band: rerun interval)", "scaling_time"),
           "tflops": ("TFLOP/s (trace device time)", "scaling_tflops"),
           "forward_memory_mb": ("device memory a forward allocates, MiB", "scaling_memory")}
assert tuple(name for _, name in SCALING.values()) + ("roofline",) == SCALING_PLOTS, "attnprof.model.names.SCALING_PLOTS"


#: Scaling columns drawn with a band: the between-run interval's (low, high) columns.
RUN_BANDS = {"device_ms_per_forward": ("device_ms_run_lo", "device_ms_run_hi")}


def _panels(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One panel per combination of the shape fields other than seq_len (the key/value length):
    head_dim, batch, heads, kv_heads, q_len (its value where it differs from seq_len, else
    "= kv_len", so a square sweep stays one line), dtype, causal and its alignment."""
    summary = summary.copy()
    seq = summary["seq_len"]
    q_len = summary["q_len"] if "q_len" in summary else seq
    summary["q_len"] = [("= kv_len" if pd.isna(q) or q == s else str(int(q))) for q, s in zip(q_len, seq)]
    summary["kv_heads"] = summary["kv_heads"].fillna(summary["heads"]) if "kv_heads" in summary else summary["heads"]
    # an all-empty column reads as float: '' by object, without a dtype warning
    align = summary.get("causal_alignment", [None] * len(summary))
    summary["causal_alignment"] = [a if isinstance(a, str) else "" for a in align]
    keys = ["head_dim", "batch", "heads", "kv_heads", "q_len", "dtype", "causal", "causal_alignment"]
    return [(", ".join(f"{k} {v}" for k, v in zip(keys, vals) if summary[k].nunique() > 1 or k == "head_dim"), part)
            for vals, part in summary.groupby(keys, sort=True)]


def coinciding(summary: pd.DataFrame, column: str, rel: float = 0.1) -> list[tuple[str, str]]:
    """Pairs of variants whose ``column`` values agree within ``rel`` (relative) at every point
    both have (at least one): their lines would be drawn on top of each other."""
    ok = summary[(summary["status"] == "ok") & summary[column].notna()]
    index = "shape_key" if "shape_key" in ok else ["seq_len", "head_dim", "batch", "heads", "dtype", "causal"]
    pivot = ok.pivot_table(index=index, columns="variant", values=column)
    pairs = [(a, b) for a, b in itertools.combinations(dict.fromkeys(summary["variant"]), 2) if a in pivot and b in pivot]
    return [(a, b) for a, b in pairs if len(both := pivot[[a, b]].dropna()) and (abs(both[a] / both[b] - 1) <= rel).all()]


def _variant_styles(variants: list[str]) -> dict:
    """Each variant's (colour, marker, line style), in the order given: tab10's colours, :data:`MARKERS` and
    :data:`LINESTYLES` each cycled, so coinciding series stay visible."""
    cmap = plt.get_cmap("tab10")
    return {v: (cmap(i % 10), MARKERS[i % len(MARKERS)], LINESTYLES[i % len(LINESTYLES)]) for i, v in enumerate(variants)}


def _scaling_panel(ax, label: str, part: pd.DataFrame, column: str, variants: list[str], style: dict) -> dict:
    """One panel of :func:`scaling` (log-log ``column`` against seq_len, titled ``label``): a line per variant and
    its out-of-memory marks, stacked above the panel's data (the variants that ran out of memory in this panel,
    in order, one row each). Returns the legend handles, {label: artist}."""
    vals = part[column][part[column] > 0]
    top = vals.max() if len(vals) else 1.0
    oom_rows = [v for v in variants if (part[(part["variant"] == v)]["status"] == "out_of_memory").any()]
    handles = {}
    for v in variants:
        pv = part[part["variant"] == v].sort_values("seq_len")
        handles.update(_scaling_line(ax, pv, v, column, style[v]))
        oom = pv[pv["status"] == "out_of_memory"]
        if len(oom):  # one marker per variant, stacked above the data so none hides another
            y = top * 1.5 * 1.35 ** oom_rows.index(v)
            handles[f"{v}: out of memory"] = ax.scatter(oom["seq_len"], [y] * len(oom), marker="x", s=30,
                                                        color=style[v][0], clip_on=False, zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("seq_len")
    ax.set_title(label)
    ax.grid(True, which="both", alpha=0.3)
    return handles


def _scaling_line(ax, pv: pd.DataFrame, variant: str, column: str, style: tuple) -> dict:
    """One variant's line of ``column`` over its ok points (``pv``: its rows of the panel, by seq_len), with the
    95 % rerun interval (attnprof.analysis.stats) shaded where the summary has it. {variant: line}, or {} with no
    ok point."""
    color, marker, ls = style
    ok = pv[pv[column].notna() & (pv["status"] == "ok")]
    if not len(ok):
        return {}
    (line,) = ax.plot(ok["seq_len"], ok[column], marker=marker, ms=4, ls=ls, lw=1.2, color=color, mfc="none", label=variant)
    band = RUN_BANDS.get(column)
    if band and band[0] in ok and ok[band[0]].notna().any():
        ax.fill_between(ok["seq_len"], ok[band[0]], ok[band[1]], color=color, alpha=0.18, lw=0)
    return {variant: line}


def scaling(summary: pd.DataFrame, column: str, path: Path, dpi: int = 144) -> None:
    """``column`` against seq_len (log-log), a line per variant (each its own marker and line
    style, so coinciding series stay visible; a note names them), a panel per head_dim (and
    any other swept field). A point that ran out of memory is the variant's own 'x' above the
    panel's data, one per variant, named in the legend. A column the summary lacks or has no
    value in (a result set captured before it was recorded) draws empty panels and says so."""
    if column not in summary:
        summary = summary.assign(**{column: float("nan")})
    recorded = bool(summary[column].notna().any())
    panels = _panels(summary)
    fig, axes = plt.subplots(1, len(panels), figsize=(FULL_IN, 3.6), squeeze=False, layout="constrained")
    variants = list(dict.fromkeys(summary["variant"]))
    style = _variant_styles(variants)
    handles = {}
    for ax, (label, part) in zip(axes[0], panels):
        handles.update(_scaling_panel(ax, label, part, column, variants, style))
    axes[0][0].set_ylabel(SCALING[column][0])
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", frameon=False)
    fig.suptitle(f"{SCALING[column][0]} vs seq_len" + ("" if recorded else ": not recorded in this result set"))
    if pairs := coinciding(summary, column):  # named below the panels, where constrained layout keeps it clear of the legend
        note = "; ".join(f"{b} coincides with {a}" for a, b in pairs) + " (within 10 % at every point)"
        fig.supxlabel(textwrap.fill(note, 140), fontsize=7.5, color="#444")
    _save(fig, path, dpi)


def roofline(summary: pd.DataFrame, calibration: dict, path: Path, dpi: int = 144) -> None:
    """Achieved TFLOP/s (trace device time) against arithmetic intensity (FLOP per byte of
    the minimum traffic: q, k, v read and the output written once), under the measured
    ceilings (GEMM TFLOP/s and copy bandwidth, solid) and the datasheet ones (dashed). Forwards are
    hollow markers; backwards, where the run profiled them (summary.csv ``backward_tflops`` over
    ``backward_flop_per_byte``: 2.5x the forward's FLOPs over 2x its bytes,
    attnprof.analysis.tables.BACKWARD_FLOP_RATIO), filled markers of the same variant's colour and shape.
    Legend outside the axes."""
    fig, ax = plt.subplots(figsize=(HALF_IN, 3.6), layout="constrained")
    ok = summary[(summary["status"] == "ok") & summary["tflops"].notna()] if "tflops" in summary else summary.iloc[0:0]
    xs = np.logspace(0, 4, 200)
    drew = False
    for key, bw_key, ls, name in (("gemm_tflops_bf16", "copy_tb_per_s", "-", "measured"),
                                  ("datasheet_tflops_bf16", "datasheet_tb_per_s", "--", "datasheet")):
        if calibration.get(key) and calibration.get(bw_key):
            ax.plot(xs, np.minimum(calibration[key], calibration[bw_key] * xs), ls, color="#444",
                    label=f"{name}: {calibration[key]:.0f} TFLOP/s, {calibration[bw_key]:.2f} TB/s")
            drew = True
    style = _variant_styles(list(dict.fromkeys(summary["variant"])))
    _roofline_points(ax, ok, "flop_per_byte", "tflops", style, {"facecolors": "none"})
    bwd = (summary[(summary["status"] == "ok") & summary["backward_tflops"].notna() & summary["backward_flop_per_byte"].notna()]
           if {"backward_tflops", "backward_flop_per_byte"} <= set(summary) else summary.iloc[0:0])
    _roofline_points(ax, bwd, "backward_flop_per_byte", "backward_tflops", style, {})
    if len(bwd):  # one legend entry for the filled markers, whatever the variant
        ax.scatter([], [], color="#888", marker="o", label="filled: backward")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOP per byte (minimum traffic)" + ("; hollow: forward" if len(bwd) else ""))
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("Roofline (marker size grows with seq_len)" + ("" if drew else ": no calibration"))
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a CPU run draws no points
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    _save(fig, path, dpi)


def _roofline_points(ax, table: pd.DataFrame, x: str, y: str, style: dict, hollow: dict) -> None:
    """Each variant's points of the roofline (``y`` TFLOP/s against ``x`` FLOP per byte) in its colour and marker
    (:func:`_variant_styles`), sized by seq_len; a forward's (``hollow``: facecolors none) named in the legend."""
    for v in dict.fromkeys(table["variant"]):
        pv = table[table["variant"] == v]
        ax.scatter(pv[x], pv[y], s=10 + 12 * np.log2(pv["seq_len"] / pv["seq_len"].min() + 1), color=style[v][0],
                   marker=style[v][1], **hollow, **({"label": v} if hollow else {}))


def make_scaling(summary: pd.DataFrame, calibration: dict, out_dir: Path, dpi: int) -> list[Path]:
    """Write the run-wide scaling plots and the roofline into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for column, (_, name) in SCALING.items():
        scaling(summary, column, out_dir / f"{name}.png", dpi)
    roofline(summary, calibration, out_dir / "roofline.png", dpi)
    return [out_dir / f"{name}.png" for name in SCALING_PLOTS]


def pick_forward(forwards: pd.DataFrame) -> int | None:
    """The forward to draw: among the timed forwards (complete, valid GPU times), the one
    whose device time is the median (the lower middle one for an even count); on a CPU run,
    where no forward has device time, the one whose host time is. None if none."""
    timed = forwards[forwards["timing_complete"].astype(bool)] if len(forwards) else forwards
    if timed.empty:
        return None
    by = "device_us" if (timed["device_us"].fillna(0) > 0).any() else "cpu_us"
    order = timed.sort_values([by, "forward"]).reset_index(drop=True)
    return int(order.loc[(len(order) - 1) // 2, "forward"])


def timeline(lanes: list[dict], path: Path, dpi: int = 144) -> None:
    """One profiled forward per variant, the static figure of the interactive timeline: the upper row shows the
    forward's record_function range and the launch calls inside it, the row below the kernels, memcpys and memsets
    they launched, coloured by kind (:func:`attnprof.findings.kernel_names.kernel_class`), with the gaps between
    them; on a CPU run the top-level aten ops instead. Times in µs from the start of the forward's range; each
    variant has its own time scale. ``lanes``: :func:`attnprof.render.timeline_html.lane` of each capture, drawn
    from the tables rule extract writes (recipe.csv, forwards.csv: one source for both timelines, no trace read
    here). A lane without bars gets a line saying why."""
    from attnprof.findings.kernel_names import KERNEL_CLASSES

    # 0.62 in a variant, its rows closer together where many variants would not fit on one page
    height = min(0.62 * len(lanes) + 0.9, PAGE_FIGURE_MAX_IN)
    fig, axes = plt.subplots(len(lanes), 1, figsize=(FULL_IN, height), squeeze=False, layout="constrained")
    seen = set()
    for ax, lane in zip(axes[:, 0], lanes):
        ax.set_ylim(-0.6, 1.6)
        ax.set_ylabel(lane["variant"], rotation=0, ha="right", va="center", fontsize=8, fontweight="bold")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if lane["why"] is not None:
            ax.text(0.01, 0.5, f"not drawn: {lane['why']}", transform=ax.transAxes, va="center", color="#B00020")
            ax.set_xticks([])
            ax.set_yticks([])  # no rows to name
            continue
        seen |= _draw_lane(ax, lane)
    axes[-1, 0].set_xlabel("µs from the start of the forward's range (each row its own scale)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=LAUNCH_COLOR, label="launch call (CPU)")]
    handles += [plt.Rectangle((0, 0), 1, 1, color=CLASS_COLORS[c], label=c) for c in KERNEL_CLASSES if c in seen]
    if "aten op" in seen:
        handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS["cpu"], label="top-level aten op (CPU run: no GPU)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False)
    fig.suptitle("One forward per variant: the aten ops on the host (CPU run)" if "aten op" in seen
                 else "One forward per variant: CPU launches and the GPU work they start")
    _save(fig, path, dpi)


#: Where a lane's rows sit on the timeline's axes (y, height) by bar row.
_LANE_ROWS = {"range": (1.32, 0.12), "launch": (0.75, 0.5), "gpu": (-0.25, 0.5)}


def _draw_lane(ax, lane: dict) -> set:
    """Draw one lane's bars (:func:`attnprof.render.timeline_html.lane`) on ``ax``; returns the kinds drawn."""
    work = [b for b in lane["bars"] if b["row"] == "gpu"]
    ops = [b for b in work if b["cls"] == "aten op"]
    ax.set_yticks([1, 0], ["range", "aten ops"] if ops else ["CPU", "GPU"])
    for b in lane["bars"]:
        ax.broken_barh([(b["x"], max(b["w"], 0.3))], _LANE_ROWS[b["row"]], color=b["color"],
                       **({"edgecolor": "white", "linewidth": 0.3} if b["row"] == "gpu" else {}))
    rng = lane["range_us"]
    _label_ops(ax, ops, rng)
    end = max([rng] + [b["x"] + b["w"] for b in work])
    ax.set_xlim(0, end * 1.02)
    ax.text(1.0, 1.0, _lane_caption(lane["forward"], work, bool(ops), end),
            transform=ax.transAxes, ha="right", va="bottom", fontsize=7.5, color="#444")
    ax.tick_params(axis="x", labelsize=7)
    return {b["cls"] for b in work}


def _label_ops(ax, ops: list[dict], range_us: float) -> None:
    """Name each aten op bar wider than 8 % of the forward's range on it (its name without ``aten::``), in dark
    text: readable on the green, and an underscore that reaches below the bar stays visible."""
    for b in ops:
        if b["w"] > 0.08 * range_us:
            ax.text(b["x"] + b["w"] / 2, 0, b["label"].removeprefix("aten::"), ha="center",
                    va="center", fontsize=7, color="#111111", clip_on=True)


def _lane_caption(forward, work: list[dict], ops: bool, end: float) -> str:
    """A lane's caption: the forward and its host time (a CPU run's, or a lane without GPU events), else its GPU
    events and their busy time of the span drawn."""
    if ops or not work:
        return f"forward {forward}: {end:.0f} µs on the host"
    busy = sum(b["w"] for b in work)
    return f"forward {forward}: {len(work)} GPU events, {busy:.1f} µs busy of {end:.1f} µs"
