# Stage 1: one torch.profiler capture per (shape, variant): by default in the run's warm
# capture process (attnprof.worker), restarted after any capture that did not fully succeed;
# capture_mode: process runs each in a fresh process.


rule capture:
    wildcard_constraints:
        run=THIS_RUN,
    """Warm up, trace the forwards with torch.profiler, check against float64, time."""
    input:
        code("capture", "worker"),
    output:
        trace="results/{run}/captures/{shape}/{variant}/trace.json.gz",
        status="results/{run}/captures/{shape}/{variant}/status.json",
    log:
        "results/{run}/logs/capture/{shape}/{variant}.log",
    conda:
        "../envs/attnprof.yaml"
    # On a CPU run a capture takes every core, so no other job disturbs its CPU timings.
    threads: workflow.cores if DEVICE == "cpu" else 1
    resources:
        capture=1,
        gpu=1 if DEVICE == "cuda" else 0,
    params:
        device=DEVICE,
        torch_version=TORCH_VERSION,
        # the code this variant runs (not all of variants.py): editing one variant reruns only it
        variant_code=lambda wc: variant_fingerprint(wc.variant, CUSTOM.get(wc.variant)),
        custom=lambda wc: CUSTOM.get(wc.variant),
        profiler=config["profiler"],
        timing=config["timing"],
        seed=config["seed"],
        tolerance=config["tolerance"],
        timeout_s=config["capture_timeout_s"],
        mode=config["capture_mode"],
        worker_idle_s=config["capture_worker_idle_s"],
    script:
        "../../scripts/capture.py"


rule environment:
    wildcard_constraints:
        run=THIS_RUN,
    """GPU, driver, torch, CUDA, cuDNN, Python and Snakemake versions, and the config."""
    input:
        code("env", "worker"),
    output:
        "results/{run}/env.json",
    log:
        "results/{run}/logs/environment.log",
    conda:
        "../envs/attnprof.yaml"
    # the threads of a capture: Snakemake sets OMP_NUM_THREADS and friends from them, so the
    # recorded torch_threads are the captures' own (and the same capture worker serves both)
    threads: workflow.cores if DEVICE == "cpu" else 1
    params:
        config=config,
        device=DEVICE,
        run=RUN,
        torch_version=TORCH_VERSION,
        mode=config["capture_mode"],
        worker_idle_s=config["capture_worker_idle_s"],
    script:
        "../../scripts/environment.py"


rule calibrate:
    wildcard_constraints:
        run=THIS_RUN,
    """Measured GEMM TFLOP/s and copy bandwidth of the device, once per run."""
    input:
        code("calibrate", "worker"),
    output:
        "results/{run}/calibration.json",
    log:
        "results/{run}/logs/calibrate.log",
    conda:
        "../envs/attnprof.yaml"
    threads: workflow.cores if DEVICE == "cpu" else 1  # as a capture's: the same worker serves it
    resources:
        capture=1,
        gpu=1 if DEVICE == "cuda" else 0,
    params:
        device=DEVICE,
        torch_version=TORCH_VERSION,
        mode=config["capture_mode"],
        worker_idle_s=config["capture_worker_idle_s"],
    script:
        "../../scripts/calibrate.py"


# A result set that is not the current one is never captured into here (see common.smk).
# Its output is the status only: Snakemake deletes a job's outputs before running it, and the
# trace of a result set captured elsewhere is primary data that must survive the refusal.
rule capture_elsewhere:
    wildcard_constraints:
        run=OTHER_RUN,
    output:
        status="results/{run}/captures/{shape}/{variant}/status.json",
    run:
        raise WorkflowError(captured_elsewhere(wildcards.run))


rule environment_elsewhere:
    wildcard_constraints:
        run=OTHER_RUN,
    output:
        "results/{run}/env.json",
    run:
        raise WorkflowError(captured_elsewhere(wildcards.run))


rule calibrate_elsewhere:
    wildcard_constraints:
        run=OTHER_RUN,
    output:
        "results/{run}/calibration.json",
    run:
        raise WorkflowError(captured_elsewhere(wildcards.run))
