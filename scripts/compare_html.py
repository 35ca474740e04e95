"""Snakemake script: compare.html (rule compare_html). Logic: attnprof.render.compare."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    from attnprof.render.common import render_html
    from attnprof.render.compare import compare_context

    doc = json.loads(Path(sm.input.json).read_text())
    html = render_html(compare_context(doc, Path(sm.input.css).read_text()), Path(sm.input.template).parent, Path(sm.input.template).name)
    Path(sm.output[0]).write_text(html)
    print(f"{len(doc['pairs'])} comparisons rendered", file=log)
