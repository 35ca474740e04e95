"""Words of the compare page and the report that once misled (issue 43 items 3 and 4), each on the input that showed
it and one more of the same kind."""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from attnprof.analysis.compare import compare_runs, nothing_in_common
from attnprof.render.common import render_html
from attnprof.render.compare import compare_context
from compare_doc import PAIR, doc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
H200 = "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56"


def _text(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def _compare_html(doc: dict) -> str:
    return render_html(compare_context(doc, ""), ROOT / "report", "compare.html.j2")


def _example_doc(name: str) -> dict:
    return json.loads((EXAMPLES / name / "compare.json").read_text())


def _result_set(name: str) -> dict:
    """A committed example as compare_runs reads a result set (its tables; no ops, no recipes)."""
    d = EXAMPLES / name
    return {"name": name, "summary": pd.read_csv(d / "summary.csv"), "kernels": pd.read_csv(d / "kernels.csv"),
            "ops": None, "env": json.loads((d / "env.json").read_text()),
            "findings": json.loads((d / "findings.json").read_text()), "repeats": pd.read_csv(d / "repeats.csv")}


def _pair(**kw) -> dict:
    """A compare.json of one pair with ``kw`` (tests/compare_doc.py completes the rest)."""
    return doc(kw)


# --- the compare table: which statistic each column is -------------------------------------------------------------

@pytest.mark.parametrize("name, paired", [("compare_cpu_ab_torch2.13_vs_2.14.1", True),
                                          ("compare_h200_beyond_rerun", False)])
def test_the_ms_columns_and_the_ratio_say_which_statistic_each_is(name, paired):
    """The CPU A/B showed naive 19.4 -> 21.4 ms beside a ratio of 0.98 under "each ratio is other / baseline": the
    columns are each side's median of the repeat medians, the ratio a geometric mean (of the rounds' ratios when
    paired), and the page says so in the header of each."""
    doc = _example_doc(name)
    html = _compare_html(doc)
    head = _text(re.search(r"<thead>(.*?)</thead>", html, re.S).group(1))
    assert head.count("median") == 2
    assert ("geometric mean of the rounds' ratios" in head) is paired and ("ratio of the geometric means" in head) is not paired
    assert "each side's median of its repeat medians" in _text(html) and "their quotient need not be the ratio" in _text(html)
    if paired:  # the case that misled: the medians' quotient and the judged ratio on opposite sides of 1
        naive = next(r for r in doc["pairs"][0]["rows"] if r["variant"] == "naive")
        assert naive["time_b_ms"] / naive["time_a_ms"] > 1.05 and naive["ratio"] < 1


# --- the backward on page 1 ----------------------------------------------------------------------------------------

def test_a_backward_called_slower_is_a_change_on_page_1_with_its_pass():
    """Page 1 counted and named the forward's verdicts only: a backward 8 % slower read "no time changed". Two rows,
    naive's forward inconclusive and its backward slower, sdpa_flash's both the same: the headline is "What changed",
    naive's backward is named with its ratio, and each pass is counted on its own."""
    rows = [dict(variant="naive", shape_key="s1", verdict="inconclusive", ratio=1.01, ratio_lo=0.97, ratio_hi=1.05,
                 bwd_verdict="slower", bwd_ratio=1.08, bwd_ratio_lo=1.05, bwd_ratio_hi=1.11),
            dict(variant="sdpa_flash", shape_key="s1", verdict="same", ratio=1.0, ratio_lo=0.99, ratio_hi=1.01,
                 bwd_verdict="same", bwd_ratio=1.0, bwd_ratio_lo=0.99, bwd_ratio_hi=1.01)]
    d = doc({"rows": rows, "counts": {**PAIR["counts"], "same": 1, "inconclusive": 1}})
    p = compare_context(d, "")["cmp"]["pairs"][0]
    assert p["headline"] == "What changed" and p["claims"]["both"] == {("slower", "naive", "s1", "backward")}
    text = _text(_compare_html(d))
    assert "naive backward at s1 slower, 1.08x (1.05\u20131.11)" in text
    assert "Forward: 1 the same within \u00b12 %, 1 inconclusive (naive at s1" in text and "Backward: 1 the same, 1 slower." in text


# --- no (variant, shape) in common ---------------------------------------------------------------------------------

def test_two_result_sets_with_nothing_in_common_say_nothing_was_compared():
    page = compare_context(_pair(only_in_a=["naive/s1"], only_in_b=["naive/s2"]), "")["cmp"]["pairs"][0]
    assert page["headline"] == "Nothing to compare"
    text = _text(_compare_html(_pair(only_in_a=["naive/s1"], only_in_b=["naive/s2"])))
    assert "Nothing changed" not in text and "No change shown" not in text
    assert "Nothing to compare: a and b share no variant at any shape" in text
    words = nothing_in_common({"a": "a", "b": "b", "rows": [], "only_in_a": ["naive/s1"], "only_in_b": ["naive/s2"]})
    assert words.startswith("b and a share no variant at any shape") and "naive/s1" in words and "naive/s2" in words


def test_two_real_result_sets_of_different_grids_compare_nothing_and_say_it():
    """The CPU example against itself with every shape key renamed: compare_runs finds no row, and both the page and
    the words for the terminal say nothing was compared; with rows, there are no such words."""
    a = _result_set("cpu@torch2.13")
    b = {**_result_set("cpu@torch2.13"), "name": "other-grid"}
    for table in ("summary", "kernels", "repeats"):
        b[table] = b[table].assign(shape_key=b[table]["shape_key"] + "_x")
    doc = compare_runs([a, b])
    pair = doc["pairs"][0]
    assert pair["rows"] == [] and len(pair["only_in_a"]) == len(a["summary"])
    assert compare_context(doc, "")["cmp"]["pairs"][0]["headline"] == "Nothing to compare"
    assert "other-grid and cpu@torch2.13 share no variant" in nothing_in_common(pair)
    assert nothing_in_common(compare_runs([a, _result_set("cpu@torch2.14")])["pairs"][0]) is None


# --- why there is no detection limit -------------------------------------------------------------------------------

def _rows(verdict: str, n: int, k: int = 3) -> list[dict]:
    """``k`` compare rows of ``verdict`` with ``n`` repeats a side, each else a row of a committed compare.json."""
    row = _example_doc("compare_h200_ab_sleep")["pairs"][0]["rows"][0]
    return [{**row, "variant": f"v{i}", "verdict": verdict, "repeats_a": n, "repeats_b": n, "se": None, "df": None}
            for i in range(k)]


def _detection(html: str) -> str:
    """The text of a comparison's detection-limit paragraph."""
    return _text(re.search(r"<b>Detection limit</b>.*?</p>", html, re.S).group(0))


def test_no_detection_limit_names_its_cause_not_one_repeat_when_there_are_three():
    """Host times of two sittings with 3 repeats a side: not judged, and the page no longer says "one repeat per side"."""
    text = _detection(_compare_html(_pair(rows=_rows("not judged", 3))))
    assert "Detection limit: none" in text and "host times of two sittings are not judged" in text
    assert "one repeat" not in text


def test_no_detection_limit_with_one_repeat_says_one_repeat():
    text = _detection(_compare_html(_pair(rows=_rows("inconclusive", 1))))
    assert "a side with one repeat has no between-run spread" in text and "host times of two sittings" not in text


# --- a dispatcher absent on one side -------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, known", [("sdpa_flash", None, "a"), (None, "sdpa_cudnn", "b")])
def test_a_dispatch_known_on_one_side_is_not_called_dispatching_elsewhere(a, b, known):
    dispatch = [{"shape_key": "s1", "a": a, "b": b, "statement_a": None, "statement_b": None}]
    page = compare_context(_pair(rows=_rows("same", 3), dispatch=dispatch), "")["cmp"]["pairs"][0]
    assert page["dispatch_changed"] == [] and len(page["dispatch_one_side"]) == 1
    text = _text(_compare_html(_pair(rows=_rows("same", 3), dispatch=dispatch)))
    assert "dispatches elsewhere" not in text and "\u2192 \u2013" not in text and "\u2013 \u2192" not in text
    assert f"is known in {known} only ({a or b})" in text


# --- the environment lines -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, shown", [(92400, "9.24.0"), (8902, "8.9.2")])
def test_the_cudnn_version_difference_reads_as_a_version(raw, shown):
    diff = [{"key": "cudnn", "a": None, "b": raw}]
    rows = compare_context(_pair(env_diff=diff), "")["cmp"]["pairs"][0]["env_diff"]
    assert rows == [{"key": "cudnn", "a": None, "b": shown}]
    assert f"cudnn: not recorded \u2192 {shown}" in _text(_compare_html(_pair(env_diff=diff)))


def test_a_config_grid_recorded_on_one_side_is_one_line():
    """A `--config` grid: 7 keys under config.shapes.cpu that one side does not record are one line."""
    keys = ["batch", "heads", "seq_len", "head_dim", "dtype", "causal", "kv_len"]
    diff = [{"key": f"config.shapes.cpu.{k}", "a": None, "b": i} for i, k in enumerate(keys)]
    diff.append({"key": "run", "a": "x", "b": "y"})
    text = _text(_compare_html(_pair(env_diff=diff)))
    assert text.count("config.shapes.cpu") == 1 and "2 differences" in text
    assert "config.shapes.cpu.*: not recorded \u2192 batch=0; heads=1; seq_len=2; head_dim=3; dtype=4; causal=5; kv_len=6" in text


def test_the_committed_history_config_recorded_on_one_side_is_one_line():
    """The beyond example's rerun recorded config.history (2 keys) that the first capture predates; the page gives
    them one line, each key once."""
    doc = _example_doc("compare_h200_beyond_rerun")
    history = [d for d in doc["pairs"][0]["env_diff"] if d["key"].startswith("config.history.")]
    assert len(history) == 2 and all(d["a"] is None for d in history)
    rows = compare_context(doc, "")["cmp"]["pairs"][0]["env_diff"]
    line = next(r for r in rows if r["key"] == "config.history.*")
    assert line["a"] is None and [part.split("=")[0] for part in line["b"].split("; ")] == \
        [d["key"].rsplit(".", 1)[1] for d in history]
    assert not any(r["key"].startswith("config.history.") and r["key"] != "config.history.*" for r in rows)


# --- the report ----------------------------------------------------------------------------------------------------

def _report(name: str) -> str:
    """A committed example's report as this checkout renders it from its tables (no plots, no launches)."""
    from attnprof.analysis.records import load_env
    from attnprof.findings import load_expectations
    from attnprof.render.report import build_context

    folder = EXAMPLES / name
    summary = pd.read_csv(folder / "summary.csv")
    ctx = build_context(name, summary, pd.read_csv(folder / "kernels.csv"), pd.DataFrame(columns=["variant", "shape_key"]),
                        json.loads((folder / "findings.json").read_text()), load_env(folder / "env.json"),
                        load_expectations(ROOT / "config" / "expectations.yaml", variants=summary["variant"]), {}, css="")
    return render_html(ctx, ROOT / "report")


@pytest.mark.parametrize("name", ["cpu@torch2.13", "nvidia-h200@base"])
def test_the_method_says_each_round_gets_a_fresh_capture_process(name):
    text = _text(_report(name))
    assert "The captures ran one after another in one warm capture process" not in text
    assert "The captures of each round of repeats ran one after another in one warm capture process" in text
    assert "each round starts in a fresh process" in text


@pytest.mark.parametrize("name", [H200, "nvidia-h200@base"])
def test_the_kernel_times_say_they_are_repeat_1s_mean(name):
    """The kernel tables and the kernel-split figure give naive 1092 us (repeat 1's mean over its forwards) where the
    rest of the report says 1.07 ms (the median of the repeats): both say which."""
    from attnprof.render.plots import CAPTIONS

    html = _report(name)
    table_heads = re.findall(r'<table class="kernels">.*?</thead>', html, re.S)
    assert table_heads and all('ms / fwd<br><span class="hint">repeat 1, mean</span>' in h for h in table_heads)
    assert "in repeat 1" in CAPTIONS["kernel_split"] and "median of the repeats" in CAPTIONS["kernel_split"]
    kernels = pd.read_csv(EXAMPLES / name / "kernels.csv")
    summary = pd.read_csv(EXAMPLES / name / "summary.csv")
    naive = summary[summary["variant"] == "naive"].iloc[0]
    own = kernels[(kernels["variant"] == "naive") & (kernels["shape_key"] == naive["shape_key"])]["us_per_forward"].sum()
    if name == H200:  # the case that misled: 1092 us beside 1.07 ms, two statistics, each labelled now
        assert round(own) == 1092 and f"{naive['device_ms_per_forward']:.3g}" == "1.07"


def test_every_driver_api_launch_with_0_occupancy_is_marked_not_estimated():
    """nvjet (cuBLAS) and cuDNN's kernels are launched with cuLaunchKernelEx, for which the profiler estimates no
    occupancy: each such 0 % reads 'not estimated' in the kernel tables, by launch API, whatever the kernel's name; a 0
    of another launch API stays a number."""
    from attnprof.findings.rules.kernels import occupancy_not_estimated

    kernels = pd.read_csv(EXAMPLES / "nvidia-h200@base" / "kernels.csv")
    driver = kernels[(kernels["est_occupancy_pct"] == 0) & (kernels["launch_api"] == "cuLaunchKernelEx")]
    assert driver["kernel"].str.startswith("nvjet").any() and driver["kernel"].str.startswith("cudnn").any()
    html = _report("nvidia-h200@base")
    assert html.count('title="not estimated: the profiler computes no occupancy for a cuLaunchKernelEx launch">&ndash;<') \
        == len(driver)
    other = kernels[(kernels["est_occupancy_pct"] == 0) & (kernels["launch_api"] != "cuLaunchKernelEx")]
    assert len(other) and not any(occupancy_not_estimated(0, api) for api in other["launch_api"])


@pytest.mark.parametrize("name, template", [("nvidia-h200@base", "report"),
                                            ("compare_h200_ab_sleep", "compare")])
def test_a_name_copied_from_the_html_has_no_zero_width_space(name, template):
    """Variant names (report) and shape keys (compare) break after their underscores at a <wbr>, which copies as
    nothing; a zero-width space would break a copied "naive_inplace"."""
    html = _report(name) if template == "report" else _compare_html(_example_doc(name))
    assert "\u200b" not in html and "&#8203;" not in html
    assert "_<wbr>" in html
    copied = html_lib.unescape(re.sub(r"<[^>]+>", "", html))
    assert "naive_inplace" in copied and ("b8_h16_s1024_d64_bf16_causal" in copied or template == "report")


@pytest.mark.slow
@pytest.mark.parametrize("pair", [(H200, H200 + "-beyond")])
def test_the_h200_compare_pdf_holds_several_rows_a_page_and_not_comparable_in_its_column(pair, tmp_path):
    """The README's compare (the H200 example against the beyond one) ran to 10 pages, one table row a page (a long
    "no number of rounds decides" in the verdict column); "not comparable" ran past its column. Rendered from the
    examples' tables: several rows a page, and every verdict word left of the next column."""
    import pdfplumber

    from attnprof.render.common import render_pdf

    doc = compare_runs([_result_set(n) for n in pair], 0.02)
    css = (ROOT / "report" / "report.css").read_text()
    (tmp_path / "c.html").write_text(render_html(compare_context(doc, css), ROOT / "report", "compare.html.j2"))
    render_pdf(tmp_path / "c.html", tmp_path / "c.pdf")
    with pdfplumber.open(tmp_path / "c.pdf") as pdf:
        pages = len(pdf.pages)
        table_pages = 0
        for page in pdf.pages:
            words = page.extract_words()
            heads = [w for w in words if w["text"] == "undecided;"]  # the per-variant table's last column
            table_pages += bool(heads)
            for w in words:
                if w["text"] in ("comparable", "inconclusive") and heads:
                    assert w["x1"] < heads[0]["x0"], (w, heads[0])
    rows = len(doc["pairs"][0]["rows"])
    assert rows >= 7 and table_pages <= 2 and pages <= 7, (rows, table_pages, pages)
