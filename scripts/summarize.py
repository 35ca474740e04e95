"""Snakemake script: summary.csv and kernels.csv of the run (rule summarize). Logic: attnprof.tables."""
import json

import pandas as pd

from attnprof.tables import concat_tables, summary_row

sm = snakemake  # noqa: F821
rows = []
for status_path, forwards_path in zip(sm.input.status, sm.input.forwards):
    status = json.loads(open(status_path).read())
    trace_path = status_path.replace("status.json", "trace.json.gz")
    rows.append(summary_row(status, pd.read_csv(forwards_path), trace_path))
pd.DataFrame(rows).to_csv(sm.output.summary, index=False)
frames = [pd.read_csv(p) for p in sm.input.kernels]
concat_tables(frames).to_csv(sm.output.kernels, index=False)
with open(sm.log[0], "w") as log:
    print(f"{len(rows)} rows", file=log)
