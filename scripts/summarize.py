"""Snakemake script: summary.csv, repeats.csv and kernels.csv of the run (rule summarize). Logic: attnprof.analysis.tables.

Every capture (each repeat of each variant and shape) gives one row of repeats.csv; the repeats of one
(variant, shape) give its summary.csv row (attnprof.analysis.tables.combine_repeats: times over the repeats with
their between-run interval). kernels.csv holds the kernel tables of repeat 1. The profiler's control (attnprof.analysis.control) is not an
attention variant: its captures give control.csv (one row per repeat, its counts per forward), never a row of the others.

Every record is read through attnprof.analysis.records (a truncated or incomplete one names its file and key), in
the current format (attnprof.model.formats: an older record reads as the current one), and checked against its
folder and against the run's env.json (device, GPU, torch build): a capture from another machine or environment is
refused, naming both files and the field.

repeats.csv carries its format version as a column, ``format``, the same number in every row (attnprof.model.names
FORMATS["repeats"]), rather than a comment line or a second header: a constant column keeps the file a plain table
that pandas.read_csv and csv.DictReader read as before, and a reader that does not know the column passes it by;
attnprof.analysis.records.load_repeats reads a file without it as version 1."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    from pathlib import Path
    import pandas as pd
    from attnprof.analysis.backward import backward_summary
    from attnprof.model.names import FORMAT_KEY, FORMATS
    from attnprof.analysis.records import ENV_CHECK_KEYS, check_capture_record, load_env, load_status
    from attnprof.analysis.tables import REPEAT_COLUMNS, combine_repeats, concat_tables, derive_columns, repeat_noise, repeat_row

    # the run's env.json, a declared input
    env_path = sm.input.env
    env = load_env(env_path, (*ENV_CHECK_KEYS, "config.repeats"))
    def capture_row(status_path, forwards_path) -> tuple[dict, dict]:
        """(record, summary row with its repeat) of one capture: the record read and checked against its folder
        and env.json; the repeat is its record's, which the check holds to its folder (r<k>)."""
        status = load_status(status_path)
        check_capture_record(status, status_path, None, env, env_path=env_path)
        return status, repeat_row(status, status_path, pd.read_csv(forwards_path))

    per_pair: dict[tuple[str, str], list[dict]] = {}
    started: dict[tuple[str, str, int], float | None] = {}
    for status_path, forwards_path, backwards_path in zip(sm.input.status, sm.input.forwards, sm.input.backwards):
        status, row = capture_row(status_path, forwards_path)
        # the backward's columns (config passes), empty when it was not profiled
        row.update(backward_summary(status, pd.read_csv(backwards_path)))
        per_pair.setdefault((row["variant"], row["shape_key"]), []).append(row)
        # when the capture began (Unix s): what tells an A/B run's rounds were captured interleaved (compare)
        started[(row["variant"], row["shape_key"], row["repeat"])] = status["capture_started_at"]
    for rows in per_pair.values():
        for r in rows:
            r["started_at"] = started[(r["variant"], r["shape_key"], r["repeat"])]
    repeats = [r for rows in per_pair.values() for r in rows]
    # in the current format: its version in a constant column (this docstring)
    repeats_csv = pd.DataFrame(repeats, columns=REPEAT_COLUMNS).assign(**{FORMAT_KEY: FORMATS["repeats"]})
    repeats_csv.to_csv(sm.output.repeats, index=False)
    # the between-process noise, each cell's moderated over its variant's other cells (attnprof.analysis.stats.squeeze_var)
    noise = repeat_noise(per_pair)
    expected = int(env["config"]["repeats"])
    summary = [combine_repeats(rows, sm.params.confidence, noise[key], expected) for key, rows in per_pair.items()]
    derive_columns(pd.DataFrame(summary)).to_csv(sm.output.summary, index=False)  # and the declared formulas (GB/s)
    frames = [pd.read_csv(p) for p in sm.input.kernels]
    concat_tables(frames).to_csv(sm.output.kernels, index=False)
    # what this job wrote, so that an edit or a cut-short file is noticed at the next run (attnprof.runtime.integrity)
    from attnprof.runtime.integrity import record_checksums

    # the profiler's control (attnprof.analysis.control): its own file, never a row of the attention variants' tables
    from attnprof.analysis.control import control_row, control_table

    controls = []
    for status_path, forwards_path, ops_path in zip(sm.input.control_status, sm.input.control_forwards,
                                                    sm.input.control_ops, strict=True):
        _, row = capture_row(status_path, forwards_path)
        controls.append(control_row(row, pd.read_csv(ops_path)))
    control_table(controls).to_csv(sm.output.control, index=False)
    record_checksums(Path(sm.output.summary).parent, [sm.output.summary, sm.output.repeats, sm.output.kernels,
                                                      sm.output.control])
    print(f"{len(summary)} rows from {len(repeats)} captures; {len(controls)} captures of the control", file=log)
