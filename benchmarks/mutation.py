"""Mutation testing of the trace, tables and compare arithmetic with mutmut (docs/mutations.md).

Usage (from the repository root, with ``pip install -e '.[test,mutation]'`` done):

    python benchmarks/mutation.py --out benchmarks/mutation.json              # run every mutant, then record
    python benchmarks/mutation.py --out benchmarks/mutation.json --survivors  # after adding tests: rerun the
                                                                              # survivors only, then record
    python benchmarks/mutation.py --out benchmarks/mutation.json --no-run     # record the last run

mutmut keeps its results in mutants/ (git-ignored); ``--survivors`` reruns the mutants that survived the last
run (and any not yet run) against the tests as they are now: a mutant that the tests killed stays killed when
tests are only added. ``--before FILE`` copies the totals of an earlier record into this one.

mutmut's settings (files, tests, pytest options) are in pyproject.toml, ``[tool.mutmut]``. It mutates
every function of src/attnprof/trace.py, tables.py and compare.py; this script runs the mutants of the
functions in :data:`FUNCTIONS` only (the arithmetic: attribution of GPU events to forwards,
completeness, the per-forward, kernel and summary tables, the comparison's ratios and noise) and
leaves out :data:`LEFT_OUT` (reading the file, the kernel-name parsing, text-only helpers), which
keeps a run near 40 minutes on 2 cores. It then writes, per file, the mutants run, killed, survived,
timed out and otherwise ended, the score (killed + timeout over run), and every survivor with its diff.
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")

FUNCTIONS = {
    "trace": ["_finish_frame", "events_frame", "integer_ids", "is_launch_api", "forward_ranges", "assign_forward",
              "launches", "cpu_ops", "gpu_events"],
    "tables": ["concat_tables", "completeness", "analyse_trace", "_counted_forwards", "_timed_forwards",
               "per_forward_counts", "kernel_table", "forward_table", "_calls_table", "launch_api_table", "op_table",
               "_ranges_text", "forward_groups", "assess_forwards", "per_forward_stats", "summary_row"],
    "compare": ["_time_columns", "_spread", "_judge", "compare_pair", "_num", "compare_runs"],
}
LEFT_OUT = {
    "trace": "the readers (load_trace, _read_file, _load_reference, _is_utf8, _decode_fast, _event_columns, "
             "_frame_from_columns, _frame_from_dicts, the Trace dict: test_trace checks them against json.loads), "
             "kernel-name parsing (short_kernel_name, kernel_label), device lookup (device_properties, properties_of)",
    "tables": "text only: describe_groups, incomplete_reason",
    "compare": "names and environment: normalise_kernel, _flatten, env_diff, _dispatch",
}


def patterns() -> list[str]:
    return [f"attnprof.{mod}.x_{fn}__mutmut_*" for mod, fns in FUNCTIONS.items() for fn in fns]


def _selected():
    return [re.compile(p.replace(".", r"\.").replace("*", ".*") + "$") for p in patterns()]


def _meta(mod: str) -> dict:
    return json.loads((ROOT / "mutants" / "src" / "attnprof" / f"{mod}.py.meta").read_text())


def survivors() -> list[str]:
    """The selected mutants that survived the last run or were not run yet."""
    selected = _selected()
    return [name for mod in FUNCTIONS for name, code in _meta(mod)["exit_code_by_key"].items()
            if code in (0, None) and any(p.match(name) for p in selected)]


def record(elapsed_s: float | None) -> dict:
    os.chdir(ROOT)  # mutmut reads mutants/ from the working directory
    from mutmut import __version__
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    selected = _selected()
    files, left = {}, []
    for mod in FUNCTIONS:
        meta = _meta(mod)
        counts = Counter()
        for name, code in meta["exit_code_by_key"].items():
            if not any(p.match(name) for p in selected):
                counts["not run (left out)"] += 1
                continue
            status = status_by_exit_code[code]
            counts[status] += 1
            if status == "survived":
                diff = get_diff_for_mutant(name, path=Path("src") / "attnprof" / f"{mod}.py")
                lines = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
                left.append({"mutant": name, "diff": lines})
        run = sum(v for k, v in counts.items() if k != "not run (left out)")
        done = counts["killed"] + counts["timeout"]
        files[f"src/attnprof/{mod}.py"] = {"mutants": sum(counts.values()), "run": run, "killed": counts["killed"],
                                           "survived": counts["survived"], "timeout": counts["timeout"],
                                           "other": {k: v for k, v in counts.items() if k not in (
                                               "killed", "survived", "timeout", "not run (left out)")},
                                           "not_run": counts["not run (left out)"], "left_out": LEFT_OUT[mod],
                                           "score_pct": round(100 * done / run, 1) if run else None}
    run = sum(f["run"] for f in files.values())
    done = sum(f["killed"] + f["timeout"] for f in files.values())
    return {"tool": f"mutmut {__version__}", "command": "mutmut run " + " ".join(patterns()),
            "config": "pyproject.toml [tool.mutmut]", "functions": FUNCTIONS,
            "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()},
            "elapsed_s": elapsed_s, "files": files,
            "total": {"run": run, "killed": sum(f["killed"] for f in files.values()),
                      "survived": sum(f["survived"] for f in files.values()),
                      "timeout": sum(f["timeout"] for f in files.values()),
                      "score_pct": round(100 * done / run, 1) if run else None},
            "survivors": left}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-run", action="store_true", help="only record the results of the last run (mutants/)")
    ap.add_argument("--survivors", action="store_true", help="rerun only the mutants that survived the last run")
    ap.add_argument("--before", type=Path, help="an earlier record whose totals to keep as 'before'")
    ap.add_argument("--max-children", type=int, default=os.cpu_count())
    args = ap.parse_args()
    elapsed, names = None, patterns()
    if args.survivors:
        names = survivors()
    if not args.no_run and names:
        start = time.monotonic()
        subprocess.run([str(MUTMUT), "run", "--max-children", str(args.max_children), *names], cwd=ROOT, check=True)
        elapsed = round(time.monotonic() - start, 1)
    out = record(elapsed)
    if args.survivors:
        out["rerun"] = f"the {len(names)} survivors of the previous run only"
    if args.before:
        before = json.loads(args.before.read_text())
        out["before"] = {"total": before["total"], "files": {f: {k: v[k] for k in ("run", "killed", "survived", "timeout",
                                                                               "score_pct")}
                                                           for f, v in before["files"].items()},
                         "elapsed_s": before.get("elapsed_s")}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["total"]), f"{len(out['survivors'])} survivors -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
