"""One source for each list of names the workflow, the code and the report share.

Python reads each list from its one place (variant names: attnprof.model.variants.VARIANTS; plot and
table names: attnprof.model.names; metric names: attnprof.findings.METRICS). Where a second place cannot
import it -- YAML, the README, the Snakefile's rules -- a test here keeps that place in step."""
from pathlib import Path

import pytest
import yaml

import snakemake_cli

from attnprof.model.config import check_variants
from attnprof.model.variants import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


# --- variant names: attnprof.model.variants.VARIANTS ---------------------------------------------------

def test_variant_names_are_checked_against_the_built_in_ones_and_custom_variants():
    mine = {"mine": {"function": "my_attention:forward"}}
    check_variants(["naive", "mine"], mine)
    with pytest.raises(ValueError, match=r"variants \['nope'\] are neither built in \(naive, naive_inplace, .*flex_attention\) "
                                         r"nor defined under custom_variants \(defined there: mine\)"):
        check_variants(["naive", "nope"], mine)
    with pytest.raises(ValueError, match=r"defined there: none"):
        check_variants(["nope"], None)
    # a user variant may not take a built-in name: it would replace the built-in one unnoticed
    with pytest.raises(ValueError, match=r"custom_variants \['naive'\] take the name of a built-in variant"):
        check_variants(["naive"], {"naive": {"function": "my_attention:forward"}})
    # nor the profiler's control's (captured in every result set, kept out of the variants' tables)
    for variants, custom in ((["naive", "control"], None), (["control"], {"control": {"function": "my_attention:forward"}})):
        with pytest.raises(ValueError, match=r"the variant name 'control' is the profiler's control") as err:
            check_variants(variants, custom)
        assert "neither built in" not in str(err.value)


def test_the_shipped_config_names_built_in_variants_only():
    check_variants(DEFAULTS["variants"], DEFAULTS.get("custom_variants"))
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert "enum" not in schema["properties"]["variants"]["items"]  # the list is VARIANTS, not a copy in the schema


def test_an_unknown_variant_stops_the_workflow_at_parse_time(tmp_path):
    proc = snakemake_cli.run(["-n", "--cores", "1", "--snakefile", ROOT / "Snakefile", "--directory", tmp_path,
                              "--config", "variants=[naive, nope]"], timeout=300)
    assert proc.returncode != 0
    assert "variants ['nope'] are neither built in (naive, naive_inplace" in proc.stdout + proc.stderr


def test_the_report_describes_every_built_in_variant():
    from attnprof.render.report import change_of

    assert all(change_of(v, {}).strip() and change_of(v, {}) != v for v in VARIANTS)
    assert change_of("sdpa_flash", {}) == "SDPA, backend pinned to FLASH_ATTENTION"


def test_one_registration_carries_a_variants_backend_description_compile_flag_and_devices():
    """VARIANTS and COMPILED, which the rest of the package reads, are derived from REGISTRY; the CPU special case of
    the capture reads the registration's devices."""
    import pytest

    from attnprof.model.variants import COMPILED, REGISTRY, Variant, runs_on

    assert VARIANTS == {"naive": None, "naive_inplace": None, "sdpa_math": "MATH", "sdpa_efficient": "EFFICIENT_ATTENTION",
                        "sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_auto": None,
                        "naive_compiled": None, "flex_attention": None}
    assert COMPILED == ("naive_compiled", "flex_attention")
    # PyTorch's CPU SDPA dispatcher offers FLASH_ATTENTION and MATH only (aten sdp_utils_cpp.cpp)
    assert [v for v in REGISTRY if not runs_on(v, "cpu")] == ["sdpa_efficient", "sdpa_cudnn"]
    assert all(runs_on(v, "cuda") for v in REGISTRY) and runs_on("my_attn", "cpu")
    with pytest.raises(ValueError, match="devices"):
        Variant(None, "x", devices=("tpu",))


def test_the_variants_the_findings_single_out_come_from_the_list():
    from attnprof.findings import FUSED, PINNED
    from attnprof.findings.data import NAIVE, NAIVE_INPLACE, SDPA_MATH
    from attnprof.model.variants import DISPATCHERS

    assert {NAIVE, NAIVE_INPLACE, SDPA_MATH, *DISPATCHERS} <= set(VARIANTS)
    assert PINNED == tuple(v for v, backend in VARIANTS.items() if backend)
    assert set(FUSED) == set(PINNED) - {SDPA_MATH}


# --- metric names: attnprof.findings.METRICS; rule names: attnprof.findings.RULE_NAMES -------------

EXPECTATIONS = ROOT / "config" / "expectations.yaml"


def test_the_shipped_expectations_name_known_metrics_compares_rules_and_variants():
    from attnprof.findings import load_expectations

    assert load_expectations(EXPECTATIONS)["expectations"]


@pytest.mark.parametrize("field,value,words", [
    ("metric", "kernels_per_fwd", "names metric 'kernels_per_fwd', which attnprof.findings.METRICS does not define"),
    ("compare", "lt", "names compare 'lt'"),
    ("explained_by", ["fusion", "fusoin"], "is explained_by rules ['fusoin'], which no finding rule has"),
    ("variants", ["naive", "naive_inplcae"], "names variants ['naive_inplcae']"),
])
def test_an_unknown_name_in_the_expectations_is_an_error_naming_the_file_and_the_name(tmp_path, field, value, words):
    from attnprof.findings import load_expectations

    doc = yaml.safe_load(EXPECTATIONS.read_text())
    doc["expectations"][0][field] = value
    path = tmp_path / "expectations.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError) as err:
        load_expectations(path)
    assert str(err.value).startswith(f"{path}: expectation 'naive-kernels' ") and words in str(err.value)


def test_a_run_may_check_expectations_of_its_own_variants(tmp_path):
    from attnprof.findings import load_expectations

    doc = yaml.safe_load(EXPECTATIONS.read_text())
    doc["expectations"][0]["variants"] = ["my_attn"]
    path = tmp_path / "expectations.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load_expectations(path, variants=["my_attn"])


def test_every_finding_carries_a_rule_name_the_schema_and_the_expectations_know(h200_data):
    import json

    from attnprof.findings import RULE_NAMES, compute

    schema = json.loads((ROOT / "workflow" / "schemas" / "findings.schema.json").read_text())
    assert schema["$defs"]["finding"]["properties"]["rule"]["enum"] == list(RULE_NAMES)
    assert {f["rule"] for f in compute(h200_data)["findings"]} <= set(RULE_NAMES)


# --- file and table names: attnprof.model.names (CAPTURE_FILES, CAPTURE_TABLES, RUN_FILES) ---------------

def test_the_findings_schema_names_the_tables_references_point_into():
    import json

    from attnprof.findings.refs import TABLES

    schema = json.loads((ROOT / "workflow" / "schemas" / "findings.schema.json").read_text())
    assert schema["$defs"]["number"]["properties"]["table"]["enum"] == list(TABLES)


def test_extract_writes_every_per_capture_table_by_its_name():
    from attnprof.model.names import CAPTURE_TABLES

    script = (ROOT / "scripts" / "extract.py").read_text()
    assert {key for key in CAPTURE_TABLES if f"sm.output.{key}" in script} == set(CAPTURE_TABLES)


def test_the_results_document_names_every_file_of_a_result_set():
    from attnprof.model.names import CAPTURE_FILES, CAPTURE_TABLES, RUN_FILES

    doc = (ROOT / "docs" / "results.md").read_text()
    for name in CAPTURE_FILES.values():
        assert f"`captures/<shape>/<variant>/r<k>/{name}`" in doc, name
    csv = [n.removesuffix(".csv") for n in CAPTURE_TABLES.values() if n.endswith(".csv")]
    others = [n for n in CAPTURE_TABLES.values() if not n.endswith(".csv")]
    assert f"`tables/<shape>/<variant>/r<k>/{{{','.join(csv)}}}.csv`, " + ", ".join(f"`{n}`" for n in others) in doc
    for name in RUN_FILES.values():
        assert f"`{name}`" in doc, name


# --- rule names: the Snakefile's rules; the render profile and the README name them ----------------

WORKFLOW_FILES = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]


def workflow_rules() -> dict[str, str]:
    """rule name -> its text (up to the next rule or the end of its file), from the Snakefile and its includes;
    checkpoints (indented where a condition defines them) count as rules."""
    import re

    rules = {}
    for path in WORKFLOW_FILES:
        parts = re.split(r"^[ ]*(?:rule|checkpoint) (\w+):\n", path.read_text(), flags=re.M)
        rules.update(dict(zip(parts[1::2], parts[2::2])))
    return rules


def derives_a_result_set(body: str) -> bool:
    """A rule whose output lies in a result set (results/<run>/...) but is not captured there: not the
    capture stage (its outputs are pinned to this run, THIS_RUN, or to others, OTHER_RUN, and the top-up
    checkpoint's to this A/B run's result sets, PLAN.top_up_runs(): which rounds were captured), not compare."""
    output = body.split("output:", 1)[1].split("log:", 1)[0] if "output:" in body else ""
    in_result_set = any(w in output for w in ("run_file(", "table_file(", "capture_file(", "results/{{run}}", "results/{run}",
                                                  "L.plot(", "L.rebuild_marker("))
    return in_result_set and not any(w in output for w in ("THIS_RUN", "OTHER_RUN", "PLAN.top_up_runs()"))


def test_the_render_profile_allows_exactly_the_rules_that_derive_a_result_set():
    profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "render" / "config.yaml").read_text())
    rules = workflow_rules()
    assert set(profile["allowed-rules"]) <= set(rules), set(profile["allowed-rules"]) - set(rules)
    assert set(profile["allowed-rules"]) == {name for name, body in rules.items() if derives_a_result_set(body)}


def test_the_readme_names_the_rules_of_the_render_profile_and_of_compare():  # and of history
    import re

    readme = (ROOT / "README.md").read_text()
    profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "render" / "config.yaml").read_text())
    said = re.search(r"The `render` profile allows only the rules after capture \(([^)]*)\)", readme)
    assert said and re.findall(r"`(\w+)`", said.group(1)) == profile["allowed-rules"]
    # every other document that lists them lists them whole (issue 43 item 5: running.md's list lacked rebuild)
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for listed in re.findall(r"`render` profile allows only the rules after capture \((`[^)]*)\)", doc.read_text()):
            assert re.findall(r"`(\w+)`", listed) == profile["allowed-rules"], doc.name
    rules = {name: re.findall(r"^rule (\w+):", (ROOT / "workflow" / "rules" / f"{name}.smk").read_text(), flags=re.M)
             for name in ("compare", "history")}
    for listed in re.findall(r"--allowed-rules ([\w ]+)", readme):
        assert listed.split() in rules.values()


# --- plot names: attnprof.model.names (SHAPE_PLOTS, TIMELINE, SCALING_PLOTS) -----------------------------

def test_every_plot_has_a_caption_and_the_plot_lists_name_plots():
    from attnprof.model.names import SCALING_PLOTS, SHAPE_PLOTS, TIMELINE
    from attnprof.render.plots import CAPTIONS, CPU_CAPTIONS, CPU_PLOTS, FULL_WIDTH

    names = [*SHAPE_PLOTS, TIMELINE, *SCALING_PLOTS]
    assert list(CAPTIONS) == names and set(CPU_CAPTIONS) == set(names)
    assert set(FULL_WIDTH) <= set(names) and set(CPU_PLOTS) <= set(names)


def test_the_h200_sweep_s_time_has_one_home():
    """Issue 43 item 5: the sweep's time was stated as 346.7 s, "about 5 minutes" and "about 3.3 minutes" in three
    documents. Each bold figure of docs/costs.md's sweep rows is stated there only, and the places that spoke of it
    link there."""
    import re

    costs = (ROOT / "docs" / "costs.md").read_text()
    figures = {f for line in costs.splitlines() if "sweep" in line and line.startswith("|")
               for f in re.findall(r"\*\*(\d+\.\d) s\*\*", line)}
    assert "239.8" in figures  # the newest (2026-12-03, a fresh lease), read off the table by hand
    others = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "config").glob("*.yaml"))]
    for path in (p for p in others if p.name != "costs.md"):
        text = path.read_text()
        assert not [f for f in figures if f in text], path.name
        assert not re.search(r"about [\d.]+ minutes on one H200", text), path.name
    for path, link in ((ROOT / "README.md", "docs/costs.md"), (ROOT / "docs" / "running.md", "costs.md#measured"),
                       (ROOT / "config" / "config.yaml", "docs/costs.md")):
        assert link in path.read_text(), path.name
