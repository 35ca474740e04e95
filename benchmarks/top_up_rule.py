"""The sequential rule of a paired A/B run (attnprof.analysis.top_up), simulated as compare runs it: per noise
level (sd of the paired per-round log ratio), the share of A/A rows "the same within 2 %", false "changed" rows per
compare, the power at a 4 % change (2X) and the rounds added, for one look on 3 rounds (top-up off) and for the
sequential rule (3 base rounds, up to 3 more). Writes benchmarks/top_up_rule.json; docs/statistics.md quotes it.

    .venv/bin/python benchmarks/top_up_rule.py [trials]
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attnprof.analysis.stats import joint_control
from attnprof.analysis.top_up import Design, paired_verdicts, plan_top_up

COL = "device_ms_per_forward"


def _frames(a, b, rounds):
    def frame(x):
        return pd.DataFrame([{"variant": "v", "shape_key": f"s{k}", "status": "ok", "repeat": r + 1, COL: x[k, r]}
                             for k in range(x.shape[0]) for r in range(rounds[k])])
    return frame(a), frame(b)


def one_compare(rng, cells, sd, change, top_up):
    drift = rng.normal(0, 0.02, (cells, 6))
    e = rng.normal(0, sd / math.sqrt(2), (2, cells, 6))
    a, b = np.exp(drift + e[0]), np.exp(drift + e[1]) * np.array([change.get(k, 1.0) for k in range(cells)])[:, None]
    keys = [("v", f"s{k}") for k in range(cells)]
    design = Design(3, 2) if top_up else Design(None, 1)
    first = paired_verdicts(*_frames(a, b, [3] * cells), keys, COL, 0.02, 0.95, design)
    rounds = [3] * cells
    if top_up:
        for r in plan_top_up(first, 3, 3, math.inf, {})["rows"]:
            rounds[int(r["shape_key"][1:])] = r["rounds"]
    final = paired_verdicts(*_frames(a, b, rounds), keys, COL, 0.02, 0.95, design)
    rows = [dict(v) for v in final.values()]
    joint_control(rows)
    return rows, sum(rounds) - 3 * cells


def main(trials: int = 300) -> dict:
    rng = np.random.default_rng(2026)
    out = []
    for sd in (0.005, 0.01, 0.02):
        for top_up in (False, True):
            aa = [one_compare(rng, 9, sd, {}, top_up) for _ in range(trials)]
            ab = [one_compare(rng, 9, sd, {0: 1.04}, top_up) for _ in range(trials)]
            out.append({"sd": sd, "top_up": top_up,
                        "aa_same": np.mean([r["verdict"] == "same" for rows, _ in aa for r in rows]),
                        "aa_changed_per_compare": np.mean([sum(r["verdict"] in ("slower", "faster") for r in rows) for rows, _ in aa]),
                        "aa_rounds_added_per_row": np.mean([n for _, n in aa]) / 9,
                        "power_4pct": np.mean([rows[0]["verdict"] == "slower" for rows, _ in ab])})
            print(out[-1], flush=True)
    Path(__file__).with_suffix(".json").write_text(json.dumps({"trials": trials, "cells": 9, "rows": out}, indent=1, default=float) + "\n")
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
