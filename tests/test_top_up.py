"""Rounds only where undecided (attnprof.analysis.verdict): the looks' levels, plan_top_up's choices worked by hand,
and a row judged twice. The rule's error rates and power with top-up are simulated in tests/test_verdict.py."""

import math

import numpy as np
import pandas as pd
import pytest

from attnprof.analysis.stats import look_levels
from attnprof.analysis.verdict import Design, design_of, paired_verdicts, plan_top_up
from attnprof.model.plan import rounds_of

COL = "device_ms_per_forward"


def test_the_looks_split_the_error_rate_evenly():
    """By hand: two looks at 5 % and 10 % error become 2.5 % and 5 % each; one look keeps them."""
    assert look_levels(0.95, 2) == pytest.approx((0.975, 0.95))
    assert look_levels(0.95, 1) == pytest.approx((0.95, 0.90))


def _v(verdict, needed=None, ratio=1.01):
    return {"verdict": verdict, "repeats_needed": needed, "ratio": ratio, "why": f"{verdict} at look 1",
            "p": None if ratio is None else 0.3}


def test_plan_top_up_takes_the_cheapest_rows_first_within_the_time_bound():
    """Worked by hand: base 3, at most 3 rounds, 100 s. Rows: 'a' decided (no rounds); 'b' needs 4 in all (1 more,
    30 s a round: 30 s); 'c' needs 9 (capped at 3 more, 20 s a round: 60 s); 'd' needs more than the planner
    plans (3 more, 10 s: 30 s); 'e' has no ratio (no paired round: left out). Cheapest first by rounds added then
    time: b (30 s), d (30 s; 60 s so far), c (60 s would make 120 s > 100 s: left, said why)."""
    first = {("v", "a"): _v("same"), ("v", "b"): _v("inconclusive", 4), ("v", "c"): _v("inconclusive", 9),
             ("v", "d"): _v("inconclusive", 51), ("v", "e"): _v("inconclusive", None, ratio=None)}
    cost = {("v", "b"): 30.0, ("v", "c"): 20.0, ("v", "d"): 10.0}
    plan = plan_top_up(first, 3, 3, 100.0, cost)
    assert [(r["shape_key"], r["rounds"], r["added"]) for r in plan["rows"]] == [("b", 4, 1), ("d", 6, 3)]
    assert plan["estimate_s"] == 60.0
    assert [r["shape_key"] for r in plan["left"]] == ["c"] and "top_up.time_s (100 s)" in plan["left"][0]["why"]
    assert rounds_of(plan, 3) == {("b", "v"): 4, ("d", "v"): 6}
    assert plan_top_up(first, 3, 0, 100.0, cost)["rows"] == []  # top_up.rounds 0: top-up off
    # each added round also starts fresh capture processes (10 s here), charged once per round added to any row:
    # b alone 30 + 1 x 10 = 40 s; b and d 60 + 3 x 10 = 90 s; c would make 150 s
    started = plan_top_up(first, 3, 3, 100.0, cost, round_s=10.0)
    assert [r["shape_key"] for r in started["rows"]] == ["b", "d"] and started["estimate_s"] == 90.0
    assert [r["shape_key"] for r in plan_top_up(first, 3, 3, 80.0, cost, round_s=10.0)["rows"]] == ["b"]


def test_design_of_reads_the_config_both_sides_were_captured_with():
    on = {"config": {"repeats": 3, "top_up": {"rounds": 2, "time_s": 60}}}
    assert design_of(on, on) == Design(3, 2)
    assert design_of(on, {"config": {"repeats": 3, "top_up": {"rounds": 0}}}) == Design(None, 1)
    assert design_of({"config": {}}, {"config": {}}) == Design(None, 1)  # made before top-up: one look, every round
    # time_s 0: no round could be added, so top-up was off (attnprof.model.plan.top_up_on): one look
    no_time = {"config": {"repeats": 3, "top_up": {"rounds": 2, "time_s": 0}}}
    assert design_of(no_time, no_time) == Design(None, 1)


def test_a_row_judged_twice_says_so_and_keeps_look_1_rows_as_they_were():
    """Three rounds where 's0' is undetermined and 's1' the same within 2 % (paired log ratios by hand), then
    3 more rounds of 's0' only: 's0' is judged at look 2 on 6 rounds, its top_up naming 3 -> 6 rounds; 's1' keeps
    its look-1 verdict on 3 rounds."""
    ratios = {"s0": [1.00, 1.04, 0.99, 1.01, 1.02, 1.00], "s1": [1.001, 0.999, 1.000]}
    rows_a, rows_b = [], []
    for s, rs in ratios.items():
        for r, x in enumerate(rs):
            rows_a.append({"variant": "v", "shape_key": s, "status": "ok", "repeat": r + 1, COL: 2.0})
            rows_b.append({"variant": "v", "shape_key": s, "status": "ok", "repeat": r + 1, COL: 2.0 * x})
    ra, rb = pd.DataFrame(rows_a), pd.DataFrame(rows_b)
    keys = [("v", "s0", COL), ("v", "s1", COL)]
    out = {k[:2]: v for k, v in paired_verdicts(ra, rb, keys, 0.02, 0.95, Design(3, 2)).items()}
    first = {k[:2]: v for k, v in paired_verdicts(ra[ra.repeat <= 3], rb[rb.repeat <= 3], keys, 0.02, 0.95,
                                                  Design(3, 2)).items()}
    assert first[("v", "s0")]["verdict"] == "inconclusive" and first[("v", "s1")]["verdict"] == "same"
    assert out[("v", "s0")]["look"] == 2 and out[("v", "s0")]["top_up"]["base"] == 3
    assert out[("v", "s0")]["top_up"]["rounds"] == 6 and out[("v", "s0")]["n_a"] == 6
    assert out[("v", "s1")] == first[("v", "s1")]
    assert out[("v", "s0")]["ratio"] == pytest.approx(math.exp(np.mean(np.log(ratios["s0"]))))
