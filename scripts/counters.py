"""Snakemake script: hardware counters of one forward (rule measure_counters). Logic: attnprof.measure.counters."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821 (injected by Snakemake)
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    from attnprof.measure.counters import make_spec, measure

    p, wc = sm.params, sm.wildcards
    record = measure(make_spec(wc.variant, wc.shape, p.device, p.seed, p.warmup_calls, p.custom), Path(sm.output.csv), p.timeout_s)
    Path(sm.output.status).write_text(json.dumps(record, indent=2, sort_keys=True))
    print(f"{record['variant']} {record['shape_key']}: {record['status']} {record['reason']}", file=log)
    if record.get("output_tail"):
        print(record["output_tail"], file=log)
