"""Configuration read at parse time: --config's text values typed by the schema, partial configs refused."""
from pathlib import Path

import jsonschema
import yaml

from attnprof.config import coerce_to_schema, subset_message

SCHEMA = yaml.safe_load((Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml").read_text())
DEFAULTS = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/config.yaml").read_text())


def test_nested_command_line_values_get_the_schemas_types():
    # what Snakemake makes of --config 'plots={dpi: 150, top_kernels: 6}' run=2024 'timing={repeats: 7, input_sets: 2}'
    given = {**DEFAULTS, "run": "2024", "plots": {"dpi": "150", "top_kernels": "6"},
             "timing": {"repeats": "7", "input_sets": "2"}, "capture_timeout_s": "12.5",
             "shapes": {**DEFAULTS["shapes"], "cpu": {"batch": ["1"], "heads": [2], "seq_len": "[64, 128]", "head_dim": [8],
                                                       "dtype": ["fp32"], "causal": ["true"]}}}
    typed = coerce_to_schema(given, SCHEMA)
    assert typed["plots"] == {"dpi": 150, "top_kernels": 6} and typed["timing"] == {"repeats": 7, "input_sets": 2}
    assert typed["capture_timeout_s"] == 12.5
    assert typed["run"] == "2024"  # a string where the schema wants one stays a string
    assert typed["shapes"]["cpu"]["seq_len"] == [64, 128] and typed["shapes"]["cpu"]["batch"] == [1]
    assert typed["shapes"]["cpu"]["causal"] == [True] and typed["shapes"]["cpu"]["dtype"] == ["fp32"]
    jsonschema.validate(typed, SCHEMA)
    assert given["plots"]["dpi"] == "150"  # the input is not changed in place


def test_text_that_is_not_a_number_is_left_for_the_validator():
    typed = coerce_to_schema({**DEFAULTS, "plots": {"dpi": "abc", "top_kernels": 6}}, SCHEMA)
    assert typed["plots"]["dpi"] == "abc"


def test_a_partial_config_may_not_replace_a_fuller_result_set():
    assert subset_message("results/r", ["s1", "s2"], ["a", "b"], ["s1"], ["a", "b"]) is None  # a point added
    why = subset_message("results/r", ["s1"], ["b"], ["s1", "s2"], ["a", "b"])
    assert "variants ['a']" in why and "shapes ['s2']" in why and "--config run=" in why


def test_configuration_doc_is_generated_from_the_schema():
    """docs/configuration.md is what `python -m attnprof.config` writes now: every schema key, with its
    description and the shipped default (regenerate it after a schema or default change)."""
    from attnprof.config import configuration_markdown

    root = Path(__file__).resolve().parents[1]
    assert (root / "docs/configuration.md").read_text() == configuration_markdown(SCHEMA, DEFAULTS)
    doc = (root / "docs/configuration.md").read_text()
    for key in ("plots.dpi", "timing.budget_s", "capture_mode", "profiler.schedule.active", "compare.noise_floor"):
        assert f"| `{key}` |" in doc
    assert "| `plots.dpi` | integer | 110 |" in doc  # the shipped default, from config/config.yaml


def test_a_key_without_description_is_an_error():
    import pytest

    from attnprof.config import configuration_markdown

    bare = {"type": "object", "properties": {"x": {"type": "integer"}}}
    with pytest.raises(ValueError, match="'x' has no description"):
        configuration_markdown(bare, {"x": 1})


def test_shape_grid_problems_name_the_grid_the_key_and_the_cause():
    from attnprof.config import config_problems, grid_problems

    base = {"batch": [1], "heads": [4], "head_dim": [16], "dtype": ["fp32"], "causal": [True]}
    assert grid_problems({"cpu": [{**base, "seq_len": [64]}]}) == []
    (why,) = grid_problems({"cpu": [{**base, "seq_len": [64]}, {**base, "seq_len": [64], "q_len": [1]}]})
    assert why.startswith("shapes.cpu[1]: seq_len") and "q_len" in why
    (why,) = grid_problems({"cuda": {**base, "q_len": [1]}})
    assert why == "shapes.cuda: q_len needs kv_len (the key/value length)"
    (why,) = grid_problems({"cpu": {**base, "seq_len": [64], "kv_heads": [0]}})
    assert why.startswith("shapes.cpu.kv_heads: [0] must be a list of integers >= 1")
    (why,) = grid_problems({"cpu": {**base, "seq_len": [64], "causal_alignment": ["diagonal"]}})
    assert why.startswith("shapes.cpu.causal_alignment: ['diagonal']")
    # every combination is a point: heads 6 with kv_heads 4 is not grouped-query attention
    (why,) = grid_problems({"cpu": {**base, "heads": [4, 6], "kv_heads": [2, 4], "seq_len": [64]}})
    assert why.startswith("shapes.cpu: heads 6 is not a multiple of kv_heads 4") and "every combination" in why
    (why,) = grid_problems({"cpu": {**base, "kv_len": [64], "q_len": [128]}})
    assert "would see no key" in why
    problems = config_problems({"shapes": {"cpu": {**base, "seq_len": [64]}}, "passes": ["backward"], "variants": ["naive"],
                                "counters": {"variants": ["sdpa_flsh", "sdpa_flash"]}})
    assert any(p.startswith("passes ['backward']: must list forward") for p in problems)
    assert any(p.startswith("counters.variants ['sdpa_flsh']") for p in problems) and len(problems) == 2


def test_a_grid_of_ones_own_replaces_the_default_grid_whole():
    """config.yaml's CPU grid is a list of one grid: Snakemake merges a --configfile mapping into a
    mapping key by key, so a default mapping would leak its seq_len into a user's decode grid."""
    assert isinstance(DEFAULTS["shapes"]["cpu"], list) and isinstance(DEFAULTS["shapes"]["cuda"], list)


def test_lost_captures_are_the_repeat_rows_without_their_files(tmp_path):
    from attnprof.config import lost_captures

    run = tmp_path / "r"
    for rel in ("s1/a/r1", "s1/a/r2", "s1/b/r1"):
        (run / "captures" / rel).mkdir(parents=True)
        (run / "captures" / rel / "status.json").write_text("{}")
    (run / "captures" / "s1" / "a" / "r1" / "trace.json.gz").write_bytes(b"")
    (run / "captures" / "s1" / "a" / "r2" / "trace.json.gz").write_bytes(b"")
    # repeats.csv rows: a has both repeats whole, b's repeat 1 lost its trace, b's repeat 2 and c are gone
    (run / "repeats.csv").write_text("variant,shape_key,repeat,status\na,s1,1,ok\na,s1,2,ok\nb,s1,1,ok\nb,s1,2,ok\nc,s1,1,failed\n")
    files = ["trace.json.gz", "status.json"]
    assert lost_captures(str(run), str(run / "repeats.csv"), files) == sorted(
        [str(run / "captures/s1/b/r1/trace.json.gz"), str(run / "captures/s1/b/r2/trace.json.gz"),
         str(run / "captures/s1/b/r2/status.json"), str(run / "captures/s1/c/r1/trace.json.gz"),
         str(run / "captures/s1/c/r1/status.json")])
    assert lost_captures(str(run), str(run / "missing.csv"), files) == []
