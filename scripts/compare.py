"""Snakemake script: compare.json (rule compare_json). Logic: attnprof.compare."""
import json

import pandas as pd

from attnprof.compare import compare_runs
from attnprof.tables import concat_tables

sm = snakemake  # noqa: F821
runs = []
for name in sm.params.runs:
    ops = [pd.read_csv(p) for p in sm.input[f"{name}/ops"]]
    runs.append({
        "name": name,
        "summary": pd.read_csv(sm.input[f"{name}/summary.csv"]),
        "kernels": pd.read_csv(sm.input[f"{name}/kernels.csv"]),
        "ops": concat_tables(ops),
        "env": json.loads(open(sm.input[f"{name}/env.json"]).read()),
        "findings": json.loads(open(sm.input[f"{name}/findings.json"]).read()),
    })
result = compare_runs(runs, sm.params.noise_floor)
with open(sm.output[0], "w") as fh:
    json.dump(result, fh, indent=2, default=str)
with open(sm.log[0], "w") as log:
    for pair in result["pairs"]:
        print(f"{pair['b']} vs {pair['a']}: {len(pair['rows'])} rows, {len(pair['env_diff'])} environment differences", file=log)
