# Stage 6: report.html (self-contained, jinja2) and report.pdf (WeasyPrint, from the HTML).


rule report_html:
    input:
        code("report", "fmt", "findings/metrics"),
        template=str(REPORT_DIR / "report.html.j2"),
        css=str(REPORT_DIR / "report.css"),
        expectations=EXPECTATIONS,
        summary="results/{run}/summary.csv",
        kernels="results/{run}/kernels.csv",
        findings="results/{run}/findings.json",
        env="results/{run}/env.json",
        plots=plot_files,
        calibration="results/{run}/calibration.json",
        launches=per_capture("results/{run}/tables/{shape}/{variant}/launches.csv"),
    output:
        "results/{run}/report.html",
    log:
        "results/{run}/logs/report_html.log",
    conda:
        "../envs/attnprof.yaml"
    script:
        "../../scripts/report_html.py"


rule report_pdf:
    """Renders the HTML; needs WeasyPrint and Pango, not the GPU or the traces."""
    input:
        code("report"),
        html="results/{run}/report.html",
    output:
        "results/{run}/report.pdf",
    log:
        "results/{run}/logs/report_pdf.log",
    conda:
        "../envs/attnprof.yaml"
    script:
        "../../scripts/report_pdf.py"
