# attnprof: profile PyTorch attention variants, extract kernel tables, plot, report.
# Stages live in workflow/rules/ (one file each); logic lives in the attnprof package (src/).
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.11")


# Defaults; --configfile / --config values given on the command line are merged on top.
configfile: str(Path(workflow.basedir) / "config" / "config.yaml")


# The front page of Snakemake's own report (snakemake --report report.zip; docs/running.md); the figures
# and the report are marked with report() in workflow/rules/plots.smk and report.smk.
report: "report/workflow.rst"


# --config hands nested values over as text ('plots={dpi: 150}' gives dpi '150'): read them as
# the schema's types before validating. Every config error is a few lines: the key, the value, what is
# expected and a fix (attnprof.model.config.schema_message), never the whole schema and config.
import sys

import yaml
from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from attnprof.model.config import (
    check_variants,
    coerce_to_schema,
    config_problems,
    problems_message,
    schema_message,
)

_SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
_SCHEMA_DOC = yaml.safe_load(_SCHEMA.read_text())
config.update(coerce_to_schema(dict(config), _SCHEMA_DOC))
# shape grids, passes and counters first: the schema's own message for them names neither key nor cause
if _problems := config_problems(config):
    raise WorkflowError(problems_message(_problems))
# the schema's: jsonschema's most relevant error, named by key with what is expected and a fix; the
# advice on nested values only for a nested value given with --config
_DEFAULTS = yaml.safe_load((Path(workflow.basedir) / "config/config.yaml").read_text())
_GIVEN = dict(getattr(workflow.config_settings, "config", None) or {})
if _why := schema_message(config, _SCHEMA_DOC, command_line=_GIVEN, defaults=_DEFAULTS):
    raise WorkflowError(_why)
validate(config, str(_SCHEMA))  # valid by now; sets the schema's defaults
# the names themselves: built in (attnprof.model.variants.VARIANTS) or under custom_variants
try:
    check_variants(config["variants"], config.get("custom_variants"))
except ValueError as exc:
    raise WorkflowError(str(exc)) from None


include: "workflow/rules/common.smk"
include: "workflow/rules/capture.smk"
include: "workflow/rules/extract.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/findings.smk"
include: "workflow/rules/plots.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/history.smk"
include: "workflow/rules/ab.smk"
include: "workflow/rules/counters.smk"


# The HTML and PDF report of the current result set (the default target).
# An A/B run (config environments): each environment's report and their paired comparison (rule ab).
rule report:
    default_target: True
    input:
        PLAN.ab_targets() if AB_RUNS else [run_file("html", RUN), run_file("pdf", RUN)],


rule html:
    """report.html only: for machines without WeasyPrint/Pango (e.g. a GPU node); render the
    PDF elsewhere: snakemake --profile workflow/profiles/render results/<run>/report.pdf
    """
    input:
        [run_file("html", run) for run in THIS_RUNS],


# At the end of a successful run: where the reports it wrote are (HTML and PDF of a result set, of a
# comparison), or, when it wrote none, where the current result set's report is.
_STARTED_AT = __import__("time").time()


onsuccess:
    _written = sorted(
        p.resolve()
        for pattern in (
            L.run_file("html", "*"),
            L.run_file("pdf", "*"),
            L.compare_file("html", "*"),
            L.compare_file("pdf", "*"),
            L.history_file("html", "*"),
            L.history_file("pdf", "*"),
        )
        for p in Path().glob(pattern)
        if p.stat().st_mtime >= _STARTED_AT
    )
    _current = [Path(run_file(n, r)) for r in THIS_RUNS for n in ("html", "pdf")]
    if _written:
        print("attnprof: report written:", *_written, sep="\n  ", file=sys.stderr)
    elif any(p.is_file() for p in _current):
        print(
            "attnprof: no report written by this run. This config's result set (not necessarily the one the"
            " targets named) has its report at:",
            *(p.resolve() for p in _current if p.is_file()),
            sep="\n  ",
            file=sys.stderr,
        )
