"""Snakemake script: findings.json (rule findings). Logic: attnprof.findings."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    import jsonschema
    import pandas as pd
    from attnprof.findings import compute, load_expectations, load_run_data
    from attnprof.analysis.records import load_status

    summary = pd.read_csv(sm.input.summary)
    kernels = pd.read_csv(sm.input.kernels)
    launches = [pd.read_csv(p) for p in sm.input.launches]
    ops = [pd.read_csv(p) for p in sm.input.ops]
    backward_kernels = [pd.read_csv(p) for p in sm.input.kernels_backward]
    for path, table in zip(sm.input.kernels_backward, backward_kernels):
        missing = [c for c in ("variant", "shape_key", "kernel", "category", "share_pct") if c not in table.columns]
        if missing:
            raise ValueError(f"{path}: no column {missing} (rule extract writes them; re-run it: --forcerun extract)")
    statuses = [load_status(p) for p in sm.input.status]  # a truncated one names its file
    # every GPU the traces saw, by deviceProperties id (a kernel's numbers use its own device's entry)
    devices = list({p["id"]: p for f in sm.input.device for p in json.loads(Path(f).read_text()) or [] if "id" in p}.values())
    expectations = load_expectations(sm.input.expectations, variants=summary["variant"])
    # the optional hardware counters (rule measure_counters, Nsight Compute) beside the trace's estimates
    from attnprof.findings.counters import load_counter_findings

    counters = load_counter_findings(sm.input.counters, kernels, devices, list(dict.fromkeys(summary["variant"])))
    shapes = []
    for shape_key in dict.fromkeys(summary["shape_key"]):
        data = load_run_data(shape_key, summary, kernels, launches, ops, statuses, devices, backward_kernels)
        shapes.append({**compute(data, expectations), "counters": counters.get(shape_key, [])})
    doc = json.loads(json.dumps({"schema_version": 1, "run": sm.wildcards.run, "shapes": shapes}, default=str))
    jsonschema.validate(doc, json.loads(Path(sm.input.schema).read_text()))
    with open(sm.output[0], "w") as fh:
        json.dump(doc, fh, indent=2, default=str)
    from attnprof.runtime.integrity import record_checksums

    record_checksums(Path(sm.output[0]).parent, [sm.output[0]])  # an edit is noticed at the next run
    for s in shapes:
        print(f"{s['shape_key']}: {len(s['findings'])} findings, {len(s['expectations'])} expectation checks, "
              f"{len(s['counters'])} hardware-counter rows", file=log)
    import sys
    from attnprof.findings.ranking import wrong_result_warnings

    for line in wrong_result_warnings(shapes):  # on the terminal (stderr, which the log does not take) and in the log
        print(f"attnprof findings: {line}", file=sys.__stderr__)
        print(line, file=log)
