"""The verdict rule's figures on real H200 noise (issue 39): attnprof.analysis.verdict's exact rule, run end to end
by attnprof.analysis.verdict_sim (look 1, joint control, top-up's rounds, look 2) with the default A/B config (3
base rounds, top-up on with up to 3 rounds, X = 2 %), on simulated compares whose noise is resampled from every
committed H200 round of the default grid.

Noise: per cell (variant, shape), the residuals of its log repeat medians around their sitting's mean, from every
committed H200 sitting of torch 2.11.0+cu130 that has the cell (the sweep example, the calibration sweep and its
rerun, sitting 2, both environments of the interleaved A/A, both of the sleep A/B and the calibration A/B), each
scaled by sqrt(n/(n-1)). A paired round's log ratio is the difference of two independent draws from the cell's
residuals: this keeps each cell's own shape (two process modes included) and overstates the paired noise a little
(the drift between rounds, which pairing cancels, stays in).

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
SITTINGS = ["examples/nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56", "examples/nvidia-h200@base",
            "examples/nvidia-h200@sleep"] + [f"benchmarks/calibration/results/{d}" for d in (
                "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56", "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56-rerun",
                "h200-sitting2", "h200-aa-a", "h200-aa-b", "calib-a", "calib-b")]
COL = "device_ms_per_forward"
FUSED = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto")
THRESHOLD, BASE, TOP_UP, SIMS, SIMS_LONE = 0.02, 3, 3, 2000, 300


def residual_pools() -> tuple[list[tuple[str, str]], list[np.ndarray], np.ndarray]:
    """The cells of the sweep example, each cell's pooled residuals and mean log time."""
    pools: dict[tuple[str, str], list[float]] = {}
    times: dict[tuple[str, str], list[float]] = {}
    for sitting in SITTINGS:
        r = pd.read_csv(ROOT / sitting / "repeats.csv")
        r = r[(r["status"] == "ok") & r[COL].notna() & ~r["variant"].str.startswith("sleep")]
        for key, g in r.groupby(["variant", "shape_key"]):
            logs = np.log(g[COL].to_numpy(float))
            if len(logs) > 1:
                pools.setdefault(key, []).extend((logs - logs.mean()) * math.sqrt(len(logs) / (len(logs) - 1)))
                times.setdefault(key, []).append(float(logs.mean()))
    ref = pd.read_csv(ROOT / SITTINGS[0] / "repeats.csv")
    cells = sorted({k for k in zip(ref["variant"], ref["shape_key"]) if k in pools})
    return cells, [np.asarray(pools[k]) for k in cells], np.array([np.mean(times[k]) for k in cells])


def draws(cells, pools, x, rng, sims: int = SIMS) -> Draws:
    """Paired rounds of every cell: the difference of two independent draws of its residuals."""
    width = BASE + TOP_UP
    a = np.stack([rng.choice(p, (sims, width)) - rng.choice(p, (sims, width)) for p in pools], axis=1)
    return Draws(a, None, np.full(len(cells), BASE), [(v, COL) for v, _ in cells], True)


def rates(out: dict) -> dict:
    code = out["code"]
    return {"slower": (code == SLOWER).mean(0), "faster": (code == FASTER).mean(0), "same": (code == SAME).mean(0)}


def main() -> dict:
    rng = np.random.default_rng(39)
    cells, pools, x = residual_pools()
    d = draws(cells, pools, x, rng)
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
                "rounds, top-up on (up to 3 rounds), X = 2 %; paired noise resampled from every committed H200 round "
                f"of the default grid ({len(cells)} cells, {sum(len(p) for p in pools)} residuals); {SIMS} compares for the A/A "
                f"and at X, {SIMS_LONE} per lone or whole-variant change",
        "cells": [f"{v}/{s}" for v, s in cells], "residuals_per_cell": [len(p) for p in pools],
        "aa": {"false_changed_rows_per_compare": float(changed.sum(1).mean()),
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
