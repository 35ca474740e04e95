"""The verdict rule's figures on real H200 noise (issue 39): attnprof.analysis.verdict's exact rule, run end to end
by attnprof.analysis.verdict_sim (look 1, joint control, top-up's rounds, look 2) with the default A/B config (3
base rounds, top-up on with up to 3 rounds, X = 2 %), on simulated compares whose noise is resampled from every
committed H200 round of the default grid.

Noise: per cell (variant, shape), the paired rounds of every committed H200 A/B run of torch 2.11.0+cu130 in which
the cell's variant was left alone (the two interleaved A/As, the built-in variants of the sleep A/B, of the
calibration A/B and of issue 39's A/B of changes): each pair's per-round log ratios minus their mean, scaled by
sqrt(n/(n-1)), pooled over the runs; the cell's sd is their root mean square. A simulated paired round is a draw
from all cells' residuals divided by their cell's sd, times the cell's sd: each cell keeps its scale, and the
rounds' shape (heavy tails, two modes) comes from all 407 residuals instead of a cell's 4-18, whose repeated values
would draw too small a spread (attnprof.analysis.verdict_sim resamples a compare's own rows the same way). These are the paired rounds
themselves: the earlier design drew a paired round as the difference of two unpaired repeat medians of different
sittings, which overstated the paired spread 5-16x (the variance of the real paired rounds over twice a cell's
within-sitting variance: geometric means 0.03-0.11 in the four paired runs), and the figures with it.

Writes benchmarks/verdict_rule.json; docs/statistics.md quotes it. Run: .venv/bin/python benchmarks/verdict_rule.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attnprof.analysis.verdict import FASTER, SAME, SLOWER, Design
from attnprof.analysis.verdict_sim import Draws, run

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "benchmarks/calibration/results"
#: The committed H200 A/B runs (baseline, other) whose built-in variants were left alone between environments.
PAIRS = [("examples/nvidia-h200@base", "examples/nvidia-h200@sleep")] + [
    (f"{RESULTS}/{a}", f"{RESULTS}/{b}") for a, b in (("h200-aa-a", "h200-aa-b"), ("h200-aa2-a", "h200-aa2-b"),
                                                      ("calib-a", "calib-b"), ("h200-ab-changes-base", "h200-ab-changes-changed"))]
BUILT_INS = ("naive", "naive_inplace", "sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto")
COL = "device_ms_per_forward"
FUSED = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto")
THRESHOLD, BASE, TOP_UP, SIMS, SIMS_LONE = 0.02, 3, 3, 2000, 300


def paired_residuals(a: pd.DataFrame, b: pd.DataFrame) -> dict[tuple[str, str], np.ndarray]:
    """{(variant, shape_key): the residuals of its per-round log ratios} of one A/B run's two repeats.csv frames,
    for the built-in variants, rounds with a time on both sides."""
    ok = [x[(x["status"] == "ok") & x[COL].notna() & x["variant"].isin(BUILT_INS)] for x in (a, b)]
    m = ok[0].merge(ok[1], on=["variant", "shape_key", "repeat"], suffixes=("_a", "_b"))
    out = {}
    for key, g in m.groupby(["variant", "shape_key"]):
        d = np.log(g[f"{COL}_b"].to_numpy(float) / g[f"{COL}_a"].to_numpy(float))
        if len(d) > 1:
            out[key] = (d - d.mean()) * math.sqrt(len(d) / (len(d) - 1))
    return out


def residual_pools() -> tuple[list[tuple[str, str]], list[np.ndarray]]:
    """The cells with paired rounds in any of :data:`PAIRS`, each cell's pooled paired residuals."""
    pools: dict[tuple[str, str], list[float]] = {}
    for a, b in PAIRS:
        for key, res in paired_residuals(pd.read_csv(ROOT / a / "repeats.csv"), pd.read_csv(ROOT / b / "repeats.csv")).items():
            pools.setdefault(key, []).extend(res)
    cells = sorted(pools)
    return cells, [np.asarray(pools[k]) for k in cells]


def draws(cells, pools, rng, sims: int | None = None) -> Draws:
    """Paired rounds of every cell: a draw of all cells' residuals, each divided by its cell's sd (pooled), times
    the cell's sd (a cell's own 4-18 residuals alone would repeat values and draw too small a spread)."""
    width, sims = BASE + TOP_UP, sims or SIMS
    sd = np.array([p.std(ddof=0) for p in pools])
    pool = np.concatenate([p / s for p, s in zip(pools, sd) if s > 0])
    a = rng.choice(pool, (sims, len(pools), width)) * sd[None, :, None]
    return Draws(a, None, np.full(len(cells), BASE), [(v, COL) for v, _ in cells], True)


def rates(out: dict) -> dict:
    code = out["code"]
    return {"slower": (code == SLOWER).mean(0), "faster": (code == FASTER).mean(0), "same": (code == SAME).mean(0)}


def main() -> dict:
    rng = np.random.default_rng(39)
    cells, pools = residual_pools()
    d = draws(cells, pools, rng)
    few = Draws(d.a[:SIMS_LONE], None, d.base, d.groups, True)  # the lone and whole-variant changes: fewer compares
    design, r = Design(BASE, 2), len(cells)
    theta = math.log1p(THRESHOLD)
    aa = run(d, np.zeros(r), THRESHOLD, design, TOP_UP, rng=rng)
    changed = (aa["code"] == SLOWER) | (aa["code"] == FASTER)
    cover = aa["held"].mean(0)
    at_x = rates(run(d, np.full(r, theta), THRESHOLD, design, TOP_UP, rng=rng))
    fused = [i for i, (v, _) in enumerate(cells) if v in FUSED]

    def lone(change: float, rows: list[int]) -> dict:
        found = {}
        for j in rows:
            c = np.zeros(r)
            c[j] = math.log1p(change)
            found[j] = float((run(few, c, THRESHOLD, design, TOP_UP, rng=rng)["code"][:, j] == SLOWER).mean())
        return found

    def whole(change: float) -> dict:
        found = {}
        for v in sorted({v for v, _ in cells}):
            c = np.array([math.log1p(change) if cv == v else 0.0 for cv, _ in cells])
            code = run(few, c, THRESHOLD, design, TOP_UP, rng=rng)["code"]
            found[v] = float((code[:, [i for i, (cv, _) in enumerate(cells) if cv == v]] == SLOWER).mean())
        return found

    lone4, lone10 = lone(0.04, fused), lone(0.10, list(range(r)))
    out = {
        "what": "the verdict rule (attnprof.analysis.verdict) simulated end to end with the default A/B config: 3 base "
                "rounds, top-up on (up to 3 rounds), X = 2 %; paired noise resampled from every committed H200 paired "
                f"A/B round of the built-in variants ({len(cells)} cells, {sum(len(p) for p in pools)} paired residuals); {SIMS} compares for the A/A "
                f"and at X, {SIMS_LONE} per lone or whole-variant change",
        "cells": [f"{v}/{s}" for v, s in cells], "residuals_per_cell": [len(p) for p in pools],
        "aa": {"false_changed_rows_per_compare": float(changed.sum(1).mean()),
               "false_changed_per_row": float(changed.mean()),
               "false_changed_by_cell": {f"{v}/{s}": float(c) for (v, s), c in zip(cells, changed.mean(0)) if c > 0.002},
               "compares_with_a_false_changed_row": float(changed.any(1).mean()),
               "same_within_x": float((aa["code"] == SAME).mean()),
               "same_within_x_fused": float((aa["code"][:, fused] == SAME).mean()),
               "rounds_added_per_row": float(aa["added"].mean()),
               "coverage_97_5": {"min": float(cover.min()), "median": float(np.median(cover)),
                                 "cells_at_least_94_5": float((cover >= 0.945).mean()),
                                 "below_94_5": [f"{v}/{s}: {c:.3f}" for (v, s), c in zip(cells, cover) if c < 0.945]}},
        "at_exactly_x": {"false_more_than_x_per_row_max": float(at_x["slower"].max()),
                         "false_more_than_x_per_row_mean": float(at_x["slower"].mean()),
                         "false_same_per_row_max": float(at_x["same"].max()),
                         "false_same_per_row_mean": float(at_x["same"].mean())},
        "lone_change": {"found_at_4pct_fused_mean": float(np.mean(list(lone4.values()))),
                        "found_at_4pct_fused_min": float(min(lone4.values())),
                        "found_at_4pct_fused_below_90": [f"{cells[j][0]}/{cells[j][1]}: {f:.2f}" for j, f in lone4.items() if f < 0.9],
                        "found_at_10pct_min": float(min(lone10.values())),
                        "found_at_10pct_below_90": [f"{cells[j][0]}/{cells[j][1]}: {f:.2f}" for j, f in lone10.items() if f < 0.9]},
        "whole_variant": {"found_at_4pct": whole(0.04), "found_at_10pct": whole(0.10)},
    }
    return out


if __name__ == "__main__":
    result = main()
    text = json.dumps(result, indent=1)
    (ROOT / "benchmarks" / "verdict_rule.json").write_text(text + "\n")
    json.dump({k: v for k, v in result.items() if k not in ("cells", "residuals_per_cell")}, sys.stdout, indent=1)
