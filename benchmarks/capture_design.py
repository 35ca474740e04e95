"""The capture worker against the per-process design, side by side on one machine.

For each shape config (benchmarks/configs/<name>.yaml) and each design (``capture_mode``
``process``: a fresh Python process per capture; ``worker``: one warm capture process,
attnprof.runtime.worker), runs ``snakemake --cores N <target>`` from scratch into its own result set
``results/design_<name>_<mode>`` and records the wall time; the designs alternate per config so
that both see the same machine state. Then compares the numbers of the two designs per
(shape, variant): kernel, memcpy and memset counts per forward must be identical, and each
design's median device time per forward must lie inside the other's min-max spread of
per-forward times (the trace's own spread).

Usage (from the repository root, in the project's environment; on a GPU for the GPU rows):

    python benchmarks/capture_design.py --configs study large --cores 1 --out benchmarks/capture_design_h200.json
    python benchmarks/capture_design.py --configs study --cores 2 --target report --out benchmarks/capture_design_cpu.json

Prints one progress line per run; exits 1 when a count differs or a device time lies outside
the other design's spread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
MODES = ("process", "worker")
COUNTS = ("kernels_per_forward", "memcpy_per_forward", "memset_per_forward")


def run_snakemake(config: str, mode: str, cores: int, target: str, rep: int = 0, variants: list[str] | None = None) -> dict:
    """One from-scratch run of ``target`` for shape config ``config`` in design ``mode``
    (repetition ``rep``: result set ``design_<config>_<mode>[_<rep>]``), optionally of
    ``variants`` only."""
    run = f"design_{config}_{mode}" + (f"_{rep}" if rep else "")
    shutil.rmtree(ROOT / "results" / run, ignore_errors=True)
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores), target,
           "--configfile", str(ROOT / "benchmarks" / "configs" / f"{config}.yaml"),
           "--config", f"run={run}", f"capture_mode={mode}"] + (
               [f"variants=[{','.join(variants)}]"] if variants else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (ROOT / "results" / run).mkdir(parents=True, exist_ok=True)
    (ROOT / "results" / run / "snakemake.log").write_text(proc.stdout + proc.stderr)
    print(f"[capture_design] {config} {mode}: {wall:.1f} s (exit {proc.returncode})", file=sys.stderr, flush=True)
    if proc.returncode:
        print((proc.stdout + proc.stderr)[-3000:], file=sys.stderr, flush=True)
    statuses = [json.loads(p.read_text()) for p in (ROOT / "results" / run).glob("captures/*/*/status.json")]
    return {"config": config, "mode": mode, "rep": rep, "run": run, "target": target, "cores": cores, "wall_s": round(wall, 2),
            "exit": proc.returncode, "captures": len(statuses),
            "capture_spans_s": round(sum(s["finished_at"] - s["started_at"] for s in statuses if "finished_at" in s), 2)}


def compare(config: str) -> list[dict]:
    """Per (shape, variant): the two designs' counts and device times, and whether they agree."""
    frames = {m: pd.read_csv(ROOT / "results" / f"design_{config}_{m}" / "summary.csv") for m in MODES}
    both = frames["process"].merge(frames["worker"], on=["shape_key", "variant"], suffixes=("_process", "_worker"))
    rows = []
    for r in both.to_dict("records"):
        row = {"shape_key": r["shape_key"], "variant": r["variant"],
               "status": [r["status_process"], r["status_worker"]]}
        row["counts_identical"] = all(
            (pd.isna(r[f"{c}_process"]) and pd.isna(r[f"{c}_worker"])) or r[f"{c}_process"] == r[f"{c}_worker"]
            for c in COUNTS) and r["status_process"] == r["status_worker"]
        row.update({f"{c}_{m}": (None if pd.isna(r[f"{c}_{m}"]) else int(r[f"{c}_{m}"])) for c in COUNTS for m in MODES})
        for m in MODES:
            for k in ("device_ms_per_forward", "device_ms_min", "device_ms_max", "device_ms_q1", "device_ms_q3",
                      "timed_ms_median", "graph_ms_median"):
                v = r.get(f"{k}_{m}")
                row[f"{k}_{m}"] = None if v is None or pd.isna(v) else round(float(v), 5)
        if row["device_ms_per_forward_process"] is not None and row["device_ms_per_forward_worker"] is not None:
            p, w = row["device_ms_per_forward_process"], row["device_ms_per_forward_worker"]
            row["worker_over_process"] = round(w / p, 4)
            row["worker_median_in_process_spread"] = row["device_ms_min_process"] <= w <= row["device_ms_max_process"]
            row["process_median_in_worker_spread"] = row["device_ms_min_worker"] <= p <= row["device_ms_max_worker"]
            row["spreads_overlap"] = (row["device_ms_min_worker"] <= row["device_ms_max_process"]
                                      and row["device_ms_min_process"] <= row["device_ms_max_worker"])
        rows.append(row)
    return rows


def between_runs(config: str, reps: int) -> list[dict]:
    """Per (shape, variant): the median device time per forward of every run of each design,
    and the largest relative difference between two runs of the same design and between the
    two designs (is a design difference larger than a rerun's?)."""
    medians: dict[tuple, dict[str, list[float]]] = {}
    for mode in MODES:
        for rep in range(reps):
            run = f"design_{config}_{mode}" + (f"_{rep}" if rep else "")
            for r in pd.read_csv(ROOT / "results" / run / "summary.csv").to_dict("records"):
                if not pd.isna(r.get("device_ms_per_forward")):
                    medians.setdefault((r["shape_key"], r["variant"]), {}).setdefault(mode, []).append(
                        float(r["device_ms_per_forward"]))
    rows = []
    for (shape, variant), by in medians.items():
        def rel(a, b):
            return abs(a - b) / min(a, b)
        within = max((rel(a, b) for m in MODES for i, a in enumerate(by.get(m, [])) for b in by[m][i + 1:]), default=None)
        across = max((rel(a, b) for a in by.get("process", []) for b in by.get("worker", [])), default=None)
        rows.append({"shape_key": shape, "variant": variant, "device_ms": by,
                     "max_rel_diff_same_design": within, "max_rel_diff_across_designs": across})
    return rows


def machine() -> dict:
    out = {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count()}
    try:
        out["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out["gpu"] = None
    try:
        import torch

        out["torch"] = torch.__version__
    except ImportError:
        pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=["study", "large"])
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--target", default="html")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                    help="designs to run; the numbers are compared only when both run")
    ap.add_argument("--repeat", type=int, default=1, help="runs per design, alternating (ABAB...)")
    ap.add_argument("--variants", nargs="+", help="only these variants (default: the config's)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    runs, comparisons = [], {}
    for config in args.configs:
        for rep in range(args.repeat):
            for mode in args.modes:
                runs.append(run_snakemake(config, mode, args.cores, args.target, rep, args.variants))
        if len(args.modes) == len(MODES):
            comparisons[config] = compare(config)
            if args.repeat > 1:
                comparisons[f"{config}_between_runs"] = between_runs(config, args.repeat)
        result = summarise(runs, comparisons)
        args.out.write_text(json.dumps(result, indent=1) + "\n")  # after each config: a cut-short run keeps what it measured
    print(json.dumps({k: result[k] for k in ("runs", "process_over_worker_wall", "numbers_agree")}, indent=1))
    return 0 if result["numbers_agree"] else 1


def summarise(runs: list[dict], comparisons: dict) -> dict:
    configs = list(comparisons)  # those run in both designs
    speedups = {c: round(next(r["wall_s"] for r in runs if r["config"] == c and r["mode"] == "process")
                         / next(r["wall_s"] for r in runs if r["config"] == c and r["mode"] == "worker"), 2)
                for c in configs if not c.endswith("_between_runs")}
    agree = all(r["counts_identical"] and r.get("worker_median_in_process_spread", True)
                and r.get("process_median_in_worker_spread", True)
                for c, rows in comparisons.items() if not c.endswith("_between_runs") for r in rows)
    return {"machine": machine(), "runs": runs, "process_over_worker_wall": speedups, "numbers_agree": agree,
            "comparison": comparisons}


if __name__ == "__main__":
    sys.exit(main())
