"""Snakemake script: calibration.json (rule calibrate). Logic: attnprof.measure.calibrate."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    from attnprof.measure.gpus import job_environ

    p = sm.params
    interp = dict(getattr(p, "interpreter", None) or {})  # an A/B run's environment (config environments)
    # on one of the run's GPUs, held as a capture holds it (several GPUs: the first free one), pinned by its UUID
    with job_environ(p.device, sm.resources, interp.get("env"), say=lambda m: print(f"attnprof: {m}", file=log)) as (gpu, env):
        args = [p.device, gpu.as_dict() if gpu is not None else None]
        if p.mode == "worker":  # on the device the captures use, in the same warm process
            from attnprof.runtime.worker import call_in_worker

            result = call_in_worker(p.device, "attnprof.measure.calibrate:calibrate", args, idle_s=sm.resources.worker_idle_s,
                                    worker_log=Path(sm.log[0]).parent / "capture_worker.log", python=interp.get("python"),
                                    env=env)
        elif interp:
            from attnprof.measure.env import call_in_interpreter

            result = call_in_interpreter(interp["python"], env, "attnprof.measure.calibrate:calibrate", args)
        else:
            import os

            os.environ.update(env or {})  # before torch is imported in this job process: cuda:0 is the GPU held
            from attnprof.measure.calibrate import calibrate

            result = calibrate(*args)
    with open(sm.output[0], "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    print(json.dumps(result), file=log)
