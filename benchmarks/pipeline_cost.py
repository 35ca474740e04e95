"""What the pipeline itself costs: wall time of a run split into capture work and overhead,
a no-op rerun, and trace-parsing throughput.

Usage (from the repository root, in the project's environment):

    python benchmarks/pipeline_cost.py --run [--cores 2] [--configfile my.yaml]   # run from scratch, then analyse
    python benchmarks/pipeline_cost.py --analyse results/<run>                     # an existing result set

--run deletes results/<run> of the configured run first. The split comes from the capture
status records (each capture's parent-process span, and inside it the child's torch import,
the profiled steps and the rest); everything between the first and the last job that is not
a capture span is counted as "other stages and Snakemake". Parse throughput: load_trace +
analyse_trace on the largest trace of the result set, MB/s of uncompressed JSON, best of 3.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

from attnprof.analysis.tables import analyse_trace
from attnprof.analysis.trace import load_trace


def split(run_dir: Path) -> dict:
    """Capture time split from the status records of ``run_dir``."""
    recs = [json.loads(p.read_text()) for p in run_dir.glob("captures/*/*/status.json")]
    spans = sum(r["finished_at"] - r["started_at"] for r in recs if "finished_at" in r)
    child = sum(r.get("capture_wall_s", 0) for r in recs)
    imports = sum(r.get("torch_import_s", 0) for r in recs)
    profile = sum(r.get("profile_s", 0) for r in recs)
    return {"captures": len(recs), "capture_spans_s": spans, "child_s": child, "torch_import_s": imports,
            "profiled_steps_s": profile, "process_start_and_other_s": spans - child,
            "first_start": min((r["started_at"] for r in recs if "started_at" in r), default=None),
            "last_finish": max((r["finished_at"] for r in recs if "finished_at" in r), default=None)}


def parse_throughput(run_dir: Path, range_name: str = "attn_fwd") -> dict:
    traces = sorted(run_dir.glob("captures/*/*/trace.json.gz"), key=lambda p: p.stat().st_size)
    if not traces:
        return {"error": "no traces in this result set"}
    largest = traces[-1]
    mb = len(gzip.open(largest).read()) / 1e6
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        analyse_trace(load_trace(largest), range_name)
        best = min(best, time.perf_counter() - t0)
    return {"trace": str(largest), "uncompressed_mb": mb, "seconds": best, "mb_per_s": mb / best}


def snakemake(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "snakemake", *args], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="store_true", help="run `snakemake report` from scratch first")
    ap.add_argument("--analyse", type=Path, help="result set to analyse (default: the one --run made)")
    ap.add_argument("--cores", default="2")
    ap.add_argument("--configfile", nargs="*", default=[])
    args = ap.parse_args()
    cfg = ["--configfile", "config/config.yaml", *args.configfile] if args.configfile else []
    out = {}
    if args.run:
        dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "report", *cfg], capture_output=True, text=True).stdout
        run_dir = Path(next(line.split("results/")[1].split("/")[0] for line in dry.splitlines() if "results/" in line))
        run_dir = Path("results") / run_dir
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
        out["full_run_s"] = snakemake("--cores", args.cores, "report", *cfg)
        out["noop_rerun_s"] = snakemake("--cores", args.cores, "report", *cfg)
        args.analyse = run_dir
    if not args.analyse:
        ap.error("give --run or --analyse")
    out["split"] = split(args.analyse)
    if "full_run_s" in out:
        out["split"]["other_stages_and_snakemake_s"] = out["full_run_s"] - out["split"]["capture_spans_s"]
    out["parse"] = parse_throughput(args.analyse)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
