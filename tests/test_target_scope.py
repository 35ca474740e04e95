"""Parse-time checks about the current config's result set refuse only targets inside that result set: with the
current result set in trouble (its recorded grid is larger than the config's), another result set still renders,
and the current one's report is still refused, naming it (dry runs through the snakemake CLI, no capture)."""
import json
import shutil
from pathlib import Path

import pytest

from test_workflow import VARIANTS, copy_repo, snakemake

ROOT = Path(__file__).resolve().parents[1]
OTHER = "h200_unsupported_backends"  # a committed H200 result set, copied in as a user copies an example

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The tiny config's workflow whose result set results/tiny was made with one more shape (a user ran it
    with a --configfile extending the grid), beside a copied H200 result set."""
    work = copy_repo(tmp_path_factory.mktemp("scope") / "repo")
    bigger = {"batch": [1], "heads": [2], "seq_len": [64, 128, 256], "head_dim": [32], "dtype": ["fp32"], "causal": [True]}
    env = {"device": "cpu", "torch": "2.13.0+cpu", "config": {"variants": VARIANTS, "shapes": {"cpu": bigger}}}
    (work / "results" / "tiny").mkdir(parents=True)
    (work / "results" / "tiny" / "env.json").write_text(json.dumps(env))
    shutil.copytree(ROOT / "examples" / OTHER, work / "results" / OTHER)
    return work


def test_another_result_set_renders_while_the_current_one_is_refused(work):
    other = snakemake(work, f"results/{OTHER}/report.html", "-n", "--cores", "1", check=False)
    said = other.stdout + other.stderr
    assert other.returncode == 0, said[-3000:]
    assert "results/tiny" not in said  # neither refused nor talked about
    assert f"results/{OTHER}/report.html" in said  # planned: its rendering is what was asked

    mine = snakemake(work, "report", "-n", "--cores", "1", check=False)
    said = mine.stdout + mine.stderr
    assert mine.returncode != 0
    # attnprof.model.config.subset_message: the result set, the shape the config lacks, how to keep both
    assert "results/tiny" in said and "b1_h2_s256_d32_fp32_causal" in said and "--config run=" in said
