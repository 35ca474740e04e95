"""Format versions (attnprof.model.formats): status.json, env.json and repeats.csv of version 1 (no version key, the
fields of an older attnprof) read as version 2, a version this code does not know is refused naming the file, the
version and the fix, and the writers write the current version.

The expected values are written out by hand below, not computed with attnprof's own code; the committed examples
(version 1, no key) are read in place, never written."""
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from attnprof.analysis.compare import ResultSetError, load_result_set
from attnprof.analysis.records import load_env, load_repeats, load_status
from attnprof.model.formats import CURRENT, FormatError, current_record
from attnprof.model.plan import Layout, recorded_grid

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SHAPE = "b1_h2_s64_d32_fp32_causal"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def status_at(tmp_path: Path, record: dict, repeat: int = 2) -> Path:
    return write(tmp_path / "results" / "x" / "captures" / SHAPE / "naive" / f"r{repeat}" / "status.json", json.dumps(record))


# --- status.json ----------------------------------------------------------------------------------------------------

#: What every capture record here holds besides the fields the versions differ in.
COMMON = {"variant": "naive", "shape_key": SHAPE, "device": "cpu", "status": "ok", "reason": "", "started_at": 1800000000.25,
          "finished_at": 1800000009.5}


def test_a_version_1_status_reads_as_the_version_2_record_of_the_same_capture(tmp_path):
    # version 1: no format, no repeat (made before repeats: its folder says r2 here), no capture_started_at
    old = load_status(status_at(tmp_path / "old", COMMON))
    new = load_status(status_at(tmp_path / "new", {**COMMON, "format": 2, "repeat": 2, "capture_started_at": 1800000000.25}))
    expected = {"variant": "naive", "shape_key": SHAPE, "device": "cpu", "status": "ok", "reason": "",
                "started_at": 1800000000.25, "finished_at": 1800000009.5, "format": 2, "repeat": 2,
                "capture_started_at": 1800000000.25}
    assert old == expected and new == expected


def test_a_version_1_status_keeps_what_it_recorded():
    # a record of a later version 1 (repeats and the capture's own start recorded): kept, not overwritten
    old = {**COMMON, "repeat": 1, "capture_started_at": 1800000001.0}
    assert current_record("status", old, f"results/x/captures/{SHAPE}/naive/r1/status.json") == {**old, "format": 2}
    # outside a capture folder (a record handed around alone): repeat 1
    assert current_record("status", COMMON, "status.json")["repeat"] == 1


def test_a_capture_process_that_died_writes_a_current_record(tmp_path):
    """attnprof.runtime.isolation: the record of a died process names its repeat and gets its start; every record
    written carries the current format."""
    from attnprof.runtime.isolation import crash_record, finish_capture

    spec = {"variant": "naive", "shape": {"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 32, "dtype": "fp32",
                                          "causal": True}, "device": "cpu", "repeat": 3}
    path = tmp_path / "results" / "x" / "captures" / SHAPE / "naive" / "r3" / "status.json"
    path.parent.mkdir(parents=True)
    finish_capture(crash_record(spec, -11, 60.0, ""), path.with_name("trace.json.gz"), path, 1800000000.0)
    record = json.loads(path.read_text())
    assert record["format"] == 2 and record["repeat"] == 3 and record["capture_started_at"] == 1800000000.0
    assert load_status(path) == record  # the current format reads as written


# --- env.json -------------------------------------------------------------------------------------------------------

GRID = {"cpu": {"batch": [1], "heads": [2], "seq_len": [64], "head_dim": [32], "dtype": ["fp32"], "causal": [True]}}


def test_a_version_1_env_reads_as_the_version_2_record_of_the_same_run(tmp_path):
    # made before repeats, the host threshold, the control and top-up: none of config.repeats, noise_floor_host,
    # environments, top_up
    old = {"run": "x", "device": "cpu", "torch": "2.13.0+cpu",
           "config": {"shapes": GRID, "variants": ["naive"], "compare": {"name": "auto", "noise_floor": 0.05, "runs": []}}}
    new = {"format": 2, "run": "x", "device": "cpu", "torch": "2.13.0+cpu", "captures_control": False,
           "config": {"shapes": GRID, "variants": ["naive"], "repeats": 1, "top_up": {"rounds": 0, "time_s": 0.0},
                      "compare": {"name": "auto", "noise_floor": 0.05, "noise_floor_host": 0.2, "runs": []}}}
    expected = {"format": 2, "run": "x", "device": "cpu", "torch": "2.13.0+cpu", "captures_control": False,
                "config": {"shapes": GRID, "variants": ["naive"], "repeats": 1, "top_up": {"rounds": 0, "time_s": 0.0},
                           "compare": {"name": "auto", "noise_floor": 0.05, "noise_floor_host": 0.2, "runs": []}}}
    for i, doc in enumerate((old, new)):
        assert load_env(write(tmp_path / str(i) / "env.json", json.dumps(doc)), ()) == expected


def test_a_version_1_env_with_environments_was_captured_with_the_control_and_its_own_numbers_are_kept():
    old = {"device": "cpu", "config": {"repeats": 4, "environments": {}, "compare": {"noise_floor": 0.03, "noise_floor_host": 0.1}}}
    assert current_record("env", old, "env.json") == {
        "device": "cpu", "format": 2, "captures_control": True,
        "config": {"repeats": 4, "environments": {}, "top_up": {"rounds": 0, "time_s": 0.0},
                   "compare": {"noise_floor": 0.03, "noise_floor_host": 0.1}}}
    # made before the compare config: both thresholds the defaults
    assert current_record("env", {"config": {}}, "env.json")["config"]["compare"] == {"noise_floor": 0.02,
                                                                                      "noise_floor_host": 0.2}


def test_the_defaults_an_old_env_gets_are_the_code_s_and_the_config_s():
    import yaml

    from attnprof.analysis.compare import NOISE_FLOOR, NOISE_FLOOR_HOST
    from attnprof.model.formats import COMPARE_DEFAULTS

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["compare"]
    assert COMPARE_DEFAULTS == {"noise_floor": NOISE_FLOOR, "noise_floor_host": NOISE_FLOOR_HOST}
    assert COMPARE_DEFAULTS == {k: config[k] for k in COMPARE_DEFAULTS}


def test_the_grid_of_a_version_1_env_made_before_repeats_has_one_repeat(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "results" / "old" / "env.json", json.dumps({"device": "cpu", "config": {"shapes": GRID, "variants": ["naive"]}}))
    assert recorded_grid(Layout(), "old").repeats == 1


# --- repeats.csv ----------------------------------------------------------------------------------------------------

#: repeats.csv of version 1 as the first version with repeats wrote it (no started_at, no GPU columns, no format)
V1 = """variant,shape_key,repeat,status,reason,kernels_per_forward,memcpy_per_forward,memset_per_forward,device_ms_per_forward,cpu_ms_per_forward,kernels_per_backward,device_ms_per_backward,cpu_ms_per_backward,backward_status,forwards_complete,host_load_1m
naive,b1,1,ok,,,,,,0.5,,,,,10,1.25
naive,b1,2,ok,,,,,,0.75,,,,,10,2.5
"""
#: the same captures in version 2 (the columns added since, empty: nothing recorded them)
V2 = """variant,shape_key,repeat,status,reason,kernels_per_forward,memcpy_per_forward,memset_per_forward,device_ms_per_forward,cpu_ms_per_forward,kernels_per_backward,device_ms_per_backward,cpu_ms_per_backward,backward_status,forwards_complete,host_load_1m,started_at,gpu_uuid,gpu_name,gpu_power_limit_w,gpu_max_sm_clock_mhz,format
naive,b1,1,ok,,,,,,0.5,,,,,10,1.25,,,,,,2
naive,b1,2,ok,,,,,,0.75,,,,,10,2.5,,,,,,2
"""


def test_repeats_csv_of_both_versions_loads_alike(tmp_path):
    old, new = (load_repeats(write(tmp_path / v / "repeats.csv", text)) for v, text in (("v1", V1), ("v2", V2)))
    pd.testing.assert_frame_equal(old, new)
    assert list(new.columns[-6:]) == ["started_at", "gpu_uuid", "gpu_name", "gpu_power_limit_w", "gpu_max_sm_clock_mhz",
                                      "format"]
    assert list(old["cpu_ms_per_forward"]) == [0.5, 0.75] and list(old["host_load_1m"]) == [1.25, 2.5]
    assert list(old["format"]) == [2, 2] and all(math.isnan(v) for v in old["started_at"])


def test_repeats_csv_with_its_later_columns_keeps_them(tmp_path):
    # the last version 1 (every column but format): its started_at kept
    text = V2.replace(",format\n", "\n").replace(",2\n", "\n").replace("2.5,,", "2.5,1800000000.5,")
    frame = load_repeats(write(tmp_path / "repeats.csv", text))
    assert list(frame["started_at"].isna()) == [True, False] and frame["started_at"].iloc[1] == 1800000000.5
    # a header-only table of the current version
    header = V2.splitlines()[0] + "\n"
    assert list(load_repeats(write(tmp_path / "h" / "repeats.csv", header)).columns) == header.strip().split(",")


# --- refusals -------------------------------------------------------------------------------------------------------

def test_a_future_version_is_refused_naming_the_file_the_version_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status = status_at(tmp_path, {**COMMON, "format": 3})
    with pytest.raises(FormatError) as err:
        load_status(status)
    assert str(err.value).startswith(f"{status}: format 3 is newer than this attnprof reads (status.json formats 1 to 2)")
    assert "Fix: upgrade attnprof (git pull && .venv/bin/pip install -e .)" in str(err.value)
    env = write(tmp_path / "results" / "new" / "env.json", json.dumps({"format": 7, "device": "cpu",
                                                                       "config": {"shapes": GRID, "variants": ["naive"]}}))
    env = env.relative_to(tmp_path)  # as Snakemake gives it
    for read in (lambda: load_env(env), lambda: recorded_grid(Layout(), "new")):  # the run's readers and the plan's
        with pytest.raises(ValueError, match=r"^results/new/env.json: format 7 is newer than this attnprof reads .*"
                                             r"Fix: upgrade attnprof \(git pull && \.venv/bin/pip install -e \.\)"):
            read()
    repeats = write(tmp_path / "results" / "new" / "repeats.csv", V2.replace(",2\n", ",3\n")).relative_to(tmp_path)
    with pytest.raises(FormatError) as err:
        load_repeats(repeats)
    assert str(err.value).startswith("results/new/repeats.csv: format 3 is newer")
    # a derived table: this attnprof can also write it again
    assert ("or write it again from the captures: .venv/bin/snakemake --profile workflow/profiles/render "
            "results/new/report.pdf --forcerun summarize") in str(err.value)


@pytest.mark.parametrize("found", ["2", 2.0, True, None, 0, -1, [2], {"version": 2}])
def test_a_version_key_of_another_type_or_no_version_is_refused(tmp_path, found):
    status = status_at(tmp_path, {**COMMON, "format": found})
    with pytest.raises(FormatError) as err:
        load_status(status)
    assert str(err.value).startswith(f"{status}: format {found!r} is not a format version (status.json formats are "
                                     "whole numbers 1 to 2; none means 1): the file was edited or damaged. Fix: copy it "
                                     "again from where the result set was captured, or delete ")
    assert str(status.parent) in str(err.value)
    with pytest.raises(FormatError, match=r"^env.json: format .* is not a format version .* Fix: copy it again"):
        current_record("env", {"format": found}, "env.json")


@pytest.mark.parametrize("cell", ["2.5", "two", ""])
def test_a_repeats_csv_whose_format_column_is_no_version_is_refused(tmp_path, cell):
    path = write(tmp_path / "repeats.csv", V2.replace(",2\n", f",{cell}\n"))
    with pytest.raises(FormatError, match=r"repeats.csv: format .* is not a format version .* --forcerun summarize"):
        load_repeats(path)
    # rows of two versions: no one version
    mixed = write(tmp_path / "m" / "repeats.csv", V2.replace(",2\n", ",1\n", 1))
    with pytest.raises(FormatError, match=r"format \[1, 2\] is not a format version"):
        load_repeats(mixed)


def test_compare_refuses_a_result_set_of_a_future_version_with_the_fix(tmp_path):
    env = write(tmp_path / "x" / "env.json", json.dumps({"format": 3, "device": "cpu", "config": {}}))
    with pytest.raises(ResultSetError, match=r"x/env.json: format 3 is newer .* Fix: upgrade attnprof"):
        load_result_set("x", {"env": str(env), "summary": str(tmp_path / "x" / "summary.csv")}, lambda *a: None)


def _current_env(**config) -> dict:
    """A format-2 env.json as scripts/environment.py writes it (the fields of version 2 written out here)."""
    return {"format": 2, "run": "x", "device": "cpu", "torch": "2.13.0+cpu", "captures_control": True,
            "config": {"repeats": 3, "top_up": {"rounds": 0, "time_s": 0.0},
                       "compare": {"noise_floor": 0.02, "noise_floor_host": 0.2}, **config}}


def test_compare_refuses_a_format_2_env_without_captures_control_naming_the_field_and_the_fix(tmp_path):
    """Issue 43 item 12's input: a format-2 env.json whose 'captures_control' was deleted ended compare in a bare
    KeyError."""
    env = _current_env()
    del env["captures_control"]
    path = write(tmp_path / "x" / "env.json", json.dumps(env))
    with pytest.raises(ResultSetError, match=r"x/env.json: format 2 records 'captures_control', which this file "
                                             r"lacks.* Fix: copy it again from where the result set was captured"):
        load_result_set("x", {"env": str(path), "summary": str(tmp_path / "x" / "summary.csv")}, lambda *a: None)


@pytest.mark.parametrize("field", ["config.repeats", "config.compare.noise_floor_host", "config.top_up"])
def test_a_format_2_env_without_a_version_2_field_is_refused_by_every_reader(tmp_path, field):
    """The report's input (KeyError 'repeats' before) and its kind: each nested field of version 2 deleted."""
    env = _current_env()
    *parents, last = field.split(".")
    node = env
    for key in parents:
        node = node[key]
    del node[last]
    path = write(tmp_path / "x" / "env.json", json.dumps(env))
    with pytest.raises(FormatError, match=rf"env.json: format 2 records '{re.escape(field)}', which this file lacks"):
        load_env(path)
    whole = _current_env()
    assert current_record("env", whole, tmp_path / "y" / "env.json") == whole  # the whole record reads as written


def test_a_format_2_status_without_its_repeat_is_refused_naming_the_folder_to_capture_again(tmp_path):
    path = status_at(tmp_path, {**COMMON, "format": 2, "capture_started_at": 1800000000.25})
    with pytest.raises(FormatError, match=r"status.json: format 2 records 'repeat', which this file lacks.*"
                                          r"delete .*naive/r2 to capture it again"):
        load_status(path)


# --- the migrations and the committed examples ----------------------------------------------------------------------

def test_every_version_below_the_current_one_has_its_step():
    from attnprof.model.formats import _STEPS

    assert set(_STEPS) == set(CURRENT)
    for kind, steps in _STEPS.items():
        assert sorted(steps) == list(range(1, CURRENT[kind])), kind


def test_the_columns_version_1_may_lack_are_the_writer_s():
    from attnprof.analysis.tables import REPEAT_COLUMNS
    from attnprof.model.formats import REPEATS_ADDED

    assert REPEAT_COLUMNS[-len(REPEATS_ADDED):] == list(REPEATS_ADDED)  # added last, in this order


def _examples():
    return sorted(p for p in EXAMPLES.iterdir() if (p / "env.json").is_file())


@pytest.mark.parametrize("example", _examples(), ids=lambda p: p.name)
def test_the_committed_examples_are_version_1_and_read_as_the_current_one(example):
    raw = json.loads((example / "env.json").read_text())
    if "format" in raw:  # captured with format versions (the history example): read as written, every field
        assert raw["format"] == 2 and load_env(example / "env.json") == raw and raw["captures_control"] is True
        pd.testing.assert_frame_equal(load_repeats(example / "repeats.csv"), pd.read_csv(example / "repeats.csv"))
        return
    assert "format" not in raw  # made before format versions (re-rendered later by the lead)
    env = load_env(example / "env.json")
    assert env["format"] == 2 and env["config"]["repeats"] == raw["config"].get("repeats", 1)
    assert env["captures_control"] is True  # every committed example was captured with the control
    assert env["config"]["compare"]["noise_floor"] == raw["config"]["compare"]["noise_floor"]
    repeats = load_repeats(example / "repeats.csv")
    raw_repeats = pd.read_csv(example / "repeats.csv")
    # every number as written; a re-rendered example's repeats.csv is of the current format already (summarize
    # writes it anew), its env.json and status.json stay as captured
    assert (repeats["format"] == 2).all()
    pd.testing.assert_frame_equal(repeats.drop(columns="format"), raw_repeats.drop(columns="format", errors="ignore"))
    for path in sorted(example.glob("captures/*/*/r*/status.json"))[:8]:
        raw, status = json.loads(path.read_text()), load_status(path)
        assert status == {**raw, "format": 2, "repeat": raw.get("repeat", int(path.parent.name[1:])),
                          "capture_started_at": raw.get("capture_started_at", raw["started_at"])}


def test_summarize_writes_the_current_repeats_csv_from_a_version_1_record(tmp_path, monkeypatch):
    """A version-1 record (no repeat, no capture_started_at: made before both) through rule extract and summarize:
    repeats.csv says when the capture started (its started_at) and carries format 2 in every row; env.json of version
    1 (no repeats)."""
    from test_records import H200, H200_ENV, gunzip_json, place, summarize
    from test_records import extract as extract_capture

    monkeypatch.chdir(tmp_path)
    record = {**gunzip_json(H200 / "naive" / "status.json.gz"), "started_at": 1800000000.5}
    assert not {"format", "repeat", "capture_started_at"} & set(record)
    status = place(tmp_path, "naive", record).relative_to(tmp_path)
    extract_capture(status)
    (tmp_path / "results" / "x" / "env.json").write_text(json.dumps(H200_ENV))
    sm = summarize(tmp_path, [status])
    written = pd.read_csv(sm.output.repeats)
    assert list(written["format"]) == [2] and list(written["started_at"]) == [1800000000.5]
    assert list(written["repeat"]) == [1]
    pd.testing.assert_frame_equal(load_repeats(sm.output.repeats), written)  # the current format reads as written
