"""Snakemake script: the kernel timeline of one shape (rule timeline). Logic: attnprof.plots.timeline."""
import json

from attnprof.plots import timeline
from attnprof.tables import analyse_trace, forward_table
from attnprof.trace import load_trace

sm = snakemake  # noqa: F821
captures = []
with open(sm.log[0], "w") as log:
    for status_path, trace_path in zip(sm.input.status, sm.input.traces):
        status = json.loads(open(status_path).read())
        cap = {"variant": status["variant"], "status": status["status"]}
        if status["status"] == "ok":
            frames = analyse_trace(load_trace(trace_path), sm.params.range_name, expect_gpu=status.get("device") == "cuda")
            cap.update(frames=frames, forwards=forward_table(frames, status["variant"], status["shape_key"]))
        captures.append(cap)
        print(f"{status['variant']}: {status['status']}", file=log)
    timeline(captures, sm.output[0], sm.params.dpi)
