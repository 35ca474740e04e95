"""Issue 40's figures from the tarballs benchmarks/cost_h200.sh leaves in $OUT (study_old, study_new, sweep_new):
each step's wall time, its stages (Snakemake's start to the first capture, the captures, the last capture to the end,
and when each later rule last finished), each round's span and where it went (capture work, checks, profiled
steps, phases, processes, their start-up), and whether the numbers stayed the same (compare's verdicts, statuses,
kernel/memcpy/memset counts per forward, medians inside the baseline's rerun interval).

    python benchmarks/cost_h200_report.py DIR [--baseline-sweep RESULT_SET] --out benchmarks/cost_h200_<date>.json

DIR holds the unpacked tarballs: DIR/<step>/results/<run>/ and DIR/<step>/**/<step>.json.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import re
from datetime import datetime, UTC
from pathlib import Path

import pandas as pd

from attnprof.analysis.compare import compare_runs, load_result_set
from attnprof.findings.kernel_names import kernel_class

COUNTS = ("kernels_per_forward", "memcpy_per_forward", "memset_per_forward")


def rounds(run_dir: Path) -> dict:
    """Per round (repeat): its span (first accepted to last finished capture), the captures' own work, the checks,
    the profiled steps, each phase's seconds, the processes and their start-up, the statuses."""
    by = collections.defaultdict(list)
    for p in run_dir.glob("captures/*/*/r*/status.json"):
        r = json.loads(p.read_text())
        by[r["repeat"]].append(r)
    out = {}
    for k, rs in sorted(by.items()):
        phases = collections.Counter()
        for r in rs:
            phases.update({n: p["seconds"] for n, p in r["phases"].items()})
        out[k] = {"captures": len(rs), "span_s": round(max(r["finished_at"] for r in rs) - min(r["started_at"] for r in rs), 1),
                  "capture_wall_s": round(sum(r.get("capture_wall_s", 0) for r in rs), 1),
                  "checks_s": round(sum(r["checks"]["seconds"] for r in rs if isinstance(r.get("checks"), dict)), 1),
                  "profiled_steps_s": round(sum(r.get("profile_s") or 0 for r in rs), 1),
                  "phases_s": {n: round(s, 1) for n, s in phases.items()},
                  "processes": len({r["worker"]["pid"] for r in rs}),
                  "startup_s": sorted(r["worker"]["startup_s"] for r in rs if r["worker"]["captures_before"] == 0),
                  "statuses": dict(collections.Counter(r["status"] for r in rs))}
    return out


def stages(run_dir: Path, wall_s: float) -> dict:
    """Seconds from the start to the first capture, of the captures, and from the last capture to the end; when each
    other rule last finished after the last capture (snakemake.log's job stamps, whole seconds)."""
    recs = [json.loads(p.read_text()) for p in run_dir.glob("captures/*/*/r*/status.json")]
    last, t = {}, None
    for line in (run_dir / "snakemake.log").read_text().splitlines():
        if m := re.match(r"\[\w+ (\w+ +\d+ [\d:]+ \d+)\]", line):
            t = datetime.strptime(m[1], "%b %d %H:%M:%S %Y").replace(tzinfo=UTC).timestamp()
        elif m := re.search(r"Finished jobid: \d+ \(Rule: (\w+)\)", line):
            last[m[1]] = t
    end = max(last.values())
    first, final = min(r["started_at"] for r in recs), max(r["finished_at"] for r in recs)
    return {"start_to_first_capture_s": round(first - (end - wall_s), 1), "captures_s": round(final - first, 1),
            "last_capture_to_end_s": round(end - final, 1),
            "after_last_capture_s": {rule: round(s - final, 1) for rule, s in last.items() if rule != "capture"}}


def same_numbers(before: Path, after: Path) -> dict:
    """compare's verdicts (after against before), and from summary.csv: statuses and counts per forward equal, and
    after's median device time per forward inside before's rerun interval."""
    def files(d: Path) -> dict:
        return {"summary": d / "summary.csv", "kernels": d / "kernels.csv", "env": d / "env.json",
                "findings": d / "findings.json", "repeats": d / "repeats.csv",
                "ops": sorted(glob.glob(str(d / "tables/*/*/r1/ops.csv"))),
                "recipe": sorted(glob.glob(str(d / "tables/*/*/r*/recipe.csv")))}
    runs = [load_result_set(n, files(d), lambda *_: None) for n, d in (("before", before), ("after", after))]
    pair = compare_runs(runs, classify=kernel_class)["pairs"][0]
    m = pd.read_csv(before / "summary.csv").merge(pd.read_csv(after / "summary.csv"), on=["variant", "shape_key"],
                                                   suffixes=("_a", "_b"))
    ok = m[m.status_a == "ok"]
    inside = ok.device_ms_per_forward_b.between(ok.device_ms_run_lo_a, ok.device_ms_run_hi_a)
    ratio = ok.device_ms_per_forward_b / ok.device_ms_per_forward_a
    return {"verdicts": pair["counts"], "rows": len(m), "statuses_equal": int((m.status_a == m.status_b).sum()),
            "ok_rows": len(ok), "counts_equal": {c: int((ok[f"{c}_a"] == ok[f"{c}_b"]).sum()) for c in COUNTS},
            "inside_rerun_interval": int(inside.sum()),
            "outside": [f"{r.variant} {r.shape_key}: {r.device_ms_per_forward_b:.4g} ms against {r.device_ms_run_lo_a:.4g}-"
                        f"{r.device_ms_run_hi_a:.4g}" for r in ok[~inside].itertuples()],
            "ratio_median": round(float(ratio.median()), 4), "ratio_min": round(float(ratio.min()), 4),
            "ratio_max": round(float(ratio.max()), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--baseline-sweep", type=Path, help="a sweep of the old design to compare the new one with")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out, dirs = {"steps": {}}, {}
    for step_json in sorted(args.dir.glob("*/**/*.json")):
        step = json.loads(step_json.read_text())
        if not isinstance(step, dict) or step.get("step") != step_json.stem:
            continue
        dirs[step["step"]] = run_dir = args.dir / step["step"] / "results" / step["run"]
        out["steps"][step["step"]] = {**step, "stages": stages(run_dir, step["wall_s"]), "rounds": rounds(run_dir)}
    for kind in ("study", "sweep"):  # the old and new code's runs of one lease, where both ran
        if {f"{kind}_old", f"{kind}_new"} <= set(dirs):
            out[f"{kind}_new_vs_{kind}_old"] = same_numbers(dirs[f"{kind}_old"], dirs[f"{kind}_new"])
    if args.baseline_sweep:
        out["sweep_new_vs_baseline"] = {"baseline": str(args.baseline_sweep),
                                        **same_numbers(args.baseline_sweep, dirs["sweep_new"])}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v["wall_s"] for k, v in out["steps"].items()}))


if __name__ == "__main__":
    main()
