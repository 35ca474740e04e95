# Stage 4: findings.json -- rules over the tables, and the study's expectations checked.


rule findings:
    input:
        code("findings", "fmt", "trace", "variants"),
        expectations=EXPECTATIONS,
        schema=str(
            Path(workflow.basedir) / "workflow" / "schemas" / "findings.schema.json"
        ),
        summary="results/{run}/summary.csv",
        kernels="results/{run}/kernels.csv",
        status=per_capture("results/{run}/captures/{shape}/{variant}/status.json"),
        launches=per_capture("results/{run}/tables/{shape}/{variant}/launches.csv"),
        ops=per_capture("results/{run}/tables/{shape}/{variant}/ops.csv"),
        device=per_capture("results/{run}/tables/{shape}/{variant}/device.json"),
    output:
        "results/{run}/findings.json",
    log:
        "results/{run}/logs/findings.log",
    conda:
        "../envs/attnprof.yaml"
    script:
        "../../scripts/findings.py"
