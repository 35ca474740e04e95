# Stage 4: findings.json -- rules over the tables, and the study's expectations checked.


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
    output:
        run_file("findings"),
    log:
        "results/{run}/logs/findings.log",
    run:
        run_job(locals())
