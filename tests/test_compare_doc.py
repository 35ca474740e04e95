"""The render tests' compare.json documents (tests/compare_doc.py) have exactly the keys compare_runs writes: a pair
of the two committed CPU result sets, one of whose rows (sdpa_cudnn: unsupported on a CPU) is not comparable."""

import json
from pathlib import Path

import pandas as pd

from attnprof.analysis.compare import compare_runs
from compare_doc import PAIR, ROW

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _result_set(name: str) -> dict:
    d = EXAMPLES / name
    return {"name": name, "summary": pd.read_csv(d / "summary.csv"), "kernels": pd.read_csv(d / "kernels.csv"),
            "ops": None, "env": json.loads((d / "env.json").read_text()),
            "findings": json.loads((d / "findings.json").read_text()), "repeats": pd.read_csv(d / "repeats.csv")}


def test_the_test_documents_have_the_keys_compare_writes():
    written = compare_runs([_result_set("cpu@torch2.13"), _result_set("cpu@torch2.14")])
    pair = written["pairs"][0]
    assert set(pair) == set(PAIR)
    verdicts = {r["verdict"] for r in pair["rows"]}
    assert "not comparable" in verdicts and len(verdicts) > 1  # both kinds of row are written
    assert all(set(r) == set(ROW) for r in pair["rows"]), [sorted(set(r) ^ set(ROW)) for r in pair["rows"]]
