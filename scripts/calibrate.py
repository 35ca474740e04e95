"""Snakemake script: calibration.json (rule calibrate). Logic: attnprof.measure.calibrate."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path

    p = sm.params
    if p.mode == "worker":  # on the device the captures use, in the same warm process
        from attnprof.runtime.worker import call_in_worker

        result = call_in_worker(p.device, "attnprof.measure.calibrate:calibrate", [p.device], idle_s=sm.resources.worker_idle_s,
                                worker_log=Path(sm.log[0]).parent / "capture_worker.log")
    else:
        from attnprof.measure.calibrate import calibrate

        result = calibrate(p.device)
    with open(sm.output[0], "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
    print(json.dumps(result), file=log)
