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
