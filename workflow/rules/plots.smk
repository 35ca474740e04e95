# Stage 5: matplotlib figures per shape.

# Snakemake's own report (snakemake --report report.zip; docs/running.md): the report and the figures that
# hold data are marked with report(), a caption (report/captions/<name>.rst) and a category. The report's
# menu sorts the categories by name: the numbers keep them in reading order.
REPORT_CATEGORIES = {
    "report": "1. Report",
    "sweep": "2. Across shapes",
    "shape": "3. Per shape",
}
# The captions, report/captions/<name>.rst: relative to this rules file, as Snakemake reads caption paths
REPORT_CAPTIONS = "../../report/captions"


rule plots:
    input:
        code("plots"),
        script=script_file("plots"),
        summary=run_file("summary"),
        kernels=run_file("kernels"),
    output:
        [f"results/{{run}}/plots/{{shape}}/{name}.png" for name in PLOT_NAMES],
    log:
        "results/{run}/logs/plots/{shape}.log",
    params:
        dpi=config["plots"]["dpi"],
        top=config["plots"]["top_kernels"],
    run:
        run_job(locals())


rule scaling_plots:
    """Run-wide figures: device time, TFLOP/s and peak memory against seq_len; roofline."""
    input:
        code("scaling_plots"),
        script=script_file("scaling_plots"),
        summary=run_file("summary"),
        calibration=run_file("calibration"),
    output:
        [f"results/{{run}}/plots/{name}.png" for name in SCALING_PLOT_NAMES],
    log:
        "results/{run}/logs/plots/scaling.log",
    params:
        dpi=config["plots"]["dpi"],
    run:
        run_job(locals())


rule timeline:
    """One profiled forward per variant of a shape, drawn from the tables extract wrote (CPU launches, GPU work)."""
    input:
        code("timeline"),
        script=script_file("timeline"),
        status=lambda wc: expand(
            capture_file("status"),
            run=wc.run,
            shape=wc.shape,
            variant=grid(wc.run)[1],
            repeat=1,
        ),
        recipes=lambda wc: expand(
            table_file("recipe"),
            run=wc.run,
            shape=wc.shape,
            variant=grid(wc.run)[1],
            repeat=1,
        ),
        forwards=lambda wc: expand(
            table_file("forwards"),
            run=wc.run,
            shape=wc.shape,
            variant=grid(wc.run)[1],
            repeat=1,
        ),
    output:
        f"results/{{run}}/plots/{{shape}}/{TIMELINE}.png",
    log:
        "results/{run}/logs/plots/{shape}_timeline.log",
    params:
        dpi=config["plots"]["dpi"],
    run:
        run_job(locals())
