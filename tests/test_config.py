"""Configuration read at parse time: --config's text values typed by the schema, partial configs refused."""
from pathlib import Path

import jsonschema
import yaml

from attnprof.model.config import coerce_to_schema, subset_message

SCHEMA = yaml.safe_load((Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml").read_text())
DEFAULTS = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/config.yaml").read_text())


def test_nested_command_line_values_get_the_schemas_types():
    # what Snakemake makes of --config 'plots={dpi: 150}' run=2024 'timing={repeats: 7, input_sets: 2}'
    given = {**DEFAULTS, "run": "2024", "plots": {"dpi": "150"},
             "timing": {"repeats": "7", "input_sets": "2"}, "capture_timeout_s": "12.5",
             "shapes": {**DEFAULTS["shapes"], "cpu": {"batch": ["1"], "heads": [2], "seq_len": "[64, 128]", "head_dim": [8],
                                                       "dtype": ["fp32"], "causal": ["true"]}}}
    typed = coerce_to_schema(given, SCHEMA)
    assert typed["plots"] == {"dpi": 150} and typed["timing"] == {"repeats": 7, "input_sets": 2}
    assert typed["capture_timeout_s"] == 12.5
    assert typed["run"] == "2024"  # a string where the schema wants one stays a string
    assert typed["shapes"]["cpu"]["seq_len"] == [64, 128] and typed["shapes"]["cpu"]["batch"] == [1]
    assert typed["shapes"]["cpu"]["causal"] == [True] and typed["shapes"]["cpu"]["dtype"] == ["fp32"]
    jsonschema.validate(typed, SCHEMA)
    assert given["plots"]["dpi"] == "150"  # the input is not changed in place


def test_text_that_is_not_a_number_is_left_for_the_validator():
    typed = coerce_to_schema({**DEFAULTS, "plots": {"dpi": "abc"}}, SCHEMA)
    assert typed["plots"]["dpi"] == "abc"


def test_a_partial_config_may_not_replace_a_fuller_result_set():
    assert subset_message("results/r", ["s1", "s2"], ["a", "b"], ["s1"], ["a", "b"]) is None  # a point added
    why = subset_message("results/r", ["s1"], ["b"], ["s1", "s2"], ["a", "b"])
    assert "variants ['a']" in why and "shapes ['s2']" in why and "--config run=" in why


def test_configuration_doc_is_generated_from_the_schema():
    """docs/configuration.md is what `python -m attnprof.model.config` writes now: every schema key, with its
    description and the shipped default (regenerate it after a schema or default change)."""
    from attnprof.model.config import configuration_markdown

    root = Path(__file__).resolve().parents[1]
    assert (root / "docs/configuration.md").read_text() == configuration_markdown(SCHEMA, DEFAULTS)
    doc = (root / "docs/configuration.md").read_text()
    for key in ("plots.dpi", "timing.budget_s", "capture_mode", "profiler.schedule.active", "compare.noise_floor"):
        assert f"| `{key}` |" in doc
    assert "| `plots.dpi` | integer | 110 |" in doc  # the shipped default, from config/config.yaml


def test_a_key_without_description_is_an_error():
    import pytest

    from attnprof.model.config import configuration_markdown

    bare = {"type": "object", "properties": {"x": {"type": "integer"}}}
    with pytest.raises(ValueError, match="'x' has no description"):
        configuration_markdown(bare, {"x": 1})


def test_shape_grid_problems_name_the_grid_the_key_and_the_cause():
    from attnprof.model.config import config_problems, grid_problems

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


# --- config errors: a few lines each (the key, the value, what is expected, a fix) ------------------------------------

def config_error(tmp_path, *config: str) -> tuple[str, list[str]]:
    """A dry run of the workflow with ``--config *config`` that must fail at parse time: (everything Snakemake
    printed, the lines of the error's own message: between 'WorkflowError in file ...' and the traceback line)."""
    import snakemake_cli

    root = Path(__file__).resolve().parents[1]
    proc = snakemake_cli.run(["-n", "--cores", "1", "--snakefile", root / "Snakefile", "--directory", tmp_path,
                              "--config", *config], timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "WorkflowError in file" in out, out[-3000:]
    message = out.split("WorkflowError in file", 1)[1].split("\n", 1)[1].split('  File "', 1)[0]
    return out, message.rstrip("\n").splitlines()


def test_a_misspelt_top_level_key_is_named_in_a_few_lines(tmp_path):
    """Before: 733 lines (the whole schema and the whole config)."""
    out, message = config_error(tmp_path, "typo_key=1")
    assert message[0] == "config: unknown key 'typo_key' (given 1)" and len(message) <= 6, message
    assert "repeats" in message[1] and "fix:" in message[2]
    assert len(out.splitlines()) <= 12 and "Failed validating" not in out and "Nested values" not in out
    _, message = config_error(tmp_path, "repeets=3")
    assert "did you mean 'repeats'?" in message[2]


def test_a_grid_of_single_values_says_each_field_takes_a_list(tmp_path):
    """Before: 'is not valid under any of the given schemas' and the grid printed."""
    out, message = config_error(tmp_path, "shapes={cpu: {batch: 2, heads: 8, seq_len: 512, head_dim: 64, dtype: fp32, causal: true}}")
    assert len(message) <= 6 and message[0].startswith("config: shapes.cpu: each field of a grid takes a list"), message
    assert "batch: [2]" in message[0] and "causal: [true]" in message[0]
    assert "not valid under any of the given schemas" not in out and "Nested values" not in out


def test_a_value_of_the_wrong_type_names_key_value_expectation_and_fix(tmp_path):
    out, message = config_error(tmp_path, "repeats=zero")
    assert message == ["config: repeats = zero: not an integer",
                       "  expected: an integer from 1 to 50 (independent captures of every (variant, shape), in rounds "
                       "round-robin over the grid, ...)",
                       "  fix: e.g. --config repeats=3"]
    assert "Nested values" not in out  # a top-level value: the advice on nested ones does not apply


def test_the_nested_values_advice_comes_only_with_a_nested_value_from_the_command_line(tmp_path):
    _, message = config_error(tmp_path, "plots={dpi: abc}")
    assert message[0] == "config: plots.dpi = abc: not an integer" and len(message) <= 6
    assert "'plots: {dpi: 110}'" in message[2] and "--configfile my.yaml" in message[2]
    # the same value from a config file: the fix names the file, not the command line's limits
    from attnprof.model.config import schema_message

    why = schema_message({**DEFAULTS, "plots": {"dpi": "abc"}}, SCHEMA, command_line={}, defaults=DEFAULTS)
    assert "easiest in a YAML file" not in why and "'plots: {dpi: 110}' in your --configfile" in why
    assert schema_message(DEFAULTS, SCHEMA, command_line={"repeats": 3}, defaults=DEFAULTS) is None


def test_schema_messages_name_the_key_for_every_kind_of_error():
    from attnprof.model.config import schema_message

    def message(**changes):
        why = schema_message({**DEFAULTS, **changes}, SCHEMA, command_line=changes, defaults=DEFAULTS)
        assert why and len(why.splitlines()) <= 6, why
        return why

    assert message(device="gpu").startswith("config: device = gpu: not one of the allowed values\n  expected: one of auto, cuda, cpu")
    assert message(variants="naive").endswith("fix: e.g. --config 'variants=[naive]'")  # a single value, listed
    assert "config: run = a b: does not match" in message(run="a b")
    timing = {**DEFAULTS["timing"], "input_set": 6}
    assert message(timing=timing).startswith("config: unknown key 'timing.input_set' (given 6)\n"
                                             "  known under timing: repeats, input_sets, budget_s, min_repeats\n"
                                             "  fix: did you mean 'input_sets'?")
    why = message(profiler={"range_name": "attn_fwd", "warmup_calls": 3})
    assert why.startswith("config: profiler has no key 'schedule' (it is required)")
    assert "(1 more problem" in message(device="gpu", repeats=0)


def test_thresholds_and_the_seed_are_bounded_and_the_message_names_the_key_and_the_fix():
    """Issue 33 kind 6 and 9: a threshold given in per cent (2 for 0.02, 20 for 0.20) and a seed no generator takes
    (2**64, -1) are refused at parse time, naming the key, the range and an example value."""
    from attnprof.model.config import schema_message

    def msg(**over):
        return schema_message({**DEFAULTS, **over}, SCHEMA, command_line={}, defaults=DEFAULTS)

    cmp = {"runs": ["a", "b"], "name": "x", "noise_floor": 0.02}
    for key, bad in (("noise_floor", 2), ("noise_floor", 1.5), ("noise_floor_host", 20), ("noise_floor", -0.1)):
        why = msg(compare={**cmp, key: bad})
        assert why and f"compare.{key} = {bad}" in why and "a fraction" in why, why
    assert "noise_floor: 0.02" in msg(compare={**cmp, "noise_floor": 2})
    assert msg(compare=cmp) is None and msg(compare={**cmp, "noise_floor": 0.5}) is None
    for bad in (2 ** 64, 2 ** 32, -1):
        why = msg(seed=bad)
        assert why and f"seed = {bad}" in why and "0 to 4294967295" in why and "seed=0" in why, why
    assert msg(seed=2 ** 32 - 1) is None


def test_nan_and_infinities_are_refused_by_key():
    """Issue 43 item 8's input: NaN passes every bound of the schema (each comparison with it is false), so
    top_up.time_s: .nan turned top-up off in silence and compare.noise_floor: .nan printed '±nan %'. Each of the four
    keys, and an infinity (the same kind), is refused naming its key; the defaults pass."""
    from attnprof.model.config import config_problems

    cmp = {"runs": ["a", "b"], "name": "x", "noise_floor": 0.02}
    nan, inf = float("nan"), float("inf")
    cases = {"top_up.time_s": {"top_up": {"rounds": 3, "time_s": nan}},
             "compare.noise_floor": {"compare": {**cmp, "noise_floor": nan}},
             "compare.confidence": {"compare": {**cmp, "confidence": nan}},
             "compare.noise_floor_host": {"compare": {**cmp, "noise_floor_host": nan}},
             "capture_timeout_s": {"capture_timeout_s": inf}}
    for key, over in cases.items():
        problems = config_problems({**DEFAULTS, **over})
        assert len(problems) == 1 and problems[0].startswith(f"{key}: ") and "NaN and infinities" in problems[0], problems
    assert config_problems(DEFAULTS) == []
    # the text a --config value arrives as ('.nan') is read as NaN by the schema's typing, then refused
    typed = coerce_to_schema({**DEFAULTS, "top_up": {"rounds": "3", "time_s": ".nan"}}, SCHEMA)
    assert [p.split(":")[0] for p in config_problems(typed)] == ["top_up.time_s"]
