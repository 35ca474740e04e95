"""Snakemake script: compare.json (rule compare_json). Logic: attnprof.analysis.compare."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    import pandas as pd
    from attnprof.analysis.compare import compare_runs
    from attnprof.analysis.records import load_record
    from attnprof.analysis.tables import concat_tables

    runs = []
    for name in sm.params.runs:
        ops = [pd.read_csv(p) for p in sm.input[f"{name}/ops"]]
        runs.append({
            "name": name,
            "summary": pd.read_csv(sm.input[f"{name}/summary"]),
            "kernels": pd.read_csv(sm.input[f"{name}/kernels"]),
            "ops": concat_tables(ops),
            "env": load_record(sm.input[f"{name}/env"]),
            "findings": load_record(sm.input[f"{name}/findings"], ("shapes",)),
            # each repeat's medians (the between-run spread the verdicts use); absent in a result set made before repeats
            "repeats": pd.read_csv(sm.input[f"{name}/repeats"]) if Path(sm.input[f"{name}/repeats"]).exists() else None,
        })
    result = compare_runs(runs, sm.params.noise_floor, sm.params.confidence, sm.params.noise_floor_host)
    with open(sm.output[0], "w") as fh:
        json.dump(result, fh, indent=2, default=str)
    for pair in result["pairs"]:
        print(f"{pair['b']} vs {pair['a']}: {len(pair['rows'])} rows ({pair['counts']}), "
              f"{len(pair['env_diff'])} environment differences", file=log)
