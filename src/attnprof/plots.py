"""matplotlib figures of one shape's results. Each function takes the run's tables
(pandas frames as written to summary.csv / kernels.csv, filtered to one shape) and
writes a PNG; variants that did not run are drawn as labelled gaps, not dropped."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

PLOTS = ("device_time", "kernels_per_forward", "kernel_split", "cpu_vs_device")
COLORS = {"kernel": "#4C72B0", "memcpy": "#DD8452", "memset": "#8C8C8C", "cpu": "#55A868", "device": "#4C72B0"}


def _save(fig, path: Path, dpi: int) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
    plt.close(fig)


def _gap_labels(ax, summary: pd.DataFrame, y) -> None:
    """Write the status of variants that did not run at their (empty) bar."""
    for yi, (_, row) in zip(y, summary.iterrows()):
        if row["status"] != "ok":
            ax.text(0, yi, f"  {row['status']}", va="center", fontsize=8, color="#B00020")


def device_time(summary: pd.DataFrame, path: Path, dpi: int = 144) -> None:
    """Median device time per forward (ms) per variant, with the min-max range over the
    profiled forwards. On a CPU run (no device events) draws CPU time per forward instead
    and says so in the title."""
    on_device = summary["device_ms_per_forward"].notna().any()
    col, lo, hi = ("device_ms_per_forward", "device_ms_min", "device_ms_max") if on_device else ("cpu_ms_per_forward", None, None)
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(summary) + 1.2))
    y = np.arange(len(summary))
    vals = summary[col].fillna(0).to_numpy(float)
    xerr = None
    if lo:
        xerr = np.vstack([vals - summary[lo].fillna(0).to_numpy(float), summary[hi].fillna(0).to_numpy(float) - vals])
    ax.barh(y, vals, xerr=xerr, color=COLORS["device" if on_device else "cpu"], capsize=3)
    for yi, v in zip(y, vals):
        if v > 0:
            ax.text(v, yi, f" {v:.3g}", va="center", fontsize=8)
    _gap_labels(ax, summary, y)
    ax.set_yticks(y, summary["variant"])
    ax.invert_yaxis()
    ax.set_xlabel("ms per forward (median over profiled forwards; bar: min-max)")
    ax.set_title("Device time per forward (sum of kernel, memcpy, memset durations)" if on_device else "CPU run: host time per forward (no device events)")
    ax.set_xlim(0, max(vals.max(), 1e-9) * 1.25)
    _save(fig, path, dpi)


def kernels_per_forward(summary: pd.DataFrame, path: Path, dpi: int = 144) -> None:
    """Stacked bars: kernels, memcpys and memsets launched per forward (median)."""
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(summary) + 1.2))
    y = np.arange(len(summary))
    left = np.zeros(len(summary))
    for cat, col in (("kernel", "kernels_per_forward"), ("memcpy", "memcpy_per_forward"), ("memset", "memset_per_forward")):
        vals = summary[col].fillna(0).to_numpy(float)
        ax.barh(y, vals, left=left, color=COLORS[cat], label=cat)
        left += vals
    for yi, total in zip(y, left):
        if total > 0:
            ax.text(total, yi, f" {total:g}", va="center", fontsize=8)
    _gap_labels(ax, summary, y)
    ax.set_yticks(y, summary["variant"])
    ax.invert_yaxis()
    ax.set_xlabel("GPU events per forward (median over profiled forwards)")
    ax.set_title("Kernels, memcpys and memsets per forward")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0, max(left.max(), 1) * 1.15)
    _save(fig, path, dpi)


def kernel_split(summary: pd.DataFrame, kernels: pd.DataFrame, path: Path, top: int = 6, dpi: int = 144) -> None:
    """Each variant's device time per forward split by kernel, as % of that variant's own
    device time (the total in µs is written at the bar's end). The ``top`` kernels with the
    largest share in any variant get their own colour, the rest are 'other'."""
    k = kernels[kernels["variant"].isin(summary["variant"])].copy() if len(kernels) else kernels
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(summary) + 2.4))
    y = np.arange(len(summary))
    if k.empty:
        ax.text(0.5, 0.5, "no device events in this run", ha="center", va="center", transform=ax.transAxes)
    else:
        n_fwd = summary.set_index("variant")["forwards_profiled"]
        k["us_per_forward"] = k["total_us"] / k["variant"].map(n_fwd)
        leaders = k.groupby("label")["share_pct"].max().nlargest(top).index.tolist()
        k["part"] = k["label"].where(k["label"].isin(leaders), "other")
        table = k.pivot_table(index="variant", columns="part", values="share_pct", aggfunc="sum", fill_value=0.0)
        table = table.reindex(summary["variant"]).fillna(0.0)
        totals = k.groupby("variant")["us_per_forward"].sum().reindex(summary["variant"])
        cmap = plt.get_cmap("tab10")
        left = np.zeros(len(summary))
        for i, part in enumerate(leaders + (["other"] if "other" in table else [])):
            vals = table[part].to_numpy(float)
            ax.barh(y, vals, left=left, color="#C7C7C7" if part == "other" else cmap(i % 10), label=part[:70])
            left += vals
        for yi, total in zip(y, totals):
            if total == total and total > 0:
                ax.text(101, yi, f"{total:.4g} µs", va="center", fontsize=8)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7, ncol=2, frameon=False)
    _gap_labels(ax, summary, y)
    ax.set_xlim(0, 118)
    ax.set_yticks(y, summary["variant"])
    ax.invert_yaxis()
    ax.set_xlabel("% of the variant's device time per forward (total at right)")
    ax.set_title("Device time per forward, split by kernel")
    _save(fig, path, dpi)


def cpu_vs_device(summary: pd.DataFrame, path: Path, dpi: int = 144) -> None:
    """Grouped bars per variant: host (CPU) time and device time per forward, ms, log
    scale. A variant whose CPU bar is longer is launch-bound at this shape."""
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(summary) + 1.2))
    y = np.arange(len(summary))
    h = 0.38
    cpu = summary["cpu_ms_per_forward"].to_numpy(float)
    dev = summary["device_ms_per_forward"].to_numpy(float)
    ax.barh(y - h / 2, np.nan_to_num(cpu), height=h, color=COLORS["cpu"], label="CPU (host) time of the forward range")
    ax.barh(y + h / 2, np.nan_to_num(dev), height=h, color=COLORS["device"], label="device time (kernels + memcpy + memset)")
    _gap_labels(ax, summary, y)
    ax.set_yticks(y, summary["variant"])
    ax.invert_yaxis()
    positive = np.concatenate([cpu[cpu > 0], dev[dev > 0]]) if np.isfinite(np.concatenate([cpu, dev])).any() else np.array([])
    positive = positive[np.isfinite(positive)]
    if positive.size:
        ax.set_xscale("log")
        ax.set_xlim(positive.min() / 2, positive.max() * 2)
    ax.set_xlabel("ms per forward (median, log scale)")
    ax.set_title("CPU time vs device time per forward")
    ax.legend(loc="lower right", fontsize=7)
    _save(fig, path, dpi)


def make_all(summary: pd.DataFrame, kernels: pd.DataFrame, out_dir: Path, top: int, dpi: int) -> list[Path]:
    """Write every plot of PLOTS for one shape into ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device_time(summary, out_dir / "device_time.png", dpi)
    kernels_per_forward(summary, out_dir / "kernels_per_forward.png", dpi)
    kernel_split(summary, kernels, out_dir / "kernel_split.png", top, dpi)
    cpu_vs_device(summary, out_dir / "cpu_vs_device.png", dpi)
    return [out_dir / f"{name}.png" for name in PLOTS]


SCALING = {"device_ms_per_forward": ("device ms per forward (trace, median)", "scaling_time"),
           "tflops": ("TFLOP/s (trace device time)", "scaling_tflops"),
           "peak_memory_mb": ("peak device memory, MiB", "scaling_memory")}
SCALING_PLOTS = tuple(name for _, name in SCALING.values()) + ("roofline",)


def _panels(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One panel per combination of the shape fields other than seq_len."""
    keys = ["head_dim", "batch", "heads", "dtype", "causal"]
    out = []
    for vals, part in summary.groupby(keys, sort=True):
        label = ", ".join(f"{k} {v}" for k, v in zip(keys, vals) if summary[k].nunique() > 1 or k == "head_dim")
        out.append((label, part))
    return out


def scaling(summary: pd.DataFrame, column: str, path: Path, dpi: int = 144) -> None:
    """``column`` against seq_len (log-log), a line per variant, a panel per head_dim (and any
    other swept field). Points that ran out of memory are drawn as 'x' on the panel's top edge."""
    panels = _panels(summary)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    cmap = plt.get_cmap("tab10")
    variants = list(dict.fromkeys(summary["variant"]))
    for ax, (label, part) in zip(axes[0], panels):
        top = part[column].max() if part[column].notna().any() else 1.0
        for i, v in enumerate(variants):
            pv = part[part["variant"] == v].sort_values("seq_len")
            ok = pv[pv[column].notna() & (pv["status"] == "ok")]
            if len(ok):
                ax.plot(ok["seq_len"], ok[column], marker="o", ms=3, color=cmap(i % 10), label=v)
            oom = pv[pv["status"] == "out_of_memory"]
            if len(oom):
                ax.scatter(oom["seq_len"], [top * 1.6] * len(oom), marker="x", s=40, color=cmap(i % 10), clip_on=False)
        oom_all = part[part["status"] == "out_of_memory"]
        for seq_len, names in oom_all.groupby("seq_len")["variant"]:
            ax.annotate("OOM:\n" + "\n".join(names), (seq_len, top * 1.6), xytext=(-4, -6), textcoords="offset points",
                        ha="right", va="top", fontsize=6, color="#B00020")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("seq_len")
        ax.set_title(label, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel(SCALING[column][0])
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"{SCALING[column][0]} vs seq_len (x: out of memory)", fontsize=10)
    _save(fig, path, dpi)


def roofline(summary: pd.DataFrame, calibration: dict, path: Path, dpi: int = 144) -> None:
    """Achieved TFLOP/s (trace device time) against arithmetic intensity (FLOP per byte of
    the minimum traffic: q, k, v read and the output written once), under the measured
    ceilings (GEMM TFLOP/s and copy bandwidth, solid) and the datasheet ones (dashed)."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ok = summary[(summary["status"] == "ok") & summary["tflops"].notna()] if "tflops" in summary else summary.iloc[0:0]
    cmap = plt.get_cmap("tab10")
    xs = np.logspace(0, 4, 200)
    drew = False
    for key, bw_key, style, name in (("gemm_tflops_bf16", "copy_tb_per_s", "-", "measured"),
                                     ("datasheet_tflops_bf16", "datasheet_tb_per_s", "--", "datasheet")):
        if calibration.get(key) and calibration.get(bw_key):
            ax.plot(xs, np.minimum(calibration[key], calibration[bw_key] * xs), style, color="#444",
                    label=f"{name}: {calibration[key]:.0f} TFLOP/s, {calibration[bw_key]:.2f} TB/s")
            drew = True
    for i, v in enumerate(dict.fromkeys(ok["variant"])):
        pv = ok[ok["variant"] == v]
        ax.scatter(pv["flop_per_byte"], pv["tflops"], s=12 + 30 * np.log2(pv["seq_len"] / pv["seq_len"].min() + 1),
                   color=cmap(i % 10), label=v, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity, FLOP per byte (minimum traffic: q, k, v read, out written)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("Roofline (marker size grows with seq_len)" + ("" if drew else ": no calibration on this device"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, path, dpi)


def make_scaling(summary: pd.DataFrame, calibration: dict, out_dir: Path, dpi: int) -> list[Path]:
    """Write the run-wide scaling plots and the roofline into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for column, (_, name) in SCALING.items():
        scaling(summary, column, out_dir / f"{name}.png", dpi)
    roofline(summary, calibration, out_dir / "roofline.png", dpi)
    return [out_dir / f"{name}.png" for name in SCALING_PLOTS]
