"""Snakemake script: calibration.json (rule calibrate). Logic: attnprof.measure.calibrate."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    p = sm.params
    interp = dict(getattr(p, "interpreter", None) or {})  # an A/B run's environment (config environments)
    if p.mode == "worker":  # on the device the captures use, in the same warm process
        from attnprof.runtime.worker import call_in_worker

        result = call_in_worker(p.device, "attnprof.measure.calibrate:calibrate", [p.device], idle_s=sm.resources.worker_idle_s,
                                worker_log=Path(sm.log[0]).parent / "capture_worker.log", python=interp.get("python"),
                                env=interp.get("env"))
    elif interp:
        from attnprof.measure.env import call_in_interpreter

        result = call_in_interpreter(interp["python"], interp.get("env"), "attnprof.measure.calibrate:calibrate", [p.device])
    else:
        from attnprof.measure.calibrate import calibrate

        result = calibrate(p.device)
    with open(sm.output[0], "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    print(json.dumps(result), file=log)
