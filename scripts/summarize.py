"""Snakemake script: summary.csv and kernels.csv of the run (rule summarize). Logic: attnprof.tables."""
from attnprof.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    import pandas as pd
    from attnprof.backward import backward_summary
    from attnprof.names import CAPTURE_FILES
    from attnprof.tables import concat_tables, summary_row

    rows = []
    for status_path, forwards_path, backwards_path in zip(sm.input.status, sm.input.forwards, sm.input.backwards):
        status = json.loads(Path(status_path).read_text())
        trace_path = str(Path(status_path).with_name(CAPTURE_FILES["trace"]))
        row = summary_row(status, pd.read_csv(forwards_path), trace_path)
        # the backward's columns (config passes), empty when it was not profiled
        row.update(backward_summary(status, pd.read_csv(backwards_path)))
        rows.append(row)
    pd.DataFrame(rows).to_csv(sm.output.summary, index=False)
    frames = [pd.read_csv(p) for p in sm.input.kernels]
    concat_tables(frames).to_csv(sm.output.kernels, index=False)
    print(f"{len(rows)} rows", file=log)
