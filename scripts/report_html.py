"""Snakemake script: report.html (rule report_html). Logic: attnprof.render.report."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from pathlib import Path
    import pandas as pd
    from attnprof.findings import load_expectations
    from attnprof.analysis.records import load_calibration, load_env, load_repeats
    from attnprof.render.common import render_html
    from attnprof.render.report import build_context
    from attnprof.analysis.tables import concat_tables
    from attnprof.model.plan import Layout

    plots: dict = {}
    run_plots = {}
    for p in map(Path, sm.input.plots):
        if p.parent.name == Layout.PLOTS:  # run-wide: scaling and roofline
            run_plots[p.stem] = p
        else:
            plots.setdefault(p.parent.name, {})[p.stem] = p
    launches = [pd.read_csv(p) for p in sm.input.launches]
    launches = concat_tables(launches)
    summary = pd.read_csv(sm.input.summary)
    findings = json.loads(Path(sm.input.findings).read_text())
    # the hardware counters' rows (rule findings put them in findings.json, where measure_counters ran)
    counters = {s["shape_key"]: s.get("counters", []) for s in findings["shapes"]}
    # the profiler's self-check: control.csv where the result set has a control capture (attnprof.analysis.control)
    from attnprof.analysis.control import read_control_table

    device = load_env(sm.input.env, ("device",))["device"]
    control = read_control_table(sm.input.control[0], device) if sm.input.control else None
    context = build_context(
        control=control,
        counters=counters,
        run=sm.wildcards.run,
        summary=summary,
        kernels=pd.read_csv(sm.input.kernels),
        launches=launches,
        findings=findings,
        env=load_env(sm.input.env),  # every key the report states, or an error naming the file and the key
        expectations=load_expectations(sm.input.expectations, variants=summary["variant"]),
        plots=plots,
        run_plots=run_plots,
        calibration=load_calibration(sm.input.calibration),
        css=Path(sm.input.css).read_text(),
        repeats=load_repeats(sm.input.repeats),  # the GPU each capture ran on (a run on several GPUs), current format
    )
    # the interactive timeline of part 1's shape, beside its static figure (attnprof.render.timeline_html)
    from attnprof.render.timeline_html import load_captures, timeline_html

    if context["study"] is not None:
        study = context["study"]
        context["live_timeline"] = timeline_html(
            load_captures(study["rows"], sm.input.recipes, sm.input.forwards, study["key"]),
            gpu=bool(context["env"].get("gpu_name")), shape_key=study["key"],
            range_name=(context["config"].get("profiler") or {}).get("range_name", "attn_fwd"))
    Path(sm.output[0]).write_text(render_html(context, Path(sm.input.template).parent, Path(sm.input.template).name))
    print(f"{len(context['shapes'])} shapes rendered", file=log)
