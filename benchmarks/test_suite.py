"""Wall time of the test suite's two tiers, as the README runs them, on this machine.

The README runs ``python -m pytest`` (the quick tier: pyproject's addopts deselect ``-m slow``) and then
``python -m pytest -m slow`` (Snakemake runs, capture processes, kills, compiles, whole-report PDFs).

Usage (from the repository root, in the project's environment):

    python benchmarks/test_suite.py --runs 2 --out benchmarks/test_suite.json

Records, per tier and run: the wall time, the CPU seconds of pytest and every process it waited for
(``os.wait4``'s rusage; detached capture workers are not counted), the exit status and pytest's last line,
the number of tests the tier selects, and the machine (CPU model, logical cores, 1-minute load average
before each run: a busy machine makes a slow suite).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: tier -> the extra pytest arguments the README gives it
TIERS = {"quick": [], "slow": ["-m", "slow"]}


def selected(extra: list[str]) -> int | None:
    """How many tests a tier runs (pytest's collection, in one process)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                          *extra], cwd=ROOT, capture_output=True, text=True).stdout
    n = re.search(r"(\d+)(?:/\d+)? tests? collected", out)
    return int(n.group(1)) if n else None


def timed_run(extra: list[str]) -> dict:
    """One run of a tier: wall time, CPU seconds of the process tree it waited for, exit status, last line."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    lines = [line for line in out.strip().splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    return {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "exit": os.waitstatus_to_exitcode(status), "load_avg_1m_before": round(load, 2),
            "result": lines[-1].strip("= ") if lines else out.strip().splitlines()[-1:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--tier", choices=[*TIERS, "both"], default="both")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from attnprof.measure.env import cpu_model

    tiers = list(TIERS) if args.tier == "both" else [args.tier]
    result = {"machine": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
              "tiers": {}}
    for tier in tiers:
        runs = []
        for i in range(args.runs):
            runs.append(timed_run(TIERS[tier]))
            r = runs[-1]
            print(f"[test_suite] {tier} run {i + 1}: {r['wall_s']} s wall, {r['cpu_s']} CPU s, exit {r['exit']}: "
                  f"{r['result']}", file=sys.stderr, flush=True)
        result["tiers"][tier] = {"command": " ".join(["python -m pytest", *TIERS[tier]]), "tests": selected(TIERS[tier]),
                                 "runs": runs}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["exit"] == 0 for t in result["tiers"].values() for r in t["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
