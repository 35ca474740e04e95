"""Snakemake script: summary.csv and kernels.csv of the run (rule summarize). Logic: attnprof.tables."""
from attnprof.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    import pandas as pd
    from attnprof.names import CAPTURE_FILES
    from attnprof.tables import concat_tables, summary_row

    rows = []
    for status_path, forwards_path in zip(sm.input.status, sm.input.forwards):
        status = json.loads(Path(status_path).read_text())
        trace_path = str(Path(status_path).with_name(CAPTURE_FILES["trace"]))
        rows.append(summary_row(status, pd.read_csv(forwards_path), trace_path))
    pd.DataFrame(rows).to_csv(sm.output.summary, index=False)
    frames = [pd.read_csv(p) for p in sm.input.kernels]
    concat_tables(frames).to_csv(sm.output.kernels, index=False)
    print(f"{len(rows)} rows", file=log)
