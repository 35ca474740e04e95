"""Snakemake's own report (``snakemake --report report.zip``; issue 21 item 6): the figures of a result set with their
captions, categories and labels, attnprof's report.html and report.pdf inside, and the workflow's description
(report/workflow.rst) on its front page.

Made on test_workflow's tiny CPU run (the session's ``run_dir``, tests/conftest.py: the report is about which files are
marked and how, not about the measurements), then on a copy of that result set under another name, reported as a
result set from elsewhere is: with the render profile and its report.pdf as the target."""
import html
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from jinja2 import Template

from attnprof.model.names import CPU_PLOTS, SCALING_PLOTS, SHAPE_PLOTS, TIMELINE
from test_workflow import SHAPES, snakemake

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ROOT / "report" / "captions"
#: What the rules mark (workflow/rules/plots.smk, report.smk), written out here by hand: per-shape figures,
#: run-wide figures, the report in two formats
PER_SHAPE = [*SHAPE_PLOTS, TIMELINE]
#: What a CPU run's report holds of them (issue 35 item 6), by hand from its figures: host time per forward (the
#: device-time plot's CPU form) and the timeline of top-level ops. Its kernel counts, kernel split and CPU-vs-device
#: bars have no device events to draw, and its run-wide figures (device time, TFLOP/s and memory against seq_len,
#: roofline) no device time: drawn empty, left out.
CPU_PER_SHAPE = ["device_time", TIMELINE]


def test_every_marked_file_has_its_caption():
    """Snakemake fails the whole report on one missing caption file: each plot name of attnprof.model.names and
    both formats of the report have theirs, and the workflow's description is where the Snakefile says."""
    for name in [*PER_SHAPE, *SCALING_PLOTS, "report_html", "report_pdf"]:
        assert (CAPTIONS / f"{name}.rst").read_text().strip(), name
    assert sorted(CPU_PLOTS) == sorted(CPU_PER_SHAPE)
    assert 'report: "report/workflow.rst"' in (ROOT / "Snakefile").read_text()
    assert (ROOT / "report" / "workflow.rst").read_text().startswith("attnprof")


def report_zip(workdir: Path, zip_path: Path, *args: str) -> dict:
    """``snakemake --report zip_path *args`` in ``workdir`` -> {members: names in the zip, results, categories,
    workflow_desc: the JSON the zip's report.html holds, data: member name -> bytes}."""
    # --cores: the Snakefile reads the run's cores at parse time (common.smk, CAPTURE_THREADS), a report included
    snakemake(workdir, "--report", str(zip_path), *args)  # no --cores: a report runs no job
    with zipfile.ZipFile(zip_path) as zf:
        members = zf.namelist()
        page = zf.read(f"{zip_path.stem}/report.html").decode()
        data = {name: zf.read(name) for name in members}

    def var(script_id, name):  # the report's data: <script id="results">var results = {...};</script>
        found = re.search(rf'<script id="{script_id}">\s*var {name} = (.*?);\s*</script>', page, flags=re.S)
        assert found, f"no <script id={script_id!r}> in the zip's report.html"
        return json.loads(found.group(1))

    return {"members": members, "results": var("results", "results"), "categories": var("categories", "categories"),
            "workflow_desc": var("workflow-desc", "workflow_desc"), "data": data}


def caption_text(name: str, **wildcards: str) -> str:
    """The caption's text as a reader sees it, made here without docutils: the .rst file's Jinja filled in with
    ``wildcards``, inline literals unmarked, whitespace collapsed."""
    text = Template((CAPTIONS / f"{name}.rst").read_text()).render(snakemake={"wildcards": wildcards})
    return " ".join(text.replace("``", "").split())


def shown_text(caption_html: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", caption_html)).split())


def check_report(rep: dict, workdir: Path, run: str, zip_stem: str):
    """The zip ``rep`` of CPU result set ``run`` in ``workdir``: both reports and every figure with data, each once,
    in its category and subcategory, with its labels and its caption, and the same bytes as the result set's file;
    no figure a CPU run draws empty."""
    out = f"results/{run}"
    expected = {
        "1. Report": {"Other": {f"{out}/report.html": {"result set": run, "format": "HTML"},
                                f"{out}/report.pdf": {"result set": run, "format": "PDF"}}},
        "3. Per shape": {shape: {f"{out}/plots/{shape}/{n}.png": {"result set": run, "shape": shape,
                                                                   "figure": n.replace("_", " ")}
                                 for n in CPU_PER_SHAPE} for shape in SHAPES},
    }
    for n in [*set(PER_SHAPE) - set(CPU_PER_SHAPE), *SCALING_PLOTS]:  # drawn (the report.html's files), not reported
        assert (workdir / out / "plots" / (f"{SHAPES[0]}/{n}.png" if n in PER_SHAPE else f"{n}.png")).exists(), n
    assert {c: {s: sorted(paths) for s, paths in subs.items()} for c, subs in rep["categories"].items()} == \
        {c: {s: sorted(files) for s, files in subs.items()} for c, subs in expected.items()}
    raw = [m for m in rep["members"] if m != f"{zip_stem}/report.html"]
    assert len(raw) == len(rep["results"]) == 2 + len(CPU_PER_SHAPE) * len(SHAPES)
    for subs in expected.values():
        for files in subs.values():
            for path, labels in files.items():
                res = rep["results"][path]
                assert res["labels"] == labels, path
                member = f"{zip_stem}/{res['data_uri']}"
                assert rep["data"][member] == (workdir / path).read_bytes(), path  # the file itself, unchanged
                name = Path(path).stem if "/plots/" in path else f"report_{Path(path).suffix[1:]}"
                shape = Path(path).parent.name if Path(path).parent.name in SHAPES else None
                want = caption_text(name, run=run)
                assert want and shown_text(res["caption"]).startswith(want), (path, res["caption"][:300])
                if shape:  # the shape is the figure's subcategory and label (checked above)
                    assert f"one shape of result set {run}" in shown_text(res["caption"])
    assert rep["data"][f"{zip_stem}/{rep['results'][f'{out}/report.html']['data_uri']}"].startswith(b"<!")  # attnprof's HTML
    assert rep["data"][f"{zip_stem}/{rep['results'][f'{out}/report.pdf']['data_uri']}"][:5] == b"%PDF-"
    desc = shown_text(rep["workflow_desc"])
    assert "attnprof: where the time of PyTorch attention goes" in desc and "3. Per shape: the figures of each shape" in desc


@pytest.mark.workflow
def test_the_report_zip_holds_the_figures_captions_categories_and_the_report(run_dir, tmp_path):
    rep = report_zip(run_dir, tmp_path / "report.zip")
    check_report(rep, run_dir, "tiny", "report")


@pytest.mark.workflow
def test_a_result_set_from_elsewhere_is_reported_through_the_render_profile(run_dir, tmp_path):
    """A copied result set (as a committed example is): its own name, not this config's; the render profile and its
    report.pdf as the target restrict the report to it."""
    shutil.copytree(run_dir / "results" / "tiny", run_dir / "results" / "copied")
    try:
        profile = str(run_dir / "workflow" / "profiles" / "render")
        rep = report_zip(run_dir, tmp_path / "copied.zip", "--profile", profile, "results/copied/report.pdf")
        check_report(rep, run_dir, "copied", "copied")
    finally:
        shutil.rmtree(run_dir / "results" / "copied")
