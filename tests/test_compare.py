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


def _result_set(name, forward_ms, extra_kernel=False, timed=None):
    """A one-variant result set built by the pipeline's own summary_row from per-forward device
    times (ms), so the spread columns are the ones a real run writes."""
    from attnprof.tables import summary_row

    n = len(forward_ms)
    kernels = 6 if extra_kernel else 5
    fw = pd.DataFrame({"forward": range(n), "cpu_us": 100.0, "device_us": [t * 1e3 for t in forward_ms], "kernels": kernels,
                       "memcpy": 1, "memset": 1, "launches_without_gpu_event": 0, "bad_time_events": 0, "complete": True,
                       "timing_complete": True})
    timed = timed or forward_ms
    status = {"variant": "naive", "shape_key": "s", "status": "ok", "device": "cuda", "schedule": {"active": n},
              "timing": {"median_ms": float(pd.Series(timed).median()), "min_ms": min(timed), "max_ms": max(timed)}}
    summary = pd.DataFrame([summary_row(status, fw)])
    names = ["gemm", "softmax", "mul", "fill", "gemm2"] + (["extra"] if extra_kernel else [])
    kern = pd.DataFrame([{"variant": "naive", "shape_key": "s", "kernel": k} for k in names])
    return {"name": name, "summary": summary, "kernels": kern, "ops": None, "env": {"torch": "x"}, "findings": {"shapes": []}}


# ten forwards with one slow outlier (a context switch): min-max spread 60 %, inter-quartile range 2 %
NOISY = [1.00, 1.01, 0.99, 1.02, 1.00, 0.98, 1.01, 1.00, 1.60, 0.99]


def test_same_inputs_compare_as_no_change():
    rows = compare_runs([_result_set("a", NOISY), _result_set("b", list(reversed(NOISY)))])["pairs"][0]["rows"]
    assert rows[0]["verdict"] == "within noise" and rows[0]["ratio"] == pytest.approx(1.0)
    assert rows[0]["kernels_added"] == [] and rows[0]["kernels_removed"] == []


def test_a_measurably_slower_variant_is_a_change_despite_one_outlier():
    slower = [t * 1.15 for t in NOISY]
    row = compare_runs([_result_set("a", NOISY), _result_set("b", slower)])["pairs"][0]["rows"][0]
    # the min-max spread (0.62 / 1.0) would call 15 % "within noise"; the inter-quartile range does not
    q1, q3 = pd.Series(NOISY).quantile([0.25, 0.75])
    assert row["noise_threshold"] == pytest.approx(max(0.05, (q3 - q1) / pd.Series(NOISY).median() * 1.0), rel=1e-6)
    assert row["verdict"] == "slower" and row["ratio"] == pytest.approx(1.15)


def test_an_extra_kernel_is_reported():
    row = compare_runs([_result_set("a", NOISY), _result_set("b", NOISY, extra_kernel=True)])["pairs"][0]["rows"][0]
    assert row["kernels_added"] == ["extra"] and (row["kernels_a"], row["kernels_b"]) == (5, 6)


def test_backward_and_compile_changes_are_reported_with_their_own_noise():
    a, b = run("a", 1.0, 0.01, ["k"]), run("b", 1.0, 0.01, ["k"])
    # backward: 2.0 ms with IQR 0.02 ms (1 %) against 2.3 ms with IQR 0.23 ms (10 %): 15 % slower, outside
    # max(5 % floor, 1 %, 10 %) = 10 %; kernels per backward 5 -> 4
    for r, ms, iqr, kb in ((a, 2.0, 0.02, 5), (b, 2.3, 0.23, 4)):
        r["summary"]["device_ms_per_backward"] = ms
        r["summary"]["device_ms_backward_q1"], r["summary"]["device_ms_backward_q3"] = ms - iqr / 2, ms + iqr / 2
        r["summary"]["kernels_per_backward"] = kb
    a["summary"]["compile_first_call_s"], a["summary"]["compile_cache"] = 8.0, "miss"
    b["summary"]["compile_first_call_s"], b["summary"]["compile_cache"] = 2.0, "hit"
    row = compare_runs([a, b])["pairs"][0]["rows"][0]
    assert (row["bwd_kernels_a"], row["bwd_kernels_b"]) == (5, 4)
    assert row["bwd_ratio"] == pytest.approx(1.15) and row["bwd_noise_threshold"] == pytest.approx(0.10)
    assert row["bwd_verdict"] == "slower" and row["verdict"] == "within noise"  # the forward did not move
    assert row["compile_ratio"] == 0.25 and (row["compile_cache_a"], row["compile_cache_b"]) == ("miss", "hit")
    # without a backward in one of them: nothing to compare, no verdict
    del b["summary"]["device_ms_per_backward"]
    row = compare_runs([a, b])["pairs"][0]["rows"][0]
    assert row["bwd_ratio"] is None and row["bwd_verdict"] is None


def test_a_backward_in_one_result_set_only_is_shown_not_dropped():
    a, b = run("a", 1.0, 0.01, ["k"]), run("b", 1.0, 0.01, ["k"])
    a["summary"]["backward_status"], a["summary"]["device_ms_per_backward"] = "ok", 2.0
    b["summary"]["backward_status"] = "failed"  # profiled, but no time: it failed in b
    a["env"]["config"]["passes"], b["env"]["config"]["passes"] = ["forward", "backward"], ["forward", "backward"]
    pair = compare_runs([a, b])["pairs"][0]
    row = pair["rows"][0]
    assert row["bwd_verdict"] == "not comparable" and (row["bwd_status_a"], row["bwd_status_b"]) == ("ok", "failed")
    assert pair["notes"] == []
    # b without a backward at all: its forwards ran under no_grad, a's with grad
    b["env"]["config"]["passes"] = ["forward"]
    del b["summary"]["backward_status"]
    pair = compare_runs([a, b])["pairs"][0]
    assert pair["rows"][0]["bwd_verdict"] == "not comparable" and pair["rows"][0]["bwd_status_b"] is None
    assert len(pair["notes"]) == 1 and "no_grad" in pair["notes"][0]
