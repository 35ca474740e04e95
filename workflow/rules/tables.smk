# Stage 3: the run's summary.csv (one row per variant and shape) and kernels.csv (all rows).


rule summarize:
    input:
        code("tables", "backward"),
        script=script_file("summarize"),
        status=per_capture(capture_file("status")),
        forwards=per_capture(table_file("forwards")),
        kernels=per_capture(table_file("kernels")),
        backwards=per_capture(table_file("backwards")),
    output:
        summary=run_file("summary"),
        kernels=run_file("kernels"),
    log:
        "results/{run}/logs/summarize.log",
    conda:
        "../envs/attnprof.yaml"
    params:
        # captures lost since the summary was made (common.smk): a change here reruns summarize, which
        # needs them again
        lost=lambda wc: LOST_CAPTURES if wc.run == RUN else [],
    run:
        run_job(locals())
