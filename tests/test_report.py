"""Report rendering: kernel names are escaped data; WeasyPrint errors fail the PDF."""
import logging.handlers
from pathlib import Path

import pytest
import yaml

from attnprof.model.formats import current_record
from attnprof.findings import compute
from attnprof.render.common import RenderError, render_html, render_pdf
from attnprof.render.report import build_context
from attnprof.analysis.tables import concat_tables

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
    env = current_record("env", env, "env.json")  # as attnprof.analysis.records.load_env reads it
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
    assert not [h for h in logging.getLogger("weasyprint").handlers if isinstance(h, logging.handlers.BufferingHandler)]


def test_cudnn_version_has_one_spelling():
    from attnprof.render.common import cudnn_version

    assert cudnn_version(91900) == "9.19.0" and cudnn_version(90100) == "9.1.0" and cudnn_version(8902) == "8.9.2"
    assert cudnn_version(None) == "" and cudnn_version("9.19") == "9.19"


def test_a_timeline_of_many_variants_still_fits_a_page_with_its_heading(tmp_path, h200):
    """0.62 in a variant up to the page (A4 landscape, 7.3 in printable): with 12 variants the
    timeline is drawn at PAGE_FIGURE_MAX_IN, so that its heading is not left alone on the page before."""
    import struct

    from attnprof.render.plots import PAGE_FIGURE_MAX_IN, timeline
    from attnprof.analysis.recipe import recipe_table
    from attnprof.analysis.tables import analyse_trace
    from attnprof.render.timeline_html import lane

    def height_in(n: int) -> float:
        lanes = []
        for i in range(n):
            v = list(h200["traces"])[i % len(h200["traces"])]
            recipe = recipe_table(analyse_trace(h200["traces"][v], "attn_fwd"), v, "s", True)
            lanes.append(lane({"variant": f"{v}_{i}", "status": "ok", "recipe": recipe, "forwards": h200["forwards"][v]},
                              gpu=True))
        assert all(ln["bars"] for ln in lanes)
        path = tmp_path / f"t{n}.png"
        timeline(lanes, path, dpi=50)
        width_px, height_px = struct.unpack(">II", path.read_bytes()[16:24])  # the PNG header's IHDR
        return height_px / 50

    assert height_in(2) == pytest.approx(0.62 * 2 + 0.9, abs=0.03)  # few variants: the row height as drawn
    assert height_in(12) == pytest.approx(PAGE_FIGURE_MAX_IN, abs=0.03) and PAGE_FIGURE_MAX_IN < 7.3 - 1.0


def _brief_summary():
    import pandas as pd

    def row(variant, ms, lo, hi, cpu, ok=True, status="ok", key="b1_s1"):
        return {"variant": variant, "shape_key": key, "status": status, "device": "cuda", "device_ms_per_forward": ms,
                "device_ms_run_lo": lo, "device_ms_run_hi": hi, "cpu_ms_per_forward": cpu, "cpu_ms_run_lo": cpu and cpu * 0.9,
                "cpu_ms_run_hi": cpu and cpu * 1.1, "cpu_ms_run_sd_pct": 1.0, "device_ms_run_sd_pct": 1.0, "rel_error": 1e-3 if ok else 0.5,
                "rel_error_ok": ok, "repeats": 3, "kernels_per_forward": 1.0, "memcpy_per_forward": 0.0, "oom_bytes": None,
                "seq_len": 1}

    return pd.DataFrame([row("wrong", 0.01, 0.009, 0.011, 0.05, ok=False), row("sdpa_auto", 0.019, 0.018, 0.020, 0.08),
                         row("sdpa_cudnn", 0.02, 0.019, 0.021, 0.05), row("sdpa_flash", 0.03, 0.029, 0.031, 0.05),
                         row("sdpa_math", None, None, None, None, status="out_of_memory")])


def test_in_brief_leads_with_wrong_results_and_ranks_distinct_kernels_only():
    """A wrong result leads page 1 and is never the fastest; sdpa_auto (a dispatcher) is stated as dispatching to its
    kernel with its host cost, never as the fastest; the margin is computed against the next distinct kernel; every
    sentence links its evidence."""
    import pandas as pd

    from attnprof.findings.brief import in_brief

    summary = _brief_summary()
    kernels = pd.DataFrame([{"variant": v, "shape_key": "b1_s1", "kernel": k, "label": k, "us_per_forward": 1.0}
                            for v, k in [("wrong", "kw"), ("sdpa_auto", "kc"), ("sdpa_cudnn", "kc"), ("sdpa_flash", "kf")]])
    findings = [{"rule": "dispatch", "kind": "observation", "variants": ["sdpa_auto", "sdpa_cudnn"], "headline": "dispatched to cudnn"}]
    study = {"key": "b1_s1", "expectations": [], "findings": findings}
    brief = in_brief(study, [{"key": "b1_s1", "findings": findings}], summary, kernels)
    texts = [b["text"] for b in brief]
    assert texts[0].startswith("wrong computes a wrong result") and "0.5" in texts[0]
    fastest = next(t for t in texts if t.startswith("The fastest kernel"))
    # one shape: its key once, before the winner (never again after its time)
    assert fastest.startswith("The fastest kernel at b1_s1 is sdpa_cudnn") and "sdpa_flash" in fastest
    assert fastest.count("b1_s1") == 1
    assert f"{0.03 / 0.02:.3g}\u00d7 faster" in fastest and "rerun 0.019\u20130.021 ms" in fastest
    auto = next(t for t in texts if t.startswith("sdpa_auto"))
    assert "dispatches to sdpa_cudnn" in auto and "0.03 ms more host time" in auto
    assert any(t.startswith("sdpa_math ran out of memory") for t in texts)
    assert all(b["href"].startswith("#") for b in brief) and 3 <= len(brief) <= 6


def test_expectations_in_words():
    from attnprof.findings.brief import expectations_words

    checks = [{"verdict": "same", "claim": "A"}, {"verdict": "different", "claim": "B", "observed": {"value": 2, "unit": "ms"}},
              {"verdict": "within noise", "claim": "C"}]
    text = expectations_words(checks)
    assert text.startswith("1 of the 3 claims hold") and "\u201cB\u201d (observed 2 ms)" in text and "\u201cC\u201d" in text


def test_an_out_of_memory_reason_is_printed_without_pytorchs_closing_advice():
    from attnprof.findings.brief import short_reason

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


def test_memory_bound_shapes_are_named_with_the_fastest_kernels_gb_per_s():
    """Ridge 800 TFLOP/s / 4 TB/s = 200 FLOP/B: a shape at 4 FLOP/B is memory-bound, one at 1000 is not. The fastest
    is the fastest correct non-dispatcher (sdpa_auto and a wrong result are faster here, and skipped); its GB/s
    rerun interval is the same bytes over the device time's (2000 GB/s x 0.1 ms over 0.125 and 0.08 ms)."""
    import pandas as pd

    from attnprof.findings.brief import memory_bound, memory_bound_brief

    base = {"status": "ok", "dtype": "bf16", "rel_error_ok": True}
    rows = [
        {**base, "variant": "sdpa_flash", "shape_key": "dec", "flop_per_byte": 4.0, "device_ms_per_forward": 0.1,
         "device_ms_run_lo": 0.08, "device_ms_run_hi": 0.125, "gbps": 2000.0},
        {**base, "variant": "sdpa_auto", "shape_key": "dec", "flop_per_byte": 4.0, "device_ms_per_forward": 0.09,
         "gbps": 2222.0},
        {**base, "variant": "mine", "shape_key": "dec", "flop_per_byte": 4.0, "device_ms_per_forward": 0.05,
         "gbps": 4000.0, "rel_error_ok": False},
        {**base, "variant": "naive", "shape_key": "dec", "flop_per_byte": 4.0, "device_ms_per_forward": 1.0, "gbps": 200.0,
         "device_ms_run_lo": 0.9, "device_ms_run_hi": 1.1},
        {**base, "variant": "sdpa_flash", "shape_key": "big", "flop_per_byte": 1000.0, "device_ms_per_forward": 1.0,
         "gbps": 10.0},
    ]
    summary = pd.DataFrame(rows)
    calibration = {"copy_tb_per_s": 4.0, "gemm_tflops_bf16": 800.0}
    assert memory_bound(summary, calibration) == {"dec": 200.0}
    (b,) = memory_bound_brief(summary, calibration)
    assert "Memory-bound at dec (4 FLOP/B, under the measured ridge of 200)" in b["text"]
    # the same bytes over the rerun interval's ends, 0.125 and 0.08 ms: 2000 x 0.1 / 0.125 = 1600, / 0.08 = 2500 GB/s
    assert "the fastest, sdpa_flash, moves 2000 GB/s (rerun 1600\u20132500 GB/s), 50 % of the measured copy bandwidth" in b["text"]
    assert b["href"] == "#sweep-sdpa_flash"
    assert memory_bound_brief(summary, {}) == [] and memory_bound(summary, {"copy_tb_per_s": 4.0}) == {}  # no ridge


def test_a_host_time_is_never_labelled_a_rerun_interval():
    """Host times have no parametric interval (attnprof.analysis.stats.host_range): their range is the lowest and
    highest capture, and page 1, the findings and the tables say "captures", never "rerun" (a CPU run's headline read
    "28.9 ms (rerun 27.1-28.9)", the min and max of its three captures). One function words it
    (attnprof.findings.ranking.spread_words); the template asks it instead of deciding itself."""
    from attnprof.findings.ranking import spread_words
    from attnprof.findings.brief import _interval

    row = {"cpu_ms_run_lo": 27.08, "cpu_ms_run_hi": 28.92, "device_ms_run_lo": 0.0573, "device_ms_run_hi": 0.0584}
    assert _interval(row, "cpu_ms") == " (captures 27.1\u201328.9 ms)"
    assert _interval(row, "device_ms") == " (rerun 0.0573\u20130.0584 ms)"
    for host in ("cpu_ms", "cpu_ms_backward"):
        words = spread_words(host, True)
        assert words["label"] == "captures" and not any("rerun" in w for w in words.values())
    assert spread_words("device_ms", True)["label"] == "rerun" and spread_words("device_ms_backward", True)["label"] == "rerun"
    template = (Path(__file__).resolve().parents[1] / "report" / "report.html.j2").read_text()
    assert 'startswith("cpu_")' not in template and "spread_words(prefix, true).label" in template


def test_a_cpu_runs_page_1_calls_its_host_ranges_captures_not_rerun_intervals():
    """A CPU run states host times only: page 1's note says "captures" (lowest and highest capture) and never
    explains a "rerun" interval it does not print; a GPU run's note explains the device time's rerun interval."""
    import pandas as pd

    from attnprof.findings.brief import brief_notes

    cpu = pd.DataFrame([{"variant": "sdpa_flash", "shape_key": "s", "status": "ok", "repeats": 4, "device_ms_run_lo": None,
                         "cpu_ms_run_lo": 11.3, "cpu_ms_run_hi": 11.8, "repeats_note": ""}])
    notes = " ".join(brief_notes(None, [], cpu))
    assert "\u201ccaptures\u201d gives the lowest and highest capture" in notes and "\u201crerun\u201d" not in notes
    gpu = cpu.assign(device_ms_run_lo=0.057)
    assert "\u201crerun\u201d is the 95 % interval" in " ".join(brief_notes(None, [], gpu))


def test_the_environments_host_load_is_over_every_capture():
    """The Environment table's load average: min-max over every capture (repeats.csv), not repeat 1's alone
    (summary.csv); a new user's CPU report read 4.2-4.6 where its captures ran at 4.25 to 5.62."""
    import pandas as pd

    from attnprof.render.report import _load_range

    summary = pd.DataFrame({"host_load_1m": [4.6, 4.25]})
    repeats = pd.DataFrame({"host_load_1m": [4.6, 4.25, 5.62, 4.9, None]})
    # two significant digits, as the table prints a load average (format_number)
    assert _load_range(summary, repeats) == "4.2\u20135.6"
    assert _load_range(summary) == "4.2\u20134.6"
