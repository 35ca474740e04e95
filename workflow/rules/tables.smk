# Stage 3: the run's summary.csv (one row per variant and shape) and kernels.csv (all rows).


rule summarize:
    input:
        code("tables", "backward"),
        status=per_capture("results/{run}/captures/{shape}/{variant}/status.json"),
        forwards=per_capture("results/{run}/tables/{shape}/{variant}/forwards.csv"),
        kernels=per_capture("results/{run}/tables/{shape}/{variant}/kernels.csv"),
        backwards=per_capture("results/{run}/tables/{shape}/{variant}/backwards.csv"),
    output:
        summary="results/{run}/summary.csv",
        kernels="results/{run}/kernels.csv",
    log:
        "results/{run}/logs/summarize.log",
    conda:
        "../envs/attnprof.yaml"
    script:
        "../../scripts/summarize.py"
