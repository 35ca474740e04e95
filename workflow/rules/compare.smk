# Compare result sets: results/compare/<name>/compare.{json,html,pdf}.


rule compare_json:
    input:
        unpack(compare_inputs),
        script=script_file("compare"),
        code=code("compare"),
    output:
        L.compare_file("json"),
    log:
        L.compare_log("json"),
    params:
        # config compare.runs, or an A/B run's result sets for its results/compare/<run>-ab/ (common.smk)
        runs=lambda wc: PLAN.compare_runs_of(wc.name),
        noise_floor=config["compare"]["noise_floor"],
        confidence=config["compare"].get("confidence", 0.95),
        noise_floor_host=config["compare"].get("noise_floor_host", 0.20),
    run:
        run_job(locals())


rule compare_html:
    input:
        code("compare_html"),
        script=script_file("compare_html"),
        json=L.compare_file("json"),
        template=str(REPORT_DIR / "compare.html.j2"),
        css=str(REPORT_DIR / "report.css"),
    output:
        L.compare_file("html"),
    log:
        L.compare_log("html"),
    run:
        run_job(locals())


rule compare_pdf:
    input:
        code("report_pdf"),
        script=script_file("report_pdf"),
        html=L.compare_file("html"),
    output:
        L.compare_file("pdf"),
    log:
        L.compare_log("pdf"),
    run:
        run_job(locals())


rule compare:
    input:
        [L.compare_file(ext, PLAN.compare_name) for ext in ("html", "pdf")],
