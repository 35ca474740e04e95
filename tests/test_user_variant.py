"""Your own variant (config custom_variants): a wrong one is flagged by the float64 check, a missing
one is a recorded failure, and it is fingerprinted by its module's source
(tests/user_variants/attnprof_test_variant.py). Its whole path, config to report at two shapes, is part of the
tiny workflow run (test_workflow.test_the_user_variant_goes_the_whole_path).

The test module is named as no user is told to name theirs: a my_attention.py that a user made at the
repository root, as the README's example says, would otherwise be imported in its place."""
import re
import sys
from pathlib import Path

import pytest

from attnprof.measure.forwards import variant_fingerprint
from attnprof.runtime.isolation import run_isolated
from test_capture import spec

USER_DIR = Path(__file__).resolve().parent / "user_variants"


@pytest.fixture
def importable(monkeypatch):
    """The capture process imports the user's module the way Snakemake's would: from its path."""
    monkeypatch.setenv("PYTHONPATH", str(USER_DIR))
    monkeypatch.syspath_prepend(str(USER_DIR))


@pytest.mark.slow
def test_a_wrong_user_variant_is_flagged_by_the_float64_check(tmp_path, importable):
    rec = run_isolated(spec("bad", custom={"function": "attnprof_test_variant:wrong"}), tmp_path / "t.json.gz", tmp_path / "s.json",
                       timeout_s=300)
    assert rec["status"] == "ok" and rec["rel_error_ok"] is False and rec["rel_error"] > 0.1  # causal mask forgotten


@pytest.mark.slow
def test_missing_user_function_is_a_recorded_failure(tmp_path, importable):
    rec = run_isolated(spec("gone", custom={"function": "attnprof_test_variant:nothing_here"}), tmp_path / "t.json.gz",
                       tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "failed" and "nothing_here" in rec["reason"]


def test_fingerprint_follows_the_user_module_without_importing_it(tmp_path, monkeypatch):
    (tmp_path / "fresh_attn.py").write_text((USER_DIR / "attnprof_test_variant.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    custom = {"function": "fresh_attn:forward"}
    before = variant_fingerprint("mine", custom)
    assert "fresh_attn" not in sys.modules
    assert variant_fingerprint("mine", custom) == before
    (tmp_path / "fresh_attn.py").write_text((USER_DIR / "attnprof_test_variant.py").read_text() + "\n# edited\n")
    assert variant_fingerprint("mine", custom) != before
    assert variant_fingerprint("naive") == variant_fingerprint("naive")  # built-ins unaffected
    with pytest.raises(ValueError, match="not found"):
        variant_fingerprint("mine", {"function": "no_such_module_here:f"})



def test_the_test_module_is_named_as_no_user_is_told_to_name_theirs():
    root = USER_DIR.parents[1]
    told = {m for text in ((root / "README.md").read_text(), (root / "config" / "config.yaml").read_text())
            for m in re.findall(r"[\"']([A-Za-z_][A-Za-z0-9_.]*):[A-Za-z_][A-Za-z0-9_]*[\"']", text)}
    assert "my_attention" in told  # the README's example
    assert not told & {p.stem for p in USER_DIR.glob("*.py")}


def test_a_misspelt_function_or_setup_is_refused_at_parse_time_naming_the_config_key(tmp_path, monkeypatch):
    """Issue 43 item 5's input: custom_variants {x: {function: "mod:typo"}} was found only by the capture, 95 s into
    the run; now the fingerprint (a param every capture job takes at parse time) refuses it, as a missing module
    already was, without importing the module (its import would import torch)."""
    (tmp_path / "typo_attn.py").write_text(
        "import torch as th\nfrom math import sqrt as root\n\ndef forward(q, k, v, *, causal, scale):\n    return q\n\n"
        "try:\n    import numpy\n    def setup(shape, device):\n        return {}\nexcept ImportError:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"custom_variants\.x\.function 'typo_attn:forwrd': .*typo_attn.py defines "
                                         r"no 'forwrd' at top level.* fix the name after the ':' in "
                                         r"custom_variants\.x\.function"):
        variant_fingerprint("x", {"function": "typo_attn:forwrd"})
    with pytest.raises(ValueError, match=r"custom_variants\.x\.setup 'typo_attn:set_up'"):  # the same kind: setup
        variant_fingerprint("x", {"function": "typo_attn:forward", "setup": "typo_attn:set_up"})
    assert "typo_attn" not in sys.modules
    # names bound at top level in every way the source shows are found: a def, one inside a try, an import's alias
    for target in ("typo_attn:forward", "typo_attn:setup", "typo_attn:root", "typo_attn:th"):
        assert len(variant_fingerprint("x", {"function": target})) == 16
    # a module that may bind any name (a star import) is left to the import
    (tmp_path / "star_attn.py").write_text("from typo_attn import *\n")
    assert len(variant_fingerprint("x", {"function": "star_attn:anything"})) == 16
