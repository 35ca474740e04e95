"""Result sets travel: a result set captured elsewhere (the committed H200 example, on a machine
without its GPU) is re-rendered, never recaptured or relabelled, by any target."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import snakemake_cli
from conftest import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
RUN = "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56"
EXAMPLE = ROOT / "examples" / RUN
SHAPE, VARIANT = "b8_h16_s1024_d64_bf16_causal", "naive"

pytestmark = pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed H200 example")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A fresh checkout's workflow files (newer than the example's traces, as after a clone) with
    the example copied into results/."""
    dest = tmp_path_factory.mktemp("travel") / "repo"
    copy_workflow(dest)
    shutil.copytree(EXAMPLE, dest / "results" / RUN, ignore=shutil.ignore_patterns("report.*"))
    for path in dest.rglob("*"):  # the checkout is newer than any result
        if "results" not in path.parts and path.is_file():
            path.touch()
    return dest


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return snakemake_cli.run([*args, "--cores", "1", "--directory", workdir, "--snakefile", workdir / "Snakefile",
                              "--config", "device=cpu"], timeout=600)


def test_report_of_a_result_set_captured_elsewhere_plans_no_capture(workspace):
    proc = snakemake(workspace, "-n", f"results/{RUN}/report.html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = snakemake_cli.job_stats(proc.stdout)
    # the derived tables, re-made here: 63 captures x 3 repeats, and the control's 3 (first shape, every repeat)
    assert planned.get("extract") == 63 * 3 + 3 and planned.get("report_html") == 1
    assert not {"capture", "environment", "calibrate"} & set(planned), planned


def test_a_missing_capture_of_a_result_set_captured_elsewhere_fails_with_the_render_command(workspace):
    status = workspace / "results" / RUN / "captures" / SHAPE / VARIANT / "r1" / "status.json"
    recorded = status.read_text()
    status.unlink()
    try:
        proc = snakemake(workspace, str(status.relative_to(workspace)))
        assert proc.returncode != 0
        out = proc.stdout + proc.stderr
        assert "capture_elsewhere" in out  # the capture rule itself does not match another result set
        for text in (f"results/{RUN} is not this configuration's result set", "--profile workflow/profiles/render"):
            assert text in out, out[-3000:]
        assert not status.exists()  # nothing recorded with this machine's environment
        assert (status.parent / "trace.json.gz").stat().st_size > 1000  # and the primary data is untouched
        env = json.loads((workspace / "results" / RUN / "env.json").read_text())
        assert env["gpu_name"] == "NVIDIA H200"  # and nothing relabelled
    finally:
        status.write_text(recorded)


SMALL = ROOT / "examples" / "h200_unsupported_backends"  # 9 captures on the H200, three shapes


@pytest.mark.skipif(not SMALL.exists(), reason="no committed small H200 example")
@pytest.mark.slow
def test_render_profile_remakes_every_kind_of_derived_output(tmp_path):
    """From a copied result set, delete a per-shape plot, a timeline, a scaling plot, the summary,
    the kernel table, the findings and the report (HTML and PDF): the render profile re-makes each of
    them from the traces, with the grid of the result set's env.json (this checkout's config names
    another result set and another grid), and never a capture, the environment or the calibration."""
    repo = tmp_path / "repo"
    copy_workflow(repo)
    run = repo / "results" / "small"
    shutil.copytree(SMALL, run)
    shape = sorted(p.name for p in (run / "plots").iterdir() if p.is_dir())[0]
    deleted = [run / "plots" / shape / "device_time.png", run / "plots" / shape / "timeline.png",
               run / "plots" / "scaling_time.png", run / "summary.csv", run / "kernels.csv", run / "findings.json",
               run / "report.html", run / "report.pdf"]
    for path in deleted:
        path.unlink()
    primary = {p: p.stat().st_mtime_ns for p in run.glob("captures/*/*/*")} | {run / "env.json": (run / "env.json").stat().st_mtime_ns}
    proc = snakemake_cli.run(["--profile", "workflow/profiles/render", "results/small/report.pdf"], cwd=repo, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path in deleted:
        assert path.exists() and path.stat().st_size > 0, path
    assert {p: p.stat().st_mtime_ns for p in primary} == primary  # traces, statuses and env.json untouched
    assert "rule capture" not in proc.stderr and "rule environment" not in proc.stderr
