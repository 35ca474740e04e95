"""A result set copied from elsewhere is held whole (issue 43 items 6 and 7): its captures are those its env.json
(grid, repeats, the control) and top_up.json say it holds, and a copy that lost one of them, or lost per-capture
tables it came with, is never rendered as if whole; the control is expected by the same rule compare uses (env.json
``captures_control``), so a copy whose control folder was deleted is refused, never reported as "captured before
the self-check existed".

The input is the committed CPU example (examples/cpu@torch2.13: 7 variants and the control at one shape, 4 repeats,
traces and records only), copied and damaged here; the expected files are spelt with plan.Layout."""
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import snakemake_cli
from attnprof.model.plan import Layout, Machine, build_plan, recorded_grid
from attnprof.model.variants import CONTROL
from attnprof.runtime.integrity import ResultSetState
from conftest import copy_workflow
from test_plan import config_of, name_run, slug

ROOT = Path(__file__).resolve().parents[1]
RUN = "cpu@torch2.13"
SHAPE = "b2_h8_s512_d64_fp32_causal"


@pytest.fixture
def copied(tmp_path):
    """(the layout, a plan whose own result set is another) with the CPU example copied into the layout's root."""
    lay = Layout(str(tmp_path / "results"))
    shutil.copytree(ROOT / "examples" / RUN, lay.run_dir(RUN))
    plan = dataclasses.replace(build_plan(config_of("tiny.yaml"), Machine(), name_run, slug), layout=lay)
    return lay, plan


def _refused(plan, capsys) -> str:
    with pytest.raises(SystemExit):
        ResultSetState(plan).marker(RUN)
    return capsys.readouterr().err


def test_a_copy_that_lost_a_repeat_s_captures_is_refused_naming_them(copied, capsys):
    """The input: captures/<shape>/naive/r2 deleted from a copy (a re-render counted it with its old numbers)."""
    lay, plan = copied
    assert ResultSetState(plan).check(RUN)["gone"] == []  # whole as committed
    shutil.rmtree(lay.capture_dir(RUN, SHAPE, "naive", 2))
    err = _refused(plan, capsys)
    gone = sorted([lay.capture_file("status", RUN, shape=SHAPE, variant="naive", repeat=2),
                   lay.capture_file("trace", RUN, shape=SHAPE, variant="naive", repeat=2)])
    assert f"2 capture files of {lay.run_dir(RUN)} are gone ({', '.join(gone)})" in err, err
    assert f"Copy {lay.run_dir(RUN)} again from where it was captured" in err


@pytest.mark.parametrize("damage", ["control-repeat", "repeats-beyond", "trace-only"])
def test_a_copy_that_lost_captures_its_records_name_is_refused(copied, capsys, damage):
    """The same kind: a control repeat deleted; env.json's repeats raised to 5 with no r5; one trace deleted."""
    lay, plan = copied
    if damage == "control-repeat":
        shutil.rmtree(lay.capture_dir(RUN, SHAPE, CONTROL, 3))
        expected = lay.capture_file("status", RUN, shape=SHAPE, variant=CONTROL, repeat=3)
    elif damage == "repeats-beyond":
        env = json.loads(Path(lay.run_file("env", RUN)).read_text())
        assert env["config"]["repeats"] == 4
        env["config"]["repeats"] = 5
        Path(lay.run_file("env", RUN)).write_text(json.dumps(env))
        expected = lay.capture_file("status", RUN, shape=SHAPE, variant=CONTROL, repeat=5)  # the first, by name
    else:
        expected = lay.capture_file("trace", RUN, shape=SHAPE, variant="sdpa_flash", repeat=4)
        Path(expected).unlink()
    err = _refused(plan, capsys)
    assert "capture files of" in err and expected in err, err
    if damage == "repeats-beyond":  # every variant's r5 and the control's: 8 cells, 2 files each
        assert f"16 capture files of {lay.run_dir(RUN)} are gone" in err


def test_a_copy_whose_control_folder_was_deleted_is_refused_as_compare_refuses_it(copied, capsys):
    """Item 7's input: env.json records a version that captures the control (captures_control), so its grid holds
    the control whether or not the folder is there; a re-render is refused naming the control's captures, as
    compare refuses the same set, never reported as made before the self-check."""
    lay, plan = copied
    shutil.rmtree(Path(lay.capture_dir(RUN, SHAPE, CONTROL, 1)).parent)
    assert recorded_grid(lay, RUN).control_shapes == (SHAPE,)
    err = _refused(plan, capsys)
    assert "8 capture files of" in err and f"{SHAPE}/{CONTROL}/r1" in err, err
    # a version-1 env.json whose config has no environments (made before the control) and no control on disk:
    # no control expected (the same kind, the other answer)
    env = json.loads(Path(lay.run_file("env", RUN)).read_text())
    del env["config"]["environments"]
    Path(lay.run_file("env", RUN)).write_text(json.dumps(env))
    assert recorded_grid(lay, RUN).control_shapes == ()


def test_a_copy_with_its_tables_that_lost_one_is_made_again_or_refused(copied, capsys):
    """A copy that came with its per-capture tables and lost one of them: lost, as in this config's own result
    sets (the run ends naming the files and --forcerun summarize, since Snakemake has no record of a copy); a copy
    that holds no tables at all (an example) derives them all and is not judged by what is gone."""
    lay, plan = copied
    state = ResultSetState(plan)
    assert state.check(RUN)["lost"] == []  # the example: no tables at all
    for table in state.tables(RUN):
        Path(table).parent.mkdir(parents=True, exist_ok=True)
        Path(table).touch()
    gone = lay.table_file("forwards", RUN, SHAPE, "naive", 2)
    Path(gone).unlink()
    state = ResultSetState(plan)
    assert state.check(RUN)["lost"] == [gone] and state.check(RUN)["bump"]
    with pytest.raises(SystemExit):
        state.marker(RUN, recorded=False, command="snakemake x")
    assert gone in capsys.readouterr().err


def test_a_copy_without_a_repeat_is_refused_by_the_render_command(tmp_path):
    """The whole path: the README's render command on a copy without naive/r2 ends non-zero naming the files, in
    a dry run (the check runs while Snakemake plans)."""
    work = copy_workflow(tmp_path / "wf")
    lay = Layout(str(work / "results"))
    shutil.copytree(ROOT / "examples" / RUN, lay.run_dir(RUN))
    shutil.rmtree(lay.capture_dir(RUN, SHAPE, "naive", 2))
    proc = snakemake_cli.run(["--profile", "workflow/profiles/render", f"results/{RUN}/report.pdf", "-n"], cwd=work,
                             timeout=300)
    assert proc.returncode != 0 and f"capture files of results/{RUN} are gone" in proc.stderr, proc.stderr[-2000:]
