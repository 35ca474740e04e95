"""The HTML report's interactive timeline (attnprof.render.timeline_html) and the recipe's start columns it draws.

Bar positions are µs in the inner SVG's viewBox: a bar's x is its start, its width its duration; the expected
numbers below are written by hand from the synthetic tables (lanes are 46 units apart; in a lane the launch row
starts at 6, the GPU row at 24)."""
import gzip
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from attnprof.model.formats import current_record
from attnprof.render.timeline_html import load_captures, timeline_html

ROOT = Path(__file__).resolve().parents[1]
NASTY = "void ns::kern<cutlass::bfloat16_t, Traits<64, 128>, true>(Params<A&B>)"


def _forwards(device_us, cpu_us):
    n = len(device_us)
    return pd.DataFrame({"forward": range(n), "cpu_us": cpu_us, "device_us": device_us, "timing_complete": [True] * n})


def _step(forward, step, category, name, label, start, dur, launch_api=None, launch_us=None, launch_dur=None,
          grid=None, block=None):
    return {"variant": "v", "shape_key": "s", "forward": forward, "step": step, "category": category, "name": name,
            "label": label, "grid": grid, "block": block, "dur_us": dur, "time_ok": True, "start_us": start,
            "launch_api": launch_api, "launch_us": launch_us, "launch_dur_us": launch_dur}


def _gpu_recipe(forward, offset):
    """Two GPU steps of ``forward``: a memset and a templated kernel, starts shifted by ``offset`` µs."""
    return [_step(forward, 0, "memset", "Memset (Device)", "Memset", 10 + offset, 2.5, "cudaMemsetAsync", 3 + offset, 4),
            _step(forward, 1, "kernel", NASTY, NASTY, 40 + offset, 80, "cuLaunchKernelEx", 8 + offset, 6.25,
                  "132x1x1", "384x1x1")]


def _svg(block: str) -> ET.Element:
    """The block's SVG, parsed as XML (so it is well formed: every name escaped)."""
    return ET.fromstring(block[block.index("<svg"):block.rindex("</svg>") + len("</svg>")])


def _rects(svg: ET.Element, cls: str) -> list[tuple[str, str, str, str]]:
    return [(r.get("x"), r.get("y"), r.get("width"), r.get("height")) for r in svg.iter("rect") if r.get("class") == cls]


@pytest.fixture
def gpu_block():
    # variant a: three timed forwards, device time 30, 10, 20 µs: the median one is forward 2 (not the middle index)
    a = pd.DataFrame(_gpu_recipe(0, 1000) + _gpu_recipe(1, 2000) + _gpu_recipe(2, 0))
    b = pd.DataFrame([_step(0, 0, "kernel", "softmax_warp_forward<float>", "softmax_warp_forward", 5, 7.5,
                            "cudaLaunchKernel", 1.5, 2, "16x1x1", "128x1x1")])
    captures = [
        {"variant": "a", "status": "ok", "recipe": a, "forwards": _forwards([30, 10, 20], [100, 100, 100]), "source": "a.csv"},
        {"variant": "b", "status": "ok", "recipe": b, "forwards": _forwards([7.5], [50]), "source": "b.csv"},
        {"variant": "c", "status": "out_of_memory", "recipe": None, "forwards": None, "source": "c.csv"},
    ]
    return timeline_html(captures, gpu=True, shape_key="b1_s8")


def test_bars_are_placed_by_start_and_sized_by_duration(gpu_block):
    svg = _svg(gpu_block)
    # forward 2 of a (starts unshifted), and b's one kernel one lane (46) lower
    assert _rects(svg, "itl-gpu") == [("10", "24", "2.5", "16"), ("40", "24", "80", "16"), ("5", "70", "7.5", "16")]
    assert _rects(svg, "itl-launch") == [("3", "6", "4", "13"), ("8", "6", "6.25", "13"), ("1.5", "52", "2", "13")]
    assert _rects(svg, "itl-range") == [("0", "1", "100", "4"), ("0", "47", "50", "4")]
    # one time axis for all: the latest end (a's kernel, 40 + 80 µs) and 2 % room; three lanes of 46
    plot = next(e for e in svg.iter("svg") if e.get("class") == "itl-plot")
    assert plot.get("viewBox") == "0 0 122.4 138"
    assert "not drawn: out_of_memory" in "".join(svg.itertext())


def test_hover_names_kernel_launch_grid_block_and_duration_escaped(gpu_block):
    assert NASTY not in gpu_block and "Params&lt;A&amp;B&gt;" in gpu_block
    svg = _svg(gpu_block)
    kernel = [r for r in svg.iter("rect") if r.get("class") == "itl-gpu"][1]
    lines = kernel.find("title").text.split("\n")
    assert lines[0] == NASTY  # the label, given back exactly by the XML parser
    assert "grid 132x1x1" in lines[1] and "block 384x1x1" in lines[1] and lines[1].startswith("kernel (")
    assert lines[2] == "80 µs on the device, from 40 µs"
    assert lines[3] == "launched by cuLaunchKernelEx at 8 µs (6.25 µs on the host)"
    # each variant's name links to its trace
    assert [a.get("href") for a in svg.iter("a")] == [f"captures/b1_s8/{v}/r1/trace.json.gz" for v in "abc"]


def test_the_block_fetches_nothing(gpu_block):
    assert not re.search(r"https?:", gpu_block)
    assert not re.search(r"<script[^>]*\bsrc=|<link\b|@import|url\(", gpu_block)
    assert gpu_block.count("<script>") == 1 and 'class="screen-only"' in gpu_block
    assert len(gpu_block[gpu_block.index("<script>"):].splitlines()) < 60


def test_a_cpu_run_draws_the_top_level_ops():
    ops = pd.DataFrame([_step(0, 0, "op", "aten::matmul", "aten::matmul", 2, 30),
                        _step(0, 1, "op", "aten::softmax", "aten::softmax", 33, 12.5),
                        _step(1, 0, "op", "aten::matmul", "aten::matmul", 4, 90)])
    block = timeline_html([{"variant": "naive", "status": "ok", "recipe": ops, "forwards": _forwards([0, 0], [50, 100]),
                            "source": "x"}], gpu=False, shape_key="s")
    svg = _svg(block)
    # no device time: the forward of median host time, the lower middle of two (50 µs: forward 0)
    assert _rects(svg, "itl-gpu") == [("2", "24", "30", "16"), ("33", "24", "12.5", "16")]
    assert _rects(svg, "itl-launch") == []
    assert _rects(svg, "itl-range") == [("0", "6", "50", "13")]
    text = "".join(svg.itertext())
    assert "aten ops" in text and "GPU" not in text
    assert "top-level aten op" in block


def test_an_old_recipe_without_start_times_is_refused_naming_the_file():
    old = pd.DataFrame(_gpu_recipe(0, 0)).drop(columns=["start_us", "launch_us", "launch_dur_us"])
    with pytest.raises(ValueError, match=r"tables/s/v/r1/recipe.csv: no column\(s\) start_us, launch_us, launch_dur_us"):
        timeline_html([{"variant": "v", "status": "ok", "recipe": old, "forwards": _forwards([1], [1]),
                        "source": "tables/s/v/r1/recipe.csv"}], gpu=True, shape_key="s")


def test_load_captures_matches_tables_by_folder(tmp_path):
    for v in ("a", "b"):
        d = tmp_path / "tables" / "s1" / v / "r1"
        d.mkdir(parents=True)
        pd.DataFrame(_gpu_recipe(0, 0)).to_csv(d / "recipe.csv", index=False)
        _forwards([5], [9 if v == "a" else 7]).to_csv(d / "forwards.csv", index=False)
    (tmp_path / "tables" / "s1" / "b" / "r1" / "recipe.csv").write_text("")
    paths = sorted(tmp_path.glob("tables/*/*/r1/recipe.csv")), sorted(tmp_path.glob("tables/*/*/r1/forwards.csv"))
    caps = load_captures([{"variant": "a", "status": "ok"}, {"variant": "z", "status": "failed"}], *paths, "s1")
    assert caps[0]["forwards"]["cpu_us"].tolist() == [9] and caps[1]["recipe"] is None
    with pytest.raises(ValueError, match=r"b/r1/recipe.csv: unreadable table"):
        load_captures([{"variant": "b", "status": "ok"}], *paths, "s1")


def test_recipe_start_and_launch_columns_match_the_raw_trace():
    """recipe_table's start_us, launch_api, launch_us and launch_dur_us against the trace JSON read by hand."""
    from attnprof.analysis.recipe import recipe_table
    from attnprof.analysis.tables import analyse_trace
    from attnprof.analysis.trace import load_trace

    path = ROOT / "tests" / "fixtures" / "h200" / "naive" / "trace.json.gz"
    table = recipe_table(analyse_trace(load_trace(path), "attn_fwd", True), "naive", "s", True)
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    ranges = sorted((e for e in events if e.get("cat") == "user_annotation" and e.get("name") == "attn_fwd"),
                    key=lambda e: e["ts"])
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    fwd = int(table["forward"].iloc[0])
    r = ranges[fwd]
    work = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   and r["ts"] <= calls[e["args"]["correlation"]]["ts"] <= r["ts"] + r["dur"]), key=lambda e: e["ts"])
    mine = table[table["forward"] == fwd]
    assert len(mine) == len(work) > 2
    for row, e in zip(mine.itertuples(), work):
        call = calls[e["args"]["correlation"]]
        assert row.start_us == pytest.approx(e["ts"] - r["ts"], abs=1e-3)
        assert (row.launch_api, row.launch_dur_us) == (call["name"], pytest.approx(call["dur"], abs=1e-3))
        assert row.launch_us == pytest.approx(call["ts"] - r["ts"], abs=1e-3)
        assert 0 <= row.launch_us < row.start_us


def test_the_report_shows_the_block_beside_the_static_figure(tmp_path, h200):
    """The whole report (report.html.j2) with the block: the static figure stays (for print), the report
    fetches no script or style, and the block sits in the timeline's section."""
    import yaml

    from attnprof.analysis.tables import concat_tables
    from attnprof.model.names import TIMELINE
    from attnprof.render.common import render_html
    from attnprof.render.report import build_context

    png = tmp_path / "t.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    expectations = yaml.safe_load((ROOT / "config" / "expectations.yaml").read_text())
    shape = h200["statuses"]["naive"]["shape_key"]
    env = {"gpu_name": "NVIDIA H200", "torch": "2.11.0", "python": "3.12", "snakemake": "9", "driver": "580",
           "cuda_build": "13.0", "cudnn": 91900, "cpu": "x86_64", "config": {"profiler": {"warmup_calls": 3,
           "range_name": "attn_fwd", "schedule": {"wait": 1, "warmup": 2, "active": 10}}, "timing": {"repeats": 50, "input_sets": 4}}}
    env = current_record("env", env, "env.json")  # as attnprof.analysis.records.load_env reads it
    ctx = build_context("r", h200["summary"], h200["kernels"], concat_tables(h200["launches"]), {"shapes": []}, env,
                        expectations, {shape: {TIMELINE: png}}, css="body{}")
    ctx["live_timeline"] = timeline_html([{"variant": "a", "status": "ok", "recipe": pd.DataFrame(_gpu_recipe(0, 0)),
                                           "forwards": _forwards([1], [60]), "source": "x"}], True, shape)
    page = render_html(ctx, ROOT / "report")
    section = page[page.index('id="timeline"'):]
    section = section[:section.index("</figure></div>")]  # the timeline's plotrow: the block, then the figure
    assert section.index('id="itl"') < section.index('<figure class="wide itl-static"><img')
    assert "<h3" not in section and "<h2" not in section
    assert not re.search(r"<script[^>]*\bsrc=|<link[^>]*https?:|@import|url\(\s*['\"]?https?:", page)
    assert 'href="#traces"' in section
    del ctx["live_timeline"]  # a context without it (an older caller): the figure alone, shown on screen too
    page = render_html(ctx, ROOT / "report")
    assert 'id="itl"' not in page and '<figure class="wide"><img' in page
