"""Your own variant (config custom_variants): captured, checked against float64 and reported like
the built-in ones, and fingerprinted by its module's source (tests/user_variants/my_attention.py)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from attnprof.capture import run_isolated
from attnprof.variants import variant_fingerprint
from test_capture import spec

ROOT = Path(__file__).resolve().parents[1]
USER_DIR = Path(__file__).resolve().parent / "user_variants"
MINE = {"function": "my_attention:forward", "setup": "my_attention:setup", "description": "hand-written, mask built in setup"}


@pytest.fixture
def importable(monkeypatch):
    """The capture process imports the user's module the way Snakemake's would: from its path."""
    monkeypatch.setenv("PYTHONPATH", str(USER_DIR))
    monkeypatch.syspath_prepend(str(USER_DIR))


def test_user_variant_is_captured_and_checked(tmp_path, importable):
    rec = run_isolated(spec("my_attn", custom=MINE), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "ok" and rec["custom"] == MINE
    assert rec["rel_error_ok"] and rec["rel_error"] < 1e-5
    assert rec["trace_check"]["forwards_complete"] == 2  # the profiled forwards of spec(): active 2


def test_a_wrong_user_variant_is_flagged_by_the_float64_check(tmp_path, importable):
    rec = run_isolated(spec("bad", custom={"function": "my_attention:wrong"}), tmp_path / "t.json.gz", tmp_path / "s.json",
                       timeout_s=300)
    assert rec["status"] == "ok" and rec["rel_error_ok"] is False and rec["rel_error"] > 0.1  # causal mask forgotten


def test_missing_user_function_is_a_recorded_failure(tmp_path, importable):
    rec = run_isolated(spec("gone", custom={"function": "my_attention:nothing_here"}), tmp_path / "t.json.gz",
                       tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "failed" and "nothing_here" in rec["reason"]


def test_fingerprint_follows_the_user_module_without_importing_it(tmp_path, monkeypatch):
    (tmp_path / "fresh_attn.py").write_text((USER_DIR / "my_attention.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    custom = {"function": "fresh_attn:forward"}
    before = variant_fingerprint("mine", custom)
    assert "fresh_attn" not in sys.modules
    assert variant_fingerprint("mine", custom) == before
    (tmp_path / "fresh_attn.py").write_text((USER_DIR / "my_attention.py").read_text() + "\n# edited\n")
    assert variant_fingerprint("mine", custom) != before
    assert variant_fingerprint("naive") == variant_fingerprint("naive")  # built-ins unaffected
    with pytest.raises(ValueError, match="not found"):
        variant_fingerprint("mine", {"function": "no_such_module_here:f"})


TINY = """
variants: [naive, my_attn]
custom_variants: {my_attn: {function: "my_attention:forward", setup: "my_attention:setup", description: hand-written}}
shapes: {cpu: {batch: [1], heads: [2], seq_len: [64], head_dim: [16], dtype: [fp32], causal: [true]}}
profiler: {schedule: {wait: 1, warmup: 1, active: 3}}
timing: {repeats: 5, input_sets: 2}
"""


def test_whole_path_through_snakemake(tmp_path):
    """Config to report: the user variant gets its capture, tables, summary row and report row;
    an unknown name in `variants` is refused with a message."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".git", ".venv", "results", ".snakemake", "examples", "tests",
                                                              ".whl", "benchmarks", "docs"))
    shutil.copy(USER_DIR / "my_attention.py", repo / "my_attention.py")  # next to the Snakefile, as the README says
    (repo / "tiny.yaml").write_text(TINY)
    cmd = [sys.executable, "-m", "snakemake", "results/user/report.html", "--cores", "2", "--directory", str(repo),
           "--snakefile", str(repo / "Snakefile"), "--configfile", str(repo / "tiny.yaml"), "--config", "device=cpu"]
    proc = subprocess.run(cmd + ["run=user"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = pd.read_csv(repo / "results/user/summary.csv").set_index("variant")
    assert summary.loc["my_attn", "status"] == "ok" and bool(summary.loc["my_attn", "rel_error_ok"])
    assert summary.loc["my_attn", "forwards_complete"] == 3
    ops = pd.read_csv(repo / "results/user/tables/b1_h2_s64_d16_fp32_causal/my_attn/ops.csv")
    assert "aten::softmax" in set(ops["op"])  # the profiled forward is the user's code
    assert "hand-written" in (repo / "results/user/report.html").read_text()
    assert json.loads((repo / "results/user/captures/b1_h2_s64_d16_fp32_causal/my_attn/status.json").read_text())["custom"]
    refused = subprocess.run(["-n" if a == "results/user/report.html" else a for a in cmd] + ["run=user2", "variants=[naive,not_defined]"],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "neither built in" in refused.stderr + refused.stdout
