# Optional stage: hardware counters (Nsight Compute) of the kernels of one forward per
# (shape, variant), run only when asked: snakemake --cores 1 counters. Never fails the
# workflow for a missing ncu, missing permission or a CPU run: the status .json says why.
COUNTER_VARIANTS = [v for v in config["counters"]["variants"] if v in VARIANTS]
COUNTER_SHAPES = SHAPES if config["counters"]["shapes"] == "all" else SHAPES[:1]


rule counters:
    """Every (shape, variant) of the counters config of the current result set."""
    input:
        [
            L.counters("json", RUN, s, v)
            for s in COUNTER_SHAPES
            for v in COUNTER_VARIANTS
        ],


rule measure_counters:
    """ncu --clock-control none on the kernels of one forward after warm-up."""
    input:
        code("counters"),
        script=script_file("counters"),
        # after every capture of the result set: in capture_mode worker the captures take no
        # 'capture' resource (the worker keeps them apart), so the resource alone would not
        captures=per_capture("status", kind="capture"),
    output:
        csv=L.counters("csv", f"{{run,{THIS_RUN}}}"),
        status=L.counters("json", f"{{run,{THIS_RUN}}}"),
    log:
        L.log("counters/{shape}/{variant}"),
    # never beside a capture on the GPU (the input above), nor beside another counters job
    resources:
        capture=1,
        gpu=1 if DEVICE == "cuda" else 0,
    params:
        device=DEVICE,
        torch_version=PLAN.torch_version,
        custom=lambda wc: CUSTOM.get(wc.variant),
        seed=config["seed"],
        warmup_calls=config["counters"]["warmup_calls"],
        timeout_s=config["counters"]["timeout_s"],
    run:
        run_job(locals())
