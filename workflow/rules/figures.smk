# The figures marked for Snakemake's own report (snakemake --report; the categories and captions: plots.smk), per
# result set: functions only, included after plots.smk (Snakemake's lint wants rules and functions apart).
import json

from attnprof.model.names import CPU_PLOTS

# A caption in a report() made by an input function is taken as it is: resolved here, as a rule's own would be
FIGURE_CAPTIONS = {
    name: workflow.current_basedir.join(f"{REPORT_CAPTIONS}/{name}.rst")
    for name in [*PLOT_NAMES, TIMELINE, *SCALING_PLOT_NAMES]
}


def run_device(run):
    """'cpu' or 'cuda': the device result set ``run`` was captured on (this config's, or its env.json's)."""
    if run in THIS_RUNS:
        return DEVICE
    return json.loads(Path(run_file("env", run)).read_text())["device"]


def report_figures(wc):
    """Input function of report_html: the figures of result set ``wc.run`` marked for Snakemake's report, each in
    its category with its caption and labels. A CPU run's only those that hold data (CPU_PLOTS: host time and the
    timeline); its other figures are drawn empty or say "no device events", and stay out of the report.
    """
    shown = (
        None if run_device(wc.run) != "cpu" else set(CPU_PLOTS)
    )  # None: every figure

    def mark(path, name, category, subcategory, **shape):
        return report(
            path,
            caption=FIGURE_CAPTIONS[name],
            category=REPORT_CATEGORIES[category],
            subcategory=subcategory,
            labels={"result set": wc.run, **shape, "figure": name.replace("_", " ")},
        )

    per_shape = [
        mark(
            L.plot(name, wc.run, shape),
            name,
            "shape",
            shape,
            shape=shape,
        )
        for shape in STATE.grid(wc.run).shapes
        for name in [*PLOT_NAMES, TIMELINE]
        if shown is None or name in shown
    ]
    return per_shape + [
        mark(L.plot(name, wc.run, None), name, "sweep", wc.run)
        for name in SCALING_PLOT_NAMES
        if shown is None or name in shown
    ]
