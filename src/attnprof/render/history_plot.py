"""The history page's plot: one small figure per variant, its time per build at each shape (the study shape first),
each point with its interval, and the variant's events marked between the builds they span."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

#: Event colours: slower red, faster green; a drift hatched.
EVENT_COLORS = {"slower": "#C44E52", "faster": "#55A868"}


def variant_plot(cells: list[dict], labels: list[str], ylabel: str, path: Path, dpi: int = 110) -> None:
    """One figure for one variant: per shape (``cells``: history.json's cells of the variant, study shape first) a
    panel of its time per build (the median of its repeats) with its interval as whiskers, and each event shaded
    over the builds it spans (red slower, green faster; a drift hatched, an excursion around its one build)."""
    fig, axes = plt.subplots(len(cells), 1, figsize=(4.4, 0.9 + 1.0 * len(cells)), sharex=True, squeeze=False)
    x = list(range(len(labels)))
    for ax, cell in zip(axes[:, 0], cells):
        _panel(ax, cell, x)
    axes[-1, 0].set_xticks(x, labels, rotation=20, fontsize=7)
    axes[len(cells) // 2, 0].set_ylabel(ylabel, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, metadata={"Software": None}, bbox_inches="tight", pad_inches=0.04)
    plt.close(fig)


def _panel(ax, cell: dict, x: list[int]) -> None:
    for e in cell["events"]:
        half = 0.5 if e["kind"] == "excursion" else 0.1  # an excursion around its one build
        ax.axvspan(e["start"] + half, e["end"] - half, color=EVENT_COLORS.get(e["direction"], "#999"), alpha=0.18,
                   hatch="//" if e["kind"] == "drift" else None, lw=0)
    pts = [(i, t["center"], t["lo"] or t["center"], t["hi"] or t["center"]) for i, t in zip(x, cell["times"])
           if t["center"] is not None]
    xs, ys, lo, hi = (list(v) for v in zip(*pts)) if pts else ([], [], [], [])
    ax.errorbar(xs, ys, yerr=[[y - v for y, v in zip(ys, lo)], [v - y for y, v in zip(ys, hi)]], fmt="o-", ms=3, lw=1,
                capsize=2, color="#4C72B0")
    ax.set_title(cell["shape_key"], fontsize=7, loc="left")
    ax.tick_params(labelsize=7)
    ax.margins(x=0.05, y=0.25)
