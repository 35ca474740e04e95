"""Issue 33, kinds 2, 3, 7, 8, 9 (its NUL half) and 10: compare computes only with files it checked, a damaged or
missing file is refused as damaged (naming the file, what is wrong and the fix), never read as a change; a NUL byte in
an A/B environment is named at config time; tools/migrate_repeats.py refuses what is not a result set and names what
it leaves behind.

Inputs: committed example result sets (examples/cpu@torch2.13, examples/nvidia-h200@base,
examples/h200_unsupported_backends) copied into tmp_path, their run tables' SHA-256 sidecars recorded as summarize and
findings record them, and the per-capture ops and recipe tables made from their traces as extract makes them (two
variants, two repeats: small); then damaged. Where a test re-records a sidecar after an edit, it stands for a writer
that wrote the bad value itself: the value check, not the sidecar, must name it."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from attnprof.analysis.compare import RERENDER, ResultSetError, compare_runs, load_result_set
from attnprof.analysis.control import NO_CONTROL
from attnprof.analysis.recipe import RECIPE_COLUMNS, recipe_table
from attnprof.analysis.tables import analyse_trace, op_table
from attnprof.analysis.trace import load_trace
from attnprof.model.config import config_problems
from attnprof.model.names import RUN_FILES
from attnprof.runtime.integrity import file_problem, record_checksums

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CPU, GPU, OLD = "cpu@torch2.13", "nvidia-h200@base", "h200_unsupported_backends"
SHAPE = "b2_h8_s512_d64_fp32_causal"  # the CPU example's one shape
#: the run tables summarize and findings write with a sidecar
RUN_TABLES = ("summary", "repeats", "kernels", "findings", "control")
TABLED = {"variants": ("naive", "sdpa_math"), "repeats": (1, 2)}


def _copy(example: str, dest: Path) -> Path:
    shutil.copytree(EXAMPLES / example, dest, ignore=shutil.ignore_patterns("plots", "report.*", "*.log.gz"))
    record_checksums(dest, [dest / RUN_FILES[k] for k in RUN_TABLES])
    return dest


def _tables(run: Path) -> None:
    """ops.csv, recipe.csv and recipe_backward.csv of TABLED's captures, made from the traces and checksummed as
    scripts/extract.py does."""
    for variant in TABLED["variants"]:
        for k in TABLED["repeats"]:
            trace = load_trace(run / "captures" / SHAPE / variant / f"r{k}" / "trace.json.gz")
            frames = analyse_trace(trace, "attn_fwd", expect_gpu=False)
            out = run / "tables" / SHAPE / variant / f"r{k}"
            out.mkdir(parents=True)
            op_table(frames, variant, SHAPE).to_csv(out / "ops.csv", index=False)
            recipe_table(frames, variant, SHAPE, False).to_csv(out / "recipe.csv", index=False)
            pd.DataFrame(columns=RECIPE_COLUMNS).to_csv(out / "recipe_backward.csv", index=False)  # forwards only
            record_checksums(run, [out / "ops.csv", out / "recipe.csv", out / "recipe_backward.csv"])


@pytest.fixture(scope="module")
def cpu_template(tmp_path_factory) -> Path:
    run = _copy(CPU, tmp_path_factory.mktemp("template") / CPU)
    _tables(run)
    return run


@pytest.fixture
def cpu_set(cpu_template, tmp_path) -> Path:
    """A fresh copy of the CPU example with its tables, in tmp_path/results/<name>."""
    return Path(shutil.copytree(cpu_template, tmp_path / "results" / CPU))


def files(run: Path) -> dict:
    """compare's inputs of result set ``run`` (as workflow/rules/common.smk's compare_inputs lists them)."""
    out = {k: str(run / RUN_FILES[k]) for k in ("summary", "kernels", "env", "findings", "repeats")}
    tables = sorted((run / "tables").glob("*/*/r*")) if (run / "tables").is_dir() else []
    out["ops"] = [str(t / "ops.csv") for t in tables if t.name == "r1"]
    for kind in ("recipe", "recipe_backward"):
        out[kind] = [str(t / f"{kind}.csv") for t in tables]
    return out


def load(run: Path) -> dict:
    return load_result_set(run.name, files(run), file_problem)


def refused(run: Path, *words: str) -> str:
    """The message of load_result_set's refusal of ``run``, checked to hold ``words`` and a fix."""
    with pytest.raises(ResultSetError) as err:
        load(run)
    message = str(err.value)
    for w in words:
        assert w in message, message
    assert "fix" in message.lower(), message
    return message


def edit_csv(path: Path, fn, rerecord: bool = False) -> None:
    frame = pd.read_csv(path)
    fn(frame).to_csv(path, index=False)
    if rerecord:
        record_checksums(path.parents[4] if "tables" in path.parts else path.parent, [path])


# --- the fixture itself -------------------------------------------------------------------------------------------

def test_an_intact_copy_loads_and_compares_with_itself_as_unchanged(cpu_set, tmp_path):
    a = load(cpu_set)
    assert len(a["recipes"]) == 2 and a["control_check"]["ok"]  # naive and sdpa_math forwards; the control as built
    assert set(a["ops"]["variant"]) == set(TABLED["variants"])
    other = shutil.copytree(cpu_set, tmp_path / "results" / "copy")
    pair = compare_runs([a, load(other)])["pairs"][0]
    assert not [r for r in pair["rows"] if r["verdict"] in ("slower", "faster")]
    assert {r["verdict"] for r in pair["recipes"]} == {"same recipe"}


# --- kind 2: every file compare reads is checked ------------------------------------------------------------------

def _times_x(factor):
    return lambda f: f.assign(cpu_ms_per_forward=f["cpu_ms_per_forward"] * factor)


@pytest.mark.parametrize("relpath,edit", [
    ("repeats.csv", lambda p: edit_csv(p, _times_x(1.5))),  # the input: times x1.5
    ("control.csv", lambda p: edit_csv(p, lambda f: f.assign(**{"aten::mm": 2}))),
    ("findings.json", lambda p: p.write_text(p.read_text().replace("sdpa_math", "sdpa_flash", 1))),
    (f"tables/{SHAPE}/naive/r2/recipe.csv", lambda p: edit_csv(p, lambda f: f.assign(dur_us=f["dur_us"] * 1.5))),
    # of my own: summary.csv, kernels.csv, an ops table, edited by hand
    ("summary.csv", lambda p: edit_csv(p, _times_x(0.5))),
    ("kernels.csv", lambda p: p.write_text(p.read_text() + p.read_text().splitlines()[-1] + "\n")),
    (f"tables/{SHAPE}/sdpa_math/r1/ops.csv", lambda p: edit_csv(p, lambda f: f.iloc[::-1])),
])
def test_a_hand_edited_file_is_refused_naming_it_as_damaged_with_the_rerender_command(cpu_set, relpath, edit):
    edit(cpu_set / relpath)
    message = refused(cpu_set, str(cpu_set / relpath), "damaged", RERENDER.format(run_dir=cpu_set))
    assert message.count("damaged") == 1  # that file, no other


@pytest.mark.parametrize("relpath", ["repeats.csv", "control.csv", f"tables/{SHAPE}/naive/r1/recipe.csv"])
def test_a_file_without_its_sidecar_is_unchecked_and_refused(cpu_set, relpath):
    (cpu_set / "logs" / "checksums" / f"{relpath}.sha256").unlink()
    refused(cpu_set, str(cpu_set / relpath), "no SHA-256 recorded", "cannot be checked")


def test_a_deleted_control_csv_is_missing_not_a_result_set_before_the_self_check(cpu_set):
    (cpu_set / "control.csv").unlink()
    message = refused(cpu_set, str(cpu_set / "control.csv"), "missing")
    assert NO_CONTROL not in message


# --- kind 3: cut short at a line boundary is damaged, not different -----------------------------------------------

@pytest.mark.parametrize("relpath,lines", [
    (f"tables/{SHAPE}/naive/r1/recipe.csv", 3),  # the input: the last 3 steps gone
    ("repeats.csv", 1),  # of my own: a repeat's row gone, the control's last capture, a recipe to its header
    ("control.csv", 1),
    (f"tables/{SHAPE}/sdpa_math/r2/recipe.csv", None),
])
def test_a_table_cut_at_a_line_boundary_is_damaged(cpu_set, relpath, lines):
    path = cpu_set / relpath
    kept = path.read_text().splitlines(keepends=True)
    path.write_text("".join(kept[:1] if lines is None else kept[:-lines]))
    message = refused(cpu_set, str(path), "damaged", "cut short")
    assert "recipe changed" not in message and "removed" not in message


# --- kind 7: empty files, zero and text values --------------------------------------------------------------------

def test_an_empty_repeats_csv_is_named(cpu_set):
    (cpu_set / "repeats.csv").write_text("")
    refused(cpu_set, str(cpu_set / "repeats.csv"), "damaged")
    record_checksums(cpu_set, [cpu_set / "repeats.csv"])  # written so by its writer: the read names it all the same
    refused(cpu_set, str(cpu_set / "repeats.csv"), "empty file", "damaged")


def _set_cell(col, row, value):
    def edit(f):
        f[col] = f[col].astype(object)
        f.loc[row, col] = value
        return f
    return edit


@pytest.mark.parametrize("table,col,row,value", [
    ("repeats.csv", "cpu_ms_per_forward", 2, 0),  # the zero median
    ("repeats.csv", "cpu_ms_per_forward", 5, -1.5),  # of my own: negative, infinite, text
    ("summary.csv", "cpu_ms_per_forward", 1, "inf"),
    ("repeats.csv", "cpu_ms_per_backward", 0, "fast"),
    ("repeats.csv", "repeat", 3, "two"),  # counts: a text repeat number, a fractional kernel count
    ("summary.csv", "kernels_per_forward", 0, 2.5),
])
def test_a_time_that_is_no_time_is_named_by_file_column_and_line(cpu_set, table, col, row, value):
    path = cpu_set / table
    variant = pd.read_csv(path)["variant"][row]
    edit_csv(path, _set_cell(col, row, value))
    refused(cpu_set, str(path), "damaged")  # the sidecar catches the edit first
    record_checksums(cpu_set, [path])
    message = refused(cpu_set, str(path), f"column {col}, line {row + 2} ({variant}", "damaged")
    assert "is not a time" in message or "is not a count" in message
    assert repr(value if isinstance(value, str) else float(value)) in message or str(value) in message


@pytest.mark.parametrize("col,value", [("dur_us", "abc"), ("step", "two")])  # the text duration; a text step
def test_a_text_value_in_a_recipe_table_is_named_by_file_column_and_line(cpu_set, col, value):
    path = cpu_set / "tables" / SHAPE / "naive" / "r1" / "recipe.csv"
    edit_csv(path, _set_cell(col, 3, value), rerecord=True)
    refused(cpu_set, str(path), f"column {col}, line 5: '{value}' is not a number", "damaged")


# --- kind 8: a missing column, a lost control, different devices --------------------------------------------------

@pytest.mark.parametrize("table,col", [("repeats.csv", "cpu_ms_per_forward"),  # the input
                                       ("repeats.csv", "repeat"), ("summary.csv", "status"), ("kernels.csv", "kernel")])
def test_a_table_without_a_column_compare_reads_is_damaged_naming_the_column(cpu_set, table, col):
    edit_csv(cpu_set / table, lambda f: f.drop(columns=col), rerecord=True)
    message = refused(cpu_set, str(cpu_set / table), f"column {col} missing", "damaged")
    assert "1 repeat" not in message


def test_a_header_only_repeats_csv_is_damaged_never_one_repeat(cpu_set):
    edit_csv(cpu_set / "repeats.csv", lambda f: f.iloc[0:0], rerecord=True)
    refused(cpu_set, str(cpu_set / "repeats.csv"), "damaged: no rows", "5 ok rows")  # 7 variants, efficient and cudnn refused on a CPU


def test_a_deleted_control_folder_is_damage_not_a_set_from_before_the_self_check(cpu_set):
    shutil.rmtree(cpu_set / "captures" / SHAPE / "control")
    message = refused(cpu_set, "holds no capture of the control", "damaged", "restore captures/<shape>/control")
    assert NO_CONTROL not in message


@pytest.mark.parametrize("content", ["header", "empty"])
def test_an_empty_control_csv_is_damage_not_a_set_from_before_the_self_check(cpu_set, content):
    path = cpu_set / "control.csv"
    path.write_text(path.read_text().splitlines(keepends=True)[0] if content == "header" else "")
    refused(cpu_set, str(path), "damaged")
    record_checksums(cpu_set, [path])  # as its writer would write it after the control's captures were deleted
    refused(cpu_set, str(path), "damaged")


def _predating_control(folder):
    """``folder`` as a version before the control wrote it: no ``environments`` in its env.json's config, no control."""
    env = json.loads((folder / "env.json").read_text())
    env["config"].pop("environments", None)
    (folder / "env.json").write_text(json.dumps(env))
    for control in folder.glob("captures/*/control"):
        shutil.rmtree(control)
    (folder / "control.csv").unlink(missing_ok=True)
    # as that version's render wrote them: sidecars of these captures (a re-render now writes the same)
    record_checksums(folder, [folder / RUN_FILES[k] for k in RUN_TABLES if (folder / RUN_FILES[k]).exists()])
    return folder


def test_a_result_set_from_before_the_control_is_still_said_to_be_so(tmp_path, cpu_set):
    """A result set made before the control (its env.json's config has no environments): without control.csv it
    compares, its self-check 'captured before'. The H200 example made to predate it (environments gone from its
    env.json, its control's captures and control.csv gone), and the CPU example's the same way."""
    old = _predating_control(_copy(OLD, tmp_path / "results" / OLD))
    other = _predating_control(_copy(OLD, tmp_path / "results" / "old2"))
    check = compare_runs([load(old), load(other)])["pairs"][0]["accounting"]["a"]
    assert check["observed"] is None and NO_CONTROL in check["why"]
    assert "control_check" not in load(_predating_control(cpu_set))


def test_a_cpu_set_against_a_gpu_set_is_refused_as_different_devices(tmp_path, cpu_set):
    gpu = load(_copy(GPU, tmp_path / "results" / GPU))
    cpu = load(cpu_set)
    for runs in ([cpu, gpu], [gpu, cpu], [cpu, cpu, gpu]):  # the input, reversed, a third set of its own
        with pytest.raises(ValueError) as err:
            compare_runs(runs)
        message = str(err.value)
        assert f"{GPU} on a GPU (cuda)" in message and f"{CPU} on the CPU" in message and "Fix" in message
        assert "accounting" not in message


# --- kind 9 (its NUL half): named at config time ------------------------------------------------------------------

GRID = {"cpu": {"batch": [1], "heads": [1], "seq_len": [8], "head_dim": [8], "dtype": ["fp32"], "causal": [True]},
        "cuda": []}


@pytest.mark.parametrize("environments,expected", [
    ({"a": {"python": "x", "env": {"OMP_NUM_THREADS": "1\0"}}, "b": {"python": "x"}},
     "environments.a.env.OMP_NUM_THREADS: the value '1\\x00' holds a NUL byte"),
    ({"a": {"python": "x"}, "b": {"python": "x", "env": {"V": "\0", "W": "ok"}}}, "environments.b.env.V:"),
    ({"a": {"python": ".venv\0/bin/python"}, "b": {"python": "x"}}, "environments.a.python: '.venv\\x00/bin/python' holds a NUL"),
])
def test_a_nul_byte_in_an_ab_environment_is_named_at_config_time(environments, expected):
    problems = config_problems({"shapes": GRID, "environments": environments})
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_nul_byte_read_from_yaml_is_named_too():
    import yaml

    config = yaml.safe_load('environments: {a: {python: x, env: {V: "x\\0y"}}, b: {python: y}}')
    assert [p.split(":")[0] for p in config_problems({"shapes": GRID, **config})] == ["environments.a.env.V"]


def test_a_nul_byte_in_an_ab_config_file_stops_the_parse_naming_environment_and_variable(tmp_path):
    """The workflow itself (a dry run): the config file's NUL (YAML "\\0") is named before any capture starts."""
    import snakemake_cli

    (tmp_path / "ab.yaml").write_text('environments: {a: {python: .venv/bin/python, env: {OMP_NUM_THREADS: "1\\0"}},'
                                      ' b: {python: .venv/bin/python}}\n')
    proc = snakemake_cli.run(["-n", "--cores", "1", "--snakefile", ROOT / "Snakefile", "--directory", tmp_path,
                              "--configfile", tmp_path / "ab.yaml"], timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "environments.a.env.OMP_NUM_THREADS: the value '1\\x00' holds a NUL byte" in out, \
        out[-3000:]
    assert "embedded null byte" not in out


# --- kind 10: tools/migrate_repeats.py ----------------------------------------------------------------------------

def migrate(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "migrate_repeats.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=args[0].parent if args else None)


def old_layout(tmp_path: Path) -> Path:
    """The CPU example's naive and sdpa_math captures of repeat 1, moved up into the layout before repeats."""
    run = tmp_path / "old"
    for variant in ("naive", "sdpa_math"):
        src = EXAMPLES / CPU / "captures" / SHAPE / variant / "r1"
        shutil.copytree(src, run / "captures" / SHAPE / variant)
    return run


@pytest.mark.parametrize("which", ["missing", "file", "captures"])
def test_migrate_refuses_what_is_not_a_result_set(tmp_path, which):
    run = old_layout(tmp_path)
    target = {"missing": tmp_path / "nope", "file": run / "captures" / SHAPE / "naive" / "status.json",
              "captures": run / "captures"}[which]
    proc = migrate(target)
    assert proc.returncode == 1 and "0 capture files moved" not in proc.stdout
    assert str(target) in proc.stderr and "nothing moved" in proc.stderr
    assert sorted(p.name for p in run.rglob("status.json")) == ["status.json"] * 2  # nothing moved
    assert not list(run.rglob("r1"))


def test_migrate_names_a_trace_left_behind_without_its_status(tmp_path):
    run = old_layout(tmp_path)
    (run / "captures" / SHAPE / "sdpa_math" / "status.json").unlink()
    proc = migrate(run)
    assert proc.returncode == 1
    assert "2 capture files moved" in proc.stdout  # naive's trace and status
    left = run / "captures" / SHAPE / "sdpa_math" / "trace.json.gz"
    assert f"{left}: left behind" in proc.stderr and "no status.json" in proc.stderr and left.exists()


def test_migrate_moves_a_whole_old_result_set_and_says_a_half_migrated_one(tmp_path):
    run = old_layout(tmp_path)
    proc = migrate(run)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"{run}: 4 capture files moved into r1/")
    assert len(list(run.glob("captures/*/*/r1/*"))) == 4
    # of my own: a capture copied back into the old layout beside its r1/ copy
    shutil.copy2(run / "captures" / SHAPE / "naive" / "r1" / "status.json", run / "captures" / SHAPE / "naive")
    proc = migrate(run)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{run / 'captures' / SHAPE / 'naive' / 'status.json'}: left behind, not moved: " in proc.stderr
    assert "r1/status.json exists already" in proc.stderr


# --- the README's compare command on re-rendered copies -----------------------------------------------------------

@pytest.mark.slow
def test_the_readme_compare_refuses_a_recipe_cut_short_after_the_render(tmp_path):
    """Both CPU examples copied and re-rendered as the README says (extract records the recipe and ops tables'
    sidecars), compared with the README's command: it compares; then a recipe table of the second cut at a line
    boundary: compare fails, naming the file as damaged and the re-render command, and writes no compare.json."""
    import snakemake_cli
    from conftest import copy_workflow

    repo = copy_workflow(tmp_path / "repo")
    other = "cpu@torch2.14"
    for name in (CPU, other):
        shutil.copytree(EXAMPLES / name, repo / "results" / name, ignore=shutil.ignore_patterns("plots", "report.*"))
        proc = snakemake_cli.run(["--profile", "workflow/profiles/render", f"results/{name}/findings.json",
                                  "--forcerun", "extract"], cwd=repo, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    (repo / "cmp.yaml").write_text(f"compare: {{runs: ['{CPU}', '{other}'], name: t}}\n")
    command = ["--cores", "1", "compare", "--configfile", "config/config.yaml", "cmp.yaml",
               "--allowed-rules", "compare_json", "compare_html", "compare_pdf", "compare"]
    proc = snakemake_cli.run([*command, "--until", "compare_json"], cwd=repo, timeout=600)
    out = repo / "results" / "compare" / "t" / "compare.json"
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    out.unlink()
    recipe = repo / "results" / other / "tables" / SHAPE / "naive" / "r3" / "recipe.csv"
    recipe.write_text("".join(recipe.read_text().splitlines(keepends=True)[:-3]))
    proc = snakemake_cli.run([*command, "--until", "compare_json"], cwd=repo, timeout=600)
    log = (repo / "results" / "compare" / "t" / "compare_json.log").read_text()
    assert proc.returncode != 0 and not out.exists()
    for text in (f"results/{other}/tables/{SHAPE}/naive/r3/recipe.csv: damaged", RERENDER.format(run_dir=f"results/{other}")):
        assert text in log, log[-3000:]
