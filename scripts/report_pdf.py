"""Snakemake script: report.pdf from report.html (rule report_pdf). Logic: attnprof.report."""
from attnprof.report import render_pdf

sm = snakemake  # noqa: F821
render_pdf(sm.input.html, sm.output[0])
with open(sm.log[0], "w") as log:
    print(f"wrote {sm.output[0]}", file=log)
