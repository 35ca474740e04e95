"""The between-sitting component of the noise model (attnprof.analysis.stats.SITTING_SD), and the A/A across sittings.

Two result sets of one build and one config on the H200, captured in different sittings (a sitting: one stretch of time
on one machine): the committed default sweep (examples/nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56) and a new
sweep of 2026-12-02 on another H200 of the pool (benchmarks/calibration/results/h200-sitting2: its tables, no traces;
made by examples/make-h200-example.sh, 322.7 s for the 63 x 3 captures, benchmarks/sweep_h200_2026-12-02.json).

Per (variant, shape), the difference of the two sides' mean log repeat medians has variance ``within + 2 s**2`` (within:
each side's variance over its repeats, s: a sitting's sd); the mean of ``d**2 - within`` over the rows estimates ``2 s**2``
(a method-of-moments variance component, e.g. Searle, Casella & McCulloch, Variance Components, 1992, ch. 3).
Then the A/A is judged by compare's exact rule. Writes benchmarks/sittings_h200.json.

    .venv/bin/python benchmarks/sittings.py
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from attnprof.analysis.compare import compare_runs
from attnprof.analysis.stats import SITTING_SD

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("calibrate", ROOT / "benchmarks" / "calibration" / "calibrate.py")
calibrate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibrate)
EXAMPLE = "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56"
SITTING2 = "h200-sitting2"


def sitting_sd(a: dict, b: dict) -> dict:
    """The method-of-moments estimate of a sitting's sd from two result sets' repeats.csv (device time per forward)."""
    logs = []
    for x in (a, b):
        r = x["repeats"]
        r = r[(r["status"] == "ok") & r["device_ms_per_forward"].notna() & (r["variant"] != "control")]
        logs.append(r.groupby(["variant", "shape_key"])["device_ms_per_forward"].apply(lambda s: np.log(s.to_numpy())))
    keys = sorted(set(logs[0].index) & set(logs[1].index))
    d = np.array([logs[1][k].mean() - logs[0][k].mean() for k in keys])
    within = np.array([logs[0][k].var(ddof=1) / len(logs[0][k]) + logs[1][k].var(ddof=1) / len(logs[1][k]) for k in keys])
    excess = float(np.mean(d ** 2 - within))
    return {"rows": len(keys), "mean_log_ratio": float(d.mean()), "rms_log_ratio": float(math.sqrt(np.mean(d ** 2))),
            "max_abs_log_ratio": float(abs(d).max()), "sitting_sd": math.sqrt(max(excess, 0.0) / 2)}


def judged(a: dict, b: dict) -> dict:
    """compare's verdicts on the pair, with how many 95 % intervals hold 1.0."""
    pair = compare_runs([a, b])["pairs"][0]
    rows = [r for r in pair["rows"] if r["ratio_lo"] is not None]
    return {"counts": pair["counts"], "joint": pair["joint"], "sitting_sd_applied": pair["sitting_sd"],
            "intervals_holding_1": sum(r["ratio_lo"] <= 1 <= r["ratio_hi"] for r in rows), "intervals": len(rows)}


def _example(name: str) -> dict:
    """The committed example's tables (calibrate.load prefers the older sweep of the same name in its RESULTS)."""
    d = calibrate.EXAMPLES / name
    return {"name": name + " (committed example)", "summary": pd.read_csv(d / "summary.csv"),
            "kernels": pd.read_csv(d / "kernels.csv"), "ops": None, "env": json.loads((d / "env.json").read_text()),
            "findings": json.loads((d / "findings.json").read_text()), "repeats": pd.read_csv(d / "repeats.csv")}


def main() -> dict:
    """Three pairs: two across sittings (the older calibration sweep and the committed example, each against the new
    sweep) and one of two sweeps minutes apart in one sitting (calibration's A/A)."""
    new, old, example = calibrate.load(SITTING2), calibrate.load(calibrate.SWEEP), _example(EXAMPLE)
    rerun = calibrate.load(calibrate.SWEEP + "-rerun")
    pairs = {"across_sittings_calibration_sweep": (old, new), "across_sittings_committed_example": (example, new),
             "minutes_apart": (old, rerun)}
    out = {k: {"a": a["name"], "b": b["name"], **sitting_sd(a, b), **judged(a, b)} for k, (a, b) in pairs.items()}
    out["SITTING_SD"] = SITTING_SD
    (ROOT / "benchmarks" / "sittings_h200.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
