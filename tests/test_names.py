"""One source for each list of names the workflow, the code and the report share.

Python reads each list from its one place (variant names: attnprof.variants.VARIANTS; plot and
table names: attnprof.names; metric names: attnprof.findings.METRICS). Where a second place cannot
import it -- YAML, the README, the Snakefile's rules -- a test here keeps that place in step."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnprof.config import check_variants
from attnprof.variants import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


# --- variant names: attnprof.variants.VARIANTS ---------------------------------------------------

def test_variant_names_are_checked_against_the_built_in_ones_and_custom_variants():
    mine = {"mine": {"function": "my_attention:forward"}}
    check_variants(["naive", "mine"], mine)
    with pytest.raises(ValueError, match=r"variants \['nope'\] are neither built in \(naive, naive_inplace, .*sdpa_auto\) "
                                         r"nor defined under custom_variants \(defined there: mine\)"):
        check_variants(["naive", "nope"], mine)
    with pytest.raises(ValueError, match=r"defined there: none"):
        check_variants(["nope"], None)
    # a user variant may not take a built-in name: it would replace the built-in one unnoticed
    with pytest.raises(ValueError, match=r"custom_variants \['naive'\] take the name of a built-in variant"):
        check_variants(["naive"], {"naive": {"function": "my_attention:forward"}})


def test_the_shipped_config_names_built_in_variants_only():
    check_variants(DEFAULTS["variants"], DEFAULTS.get("custom_variants"))
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert "enum" not in schema["properties"]["variants"]["items"]  # the list is VARIANTS, not a copy in the schema


def test_an_unknown_variant_stops_the_workflow_at_parse_time(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--snakefile", str(ROOT / "Snakefile"),
                           "--directory", str(tmp_path), "--config", "variants=[naive, nope]"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "variants ['nope'] are neither built in (naive, naive_inplace" in proc.stdout + proc.stderr


def test_the_report_describes_every_built_in_variant():
    from attnprof.report import CHANGES

    assert list(CHANGES) == list(VARIANTS)


def test_the_variants_the_findings_single_out_come_from_the_list():
    from attnprof.findings import FUSED, PINNED
    from attnprof.findings.data import NAIVE, NAIVE_INPLACE, SDPA_AUTO, SDPA_MATH

    assert {NAIVE, NAIVE_INPLACE, SDPA_MATH, SDPA_AUTO} <= set(VARIANTS)
    assert PINNED == tuple(v for v, backend in VARIANTS.items() if backend)
    assert set(FUSED) == set(PINNED) - {SDPA_MATH}
