"""Snakemake script: calibration.json (rule calibrate). Logic: attnprof.measure.calibrate."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    from attnprof.measure.calibrate import calibrate
    from attnprof.measure.gpus import job_environ
    from attnprof.runtime.worker import call_where_captures_run

    p = sm.params
    interp = dict(getattr(p, "interpreter", None) or {})  # an A/B run's environment (config environments)
    # on one of the run's GPUs, held as a capture holds it (several GPUs: the first free one), pinned by its UUID, in
    # the process the captures use
    with job_environ(p.device, sm.resources, interp.get("env"), say=lambda m: print(f"attnprof: {m}", file=log)) as (gpu, env):
        result = call_where_captures_run(calibrate, [p.device, gpu.as_dict() if gpu is not None else None], p.mode,
                                         p.device, sm.resources.worker_idle_s,
                                         Path(sm.log[0]).parent / "capture_worker.log", interp.get("python"), env)
    with open(sm.output[0], "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    print(json.dumps(result), file=log)
