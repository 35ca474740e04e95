"""Snakemake script: the kernel timeline of one shape (rule timeline), drawn from the tables rule extract wrote (each
variant's recipe.csv and forwards.csv, repeat 1), as the report's interactive timeline is. Logic:
attnprof.render.timeline_html.lane (the bars), attnprof.render.plots.timeline (the figure)."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    from attnprof.analysis.records import load_status
    from attnprof.render.plots import timeline
    from attnprof.render.timeline_html import lane, load_captures

    rows, gpu = [], False
    for status_path in sm.input.status:
        status = load_status(status_path, ("variant", "status", "shape_key"))  # a clear error naming file and key
        rows.append({"variant": status["variant"], "status": status["status"]})
        gpu = gpu or status.get("device") == "cuda"
        print(f"{status['variant']}: {status['status']}", file=log)
    lanes = [lane(c, gpu) for c in load_captures(rows, sm.input.recipes, sm.input.forwards, sm.wildcards.shape)]
    timeline(lanes, sm.output[0], sm.params.dpi)
