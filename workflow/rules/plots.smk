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


rule scaling_plots:
    """Run-wide figures: device time, TFLOP/s and peak memory against seq_len; roofline."""
    input:
        code("plots"),
        summary="results/{run}/summary.csv",
        calibration="results/{run}/calibration.json",
    output:
        expand("results/{{run}}/plots/{name}.png", name=SCALING_PLOT_NAMES),
    log:
        "results/{run}/logs/plots/scaling.log",
    conda:
        "../envs/attnprof.yaml"
    params:
        dpi=config["plots"]["dpi"],
    script:
        "../../scripts/scaling_plots.py"
