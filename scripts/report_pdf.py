"""Snakemake script: report.pdf from report.html (rule report_pdf). Logic: attnprof.render.common."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    from attnprof.render.common import render_pdf

    render_pdf(sm.input.html, sm.output[0])
    print(f"wrote {sm.output[0]}", file=log)
