"""The report's numbers come from the findings and the report data (attnprof.render.report); the
templates only format them."""
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from attnprof.model.formats import current_record
from attnprof.findings import compute
from attnprof.render.report import build_context, calibration_numbers, compare_context
from attnprof.analysis.tables import concat_tables

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("template", ["report.html.j2", "compare.html.j2", "history.html.j2"])
def test_the_templates_compute_nothing(template):
    """No arithmetic inside a template's expressions: ratios, spreads, shares and unit conversions
    are computed in Python, where the findings' references and the tests can reach them."""
    text = (ROOT / "report" / template).read_text()
    expressions = re.findall(r"\{\{(.*?)\}\}|\{%(.*?)%\}", text, flags=re.S)
    arithmetic = re.compile(r"[\w)\]]\s*(\*\*?|/|\+|-)\s*[\w(]|\|\s*(sum|min|max|round|abs)\b")
    strings = re.compile(r"\"[^\"]*\"|'[^']*'")
    found = [e for pair in expressions for e in pair if e and arithmetic.search(strings.sub("''", e))]
    assert not found, found


@pytest.fixture(scope="module")
def context(h200, h200_data):
    expectations = yaml.safe_load((ROOT / "config" / "expectations.yaml").read_text())
    findings = {"shapes": [compute(h200_data, expectations)]}
    env = {"gpu_name": "NVIDIA H200", "config": {}}
    env = current_record("env", env, "env.json")  # as attnprof.analysis.records.load_env reads it
    return build_context("t", h200["summary"], h200["kernels"], concat_tables(h200["launches"]), findings, env, expectations, {},
                         css="", calibration={"gemm_tflops_bf16": 729.0, "datasheet_tflops_bf16": 989.0, "copy_tb_per_s": 4.07,
                                              "datasheet_tb_per_s": 4.8, "copy_bytes": 2**31})


def test_fidelity_ratios_are_the_ones_the_findings_state(context):
    shape = context["shapes"][0]
    stated = {f["variants"][0]: f["numbers"] for f in shape["findings"] if f["rule"] == "fidelity" and len(f["variants"]) == 1}
    rows = [r for r in shape["rows"] if r["status"] == "ok"]
    assert rows and {r["variant"] for r in rows} == set(stated)
    for r in rows:
        assert r["timed_over_trace"] == stated[r["variant"]]["timed_over_trace"]["value"]
        assert r["timed_over_trace"] == pytest.approx(r["timed_ms_median"] / r["device_ms_per_forward"])
        if r["graph_ms_median"] is not None:
            assert r["graph_over_trace"] == pytest.approx(r["graph_ms_median"] / r["device_ms_per_forward"])
        quartiles = r.get("timed_ms_q1") is not None
        width = (r["timed_ms_q3"] - r["timed_ms_q1"]) if quartiles else (r["timed_ms_max"] - r["timed_ms_min"])
        assert r["timed_spread_pct"] == pytest.approx(100 * width / r["timed_ms_median"])


def test_shares_conversions_and_tolerances_in_percent(context):
    cal = context["calibration"]
    assert cal["gemm_bf16_pct_of_datasheet"] == pytest.approx(100 * 729 / 989) and cal["copy_gib"] == 2.0
    assert cal["copy_pct_of_datasheet"] == pytest.approx(100 * 4.07 / 4.8)
    assert "copy_gib" not in calibration_numbers({"skipped": "CPU run"})
    approx = [c for c in context["shapes"][0]["expectations"] if c["compare"] == "approx"]
    assert approx and all(c["tolerance_pct"] == pytest.approx(100 * c["tolerance"]) for c in approx)


def test_compare_context_in_percent_with_counts_and_changed_rows():
    rows = [{"variant": "a", "shape_key": "s", "verdict": "slower", "kernels_added": ["k"]},
            {"variant": "b", "shape_key": "s", "verdict": "same"}, {"variant": "c", "shape_key": "s", "verdict": "inconclusive"}]
    doc = {"noise_floor": 0.02, "confidence": 0.9, "pairs": [{"rows": rows}]}
    cmp = compare_context(doc, "")["cmp"]
    assert cmp["noise_floor_pct"] == pytest.approx(2.0) and cmp["confidence_pct"] == pytest.approx(90.0)
    pair = cmp["pairs"][0]
    assert [r["variant"] for r in pair["changed"]] == ["a"] and pair["kernels_differ"] == ["a at s"]
    assert pair["counts"] == {"slower": 1, "faster": 0, "same": 1, "inconclusive": 1, "not judged": 0, "not comparable": 0}
    assert "noise_floor_pct" not in doc  # compare.json's document is not changed


def test_compare_context_detection_limit_from_each_row_s_power():
    """The smallest change a comparison finds with 80 % power: a row's limit solves the rule's power (noncentral t at
    the row's se and df) for the change, checked here against scipy.stats.nct directly; never under the threshold;
    the pair states the limit most rows reach; rows not judged (host times of two sittings) promise nothing."""
    from scipy import stats as st

    def row(v, se, df, verdict="inconclusive"):
        return {"variant": v, "shape_key": "s", "verdict": verdict, "ratio": 1.0, "se": se, "df": df,
                "repeats_a": 5, "repeats_b": 5}

    rows = [row("a", 0.01, 8), row("b", 0.05, 8), row("c", 0.02, 30), row("d", 0.0, 8, "same"),
            {"variant": "e", "shape_key": "s", "verdict": "not comparable"}, row("f", 0.01, 8, "not judged")]
    doc = {"noise_floor": 0.02, "noise_floor_host": 0.2, "pairs": [{"rows": rows, "threshold": 0.05}]}
    det = compare_context(doc, "")["cmp"]["pairs"][0]["detection"]
    assert det["rows"] == 4 and det["within"] == 3  # most: more than half of the judged rows
    theta = math.log(1.05)
    for se, df, pct in ((0.02, 30, det["pct"]), (0.05, 8, det["max_pct"])):
        nc = (math.log1p(pct / 100) - theta) / se
        assert st.nct.sf(st.t.ppf(0.975, df), df, nc) == pytest.approx(0.8, abs=1e-4)
    assert det["min_pct"] == pytest.approx(5.0) and det["at_threshold"]  # d: no spread, so the threshold itself
    assert det["repeats"] == "5 / 5"
    one_repeat = {"noise_floor": 0.02, "pairs": [{"rows": [{"variant": "a", "shape_key": "s", "verdict": "inconclusive"}]}]}
    assert compare_context(one_repeat, "")["cmp"]["pairs"][0]["detection"] is None

def test_compare_page_1_says_nothing_changed_with_the_detection_limit():
    """Two CPU runs of one config (tests/fixtures/cpu_repeats): the first lines say nothing changed, the detection
    limit, and the environment and config differences in one line, before the per-variant table."""
    import sys

    from attnprof.analysis.compare import compare_runs
    from attnprof.render.report import render_html

    sys.path.insert(0, str(ROOT / "tests"))
    from test_repeats_cpu import load

    doc = compare_runs([load("cpu-aa-a"), load("cpu-aa-b")])
    html = render_html(compare_context(doc, ""), ROOT / "report", "compare.html.j2")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html.split("Per variant")[0]))
    det = compare_context(doc, "")["cmp"]["pairs"][0]["detection"]
    text = text.replace("&plusmn;", "±").replace("&nbsp;", " ")
    counts = doc["pairs"][0]["counts"]
    assert counts["slower"] == counts["faster"] == 0
    # an inconclusive row is a change not ruled out: the headline then says none was shown, not that none happened
    head = "No change shown" if counts["inconclusive"] else "Nothing changed"
    assert f"{head} (threshold ±20 %): no time changed beyond the threshold, and no kernel or op was added or removed." in text
    assert ("cannot be ruled out" in text) == bool(counts["inconclusive"])
    # host times of two sittings: shown, not judged, so no detection limit is promised
    assert det is None and counts["not judged"] == 5 and "5 host times of two sittings are shown, not judged" in text
    assert "Detection limit: none" in text
    # both result sets' torch build, then a difference a line (key: old -> new)
    torch = json.loads((ROOT / "tests" / "fixtures" / "cpu_repeats" / "cpu-aa-a" / "env.json").read_text())["torch"]
    assert f"Environment and config: torch {torch} in both; 2 differences" in text
    assert "config.run: cpu-aa-a &rarr; cpu-aa-b" in text


def test_compare_page_1_names_both_torch_builds_and_writes_the_differences_as_lines():
    """Issue 35 items 4 and 7: an A/B of a CPU torch against a CUDA build names both builds with their local suffix,
    each environment or config difference is a line 'key: old -> new' with lists and mappings written out (no Python
    repr), and a detection limit that every row reaches says so once, not 'from 2 % to 2 %'."""
    from attnprof.render.report import render_html

    import sys

    from attnprof.analysis.compare import compare_runs

    sys.path.insert(0, str(ROOT / "tests"))
    from test_repeats_cpu import load

    doc = compare_runs([load("cpu-aa-a"), load("cpu-aa-b")])
    pair = doc["pairs"][0]
    judged = [{**r, "verdict": "same", "se": 0.0, "df": 8} for r in pair["rows"] if r["verdict"] == "not judged"]
    gpus = [{"index": 0, "name": "NVIDIA H200"}]
    pair.update(rows=judged, counts=None, torch={"a": "2.13.0+cpu", "b": "2.14.1+cu130"},
                env_diff=[{"key": "config.variants", "a": ["naive", "sdpa_flash"], "b": ["naive"]},
                          {"key": "gpus", "a": None, "b": gpus}])
    html = render_html(compare_context(doc, ""), ROOT / "report", "compare.html.j2")
    brief = re.sub(r"\s+", " ", html.split("Per variant")[0])
    assert "torch 2.13.0+cpu in cpu-aa-a, 2.14.1+cu130 in cpu-aa-b;" in brief
    assert "<br><code>config.variants</code>: naive, sdpa_flash &rarr; naive" in brief
    assert "<br><code>gpus</code>: not recorded &rarr; (index=0, name=NVIDIA H200)" in brief
    assert "[&#39;" not in brief and "{&#39;" not in brief  # no repr of a list or a dict
    # every row at the threshold (no spread): each of the rows, one figure
    assert f"with 80&nbsp;% power in each of the {len(judged)} rows judged." in brief and len(judged) == 5
    assert "over the rows" not in brief


def test_the_detection_limit_is_the_rule_s_own_and_host_times_promise_none():
    """A CPU run's host times are judged only in a paired A/B: the methods promise no detectable change for them. A
    GPU run's sentence states the change compare finds with 80 % power against another sitting and in a paired A/B,
    each stats.detectable_change of the rows' spreads (an independent call here), larger across sittings."""
    import re

    import pandas as pd

    from attnprof.analysis.stats import SITTING_SD, detectable_change
    from attnprof.render.report import repeats_text

    summary = pd.DataFrame({"variant": ["a", "b"], "cpu_ms_run_sd_pct": [1.0, 1.5], "device_ms_run_sd_pct": [None, None]})
    text = repeats_text({"repeats": 5, "compare": {"noise_floor": 0.02, "noise_floor_host": 0.2}}, summary)
    assert "% power" not in text and "only in a paired A/B run" in text and "67&nbsp;% probability" in text  # (5-1)/(5+1)
    gpu = pd.DataFrame({"variant": ["a", "b", "c"], "device_ms_run_sd_pct": [0.5, 1.0, 2.0], "device_ms_run_df": [8, 8, 4]})
    text = repeats_text({"repeats": 5, "compare": {"noise_floor": 0.02}}, gpu)
    # each number before its % or before the en dash of a range (attnprof.model.fmt.format_range)
    nums = [float(x) for x in re.findall(r"([0-9.]+)(?:&nbsp;%|\u2013)", text.split("80&nbsp;% power")[1])]
    other = [100 * detectable_change(sd / 100, 5, 0.02, df=2 * d, sitting_sd=SITTING_SD) for sd, d in ((0.5, 8), (1.0, 8), (2.0, 4))]
    paired = [100 * detectable_change(sd / 100, 5, 0.02, df=2 * d) for sd, d in ((0.5, 8), (1.0, 8), (2.0, 4))]
    assert nums[:3] == [round(other[1], 1), round(other[0], 1), round(other[2], 1)]
    assert nums[4:7] == [round(paired[1], 1), round(paired[0], 1), round(paired[2], 1)]
    assert other[1] > paired[1] > 2.0

def test_page_1_states_the_backward_and_the_compile_of_the_beyond_example():
    """The beyond example profiles the backward and two compiled variants: page 1 names the fastest backward among the
    variants whose gradients passed (counted here from summary.csv, dispatchers left out), how many gradient checks
    ran, and each compiled variant's kernels against the variant it compiles, with its first call."""
    from attnprof.render.report import in_brief

    ex = ROOT / "examples" / "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56-beyond"
    s, k = pd.read_csv(ex / "summary.csv"), pd.read_csv(ex / "kernels.csv")
    study = "b8_h16_s1024_d64_bf16_causal"
    texts = [b["text"] for b in in_brief({"key": study, "findings": []}, [], s, k)]
    at = s[(s["shape_key"] == study) & (s["backward_status"] == "ok") & (s["variant"] != "sdpa_auto")]
    fastest = at.sort_values("device_ms_per_backward").iloc[0]
    bwd = next(t for t in texts if t.startswith("Backward:"))
    assert bwd.startswith(f"Backward: {fastest['variant']} is fastest at {study}")
    checked = s["grad_rel_error_ok"].notna().sum()
    assert f"checked against float64 in {checked} captures: {(s['grad_rel_error_ok'] == True).sum()} within" in bwd  # noqa: E712
    row = s[(s["shape_key"] == study) & (s["variant"] == "naive_compiled")].iloc[0]
    naive = s[(s["shape_key"] == study) & (s["variant"] == "naive")].iloc[0]
    comp = next(t for t in texts if t.startswith("torch.compile: naive_compiled"))
    assert f"launches {int(row['kernels_per_forward'])} kernels" in comp and f"naive's {int(naive['kernels_per_forward'])} kernels" in comp
    assert "kept out of these numbers" in comp
