"""The committed A/B examples, re-derived from their own traces by a path independent of the pipeline.

examples/compare_h200_ab_sleep: one H200, one torch build, environments base and sleep interleaved over 6
rounds; sleep only lengthens the spin kernel of the test variant sleep_attn (examples/ab_sleep_variant.py),
by a calibrated 1.0330x of its forward (benchmarks/calibration/calibration_h200.json). Known answer: that
variant slower by about 3.3 %, nothing else changed, and in its recipe only the spin kernel slower.
examples/compare_cpu_ab_torch2.13_vs_2.14.1: torch 2.13.0 against 2.14.1 on the CPU (config/ab-cpu.yaml)."""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats

from test_trust import independent_forwards

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
H200 = EX / "compare_h200_ab_sleep" / "compare.json"
STUDY = "b8_h16_s1024_d64_bf16_causal"
#: the calibration's known slowdown of sleep_attn's forward (benchmarks/calibration, docs/statistics.md)
KNOWN = 1.0330


def _pair(path):
    return json.loads(path.read_text())["pairs"][0]


def _median_device_ms(run: str, variant: str, repeat: int) -> float:
    with gzip.open(EX / run / "captures" / STUDY / variant / f"r{repeat}" / "trace.json.gz", "rt") as fh:
        forwards = independent_forwards(json.load(fh))
    assert forwards and not any(f["lost"] or f["bad"] for f in forwards)
    return statistics.median(f["device_us"] for f in forwards) / 1e3


def test_h200_ab_finds_the_known_change_and_nothing_else():
    pair = _pair(H200)
    assert pair["paired"] and pair["accounting"]["changed"] is False
    rows = {r["variant"]: r for r in pair["rows"]}
    assert rows["sleep_attn"]["verdict"] == "slower" and rows["sleep_attn"]["ratio_lo"] < KNOWN < rows["sleep_attn"]["ratio_hi"]
    assert {v: r["verdict"] for v, r in rows.items() if v != "sleep_attn"} == dict.fromkeys(set(rows) - {"sleep_attn"}, "same")


def test_h200_ab_paired_ratio_by_hand_from_the_traces():
    """Per round k: the median device time per forward of each side's capture, counted from the trace by hand, for
    every variant; sleep_attn's paired ratio is the geometric mean of B_k / A_k (6 rounds) with a t interval on its
    log ratios whose variance is moderated over the other seven variants' (tests/moderation_by_hand.py). The run had
    top-up on (its env.json's config), so each of the two looks judges at 97.5 %: the t quantile 0.9875."""
    from moderation_by_hand import moderated

    config = json.loads((EX / "nvidia-h200@base" / "env.json").read_text())["config"]
    assert config["top_up"]["rounds"] > 0
    rows = {r["variant"]: r for r in _pair(H200)["rows"]}
    logs = {v: [math.log(_median_device_ms("nvidia-h200@sleep", v, k) / _median_device_ms("nvidia-h200@base", v, k))
                for k in range(1, 7)] for v in rows}
    noise = moderated({v: (statistics.variance(x), len(x) - 1) for v, x in logs.items()}, {v: v for v in logs})
    mean = statistics.mean(logs["sleep_attn"])
    var, df = noise["sleep_attn"]
    half = stats.t.ppf(0.9875, df) * math.sqrt(var / 6)
    row = rows["sleep_attn"]
    assert row["ratio"] == pytest.approx(math.exp(mean), rel=1e-6)
    assert (row["ratio_lo"], row["ratio_hi"]) == pytest.approx((math.exp(mean - half), math.exp(mean + half)), rel=1e-6)


def test_h200_ab_recipe_names_the_one_kernel_that_changed():
    """Every step of every forward is kept (one torch build on both sides); in sleep_attn's the spin kernel is
    the one step judged slower, by more than the whole forward (it is a part of it), and no other step of any
    variant is."""
    recipes = _pair(H200)["recipes"]
    assert len(recipes) == 8 and all(r["counts"]["kept"] > 0 and r["counts"]["added"] == r["counts"]["removed"] == 0
                                     for r in recipes)
    slower = [(r["variant"], row["a"]["label"], row["ratio"]) for r in recipes for g in r["groups"] for row in g["rows"]
              if row.get("verdict") == "slower"]
    assert len(slower) == 1 and slower[0][0] == "sleep_attn" and "spin_kernel" in slower[0][1] and slower[0][2] > KNOWN


def test_cpu_ab_compares_two_torch_builds_paired_and_calls_nothing_beyond_the_host_threshold():
    envs = {n: json.loads((EX / n / "env.json").read_text()) for n in ("cpu@torch2.13", "cpu@torch2.14")}
    assert [e["torch"].split("+")[0] for e in envs.values()] == ["2.13.0", "2.14.1"]
    assert {e["ab"]["run"] for e in envs.values()} == {"cpu"}
    pair = _pair(EX / "compare_cpu_ab_torch2.13_vs_2.14.1" / "compare.json")
    assert pair["paired"] and pair["threshold"] == pytest.approx(0.20)
    assert not [r for r in pair["rows"] if r["verdict"] in ("slower", "faster")]
    assert all(r["verdict"] == "same recipe" for r in pair["recipes"])
