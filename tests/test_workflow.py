"""The whole workflow on a tiny CPU config, in a temporary directory, through the snakemake CLI.

Also proves what reruns after a change (dry-run job lists, changing file *content*, since
Snakemake compares checksums of small files) and that captures never overlap."""
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

import snakemake_cli
from conftest import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
#: The tiny config (tests/configs/tiny.yaml): two CPU shapes, the default config's variants and a user variant,
#: two repeats.
TINY = (ROOT / "tests" / "configs" / "tiny.yaml").read_text()
BUILT_IN = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["variants"]
VARIANTS = yaml.safe_load(TINY)["variants"]
REPEATS = yaml.safe_load(TINY)["repeats"]
#: --config for the runs on the CUDA grid: the study's variants (a user variant's capture process is never
#: reused, so it would restart the capture worker: a second torch start that these tests do not need).
ONLY_BUILT_IN = f"variants=[{','.join(BUILT_IN)}]"
ONE_REPEAT = "repeats=1"  # the CUDA-grid tests check the capture service, not the rounds
SHAPES = ["b1_h2_s64_d32_fp32_causal", "b1_h2_s128_d32_fp32_causal"]
#: The profiler's control (attnprof.analysis.control): captured at the grid's first shape, every repeat, beside the
#: variants: the capture and extract job counts of a whole recapture grow by these.
CONTROL_CAPTURES = REPEATS
USER_MODULE = Path(__file__).resolve().parent / "user_variants" / "attnprof_test_variant.py"

pytestmark = pytest.mark.workflow


def test_the_tiny_config_lists_the_default_variants_and_the_users():
    assert VARIANTS == [*BUILT_IN, "my_attn"] and REPEATS == 2


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the copy of the workflow in ``workdir`` (its own Snakefile, templates and config)."""
    config = [] if "--configfile" in args else ["--configfile", str(workdir / "tiny.yaml")]
    cmd = [*args, "--snakefile", str(workdir / "Snakefile"), "--directory", str(workdir), *config]
    proc = snakemake_cli.run(cmd, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def planned_jobs(workdir: Path, change: str = "") -> dict[str, int]:
    """rule -> job count of a dry run (the 'Job stats' table), with ``change`` (YAML) given
    as an extra config file on top of the tiny config."""
    extra = []
    if change:
        (workdir / "change.yaml").write_text(change)
        extra = ["--configfile", str(workdir / "tiny.yaml"), str(workdir / "change.yaml")]
    return snakemake_cli.job_stats(snakemake(workdir, "report", "-n", "--cores", "2", *extra).stdout)  # run_dir's cores


def copy_repo(dest: Path) -> Path:
    """The workflow's files copied to ``dest`` (so that a test can change their content), with the
    tiny config and the user variant's module."""
    copy_workflow(dest)
    (dest / "tiny.yaml").write_text(TINY)
    shutil.copy(USER_MODULE, dest / USER_MODULE.name)
    return dest


# run_dir (tests/conftest.py): one tiny workflow run (TINY, REPEATS) shared by this module and test_snakemake_report


def edited(path: Path, old: str, new: str):
    """Context manager: ``path`` with ``old`` replaced by ``new`` (content, not mtime), restored after."""
    import contextlib

    @contextlib.contextmanager
    def _cm():
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
        try:
            yield
        finally:
            path.write_text(text)

    return _cm()


def test_report_and_tables_are_built(run_dir):
    out = run_dir / "results" / "tiny"
    for name in ("report.html", "report.pdf", "summary.csv", "kernels.csv", "env.json", "findings.json"):
        assert (out / name).stat().st_size > 0, name
    summary = pd.read_csv(out / "summary.csv")
    n = len(VARIANTS)
    assert list(summary["variant"]) == VARIANTS * 2 and list(summary["shape_key"]) == [SHAPES[0]] * n + [SHAPES[1]] * n
    status = dict(zip(summary["variant"], summary["status"]))
    assert status["sdpa_efficient"] == status["sdpa_cudnn"] == "unsupported"  # CUDA-only backends
    ok = summary[summary["status"] == "ok"]
    assert len(ok) == 2 * (n - 2) and (ok["cpu_ms_per_forward"] > 0).all() and (ok["forwards_profiled"] == 2).all()
    assert ok["rel_error_ok"].all()
    env = json.loads((out / "env.json").read_text())
    assert env["torch"] and env["python"] and env["snakemake"] and env["config"]["run"] == "tiny"
    html = (out / "report.html").read_text()
    assert "unsupported" in html and "sdp_utils_cpp" in html and "data:image/png;base64," in html
    assert (out / "report.pdf").read_bytes()[:5] == b"%PDF-"



def test_the_captures_that_end_their_process_run_last_in_their_round(run_dir):
    """A user variant's capture ends its capture process (attnprof.model.variants.ends_capture_process). Rule
    capture's priority puts my_attn's two captures (one per shape) last in each round, so a round takes two
    processes: the built-ins, the control and my_attn at one shape in the first, my_attn at the other in a fresh
    one. Each process start costs a torch import (seconds; on a GPU also a CUDA context)."""
    records = [json.loads(p.read_text()) for p in (run_dir / "results" / "tiny" / "captures").glob("*/*/r*/status.json")]
    assert len(records) == REPEATS * (2 * len(VARIANTS) + 1)  # every (shape, variant) and the control, each round
    for repeat in range(1, REPEATS + 1):
        served = sorted((r for r in records if r["repeat"] == repeat), key=lambda r: r["started_at"])
        assert [r["variant"] for r in served[-2:]] == ["my_attn", "my_attn"], [r["variant"] for r in served]
        pids = [r["worker"]["pid"] for r in served]
        assert len(set(pids[:-1])) == 1 and pids[-1] != pids[0], pids

def test_a_cpu_run_starts_no_capture_worker_with_the_run(run_dir):
    """On a CPU run nothing starts beside the captures' host timings: the supervisor is started by a job that asks it
    for work (its log says so: attnprof.runtime.worker.connect_or_start), once, not with the run."""
    logs = run_dir / "results" / "tiny" / "logs"
    started = [p for p in logs.rglob("*.log") if p.name != "capture_worker.log" and "starting capture worker" in p.read_text()]
    assert len(started) == 1, started
    assert (logs / "capture_worker.log").read_text().count(" listening (pid ") == 1


def test_the_user_variant_goes_the_whole_path(run_dir):
    """Config to report: the user variant (config custom_variants) gets its capture, checked against
    float64, its tables, summary rows and report rows, at both shapes."""
    out = run_dir / "results" / "tiny"
    summary = pd.read_csv(out / "summary.csv")
    mine = summary[summary["variant"] == "my_attn"]
    assert list(mine["shape_key"]) == SHAPES and (mine["status"] == "ok").all() and mine["rel_error_ok"].all()
    assert (mine["forwards_complete"] == 2).all()  # the tiny config's active steps
    for shape in SHAPES:
        ops = pd.read_csv(out / "tables" / shape / "my_attn" / "r1" / "ops.csv")
        assert "aten::softmax" in set(ops["op"])  # the profiled forward is the user's code (SDPA's math backend is another op)
        status = json.loads((out / "captures" / shape / "my_attn" / "r2" / "status.json").read_text())
        assert status["custom"]["function"] == "attnprof_test_variant:forward"
    assert "hand-written" in (out / "report.html").read_text()  # its description, from the config


def test_the_sweep_over_two_shapes_runs_end_to_end(run_dir):
    """Both shapes reach every stage: their summary rows agree with their own per-capture forward
    tables, each has its per-shape plots, timeline, findings and report section, and the run-wide
    scaling plots are drawn over both."""
    out = run_dir / "results" / "tiny"
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(set(zip(summary["shape_key"], summary["seq_len"]))) == [(SHAPES[1], 128), (SHAPES[0], 64)]
    for row in summary[summary["status"] == "ok"].itertuples():
        medians, tables = [], []
        for k in range(1, REPEATS + 1):
            fw = pd.read_csv(out / "tables" / row.shape_key / row.variant / f"r{k}" / "forwards.csv")
            assert len(fw) == row.forwards_profiled == 2 and fw["complete"].all(), (row.shape_key, row.variant, k)
            medians.append(fw["cpu_us"].median() / 1e3)
            tables.append(fw)
        # summary: the median of the repeats' medians (two repeats: their mean) of the range's host time, us -> ms; a
        # repeat whose host time its timed calls contradict by 10x (a job beside it) is named and left out while
        # another remains (tables.HOST_CONTRADICTION)
        timed = row.timed_ms_median
        agreeing = [m for m in medians if max(m / timed, timed / m) < 10]
        counted = agreeing or medians
        assert row.cpu_ms_per_forward == pytest.approx(sum(counted) / len(counted), rel=1e-9), (row.shape_key, row.variant)
        # every contradicted capture is named, whether it was left out or (none agreeing) counted with its note
        assert (len(agreeing) < len(medians)) == ("timed calls" in str(row.repeats_note)), row.repeats_note
        assert (not agreeing) == ("no other capture to count" in str(row.repeats_note)), row.repeats_note
        assert row.repeats == row.repeats_ok == REPEATS
        # the host range (lowest-highest capture) holds the stated value; the within-capture spread is the middle
        # repeat's (of two: the faster)
        if len(counted) > 1:
            assert row.cpu_ms_run_lo <= row.cpu_ms_per_forward <= row.cpu_ms_run_hi
        middle = tables[medians.index(min(counted))]
        assert row.cpu_ms_min == pytest.approx(middle["cpu_us"].min() / 1e3, rel=1e-9)
        assert row.cpu_ms_max == pytest.approx(middle["cpu_us"].max() / 1e3, rel=1e-9)
    # repeats.csv: one row per capture, each repeat's own median
    repeats = pd.read_csv(out / "repeats.csv")
    assert len(repeats) == len(summary) * REPEATS and sorted(set(repeats["repeat"])) == list(range(1, REPEATS + 1))
    # the two shapes are two measurements, not one copied: their forwards' host times differ
    ok = summary[summary["status"] == "ok"].set_index(["variant", "shape_key"])["cpu_ms_per_forward"]
    assert any(ok[(v, SHAPES[0])] != ok[(v, SHAPES[1])] for v in ("naive", "naive_inplace", "sdpa_math", "sdpa_flash", "sdpa_auto", "my_attn"))
    for shape in SHAPES:
        for name in ("device_time", "kernels_per_forward", "kernel_split", "cpu_vs_device", "timeline"):
            assert (out / "plots" / shape / f"{name}.png").read_bytes()[:4] == b"\x89PNG", (shape, name)
    scaling = [out / "plots" / f"{name}.png" for name in ("scaling_time", "scaling_tflops", "scaling_memory", "roofline")]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in scaling)
    assert (out / "logs" / "plots" / "scaling.log").read_text().split() == [str(p.relative_to(run_dir)) for p in scaling]
    findings = json.loads((out / "findings.json").read_text())
    assert [s["shape_key"] for s in findings["shapes"]] == SHAPES
    html = (out / "report.html").read_text()
    assert all(f'id="shape-{shape}"' in html for shape in SHAPES)


def test_the_control_is_captured_self_checked_and_kept_out_of_the_variants(run_dir):
    """The profiler's control (issue 20): captured at the first shape, every repeat, through the capture path (its
    correctness phase skipped with the reason); its counts in control.csv are those of its traces, counted here by
    hand (aten ops inside each forward's range), and the known CPU counts; it is in no table, finding or ranking
    of the attention variants; the report's methods state the self-check."""
    from attnprof.analysis.trace import load_trace
    from attnprof.model.variants import CONTROL_COUNTS

    out = run_dir / "results" / "tiny"
    control = pd.read_csv(out / "control.csv")
    assert sorted(control["repeat"]) == list(range(1, REPEATS + 1)) and set(control["shape_key"]) == {SHAPES[0]}
    assert (control["status"] == "ok").all() and control["kernels"].isna().all()  # no GPU counts on a CPU run
    for row in control.to_dict("records"):
        cap = out / "captures" / SHAPES[0] / "control" / f"r{row['repeat']}"
        status = json.loads((cap / "status.json").read_text())
        assert status["variant"] == "control" and "passes" not in status  # no backward
        if row["repeat"] == 1:
            assert status["phases"]["correctness"] == {"status": "skipped", "seconds": 0.0,
                                                       "reason": "control workload: no attention output to check"}
            assert status["phases"]["timing"]["status"] == "ok" and status["phases"]["input_types"]["status"] == "ok"
        events = load_trace(cap / "trace.json.gz")["traceEvents"]
        ranges = [e for e in events if e.get("name") == "attn_fwd" and e.get("ph") == "X"]
        assert len(ranges) == 2  # the tiny config's active steps
        per_forward = {op: {sum(1 for e in events if e.get("cat") == "cpu_op" and e["name"] == op
                                and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]) for r in ranges}
                       for op in CONTROL_COUNTS["cpu"]}
        assert per_forward == {op: {1} for op in CONTROL_COUNTS["cpu"]}, (row["repeat"], per_forward)
        assert {op: row[op] for op in per_forward} == CONTROL_COUNTS["cpu"]  # control.csv: the same counts
    # absent from every table, finding and ranking of the attention variants
    for name in ("summary.csv", "repeats.csv", "kernels.csv"):
        assert "control" not in set(pd.read_csv(out / name)["variant"]), name
    findings = json.loads((out / "findings.json").read_text())
    assert not [f for s in findings["shapes"] for f in s["findings"] if "control" in f.get("variants", [])]
    html = (out / "report.html").read_text()
    assert f'id="v-{SHAPES[0]}-control"' not in html
    assert ("Profiler self-check: the control workload (1 GEMM, 1 elementwise, 1 copy per step) counted 1 aten::mm, "
            f"1 aten::add, 1 aten::copy_ per forward at {SHAPES[0]}, {REPEATS} repeats, as constructed.") in html
    assert "are suspect" not in html


def test_cpu_pdf_reads_as_a_document(run_dir):
    from test_pdf import pdf_problems

    out = run_dir / "results" / "tiny"
    dpi = json.loads((out / "env.json").read_text())["config"]["plots"]["dpi"]
    assert pdf_problems(out / "report.pdf", out / "report.html", dpi) == []


def test_nothing_reruns_when_nothing_changed(run_dir):
    assert planned_jobs(run_dir) == {}


def test_plot_setting_reruns_only_plots_and_report(run_dir):
    # env.json records the config used, so it is rewritten too, and summarize reads it (a declared input): summarize
    # and findings rerun on the same tables; no capture or extract job
    assert planned_jobs(run_dir, "plots: {dpi: 100}") == {
        "environment": 1, "summarize": 1, "findings": 1, "plots": 2, "timeline": 2, "scaling_plots": 1,
        "report_html": 1, "report_pdf": 1, "report": 1}


def test_profiler_schedule_reruns_every_capture(run_dir):
    jobs = planned_jobs(run_dir, "profiler: {range_name: attn_fwd, warmup_calls: 1, schedule: {wait: 1, warmup: 1, active: 3}}")
    # CONTROL_CAPTURES: the profiler's control, captured at the first shape every repeat, recaptured as the variants
    assert jobs["capture"] == jobs["extract"] == 2 * len(VARIANTS) * REPEATS + CONTROL_CAPTURES and jobs["report_pdf"] == 1


def test_the_worker_idle_timeout_changes_no_measurement(run_dir):
    """capture_worker_idle_s is a job resource, not a capture parameter: a new value recaptures nothing (only
    env.json, which records the config, and what reads it)."""
    jobs = planned_jobs(run_dir, "capture_worker_idle_s: 30")
    assert "capture" not in jobs and "extract" not in jobs and "calibrate" not in jobs, jobs


def test_template_change_reruns_only_the_report(run_dir):
    with edited(run_dir / "report" / "report.html.j2", "How these numbers were measured", "How we measured"):
        assert planned_jobs(run_dir) == {"report_html": 1, "report_pdf": 1, "report": 1}


def test_a_change_of_the_completeness_code_rejudges_every_capture(run_dir):
    """completeness.py decides a capture's own incomplete_trace status (the capture's self-check imports it): an
    edit reruns every capture, and extract and everything after (the triggers follow the imports,
    attnprof.runtime.imports)."""
    module = run_dir / "src" / "attnprof" / "analysis" / "completeness.py"
    with edited(module, "def incomplete_reason(", "def incomplete_reason(  # edited\n    "):
        jobs = planned_jobs(run_dir)
    n = 2 * len(VARIANTS) * REPEATS + CONTROL_CAPTURES  # the control's captures run the same capture code
    assert jobs["capture"] == jobs["extract"] == n and jobs["summarize"] == 1 and jobs["report_pdf"] == 1, jobs


def test_a_change_of_the_table_code_re_extracts_and_recaptures_nothing(run_dir):
    """tables.py (the tables, the combination of the repeats) is not code the capture runs: an edit reruns every
    extract and what follows, never a capture."""
    with edited(run_dir / "src" / "attnprof" / "analysis" / "tables.py", "def concat_tables(", "def concat_tables(  # edited\n    "):
        jobs = planned_jobs(run_dir)
    assert "capture" not in jobs and jobs["extract"] == 2 * len(VARIANTS) * REPEATS + CONTROL_CAPTURES, jobs


def test_findings_code_change_reruns_what_imports_it_and_not_extract(run_dir):
    """The findings package runs in the findings rule, and in the plots, timeline, scaling plots and report, whose
    scripts import it (plots.py reads its kernel-name decoding; importing one module of a package runs the
    package's __init__, which imports the rest): an edit reruns those, never a capture, extract or summary."""
    findings = run_dir / "src" / "attnprof" / "findings"
    shapes = len(list((run_dir / "results" / "tiny" / "captures").iterdir()))  # the tiny config's grid: one job per shape
    assert shapes == 2
    expected = {"findings": 1, "plots": shapes, "timeline": shapes, "scaling_plots": 1, "report_html": 1, "report_pdf": 1,
                "report": 1}
    for module, anchor in (("occupancy.py", "def theoretical_occupancy("), ("kernel_names.py", "def kernel_class(")):
        with edited(findings / module, anchor, anchor + "  # edited\n    "):
            assert planned_jobs(run_dir) == expected, module


def test_torch_version_change_reruns_every_capture(run_dir):
    """A pip upgrade is invisible to Snakemake's software-env trigger; the capture rule's
    torch_version param (read from the installed torch, here overridden) makes it visible."""
    common = run_dir / "workflow" / "rules" / "common.smk"
    with edited(common, "TORCH_BUILD = torch_build()", "TORCH_BUILD = dict(torch_build(), torch='9.9.9')"):
        jobs = planned_jobs(run_dir)
    assert jobs["capture"] == jobs["extract"] == 2 * len(VARIANTS) * REPEATS + CONTROL_CAPTURES  # the control's too


def test_one_variants_code_change_reruns_only_its_captures(run_dir):
    variants = run_dir / "src" / "attnprof" / "measure" / "forwards.py"
    with edited(variants, "return torch.softmax(scores, dim=-1) @ v", "return torch.softmax(scores, dim=-1).matmul(v)"):
        jobs = planned_jobs(run_dir)
    # naive and naive_inplace share that code (at both shapes); the five SDPA variants and the user's do not rerun
    # only their captures rerun (the per-variant fingerprint), and the extracts of those captures only: no other
    # stage imports the forward builders (attnprof.measure.forwards)
    assert jobs["capture"] == jobs["extract"] == 4 * REPEATS and jobs["summarize"] == 1


def test_another_cores_count_on_a_cpu_run_recaptures_rather_than_mixing_thread_counts(run_dir):
    """On a CPU run a capture takes every core as torch's threads: part of what it measures."""
    jobs = snakemake_cli.job_stats(snakemake(run_dir, "report", "-n", "--cores", "1").stdout)
    assert jobs["capture"] == 2 * len(VARIANTS) * REPEATS + CONTROL_CAPTURES and jobs["environment"] == 1  # and the control


def test_a_lost_capture_is_captured_again(run_dir):
    """A capture folder deleted after the report was made: Snakemake alone would say "Nothing to be
    done" (every reader of the lost files is up to date); the lost files are named, and the capture
    and the summary rerun."""
    folder = run_dir / "results" / "tiny" / "captures" / SHAPES[0] / "naive"
    kept = folder.parent / "naive.kept"
    folder.rename(kept)
    try:
        proc = snakemake(run_dir, "report", "-n", "--cores", "2")
    finally:
        kept.rename(folder)
    jobs = snakemake_cli.job_stats(proc.stdout)
    assert jobs["capture"] == jobs["extract"] == REPEATS and jobs["summarize"] == 1  # every repeat of it
    assert f"captures/{SHAPES[0]}/naive/r1/status.json" in proc.stderr and "are gone" in proc.stderr


#: Derived files of each kind, and the rule that makes each again.
LOST = {"summary.csv": "summarize", "findings.json": "findings", f"plots/{SHAPES[1]}/device_time.png": "plots",
        f"plots/{SHAPES[0]}/timeline.png": "timeline", f"tables/{SHAPES[1]}/sdpa_math/r2/forwards.csv": "extract"}


def test_lost_derived_files_are_made_again(run_dir):
    """Derived files of every kind deleted after the report was made: Snakemake alone says "Nothing to be done";
    each is named, and its rule runs again with everything after summarize (no capture). One dry run for all
    (each kind is its own file, so a kind that is missed shows as its rule missing from the plan)."""
    out = run_dir / "results" / "tiny"
    kept = {name: (out / name).read_bytes() for name in LOST}
    for name in LOST:
        (out / name).unlink()
    try:
        proc = snakemake(run_dir, "report", "-n", "--cores", "2")
    finally:
        for name, data in kept.items():
            (out / name).write_bytes(data)
    jobs = snakemake_cli.job_stats(proc.stdout)
    for name, rule in LOST.items():
        assert jobs.get(rule, 0) >= 1, (name, rule, jobs)
        assert name in proc.stderr, name
    assert jobs["summarize"] == 1 and jobs["report_html"] == 1 and "capture" not in jobs, jobs
    assert "are gone or were changed" in proc.stderr
    # restored by hand: nothing to do (a dry run leaves no trace of what it found)
    assert snakemake_cli.job_stats(snakemake(run_dir, "report", "-n", "--cores", "2").stdout) == {}


def test_a_hand_edited_summary_is_made_again_not_republished(run_dir):
    summary = run_dir / "results" / "tiny" / "summary.csv"
    kept = summary.read_text()
    lines = kept.splitlines()
    summary.write_text("\n".join([lines[0], lines[1].replace(",ok,", ",ok ,", 1), *lines[2:]]) + "\n")
    try:
        proc = snakemake(run_dir, "report", "-n", "--cores", "2")
    finally:
        summary.write_text(kept)
    jobs = snakemake_cli.job_stats(proc.stdout)
    assert jobs["summarize"] == 1 and jobs["report_html"] == 1 and "capture" not in jobs
    assert "summary.csv (changed after it was written)" in proc.stderr


def test_a_hand_edited_summary_of_a_result_set_copied_here_is_made_again(run_dir, tmp_path):
    """A result set that came from elsewhere has no Snakemake record (.snakemake/), so a changed parameter reruns
    nothing: the rebuild must come by modification time (common.smk current_set_checks), and happen once."""
    import os
    import time

    other = tmp_path / "repo"
    shutil.copytree(run_dir, other, ignore=shutil.ignore_patterns(".snakemake"))
    # as a copy arrives: its files no older than the code (other tests here rewrote code files with the same content,
    # which Snakemake's records tell apart and modification times, all a copy has, do not)
    now = time.time()
    for path in (other / "results").rglob("*"):
        os.utime(path, (now, now))
    summary = other / "results" / "tiny" / "summary.csv"
    lines = summary.read_text().splitlines()
    summary.write_text("\n".join([lines[0], lines[1].replace(",ok,", ",ok ,", 1), *lines[2:]]) + "\n")
    target = "results/tiny/summary.csv"
    # without a record, nothing reruns by itself (and nothing is written while Snakemake plans): the run ends
    # naming the file and the command that makes it again
    refused = snakemake(other, target, "--cores", "1", check=False)
    assert refused.returncode != 0 and "summary.csv (changed after it was written)" in refused.stderr
    assert "--forcerun summarize" in refused.stderr and "Traceback" not in refused.stderr
    assert summary.read_text().splitlines() != lines  # nothing made yet
    snakemake(other, target, "--cores", "1", "--forcerun", "summarize")
    assert summary.read_text().splitlines() == lines  # made again from the captures, the edit gone
    assert snakemake_cli.job_stats(snakemake(other, target, "-n", "--cores", "1").stdout) == {}


def test_a_user_modules_edit_reruns_only_its_variants_captures(run_dir):
    """The user variant's fingerprint covers its module's source (next to the Snakefile)."""
    with edited(run_dir / USER_MODULE.name, "def forward(", "# edited\ndef forward("):
        jobs = planned_jobs(run_dir)
    assert jobs["capture"] == jobs["extract"] == len(SHAPES) * REPEATS and jobs["summarize"] == 1


def test_compare_target_builds_a_comparison_of_two_result_sets(run_dir):
    """A second result set (a copy of 'tiny' whose env.json says another torch) compared with 'tiny'."""
    results = run_dir / "results"
    shutil.copytree(results / "tiny", results / "tiny_b")
    env = json.loads((results / "tiny_b" / "env.json").read_text())
    env["torch"] = "9.9.9"
    (results / "tiny_b" / "env.json").write_text(json.dumps(env))
    (run_dir / "cmp.yaml").write_text("compare: {runs: [tiny, tiny_b], name: t, noise_floor: 0.05}\n")
    snakemake(run_dir, "compare", "--cores", "1", "--allowed-rules", "compare_json", "compare_html", "compare_pdf", "compare",
              "--configfile", str(run_dir / "tiny.yaml"), str(run_dir / "cmp.yaml"))
    doc = json.loads((results / "compare" / "t" / "compare.json").read_text())
    pair = doc["pairs"][0]
    assert {"key": "torch", "a": env_torch(results / "tiny"), "b": "9.9.9"} in pair["env_diff"]
    assert len(pair["rows"]) == 2 * len(VARIANTS) and all(not r["kernels_added"] and not r["ops_added"] for r in pair["rows"])
    assert (results / "compare" / "t" / "compare.pdf").read_bytes()[:5] == b"%PDF-"


def env_torch(run: Path) -> str:
    return json.loads((run / "env.json").read_text())["torch"]


def test_gpu_captures_never_overlap(tmp_path):
    """device=cuda on a machine without a GPU: every capture records 'unsupported' (after a full
    Python + torch start), and with --cores 8 their time intervals must still be disjoint.

    ``--until capture``: only the 8 capture jobs of the html target run (the 7 variants and the profiler's
    control; no extract, plot or report job, which prove nothing here); all 8 are ready at once with 8 cores free and, in the
    default capture_mode worker, take no resource: only the capture worker's one-at-a-time
    service can keep them apart (capture_mode process: the 'capture' resource, next test)."""
    work = copy_repo(tmp_path / "repo")
    snakemake(work, "html", "--until", "capture", "--cores", "8", "--config", "device=cuda", "run=gpu", ONLY_BUILT_IN, ONE_REPEAT)
    spans = []
    for status in (work / "results" / "gpu" / "captures").rglob("status.json"):
        rec = json.loads(status.read_text())
        assert rec["status"] in ("unsupported", "ok"), rec
        # the capture process's own span of work (status.json's started_at/finished_at also
        # hold the client's side: its wait in the worker's queue, writing the status)
        spans.append((rec["capture_started_at"], rec["capture_started_at"] + rec["capture_wall_s"]))
    spans.sort()
    assert len(spans) == len(BUILT_IN) + 1  # the 7 variants and the profiler's control (its first shape, one repeat)
    # started_at and wall_s are each rounded to the millisecond: an end can read up to 1.5 ms past the next start
    # without any overlap (a run once failed on 1796131240.3000002 > ...0.3); an overlap is a whole capture long
    assert all(prev[1] <= nxt[0] + 0.002 for prev, nxt in zip(spans, spans[1:])), spans


def test_a_gpu_run_starts_its_capture_worker_with_the_run_and_its_clients_hold_no_core(tmp_path):
    """device=cuda (no GPU here: the captures record 'unsupported'), --cores 1. The supervisor and its first capture
    process start while Snakemake builds the DAG (attnprof.runtime.jobs.start_capture_workers), for the key the
    capture jobs then ask for: one supervisor served the run, and the process of the first capture began before any
    capture job had connected. The capture clients hold no core: at --cores 1 several of them waited in the worker's
    queue at once, never more than the 5 'capture_clients' slots. A dry run starts nothing."""
    work = copy_repo(tmp_path / "repo")
    args = ["html", "--until", "capture", "--cores", "1", "--config", "device=cuda", "run=gpu", ONLY_BUILT_IN, ONE_REPEAT]
    snakemake(work, "-n", *args)
    assert not (work / "results").exists()  # not even the worker's log
    snakemake(work, *args)
    log = (work / "results" / "gpu" / "logs" / "capture_worker.log").read_text()
    assert log.count(" listening (pid ") == 1, log
    records = [json.loads(p.read_text()) for p in (work / "results" / "gpu" / "captures").rglob("status.json")]
    assert len(records) == len(BUILT_IN) + 1
    # when each client connected (its record's started_at is when the supervisor took it, after its wait in the queue)
    asked = sorted((r["started_at"] - r["worker"]["queued_s"], r["finished_at"]) for r in records)
    first = min(records, key=lambda r: r["capture_started_at"])
    assert first["worker"]["captures_before"] == 0 and first["worker"]["started_at"] < asked[0][0], (first["worker"], asked[0])
    waiting = [sum(a <= t < b for a, b in asked) for t, _ in asked]  # clients connected at each client's arrival
    assert 2 <= max(waiting) <= 5, asked


#: Two stand-in GPUs (attnprof.measure.gpus.STANDIN_ENV: nvidia-smi's answer) for the tests of a run on several GPUs.
TWO_GPUS = ("0, GPU-5a5a0000-0000-0000-0000-000000000000, NVIDIA H200, 700.00, 1980, 143771\n"
            "1, GPU-5b5b0000-0000-0000-0000-000000000000, NVIDIA H200, 700.00, 1980, 143771\n")


def test_captures_on_two_gpus_run_one_per_gpu_and_record_it(tmp_path, monkeypatch):
    """device=cuda with two stand-in GPUs, --cores 8: Snakemake starts two capture jobs at a time (the 'gpu' resource
    is the run's two GPUs), each job holds one GPU's claim and pins its capture to it (CUDA_VISIBLE_DEVICES: a capture
    worker per GPU), and every record names its GPU. Both GPUs serve; on each, the captures never overlap."""
    monkeypatch.setenv("ATTNPROF_NVIDIA_SMI", TWO_GPUS)
    work = copy_repo(tmp_path / "repo")
    snakemake(work, "html", "--until", "capture", "--cores", "8", "--config", "device=cuda", "run=gpu",
              "variants=[naive,sdpa_math,sdpa_flash]", ONE_REPEAT)
    records = [json.loads(p.read_text()) for p in (work / "results" / "gpu" / "captures").rglob("status.json")]
    assert len(records) == 4  # three variants and the control
    uuids = {"GPU-5a5a0000-0000-0000-0000-000000000000", "GPU-5b5b0000-0000-0000-0000-000000000000"}
    assert {r["gpu"]["uuid"] for r in records} == uuids and all(r["gpu"]["name"] == "NVIDIA H200" for r in records)
    # each capture process saw only the GPU its record names (pinned by UUID)
    assert all(r["cuda_visible_devices"] == r["gpu"]["uuid"] for r in records), [r["cuda_visible_devices"] for r in records]
    for uuid in uuids:
        mine = sorted((r["capture_started_at"], r["capture_started_at"] + r["capture_wall_s"], r["worker"]["pid"])
                      for r in records if r["gpu"]["uuid"] == uuid)
        assert all(prev[1] <= nxt[0] + 0.002 for prev, nxt in zip(mine, mine[1:])), mine
    pids = {r["gpu"]["uuid"]: r["worker"]["pid"] for r in records}
    assert len(set(pids.values())) == 2  # a capture process per GPU


def test_the_run_is_named_after_the_gpu_the_config_chooses_not_the_first_visible(tmp_path, monkeypatch):
    """A node of a T4 (index 0) and an H100 (index 1), gpus: [1]: the auto run id names the H100 its captures run on,
    and its one GPU takes no claim (capture jobs take no GPU unit in worker mode)."""
    monkeypatch.setenv("ATTNPROF_NVIDIA_SMI", "0, GPU-7474, Tesla T4, 70, 1590, 15360\n"
                                              "1, GPU-1001, NVIDIA H100 80GB HBM3, 700, 1980, 81559\n")
    work = copy_repo(tmp_path / "repo")
    proc = snakemake(work, "html", "-n", "--cores", "4", "--config", "device=cuda", "run=auto", "gpus=[1]", ONLY_BUILT_IN,
                     ONE_REPEAT)
    out = proc.stdout + proc.stderr
    assert "results/nvidia-h100-80gb-hbm3_torch" in out and "tesla-t4" not in out
    blocks = [b for b in out.split("rule ")[1:] if b.startswith("capture:")]
    assert blocks and all("gpu_choice=GPU-1001" in b and "gpu=0" in b for b in blocks), blocks[:1]
    # both GPUs (the default, gpus: all): two models in one result set, refused before anything runs
    refused = snakemake(work, "html", "-n", "--cores", "4", "--config", "device=cuda", "run=auto", check=False)
    assert refused.returncode != 0 and "the chosen GPUs are of 2 models (Tesla T4: GPU-7474; NVIDIA H100" in refused.stdout + refused.stderr


def test_process_mode_captures_take_the_capture_resource(tmp_path):
    """capture_mode process: each capture is its own process, so the global 'capture' and 'gpu'
    resources (one unit each) keep them apart; the dry run shows the jobs asking for them."""
    work = copy_repo(tmp_path / "repo")
    proc = snakemake(work, "html", "-n", "--cores", "8", "--config", "device=cuda", "run=gpu", "capture_mode=process", ONLY_BUILT_IN, ONE_REPEAT)
    out = proc.stdout + proc.stderr
    blocks = [b for b in out.split("rule ")[1:] if b.startswith("capture:")]
    # the 7 variants and the profiler's control, which takes the device like any capture
    assert len(blocks) == len(BUILT_IN) + 1 and all("capture=1" in b and "gpu=1" in b for b in blocks), blocks[:1]


# --- copied, edited and half-deleted result sets (issue 33, kinds 4, 5 and 11; issue 35, item 2) --------------------

def _as_a_copy_arrives(root: Path) -> None:
    """Every file under ``root`` as fresh as a copy makes it (a copy has no Snakemake record of its own either)."""
    import os
    import time

    now = time.time()
    for path in root.rglob("*"):
        os.utime(path, (now, now))


def _copied_set(run_dir: Path, name: str) -> Path:
    """results/tiny copied as results/<name>: a result set from elsewhere for the tiny config (whose run is tiny)."""
    dest = run_dir / "results" / name
    shutil.copytree(run_dir / "results" / "tiny", dest)
    _as_a_copy_arrives(dest)
    return dest


def _render(run_dir: Path, target: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return snakemake(run_dir, "--profile", str(run_dir / "workflow" / "profiles" / "render"), target, *args, check=check)


def test_re_rendering_a_copied_result_set_remakes_its_edited_derived_files(run_dir):
    """Kind 4: a copied result set re-rendered with an edited summary.csv (the issue's input) and a findings.json
    cut short (ours): both are found against their SHA-256 sidecars and never republished; the run ends with the
    command that makes them again from the tables (a copy has no Snakemake record to rerun by), which does; a
    second run has nothing to do."""
    copied = _copied_set(run_dir, "copied_edit")
    try:
        summary, findings = copied / "summary.csv", copied / "findings.json"
        lines = summary.read_text().splitlines()
        summary.write_text("\n".join([lines[0], lines[1].replace(",ok,", ",ok ,", 1), *lines[2:]]) + "\n")
        whole = json.loads(findings.read_text())
        findings.write_text(findings.read_text()[:200])
        refused = _render(run_dir, "results/copied_edit/report.html", check=False)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert "summary.csv (changed after it was written)" in refused.stderr
        assert "findings.json (changed after it was written)" in refused.stderr
        assert "--forcerun summarize" in refused.stderr and summary.read_text().splitlines() != lines  # not republished
        _render(run_dir, "results/copied_edit/report.html", "--forcerun", "summarize")
        assert summary.read_text().splitlines() == lines  # made again: the edit is gone
        assert {**json.loads(findings.read_text()), "run": whole["run"]} == whole  # the same but for its result set's name
        assert snakemake_cli.job_stats(_render(run_dir, "results/copied_edit/report.html", "-n").stdout) == {}
    finally:
        shutil.rmtree(copied)


def test_an_edited_per_capture_table_of_a_copied_set_is_refused_with_the_fix(run_dir):
    """Kind 4, ours: a per-capture table edited in a copied result set is found against its sidecar and refused,
    naming the file and the command that makes it again (a deleted table is made again from its trace)."""
    copied = _copied_set(run_dir, "copied_table")
    try:
        table = copied / "tables" / SHAPES[0] / "naive" / "r2" / "forwards.csv"
        table.write_text(table.read_text().replace(",", ";", 3))
        proc = _render(run_dir, "results/copied_table/report.html", "-n", check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert f"rm results/copied_table/tables/{SHAPES[0]}/naive/r2/forwards.csv and run again" in proc.stderr
    finally:
        shutil.rmtree(copied)


def test_deleted_derived_files_of_repeat_2_are_made_again_once(run_dir):
    """Kind 5: recipe.csv and launches.csv of a repeat-2 capture deleted (the issue's), and recipe_backward.csv of
    another variant's repeat 2 at the other shape (ours): announced, made again by their extracts, and a second
    run has nothing to do (in place: a workspace holds Snakemake's records of its own result set)."""
    work = run_dir
    tables = work / "results" / "tiny" / "tables"
    gone = [tables / SHAPES[0] / "naive" / "r2" / "recipe.csv", tables / SHAPES[0] / "naive" / "r2" / "launches.csv",
            tables / SHAPES[1] / "sdpa_math" / "r2" / "recipe_backward.csv"]
    for path in gone:
        path.unlink()
    proc = snakemake(work, "report", "--cores", "2")  # run_dir's cores (another count recaptures)
    for path in gone:
        assert path.exists() and str(path.relative_to(work)) in proc.stderr, path
    assert "they are made again" in proc.stderr
    jobs = snakemake_cli.job_stats(proc.stdout) or snakemake_cli.job_stats(proc.stderr)
    assert jobs["extract"] == 2, jobs  # the two captures, once each
    again = snakemake(work, "report", "-n", "--cores", "2")
    assert snakemake_cli.job_stats(again.stdout) == {} and "made again" not in again.stderr


def test_a_copied_result_set_with_non_ascii_variant_names_plans(run_dir):
    """Kind 11: a copied result set whose env.json lists a variant with a non-ASCII name (naïve, the issue's kind)
    and one in Greek (σ_math, ours), holding its traces only (as an example does), re-rendered as the README
    says (--forcerun extract): every extract is planned."""
    copied = _copied_set(run_dir, "copied_names")
    try:
        renamed = {"naive": "naïve", "sdpa_math": "σ_math"}
        for shape in SHAPES:
            for old, new in renamed.items():
                (copied / "captures" / shape / old).rename(copied / "captures" / shape / new)
        env = json.loads((copied / "env.json").read_text())
        env["config"]["variants"] = [renamed.get(v, v) for v in env["config"]["variants"]]
        (copied / "env.json").write_text(json.dumps(env, ensure_ascii=False))
        for derived in ("tables", "plots", "logs"):
            shutil.rmtree(copied / derived)
        proc = _render(run_dir, "results/copied_names/report.html", "-n", "--forcerun", "extract", check=False)
        assert proc.returncode == 0 and "MissingInputException" not in proc.stderr, proc.stderr[-3000:]
        # every capture of the grid, and the control's: counted from the config, not from the plan
        assert snakemake_cli.job_stats(proc.stdout)["extract"] == len(SHAPES) * len(VARIANTS) * REPEATS + CONTROL_CAPTURES
        assert f"results/copied_names/tables/{SHAPES[1]}/σ_math/r2/forwards.csv" in proc.stdout
    finally:
        shutil.rmtree(copied)


@pytest.mark.parametrize("drop, said", [("config", "has no 'config'"), ("device", "has no 'device'"),
                                        ("cut", "cannot be read")])
def test_an_env_json_without_its_grid_is_named_with_the_fix(run_dir, drop, said):
    """Kind 11: a copied result set's env.json without ``config`` or ``device`` (the issue's), or cut short (ours):
    an error that names the file and the fix, never InputFunctionException or a KeyError."""
    copied = _copied_set(run_dir, f"copied_env_{drop}")
    try:
        env_path = copied / "env.json"
        env = json.loads(env_path.read_text())
        env_path.write_text(env_path.read_text()[:100] if drop == "cut" else json.dumps({k: v for k, v in env.items()
                                                                                       if k != drop}))
        proc = _render(run_dir, f"results/copied_env_{drop}/report.html", "-n", check=False)
        assert proc.returncode != 0 and f"results/copied_env_{drop}/env.json" in proc.stderr and said in proc.stderr
        assert "Copy results/" in proc.stderr or "copy the result set again" in proc.stderr
        for noise in ("InputFunctionException", "KeyError", "Traceback"):
            assert noise not in proc.stderr, proc.stderr[-2000:]
    finally:
        shutil.rmtree(copied)


@pytest.mark.parametrize("runs, absent", [("[tiny, never_rendered]", "never_rendered"),
                                          ("[not_here_either, tiny]", "not_here_either")])
def test_compare_with_a_result_set_not_re_rendered_says_re_render_it_first(run_dir, runs, absent):
    """Issue 35, item 2: compare of two result sets when one is not in results/ (the README's block re-rendered
    only the first): the error says re-render <set> first, with the command; no traceback."""
    (run_dir / "cmp_absent.yaml").write_text(f"compare: {{runs: {runs}, name: absent, noise_floor: 0.05}}\n")
    proc = snakemake(run_dir, "compare", "-n", "--cores", "1", "--allowed-rules", "compare_json", "compare_html",
                     "compare_pdf", "compare", "--configfile", str(run_dir / "tiny.yaml"),
                     str(run_dir / "cmp_absent.yaml"), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "InputFunctionException" not in proc.stderr
    assert (f"Re-render results/{absent} first: .venv/bin/snakemake --profile workflow/profiles/render "
            f"results/{absent}/report.pdf") in proc.stderr
