"""Snakemake script: the kernel timeline of one shape (rule timeline). Logic: attnprof.render.plots.timeline."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    from attnprof.render.plots import timeline
    from attnprof.analysis.records import load_record
    from attnprof.analysis.tables import analyse_trace, forward_table
    from attnprof.analysis.trace import load_trace

    captures = []
    for status_path, trace_path in zip(sm.input.status, sm.input.traces):
        status = load_record(status_path, ("variant", "status", "shape_key"))  # a clear error naming file and key
        cap = {"variant": status["variant"], "status": status["status"]}
        if status["status"] == "ok":
            range_name = status.get("range_name") or sm.params.range_name  # the capture's own record first
            frames = analyse_trace(load_trace(trace_path), range_name, expect_gpu=status.get("device") == "cuda")
            cap.update(frames=frames, forwards=forward_table(frames, status["variant"], status["shape_key"]))
        captures.append(cap)
        print(f"{status['variant']}: {status['status']}", file=log)
    timeline(captures, sm.output[0], sm.params.dpi)
