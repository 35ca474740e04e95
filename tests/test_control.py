"""The profiler's self-check (attnprof.analysis.control, issue 20 part 3): a real CPU capture of the control has
the counts known by construction (counted by hand in a torch 2.13.0 CPU trace: per forward one aten::mm -- with
three aten::resolve_conj inside it --, one aten::add and one aten::copy_), and a trace whose op events are
duplicated (PyTorch issue 195746's doubling) makes the check fire, alone and between two result sets."""

import copy
import json

import pandas as pd
import pytest

from attnprof.model.formats import current_record
from attnprof.analysis.control import ACCOUNTING_CHANGED, check_control, compare_controls, control_counts
from attnprof.analysis.tables import analyse_trace, op_table

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def control_trace(tmp_path_factory):
    """A CPU trace of three control forwards, each in an attn_fwd range (as the capture profiles them)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from attnprof.measure.forwards import make_forward
    from attnprof.model.variants import Shape

    forward, context = make_forward("control", Shape(1, 1, 8, 8, "fp32"), "cpu")
    with context, profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function("attn_fwd"):
                forward(None, None, None)
    path = tmp_path_factory.mktemp("control") / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())


def ops_of(trace) -> pd.DataFrame:
    return op_table(analyse_trace(trace, "attn_fwd", expect_gpu=False), "control", "s")


def test_a_cpu_capture_of_the_control_has_its_known_counts(control_trace):
    # by hand from the trace's events: cpu_op events inside each attn_fwd range, by name
    ranges = [e for e in control_trace["traceEvents"] if e.get("name") == "attn_fwd" and e.get("ph") == "X"]
    assert len(ranges) == 3
    for r in ranges:
        names = [e["name"] for e in control_trace["traceEvents"] if e.get("cat") == "cpu_op"
                 and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]]
        assert (names.count("aten::mm"), names.count("aten::add"), names.count("aten::copy_")) == (1, 1, 1)
    check = check_control(control_counts(None, ops_of(control_trace), "cpu"), "cpu")
    assert check["ok"] is True and check["observed"] == {"aten::mm": 1, "aten::add": 1, "aten::copy_": 1}


def test_duplicated_op_events_make_the_self_check_fire(control_trace):
    doubled = copy.deepcopy(control_trace)
    ops = [e for e in doubled["traceEvents"] if e.get("cat") == "cpu_op"]
    doubled["traceEvents"] += copy.deepcopy(ops)  # every op recorded twice
    a = check_control(control_counts(None, ops_of(control_trace), "cpu"), "cpu")
    b = check_control(control_counts(None, ops_of(doubled), "cpu"), "cpu")
    assert b["ok"] is False and b["observed"] == {"aten::mm": 2, "aten::add": 2, "aten::copy_": 2}
    assert b["why"].startswith(ACCOUNTING_CHANGED) and "aten::mm: 2 per forward, 1 by construction" in b["why"]
    pair = compare_controls(a, b)
    assert pair["changed"] and "not attributed" in pair["why"]
    assert compare_controls(a, a)["changed"] is False


def test_gpu_counts_come_from_the_summary_and_a_doubled_kernel_count_fires():
    def summary(kernels, memcpy):
        return pd.DataFrame([{"variant": "control", "shape_key": "s", "kernels_per_forward": kernels,
                              "memcpy_per_forward": memcpy, "memset_per_forward": 0},
                             {"variant": "naive", "shape_key": "s", "kernels_per_forward": 7,
                              "memcpy_per_forward": 1, "memset_per_forward": 1}])
    ok = check_control(control_counts(summary(2, 1), None, "cuda"), "cuda")
    doubled = check_control(control_counts(summary(4, 2), None, "cuda"), "cuda")
    assert ok["ok"] and not doubled["ok"] and "kernels: 4 per forward, 2 by construction" in doubled["why"]
    # a result set made before the control: unchecked, never a change
    none = check_control(control_counts(summary(2, 1).iloc[1:], None, "cuda"), "cuda")
    assert none["ok"] is None and compare_controls(ok, none)["changed"] is False


def test_compare_marks_count_changes_as_accounting_when_the_control_changed():
    from attnprof.analysis.compare import recipe_changes
    from tests.test_recipe import COPY, GEMM80, SOFTMAX, classify, recipe

    a = {"recipes": {("naive", "s", "forward"): [recipe([GEMM80, SOFTMAX], [[1, 1]])]}}
    b = {"recipes": {("naive", "s", "forward"): [recipe([GEMM80, SOFTMAX, COPY], [[1, 1, 1]])]}}
    (changed,) = recipe_changes(a, b, classify, 0.02, 0.95, {"changed": True})
    (plain,) = recipe_changes(a, b, classify, 0.02, 0.95, {"changed": False})
    assert changed["verdict"] == ACCOUNTING_CHANGED and plain["verdict"] == "recipe changed"


def _control_rows(trace, repeat):
    """control.csv's row of one capture of the control whose trace is ``trace`` (attnprof.analysis.control.control_row)."""
    from attnprof.analysis.control import control_row

    row = {"variant": "control", "shape_key": "s", "repeat": repeat, "status": "ok", "reason": "", "forwards_complete": 3}
    return control_row(row, ops_of(trace))


def test_the_control_table_is_checked_repeat_by_repeat(control_trace):
    from attnprof.analysis.control import check_control_table, control_table

    doubled = copy.deepcopy(control_trace)
    doubled["traceEvents"] += copy.deepcopy([e for e in doubled["traceEvents"] if e.get("cat") == "cpu_op"])
    good = control_table([_control_rows(control_trace, 1), _control_rows(control_trace, 2)])
    # the GPU counts are not published on a CPU run; the CPU ones are the hand count of the first test
    assert good["kernels"].isna().all() and list(good["aten::mm"]) == [1, 1]
    ok = check_control_table(good, "cpu")
    assert ok["ok"] is True and ok["repeats"] == [1, 2] and ok["shape_key"] == "s"
    bad = check_control_table(control_table([_control_rows(control_trace, 1), _control_rows(doubled, 2)]), "cpu")
    assert bad["ok"] is False and bad["observed"]["aten::copy_"] == 2 and "in repeat 2" in bad["why"]
    # a result set without a control capture: a header-only control.csv, or none
    none = check_control_table(control_table([]), "cpu")
    assert none["ok"] is None and "captured before the self-check existed" in none["why"]
    with pytest.raises(ValueError, match="columns"):
        check_control_table(pd.DataFrame({"variant": ["control"]}), "cpu")


@pytest.fixture(scope="module")
def report_of(h200, h200_data):
    """``report_of(control)``: the H200 fixture's report HTML with the self-check ``control``."""
    from pathlib import Path

    import yaml

    from attnprof.findings import compute
    from attnprof.render.common import render_html
    from attnprof.render.report import build_context

    root = Path(__file__).resolve().parents[1]
    expectations = yaml.safe_load((root / "config" / "expectations.yaml").read_text())
    findings = {"shapes": [compute(h200_data, expectations)]}
    env = {"gpu_name": "NVIDIA H200", "torch": "2.11.0", "python": "3.12", "snakemake": "9", "driver": "580", "cuda_build": "13.0",
           "cudnn": 91900, "cpu": "x86_64", "config": {"profiler": {"warmup_calls": 3, "range_name": "attn_fwd",
           "schedule": {"wait": 1, "warmup": 2, "active": 10}}, "timing": {"repeats": 50, "input_sets": 4}}}
    env = current_record("env", env, "env.json")  # as attnprof.analysis.records.load_env reads it

    def render(control):
        from attnprof.analysis.tables import concat_tables

        ctx = build_context("t", h200["summary"], h200["kernels"], concat_tables(h200["launches"]), findings, env,
                            expectations, {}, css="body{}", control=control)
        return render_html(ctx, root / "report")

    return render


def _brief(html: str) -> str:
    start = html.index('id="brief"')
    return html[start:html.index("</section>", start)]


def test_a_doubled_control_trace_makes_the_report_say_so(control_trace, report_of):
    """Every op of the control recorded twice (PyTorch issue 195746): page 1 says the counts are suspect and the
    methods' self-check line says what was counted; an intact control says "as constructed" and nothing on page 1."""
    from attnprof.analysis.control import check_control_table, control_table

    doubled = copy.deepcopy(control_trace)
    doubled["traceEvents"] += copy.deepcopy([e for e in doubled["traceEvents"] if e.get("cat") == "cpu_op"])
    bad = report_of(check_control_table(control_table([_control_rows(doubled, 1)]), "cpu"))
    assert "profiler&#39;s accounting differs from the counts known by construction" in _brief(bad)
    assert "are suspect" in _brief(bad)
    assert "Profiler self-check FAILED" in bad and "2 aten::mm, 2 aten::add, 2 aten::copy_ per forward" in bad
    good = report_of(check_control_table(control_table([_control_rows(control_trace, 1)]), "cpu"))
    assert "are suspect" not in good and "FAILED" not in good
    assert "counted 1 aten::mm, 1 aten::add, 1 aten::copy_ per forward at s, 1 repeat, as constructed" in good


def test_a_result_set_without_a_control_says_so(report_of):
    html = report_of(None)
    assert ("Profiler self-check: no control capture in this result set (captured before the self-check existed)"
            in html.replace("&#39;", "'"))
    assert "are suspect" not in html


def test_compare_reads_the_self_check_from_control_csv(control_trace):
    """compare_pair's accounting from each result set's control.csv (the control is in neither summary): an intact
    pair is unchanged, a pair whose B recorded every op twice is 'profiler accounting changed', and a result set
    without a control.csv is unchecked, never a change."""
    from attnprof.analysis.compare import compare_pair
    from attnprof.analysis.control import check_control_table, control_table
    from tests.test_compare import run

    doubled = copy.deepcopy(control_trace)
    doubled["traceEvents"] += copy.deepcopy([e for e in doubled["traceEvents"] if e.get("cat") == "cpu_op"])
    a, b, old = run("a", [1.0, 1.01, 0.99], ["k"]), run("b", [1.0, 1.01, 0.99], ["k"]), run("old", [1.0, 1.01, 0.99], ["k"])
    a["control_check"] = check_control_table(control_table([_control_rows(control_trace, 1)]), "cpu")
    b["control_check"] = check_control_table(control_table([_control_rows(doubled, 1)]), "cpu")
    same = compare_pair(a, {**b, "control_check": a["control_check"]})["accounting"]
    assert same["changed"] is False and same["a"]["ok"] and same["b"]["observed"] == {"aten::mm": 1, "aten::add": 1, "aten::copy_": 1}
    changed = compare_pair(a, b)["accounting"]
    assert changed["changed"] is True and changed["why"].startswith(ACCOUNTING_CHANGED) and changed["b"]["ok"] is False
    unchecked = compare_pair(old, a)["accounting"]
    assert unchecked["changed"] is False and "captured before the self-check existed" in unchecked["why"]


def test_a_damaged_control_table_is_named_never_a_traceback_nor_called_never_captured(tmp_path):
    """An empty control.csv, one without a column, and a header-only one beside real control captures: the self-check
    says it could not use the file (naming it and the cause); a header-only table with no control capture is a result
    set from before the self-check."""
    from attnprof.analysis.control import CONTROL_COLUMNS, NO_CONTROL, read_control_table, self_check_line

    run = tmp_path / "run"
    run.mkdir()
    path = run / "control.csv"
    path.write_text("")
    assert "control.csv" in read_control_table(path, "cpu")["problem"]
    path.write_text(",".join(c for c in CONTROL_COLUMNS if c != "aten::copy_") + "\n")
    assert "aten::copy_" in self_check_line(read_control_table(path, "cpu"))
    path.write_text(",".join(CONTROL_COLUMNS) + "\n")
    assert NO_CONTROL in self_check_line(read_control_table(path, "cpu"))  # made before the control
    (run / "captures" / "s" / "control").mkdir(parents=True)
    line = self_check_line(read_control_table(path, "cpu"))
    assert "could not be used" in line and "captures/s/control" in line and NO_CONTROL not in line


def test_a_control_repeat_that_did_not_complete_is_not_counted_as_constructed():
    """control.csv with repeat 1 incomplete_trace (its counts not to be trusted) and repeat 2 ok: the check uses
    repeat 2 and says repeat 1 was not checked; with no repeat ok, the self-check says no control capture completed."""
    from attnprof.analysis.control import CONTROL_COLUMNS, check_control_table, self_check_line

    rows = [{"variant": "control", "shape_key": "s", "repeat": k, "status": st, "reason": "", "forwards_complete": 2,
             "kernels": None, "memcpy": None, "memset": None, "aten::mm": 1, "aten::add": 1, "aten::copy_": 1}
            for k, st in ((1, "incomplete_trace"), (2, "ok"))]
    table = pd.DataFrame(rows, columns=list(CONTROL_COLUMNS))
    check = check_control_table(table, "cpu")
    assert check["ok"] and check["repeats"] == [2]
    assert "not checked: repeat 1 (incomplete_trace)" in self_check_line(check)
    none_ok = check_control_table(table.assign(status="failed"), "cpu")
    assert not none_ok.get("ok") and "no capture of the control completed" in self_check_line(none_ok)
