# Stage 4: findings.json -- rules over the tables, the study's expectations checked, and the
# hardware counters (where measured) beside the trace's occupancy estimates.

import glob


rule findings:
    input:
        code("findings"),
        script=script_file("findings"),
        expectations=EXPECTATIONS,
        schema=str(
            Path(workflow.basedir) / "workflow" / "schemas" / "findings.schema.json"
        ),
        summary=run_file("summary"),
        kernels=run_file("kernels"),
        status=per_capture(capture_file("status")),
        launches=per_capture(table_file("launches")),
        ops=per_capture(table_file("ops")),
        kernels_backward=per_capture(table_file("kernels_backward")),
        device=per_capture(table_file("device")),
        # the optional hardware counters (rule measure_counters), where they were measured: each
        # status .json and its table
        counters=lambda wc: sorted(glob.glob(f"results/{wc.run}/counters/*/*.json")),
        counter_tables=lambda wc: sorted(
            glob.glob(f"results/{wc.run}/counters/*/*.csv")
        ),
    output:
        run_file("findings"),
    log:
        "results/{run}/logs/findings.log",
    run:
        run_job(locals())
