# Stage 6: report.html (self-contained, jinja2) and report.pdf (WeasyPrint, from the HTML).


rule report_html:
    input:
        code("report_html"),
        script=script_file("report_html"),
        template=str(REPORT_DIR / "report.html.j2"),
        # page 1's findings, included by the report's template
        brief_template=str(REPORT_DIR / "brief.html.j2"),
        css=str(REPORT_DIR / "report.css"),
        expectations=EXPECTATIONS,
        summary=run_file("summary"),
        repeats=run_file("repeats"),
        kernels=run_file("kernels"),
        findings=run_file("findings"),
        env=run_file("env"),
        plots=plot_files,
        # the same figures, those with data marked for Snakemake's report (plots.smk)
        figures=report_figures,
        calibration=run_file("calibration"),
        launches=per_capture("launches"),
        # the interactive timeline (attnprof.render.timeline_html): each capture's recipe and forwards, repeat 1
        recipes=per_capture("recipe"),
        forwards=per_capture("forwards"),
        # the profiler's self-check (control.csv); none in a result set made before the control (common.smk)
        control=lambda wc: STATE.control_table(wc.run),
    output:
        report(
            run_file("html"),
            caption=f"{REPORT_CAPTIONS}/report_html.rst",
            category=REPORT_CATEGORIES["report"],
            labels={"result set": "{run}", "format": "HTML"},
        ),
    log:
        L.log("report_html"),
    run:
        run_job(locals())


rule report_pdf:
    """Renders the HTML; needs WeasyPrint and Pango, not the GPU or the traces."""
    input:
        code("report_pdf"),
        script=script_file("report_pdf"),
        html=run_file("html"),
    output:
        report(
            run_file("pdf"),
            caption=f"{REPORT_CAPTIONS}/report_pdf.rst",
            category=REPORT_CATEGORIES["report"],
            labels={"result set": "{run}", "format": "PDF"},
        ),
    log:
        L.log("report_pdf"),
    run:
        run_job(locals())
