"""The plan (attnprof.model.plan): built once from a config file and what a machine has, without Snakemake; every
path of a result set from its layout; the grid of a result set from elsewhere read from its env.json, with an
error that names the file and the fix."""
import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from attnprof.model.gpus import Gpu
from attnprof.model.plan import Layout, Machine, build_plan, recorded_grid

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "configs"


def config_of(*files: str, **override) -> dict:
    """config/config.yaml with tests/configs/<file> merged on top (as --configfile does), validated (defaults set)."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for name in files:
        config.update(yaml.safe_load((CONFIGS / name).read_text()))
    config.update(override)
    validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    return config


def name_run(device, gpu, build):
    return f"{device}:{gpu}:{build.get('torch')}"


def slug(text):
    return text.lower().replace(" ", "-")


def h200(index, uuid, name="NVIDIA H200"):
    return Gpu(index=index, uuid=uuid, name=name)


def test_a_cpu_plan_from_the_tiny_config():
    plan = build_plan(config_of("tiny.yaml"), Machine(torch_build={"torch": "2.13.0"}, cores=2), name_run, slug)
    assert (plan.device, plan.run, plan.this_runs, plan.gpus) == ("cpu", "tiny", ("tiny",), ())
    # two seq_len values, one of everything else: two shapes, by hand
    assert plan.grid.shapes == ("b1_h2_s64_d32_fp32_causal", "b1_h2_s128_d32_fp32_causal")
    assert plan.grid.repeats == 2 and plan.grid.variants[-1] == "my_attn"
    assert plan.grid.control_shapes == plan.grid.shapes[:1]
    assert plan.capture_threads == 2 and plan.torch_version == "torch=2.13.0"
    assert plan.ab_runs == {} and plan.ab_compare is None


def test_run_auto_names_the_device_and_build_and_keeps_a_suffix():
    plan = build_plan(config_of("tiny.yaml", run="auto-beyond"), Machine(torch_build={"torch": "9"}), name_run, slug)
    assert plan.run == "cpu:None:9-beyond"


def test_two_visible_gpus_of_one_model():
    machine = Machine(visible=(h200(0, "GPU-a"), h200(1, "GPU-b")), torch_build={"torch": "2.11"}, cores=16)
    plan = build_plan(config_of("tiny.yaml", run="auto"), machine, name_run, slug)
    assert plan.device == "cuda" and plan.run == "cuda:NVIDIA H200:2.11"
    assert plan.grid.shapes == ("b1_h2_s64_d32_bf16_causal",)
    # several GPUs: each capture takes one unit; a GPU run's capture has one thread whatever the cores
    assert (plan.gpu_units, plan.gpu_choice, plan.capture_threads) == (1, "GPU-a,GPU-b", 1)


def test_a_cluster_runs_captures_in_processes_and_chooses_no_gpu():
    plan = build_plan(config_of("tiny.yaml", device="cuda"), Machine(detected="NVIDIA H100", cluster=True),
                      name_run, slug)
    assert (plan.capture_mode, plan.gpu_choice, plan.gpus, plan.gpu_name) == ("process", "any", (), "NVIDIA H100")


def test_gpus_of_two_models_are_refused_naming_the_config_key():
    machine = Machine(visible=(h200(0, "GPU-a"), h200(1, "GPU-b", "NVIDIA H100")))
    with pytest.raises(ValueError, match="^config "):
        build_plan(config_of("tiny.yaml", device="cuda"), machine, name_run, slug)


def test_an_ab_plan_names_its_result_sets_and_keeps_one_gpu():
    machine = Machine(visible=(h200(0, "GPU-a"), h200(1, "GPU-b")),
                      env_builds={"base": {"torch": "2.11"}, "next": {"torch": "2.12"}})
    plan = build_plan(config_of("tiny.yaml", "ab-envs.yaml", run="auto"), machine, name_run, slug)
    assert plan.run == "nvidia-h200" and plan.this_runs == ("nvidia-h200@base", "nvidia-h200@next")
    assert plan.ab_compare == "nvidia-h200-ab" and len(plan.gpus) == 1
    assert plan.torch_version_of("nvidia-h200@next") == "torch=2.12"
    assert plan.ab_record("nvidia-h200@next")["environments"] == ["base", "next"]
    assert plan.ab_targets()[-1] == "results/compare/nvidia-h200-ab/compare.pdf"
    # round 1: A then B; round 2: B then A (ABBA): the higher priority runs first
    first = {env: plan.capture_priority(f"nvidia-h200@{env}", 1, "naive") for env in ("base", "next")}
    second = {env: plan.capture_priority(f"nvidia-h200@{env}", 2, "naive") for env in ("base", "next")}
    assert first["base"] > first["next"] > second["next"] > second["base"]
    # top-up (config's default) adds rounds in both result sets; a round it adds still comes after every base round
    assert plan.top_up_runs() == plan.this_runs and plan.top_up["rounds"] == 3
    added = plan.capture_priority("nvidia-h200@base", plan.grid.repeats + 1, "naive")
    assert added < min(plan.capture_priority(f"nvidia-h200@{e}", plan.grid.repeats, "naive") for e in ("base", "next"))


def test_top_up_is_off_without_environments_or_with_rounds_0():
    single = build_plan(config_of("tiny.yaml"), Machine(), name_run, slug)
    assert single.top_up_runs() == () and single.top_up["rounds"] == 0
    off = build_plan(config_of("tiny.yaml", "ab-envs.yaml", top_up={"rounds": 0, "time_s": 10}),
                     Machine(env_builds={"base": {}, "next": {}}), name_run, slug)
    assert off.top_up_runs() == ()
    # no time for any round: off too (a second look that adds nothing would only split the error rate)
    no_time = build_plan(config_of("tiny.yaml", "ab-envs.yaml", top_up={"rounds": 3, "time_s": 0}),
                         Machine(env_builds={"base": {}, "next": {}}), name_run, slug)
    assert no_time.top_up_runs() == () and no_time.top_up["rounds"] == 0


def test_a_cells_rounds_follow_its_top_up_record():
    """rounds_of by hand: the rows a record names get their rounds in all (never fewer than the base), the others none."""
    from attnprof.model.plan import rounds_of

    record = {"rows": [{"variant": "v", "shape_key": "s1", "rounds": 5}, {"variant": "w", "shape_key": "s2", "rounds": 2}]}
    assert rounds_of(record, 3) == {("s1", "v"): 5, ("s2", "w"): 3}
    assert rounds_of(None, 3) == {}


def test_the_layout_spells_every_path_of_a_result_set():
    lay = Layout()
    assert lay.table_file("recipe", "x", "s", "v", 2) == "results/x/tables/s/v/r2/recipe.csv"
    assert lay.capture_file("trace", "x", shape="s", variant="v", repeat=1) == "results/x/captures/s/v/r1/trace.json.gz"
    assert lay.capture_file("status") == "results/{run}/captures/{shape}/{variant}/r{repeat}/status.json"
    assert lay.run_file("summary", "x") == "results/x/summary.csv"
    assert lay.plot("roofline", "x", None) == "results/x/plots/roofline.png"
    assert lay.plot("timeline", "x", "s") == "results/x/plots/s/timeline.png"
    assert lay.compare_file("json", "a__vs__b") == "results/compare/a__vs__b/compare.json"
    assert lay.capture_link("trace", "s", "v") == "captures/s/v/r1/trace.json.gz"  # from the report beside it
    assert Layout.around("/data/results/x") == (Layout("/data/results"), "x")
    # 10 tables per capture, 2 shapes x 1 variant x 3 repeats
    assert len(lay.tables_of("x", ["s", "t"], ["v"], 3)) == 10 * 2 * 3


def test_the_layout_reads_a_capture_path_back_and_nothing_else():
    """Layout.capture_of: (run folder, shape, variant, repeat) of a capture's file or (TABLES) a table's, by hand from
    the paths; None for a path of another shape (too short, not under captures/, no r<k> folder, repeat r0)."""
    assert Layout.capture_of("results/x/captures/S/naive/r12/status.json") == {
        "run_dir": Path("results/x"), "shape_key": "S", "variant": "naive", "repeat": 12}
    assert Layout.capture_of("/d/y/tables/S/sdpa_flash/r2/recipe.csv", Layout.TABLES) == {
        "run_dir": Path("/d/y"), "shape_key": "S", "variant": "sdpa_flash", "repeat": 2}
    for other in ("status.json", "/tmp/a/b/c/status.json", "results/x/tables/S/naive/r1/status.json",
                  "results/x/captures/S/naive/r0/status.json", "results/x/captures/S/naive/x1/status.json"):
        assert Layout.capture_of(other) is None, other
    assert Layout.capture_of("captures/S/naive/r1/status.json")["run_dir"] == Path(".")  # from inside the run folder
    # what the layout writes, it reads back
    lay = Layout("/r")
    assert Layout.capture_of(lay.capture_file("trace", "x", shape="S", variant="v", repeat=3))["repeat"] == 3
    assert Layout.capture_of(lay.table_file("ops", "x", "S", "v", 7), Layout.TABLES)["run_dir"] == Path(lay.run_dir("x"))


def test_the_layout_finds_the_control_captures(tmp_path):
    lay = Layout(str(tmp_path))
    assert not lay.has_captures("x") and lay.control_shapes("x") == []
    for shape, variant in (("s2", "control"), ("s1", "naive"), ("s1", "control")):
        (tmp_path / "x" / "captures" / shape / variant / "r1").mkdir(parents=True)
    assert lay.has_captures("x") and lay.control_shapes("x") == ["s1", "s2"]


def write_env(root: Path, run: str, doc) -> Path:
    path = root / "results" / run / "env.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    return path


GRID = {"cpu": {"batch": [1], "heads": [2], "seq_len": [64], "head_dim": [32], "dtype": ["fp32"], "causal": [True]}}


def test_the_grid_of_a_result_set_from_elsewhere_is_its_env_jsons(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_env(tmp_path, "copied", {"device": "cpu", "config": {"shapes": GRID, "variants": ["naïve", "σ_attn"],
                                                               "repeats": 3}})
    g = recorded_grid(Layout(), "copied")
    assert g.shapes == ("b1_h2_s64_d32_fp32_causal",) and g.variants == ("naïve", "σ_attn") and g.repeats == 3
    assert g.control_shapes == ()  # no control folder among its captures


@pytest.mark.parametrize("doc, missing", [
    ({"device": "cpu"}, "'config'"),  # the issue's
    ({"config": {"shapes": GRID, "variants": ["naive"]}}, "'device'"),  # the issue's
    ({"device": "cpu", "config": {"variants": ["naive"]}}, "'config.shapes'"),
    (["not", "a", "record"], "'config' or 'device'"),
])
def test_an_env_json_that_cannot_tell_the_grid_is_named_with_the_fix(tmp_path, monkeypatch, doc, missing):
    monkeypatch.chdir(tmp_path)
    path = write_env(tmp_path, "copied", doc)
    with pytest.raises(ValueError) as err:
        recorded_grid(Layout(), "copied")
    text = str(err.value)
    assert str(path.relative_to(tmp_path)) in text and f"has no {missing}" in text and "Copy " in text


def test_a_missing_env_json_says_re_render_first_with_the_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples" / "from_gpu").mkdir(parents=True)
    with pytest.raises(ValueError) as err:
        recorded_grid(Layout(), "from_gpu")
    assert ("Re-render results/from_gpu first: cp -r examples/from_gpu results/ && .venv/bin/snakemake --profile "
            "workflow/profiles/render results/from_gpu/report.pdf") in str(err.value)
    with pytest.raises(ValueError, match="Re-render results/elsewhere first: .venv/bin/snakemake --profile"):
        recorded_grid(Layout(), "elsewhere")  # not among the examples: the render command alone


@pytest.mark.parametrize("text", ["{not json", "[]", '{"rows": {}}', '{"rows": [{"variant": "v", "shape_key": "s"}]}',
                                  '{"rows": [{"variant": "v", "shape_key": "s", "rounds": "4"}]}',
                                  '{"rows": [{"variant": "v", "shape_key": "s", "rounds": true}]}',
                                  '{"rows": [{"variant": "v", "shape_key": "s", "rounds": 0}]}'])
def test_a_top_up_record_that_attnprof_did_not_write_is_refused_naming_it(tmp_path, text):
    """Its rounds decide which captures a result set holds: a damaged or hand-made one is refused with the file and
    the fix, never read as rounds (a string '4', a bool, 0 rounds, no rounds, rows not a list, not JSON)."""
    from attnprof.model.plan import load_top_up

    path = tmp_path / "top_up.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{path}.*(copy it again|delete it)"):
        load_top_up(path)


def test_a_top_up_record_attnprof_wrote_loads(tmp_path):
    from attnprof.model.plan import load_top_up

    path = tmp_path / "top_up.json"
    assert load_top_up(path) is None
    path.write_text('{"base": 3, "rows": [{"variant": "v", "shape_key": "s", "rounds": 5}], "left": []}')
    assert load_top_up(path)["rows"][0]["rounds"] == 5
