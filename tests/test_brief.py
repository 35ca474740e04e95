"""Page 1 is data (attnprof.findings.brief): rendered from the brief alone, every committed example's page 1 holds the
same sentences, in the same order, as the whole report rendered from the same files; and every statement's claims
name cells of its summary.csv."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from attnprof.analysis.control import read_control_table
from attnprof.analysis.records import load_calibration, load_env, load_repeats
from attnprof.findings import load_expectations
from attnprof.findings.brief import page1
from attnprof.render.common import render_html
from attnprof.render.report import build_context

ROOT = Path(__file__).resolve().parents[1]
# every committed example that publishes a report (the history series examples hold tables and findings only)
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/summary.csv") if (p.parent / "report.html").exists())


class _Page1(HTMLParser):
    """The text of each item of page 1's findings list (``ul.findings-brief``) and of the small print after it."""

    def __init__(self):
        super().__init__()
        self.items: list[str] = []
        self.notes = ""
        self._in, self._note = None, False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "ul" and attrs.get("class") == "findings-brief":
            self._in = "ul"
        elif tag == "li" and self._in == "ul":
            self.items.append("")
        elif tag == "p" and attrs.get("class") == "hint" and self._in == "after":
            self._note, self._in = True, None

    def handle_endtag(self, tag):
        if tag == "ul" and self._in == "ul":
            self._in = "after"
        elif tag == "p":
            self._note = False

    def handle_data(self, data):
        if self._in == "ul" and self.items:
            self.items[-1] += data
        elif self._note:
            self.notes += data


def _page1_of(html: str) -> tuple[list[str], str]:
    section = re.search(r'<section class="brief" id="brief">.*?</section>', html, re.S)
    parser = _Page1()
    parser.feed(section.group(0) if section else html)
    return parser.items, parser.notes


def _inputs(example: Path) -> dict:
    """The files page 1 is made from, read as the report's script reads them."""
    device = load_env(example / "env.json", ("device",))["device"]
    return {"summary": pd.read_csv(example / "summary.csv"), "kernels": pd.read_csv(example / "kernels.csv"),
            "findings": json.loads((example / "findings.json").read_text()),
            "calibration": load_calibration(example / "calibration.json") if (example / "calibration.json").exists() else None,
            "repeats": load_repeats(example / "repeats.csv") if (example / "repeats.csv").exists() else None,
            "control": read_control_table(example / "control.csv", device) if (example / "control.csv").exists() else None}


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_page_1_from_the_brief_alone_states_what_the_whole_report_states(example):
    inputs = _inputs(example)
    brief = page1(**inputs)
    alone = render_html({"brief": brief["statements"], "brief_notes": brief["notes"]}, ROOT / "report", "brief.html.j2")
    summary = inputs["summary"]
    context = build_context(example.name, summary, inputs["kernels"], pd.DataFrame(columns=["variant", "shape_key"]),
                            inputs["findings"], load_env(example / "env.json"),
                            load_expectations(ROOT / "config" / "expectations.yaml", variants=summary["variant"]), {},
                            css="", calibration=inputs["calibration"], control=inputs["control"], repeats=inputs["repeats"])
    whole = render_html(context, ROOT / "report", "report.html.j2")
    items, notes = _page1_of(alone)
    assert len(items) == len(brief["statements"]) >= 2  # a fastest variant (or a tie) and the small print at least
    assert (items, notes) == _page1_of(whole)
    # the text is the statement's, escaped once: the sentence a reader copies is the data's
    assert [i.removesuffix(" evidence") for i in items] == [s["text"] for s in brief["statements"]]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_claim_of_page_1_names_a_cell_of_its_summary(example):
    inputs = _inputs(example)
    cells = set(zip(inputs["summary"]["variant"], inputs["summary"]["shape_key"]))
    statements = page1(**inputs)["statements"]
    claims = [c for s in statements for c in s["claims"]]
    assert claims, "no statement of page 1 states a cell"
    for claim, variant, shape_key, pass_ in claims:
        assert (variant, shape_key) in cells and pass_ in ("forward", "backward"), (claim, variant, shape_key)
    assert all(s["href"].startswith("#") for s in statements)


COMPARES = sorted(p.parent for p in (ROOT / "examples").glob("*/compare.json"))


@pytest.mark.parametrize("example", COMPARES, ids=[p.name for p in COMPARES])
def test_the_compare_page_opens_each_pair_with_the_headline_its_data_states(example):
    """A comparison's page 1: each pair's first words are attnprof.render.compare.headline's, in the pairs' order
    (the page lays the data out; the whole render finds the same words)."""
    from attnprof.render.compare import compare_context

    context = compare_context(json.loads((example / "compare.json").read_text()), "")
    whole = render_html(context, ROOT / "report", "compare.html.j2")
    said = re.findall(r'<p class="brief(?: verdict-different)?"><b>([^<]+)</b>(?: \(threshold|:)', whole)
    said = [s for s in said if s not in ("Profiler accounting changed", "How sure", "Detection limit", "Environment and config")]
    assert said == [p["headline"] for p in context["cmp"]["pairs"]] and said


@pytest.mark.parametrize("timed, words", [
    # perf_counter's medians agree with the trace (auto above flash): the cost is stated, with its numbers
    ((11.9, 12.8), "costs 0.992 ms more host time per forward"),
    # they order the two the other way: no cost is stated, and the page says why, with both timings
    ((13.0, 12.0), "not told apart from sdpa_flash's by this run (the trace's"),
])
def test_a_dispatchers_host_cost_is_stated_only_where_the_independent_timing_agrees(timed, words):
    run = ROOT / "examples" / "cpu@torch2.13"
    summary = pd.read_csv(run / "summary.csv")
    flash, auto = (summary["variant"] == v for v in ("sdpa_flash", "sdpa_auto"))
    # sdpa_auto's host time moved above flash's (11.64-11.85 ms, median 11.708) outside every range of the two
    for col, value in {"cpu_ms_per_forward": 12.7, "cpu_ms_min": 12.5, "cpu_ms_max": 13.0, "cpu_ms_run_lo": 12.5,
                       "cpu_ms_run_hi": 13.0}.items():
        summary.loc[auto, col] = value
    summary.loc[flash, "timed_ms_median"], summary.loc[auto, "timed_ms_median"] = timed
    text = next(s["text"] for s in page1(summary, None, json.loads((run / "findings.json").read_text()))["statements"]
                if s["text"].startswith("sdpa_auto is a dispatcher"))
    assert words in text, text
    if timed[0] > timed[1]:
        assert "perf_counter's medians the other way: 12 against 13 ms" in text and "costs" not in text


@pytest.mark.parametrize("auto_ms, said", [(11.84, True), (20.0, False)])
def test_a_variant_left_out_between_the_fastest_and_the_next_is_named_with_why(auto_ms, said):
    run = ROOT / "examples" / "cpu@torch2.13"
    summary = pd.read_csv(run / "summary.csv")
    # the CPU example by hand: sdpa_flash 11.71 ms first, naive_inplace 17.68 ms next; sdpa_auto (a dispatcher, not
    # ranked) at 11.84 ms lies between them, at 20 ms beyond the next
    summary.loc[summary["variant"] == "sdpa_auto", "cpu_ms_per_forward"] = auto_ms
    text = next(s["text"] for s in page1(summary, None, json.loads((run / "findings.json").read_text()))["statements"]
                if s["text"].startswith("The fastest variant"))
    assert "next variant, naive_inplace" in text
    assert ("; sdpa_auto, 11.8 ms, is not ranked (a dispatcher: it runs another variant's kernel)" in text) is said, text
