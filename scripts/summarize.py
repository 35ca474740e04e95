"""Snakemake script: summary.csv, repeats.csv and kernels.csv of the run (rule summarize). Logic: attnprof.tables.

Every capture (each repeat of each variant and shape) gives one row of repeats.csv; the repeats of one
(variant, shape) give its summary.csv row (attnprof.tables.combine_repeats: times over the repeats with
their between-run interval). kernels.csv holds the kernel tables of repeat 1."""
from attnprof.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    import pandas as pd
    from attnprof.backward import backward_summary
    from attnprof.names import CAPTURE_FILES
    from attnprof.tables import REPEAT_COLUMNS, combine_repeats, concat_tables, summary_row

    per_pair: dict[tuple[str, str], list[dict]] = {}
    for status_path, forwards_path, backwards_path in zip(sm.input.status, sm.input.forwards, sm.input.backwards):
        status = json.loads(Path(status_path).read_text())
        trace_path = str(Path(status_path).with_name(CAPTURE_FILES["trace"]))
        row = summary_row(status, pd.read_csv(forwards_path), trace_path)
        # the backward's columns (config passes), empty when it was not profiled
        row.update(backward_summary(status, pd.read_csv(backwards_path)))
        # the repeat is the capture's folder (r<k>); its record says it too (1 for a record made before repeats)
        row["repeat"] = int(Path(status_path).parent.name.removeprefix("r"))
        per_pair.setdefault((row["variant"], row["shape_key"]), []).append(row)
    repeats = [r for rows in per_pair.values() for r in rows]
    pd.DataFrame(repeats, columns=REPEAT_COLUMNS).to_csv(sm.output.repeats, index=False)
    summary = [combine_repeats(rows, sm.params.confidence) for rows in per_pair.values()]
    pd.DataFrame(summary).to_csv(sm.output.summary, index=False)
    frames = [pd.read_csv(p) for p in sm.input.kernels]
    concat_tables(frames).to_csv(sm.output.kernels, index=False)
    print(f"{len(summary)} rows from {len(repeats)} captures", file=log)
