"""Snakemake script: an A/B run's look 1 and its choice of rows to add rounds to (checkpoint top_up). Logic:
attnprof.analysis.verdict.

Reads the base rounds' status records and forward tables of every environment (the same rows summarize writes to
repeats.csv: attnprof.analysis.tables.summary_row), judges every row against the baseline (the first environment)
as compare's look 1 does (the whole rule, its joint control included), and writes each result set's top_up.json: the rows that get rounds added, how many and
why, and the rows left undetermined with why. With more than two environments every pair with the baseline is
judged, a row takes the most rounds any pair asks, and the time bound is shared among the pairs."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    import pandas as pd

    from attnprof.analysis.records import load_status
    from attnprof.analysis.compare import judged_time
    from attnprof.analysis.tables import repeat_row
    from attnprof.model.variants import CONTROL
    from attnprof.analysis.verdict import ROUND_START_S, Design, paired_verdicts, plan_top_up

    p = sm.params
    frames, cost = {}, {}
    for run in p.runs:
        rows = []
        for status_path, forwards_path in zip(sm.input[f"{run}/status"], sm.input[f"{run}/forwards"], strict=True):
            status = load_status(status_path)  # in the current format (attnprof.model.formats)
            row = repeat_row(status, status_path, pd.read_csv(forwards_path))  # as summarize writes it
            rows.append(row)
            # seconds one round of this row takes, summed over the environments (the mean over the base rounds)
            key = (row["variant"], row["shape_key"])
            cost[key] = cost.get(key, 0.0) + float(status.get("capture_wall_s") or 0.0) / p.base
        frames[run] = pd.DataFrame(rows)
    baseline, others = p.runs[0], p.runs[1:]
    col, _, threshold = judged_time(frames[baseline], p.noise_floor, p.noise_floor_host)  # as compare judges
    # the rows compare judges: forward and backward times of every variant but the profiler's control, together
    cols = [c for c in (col, col.replace("per_forward", "per_backward"))
            if c in frames[baseline] and frames[baseline][c].notna().any()]
    keys = sorted({(v, k, c) for v, k in zip(frames[baseline]["variant"], frames[baseline]["shape_key"])
                   if v != CONTROL for c in cols})
    chosen, left, estimate = {}, {}, 0.0
    for other in others:
        first = paired_verdicts(frames[baseline], frames[other], keys, threshold, p.confidence, Design(p.base, 2))
        plan = plan_top_up(first, p.base, p.rounds, p.time_s / len(others), cost, ROUND_START_S * len(p.runs))
        estimate += plan["estimate_s"]
        for r in plan["rows"]:
            key = (r["variant"], r["shape_key"])
            if key not in chosen or r["rounds"] > chosen[key]["rounds"]:
                chosen[key] = {**r, "pair": f"{baseline} vs {other}"}
        left.update({(r["variant"], r["shape_key"]): r for r in plan["left"]})
    record = {"base": p.base, "rounds": p.rounds, "time_s": p.time_s, "time_column": col, "threshold": threshold,
              "rows": sorted(chosen.values(), key=lambda r: (r["variant"], r["shape_key"])),
              "left": [r for k, r in sorted(left.items()) if k not in chosen], "estimate_s": round(estimate, 1)}
    for path in sm.output:
        Path(path).write_text(json.dumps(record, indent=1) + "\n")
    said = (f"top-up: {len(record['rows'])} of {len({k[:2] for k in keys})} rows undetermined after {p.base} rounds get rounds added "
            f"(about {record['estimate_s']:.0f} s of captures)")
    print(said, flush=True)
    for r in record["rows"]:
        print(f"  {r['variant']} at {r['shape_key']}: {r['added']} more round(s): {r['why']}", file=log)
    for r in record["left"]:
        print(f"  {r['variant']} at {r['shape_key']}: none added: {r['why']}", file=log)
