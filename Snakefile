# attnprof: profile PyTorch attention variants, extract kernel tables, plot, report.
# Stages live in workflow/rules/ (one file each); logic lives in the attnprof package (src/).
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.11")


# Defaults; --configfile / --config values given on the command line are merged on top.
configfile: str(Path(workflow.basedir) / "config" / "config.yaml")


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
include: "workflow/rules/report.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/counters.smk"


# The HTML and PDF report of the current result set (the default target).
rule report:
    default_target: True
    input:
        html=run_file("html", RUN),
        pdf=run_file("pdf", RUN),


rule html:
    """report.html only: for machines without WeasyPrint/Pango (e.g. a GPU node); render the
    PDF elsewhere: snakemake --profile workflow/profiles/render results/<run>/report.pdf
    """
    input:
        run_file("html", RUN),
