# History over a series of builds (config history): results/history/<name>/history.{json,csv,html,pdf}.


rule history_json:
    input:
        unpack(lambda wc: STATE.history_inputs()),
        script=script_file("history"),
        code=code("history"),
    output:
        json=L.history_file("json"),
        csv=L.history_file("csv"),
    log:
        L.history_file("log"),
    params:
        runs=list(PLAN.history_runs),
        # compare's thresholds: every link is judged by compare's own rule
        noise_floor=config["compare"]["noise_floor"],
        confidence=config["compare"].get("confidence", 0.95),
        noise_floor_host=config["compare"].get("noise_floor_host", 0.20),
    run:
        run_job(locals())


rule history_html:
    input:
        code("history_html"),
        script=script_file("history_html"),
        json=L.history_file("json"),
        template=str(REPORT_DIR / "history.html.j2"),
        css=str(REPORT_DIR / "report.css"),
    output:
        L.history_file("html"),
    log:
        L.history_file("html.log"),
    run:
        run_job(locals())


rule history_pdf:
    input:
        code("report_pdf"),
        script=script_file("report_pdf"),
        html=L.history_file("html"),
    output:
        L.history_file("pdf"),
    log:
        L.history_file("pdf.log"),
    run:
        run_job(locals())


rule history:
    input:
        [L.history_file(ext, PLAN.history_name) for ext in ("html", "pdf")],
