"""Report rendering: kernel names are escaped data; WeasyPrint errors fail the PDF."""
import logging
from pathlib import Path

import pytest
import yaml

from attnprof.findings import compute
from attnprof.report import RenderError, build_context, render_html, render_pdf
from attnprof.tables import concat_tables

ROOT = Path(__file__).resolve().parents[1]
NASTY = "void ns::kern<cutlass::bfloat16_t, Traits<64, 128>, true>(Params<A&B>)"


@pytest.fixture(scope="module")
def html(h200, h200_data):
    expectations = yaml.safe_load((ROOT / "config" / "expectations.yaml").read_text())
    kernels = h200["kernels"].copy()
    kernels.loc[kernels["variant"] == "sdpa_flash", "kernel"] = NASTY
    findings = {"shapes": [compute(h200_data, expectations)]}
    launches = concat_tables(h200["launches"])
    env = {"gpu_name": "NVIDIA H200", "torch": "2.11.0", "python": "3.12", "snakemake": "9", "driver": "580", "cuda_build": "13.0",
           "cudnn": 91900, "cpu": "x86_64", "config": {"profiler": {"warmup_calls": 3, "range_name": "attn_fwd",
           "schedule": {"wait": 1, "warmup": 2, "active": 10}}, "timing": {"repeats": 50, "input_sets": 4}}}
    ctx = build_context("test-run", h200["summary"], kernels, launches, findings, env, expectations, {}, css="body{}")
    return render_html(ctx, ROOT / "report")


def test_kernel_names_are_escaped(html):
    assert "ns::kern&lt;cutlass::bfloat16_t, Traits&lt;64, 128&gt;, true&gt;(Params&lt;A&amp;B&gt;)" in html
    assert NASTY not in html


def test_report_has_summary_expectations_and_kernel_tables(html):
    for text in ("In brief", "At the study's shape", "Study vs this run", "Kernel tables", "Open the traces", "ui.perfetto.dev", "sdpa_auto",
                 "dispatched to cudnn", "Contents"):
        assert text in html


def test_pdf_renders_from_html(tmp_path, html):
    src = tmp_path / "r.html"
    src.write_text(html)
    render_pdf(src, tmp_path / "r.pdf")
    assert (tmp_path / "r.pdf").read_bytes()[:5] == b"%PDF-"


def test_pdf_fails_on_a_broken_image(tmp_path):
    src = tmp_path / "r.html"
    src.write_text('<html><body><img src="missing.png"></body></html>')
    with pytest.raises(RenderError):
        render_pdf(src, tmp_path / "r.pdf")
    assert not (tmp_path / "r.pdf").exists()
    assert not [h for h in logging.getLogger("weasyprint").handlers if type(h).__name__ == "Collect"]


def test_cudnn_version_has_one_spelling():
    from attnprof.report import cudnn_version

    assert cudnn_version(91900) == "9.19.0" and cudnn_version(90100) == "9.1.0" and cudnn_version(8902) == "8.9.2"
    assert cudnn_version(None) == "" and cudnn_version("9.19") == "9.19"


def test_a_timeline_of_many_variants_still_fits_a_page_with_its_heading(tmp_path, h200):
    """0.62 in a variant up to the page (A4 landscape, 7.3 in printable): with 12 variants the
    timeline is drawn at PAGE_FIGURE_MAX_IN, so that its heading is not left alone on the page before."""
    import struct

    from attnprof.plots import PAGE_FIGURE_MAX_IN, timeline
    from attnprof.tables import analyse_trace

    def height_in(n: int) -> float:
        captures = []
        for i in range(n):
            v = list(h200["traces"])[i % len(h200["traces"])]
            captures.append({"variant": f"{v}_{i}", "status": "ok", "frames": analyse_trace(h200["traces"][v], "attn_fwd"),
                             "forwards": h200["forwards"][v]})
        path = tmp_path / f"t{n}.png"
        timeline(captures, path, dpi=50)
        width_px, height_px = struct.unpack(">II", path.read_bytes()[16:24])  # the PNG header's IHDR
        return height_px / 50

    assert height_in(2) == pytest.approx(0.62 * 2 + 0.9, abs=0.03)  # few variants: the row height as drawn
    assert height_in(12) == pytest.approx(PAGE_FIGURE_MAX_IN, abs=0.03) and PAGE_FIGURE_MAX_IN < 7.3 - 1.0


def test_in_brief_opens_with_what_holds_and_ends_with_what_does_not():
    """The fastest variant (a finding) comes first; a ratio that is not robust and a ranking the
    independent timing contradicts come after the statuses and the trace sentence."""
    import pandas as pd

    from attnprof.report import in_brief

    findings = [
        {"rule": "speed", "kind": "warning", "headline": "1.5x the time of naive_inplace (not robust)", "statement": "RATIO; not a finding"},
        {"rule": "speed", "kind": "observation", "headline": "fastest variant", "statement": "FASTEST"},
        {"rule": "fidelity", "kind": "artefact", "headline": "ranking", "statement": "RANKING does not hold"},
        {"rule": "speed", "kind": "observation", "headline": "fused backends", "statement": "NOT IN BRIEF"},
    ]
    summary = pd.DataFrame([{"variant": "sdpa_cudnn", "status": "unsupported", "shape_key": "s", "device": "cpu"},
                            {"variant": "naive", "status": "ok", "shape_key": "s", "device": "cpu"}])
    brief = in_brief({"expectations": [], "findings": findings}, [{"findings": []}], summary)
    assert brief[0] == "FASTEST." and brief[1] == "sdpa_cudnn: unsupported at s."
    assert brief[-2:] == ["RATIO; not a finding.", "RANKING does not hold."]
    assert not any("NOT IN BRIEF" in s for s in brief) and len(brief) == 5
    # two rankings or more: one sentence that names each pair
    second = {"rule": "fidelity", "kind": "artefact", "headline": "ranking", "variants": ["b", "c"], "statement": "B C"}
    findings[2]["variants"] = ["a", "b"]
    brief = in_brief({"expectations": [], "findings": findings + [second]}, [{"findings": []}], summary)
    assert brief[-1].startswith("2 rankings by trace time do not hold") and "a ahead of b, b ahead of c" in brief[-1]
    assert len(brief) == 5


def test_an_out_of_memory_reason_is_printed_without_pytorchs_closing_advice():
    from attnprof.report import short_reason

    oom = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 GiB. GPU 0 has a total capacity of 139.80 GiB of "
           "which 4.85 GiB is free. Of the allocated memory 134.16 GiB is allocated by PyTorch, and 32.00 MiB is reserved by "
           "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
           "(https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")
    short = short_reason(oom)
    assert short.startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 GiB.") and "4.85 GiB is free" in short
    assert "expandable_segments" not in short and short.endswith("see the capture's status.json)")
    other = "RuntimeError: No viable backend for scaled_dot_product_attention was found."
    assert short_reason(other) == other and short_reason(None) == ""
