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


# --- the noise threshold and the verdict, with numbers worked by hand (docs/mutations.md) --------

def _one_row(name, **cols):
    """A result set of one sdpa_auto row with the given summary columns (device times in ms)."""
    summary = pd.DataFrame([{"variant": "sdpa_auto", "shape_key": "s", "status": "ok", "kernels_per_forward": 1, **cols}])
    return {"name": name, "summary": summary, "kernels": pd.DataFrame(columns=["variant", "shape_key", "kernel"]), "ops": None,
            "env": {}, "findings": {"shapes": []}}


def _row(a_cols, b_cols, noise_floor=0.05):
    return compare_runs([_one_row("a", **a_cols), _one_row("b", **b_cols)], noise_floor)["pairs"][0]["rows"][0]


def test_threshold_is_the_interquartile_range_over_the_median_not_times_it():
    # median 2.0 ms, quartiles 1.8 and 2.4: (2.4 - 1.8) / 2.0 = 0.30 (times the median would be 1.2)
    a = {"device_ms_per_forward": 2.0, "device_ms_q1": 1.8, "device_ms_q3": 2.4, "device_ms_min": 1.0, "device_ms_max": 9.0}
    b = {"device_ms_per_forward": 3.0, "device_ms_q1": 2.97, "device_ms_q3": 3.03, "device_ms_min": 2.9, "device_ms_max": 3.1}
    row = _row(a, b)
    assert row["noise_threshold"] == pytest.approx(0.30) and row["ratio"] == pytest.approx(1.5) and row["verdict"] == "slower"


def test_threshold_from_min_max_over_the_median_when_quartiles_are_missing():
    # no quartile columns (a result set written before they were recorded): (2.6 - 1.8) / 2.0 = 0.40
    a = {"device_ms_per_forward": 2.0, "device_ms_min": 1.8, "device_ms_max": 2.6}
    b = {"device_ms_per_forward": 2.7, "device_ms_min": 2.69, "device_ms_max": 2.71}
    row = _row(a, b)
    assert row["noise_threshold"] == pytest.approx(0.40) and row["ratio"] == pytest.approx(1.35) and row["verdict"] == "within noise"
    # the same spread on the other side: b's own min-max counts as much as a's
    row = _row(b, a)
    assert row["noise_threshold"] == pytest.approx(0.40) and row["verdict"] == "within noise"


@pytest.mark.parametrize("q1,q3", [(float("nan"), float("nan")), (1.9, float("nan")), (float("nan"), 2.1), (None, 2.1)])
def test_a_missing_quartile_falls_back_to_min_max(q1, q3):
    # either quartile empty in the CSV: the min-max spread, (2.6 - 1.8) / 2.0 = 0.40, never NaN
    a = {"device_ms_per_forward": 2.0, "device_ms_q1": q1, "device_ms_q3": q3, "device_ms_min": 1.8, "device_ms_max": 2.6}
    b = {"device_ms_per_forward": 2.7, "device_ms_q1": 2.69, "device_ms_q3": 2.71, "device_ms_min": 2.6, "device_ms_max": 2.8}
    assert _row(a, b)["noise_threshold"] == pytest.approx(0.40)


def test_no_spread_recorded_leaves_the_floor():
    # medians only: both spreads unknown (0), so the threshold is the floor and a 2x change is one
    row = _row({"device_ms_per_forward": 2.0}, {"device_ms_per_forward": 4.0}, noise_floor=0.05)
    assert row["noise_threshold"] == 0.05 and row["verdict"] == "slower"


def test_spread_of_one_row_is_zero_when_unknown():
    from attnprof.compare import _spread

    cols = ("device_ms_per_forward", "device_ms_min", "device_ms_max")
    assert _spread(pd.Series({"device_ms_per_forward": 0.0, "device_ms_q1": 1.0, "device_ms_q3": 2.0}), *cols) == 0.0
    assert _spread(pd.Series({"device_ms_per_forward": 2.0, "device_ms_min": float("nan"), "device_ms_max": 2.6}), *cols) == 0.0
    assert _spread(pd.Series({"device_ms_per_forward": 2.0, "device_ms_min": 1.8, "device_ms_max": float("nan")}), *cols) == 0.0
    assert _spread(pd.Series({"device_ms_per_forward": 2.0, "device_ms_max": 2.6}), *cols) == 0.0


@pytest.mark.parametrize("b_ms,verdict", [(2.5, "within noise"), (2.5000001, "slower"), (1.5, "within noise"), (1.4999999, "faster")])
def test_a_ratio_exactly_on_the_threshold_is_within_noise(b_ms, verdict):
    # floor 0.25 and no spreads: 2.5 / 2.0 = 1.25 = 1 + 0.25 and 1.5 / 2.0 = 0.75 = 1 - 0.25 exactly in binary
    row = _row({"device_ms_per_forward": 2.0}, {"device_ms_per_forward": b_ms}, noise_floor=0.25)
    assert row["noise_threshold"] == 0.25 and row["verdict"] == verdict


def _result(name, rows, kernels, ops, dispatch):
    """A result set from summary rows (variant, shape_key, status, device ms median/q1/q3, timed ms),
    kernel and op names per (variant, shape) and sdpa_auto's dispatch headline per shape."""
    cols = ["variant", "shape_key", "status", "device_ms_per_forward", "device_ms_q1", "device_ms_q3", "timed_ms_median"]
    summary = pd.DataFrame([dict(zip(cols, r)) for r in rows])
    summary["kernels_per_forward"] = [len(kernels.get((r[0], r[1]), [])) for r in rows]
    summary["device_ms_min"], summary["device_ms_max"] = 0.001, 1000.0  # never used: every row has its quartiles
    kern = pd.DataFrame([{"variant": v, "shape_key": s, "kernel": k} for (v, s), ks in kernels.items() for k in ks])
    op = pd.DataFrame([{"variant": v, "shape_key": s, "op": o} for (v, s), os_ in ops.items() for o in os_])
    findings = {"shapes": [{"shape_key": s, "findings": [{"rule": "fusion", "headline": "x"}, {"rule": "dispatch", "headline": h}]}
                           for s, h in dispatch.items()]}
    return {"name": name, "summary": summary, "kernels": kern, "ops": op, "env": {"torch": name}, "findings": findings}


NAN = float("nan")
#: two variants at two shapes, each row with its own numbers, so that a row read from another
#: (variant, shape) gives other values; sdpa_auto/s2 only in a, naive/s3 only in b
BASE = _result("a", [("naive", "s1", "ok", 2.0, 1.9, 2.1, 2.2), ("naive", "s2", "ok", 4.0, 3.8, 4.2, 4.4),
                     ("sdpa_auto", "s1", "ok", 0.5, 0.49, 0.51, 0.6), ("sdpa_auto", "s2", "ok", 1.0, 0.9, 1.1, 1.2),
                     ("sdpa_math", "s1", "ok", 5.0, 4.9, 5.1, 5.2)],
               kernels={("naive", "s1"): ["void gemm<64, true>(P)", "softmax"], ("naive", "s2"): ["k2"],
                        ("sdpa_auto", "s1"): ["fused"], ("sdpa_auto", "s2"): ["fused"], ("sdpa_math", "s1"): ["m"]},
               ops={("naive", "s1"): ["aten::bmm", "aten::copy_"], ("naive", "s2"): ["aten::bmm"]},
               dispatch={"s1": "dispatched to flash", "s2": "dispatched to cudnn"})
NEW = _result("b", [("naive", "s1", "ok", 3.0, 2.97, 3.03, 3.3), ("naive", "s2", "ok", 4.2, 3.15, 5.25, 8.8),
                    ("sdpa_auto", "s1", "ok", 0.25, 0.2475, 0.2525, NAN), ("sdpa_math", "s1", "out_of_memory", NAN, NAN, NAN, NAN),
                    ("naive", "s3", "ok", 9.0, 8.9, 9.1, 9.2)],
              kernels={("naive", "s1"): ["void gemm<128, false>(P)", "softmax", "void extra<1>()"], ("naive", "s2"): ["k2b"],
                       ("sdpa_auto", "s1"): ["fused"], ("naive", "s3"): ["k3"]},
              ops={("naive", "s1"): ["aten::bmm", "aten::softmax"], ("naive", "s2"): ["aten::bmm"]},
              dispatch={"s1": "dispatched to cudnn", "s3": "dispatched to math"})


def test_every_row_of_a_two_shape_comparison_worked_by_hand():
    doc = compare_runs([BASE, NEW], noise_floor=0.05)
    assert (doc["baseline"], doc["noise_floor"], len(doc["pairs"])) == ("a", 0.05, 1)
    pair = doc["pairs"][0]
    assert (pair["a"], pair["b"]) == ("a", "b") and pair["env_diff"] == [{"key": "torch", "a": "a", "b": "b"}]
    assert pair["only_in_a"] == ["sdpa_auto/s2"] and pair["only_in_b"] == ["naive/s3"]
    # sdpa_auto's dispatch at the shapes both runs have (s3 is b's alone)
    assert pair["dispatch"] == [{"shape_key": "s1", "a": "dispatched to flash", "b": "dispatched to cudnn"},
                                {"shape_key": "s2", "a": "dispatched to cudnn", "b": None}]
    rows = {(r["variant"], r["shape_key"]): r for r in pair["rows"]}
    assert list(rows) == [("naive", "s1"), ("naive", "s2"), ("sdpa_auto", "s1"), ("sdpa_math", "s1")]
    # no backward and no torch.compile in either run: the backward and compile columns are empty
    none = dict.fromkeys(["bwd_status_a", "bwd_status_b", "bwd_kernels_a", "bwd_kernels_b", "bwd_a_ms", "bwd_b_ms", "bwd_ratio", "bwd_noise_threshold", "bwd_verdict",
                          "compile_a_s", "compile_b_s", "compile_ratio", "compile_cache_a", "compile_cache_b"])
    same = {"timing": "device time per forward (trace)", **none}
    # naive/s1: 3.0 / 2.0 = 1.5; threshold max(0.05, 0.2 / 2.0, 0.06 / 3.0) = 0.10; timing 3.3 / 2.2 = 1.5 agrees
    assert rows[("naive", "s1")] == {
        "variant": "naive", "shape_key": "s1", "status_a": "ok", "status_b": "ok", "kernels_a": 2.0, "kernels_b": 3.0,
        "kernels_added": ["extra"], "kernels_removed": [], "ops_added": ["aten::softmax"], "ops_removed": ["aten::copy_"],
        "time_a_ms": 2.0, "time_b_ms": 3.0, **same, "ratio": 1.5, "noise_threshold": pytest.approx(0.10),
        "timed_ratio": pytest.approx(1.5), "verdict": "slower"}
    # naive/s2: 4.2 / 4.0 = 1.05 inside b's own spread (5.25 - 3.15) / 4.2 = 0.5; the timing's 8.8 / 4.4 = 2
    # is not asked once the trace says "within noise"
    assert rows[("naive", "s2")] == {
        "variant": "naive", "shape_key": "s2", "status_a": "ok", "status_b": "ok", "kernels_a": 1.0, "kernels_b": 1.0,
        "kernels_added": ["k2b"], "kernels_removed": ["k2"], "ops_added": [], "ops_removed": [],
        "time_a_ms": 4.0, "time_b_ms": 4.2, **same, "ratio": pytest.approx(1.05), "noise_threshold": pytest.approx(0.5),
        "timed_ratio": 2.0, "verdict": "within noise"}
    # sdpa_auto/s1: 0.25 / 0.5 = 0.5, threshold max(0.05, 0.04, 0.02); b has no independent timing
    assert rows[("sdpa_auto", "s1")] == {
        "variant": "sdpa_auto", "shape_key": "s1", "status_a": "ok", "status_b": "ok", "kernels_a": 1.0, "kernels_b": 1.0,
        "kernels_added": [], "kernels_removed": [], "ops_added": [], "ops_removed": [],
        "time_a_ms": 0.5, "time_b_ms": 0.25, **same, "ratio": 0.5, "noise_threshold": 0.05, "timed_ratio": None, "verdict": "faster"}
    # sdpa_math/s1 ran out of memory in b: no time, no ratio
    assert rows[("sdpa_math", "s1")] == {
        "variant": "sdpa_math", "shape_key": "s1", "status_a": "ok", "status_b": "out_of_memory", "kernels_a": 1.0,
        "kernels_b": 0.0, "kernels_added": [], "kernels_removed": ["m"], "ops_added": [], "ops_removed": [],
        "time_a_ms": 5.0, "time_b_ms": None, **same, "ratio": None, "noise_threshold": None, "timed_ratio": None,
        "verdict": "not comparable"}


def test_the_first_result_set_is_the_baseline_of_every_pair():
    third = dict(NEW, name="c")
    doc = compare_runs([BASE, NEW, third])
    assert doc["baseline"] == "a" and [(p["a"], p["b"]) for p in doc["pairs"]] == [("a", "b"), ("a", "c")]
    with pytest.raises(ValueError, match="^compare needs at least two result sets$"):
        compare_runs([BASE])


def _cpu_run(name, ms, **cols):
    summary = pd.DataFrame([{"variant": "naive", "shape_key": "s", "status": "ok", "kernels_per_forward": NAN,
                             "device_ms_per_forward": NAN, "cpu_ms_per_forward": ms, **cols}])
    return {"name": name, "summary": summary, "kernels": None, "ops": None, "env": {}, "findings": {"shapes": []}}


def test_cpu_runs_compare_cpu_time_with_its_own_spread():
    # no device times (CPU runs): the CPU time per forward, its quartiles (1.5 - 0.9) / 1.2 = 0.5, then its
    # min-max (1.6 - 0.8) / 2.0 = 0.4 where no quartiles were recorded
    a = _cpu_run("a", 1.2, cpu_ms_q1=0.9, cpu_ms_q3=1.5, cpu_ms_min=0.1, cpu_ms_max=9.0)
    b = _cpu_run("b", 2.0, cpu_ms_min=0.8, cpu_ms_max=1.6)
    row = compare_runs([a, b])["pairs"][0]["rows"][0]
    assert row["timing"] == "CPU time per forward (trace)" and (row["time_a_ms"], row["time_b_ms"]) == (1.2, 2.0)
    assert row["noise_threshold"] == pytest.approx(0.5) and row["verdict"] == "slower"
    row = compare_runs([b, a])["pairs"][0]["rows"][0]
    assert row["noise_threshold"] == pytest.approx(0.5)
    c = _cpu_run("c", 2.0, cpu_ms_min=0.8, cpu_ms_max=1.6)
    row = compare_runs([c, _cpu_run("d", 2.2)])["pairs"][0]["rows"][0]
    assert row["noise_threshold"] == pytest.approx(0.4) and row["verdict"] == "within noise"
