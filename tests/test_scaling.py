"""Sweep-related pieces: TFLOP/s convention, OOM bytes, calibration on CPU, scaling plots, fidelity."""
import json

import pandas as pd
import pytest

from attnprof.measure.calibrate import calibrate, datasheet
from attnprof.measure.capture import oom_bytes
from attnprof.render.plots import make_scaling
from attnprof.analysis.tables import summary_row
from attnprof.model.variants import Shape, expand_shapes


def test_tflops_uses_the_sdpa_benchmark_flop_convention():
    shape = Shape(8, 16, 1024, 64, "bf16", True)
    status = {"variant": "sdpa_flash", "shape_key": shape.key, "status": "ok", "device": "cuda", **shape.as_dict(),
              "forward_flops": shape.forward_flops(), "min_bytes": shape.min_bytes()}
    forwards = pd.DataFrame({"forward": [0, 1, 2], "kernels": [1, 1, 1], "memcpy": [0, 0, 0], "memset": [0, 0, 0],
                             "device_us": [100.0, 100.0, 100.0], "cpu_us": [50.0, 50.0, 50.0], "launches_without_gpu_event": 0,
                             "bad_time_events": 0, "complete": True, "timing_complete": True})
    row = summary_row(status, forwards)
    # 8*16*(4*1024^2*64 + 2*1024^2)/2 FLOP in 0.1 ms
    assert row["tflops"] == pytest.approx(8 * 16 * (4 * 1024**2 * 64 + 2 * 1024**2) / 2 / 1e-4 / 1e12)
    assert row["flop_per_byte"] == pytest.approx(shape.forward_flops() / (4 * 8 * 16 * 1024 * 64 * 2))


def test_oom_message_gives_bytes():
    assert oom_bytes("CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity") == 32 * 2**30
    assert oom_bytes("some other error") is None


def test_calibration_is_skipped_without_a_gpu():
    assert "skipped" in calibrate("cpu")
    assert datasheet("NVIDIA H200")["datasheet_tflops_bf16"] == 989.0 and datasheet("unknown") == {}


def test_union_of_grids_keeps_first_occurrence():
    shapes = expand_shapes([{"batch": [8], "heads": [16], "seq_len": [1024, 512], "head_dim": [64], "dtype": ["bf16"], "causal": [True]},
                            {"batch": [8], "heads": [16], "seq_len": [1024], "head_dim": [64, 128], "dtype": ["bf16"], "causal": [True]}])
    assert [s.key for s in shapes] == ["b8_h16_s1024_d64_bf16_causal", "b8_h16_s512_d64_bf16_causal", "b8_h16_s1024_d128_bf16_causal"]


def test_scaling_plots_draw_oom_points_and_roofline(tmp_path):
    rows = []
    for s, status in ((1024, "ok"), (4096, "ok"), (16384, "out_of_memory")):
        for v in ("naive", "sdpa_flash"):
            st = status if v == "naive" else "ok"
            rows.append({"variant": v, "status": st, "seq_len": s, "head_dim": 64, "batch": 8, "heads": 16, "dtype": "bf16", "causal": True,
                         "device_ms_per_forward": s / 1000 if st == "ok" else None, "tflops": 100.0 if st == "ok" else None,
                         "forward_memory_mb": s / 10, "flop_per_byte": s / 4})
    cal = {"gemm_tflops_bf16": 790.0, "copy_tb_per_s": 4.3, "datasheet_tflops_bf16": 989.0, "datasheet_tb_per_s": 4.8}
    paths = make_scaling(pd.DataFrame(rows), cal, tmp_path, dpi=60)
    assert [p.name for p in paths] == ["scaling_time.png", "scaling_tflops.png", "scaling_memory.png", "roofline.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    # a summary from before forward_memory_mb existed: the memory plot is drawn empty, not a crash
    old = pd.DataFrame(rows).drop(columns="forward_memory_mb")
    assert make_scaling(old, cal, tmp_path / "old", dpi=60)[2].read_bytes()[:4] == b"\x89PNG"


def test_fidelity_finding_on_h200_fixtures(h200_data):
    from attnprof.findings import rule_fidelity

    found = rule_fidelity(h200_data)
    per_variant = {f["variants"][0]: f for f in found if len(f["variants"]) == 1}
    assert set(per_variant) == {"naive", "naive_inplace", "sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto"}
    flash = per_variant["sdpa_flash"]["numbers"]
    assert flash["timed_over_trace"]["value"] == pytest.approx(flash["timed_ms"]["value"] / flash["trace_ms"]["value"])
    # sdpa_auto dispatches to sdpa_cudnn's kernel: a dispatcher is in no ranking, so in no pair whose order is judged
    pairs = [set(f["variants"]) for f in found if len(f["variants"]) == 2]
    assert all("sdpa_auto" not in p for p in pairs)
    json.dumps(found)


def test_timeline_draws_the_median_forward_by_device_time_or_on_a_cpu_run_by_host_time():
    from attnprof.render.plots import pick_forward

    gpu = pd.DataFrame({"forward": [0, 1, 2, 3], "timing_complete": [True, True, True, False],
                        "device_us": [10.0, 30.0, 20.0, 5.0], "cpu_us": [9.0, 1.0, 5.0, 2.0]})
    assert pick_forward(gpu) == 2  # device 10, 20, 30 among the timed: 20 is forward 2 (host order would pick 2's 5 too)
    gpu.loc[2, "cpu_us"] = 100.0
    assert pick_forward(gpu) == 2  # host time does not matter on a GPU run
    cpu = gpu.assign(device_us=0.0, cpu_us=[9.0, 1.0, 5.0, 2.0])
    assert pick_forward(cpu) == 2  # host 1, 5, 9 among the timed: 5 is forward 2
    cpu.loc[0, "cpu_us"] = 3.0
    assert pick_forward(cpu) == 0  # host 1, 3, 5: 3 is forward 0 (forward order alone would give 1)
