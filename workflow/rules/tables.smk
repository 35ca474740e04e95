# Stage 3: the run's summary.csv (one row per variant and shape) and kernels.csv (all rows).


rule summarize:
    input:
        code("tables", "backward", "stats"),
        script=script_file("summarize"),
        status=per_capture(capture_file("status"), all_repeats=True),
        forwards=per_capture(table_file("forwards"), all_repeats=True),
        kernels=per_capture(table_file("kernels")),
        backwards=per_capture(table_file("backwards"), all_repeats=True),
    output:
        summary=run_file("summary"),
        repeats=run_file("repeats"),
        kernels=run_file("kernels"),
    log:
        "results/{run}/logs/summarize.log",
    conda:
        "../envs/attnprof.yaml"
    params:
        # captures lost since the summary was made (common.smk): a change here reruns summarize, which
        # needs them again
        lost=lambda wc: LOST_CAPTURES if wc.run == RUN else [],
        # the between-run interval's level (the compare verdict's, attnprof.stats)
        confidence=config["compare"].get("confidence", 0.95),
    run:
        run_job(locals())
