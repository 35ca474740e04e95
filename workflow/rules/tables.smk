# Stage 3: the run's summary.csv (one row per variant and shape) and kernels.csv (all rows).


rule summarize:
    input:
        # every record is checked against env.json where it exists (scripts/summarize.py, attnprof.analysis.records): not an
        # input, so that a rewritten env.json (a plot setting, recorded with the config) does not rerun summarize;
        # a result set's first env.json is written by the machine that captures it, so it agrees by construction
        code("summarize"),
        current_set_checks,  # the current result set's checks (common.smk); no file
        script=script_file("summarize"),
        status=per_capture(capture_file("status"), all_repeats=True),
        forwards=per_capture(table_file("forwards"), all_repeats=True),
        kernels=per_capture(table_file("kernels")),
        backwards=per_capture(table_file("backwards"), all_repeats=True),
        # the profiler's control (common.smk control_shapes): its own control.csv, never a row of summary.csv
        control_status=control_capture(capture_file("status")),
        control_forwards=control_capture(table_file("forwards")),
        control_ops=control_capture(table_file("ops")),
    output:
        summary=run_file("summary"),
        repeats=run_file("repeats"),
        kernels=run_file("kernels"),
        control=run_file("control"),
    log:
        "results/{run}/logs/summarize.log",
    params:
        # captures and derived files lost (or changed) since the summary was made (common.smk): the epoch changes,
        # summarize and everything after it rerun, and every missing input on the way is made again
        rebuild=lambda wc: REBUILD_EPOCH if wc.run == RUN else "0",
        # the between-run interval's level (the compare verdict's, attnprof.analysis.stats)
        confidence=config["compare"].get("confidence", 0.95),
    run:
        run_job(locals())
