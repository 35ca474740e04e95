# Stage 5: matplotlib figures per shape.


rule plots:
    input:
        code("plots"),
        script=script_file("plots"),
        summary=run_file("summary"),
        kernels=run_file("kernels"),
    output:
        expand("results/{{run}}/plots/{{shape}}/{name}.png", name=PLOT_NAMES),
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
        expand("results/{{run}}/plots/{name}.png", name=SCALING_PLOT_NAMES),
    log:
        "results/{run}/logs/plots/scaling.log",
    params:
        dpi=config["plots"]["dpi"],
    run:
        run_job(locals())


rule timeline:
    """One profiled forward per variant of a shape, drawn from the traces (CPU launches, GPU work)."""
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
        traces=lambda wc: expand(
            capture_file("trace"),
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
        range_name=config["profiler"]["range_name"],
    run:
        run_job(locals())
