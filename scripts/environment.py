"""Snakemake script: env.json (rule environment). Logic: attnprof.measure.env."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    p = sm.params
    # an A/B run's environment (config environments): recorded from its own interpreter, never Snakemake's
    interp = dict(getattr(p, "interpreter", None) or {})
    from attnprof.measure.gpus import gpu_choice, job_environ, per_job_allocation, run_gpus

    # on one of the run's GPUs, pinned as a capture is: the same capture worker serves it, and what it records
    # (gpu_name, compute capability, SMs, memory) is that GPU's
    with job_environ(p.device, sm.resources, interp.get("env"), say=lambda m: print(f"attnprof: {m}", file=log)) as (
        _, env_vars,
    ):
        if p.mode == "worker":  # torch is imported and the device is up there already
            from attnprof.runtime.worker import call_in_worker

            recorded = call_in_worker(p.device, "attnprof.measure.env:capture_environment",
                                      idle_s=sm.resources.worker_idle_s,
                                      worker_log=Path(sm.log[0]).parent / "capture_worker.log",
                                      python=interp.get("python"), env=env_vars)
        elif interp:
            from attnprof.measure.env import call_in_interpreter

            recorded = call_in_interpreter(interp["python"], env_vars, "attnprof.measure.env:capture_environment")
        else:
            import os

            os.environ.update(env_vars or {})  # before torch is imported in this job process
            from attnprof.measure.env import capture_environment

            recorded = capture_environment()
    env = {"run": p.run, "device": p.device, **recorded, "config": p.config}
    # the GPUs the run's captures may take (attnprof.measure.gpus), as nvidia-smi lists them; not under a cluster
    # executor, where each capture job has an allocation of its own (its record names its GPU)
    if p.device == "cuda" and not per_job_allocation(sm.resources):
        env["gpus"] = [g.as_dict() for g in run_gpus(gpu_choice(sm.resources))]
    if getattr(p, "ab", None):  # the A/B run this result set belongs to: compare pairs it with its siblings
        env["ab"] = dict(p.ab)
    with open(sm.output[0], "w") as fh:
        json.dump(env, fh, indent=2, sort_keys=True, default=str)
