"""Lists of names shared by the workflow, the code and the report, each kept here once (tests/test_names.py
keeps the copies that cannot import them in step: YAML, JSON schemas, the README, docs/).

Snakemake reads this module at parse time, so it imports nothing heavy. The built-in variant
names live in :data:`attnprof.model.variants.VARIANTS` (also light); the template and the plot
module take the names from here.
"""

import re

#: Per-shape figures of rule plots (attnprof.render.plots.plot_shape), by PNG file stem.
SHAPE_PLOTS = ("device_time", "kernels_per_forward", "kernel_split", "cpu_vs_device")
#: The per-shape kernel timeline: its own rule (timeline), as it reads the traces.
TIMELINE = "timeline"
#: Run-wide figures of rule scaling_plots (attnprof.render.plots.scaling_plots), by PNG file stem.
SCALING_PLOTS = ("scaling_time", "scaling_tflops", "scaling_memory", "roofline")
#: The figures a CPU run draws with data (the others need device events): its report and Snakemake's show only these.
CPU_PLOTS = ("device_time", TIMELINE)


def backward_range_name(range_name: str) -> str:
    """The record_function name of the backward ranges: ``attn_fwd`` -> ``attn_bwd``; a name that
    does not end in ``_fwd`` gets ``_bwd`` appended. Derived rather than configured, so that one
    config key names both and the two can never coincide."""
    return range_name[: -len("_fwd")] + "_bwd" if range_name.endswith("_fwd") else range_name + "_bwd"


# Files of a result set by name (where they lie: attnprof.model.plan.Layout, their one home): the rules' output
# names (scripts write snakemake.output.<name>) and the keys the code and the report look them up by.
#: A capture is one repeat of one (shape, variant), its files and its tables each in a folder of its repeat,
#: ``r<k>`` for k = 1 .. config ``repeats`` (:func:`repeat_dir`, read back by :func:`repeat_of`).
REPEAT_PREFIX = "r"


def repeat_dir(repeat: int | str) -> str:
    """The folder of repeat ``repeat`` (1-based) inside a capture's or a table's (shape, variant) folder: ``r1``."""
    return f"{REPEAT_PREFIX}{repeat}"


def repeat_of(folder: str) -> int | None:
    """The repeat of a capture's or table's folder name (``r2`` -> 2; :func:`repeat_dir` read back), None for another
    name."""
    m = re.fullmatch(re.escape(REPEAT_PREFIX) + r"([1-9][0-9]*)", folder)
    return int(m.group(1)) if m else None


#: Per capture (Layout.capture_file): rule capture's trace and status record.
CAPTURE_FILES = {"trace": "trace.json.gz", "status": "status.json"}
#: Per capture (Layout.table_file): rule extract's tables (docs/results.md).
CAPTURE_TABLES = {"kernels": "kernels.csv", "forwards": "forwards.csv", "launches": "launches.csv", "ops": "ops.csv",
                  "device": "device.json",
                  # the backward's (config passes; attnprof.analysis.backward): header-only without a backward
                  "backwards": "backwards.csv", "kernels_backward": "kernels_backward.csv",
                  "ops_backward": "ops_backward.csv",
                  # each complete forward's (backward's) work in order (attnprof.analysis.recipe): compare's recipe diff
                  "recipe": "recipe.csv", "recipe_backward": "recipe_backward.csv"}
#: Per result set (Layout.run_file): summarize's summary (one row per variant and shape, times over the
#: repeats with their between-run interval), repeats (one row per repeat: the per-repeat numbers) and kernels, findings, environment (env),
#: calibrate's calibration, and the report (html, pdf); control: summarize's rows of the profiler's control
#: capture (attnprof.analysis.control; one per repeat, kept out of summary.csv and repeats.csv).
RUN_FILES = {"summary": "summary.csv", "repeats": "repeats.csv", "kernels": "kernels.csv", "findings": "findings.json", "env": "env.json",
             "calibration": "calibration.json", "html": "report.html", "pdf": "report.pdf", "control": "control.csv",
             "top_up": "top_up.json"}
#: The format version each versioned file is written in (status.json, env.json: the top-level key ``FORMAT_KEY``;
#: repeats.csv: a column of that name holding it in every row). Readers get older versions in the current one through
#: attnprof.model.formats, which holds the migrations; a writer's new field that readers need raises the version here.
FORMAT_KEY = "format"
FORMATS = {"status": 2, "env": 2, "repeats": 2}
