"""The repeats' rules on two real CPU runs of one config (tests/fixtures/cpu_repeats, 5 repeats each): the
summary's intervals recomputed from the per-repeat table; an A/A comparison with no change; and a copy with
one variant's host times stretched by a known factor, found with that factor inside its interval."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnprof.analysis.compare import compare_runs

FIX = Path(__file__).resolve().parent / "fixtures" / "cpu_repeats"


def load(name: str) -> dict:
    d = FIX / name
    return {"name": name, "summary": pd.read_csv(d / "summary.csv"), "kernels": pd.read_csv(d / "kernels.csv"),
            "ops": None, "env": json.loads((d / "env.json").read_text()),
            "findings": json.loads((d / "findings.json").read_text()), "repeats": pd.read_csv(d / "repeats.csv")}


@pytest.mark.parametrize("name", ["cpu-aa-a", "cpu-aa-b"])
def test_summary_intervals_recomputed_from_the_per_repeat_table(name):
    run = load(name)
    summary = run["summary"].set_index("variant")
    ok = run["repeats"][run["repeats"]["status"] == "ok"]
    assert len(ok.groupby("variant")) == 5 and (ok.groupby("variant").size() == 5).all()
    for variant, rep in ok.groupby("variant"):
        m = rep["cpu_ms_per_forward"].to_numpy(float)
        logs = np.log(m)
        row = summary.loc[variant]
        assert row["cpu_ms_per_forward"] == np.median(m)  # five repeats: one of them, exactly
        # host times: no parametric interval, the floor and the highest capture median (stats.host_range)
        assert row["cpu_ms_run_lo"] == m.min() and row["cpu_ms_run_hi"] == m.max()
        assert row["cpu_ms_run_sd_pct"] == pytest.approx(100 * logs.std(ddof=1), rel=1e-9)
        assert row["repeats"] == row["repeats_ok"] == 5


def test_two_runs_of_one_config_are_not_a_change():
    pair = compare_runs([load("cpu-aa-a"), load("cpu-aa-b")])["pairs"][0]
    assert pair["threshold"] == 0.20  # host times: the CPU run's practical threshold
    rows = [r for r in pair["rows"] if r["verdict"] != "not comparable"]
    assert len(rows) == 5 and not [r for r in rows if r["verdict"] in ("slower", "faster")], rows
    # the CUDA-only backends were refused in both: nothing to compare, and said so
    assert {r["variant"] for r in pair["rows"] if r["verdict"] == "not comparable"} == {"sdpa_efficient", "sdpa_cudnn"}


@pytest.mark.parametrize("variant,factor", [("naive_inplace", 1.6), ("sdpa_flash", 0.6)])
def test_a_stretched_copy_shows_its_factor_but_host_times_of_two_sittings_are_not_judged(variant, factor):
    a, b = load("cpu-aa-a"), load("cpu-aa-a")
    b["name"] = "stretched"
    for table in (b["summary"], b["repeats"]):
        rows = table["variant"] == variant
        table.loc[rows, "cpu_ms_per_forward"] *= factor
    pair = compare_runs([a, b])["pairs"][0]
    rows = {r["variant"]: r for r in pair["rows"]}
    hit = rows[variant]
    # unpaired host times: the ratio is shown, never judged (a verdict on host times needs paired rounds)
    assert hit["verdict"] == "not judged" and "paired rounds" in hit["why"] and hit["ratio_lo"] is None
    assert hit["ratio"] == pytest.approx(factor)
    assert all(r["verdict"] in ("not judged", "not comparable") for v, r in rows.items() if v != variant)
    assert all(r["ratio"] == pytest.approx(1.0) for v, r in rows.items() if v != variant and r["ratio"] is not None)
