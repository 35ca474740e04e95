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
        [L.plot(name) for name in PLOT_NAMES],
    log:
        L.log("plots/{shape}"),
    params:
        dpi=config["plots"]["dpi"],
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
        [L.plot(name, shape=None) for name in SCALING_PLOT_NAMES],
    log:
        L.log("plots/scaling"),
    params:
        dpi=config["plots"]["dpi"],
    run:
        run_job(locals())


rule timeline:
    """One profiled forward per variant of a shape, drawn from the tables extract wrote (CPU launches, GPU work)."""
    input:
        code("timeline"),
        script=script_file("timeline"),
        status=lambda wc: STATE.at_shape(wc.run, wc.shape, "status"),
        recipes=lambda wc: STATE.at_shape(wc.run, wc.shape, "recipe", kind="table"),
        forwards=lambda wc: STATE.at_shape(wc.run, wc.shape, "forwards", kind="table"),
    output:
        L.plot(TIMELINE),
    log:
        L.log("plots/{shape}_timeline"),
    params:
        dpi=config["plots"]["dpi"],
    run:
        run_job(locals())
