"""Comparing result sets: kernels added/removed, ratios against noise, environment diff."""
import pandas as pd
import pytest

from attnprof.compare import compare_runs, env_diff, normalise_kernel


def run(name, device_ms, spread, kernels, torch="2.13.0", dispatch="dispatched to cudnn"):
    summary = pd.DataFrame([{"variant": "sdpa_auto", "shape_key": "s", "status": "ok", "kernels_per_forward": len(kernels),
                             "device_ms_per_forward": device_ms, "device_ms_min": device_ms * (1 - spread / 2),
                             "device_ms_max": device_ms * (1 + spread / 2), "cpu_ms_per_forward": 0.1}])
    kern = pd.DataFrame([{"variant": "sdpa_auto", "shape_key": "s", "kernel": k} for k in kernels])
    ops = pd.DataFrame([{"variant": "sdpa_auto", "shape_key": "s", "op": "aten::scaled_dot_product_attention"}])
    findings = {"shapes": [{"shape_key": "s", "findings": [{"rule": "dispatch", "headline": dispatch}]}]}
    return {"name": name, "summary": summary, "kernels": kern, "ops": ops, "env": {"torch": torch, "config": {"seed": 0}},
            "findings": findings}


def test_template_arguments_are_ignored_when_matching_kernels():
    assert normalise_kernel("void flash_fwd_kernel<Traits<64, 128>, true>(Params)") == normalise_kernel(
        "void flash_fwd_kernel<Traits<128, 64>, false>(Params)")


def test_kernel_swap_ratio_and_dispatch_change_are_reported():
    a = run("old", 0.100, 0.02, ["void pytorch_flash::flash_fwd_kernel<A>(P)"], dispatch="dispatched to flash")
    b = run("new", 0.060, 0.02, ["cudnn_generated_fort_native_sdpa_sm90_knob_7"], torch="2.14.1")
    pair = compare_runs([a, b])["pairs"][0]
    row = pair["rows"][0]
    assert row["kernels_added"] == ["cudnn_generated_fort_native_sdpa_sm90_knob_7"]
    assert row["kernels_removed"] == ["pytorch_flash::flash_fwd_kernel"]
    assert row["ratio"] == 0.6 and row["verdict"] == "faster"
    assert pair["dispatch"] == [{"shape_key": "s", "a": "dispatched to flash", "b": "dispatched to cudnn"}]
    assert {"key": "torch", "a": "2.13.0", "b": "2.14.1"} in pair["env_diff"]


def test_ratio_inside_the_measured_spread_is_noise():
    # 8 % slower, but one run's forwards spread over 20 %: not a change
    pair = compare_runs([run("a", 1.0, 0.20, ["k"]), run("b", 1.08, 0.01, ["k"])])["pairs"][0]
    assert pair["rows"][0]["verdict"] == "within noise" and pair["rows"][0]["noise_threshold"] == pytest.approx(0.2)
    # the same 8 % with tight spreads is a change (floor 5 %)
    pair = compare_runs([run("a", 1.0, 0.01, ["k"]), run("b", 1.08, 0.01, ["k"])])["pairs"][0]
    assert pair["rows"][0]["verdict"] == "slower"


def test_env_diff_flattens_config():
    diff = env_diff({"torch": "1", "config": {"profiler": {"schedule": {"active": 3}}}},
                    {"torch": "1", "config": {"profiler": {"schedule": {"active": 10}}}})
    assert diff == [{"key": "config.profiler.schedule.active", "a": 3, "b": 10}]


def test_trace_change_not_confirmed_by_independent_timing_is_inconsistent():
    a, b = run("a", 1.0, 0.01, ["k"]), run("b", 2.0, 0.01, ["k"])
    for r, t in ((a, 1.0), (b, 1.01)):
        r["summary"]["timed_ms_median"], r["summary"]["timed_ms_min"], r["summary"]["timed_ms_max"] = t, t * 0.99, t * 1.01
    assert compare_runs([a, b])["pairs"][0]["rows"][0]["verdict"] == "inconsistent"
