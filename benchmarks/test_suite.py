"""Wall time of the test suite, as the README runs it (``python -m pytest``), on this machine.

Usage (from the repository root, in the project's environment):

    python benchmarks/test_suite.py --runs 2 --out benchmarks/test_suite.json

Records each run's wall time and exit status, the number of tests collected and the
machine (CPU model, logical cores, 1-minute load average before each run: a busy machine
makes a slow suite).
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from attnprof.measure.env import cpu_model

    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                               cwd=ROOT, capture_output=True, text=True).stdout
    n = re.search(r"(\d+) tests? collected", collected)
    runs = []
    for i in range(args.runs):
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=ROOT,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        runs.append({"wall_s": round(wall, 1), "exit": proc.returncode, "load_avg_1m_before": round(load, 2), "result": tail})
        print(f"[test_suite] run {i + 1}: {wall:.1f} s, exit {proc.returncode}: {tail}", file=sys.stderr, flush=True)
    result = {"machine": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
              "tests_collected": int(n.group(1)) if n else None, "runs": runs}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
