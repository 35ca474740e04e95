"""The report's numbers come from the findings and the report data (attnprof.render.report); the
templates only format them."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

import compare_doc
from attnprof.model.formats import current_record
from attnprof.findings import compute
from attnprof.render.compare import compare_context
from attnprof.render.report import build_context, calibration_numbers
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
    doc = compare_doc.doc({"rows": rows}, confidence=0.9)
    cmp = compare_context(doc, "")["cmp"]
    assert cmp["noise_floor_pct"] == pytest.approx(2.0) and cmp["confidence_pct"] == pytest.approx(90.0)
    pair = cmp["pairs"][0]
    assert [r["variant"] for r in pair["changed"]] == ["a"] and pair["kernels_differ"] == ["a at s"]
    assert "noise_floor_pct" not in doc  # compare.json's document is not changed


def test_compare_context_detection_limit_from_the_pair_s_simulation():
    """The smallest change a comparison finds with 80 % power is the pair's simulated one (compare.json
    joint.detectable, attnprof.analysis.verdict_sim): the page states the limit most rows reach (counted here by hand:
    5 rows, most = 3, the 3rd smallest), the range, and the rows not found even at the largest change simulated."""
    found = {"a/s/d": 0.03, "b/s/d": 0.10, "c/s/d": 0.04, "d/s/d": None, "e/s/d": 0.05}
    rows = [{"variant": v, "shape_key": "s", "verdict": "inconclusive", "p": 0.3, "repeats_a": 5, "repeats_b": 5}
            for v in "abcde"]
    doc = compare_doc.doc({"rows": rows, "joint": {"rows": 5, "detectable": found}})
    det = compare_context(doc, "")["cmp"]["pairs"][0]["detection"]
    assert det["rows"] == 5 and det["pct"] == pytest.approx(5.0) and det["within"] == 3
    assert (det["min_pct"], det["max_pct"], det["unreached"]) == (pytest.approx(3.0), pytest.approx(10.0), 1)
    assert det["repeats"] == "5 / 5" and not det["at_threshold"]
    one_repeat = compare_doc.doc({"rows": [{"variant": "a", "shape_key": "s", "verdict": "inconclusive"}]})
    assert compare_context(one_repeat, "")["cmp"]["pairs"][0]["detection"] is None


def test_compare_page_1_says_nothing_changed_with_the_detection_limit():
    """Two CPU runs of one config (tests/fixtures/cpu_repeats): the first lines say nothing changed, the detection
    limit, and the environment and config differences in one line, before the per-variant table."""
    import sys

    from attnprof.analysis.compare import compare_runs
    from attnprof.render.common import render_html

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
    from attnprof.render.common import render_html

    import sys

    from attnprof.analysis.compare import compare_runs

    sys.path.insert(0, str(ROOT / "tests"))
    from test_repeats_cpu import load

    doc = compare_runs([load("cpu-aa-a"), load("cpu-aa-b")])
    pair = doc["pairs"][0]
    judged = [{**r, "verdict": "same", "se": 0.0, "df": 8, "p": 1.0} for r in pair["rows"] if r["verdict"] == "not judged"]
    gpus = [{"index": 0, "name": "NVIDIA H200"}]
    found = {f"{r['variant']}/{r['shape_key']}/t": 0.03 for r in judged}
    pair.update(rows=judged, counts={**pair["counts"], "not judged": 0, "same": len(judged)}, torch={"a": "2.13.0+cpu", "b": "2.14.1+cu130"},
                joint={"rows": len(judged), "candidates": 0, "withheld": 0, "detectable": found},
                env_diff=[{"key": "config.variants", "a": ["naive", "sdpa_flash"], "b": ["naive"]},
                          {"key": "gpus", "a": None, "b": gpus}])
    html = render_html(compare_context(doc, ""), ROOT / "report", "compare.html.j2")
    brief = re.sub(r"\s+", " ", html.split("Per variant")[0])
    assert "torch 2.13.0+cpu in cpu-aa-a, 2.14.1+cu130 in cpu-aa-b;" in brief
    assert "<br><code>config.variants</code>: naive, sdpa_flash &rarr; naive" in brief
    assert "<br><code>gpus</code>: not recorded &rarr; (index=0, name=NVIDIA H200)" in brief
    assert "[&#39;" not in brief and "{&#39;" not in brief  # no repr of a list or a dict
    # every row at one limit: each of the rows, one figure
    assert f"in each of the {len(judged)} rows judged." in brief and len(judged) == 5
    assert "over the rows" not in brief


def test_the_methods_promise_no_power_a_formula_would_give():
    """A CPU run's host times are judged only in a paired A/B; a GPU run's methods state no detectable change of their
    own (issue 39: a plug-in formula overstated it 3x): what compare finds depends on the other result set and the
    design, and each comparison states it from its simulation."""
    import pandas as pd

    from attnprof.render.report import repeats_text

    summary = pd.DataFrame({"variant": ["a", "b"], "cpu_ms_run_sd_pct": [1.0, 1.5], "device_ms_run_sd_pct": [None, None]})
    text = repeats_text({"repeats": 5, "compare": {"noise_floor": 0.02, "noise_floor_host": 0.2}}, summary)
    assert "% power" not in text and "only in a paired A/B run" in text and "67&nbsp;% probability" in text  # (5-1)/(5+1)
    gpu = pd.DataFrame({"variant": ["a", "b", "c"], "device_ms_run_sd_pct": [0.5, 1.0, 2.0], "device_ms_run_df": [8, 8, 4]})
    text = repeats_text({"repeats": 5, "compare": {"noise_floor": 0.02}}, gpu)
    assert "% power" not in text and "each comparison states it, simulated" in text


def test_page_1_states_the_backward_and_the_compile_of_the_beyond_example():
    """The beyond example profiles the backward and two compiled variants: page 1 names the fastest backward among the
    variants whose gradients passed (counted here from summary.csv, dispatchers left out), how many gradient checks
    ran, and each compiled variant's kernels against the variant it compiles, with its first call."""
    from attnprof.findings.brief import in_brief

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
