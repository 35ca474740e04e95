# Stage 3: the run's summary.csv (one row per variant and shape) and kernels.csv (all rows).


rule summarize:
    input:
        code("summarize"),
        # the result set's rebuild marker (rule rebuild below), where something of it was lost or changed
        rebuild=rebuild_marker,
        # every record is checked against env.json (scripts/summarize.py, attnprof.analysis.records). Not ancient():
        # Snakemake then skips the own triggers of every job after summarize whenever env.json is rewritten (a
        # plot setting: env.json records the config), and the plots would keep their old setting
        env=run_file("env"),
        script=script_file("summarize"),
        status=per_capture("status", all_repeats=True, kind="capture"),
        forwards=per_capture("forwards", all_repeats=True),
        kernels=per_capture("kernels"),
        backwards=per_capture("backwards", all_repeats=True),
        # the profiler's control (common.smk control_shapes): its own control.csv, never a row of summary.csv
        control_status=control_capture("status", kind="capture"),
        control_forwards=control_capture("forwards"),
        control_ops=control_capture("ops"),
    output:
        summary=run_file("summary"),
        repeats=run_file("repeats"),
        kernels=run_file("kernels"),
        control=run_file("control"),
    log:
        L.log("summarize"),
    params:
        # the between-run interval's level (the compare verdict's, attnprof.analysis.stats)
        confidence=config["compare"].get("confidence", 0.95),
    run:
        run_job(locals())


rule rebuild:
    """Marks a result set to be remade: written when something of it is gone or changed (common.smk rebuild_marker),
    after every lost per-capture table was made again; summarize reads the marker, so it reruns by modification
    time (a result set copied here has no Snakemake record for a changed parameter to rerun it), and with it
    everything after it, once."""
    input:
        # every per-capture table of the result set, so that a lost one is made again first; ancient, and always
        # all of them: neither a newer table nor a changed list reruns this rule
        lambda wc: [ancient(p) for p in STATE.tables(wc.run)],
    output:
        L.rebuild_marker(),
    log:
        L.log("rebuild/epoch-{epoch}"),
    run:
        Path(output[0]).write_text(
            f"rebuild epoch {wildcards.epoch}: made again: {' '.join(STATE.remade(wildcards.run))}\n"
        )
