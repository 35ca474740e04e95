# Stage 5: matplotlib figures per shape.


rule plots:
    input:
        code("plots"),
        summary="results/{run}/summary.csv",
        kernels="results/{run}/kernels.csv",
    output:
        expand("results/{{run}}/plots/{{shape}}/{name}.png", name=PLOT_NAMES),
    log:
        "results/{run}/logs/plots/{shape}.log",
    conda:
        "../envs/attnprof.yaml"
    params:
        dpi=config["plots"]["dpi"],
        top=config["plots"]["top_kernels"],
    script:
        "../../scripts/plots.py"
