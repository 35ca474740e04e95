"""Snakemake script: env.json (rule environment). Logic: attnprof.measure.env."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    p = sm.params
    if p.mode == "worker":  # torch is imported and the device is up there already
        from attnprof.runtime.worker import call_in_worker

        recorded = call_in_worker(p.device, "attnprof.measure.env:capture_environment", idle_s=sm.resources.worker_idle_s,
                                  worker_log=Path(sm.log[0]).parent / "capture_worker.log")
    else:
        from attnprof.measure.env import capture_environment

        recorded = capture_environment()
    env = {"run": p.run, "device": p.device, **recorded, "config": p.config}
    with open(sm.output[0], "w") as fh:
        json.dump(env, fh, indent=2, sort_keys=True, default=str)
