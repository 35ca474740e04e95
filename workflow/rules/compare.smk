# Compare result sets: results/compare/<name>/compare.{json,html,pdf}.


rule compare_json:
    input:
        unpack(compare_inputs),
        script=script_file("compare"),
        code=code("compare"),
    output:
        "results/compare/{name}/compare.json",
    log:
        "results/compare/{name}/compare_json.log",
    params:
        # config compare.runs, or an A/B run's result sets for its results/compare/<run>-ab/ (common.smk)
        runs=lambda wc: compare_runs_of(wc.name),
        noise_floor=config["compare"]["noise_floor"],
        confidence=config["compare"].get("confidence", 0.95),
        noise_floor_host=config["compare"].get("noise_floor_host", 0.20),
    run:
        run_job(locals())


rule compare_html:
    input:
        code("compare_html"),
        script=script_file("compare_html"),
        json="results/compare/{name}/compare.json",
        template=str(REPORT_DIR / "compare.html.j2"),
        css=str(REPORT_DIR / "report.css"),
    output:
        "results/compare/{name}/compare.html",
    log:
        "results/compare/{name}/compare_html.log",
    run:
        run_job(locals())


rule compare_pdf:
    input:
        code("report_pdf"),
        script=script_file("report_pdf"),
        html="results/compare/{name}/compare.html",
    output:
        "results/compare/{name}/compare.pdf",
    log:
        "results/compare/{name}/compare_pdf.log",
    run:
        run_job(locals())


rule compare:
    input:
        expand(
            "results/compare/{name}/compare.{ext}",
            name=COMPARE_NAME,
            ext=["html", "pdf"],
        ),
