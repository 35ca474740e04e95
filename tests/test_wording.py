"""Wording found by a new user's reading of the reports: a range is written one way (an en dash, the unit once:
attnprof.model.fmt.format_range), a host time's range is "captures" and never "rerun" (one place decides:
attnprof.findings.ranking.spread_words), the time a finding states says once what its median is, and no sentence of
page 1 names one shape key twice. Every expected string here is written by hand from those rules."""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from attnprof.findings.data import RunData
from attnprof.model.fmt import format_range

ROOT = Path(__file__).resolve().parents[1]
#: every committed result set (not the comparisons): page 1 is rendered from each
EXAMPLES = sorted(p.name for p in (ROOT / "examples").iterdir() if (p / "summary.csv").exists())


def test_a_range_is_written_with_an_en_dash_and_its_unit_once():
    assert format_range(37.6, 53.7, "ms") == "37.6\u201353.7 ms"
    assert format_range(0.05741, 0.05824) == "0.0574\u20130.0582"  # 3 significant digits, no unit
    assert format_range(1.0, 3.0, "ms") == "1\u20133 ms"  # integers without decimals
    assert format_range(1.39, 1.64, "\u00d7") == "1.39\u20131.64\u00d7"  # a factor against its number
    assert format_range("0.8", "1.9", "%") == "0.8\u20131.9 %"  # ends formatted by the caller kept as they are
    assert format_range(0.97412, 1.0123, digits=4) == "0.9741\u20131.012"


def test_a_range_of_two_references_states_its_unit_once():
    from attnprof.findings.refs import fmt_ref_range

    ms = [{"value": 37.61, "unit": "ms"}, {"value": 53.72, "unit": "ms"}]
    assert fmt_ref_range(*ms) == "37.6\u201353.7 ms"
    assert fmt_ref_range({"value": 961.2, "unit": "us"}, {"value": 1012.0, "unit": "us"}) == "961\u20131012 \u00b5s"
    assert fmt_ref_range({"value": None, "unit": "ms"}, ms[1]) == "n/a\u201353.7 ms"
    # ends in different units: each keeps its own
    assert fmt_ref_range(ms[0], {"value": 12.0, "unit": "us"}) == "37.6 ms\u201312 \u00b5s"


def _run(device: str, rows: dict[str, tuple], repeats: bool) -> RunData:
    """One shape's summary: variant -> (median, low, high ms, repeats counted); low and high are the rerun interval
    with ``repeats`` (``<time>_run_lo``/``_hi``), else the min and max of the forwards; the host time equals the
    device time on a GPU run; every row with an independent timing of the same median."""
    prefix = "device_ms" if device == "cuda" else "cpu_ms"
    ends = ("_run_lo", "_run_hi") if repeats else ("_min", "_max")
    recs = []
    for v, (med, lo, hi, n) in rows.items():
        rec = {"variant": v, "shape_key": "s", "status": "ok", "device": device, "dtype": "bf16", "repeats_ok": n,
               f"{prefix}_per_forward": med, f"{prefix}{ends[0]}": lo, f"{prefix}{ends[1]}": hi, "timed_ms_median": med,
               "timed_ms_min": lo, "timed_ms_max": hi}
        if device == "cuda":
            rec.update({"cpu_ms_per_forward": med, f"cpu_ms{ends[0]}": lo, f"cpu_ms{ends[1]}": hi})
        recs.append(rec)
    empty = pd.DataFrame(columns=["variant", "kernel", "category", "us_per_forward", "calls_per_forward"])
    return RunData("s", pd.DataFrame(recs), empty, pd.DataFrame(columns=["variant", "api", "calls_per_forward"]),
                   pd.DataFrame(columns=["variant", "op", "calls_per_forward"]), {}, [])


@pytest.mark.parametrize("device, repeats, counts, words", [
    ("cuda", True, (3, 3), "trace device time per forward: median over 3 repeats of each repeat's median forward"),
    ("cuda", True, (2, 3), "trace device time per forward: median over 2\u20133 repeats of each repeat's median forward"),
    ("cpu", True, (4, 4), "host time per forward (CPU run): median over 4 repeats of each repeat's median forward"),
    ("cuda", False, (1, 1), "trace device time per forward: median of the profiled forwards"),
])
def test_the_time_a_finding_ranks_by_says_once_what_its_median_is(device, repeats, counts, words):
    d = _run(device, {"sdpa_flash": (1.0, 0.9, 1.1, counts[0]), "sdpa_cudnn": (2.0, 1.9, 2.1, counts[1])}, repeats)
    assert d.time_columns()[3] == words
    from attnprof.findings.rules.timing import rule_speed

    fastest = rule_speed(d)[-1]
    # the ranking states the fastest's median with those words, and nothing after them repeats "median"
    assert fastest["statement"].startswith(f"fastest variant: sdpa_flash (1 ms, {words}); ")
    assert "median, median" not in fastest["statement"] and "repeats, median" not in fastest["statement"]


def test_the_bound_verdict_names_the_host_range_over_the_captures_and_the_device_rerun_interval():
    """A GPU run with repeats: the host time's range is its lowest and highest capture, never a rerun (or between-run)
    interval; the device time's is its rerun interval. Each with an en dash and its unit once."""
    from attnprof.findings.rules.timing import rule_cpu_cost

    d = _run("cuda", {"naive": (1.0, 0.9, 1.4, 3)}, True)
    d.summary["cpu_ms_per_forward"], d.summary["cpu_ms_run_lo"], d.summary["cpu_ms_run_hi"] = 2.0, 1.5, 2.5
    (f,) = rule_cpu_cost(d)
    # the host's lowest capture (1.5) above the device interval's upper end (1.4): launch-bound in every interval
    assert f["statement"].endswith(
        "launch-bound at this shape: the host takes longer to issue the work than the GPU to run it, in every repeat's "
        "interval (per forward: the host's range over the captures 1.5\u20132.5 ms, the device's rerun interval "
        "0.9\u20131.4 ms)")
    assert "between-run" not in f["statement"]


def test_the_math_ratio_names_its_ranges_over_the_captures_on_a_cpu_run():
    from attnprof.findings.rules.timing import rule_speed

    d = _run("cpu", {"sdpa_math": (19.3, 19.2, 20.2, 4), "naive_inplace": (17.7, 16.8, 18.3, 4)}, True)
    ratio = rule_speed(d)[0]
    # 19.3 / 17.7 = 1.0904 (3 significant digits: 1.09); the independent timings are the same medians
    assert ratio["statement"] == (
        "sdpa_math takes 1.09x the time of naive_inplace (19.3 ms vs 17.7 ms, host time per forward (CPU run): median "
        "over 4 repeats of each repeat's median forward; ranges over the captures 19.2\u201320.2 ms and "
        "16.8\u201318.3 ms); independent timing gives 1.09x (19.3 ms vs 17.7 ms, median)")


def test_the_fidelity_finding_states_the_timed_calls_range_once():
    from attnprof.findings.rules.timing import rule_fidelity

    d = _run("cpu", {"naive": (17.7, 17.2, 23.0, 1)}, False)
    (f,) = rule_fidelity(d)
    assert f["statement"] == "naive: trace 17.7 ms, perf_counter 17.7 ms (min\u2013max 17.2\u201323 ms); timed / trace = 1"


def test_an_interval_and_its_unit_print_whole():
    """The PDF keeps an interval on one line (attnprof.render.breaks): an en dash between two numbers, whatever unit
    follows once."""
    from attnprof.render.breaks import mark_breaks

    assert mark_breaks("(rerun 0.0574\u20130.0582 ms)") == '(rerun <span class="iv">0.0574\u20130.0582</span> ms)'
    assert mark_breaks("margin 1.47\u20131.86\u00d7") == 'margin <span class="iv">1.47\u20131.86</span>\u00d7'
    assert mark_breaks("ranges over the captures 19.2\u201320.2 ms") == \
        'ranges over the captures <span class="iv">19.2\u201320.2</span> ms'


def _rendered(name: str) -> tuple[pd.DataFrame, str]:
    """(summary.csv, report HTML) of a committed example, rendered by this checkout from its tables (no plots)."""
    from attnprof.analysis.records import load_env
    from attnprof.findings import load_expectations
    from attnprof.render.common import render_html
    from attnprof.render.report import build_context

    folder = ROOT / "examples" / name
    summary = pd.read_csv(folder / "summary.csv")
    calibration = folder / "calibration.json"
    ctx = build_context(name, summary, pd.read_csv(folder / "kernels.csv"), pd.DataFrame(),
                        json.loads((folder / "findings.json").read_text()), load_env(folder / "env.json", ()),
                        load_expectations(ROOT / "config" / "expectations.yaml", variants=summary["variant"]), {}, css="",
                        calibration=json.loads(calibration.read_text()) if calibration.exists() else None)
    return summary, render_html(ctx, ROOT / "report")


def _text(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


@pytest.mark.parametrize("name", EXAMPLES)
def test_no_sentence_of_page_1_names_a_shape_key_twice(name):
    """Page 1 once read "The fastest variant is sdpa_flash, at b2_h8_s512_d64_fp32_causal: 11.7 ms (...) host time per
    forward at b2_h8_s512_d64_fp32_causal": every sentence of its findings names each shape key once at most (a key
    counts whole: b8_..._causal is not b8_..._causal-lr)."""
    summary, html = _rendered(name)
    brief = re.search(r'<ul class="findings-brief">(.*?)</ul>', html, re.S).group(1)
    items = [_text(li) for li in re.findall(r"<li>(.*?)</li>", brief, re.S)]
    assert items
    keys = set(summary["shape_key"])
    for item in items:
        for sentence in re.split(r"(?<=\.)\s+(?=[A-Z])", item):
            twice = {k: n for k in keys if (n := len(re.findall(rf"(?<![\w-]){re.escape(k)}(?![\w-])", sentence))) > 1}
            assert not twice, (sentence, twice)


@pytest.mark.parametrize("name, host, device", [("cpu@torch2.13", True, False), ("nvidia-h200@base", True, True)])
def test_the_tables_label_a_host_range_captures_and_a_device_interval_rerun(name, host, device):
    """The summary table's time cells: a host time's range says "captures", a device time's "rerun"; the CPU run has
    no device time, so no cell of it says "rerun"."""
    summary, html = _rendered(name)
    labels = re.findall(r'<span class="hint rerun">(\w+) ', html)
    assert ("captures" in labels) is host and ("rerun" in labels) is device
    # the host cell of the first variant with a range, from summary.csv: its lowest and highest capture, each to 3
    # significant digits, an en dash between them
    row = summary.dropna(subset=["cpu_ms_run_lo"]).iloc[0]
    assert f'<span class="hint rerun">captures {row["cpu_ms_run_lo"]:.3g}\u2013{row["cpu_ms_run_hi"]:.3g}</span>' in html


def test_a_variable_one_ab_environment_does_not_set_reads_not_set():
    """compare's environment differences: a variable under ab.env. that one environment lacks is "not set" (it was
    recorded: the environment sets none), while another field a result set lacks stays "not recorded"."""
    from attnprof.render.compare import compare_context

    from compare_doc import doc as compare_doc

    doc = compare_doc({"a": "x@base", "b": "x@sleep", "env_diff": [{"key": "ab.env.ATTNPROF_AB_EXTRA_SLEEP", "a": None, "b": "1"},
                                                                  {"key": "gpus", "a": "GPU-1", "b": None}]})
    rows = compare_context(doc, "")["cmp"]["pairs"][0]["env_diff"]
    assert [(r["a"], r["b"]) for r in rows] == [("not set", "1"), ("GPU-1", None)]
