"""Snakemake script: history.html (rule history_html). Logic: attnprof.render.history (the context) and
attnprof.render.history_plot (one plot per variant, embedded)."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    import tempfile
    from pathlib import Path
    from attnprof.render.history import history_context
    from attnprof.render.history_plot import variant_plot
    from attnprof.render.common import data_uri, render_html

    doc = json.loads(Path(sm.input.json).read_text())
    labels = [b["label"] for b in doc["builds"]]
    unit = "host ms / forward" if doc["time_column"].startswith("cpu_") else "device ms / forward"
    plots = {}
    with tempfile.TemporaryDirectory() as tmp:
        # a figure only where the variant has a time in some build (one unsupported in every build has none)
        timed = [c["variant"] for c in doc["cells"] if any(t["center"] is not None for t in c["times"])]
        for variant in dict.fromkeys(timed):
            path = Path(tmp) / f"{variant}.png"
            variant_plot([c for c in doc["cells"] if c["variant"] == variant], labels, unit, path)
            plots[variant] = data_uri(path)
    context = history_context(doc, Path(sm.input.css).read_text(), plots)
    Path(sm.output[0]).write_text(render_html(context, Path(sm.input.template).parent, Path(sm.input.template).name))
    print(f"{len(plots)} variants, {len(context['page1'])} statements on page 1", file=log)
