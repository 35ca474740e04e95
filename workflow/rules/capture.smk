# Stage 1: one torch.profiler capture per (shape, variant): by default in the run's warm
# capture process (attnprof.runtime.worker), restarted after any capture that did not fully succeed;
# capture_mode: process runs each in a fresh process.


rule capture:
    """Warm up, trace the forwards with torch.profiler, check against float64, time."""
    input:
        # every module the script imports; variants.py through the per-variant fingerprint (params)
        code("capture", exclude=("model/variants.py", "measure/forwards.py")),
        script=script_file("capture"),
    output:
        trace=capture_file("trace", run=f"{{run,{THIS_RUN}}}"),
        status=capture_file("status", run=f"{{run,{THIS_RUN}}}"),
    log:
        L.capture_log("capture"),
    # The repeats run in rounds, round-robin over the variants and shapes (so that a drift in clocks or load hits
    # all of them alike): Snakemake starts the captures of repeat k before any of repeat k + 1, and the capture
    # worker serves them in the order they came (attnprof.runtime.worker; a new round gets a fresh capture process).
    # In an A/B run (config environments) round k of every environment runs before round k + 1 of any, A,B in odd
    # rounds and B,A in even ones (ABBA: a drift over the run cancels from the paired ratio; common.smk).
    priority: lambda wc: PLAN.capture_priority(wc.run, wc.repeat, wc.variant)
    group:
        AB_GROUP
    # On a CPU run a capture takes every core, so no other job disturbs its CPU timings; on a GPU run its client
    # holds none (CLIENT_THREADS, common.smk).
    threads: CLIENT_THREADS
    resources:
        capture=GPU_UNITS,
        gpu=GPU_UNITS if DEVICE == "cuda" else 0,
        capture_clients=CLIENT_UNITS,
        # how long the worker waits for the next capture: a resource, not a param (it changes no measurement,
        # so a new value must not recapture anything)
        worker_idle_s=WORKER_IDLE_S,
        # the GPUs this job may take one of (a resource: another choice recaptures nothing)
        gpu_choice=PLAN.gpu_choice,
    params:
        # an A/B run's only: the Python executable and variables of the result set's environment
        **AB_CAPTURE_PARAMS,
        device=DEVICE,
        # the torch build of the result set's environment (an A/B run's: read from its interpreter, common.smk)
        torch_version=lambda wc: PLAN.torch_version_of(wc.run),
        threads=CAPTURE_THREADS,
        # the code this variant runs (not all of variants.py): editing one variant reruns only it
        variant_code=lambda wc: variant_fingerprint(wc.variant, CUSTOM.get(wc.variant)),
        custom=lambda wc: CUSTOM.get(wc.variant),
        profiler=config["profiler"],
        passes=config["passes"],
        timing=config["timing"],
        seed=config["seed"],
        tolerance=config["tolerance"],
        timeout_s=config["capture_timeout_s"],
        mode=PLAN.capture_mode,
    run:
        run_job(locals())


rule environment:
    """GPU, driver, torch, CUDA, cuDNN, Python and Snakemake versions, and the config."""
    input:
        code("environment"),
        script=script_file("environment"),
    output:
        run_file("env", run=f"{{run,{THIS_RUN}}}"),
    log:
        L.log("environment"),
    group:
        AB_GROUP
    # the threads of a capture: the job's environment has OMP_NUM_THREADS and friends from them (as a
    # script: job's, attnprof.runtime.jobs.script_environment), so the recorded torch_threads are the captures'
    # own (and the same capture worker serves both); as a capture's client, it holds no core on a GPU run
    threads: CLIENT_THREADS
    resources:
        capture_clients=CLIENT_UNITS,
        worker_idle_s=WORKER_IDLE_S,
        gpu_choice=PLAN.gpu_choice,
    params:
        # an A/B run's only: the environment's interpreter, and the A/B record env.json carries (key ab)
        **AB_ENV_PARAMS,
        config=config,
        device=DEVICE,
        run=lambda wc: wc.run,
        torch_version=lambda wc: PLAN.torch_version_of(wc.run),
        threads=CAPTURE_THREADS,
        mode=PLAN.capture_mode,
    run:
        run_job(locals())


rule calibrate:
    """Measured GEMM TFLOP/s and copy bandwidth of the device, once per run."""
    input:
        code("calibrate"),
        script=script_file("calibrate"),
    output:
        run_file("calibration", run=f"{{run,{THIS_RUN}}}"),
    log:
        L.log("calibrate"),
    group:
        AB_GROUP
    threads: CAPTURE_THREADS  # as a capture's: the same worker serves it
    resources:
        capture=GPU_UNITS,
        gpu=GPU_UNITS if DEVICE == "cuda" else 0,
        worker_idle_s=WORKER_IDLE_S,
        gpu_choice=PLAN.gpu_choice,
    params:
        **AB_CAPTURE_PARAMS,
        device=DEVICE,
        torch_version=lambda wc: PLAN.torch_version_of(wc.run),
        mode=PLAN.capture_mode,
    run:
        run_job(locals())


# A result set that is not the current one is never captured into here (see common.smk).
# Its output is the status only: Snakemake deletes a job's outputs before running it, and the
# trace of a result set captured elsewhere is primary data that must survive the refusal.
rule capture_elsewhere:
    output:
        status=capture_file("status", run=f"{{run,{OTHER_RUN}}}"),
    log:
        ".snakemake/attnprof/elsewhere/{run}/capture/{shape}/{variant}/r{repeat}.log",
    run:
        refuse_elsewhere(wildcards.run, log[0])


rule environment_elsewhere:
    output:
        run_file("env", run=f"{{run,{OTHER_RUN}}}"),
    log:
        ".snakemake/attnprof/elsewhere/{run}/environment.log",
    run:
        refuse_elsewhere(wildcards.run, log[0])


rule calibrate_elsewhere:
    output:
        run_file("calibration", run=f"{{run,{OTHER_RUN}}}"),
    log:
        ".snakemake/attnprof/elsewhere/{run}/calibrate.log",
    run:
        refuse_elsewhere(wildcards.run, log[0])
