"""Mutation testing of the trace, tables, compare and findings arithmetic with mutmut (docs/mutations.md).

Usage (from the repository root, with ``pip install -e '.[test,mutation]'`` done):

    python benchmarks/mutation.py --out benchmarks/mutation.json              # run every mutant, then record
    python benchmarks/mutation.py --out benchmarks/mutation.json --survivors  # after adding tests: rerun the
                                                                              # survivors only, then record
    python benchmarks/mutation.py --out benchmarks/mutation.json --no-run     # record the last run
    python benchmarks/mutation.py --out benchmarks/mutation.json --group findings [--survivors|--no-run]

mutmut keeps its results in mutants/ (git-ignored); ``--survivors`` reruns the mutants that survived the last
run (and any not yet run) against the tests as they are now: a mutant that the tests killed stays killed when
tests are only added. ``--before FILE`` copies the totals of an earlier record into this one.

mutmut's settings (files, tests, pytest options) are in pyproject.toml, ``[tool.mutmut]``. It mutates
every function of src/attnprof/analysis/trace.py, tables.py, compare.py, backward.py and of the findings modules; this
script runs the mutants of the functions of one group only:

- ``--group arithmetic`` (the default; the record's top level): :data:`FUNCTIONS` of trace, tables and compare
  (attribution of GPU events to forwards, completeness, the per-forward, kernel and summary tables, the
  comparison's ratios and noise), leaving out :data:`LEFT_OUT` (reading the file, the kernel-name parsing,
  text-only helpers);
- ``--group findings`` (the record's ``findings`` section; the rest of the file is kept):
  :data:`FINDINGS_FUNCTIONS` (metrics, comparisons, occupancy, derived numbers, kernel classes, the speed
  rule's ranking, tie and robustness rules and its breakdown, the backward rule's shares, the backward's
  attribution and summary), leaving out :data:`FINDINGS_LEFT_OUT` and the rules of :data:`FINDINGS_NOT_RUN`.

Either keeps a run near 40 minutes on 2 cores. It then writes, per file, the mutants run, killed, survived,
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
    "analysis.trace": ["_finish_frame", "events_frame", "integer_ids", "forward_ranges", "assign_forward",
              "launches", "cpu_ops", "gpu_events"],
    "analysis.tables": ["concat_tables", "analyse_trace", "_forwards", "per_forward_counts", "kernel_table",
               "forward_table", "_calls_table", "launch_api_table", "op_table", "forward_groups", "assess_forwards",
               "per_forward_stats", "summary_row"],
    "analysis.completeness": ["completeness", "_ranges_text"],
    "analysis.verdict": ["decide", "judge_rows"],
    "analysis.compare": ["compare_pair", "_num", "compare_runs"],
}
LEFT_OUT = {
    "analysis.trace": "the readers (load_trace, _read_file, _load_reference, _is_utf8, _decode_fast, _event_columns, "
             "_frame_from_columns, _frame_from_dicts, the Trace dict: test_trace checks them against json.loads), "
             "kernel-name parsing (short_kernel_name, kernel_label), device lookup (device_properties, properties_of)",
    "analysis.tables": "text only: describe_groups, incomplete_reason",
    "analysis.completeness": "the rest (the backward's attribution: the findings group)",
    "analysis.verdict": "the words (_row, _why) and top-up's plan",
    "analysis.compare": "names and environment: env_diff, _dispatch",
}

#: ``--group findings``: the findings package's arithmetic (shares, ratios, thresholds, sums, rankings, the
#: tie and robustness rules, the compile and backward rules) and the backward's attribution and summary.
FINDINGS_FUNCTIONS = {
    "findings.metrics": ["metric_kernels_plus_memcpy", "metric_device_ratio", "metric_fastest_fused",
                         "metric_cpu_excess", "metric_kernels_saved"],
    "findings.expectations": ["_compare"],
    "findings.occupancy": ["theoretical_occupancy"],
    "findings.refs": ["clean", "derived"],
    "findings.kernel_names": ["matches", "kernel_group", "kernel_class", "fused_ops"],
    "findings.rules.timing": ["rule_speed", "_breakdown"],
    "findings.rules.beyond": ["rule_backward"],
    "analysis.backward": ["backward_threads", "assign_backward", "backward_summary"],
    "analysis.completeness": ["_cross_thread", "ambiguous_launches", "other_thread_launches"],
}
FINDINGS_LEFT_OUT = {
    "findings.metrics": "single cells passed through (metric_memcpy, metric_safe_softmax, metric_main_occupancy) and "
                        "metric_fp32_gemms / metric_mask_kernels (the same sum as metric_kernels_plus_memcpy over "
                        "kernel_names' classes, which are run)",
    "findings.expectations": "check_expectations (158 mutants, mostly the check dict's keys and texts; its verdict is "
                             "_compare's), the file's names (expectation_problems, load_expectations: messages); the "
                             "COMPARES lambdas are module-level, which mutmut does not mutate",
    "findings.occupancy": "nothing",
    "findings.refs": "the cell references (ref_*: a wrong cell fails lookup() in test_findings), lookup (67 mutants, the "
                     "test's own re-reader), text (fmt_ref, finding), iter_numbers (a walk)",
    "findings.kernel_names": "decode_kernel_name (282 mutants of name parsing into library, tile, dtype, arch strings)",
    "findings.rules.timing": "rule_fidelity (288) and rule_cpu_cost (139): mostly statement text; "
                             "not run for the 40-minute budget (see docs/mutations.md)",
    "findings.rules.beyond": "rule_compile (163 mutants: the first call's time and cache passed through, text)",
    "analysis.completeness": "the forward's completeness (the arithmetic group)",
    "analysis.backward": "analyse_passes (186, frame plumbing; test_beyond_fixtures counts it against the JSON), backward_table, "
                "renaming and headers (_per_backward, backward_tables, "
                "empty_backward_tables), as_backward (text)",
}
#: The findings rules not run at all (status, work, kernels): one finding each per table row, their numbers are
#: cells that test_findings re-reads with lookup(); not run for the 40-minute budget.
FINDINGS_NOT_RUN = ["findings/rules/status.py", "findings/rules/work.py", "findings/rules/kernels.py"]
#: ``--group spread``: what decides an expectation's verdict from the spread of the forwards (the metrics'
#: spreads and ties, the verdict itself) and the memory columns of summary.csv.
SPREAD_FUNCTIONS = {
    "findings.expectations": ["verdict"],
    "findings.metrics": ["_spread", "metric_device_ratio", "metric_fastest_fused", "metric_cpu_excess"],
    "analysis.tables": ["_memory_columns"],
}
SPREAD_LEFT_OUT = {"findings.expectations": "check_expectations (see the findings group)",
                   "findings.metrics": "the other metrics (the findings group)", "analysis.tables": "the rest (the arithmetic group)"}
GROUPS = {"arithmetic": (FUNCTIONS, LEFT_OUT), "findings": (FINDINGS_FUNCTIONS, FINDINGS_LEFT_OUT),
          "spread": (SPREAD_FUNCTIONS, SPREAD_LEFT_OUT)}


def patterns(functions: dict = FUNCTIONS) -> list[str]:
    return [f"attnprof.{mod}.x_{fn}__mutmut_*" for mod, fns in functions.items() for fn in fns]


def _selected(functions: dict = FUNCTIONS):
    return [re.compile(p.replace(".", r"\.").replace("*", ".*") + "$") for p in patterns(functions)]


def _path(mod: str) -> Path:
    return Path("src") / "attnprof" / (mod.replace(".", "/") + ".py")


def _meta(mod: str) -> dict:
    return json.loads((ROOT / "mutants" / _path(mod).with_suffix(".py.meta")).read_text())


def survivors(functions: dict = FUNCTIONS) -> list[str]:
    """The selected mutants that survived the last run or were not run yet."""
    selected = _selected(functions)
    return [name for mod in functions for name, code in _meta(mod)["exit_code_by_key"].items()
            if code in (0, None) and any(p.match(name) for p in selected)]


def record(elapsed_s: float | None, group: str = "arithmetic") -> dict:
    os.chdir(ROOT)  # mutmut reads mutants/ from the working directory
    from mutmut import __version__
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    functions, left_out = GROUPS[group]
    selected = _selected(functions)
    files, left = {}, []
    for mod in functions:
        meta = _meta(mod)
        counts = Counter()
        for name, code in meta["exit_code_by_key"].items():
            if not any(p.match(name) for p in selected):
                counts["not run (left out)"] += 1
                continue
            status = status_by_exit_code[code]
            counts[status] += 1
            if status == "survived":
                diff = get_diff_for_mutant(name, path=_path(mod))
                lines = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
                left.append({"mutant": name, "diff": lines})
        run = sum(v for k, v in counts.items() if k != "not run (left out)")
        done = counts["killed"] + counts["timeout"]
        files[str(_path(mod))] = {"mutants": sum(counts.values()), "run": run, "killed": counts["killed"],
                                  "survived": counts["survived"], "timeout": counts["timeout"],
                                  "other": {k: v for k, v in counts.items() if k not in (
                                      "killed", "survived", "timeout", "not run (left out)")},
                                  "not_run": counts["not run (left out)"], "left_out": left_out[mod],
                                  "score_pct": round(100 * done / run, 1) if run else None}
    run = sum(f["run"] for f in files.values())
    done = sum(f["killed"] + f["timeout"] for f in files.values())
    return {"tool": f"mutmut {__version__}", "command": "mutmut run " + " ".join(patterns(functions)),
            "config": "pyproject.toml [tool.mutmut]", "functions": functions,
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
    ap.add_argument("--group", choices=GROUPS, default="arithmetic",
                    help="arithmetic: trace, tables, compare (the record's top level); findings: the findings package "
                         "and backward.py (the record's 'findings' section; the rest of --out is kept); spread: the verdicts' "
                         "spreads and the memory columns (its own section)")
    ap.add_argument("--no-run", action="store_true", help="only record the results of the last run (mutants/)")
    ap.add_argument("--survivors", action="store_true", help="rerun only the mutants that survived the last run")
    ap.add_argument("--before", type=Path, help="an earlier record whose totals to keep as 'before'")
    ap.add_argument("--max-children", type=int, default=os.cpu_count())
    args = ap.parse_args()
    functions = GROUPS[args.group][0]
    elapsed, names = None, patterns(functions)
    if args.survivors:
        names = survivors(functions)
    if not args.no_run and names:
        start = time.monotonic()
        subprocess.run([str(MUTMUT), "run", "--max-children", str(args.max_children), *names], cwd=ROOT, check=True)
        elapsed = round(time.monotonic() - start, 1)
    out = record(elapsed, args.group)
    if args.survivors:
        out["rerun"] = f"the {len(names)} survivors of the previous run only"
    if args.before:
        before = json.loads(args.before.read_text())
        if args.group != "arithmetic":
            before = before[args.group]
        out["before"] = {"total": before["total"], "files": {f: {k: v[k] for k in ("run", "killed", "survived", "timeout",
                                                                               "score_pct")}
                                                           for f, v in before["files"].items()},
                         "elapsed_s": before.get("elapsed_s")}
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    if args.group == "arithmetic":
        doc = {**out, **{g: old[g] for g in GROUPS if g in old and g != "arithmetic"}}
    else:
        doc = {**old, args.group: out}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(out["total"]), f"{len(out['survivors'])} survivors -> {args.out} ({args.group})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
