"""History over builds (attnprof.analysis.history) on simulated series with known answers.

Each simulated series is an N-environment A/B run of one H200: per build, 6 interleaved rounds of 2 variants at the
study shape (sdpa_flash, 0.6 % per capture, and naive, 0.05 %), judged link by link by compare_pair itself (paired: the builds are environments of one A/B run). The
noise is resampled from committed rounds: the H200 interleaved A/A run (benchmarks/calibration/results/h200-aa-a and
-b, 7 variants x 7 shapes, 3 to 6 rounds each): a capture's deviation is a per-round log ratio b_k/a_k of the same
variant (any shape) divided by sqrt(2) (a ratio holds two captures' noise), with a random sign; a round's shift,
shared by every build in the round as in a real run, is a centred log median of side a. The changes are planted
as factors of a build's times. The seeds are fixed."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnprof.analysis.compare import compare_pair
from attnprof.analysis.history import find_events, history, link_recoveries, mark_state, together
from attnprof.model.config import ab_priority

AA = Path(__file__).resolve().parents[1] / "benchmarks" / "calibration" / "results"
STUDY = "b8_h16_s1024_d64_bf16_causal"
VARIANTS = ("sdpa_flash", "naive")
ROUNDS = 6
COL = "device_ms_per_forward"


def _noise() -> dict:
    """Per variant: (the per-round log ratios b/a over every shape, the centred log medians of side a, the study
    shape's median time)."""
    a, b = (pd.read_csv(AA / f"h200-aa-{s}" / "repeats.csv") for s in "ab")
    both = a.merge(b, on=["variant", "shape_key", "repeat"], suffixes=("_a", "_b"))
    out = {}
    for v in VARIANTS:
        rows = both[both["variant"] == v]
        logs_a = np.log(rows[f"{COL}_a"].to_numpy())
        centred = logs_a - rows.groupby("shape_key")[f"{COL}_a"].transform(lambda x: np.log(x).mean()).to_numpy()
        study = a[(a["variant"] == v) & (a["shape_key"] == STUDY)][COL].median()
        out[v] = (np.log(rows[f"{COL}_b"].to_numpy() / rows[f"{COL}_a"].to_numpy()), centred, study)
    return out


NOISE = _noise()


def _build(j: int, times: dict[str, list[float]], extra_kernel: dict | None = None) -> dict:
    """Build ``j`` of a simulated A/B run ``sim``: ``times[variant]`` its round medians (ms); every variant launches
    one kernel (``extra_kernel``: {variant: a second one})."""
    env = {"device": "cuda", "torch": f"2.{10 + j}.0", "config": {"repeats": ROUNDS, "top_up": {"rounds": 0, "time_s": 0}},
           "ab": {"run": "sim", "environment": f"2.{10 + j}"}}
    rep = pd.DataFrame([{"variant": v, "shape_key": STUDY, "repeat": k + 1, "status": "ok", COL: t,
                         "cpu_ms_per_forward": 0.05, "started_at": 1000.0 * k + 10 * j}
                        for v, ts in times.items() for k, t in enumerate(ts)])
    summary = pd.DataFrame([{"variant": v, "shape_key": STUDY, "status": "ok", COL: float(np.median(ts)),
                             "cpu_ms_per_forward": 0.05, "kernels_per_forward": 1 + bool((extra_kernel or {}).get(v)),
                             "rel_error_ok": True} for v, ts in times.items()])
    kernels = pd.DataFrame([{"variant": v, "shape_key": STUDY, "kernel": k} for v in times
                            for k in [f"void {v}_kernel<128>(Params)", *([(extra_kernel or {})[v]] if (extra_kernel or {}).get(v) else [])]])
    return {"name": f"sim@2.{10 + j}", "summary": summary, "kernels": kernels, "ops": None, "env": env,
            "findings": {"shapes": []}, "repeats": rep}


def simulate(rng: np.random.Generator, factors: list[dict[str, float]]) -> list[dict]:
    """One series: build j's times are the variant's study time x ``factors[j][variant]`` (default 1) x the round's
    shift x each capture's own noise (module docstring)."""
    shifts = {v: rng.choice(NOISE[v][1], ROUNDS) for v in VARIANTS}
    builds = []
    for j, f in enumerate(factors):
        times = {}
        for v in VARIANTS:
            ratios, _, study = NOISE[v]
            own = rng.choice(ratios, ROUNDS) / math.sqrt(2) * rng.choice([-1, 1], ROUNDS)
            times[v] = list(study * f.get(v, 1.0) * np.exp(shifts[v] + own))
        builds.append(_build(j, times))
    return builds


JUDGE = partial(compare_pair, noise_floor=0.02)


def _events(doc: dict) -> dict[str, list[dict]]:
    return {c["variant"]: c["events"] for c in doc["cells"]}


def test_a_five_percent_step_is_found_at_its_link():
    rng = np.random.default_rng(41)
    found, series = 0, 30
    for _ in range(series):
        # sdpa_flash 5 % slower from build 2 on (link 1 -> 2), over 4 builds; naive unchanged
        doc = history(simulate(rng, [{}, {}, {"sdpa_flash": 1.05}, {"sdpa_flash": 1.05}]), JUDGE)
        ev = _events(doc)
        found += ([(e["kind"], e["start"], e["end"], e["direction"], e["state"]) for e in ev["sdpa_flash"]]
                  == [("step", 1, 2, "slower", "still present")] and not ev["naive"])
    assert found / series >= 0.90, f"found at its link in {found} of {series} series"


def test_an_a_a_series_of_six_builds_reports_no_step():
    rng = np.random.default_rng(7)
    quiet, series = 0, 30
    for _ in range(series):
        doc = history(simulate(rng, [{}] * 6), JUDGE)
        quiet += not any(_events(doc).values())
    assert quiet / series >= 0.95, f"no event in {quiet} of {series} series"


def test_a_gradual_drift_is_drift_not_a_step():
    rng = np.random.default_rng(3)
    drift, steps, series = 0, 0, 30
    for _ in range(series):
        # sdpa_flash 1 % slower per build over 5 builds (1.00 .. 1.04): no link beyond the 2 % threshold
        doc = history(simulate(rng, [{"sdpa_flash": 1.01 ** j} for j in range(5)]), JUDGE)
        ev = _events(doc)["sdpa_flash"]
        drift += [(e["kind"], e["start"], e["end"], e["direction"]) for e in ev] == [("drift", 0, 4, "slower")]
        steps += any(e["kind"] == "step" for e in ev)
    assert drift / series >= 0.90 and steps == 0, f"drift in {drift}, a step in {steps} of {series} series"


def test_a_one_build_excursion_is_one_event():
    rng = np.random.default_rng(11)
    one, series = 0, 30
    for _ in range(series):
        # sdpa_flash 5 % slower in build 2 only
        doc = history(simulate(rng, [{}, {}, {"sdpa_flash": 1.05}, {}, {}]), JUDGE)
        ev = _events(doc)["sdpa_flash"]
        one += [(e["kind"], e["start"], e["end"], e["state"]) for e in ev] == [("excursion", 1, 3, "gone")]
    assert one / series >= 0.90, f"one excursion at build 2 in {one} of {series} series"


# --- the event rules on verdicts given by hand ---------------------------------------------------------------

def _ends(table: dict):
    """ends(i, j) from a table {(i, j): verdict}: compare_pair's row with that verdict."""
    return lambda i, j: {"verdict": table[(i, j)], "ratio": None} if (i, j) in table else None


def test_event_rules_by_hand():
    # a step up, then the same, then a step back that compare_pair on builds 0..4 calls the same: a regression recovered
    links = {(0, 1): "slower", (1, 2): "same", (2, 3): "same", (3, 4): "faster", (1, 4): "same", (0, 4): "same",
             (1, 3): "same"}
    ev = find_events(["slower", "same", "same", "faster"], _ends(links))
    assert [(e["kind"], e["start"], e["end"]) for e in ev] == [("step", 0, 1), ("step", 3, 4)]
    marked = link_recoveries([mark_state(e, 4, _ends(links)) for e in ev])
    assert [e["state"] for e in marked] == ["gone", "recovery"]  # the regression recovered at the newest link
    assert marked[0]["undone_by"] == [3, 4] and marked[1]["undoes"] == [0, 1]
    # up then down at once, but build 2 still differs from build 0: two steps, not an excursion
    partial_back = {(0, 1): "slower", (1, 2): "faster", (0, 2): "slower"}
    assert [e["kind"] for e in find_events(["slower", "faster"], _ends(partial_back))] == ["step", "step"]
    # a run of one undecided link is never a drift; a run of two whose ends are undetermined is none either
    assert find_events(["inconclusive"], _ends({(0, 1): "inconclusive"})) == []
    assert find_events(["same", "inconclusive"], _ends({(0, 2): "inconclusive"})) == []
    # a regression whose newest comparison is undetermined is said to be so
    e = find_events(["slower", "same", "same"], _ends({(0, 1): "slower", (0, 3): "inconclusive"}))[0]
    assert mark_state(e, 3, _ends({(0, 3): "inconclusive"}))["state"] == "undetermined"


def test_together_needs_every_variant_moved_the_same_way():
    rows = lambda *vs: {"rows": [{"variant": f"v{i}", "verdict": v} for i, v in enumerate(vs)]}  # noqa: E731
    assert together(rows("slower", "slower", "slower")) == "slower"
    assert together(rows("slower", "slower", "same")) is None
    assert together(rows("faster",)) is None  # one variant is that variant's change
    assert together(rows("slower", "faster")) is None


def test_every_variant_moving_together_is_flagged():
    rng = np.random.default_rng(9)
    flagged, series = 0, 10
    for _ in range(series):
        doc = history(simulate(rng, [{}, {"sdpa_flash": 1.06, "naive": 1.06}]), JUDGE)
        flagged += doc["links"][0]["together"] == "slower"
    assert flagged >= 9


def test_structural_steps_are_exact():
    rng = np.random.default_rng(5)
    builds = simulate(rng, [{}, {}, {}])
    times = {v: list(builds[1]["repeats"].query("variant == @v")[COL]) for v in VARIANTS}
    builds[1] = _build(1, times, extra_kernel={"naive": "void softmax_warp_forward<float, 4>(float*)"})
    builds[2]["summary"].loc[builds[2]["summary"]["variant"] == "sdpa_flash", "rel_error_ok"] = False
    doc = history(builds, JUDGE)
    s0 = [(s["variant"], s["what"], s["a"], s["b"]) for s in doc["links"][0]["structural"]]
    s1 = [(s["variant"], s["what"], s["a"], s["b"]) for s in doc["links"][1]["structural"]]
    assert s0 == [("naive", "kernels added", None, ["softmax_warp_forward"])]
    assert s1 == [("naive", "kernels removed", None, ["softmax_warp_forward"]), ("sdpa_flash", "correctness", "correct", "wrong")]
    assert not any(c["events"] for c in doc["cells"])  # the times did not change: structural changes are no step


def test_history_refuses_one_build():
    with pytest.raises(ValueError, match="at least two result sets"):
        history(simulate(np.random.default_rng(0), [{}]), JUDGE)


@pytest.mark.parametrize("names", [["A", "B"], ["A", "B", "C"], ["A", "B", "C", "D", "E"]])
def test_mirror_order_cancels_a_linear_drift_for_every_pair(names):
    """The captures of an N-environment A/B run, in Snakemake's order (higher priority first: round by round, the
    environments as listed in odd rounds and reversed in even ones, A B C C B A), at times 0, 1, 2, ...: over each
    two rounds every environment's mean time is the same, so a drift linear in time adds the same to every side and
    cancels from every pair's paired ratio. Two environments keep ABBA."""
    rounds = 4
    jobs = sorted(((k, e) for k in range(1, rounds + 1) for e in names), key=lambda j: -ab_priority(j[0], j[1], names, rounds))
    at = {job: t for t, job in enumerate(jobs)}
    if len(names) == 2:
        assert [e for _, e in jobs] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert [e for k, e in jobs if k <= 2] == names + names[::-1]
    for k in range(1, rounds + 1, 2):
        means = {e: (at[(k, e)] + at[(k + 1, e)]) / 2 for e in names}
        assert len(set(means.values())) == 1, means


# --- the page: page 1's words and the template ---------------------------------------------------------------

def test_page_one_states_each_event_once_with_its_builds():
    from attnprof.render.history import history_context
    from attnprof.render.common import render_html

    rng = np.random.default_rng(12)
    # sdpa_flash: 2.12 only, 5 % slower; naive: a 5 % step at 2.11 -> 2.12 undone at 2.13 -> 2.14
    builds = simulate(rng, [{}, {}, {"sdpa_flash": 1.05, "naive": 1.05}, {"naive": 1.05}, {}])
    doc = {**history(builds, JUDGE), "confidence": 0.95}
    ctx = history_context(doc, "", {})
    flash = [s for s in ctx["page1"] if s.startswith("sdpa_flash")]
    naive = [s for s in ctx["page1"] if s.startswith("naive")]
    assert len(flash) == 1 and "2.12 only" in flash[0] and "slower" in flash[0] and "back at 2.13" in flash[0]
    assert len(naive) == 2 and "slower at 2.11 \u2192 2.12" in naive[0] and "recovered at 2.13 \u2192 2.14" in naive[0]
    assert "faster at 2.13 \u2192 2.14" in naive[1] and "undoing the change at 2.11 \u2192 2.12" in naive[1]
    html = render_html(ctx, Path(__file__).resolve().parents[1] / "report", "history.html.j2")
    assert "2.12 only" in html and html.count('class="badge bad">slower') == 2  # the two slower links of the page


# --- each step's kernel shares -------------------------------------------------------------------------------

def _kernels(variant: str, us: dict[str, float], other: float = 100.0) -> pd.DataFrame:
    """A kernel table (kernels.csv's columns that the shares read): ``us`` {kernel: us per forward} of ``variant``,
    and one kernel of another variant that must not count."""
    rows = [{"variant": variant, "shape_key": STUDY, "kernel": f"void {k}<128>(Params)", "label": k, "us_per_forward": t}
            for k, t in us.items()]
    return pd.DataFrame(rows + [{"variant": "other", "shape_key": STUDY, "kernel": "void k1<128>(Params)", "label": "k1",
                                 "us_per_forward": other}])


def test_kernel_shares_by_hand():
    from attnprof.analysis.history import kernel_shares

    a = _kernels("v", {"k1": 10.0, "k2": 5.0, "k3": 2.0})
    b = _kernels("v", {"k1": 14.0, "k2": 4.0, "k4": 3.0}, other=50.0)
    got = kernel_shares(a, b, ("v", STUDY))
    # by hand: sums 17 -> 21 us, a change of +4 us; k1 +4, k4 added +3, k3 removed -2, k2 -1 (the other variant's
    # k1, 100 -> 50 us, is not v's)
    assert (got["a_us"], got["b_us"], got["delta_us"]) == (17.0, 21.0, 4.0)
    assert [(k["label"], k["a_us"], k["b_us"], k["delta_us"], k["share_pct"]) for k in got["kernels"]] == [
        ("k1", 10.0, 14.0, 4.0, 100.0), ("k4", 0.0, 3.0, 3.0, 75.0), ("k3", 2.0, 0.0, -2.0, -50.0), ("k2", 5.0, 4.0, -1.0, -25.0)]
    # no kernel times (a CPU run's empty table, or no column of them) and equal sums give none
    assert kernel_shares(a.iloc[:0], b, ("v", STUDY)) is None
    assert kernel_shares(a.drop(columns="us_per_forward"), b, ("v", STUDY)) is None
    assert kernel_shares(a, _kernels("v", {"k1": 12.0, "k2": 5.0}), ("v", STUDY)) is None


def test_a_step_states_each_kernels_share_on_its_link_and_page():
    from attnprof.analysis.history import CHANGED
    from attnprof.render.common import render_html
    from attnprof.render.history import history_context

    builds = simulate(np.random.default_rng(21), [{}, {"sdpa_flash": 1.06}])
    builds[0]["kernels"] = _kernels("sdpa_flash", {"flash_fwd": 80.0, "softmax": 20.0})
    builds[1]["kernels"] = _kernels("sdpa_flash", {"flash_fwd": 84.0, "softmax": 22.0})
    doc = {**history(builds, JUDGE), "confidence": 0.95}
    links = {c["variant"]: c["links"][0] for c in doc["cells"]}
    assert links["sdpa_flash"]["verdict"] == "slower" and links["naive"]["verdict"] not in CHANGED
    # by hand: +6 us in all, flash_fwd +4 (2/3 of the step), softmax +2 (1/3); naive's undecided link has none
    shares = links["sdpa_flash"]["kernel_shares"]
    assert [(k["label"], k["delta_us"], round(k["share_pct"], 6)) for k in shares["kernels"]] == [
        ("flash_fwd", 4.0, round(200 / 3, 6)), ("softmax", 2.0, round(100 / 3, 6))]
    assert links["naive"]["kernel_shares"] is None
    html = render_html(history_context(doc, "", {}), Path(__file__).resolve().parents[1] / "report", "history.html.j2")
    assert "<td class=\"num\">+4</td><td class=\"num\">66.7&nbsp;%</td>" in html
    # page 1 names the kernel that carries the step, its name escaped
    builds[1]["kernels"].loc[builds[1]["kernels"]["label"] == "flash_fwd", "label"] = "flash_fwd<bf16>"
    doc = {**history(builds, JUDGE), "confidence": 0.95}
    html = render_html(history_context(doc, "", {}), Path(__file__).resolve().parents[1] / "report", "history.html.j2")
    assert ", 66.7 % of it in flash_fwd&lt;bf16&gt;;" in html and "<bf16>" not in html
    assert any(", 66.7 % of it in flash_fwd<bf16>;" in s for s in history_context(doc, "", {})["page1"])
    assert "<td class=\"num\">+2</td><td class=\"num\">33.3&nbsp;%</td>" in html


def test_a_drift_states_each_kernels_share_between_its_end_builds():
    from attnprof.render.common import render_html
    from attnprof.render.history import history_context

    rng = np.random.default_rng(3)
    for _ in range(10):  # the first series whose drift is found (test_a_gradual_drift_is_drift_not_a_step: >= 90 %)
        builds = simulate(rng, [{"sdpa_flash": 1.01 ** j} for j in range(5)])
        # kernel tables of the end builds and one between them (which must not count): softmax grows 9 us, the
        # forward kernel 3 us, a copy shrinks 2 us: +10 us from the first build to the last
        us = [{"flash_fwd": 80.0, "softmax": 20.0, "copy": 5.0}, {"flash_fwd": 99.0, "softmax": 1.0},
              {"flash_fwd": 83.0, "softmax": 29.0, "copy": 3.0}]
        for j, t in zip((0, 2, 4), us):
            builds[j]["kernels"] = _kernels("sdpa_flash", t)
        doc = {**history(builds, JUDGE), "confidence": 0.95}
        drift = [e for c in doc["cells"] if c["variant"] == "sdpa_flash" for e in c["events"] if e["kind"] == "drift"]
        if drift:
            break
    assert drift and (drift[0]["start"], drift[0]["end"]) == (0, 4)
    shares = drift[0]["kernel_shares"]
    assert (shares["a_us"], shares["b_us"], shares["delta_us"]) == (105.0, 115.0, 10.0)
    assert [(k["label"], k["delta_us"], round(k["share_pct"], 6)) for k in shares["kernels"]] == [
        ("softmax", 9.0, 90.0), ("flash_fwd", 3.0, 30.0), ("copy", -2.0, -20.0)]
    html = render_html(history_context(doc, "", {}), Path(__file__).resolve().parents[1] / "report", "history.html.j2")
    assert "a drift, slower" in html and "<th>share of the drift</th>" in html
    assert "<td class=\"num\">+9</td><td class=\"num\">90&nbsp;%</td>" in html
    assert "(no single link beyond the threshold), 90 % of it in softmax;" in html
