# Stage 5: matplotlib figures per shape.


rule plots:
    input:
        code("plots"),
        summary="results/{run}/summary.csv",
        kernels="results/{run}/kernels.csv",
    output:
        expand(
            "results/{{run}}/plots/{{shape}}/{name}.png",
            name=["device_time", "kernels_per_forward", "kernel_split", "cpu_vs_device"],
        ),
    params:
        dpi=config["plots"]["dpi"],
        top=config["plots"]["top_kernels"],
    log:
        "results/{run}/logs/plots/{shape}.log",
    script:
        "../../scripts/plots.py"
