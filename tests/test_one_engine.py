"""Every statement from one engine (issue 34 item 1, issue 33 kind 1): page 1 of the report, its findings table,
findings.json and the compare's page 1 state the same thing about the same cells; a wrong result and a dispatcher
are never ranked; every subset of the built-in variants renders.

The expected rankings are computed here from summary.csv by hand (the dispatcher named here, the intervals compared
here), not by attnprof.findings.ranking."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from attnprof.analysis.records import load_env
from attnprof.analysis.tables import SUMMARY_COLUMNS, result_note
from attnprof.findings import compute, load_expectations, load_run_data
from attnprof.findings.ranking import wrong_result_warnings
from attnprof.render.common import render_html
from attnprof.render.compare import compare_context
from attnprof.render.report import build_context

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56"
BASE, SLEEP = ROOT / "examples" / "nvidia-h200@base", ROOT / "examples" / "nvidia-h200@sleep"
COMPARE = ROOT / "examples" / "compare_h200_ab_sleep" / "compare.json"
SCHEMA = json.loads((ROOT / "workflow" / "schemas" / "findings.schema.json").read_text())
STUDY = "b8_h16_s1024_d64_bf16_causal"
#: the shapes the tests render (two of the example's nine: a sweep, in a fraction of the time)
SHAPES = [STUDY, "b8_h16_s2048_d64_bf16_causal"]
#: the one dispatcher among the built-in variants, named here by hand (the engine reads the registry)
DISPATCHER = "sdpa_auto"
#: claims about one cell that cannot both be true
CONFLICTS = [{"fastest", "tied"}, {"fastest", "wrong"}, {"tied", "wrong"}, {"fastest", "left out"}, {"tied", "left out"},
             {"fastest", "not run"}, {"tied", "not run"}]


def _findings_doc(summary: pd.DataFrame, kernels: pd.DataFrame) -> dict:
    """findings.json as the findings job writes it (no launch or op tables: the rules that need them find nothing)."""
    exp = load_expectations(ROOT / "config" / "expectations.yaml", variants=summary["variant"])
    shapes = [compute(load_run_data(k, summary, kernels, [], [], [], []), exp) for k in dict.fromkeys(summary["shape_key"])]
    doc = json.loads(json.dumps({"schema_version": 1, "run": "t", "shapes": shapes}, default=str))
    jsonschema.validate(doc, SCHEMA)
    return doc


def _render(folder: Path, summary: pd.DataFrame | None = None, findings: dict | None = None) -> tuple[dict, str]:
    summary = pd.read_csv(folder / "summary.csv") if summary is None else summary
    kernels = pd.read_csv(folder / "kernels.csv")
    kernels = kernels[kernels["variant"].isin(summary["variant"])]
    findings = json.loads((folder / "findings.json").read_text()) if findings is None else findings
    ctx = build_context(folder.name, summary, kernels, pd.DataFrame(), findings, load_env(folder / "env.json", ()),
                        load_expectations(ROOT / "config" / "expectations.yaml", variants=summary["variant"]), {}, css="")
    return ctx, render_html(ctx, ROOT / "report")


def expected_ranking(summary: pd.DataFrame, key: str) -> tuple[str, set[str]]:
    """By hand: ('fastest', {v}) when the variant with the lowest median device time among the ok, correct
    non-dispatchers has a rerun interval wholly under every other's, else ('tied', the variants whose interval
    overlaps its)."""
    rows = summary[(summary["shape_key"] == key) & (summary["status"] == "ok") & (summary["variant"] != DISPATCHER)
                   & (summary["rel_error_ok"].astype(str) != "False") & summary["device_ms_per_forward"].notna()]
    rows = rows.sort_values("device_ms_per_forward")
    best = rows.iloc[0]
    overlap = {r.variant for r in rows.itertuples() if r.device_ms_run_lo <= best.device_ms_run_hi
               and best.device_ms_run_lo <= r.device_ms_run_hi}
    return ("fastest", {best.variant}) if overlap == {best.variant} else ("tied", overlap)


def _table_claims(shapes: list[dict]) -> set[tuple]:
    """What the findings table states, read from its headlines: the ranking rows ('fastest variant', 'ties with
    X, Y for fastest') and the wrong results (rule correctness)."""
    out = set()
    for sh in shapes:
        for f in sh["findings"]:
            v, key = f["variants"][0], f["shape_key"]
            if f["rule"] == "correctness":
                out.add(("wrong", v, key, "forward"))
            elif f["rule"] == "speed" and f["headline"] == "fastest variant" and len(f.get("ranking", {}).get("order", [])) > 1:
                out.add(("fastest", v, key, "forward"))
            elif f["rule"] == "speed" and (m := re.fullmatch(r"ties with (.*) for fastest", f["headline"])):
                out |= {("tied", t, key, "forward") for t in [v, *m[1].split(", ")]}
    return out


def _no_conflicts(*sources: set[tuple]) -> None:
    """No cell carries two claims that cannot both hold, over all ``sources`` together; at most one fastest per
    shape and pass."""
    by_cell: dict[tuple, set[str]] = {}
    for claim, *cell in set().union(*sources):
        by_cell.setdefault(tuple(cell), set()).add(claim)
    bad = {cell: claims for cell, claims in by_cell.items() if any(c <= claims for c in CONFLICTS)}
    assert not bad, f"statements disagree: {bad}"
    fastest = [(cell[1], cell[2]) for cell, claims in by_cell.items() if "fastest" in claims]
    assert len(fastest) == len(set(fastest)), f"two fastest at one shape: {fastest}"


def _variant_of_data(case: str) -> pd.DataFrame:
    """The H200 example's summary.csv, changed at the study shape so that the order goes each way."""
    s = pd.read_csv(EXAMPLE / "summary.csv")
    s = s[s["shape_key"].isin(SHAPES)].reset_index(drop=True)
    at = s["shape_key"] == STUDY
    cols = ["device_ms_per_forward", "device_ms_run_lo", "device_ms_run_hi"]
    cudnn_lo, cudnn_hi = s.loc[at & (s["variant"] == "sdpa_cudnn"), cols[1:]].iloc[0]
    if case == "flash faster":  # flash's interval wholly under cudnn's
        s.loc[at & (s["variant"] == "sdpa_flash"), cols] = [cudnn_lo * 0.88, cudnn_lo * 0.86, cudnn_lo * 0.9]
    elif case == "flash overlaps":  # flash's median above cudnn's, its interval reaching into cudnn's
        s.loc[at & (s["variant"] == "sdpa_flash"), cols] = [cudnn_hi * 1.05, (cudnn_lo + cudnn_hi) / 2, cudnn_hi * 1.1]
    elif case == "cudnn wrong":  # the fastest computes a wrong result (a causal mask forgotten)
        s.loc[at & (s["variant"] == "sdpa_cudnn"), ["rel_error", "rel_error_ok"]] = [0.41, False]
    return s


@pytest.mark.parametrize("case, fastest", [("as captured", ("fastest", {"sdpa_cudnn"})),
                                           ("flash faster", ("fastest", {"sdpa_flash"})),
                                           ("flash overlaps", ("tied", {"sdpa_cudnn", "sdpa_flash"})),
                                           ("cudnn wrong", ("fastest", {"sdpa_flash"}))])
def test_page_1_the_findings_table_and_findings_json_rank_alike(case, fastest):
    summary = _variant_of_data(case)
    assert expected_ranking(summary, STUDY) == fastest  # the hand count agrees with the case's intent
    doc = _findings_doc(summary, pd.read_csv(EXAMPLE / "kernels.csv"))
    ctx, html = _render(EXAMPLE, summary, doc)
    page1 = set().union(*(b.get("claims", set()) for b in ctx["brief"]))
    table, stored = _table_claims(ctx["shapes"]), _table_claims(doc["shapes"])
    _no_conflicts(page1, table, stored)
    for key in dict.fromkeys(summary["shape_key"]):
        kind, names = expected_ranking(summary, key)
        want = {(kind, v, key, "forward") for v in names}
        ranked = {c for c in table | stored if c[0] in ("fastest", "tied") and c[2] == key}
        assert ranked == want, key
        assert {c for c in page1 if c[0] in ("fastest", "tied") and c[2] == key} <= want, key
    brief = html.split('id="brief"')[1].split("</section>")[0]
    if fastest[0] == "fastest":
        v = next(iter(fastest[1]))
        assert f"The fastest kernel is {v}" in brief or f"The fastest kernel at {STUDY} is {v}" in brief
    else:
        assert f"No kernel is fastest outside the rerun intervals at {STUDY}" in brief
    assert "ties with sdpa_auto" not in html and DISPATCHER not in {c[1] for c in page1 | table if c[0] in ("fastest", "tied")}
    if case == "cudnn wrong":
        assert "sdpa_cudnn computes a wrong result: relative error 0.41" in brief
        assert ("wrong", "sdpa_cudnn", STUDY, "forward") in page1 & table
        ranking = next(f for f in doc["shapes"][0]["findings"] if f.get("ranking"))
        assert "sdpa_cudnn" not in ranking["ranking"]["order"] and "sdpa_cudnn" in ranking["ranking"]["left_out"]
        assert all("sdpa_cudnn" not in f["variants"] for sh in doc["shapes"] for f in sh["findings"]
                   if f["rule"] == "fidelity" and len(f["variants"]) == 2)
        assert any("sdpa_cudnn at" in w and "wrong result" in w for w in wrong_result_warnings(doc["shapes"]))


def test_the_committed_findings_json_re_renders_with_the_engine():
    """The committed H200 findings.json was written by the engine that ranked sdpa_auto ('ties with sdpa_auto for
    fastest'); rendered now, its findings table states what page 1 states."""
    summary = pd.read_csv(EXAMPLE / "summary.csv")
    ctx, html = _render(EXAMPLE)
    page1 = set().union(*(b.get("claims", set()) for b in ctx["brief"]))
    table = _table_claims(ctx["shapes"])
    _no_conflicts(page1, table)
    kind, names = expected_ranking(summary, STUDY)
    assert {(kind, v, STUDY, "forward") for v in names} <= page1 & table


def test_the_compare_page_1_agrees_with_its_table_and_with_both_reports():
    doc = json.loads(COMPARE.read_text())
    ctx = compare_context(doc, "")
    html = render_html(ctx, ROOT / "report", "compare.html.j2")
    (pair,) = ctx["cmp"]["pairs"]
    first = html.split('<p class="brief">')[1].split("</p>")[0]  # page 1's "What changed"
    for r in pair["rows"]:  # every row the table calls slower or faster, and no other, is named on page 1
        named = f'<b class="ident">{r["variant"]}</b> at <code>{r["shape_key"]}</code> {r["verdict"]}' in first
        assert named == (r["verdict"] in ("slower", "faster")), r["variant"]
    assert pair["claims"]["both"] == {("slower", "sleep_attn", STUDY, "forward")}  # compare.json's one changed row
    for side, folder in (("a", BASE), ("b", SLEEP)):
        rctx, _ = _render(folder)
        page1 = set().union(*(b.get("claims", set()) for b in rctx["brief"]))
        dispatch = {c for c in page1 if c[0].startswith("dispatches to")}
        shared = {c[1:] for c in dispatch} & {c[1:] for c in pair["claims"][side]}
        assert shared and {c for c in dispatch if c[1:] in shared} == {c for c in pair["claims"][side] if c[1:] in shared}
        not_run = {(c[1], c[2]) for c in page1 if c[0] == "not run"}
        for r in pair["rows"]:
            assert ((r["variant"], r["shape_key"]) in not_run) == (r[f"status_{side}"] != "ok"), (side, r["variant"])


SUBSETS = [["naive", "sdpa_flash"], ["sdpa_flash"], ["naive"], [DISPATCHER], [DISPATCHER, "sdpa_cudnn"],
           ["sdpa_math", "naive_inplace"], ["naive_inplace", "sdpa_efficient", DISPATCHER],
           ["naive", "naive_inplace", "sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn"]]


@pytest.mark.parametrize("subset", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_every_subset_of_the_variants_renders(subset):
    """Issue 33 kind 1: a GPU result set of some of the built-in variants (the README's [naive, sdpa_flash]) made
    findings crash with a raw ValidationError {'value': None}; every subset gives a valid findings.json and a
    report, and an expectation that needs a variant the set lacks is 'not measured', saying which."""
    full = pd.read_csv(EXAMPLE / "summary.csv")
    summary = full[full["variant"].isin(subset) & full["shape_key"].isin(SHAPES)].reset_index(drop=True)
    doc = _findings_doc(summary, pd.read_csv(EXAMPLE / "kernels.csv"))
    ctx, html = _render(EXAMPLE, summary, doc)
    assert "<html" in html and set(summary["variant"]) == {r["variant"] for sh in ctx["shapes"] for r in sh["rows"]}
    checks = [c for sh in doc["shapes"] for c in sh["expectations"]]
    absent = [c for c in checks if set(c["variants"]) - set(subset) and c["verdict"] == "not measured"]
    assert all(c["observed"] is None or "table" in c["observed"] or "formula" in c["observed"] for c in checks)
    if any(c["metric"] == "fastest_fused" and set(c["variants"]) - set(subset) for c in checks):
        assert any("not in this result set" in c["explanation"] for c in absent)


def test_a_failed_backward_is_named_on_page_1_with_pytorchs_reason():
    """A backward that failed (a detached input: PyTorch's 'appears to not have been used in the graph', recorded in
    summary.csv backward_status/backward_reason) is named on page 1 with the reason, and not ranked; the backward
    ranking of the others is stated from the same rule (flash's backward interval wholly under efficient's)."""
    s = pd.read_csv(EXAMPLE / "summary.csv")
    s = s[s["shape_key"] == STUDY].reset_index(drop=True)
    why = ("RuntimeError: One of the differentiated Tensors appears to not have been used in the graph. Set "
           "allow_unused=True if this is the desired behavior.")
    back = {"sdpa_flash": ("ok", 0.30, 0.29, 0.31), "sdpa_efficient": ("ok", 0.50, 0.48, 0.52),
            "sdpa_cudnn": ("failed", None, None, None)}
    cols = ["backward_status", "backward_reason", "device_ms_per_backward", "device_ms_backward_run_lo",
            "device_ms_backward_run_hi", "grad_rel_error_ok"]
    s[cols] = s[cols].astype(object)
    for v, (status, ms, lo, hi) in back.items():
        at = s["variant"] == v
        s.loc[at, ["backward_status", "backward_reason", "device_ms_per_backward", "device_ms_backward_run_lo",
                   "device_ms_backward_run_hi", "grad_rel_error_ok"]] = [status, why if status != "ok" else "", ms, lo, hi,
                                                                        True if status == "ok" else None]
    doc = _findings_doc(s, pd.read_csv(EXAMPLE / "kernels.csv"))
    ctx, html = _render(EXAMPLE, s, doc)
    texts = [b["text"] for b in ctx["brief"]]
    failed = next(t for t in texts if t.startswith("sdpa_cudnn's backward failed"))
    assert "appears to not have been used in the graph" in failed and STUDY in failed
    assert any(t.startswith(f"Backward: sdpa_flash is fastest at {STUDY}") for t in texts)
    ranking = next(f["ranking"] for f in doc["shapes"][0]["findings"] if f.get("ranking", {}).get("pass") == "backward")
    assert ranking["order"] == ["sdpa_flash", "sdpa_efficient"] and ranking["clear"]
    assert ranking["left_out"]["sdpa_cudnn"] == "backward failed"


def test_a_wrong_result_is_said_in_its_summary_row():
    assert "result_note" in SUMMARY_COLUMNS
    note = result_note({"rel_error_ok": False, "rel_error": 0.4123, "dtype": "bf16"})
    assert note.startswith("wrong result: relative error 0.412") and "bf16 tolerance" in note and "left out" in note
    assert result_note({"rel_error_ok": True, "rel_error": 1e-3, "dtype": "bf16"}) == ""
    assert result_note({"rel_error_ok": None}) == ""  # a check that did not run is no wrong result
