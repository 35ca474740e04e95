"""A/B on one device (config environments, issue 20 part 1).

- the paired verdict (attnprof.analysis.verdict.judge_rows of one paired row) on simulated rounds with a known answer: A/A
  (no change) calls a change at no more than the stated rate, an injected 5 % change is found with 1.05 inside
  its interval, and a drift common to both sides that leaves the unpaired Welch interval inconclusive does not
  stop the paired one from deciding;
- the round order (attnprof.model.config.ab_priority): round k of every environment before round k + 1 of
  any, A,B then B,A;
- compare's pairing (attnprof.analysis.compare.ab_unpaired_rows): only two environments of one A/B run pair;
- a CI-sized A/B run through the snakemake CLI: two environments of this Python that differ in a variable
  (OMP_NUM_THREADS 1 and 2), each an ordinary result set with its env.json recorded in its own environment, and
  the paired comparison; and, where .venv-b (torch 2.14.1) exists, the real torch 2.13 against 2.14.1.
"""
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import snakemake_cli
from attnprof.analysis.compare import ab_unpaired_rows, compare_runs
from attnprof.analysis.verdict import paired_repeat_medians
from attnprof.analysis.verdict import compare_ratio, judge_rows, paired_row
from attnprof.model.config import ab_order, ab_priority, config_problems
from conftest import copy_workflow

ROOT = Path(__file__).resolve().parents[1]


# --- the paired verdict ---------------------------------------------------------------------------------

def compare_paired(a, b, threshold, confidence=0.95, looks=1):
    """One paired row judged alone (its own variance, no joint control): round k's times ``a[k]``, ``b[k]``."""
    return judge_rows({0: paired_row(a, b)}, threshold, confidence, looks)[0]


def _rounds(rng, n, ratio=1.0, drift_sd=0.0, pair_sd=0.01, base=2.0):
    """n rounds of (a, b) repeat medians: a common per-round factor (drift, log sd ``drift_sd``) times each
    side's own noise (log sd ``pair_sd``); b carries the true ``ratio``."""
    drift = rng.normal(0, drift_sd, n)
    a = base * np.exp(drift + rng.normal(0, pair_sd, n))
    b = base * ratio * np.exp(drift + rng.normal(0, pair_sd, n))
    return list(a), list(b)


def test_paired_interval_is_the_t_interval_of_the_log_ratios_by_hand():
    a, b = [2.0, 2.2, 1.9, 2.1], [2.1, 2.2, 2.0, 2.3]
    d = [math.log(y / x) for x, y in zip(a, b)]  # 0.0488, 0, 0.0513, 0.0909
    mean, sd = sum(d) / 4, math.sqrt(sum((x - sum(d) / 4) ** 2 for x in d) / 3)
    half = 3.182446305284263 * sd / 2  # t(0.975, 3), from a t table
    c = compare_paired(a, b, 0.02)
    assert c["ratio"] == pytest.approx(math.exp(mean)) and c["n_a"] == c["n_b"] == 4 and c["paired"]
    assert c["lo"] == pytest.approx(math.exp(mean - half), rel=1e-9)
    assert c["hi"] == pytest.approx(math.exp(mean + half), rel=1e-9)


def test_aa_calls_a_change_no_more_often_than_the_level():
    """A/A with threshold 0 (every interval that excludes 1 is a change): the rate of slower/faster verdicts
    over 4000 seeded simulations is the test's level, 5 %, within the simulation's error (±1 %)."""
    rng = np.random.default_rng(1)
    calls = sum(compare_paired(*_rounds(rng, 4, drift_sd=0.05), 0.0)["verdict"] in ("slower", "faster")
                for _ in range(4000))
    assert 0.04 <= calls / 4000 <= 0.06
    # at the practical threshold (2 %) a change needs the interval to exclude 1 too: rarer still
    rng = np.random.default_rng(2)
    verdicts = [compare_paired(*_rounds(rng, 4, drift_sd=0.05), 0.02)["verdict"] for _ in range(2000)]
    assert sum(v in ("slower", "faster") for v in verdicts) / 2000 <= 0.025 and "same" in verdicts


def test_an_injected_5_percent_change_is_found_with_its_size():
    rng = np.random.default_rng(3)
    results = [compare_paired(*_rounds(rng, 4, ratio=1.05, drift_sd=0.05, pair_sd=0.005), 0.02) for _ in range(200)]
    assert all(r["verdict"] == "slower" for r in results)
    covered = sum(r["lo"] <= 1.05 <= r["hi"] for r in results) / len(results)
    assert 0.90 <= covered <= 0.99  # a 95 % interval (200 trials: ±3 %)
    faster = compare_paired(*_rounds(np.random.default_rng(4), 4, ratio=1 / 1.05, pair_sd=0.005), 0.02)
    assert faster["verdict"] == "faster" and faster["lo"] <= 1 / 1.05 <= faster["hi"]


def test_a_common_drift_defeats_welch_but_not_the_pairing():
    """Rounds whose machine-wide speed moves by ±10 % (both sides alike) and a 5 % slower B: Welch's unpaired
    interval sees the drift as noise and cannot decide; the paired one takes it out and finds the 5 %."""
    drift = [1.00, 1.12, 0.90, 1.08]  # round factors
    a = [2.0 * f for f in drift]
    b = [2.0 * 1.05 * f * e for f, e in zip(drift, [1.003, 0.998, 1.001, 0.999])]
    assert compare_ratio(a, b, 0.02)["verdict"] == "inconclusive"
    paired = compare_paired(a, b, 0.02)
    assert paired["verdict"] == "slower" and paired["lo"] < 1.05 < paired["hi"] and paired["hi"] < 1.06


def test_incomplete_rounds_are_left_out_on_both_sides_and_lengths_must_match():
    c = compare_paired([2.0, None, 2.2, 2.1], [2.2, 2.0, float("nan"), 2.3], 0.02)
    assert c["n_a"] == c["n_b"] == 2  # rounds 1 and 4
    assert c["ratio"] == pytest.approx(math.sqrt(2.2 / 2.0 * 2.3 / 2.1))
    with pytest.raises(ValueError, match="one value per round"):
        compare_paired([1.0, 2.0], [1.0], 0.02)
    one = compare_paired([2.0], [2.2], 0.02)
    assert one["verdict"] == "inconclusive" and one["lo"] is None and "1 paired round" in one["why"]


# --- the round order ------------------------------------------------------------------------------------

def test_rounds_run_in_order_and_abba_within_them():
    names, repeats = ["A", "B"], 4
    jobs = [(k, e) for k in range(1, repeats + 1) for e in names]
    order = sorted(jobs, key=lambda j: -ab_priority(j[0], j[1], names, repeats))  # Snakemake: higher first
    assert order == [(1, "A"), (1, "B"), (2, "B"), (2, "A"), (3, "A"), (3, "B"), (4, "B"), (4, "A")]
    assert ab_order(3, ["x", "y", "z"]) == ["x", "y", "z"] and ab_order(2, ["x", "y", "z"]) == ["z", "y", "x"]
    assert ab_priority(2, None, [], 3) == 1  # a single run: REPEATS - repeat, as before
    with pytest.raises(ValueError, match="'C' is not one of"):
        ab_priority(1, "C", names, repeats)


def test_one_environment_is_a_config_problem():
    problems = config_problems({"shapes": {"cpu": {"batch": [1], "heads": [1], "seq_len": [8], "head_dim": [8],
                                                   "dtype": ["fp32"], "causal": [True]}, "cuda": []},
                                "environments": {"only": {"python": "python3"}}})
    assert any("two or more environments" in p for p in problems)


# --- compare's pairing hook -----------------------------------------------------------------------------

def _result_set(name, env, medians, start=0.0, side=0):
    """One (variant, shape) with one repeat per median; round k's capture starts at start + 100 k (+ 10 on side B:
    the two sides of a round back to back, as an A/B run interleaves them)."""
    rows = [{"variant": "v", "shape_key": "s", "status": "ok", "repeat": k + 1, "cpu_ms_per_forward": m,
             "started_at": start + 100 * k + 10 * side} for k, m in enumerate(medians)]
    summary = pd.DataFrame([{"variant": "v", "shape_key": "s", "status": "ok", "kernels_per_forward": 0,
                             "device_ms_per_forward": float("nan"), "cpu_ms_per_forward": float(np.median(medians))}])
    return {"name": name, "summary": summary, "kernels": pd.DataFrame(columns=["variant", "shape_key", "kernel"]),
            "ops": None, "env": {"device": "cpu", "config": {}, **({"ab": env} if env else {})}, "findings": {"shapes": []},
            "repeats": pd.DataFrame(rows)}


def ab_pairing(a, b):
    """Whether compare pairs every row of ``a`` and ``b`` (no row unpaired)."""
    return not ab_unpaired_rows(a, b, [("v", "s")])


def test_compare_pairs_only_two_environments_of_one_ab_run():
    drift = [1.0, 1.3, 0.8, 1.2]
    a_m = [10 * f for f in drift]
    b_m = [10 * 1.3 * f for f in drift]  # 30 % slower in every round: beyond the 20 % host threshold
    a = _result_set("x@A", {"run": "x", "environment": "A"}, a_m)
    b = _result_set("x@B", {"run": "x", "environment": "B"}, b_m, side=1)
    assert ab_pairing(a, b)
    assert not ab_pairing(a, _result_set("y@B", {"run": "y", "environment": "B"}, b_m))  # another A/B run
    assert not ab_pairing(a, _result_set("plain", None, b_m))
    pair = compare_runs([a, b])["pairs"][0]
    row = pair["rows"][0]
    assert pair["paired"] and row["paired"] and row["verdict"] == "slower" and row["ratio"] == pytest.approx(1.3)
    unpaired = compare_runs([_result_set("a", None, a_m), _result_set("b", None, b_m)])["pairs"][0]
    # unpaired, host times of two sittings are shown, not judged
    assert not unpaired["paired"] and unpaired["rows"][0]["verdict"] == "not judged"
    # B recaptured an hour later (its result set deleted, or an environment renamed): same A/B run id, but its rounds
    # share no moment with A's, so they are not paired, and the pair says why
    later = _result_set("x@B", {"run": "x", "environment": "B"}, b_m, start=3600.0, side=1)
    assert not ab_pairing(a, later) and "round 1 in x@B started after round 2 began" in ab_unpaired_rows(a, later, [("v", "s")])[("v", "s")]
    late = compare_runs([a, later])["pairs"][0]
    assert not late["paired"] and any("every row: round 1 in x@B" in n for n in late["notes"])
    # a result set made before captures were timed: no pairing either, said so
    untimed = _result_set("x@B", {"run": "x", "environment": "B"}, b_m, side=1)
    untimed["repeats"] = untimed["repeats"].drop(columns="started_at")
    assert not ab_pairing(a, untimed)
    assert "do not record when each capture started" in ab_unpaired_rows(a, untimed, [("v", "s")])[("v", "s")]
    ra, rb = paired_repeat_medians(a["repeats"], b["repeats"].iloc[[0, 1, 3]], "v", "s", "cpu_ms_per_forward")
    assert ra == a_m and rb == [b_m[0], b_m[1], None, b_m[3]]  # round 3 missing on B: a gap, not a shift


def test_one_row_recaptured_later_loses_its_pairing_and_the_others_keep_theirs():
    """Issue 43 item 10: editing a custom variant's module recaptures its rows in both environments, later. That row is
    compared unpaired (host times: not judged), named with the side and the cause; the other row stays paired and
    judged (30 % slower, beyond the 20 % host threshold)."""
    drift = [1.0, 1.3, 0.8, 1.2]
    a_m, b_m = [10 * f for f in drift], [13 * f for f in drift]

    def two_rows(name, env, side, late_start):
        x = _result_set(name, env, a_m if side == 0 else b_m, side=side)
        mine = x["repeats"].assign(variant="mine", started_at=x["repeats"]["started_at"] + late_start)
        x["repeats"] = pd.concat([x["repeats"], mine], ignore_index=True)
        x["summary"] = pd.concat([x["summary"], x["summary"].assign(variant="mine")], ignore_index=True)
        return x

    a = two_rows("x@A", {"run": "x", "environment": "A"}, 0, 0.0)
    b = two_rows("x@B", {"run": "x", "environment": "B"}, 1, 3600.0)  # mine recaptured on B an hour later
    pair = compare_runs([a, b])["pairs"][0]
    rows = {r["variant"]: r for r in pair["rows"]}
    assert pair["paired"] and rows["v"]["paired"] and rows["v"]["verdict"] == "slower"
    assert not rows["mine"]["paired"] and rows["mine"]["verdict"] == "not judged"
    assert pair["unpaired_rows"] == ["mine/s"]
    assert any(n.startswith("mine at s: round 1 in x@B started after round 2 began") for n in pair["notes"])


# --- the workflow: a CI-sized A/B run -------------------------------------------------------------------

TINY_AB = """
run: tinyab
variants: [naive]
shapes:
  cpu: {{batch: [1], heads: [2], seq_len: [64], head_dim: [32], dtype: [fp32], causal: [true]}}
  cuda: {{batch: [1], heads: [2], seq_len: [64], head_dim: [32], dtype: [bf16], causal: [true]}}
profiler: {{range_name: attn_fwd, warmup_calls: 1, schedule: {{wait: 1, warmup: 1, active: 2}}, min_complete_forwards: 2}}
timing: {{repeats: 3, input_sets: 2}}
repeats: 2
top_up: {{rounds: 2, time_s: 600}}
environments:
{environments}
"""


def _ab_run(tmp_path, environments: str, names: list[str]):
    work = copy_workflow(tmp_path / "wf")
    (work / "ab.yaml").write_text(TINY_AB.format(environments=environments))
    where = ["--snakefile", str(work / "Snakefile"), "--directory", str(work), "--configfile", str(work / "ab.yaml")]
    # target ab plans every environment's report and the comparison in three formats (a dry run: the reports and
    # PDFs are rendered by the same rules in test_workflow's run; here the measurements and their pairing count)
    plan = snakemake_cli.run(["ab", "-n", "--cores", "1", *where], timeout=300)
    assert plan.returncode == 0, plan.stderr[-3000:]
    jobs = snakemake_cli.job_stats(plan.stdout)
    assert {r: jobs.get(r) for r in ("report_html", "report_pdf", "compare_json", "compare_html", "compare_pdf")} == {
        "report_html": len(names), "report_pdf": len(names), "compare_json": 1, "compare_html": 1, "compare_pdf": 1}
    # naive and the control, 2 base rounds, per environment; the rounds top-up may add are planned after its look 1
    assert jobs["capture"] == 2 * len(names) * 2 and jobs["top_up"] == 1
    proc = snakemake_cli.run(["results/compare/tinyab-ab/compare.html", "--cores", "1", *where], timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    sets = {n: work / "results" / f"tinyab@{n}" for n in names}
    for name, folder in sets.items():
        assert (folder / "summary.csv").exists() and (folder / "findings.json").exists()
        env = json.loads((folder / "env.json").read_text())
        assert env["run"] == f"tinyab@{name}" and env["ab"]["run"] == "tinyab" and env["ab"]["environment"] == name
    compare = json.loads((work / "results" / "compare" / "tinyab-ab" / "compare.json").read_text())
    pair = compare["pairs"][0]
    assert (compare["baseline"], pair["b"]) == tuple(f"tinyab@{n}" for n in names) and pair["paired"]
    assert "tinyab@" in (work / "results" / "compare" / "tinyab-ab" / "compare.html").read_text()
    return work, sets, pair


@pytest.mark.workflow
def test_ab_run_with_two_thread_settings(tmp_path):
    """Two environments of this Python: 1 and 2 intra-op threads. Each result set's env.json is recorded in its
    own environment (torch's threads), and compare pairs them. (MKL_NUM_THREADS too: the job sets every thread
    variable to its threads, and torch takes MKL_NUM_THREADS over OMP_NUM_THREADS.)"""
    py = sys.executable
    envs = (f"  one: {{python: {py}, env: {{OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1'}}}}\n"
            f"  two: {{python: {py}, env: {{OMP_NUM_THREADS: '2', MKL_NUM_THREADS: '2'}}}}")
    _, sets, pair = _ab_run(tmp_path, envs, ["one", "two"])
    threads = {n: json.loads((f / "env.json").read_text())["torch_threads"] for n, f in sets.items()}
    assert threads == {"one": 1, "two": 2}
    assert {r["variant"] for r in pair["rows"]} == {"naive"}
    # two rounds paired, and where look 1 left the row undetermined the rounds top-up added (its record, which
    # each result set holds; the captures of those rounds exist on both sides)
    top_up = {(r["variant"], r["shape_key"]): r["rounds"] for r in json.loads((sets["one"] / "top_up.json").read_text())["rows"]}
    assert json.loads((sets["two"] / "top_up.json").read_text())["rows"] == json.loads((sets["one"] / "top_up.json").read_text())["rows"]
    for r in pair["rows"]:
        rounds = top_up.get((r["variant"], r["shape_key"]), 2)
        assert r["repeats_a"] == r["repeats_b"] == rounds and r["look"] == (2 if rounds > 2 else 1)
        assert all((f / "captures" / r["shape_key"] / "naive" / f"r{rounds}" / "trace.json.gz").exists() for f in sets.values())
    assert any(d["key"] == "torch_threads" for d in pair["env_diff"])
    # the recipe diff is made in an A/B run (its result sets' tables are planned before they exist); one torch
    # build on both sides: the same ops in the same order, every step of A's recipe.csv kept
    forward = {r["variant"]: r for r in pair["recipes"] if r["pass"] == "forward"}
    assert set(forward) == {"naive"}
    for variant, diff in forward.items():
        table = pd.read_csv(next(sets["one"].glob(f"tables/*/{variant}/r1/recipe.csv")))
        steps = table.groupby("forward").size()
        assert diff["same"] and diff["counts"]["kept"] == steps.iloc[0] > 0, variant


VENV_B = ROOT / ".venv-b" / "bin" / "python"


@pytest.mark.workflow
@pytest.mark.skipif(not VENV_B.exists(), reason=".venv-b not here (docs/running.md's A/B after an upgrade makes it: torch 2.14.1 from PyTorch's CPU index, then pip install -e .)")
def test_ab_run_of_two_torch_builds(tmp_path):
    envs = f"  a: {{python: {sys.executable}}}\n  b: {{python: {VENV_B}}}"
    _, sets, _ = _ab_run(tmp_path, envs, ["a", "b"])
    torch = {n: json.loads((f / "env.json").read_text())["torch"] for n, f in sets.items()}
    import subprocess

    want_b = subprocess.run([str(VENV_B), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                            text=True, check=True).stdout.strip()
    import torch as torch_a

    assert torch == {"a": torch_a.__version__, "b": want_b} and torch["a"] != torch["b"]


@pytest.mark.parametrize("environments,expected", [
    ({"a": {"python": "x"}, 1: {"python": "x"}}, "the name 1 is a number"),
    ({"a": {"python": "x", "env": {1: "x"}}, "b": {"python": "x"}}, "environments.a.env: the variable name 1 is a number"),
])
def test_numbers_as_environment_or_variable_names_are_config_problems(environments, expected):
    """YAML reads an unquoted 1 as a number, which the schema's name patterns never see: named at parse time, not a
    TypeError after the captures."""
    problems = config_problems({"shapes": {"cpu": {"batch": [1], "heads": [1], "seq_len": [8], "head_dim": [8],
                                                   "dtype": ["fp32"], "causal": [True]}, "cuda": []},
                                "environments": environments})
    assert any(expected in p for p in problems), problems
