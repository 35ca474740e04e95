"""Snakemake script: one capture (rule capture). Logic: attnprof.measure.capture, attnprof.runtime.isolation,
attnprof.runtime.worker."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821 (injected by Snakemake)
with script_log(sm.log[0]) as log:
    from pathlib import Path
    from attnprof.measure.gpus import job_environ
    from attnprof.runtime.isolation import CaptureInterrupted, run_isolated
    from attnprof.model.variants import Shape

    p = sm.params
    spec = {
        "variant": sm.wildcards.variant,
        "repeat": int(sm.wildcards.repeat),
        **({"custom": dict(p.custom)} if p.custom else {}),
        "shape": Shape.from_key(sm.wildcards.shape).as_dict(),
        "device": p.device,
        "schedule": dict(p.profiler["schedule"]),
        "warmup_calls": p.profiler["warmup_calls"],
        "range_name": p.profiler["range_name"],
        "passes": list(p.passes),
        "min_complete_forwards": p.profiler["min_complete_forwards"],
        "timing": dict(p.timing),
        "seed": p.seed,
        "tolerance": dict(p.tolerance),
    }
    # an A/B run's environment (config environments): its Python executable and variables; else this one
    interp = dict(getattr(p, "interpreter", None) or {})
    try:
        # the GPU this capture runs on (several: the first free one, held until the capture ends), pinned by its UUID
        with job_environ(p.device, sm.resources, interp.get("env"), say=lambda m: print(f"attnprof: {m}", file=log)) as (
            gpu, env,
        ):
            if gpu is not None:
                spec["gpu"] = gpu.as_dict()
            if p.mode == "worker":
                from attnprof.runtime.worker import run_in_worker

                worker_log = Path(sm.log[0]).parents[3] / "capture_worker.log"  # results/<run>/logs/
                record = run_in_worker(spec, sm.output.trace, sm.output.status, p.timeout_s, sm.resources.worker_idle_s,
                                       worker_log, interp.get("python"), env)
            else:
                record = run_isolated(spec, sm.output.trace, sm.output.status, p.timeout_s, python=interp.get("python"),
                                      env=env)
        if record.get("gpu_mismatch"):
            # the process saw another GPU than the job held and locked: no measurement, the job fails and reruns
            for out in (sm.output.status, sm.output.trace):
                Path(out).unlink(missing_ok=True)
            raise CaptureInterrupted(record.get("reason"))
    except CaptureInterrupted as exc:
        # no result: the job fails, Snakemake removes its outputs, the next run captures again
        print(f"attnprof: {exc}", file=log)
        raise SystemExit(f"attnprof: {exc}") from None
