"""Defects found by attacking "rounds only where undecided" (config top_up) in A/B runs.

- a row with rounds added on one side only (the two top_up.json differ, or an added round failed on one side) was
  "judged twice" on no more paired rounds than look 1 had: look 2, "2->2 rounds", both looks' false alarms summed;
- turning top-up off (top_up.rounds 0) after a run with it on kept the old top_up.json's added rounds in
  repeats.csv, and compare then judged those rows in one look at the single look's level, on rounds a look 1 had
  chosen because they were undecided (the report said nothing of top-up);
- two environments' top_up.json that differ (one edited by hand) were taken as they are: each environment
  captured and summarized its own rounds, unpaired beyond the shorter;
- a deleted top_up.json is never written again by a plain rerun ("Nothing to be done"): Snakemake does not rerun a
  checkpoint whose output is gone when only input functions ask for it: the run ends naming the file and the
  command that writes it again.
"""
import dataclasses
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

import snakemake_cli
from attnprof.analysis.verdict import Design, paired_verdicts
from attnprof.model.plan import Layout, Machine, build_plan
from attnprof.runtime.integrity import ResultSetState
from conftest import copy_workflow
from test_ab import TINY_AB
from test_plan import config_of, name_run, slug

COL = "cpu_ms_per_forward"


def _frame(times: dict[int, float | None]) -> pd.DataFrame:
    return pd.DataFrame([{"variant": "v", "shape_key": "s", "status": "ok" if t is not None else "failed",
                          "repeat": k, COL: t} for k, t in times.items()])


@pytest.mark.parametrize("b", [{1: 1.05, 2: 1.0}, {1: 1.05, 2: 1.0, 3: None, 4: None}],
                         ids=["rounds-on-one-side-only", "added-rounds-failed-on-one-side"])
def test_a_row_without_an_added_paired_round_is_not_judged_twice(b):
    a = _frame({1: 1.0, 2: 1.1, 3: 1.0, 4: 1.02})
    out = paired_verdicts(a, _frame(b), [("v", "s", COL)], 0.02, 0.95, Design(2, 2))[("v", "s", COL)]
    assert out["n_a"] == 2 and out["look"] == 1 and out["top_up"] is None


def test_a_row_with_added_paired_rounds_is_still_judged_twice():
    a = _frame({1: 1.0, 2: 1.1, 3: 1.0, 4: 1.02})
    b = _frame({1: 1.05, 2: 1.0, 3: 1.01, 4: None})
    out = paired_verdicts(a, b, [("v", "s", COL)], 0.02, 0.95, Design(2, 2))[("v", "s", COL)]
    assert out["look"] == 2 and out["top_up"]["base"] == 2 and out["top_up"]["rounds"] == 3


S = "b1_h2_s64_d32_fp32_causal"  # the tiny grid's first shape
RECORD = {"base": 2, "rows": [{"variant": "naive", "shape_key": S, "rounds": 4}]}


def _state(tmp_path, top_up, records):
    plan = build_plan(config_of("tiny.yaml", "ab-envs.yaml", top_up=top_up), Machine(env_builds={"base": {}, "next": {}}),
                      name_run, slug)
    plan = dataclasses.replace(plan, layout=Layout(str(tmp_path / "results")))
    for run in plan.ab_runs:
        path = Path(plan.layout.run_file("top_up", run))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records.get(run.split("@")[1], RECORD)))
    return plan, ResultSetState(plan)


def test_a_top_up_record_left_from_a_run_with_top_up_on_adds_no_rounds_once_it_is_off(tmp_path):
    plan, state = _state(tmp_path, {"rounds": 0, "time_s": 240}, {})
    assert all(state.rounds(run) == {} for run in plan.ab_runs)
    plan, state = _state(tmp_path, {"rounds": 3, "time_s": 240}, {})
    assert all(state.rounds(run) == {(S, "naive"): 4} for run in plan.ab_runs)


OTHER = "b1_h1_s8_d8_fp32_causal"  # the grid of the result set from elsewhere below


def test_a_result_set_from_elsewhere_captured_with_top_up_off_ignores_a_stale_record(tmp_path):
    plan, state = _state(tmp_path, {"rounds": 3, "time_s": 240}, {})
    lay = plan.layout
    path = Path(lay.run_file("top_up", "other"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"base": 2, "rows": [{"variant": "naive", "shape_key": OTHER, "rounds": 4}]}))
    env = {"device": "cpu", "config": {"shapes": {"cpu": {"batch": [1], "heads": [1], "seq_len": [8], "head_dim": [8],
                                                          "dtype": ["fp32"], "causal": [True]}},
                                       "variants": ["naive"], "repeats": 2, "top_up": {"rounds": 0, "time_s": 240}}}
    Path(lay.run_file("env", "other")).write_text(json.dumps(env))
    assert state.rounds("other") == {}
    env["config"]["top_up"]["rounds"] = 3
    Path(lay.run_file("env", "other")).write_text(json.dumps(env))
    assert ResultSetState(plan).rounds("other") == {(OTHER, "naive"): 4}


def test_two_environments_whose_top_up_records_differ_are_refused_naming_both(tmp_path, capsys):
    plan, state = _state(tmp_path, {"rounds": 3, "time_s": 240},
                         {"next": {"base": 2, "rows": [{"variant": "naive", "shape_key": S, "rounds": 3}]}})
    with pytest.raises(SystemExit):
        state.rounds(next(iter(plan.ab_runs)))
    said = capsys.readouterr().err
    assert "name different rows or rounds" in said and all(plan.layout.run_file("top_up", r) in said for r in plan.ab_runs)


@pytest.mark.slow
@pytest.mark.workflow
def test_a_deleted_top_up_record_is_named_with_the_command_that_writes_it_again(tmp_path):
    """Snakemake does not rerun a checkpoint whose output was deleted when only input functions ask for it: the run
    must not then read the result set with its base rounds only. It ends naming the file and the command; that
    command writes the same record again, and the run after it completes."""
    work = copy_workflow(tmp_path / "wf")
    py = sys.executable
    envs = (f"  one: {{python: {py}, env: {{OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1'}}}}\n"
            f"  two: {{python: {py}, env: {{OMP_NUM_THREADS: '2', MKL_NUM_THREADS: '2'}}}}")
    (work / "ab.yaml").write_text(TINY_AB.format(environments=envs))
    where = ["--snakefile", str(work / "Snakefile"), "--directory", str(work), "--configfile", str(work / "ab.yaml")]
    target = "results/tinyab@two/summary.csv"
    proc = snakemake_cli.run([target, "--cores", "1", *where], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = work / "results" / "tinyab@two" / "top_up.json"
    kept = record.read_text()
    record.unlink()
    proc = snakemake_cli.run([target, "--cores", "1", *where], timeout=900)
    assert proc.returncode != 0 and "results/tinyab@two/top_up.json is gone" in proc.stderr, proc.stderr[-3000:]
    fix = proc.stderr.split("rm -f ", 1)[1].split(" && snakemake ", 1)[1].split(" (the top_up", 1)[0].split()
    assert fix == ["results/tinyab@one/top_up.json", "results/tinyab@two/top_up.json"]
    (work / "results" / "tinyab@one" / "top_up.json").unlink()
    proc = snakemake_cli.run([*fix, "--cores", "1", *where], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert record.read_text() == kept
    proc = snakemake_cli.run([target, "--cores", "1", *where], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


# --- issue 43 item 9: a record is held to its grid, its design and the captures on disk ----------------------------

def _refusal(state, run, capsys) -> str:
    with pytest.raises(SystemExit):
        state.rounds(run)
    return capsys.readouterr().err


def _capture(plan, run, variant, repeat, shape=S):
    path = Path(plan.layout.capture_file("status", run, shape=shape, variant=variant, repeat=repeat))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


@pytest.mark.parametrize("row, said", [
    ({"variant": "naive", "shape_key": S, "rounds": 100}, "gives rounds beyond its design (naive at " + S + ": 100; "
     "at most 5: repeats 2 plus top_up.rounds 3)"),  # the input: rounds 100 planned 188 captures
    ({"variant": "naive", "shape_key": S, "rounds": 6}, f"gives rounds beyond its design (naive at {S}: 6; at most 5"),  # one round past the design, the same kind
    ({"variant": "no_such", "shape_key": S, "rounds": 3}, "names rows outside the result set's grid (no_such at"),
    ({"variant": "naive", "shape_key": "b1_h2_s99_d32_fp32_causal", "rounds": 3},
     "names rows outside the result set's grid (naive at b1_h2_s99_d32_fp32_causal)"),
], ids=["rounds-100", "rounds-design-plus-1", "unknown-variant", "unknown-shape"])
def test_a_hand_edited_record_both_environments_agree_on_is_refused_naming_the_file(tmp_path, capsys, row, said):
    record = {"base": 2, "rows": [row]}
    plan, state = _state(tmp_path, {"rounds": 3, "time_s": 240}, {"base": record, "next": record})
    run = next(iter(plan.ab_runs))
    err = _refusal(state, run, capsys)
    assert f"{plan.layout.run_file('top_up', run)} {said}" in err and "copy it again" in err, err


def test_emptied_rows_with_their_added_captures_on_disk_are_refused(tmp_path, capsys):
    """The input: a copied pair whose rows were emptied in both records while naive's rounds 3 and 4 stay captured
    (repeats.csv would drop them, silently); the same kind: a record that gives naive 3 rounds while r4 is on disk.
    A record that accounts for every capture is read."""
    emptied = {"base": 2, "rows": []}
    plan, state = _state(tmp_path, {"rounds": 3, "time_s": 240}, {"base": emptied, "next": emptied})
    run = next(iter(plan.ab_runs))
    for k in (1, 2, 3, 4):
        _capture(plan, run, "naive", k)
    assert "leaves captures on disk unaccounted for (naive at " + S + ": r4 captured" in _refusal(state, run, capsys)
    short = {"base": 2, "rows": [{"variant": "naive", "shape_key": S, "rounds": 3}]}
    plan, state = _state(tmp_path, {"rounds": 3, "time_s": 240}, {"base": short, "next": short})
    assert "unaccounted for (naive at " + S + ": r4" in _refusal(state, run, capsys)
    plan, state = _state(tmp_path, {"rounds": 3, "time_s": 240}, {})  # RECORD: naive 4 rounds
    assert state.rounds(run) == {(S, "naive"): 4}
