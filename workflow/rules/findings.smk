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
        status=per_capture("status", kind="capture"),
        launches=per_capture("launches"),
        ops=per_capture("ops"),
        kernels_backward=per_capture("kernels_backward"),
        device=per_capture("device"),
        # the optional hardware counters (rule measure_counters), where they were measured: each
        # status .json and its table
        counters=lambda wc: sorted(glob.glob(L.counters("json", wc.run, "*", "*"))),
        counter_tables=lambda wc: sorted(glob.glob(L.counters("csv", wc.run, "*", "*"))),
    output:
        run_file("findings"),
    log:
        L.log("findings"),
    run:
        run_job(locals())
