"""Snakemake script: env.json (rule environment). Logic: attnprof.measure.env."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    p = sm.params
    # an A/B run's environment (config environments): recorded from its own interpreter, never Snakemake's
    interp = dict(getattr(p, "interpreter", None) or {})
    from attnprof.measure.env import capture_environment
    from attnprof.measure.gpus import gpu_choice, job_environ, per_job_allocation, run_gpus
    from attnprof.runtime.worker import call_where_captures_run

    # on one of the run's GPUs, pinned as a capture is, in the process the captures use (the warm capture worker:
    # torch is imported and the device is up there already): what it records (gpu_name, compute capability, SMs,
    # memory) is that GPU's
    with job_environ(p.device, sm.resources, interp.get("env"), say=lambda m: print(f"attnprof: {m}", file=log)) as (
        _, env_vars,
    ):
        recorded = call_where_captures_run(capture_environment, [], p.mode, p.device, sm.resources.worker_idle_s,
                                           Path(sm.log[0]).parent / "capture_worker.log", interp.get("python"),
                                           env_vars)
    from attnprof.model.names import FORMAT_KEY, FORMATS

    # in the current format (attnprof.model.formats): every version that writes it captures the profiler's control
    env = {FORMAT_KEY: FORMATS["env"], "run": p.run, "device": p.device, **recorded, "config": p.config,
           "captures_control": True}
    # the GPUs the run's captures may take (attnprof.measure.gpus), as nvidia-smi lists them; not under a cluster
    # executor, where each capture job has an allocation of its own (its record names its GPU)
    if p.device == "cuda" and not per_job_allocation(sm.resources):
        env["gpus"] = [g.as_dict() for g in run_gpus(gpu_choice(sm.resources))]
    if getattr(p, "ab", None):  # the A/B run this result set belongs to: compare pairs it with its siblings
        env["ab"] = dict(p.ab)
    with open(sm.output[0], "w") as fh:
        json.dump(env, fh, indent=2, sort_keys=True, default=str)
