"""The findings' arithmetic (shares, ratios, thresholds, sums, rankings, the tie and robustness rules, the
backward's attribution and summary) against values counted by hand: from the H200 trace JSON (tests/fixtures/h200,
read with json, not attnprof's reader), from table cells set here, or from the statistics module. Written for the
surviving mutants of the mutmut run over the findings package (docs/mutations.md, benchmarks/mutation.py --group
findings)."""
import gzip
import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnprof.analysis.backward import analyse_passes, assign_backward, backward_summary, backward_tables
from attnprof.findings import (FUSED, RunData, derived, kernel_class, kernel_group, matches, metric_cpu_excess,
                               metric_device_ratio, metric_fastest_fused, metric_kernels_plus_memcpy, metric_kernels_saved,
                               metric_main_occupancy, rule_speed, theoretical_occupancy)
from attnprof.findings.expectations import WITHIN_NOISE, _compare, verdict
from attnprof.findings.kernel_names import FP32_GEMM, fused_ops
from attnprof.findings.refs import clean
from attnprof.findings.rules.beyond import MAX_NAMED, rule_backward
from test_backward import ENGINE, MAIN, gpu, launch, rng, step

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
#: H200 deviceProperties as the traces carry them (per SM)
H200 = {"regsPerMultiprocessor": 65536, "maxThreadsPerMultiprocessor": 2048, "sharedMemPerMultiprocessor": 233472, "warpSize": 32}


def by_hand(variant: str) -> dict:
    """Per forward of the fixture trace, counted on the JSON: GPU events by category and their summed
    durations (us), each GPU event placed in the attn_fwd range that holds its launch (correlation id)."""
    ev = json.load(gzip.open(FIXTURES / variant / "trace.json.gz"))["traceEvents"]
    ranges = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation" and e["name"] == "attn_fwd")
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in e.get("args", {})}
    per = [{"kernel": 0, "gpu_memcpy": 0, "gpu_memset": 0, "us": 0.0, "names": {}} for _ in ranges]
    for e in ev:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        ts = launch_ts[e["args"]["correlation"]]
        (i,) = [i for i, (a, b) in enumerate(ranges) if a <= ts <= b]
        per[i][e["cat"]] += 1
        per[i]["us"] += e["dur"]
        per[i]["names"][e["name"]] = per[i]["names"].get(e["name"], 0.0) + e["dur"]
    return {"forwards": per, "ms": [f["us"] / 1e3 for f in per]}


# --- occupancy: the calculator's arithmetic, by hand -----------------------------------------------

@pytest.mark.parametrize("regs, threads, smem, expected", [
    # 64 regs x 32 = 2048 per warp; 8 warps -> 65536 // 16384 = 4 blocks (threads allow 8): 32 of 64 warps
    (64, 256, 0, 0.5),
    # 100 threads -> ceil 4 warps; 33 regs x 32 = 1056 -> 5 units of 256 = 1280 per warp -> 65536 // 5120 = 12
    # blocks; threads allow 64 // 4 = 16: 12 x 4 = 48 of 64 warps
    (33, 100, None, 0.75),
    # tiny blocks: registers allow 128, threads 64, the 32-block limit decides: 32 x 1 of 64 warps
    (16, 32, 0, 0.5),
    # shared memory decides: 233472 // 100000 = 2 blocks x 4 warps = 8 of 64
    (32, 128, 100000, 0.125),
    # 96 threads = 3 warps, 16 regs: threads allow 64 // 3 = 21 blocks (not 21.3), registers 42: 63 of 64 warps
    (16, 96, 0, 63 / 64),
    # 255 regs x 128 threads (FlashAttention-2): 255 x 32 = 8160 -> 32 units = 8192 per warp; 65536 // 32768 = 2 blocks
    (255, 128, 49152, 0.125),
])
def test_theoretical_occupancy_by_hand(regs, threads, smem, expected):
    assert theoretical_occupancy(regs, threads, smem, H200) == pytest.approx(expected, abs=1e-12)


def test_theoretical_occupancy_defaults_and_unknowns():
    # no warpSize in the properties: 32 threads per warp, as on every NVIDIA GPU
    props = {k: v for k, v in H200.items() if k != "warpSize"}
    assert theoretical_occupancy(64, 256, 0, props) == pytest.approx(0.5)
    # no shared-memory size: no shared-memory limit (the register limit of 4 blocks decides)
    props = {k: v for k, v in H200.items() if k != "sharedMemPerMultiprocessor"}
    assert theoretical_occupancy(64, 256, 10**9, props) == pytest.approx(0.5)
    for missing in ("regsPerMultiprocessor", "maxThreadsPerMultiprocessor"):
        assert theoretical_occupancy(64, 256, 0, {k: v for k, v in H200.items() if k != missing}) is None
    assert theoretical_occupancy(0, 256, 0, H200) is None and theoretical_occupancy(64, 0, 0, H200) is None


# --- references -------------------------------------------------------------------------------------

def test_derived_numbers():
    a, b = {"value": 6.0}, {"value": 4.0}
    assert derived("ratio", [a, b])["value"] == 1.5 and derived("difference", [a, b])["value"] == 2.0
    assert derived("sum", [a, b, {"value": 0.5}])["value"] == 10.5
    assert derived("ratio", [a, {"value": 0}])["value"] is None  # no ratio over zero
    assert derived("ratio", [{"value": 0.0}, b])["value"] == 0.0
    assert derived("sum", [a, {"value": None}])["value"] is None and derived("difference", [{"value": None}, b])["value"] is None
    out = derived("sum", [a, b], "us")
    assert (out["unit"], out["formula"], out["inputs"]) == ("us", "sum", [a, b])
    with pytest.raises(ValueError, match="unknown formula"):
        derived("mean", [a, b])


def test_clean_cells():
    assert clean(None) is None and clean(float("nan")) is None and clean(np.float64("nan")) is None
    v = clean(np.int64(7))
    assert v == 7 and type(v) is int
    assert clean(2.5) == 2.5 and clean("x") == "x" and clean(0) == 0


# --- kernel classes ----------------------------------------------------------------------------------

def test_kernel_classes():
    assert kernel_class("anything", "memcpy") == "memcpy" and kernel_class("anything", "memset") == "memset"
    assert kernel_class("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false>>(Params)") == \
        "fused attention"
    assert kernel_class("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64>>(Params)") == \
        "attention pre/post"
    assert kernel_class("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Traits>(Params)") == "fused attention"
    # the FP32 GEMM class is checked before GEMM: an f32 cuBLAS kernel is not a tensor-core GEMM
    fp32 = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel_trt"
    assert kernel_group(fp32) == "FP32 GEMM" and kernel_class(fp32) == "FP32 GEMM"
    assert kernel_class("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT") == "GEMM"
    assert kernel_class("triton_per_fused__softmax_masked_fill_0") == "Triton (inductor)"
    assert kernel_class("void some::unknown_kernel<int>(int)") == "other kernel" and kernel_group("void some::unknown_kernel()") is None
    k = pd.DataFrame({"kernel": [fp32, "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "void at::native::triu_tril_kernel<bool>()"]})
    assert list(matches(k, FP32_GEMM)) == [True, False, False]


def test_fused_ops_of_triton_names():
    assert fused_ops("triton_per_fused__softmax_exp_masked_fill_mul_0") == ["_softmax", "exp", "masked", "fill", "mul"]
    assert fused_ops("triton_poi_fused_add_12") == ["add"]
    assert fused_ops("triton_red_fused__to_copy_sum_3") == ["_to", "copy", "sum"]
    assert fused_ops("triton_poi_fused_add") == [] and fused_ops("void at::native::add_kernel()") == []
    assert fused_ops("triton_poi_fused__0") == []  # the name's pattern, but no op in it


# --- metrics on the H200 fixture, against counts on the trace JSON ----------------------------------

def test_kernel_counts_and_savings_counted_on_the_json(h200_data):
    naive, math, inplace = by_hand("naive"), by_hand("sdpa_math"), by_hand("naive_inplace")
    # every forward of each fixture launched the same work: count on forward 0
    kpm = {v: h["forwards"][0]["kernel"] + h["forwards"][0]["gpu_memcpy"] for v, h in
           (("naive", naive), ("sdpa_math", math), ("naive_inplace", inplace))}
    assert kpm == {"naive": 6, "sdpa_math": 20, "naive_inplace": 5}  # 5 kernels + 1 memcpy; 20 kernels; 5 kernels
    for v, n in kpm.items():
        assert metric_kernels_plus_memcpy(h200_data, [v])["value"] == n
    # what sdpa_math launches beyond naive_inplace: 20 - 5, not 5 - 20
    assert metric_kernels_saved(h200_data, ["naive_inplace", "sdpa_math"])["value"] == 15
    assert metric_kernels_saved(h200_data, ["sdpa_math", "naive"])["value"] == 6 - 20


def test_device_ratio_and_fastest_fused_from_the_json(h200_data):
    med = {v: statistics.median(by_hand(v)["ms"]) for v in ("sdpa_math", "naive_inplace", *FUSED)}
    r = metric_device_ratio(h200_data, ["sdpa_math", "naive_inplace"])
    assert r["value"] == pytest.approx(med["sdpa_math"] / med["naive_inplace"], rel=1e-6) and r["formula"] == "ratio"
    assert [(i["variant"], i["column"], i["unit"]) for i in r["inputs"]] == [
        ("sdpa_math", "device_ms_per_forward", "ms"), ("naive_inplace", "device_ms_per_forward", "ms")]
    best = min(FUSED, key=med.get)
    assert metric_fastest_fused(h200_data, list(FUSED))["value"] == best
    assert metric_fastest_fused(h200_data, list(reversed(FUSED)))["value"] == best
    # the slowest fused one is not named while a faster one ran
    worst = max(FUSED, key=med.get)
    assert worst != best and metric_fastest_fused(h200_data, [worst, best])["value"] == best


def _rows(times: dict, device: str = "cpu") -> RunData:
    """A run's summary: variant -> (median, min, max ms, independent timing median[, status]). On a CPU run the
    times are the host time per forward; on a GPU run device time (host time then 10x the device time)."""
    rows = []
    for v, t in times.items():
        med, lo, hi, timed = t[:4]
        status = t[4] if len(t) > 4 else "ok"
        gpu_ = device == "cuda"
        rows.append({"variant": v, "shape_key": "s", "status": status, "device": device, "dtype": "fp32",
                     "kernels_per_forward": None, "memcpy_per_forward": None,
                     "device_ms_per_forward": med if gpu_ else None, "device_ms_min": lo if gpu_ else None,
                     "device_ms_max": hi if gpu_ else None,
                     "cpu_ms_per_forward": med * (10 if gpu_ else 1), "cpu_ms_min": lo, "cpu_ms_max": hi,
                     "timed_ms_median": timed, "timed_ms_min": timed, "timed_ms_max": timed, "rel_error": 1e-7,
                     "rel_error_ok": True, "reason": "", "graph_ms_median": None})
    return RunData("s", pd.DataFrame(rows), pd.DataFrame(columns=["variant", "kernel", "category", "calls_per_forward"]),
                   pd.DataFrame(columns=["variant", "api"]), pd.DataFrame(columns=["variant", "op"]), {}, [])


def test_metrics_on_a_cpu_run_use_host_times():
    # flash is the fastest that ran, though not the first by name; cudnn has the lowest number but did not run
    d = _rows({"sdpa_flash": (2.0, 1.9, 2.1, 2.0), "sdpa_efficient": (3.0, 2.9, 3.1, 3.0), "sdpa_cudnn": (1.0, 0.9, 1.1, 1.0, "failed")})
    r = metric_device_ratio(d, ["sdpa_efficient", "sdpa_flash"])
    assert r["value"] == pytest.approx(1.5) and [i["column"] for i in r["inputs"]] == ["cpu_ms_per_forward"] * 2
    r = metric_fastest_fused(d, ["sdpa_efficient", "sdpa_flash", "sdpa_cudnn"])
    assert (r["value"], r["unit"], r["formula"]) == ("sdpa_flash", "", "argmin")
    assert [(i["variant"], i["column"], i["unit"], i["value"]) for i in r["inputs"]] == [
        ("sdpa_efficient", "cpu_ms_per_forward", "ms", 3.0), ("sdpa_flash", "cpu_ms_per_forward", "ms", 2.0)]
    assert metric_fastest_fused(d, ["sdpa_cudnn"]) == {"value": None}


def test_cpu_excess_is_over_the_slowest_other_that_ran():
    # naive 5.0 ms; others 3.0 and 4.0 (mean 3.5, min 3.0): the excess is over 4.0; the 4.5 one failed
    d = _rows({"naive": (5.0, 4.9, 5.1, 5.0), "a": (3.0, 2.9, 3.1, 3.0), "b": (4.0, 3.9, 4.1, 4.0),
               "c": (4.5, 4.4, 4.6, 4.5, "failed")})
    r = metric_cpu_excess(d, ["naive", "b", "a", "c"])
    assert r["value"] == pytest.approx(1.0) and r["formula"] == "difference" and r["unit"] == "ms"
    assert [(i["variant"], i["unit"]) for i in r["inputs"]] == [("naive", "ms"), ("b", "ms")]
    assert metric_cpu_excess(d, ["naive", "c"]) == {"value": None}


def test_main_kernel_is_the_longest_kernel_not_a_copy():
    kernels = pd.DataFrame({"variant": "v", "kernel": ["Memcpy DtoD (Device -> Device)", "k_long", "k_short"],
                            "category": ["memcpy", "kernel", "kernel"], "est_occupancy_pct": [None, 37.5, 12.5]})
    d = _rows({"v": (1.0, 0.9, 1.1, 1.0)}, "cuda")
    d.kernels = kernels
    assert metric_main_occupancy(d, ["v"])["value"] == 37.5
    d.kernels = kernels.iloc[:1]
    assert metric_main_occupancy(d, ["v"]) == {"value": None}


# --- expectations' comparisons at their boundaries --------------------------------------------------

def test_compare_boundaries():
    assert _compare(1.25, 1.0, "approx", 0.25) and not _compare(1.3, 1.0, "approx", 0.25)
    assert _compare(0.75, 1.0, "approx", 0.25) and not _compare(0.7, 1.0, "approx", 0.25)
    assert _compare(12.0, 10.0, "within", 2.0) and _compare(8.0, 10.0, "within", 2.0) and not _compare(12.5, 10.0, "within", 2.0)
    assert _compare(3, 3, "eq", None) and not _compare(3, 4, "eq", None)
    assert _compare(3.1, 3, "gt", None) and not _compare(3, 3, "gt", None)
    with pytest.raises(ValueError, match="unknown compare"):
        _compare(1, 1, "ge", None)


# --- expectations on times and rankings: they must hold outside the spread of the forwards -------

def test_cpu_excess_spread_uses_the_others_largest_max_and_largest_min():
    # the other with the largest median (b, 4.0) is not the one with the largest max (a, 4.6) nor min (b2)
    d = _rows({"naive": (5.0, 4.2, 5.5, 5.0), "a": (3.0, 2.0, 4.6, 3.0), "b": (4.0, 3.95, 4.1, 4.0),
               "b2": (3.98, 3.97, 4.05, 4.0)})
    r = metric_cpu_excess(d, ["naive", "a", "b", "b2"])
    assert r["value"] == pytest.approx(1.0)  # 5.0 - 4.0
    low, high = r["spread"]["low"], r["spread"]["high"]
    assert low["value"] == pytest.approx(4.2 - 4.6) and [(i["variant"], i["column"]) for i in low["inputs"]] == [
        ("naive", "cpu_ms_min"), ("a", "cpu_ms_max")]
    assert high["value"] == pytest.approx(5.5 - 3.97) and [(i["variant"], i["column"]) for i in high["inputs"]] == [
        ("naive", "cpu_ms_max"), ("b2", "cpu_ms_min")]


def test_device_ratio_spread_divides_opposite_ends():
    d = _rows({"m": (3.0, 2.8, 3.3, 3.0), "n": (1.0, 0.9, 1.2, 1.0)}, "cuda")
    r = metric_device_ratio(d, ["m", "n"])
    assert r["value"] == pytest.approx(3.0)
    assert r["spread"]["low"]["value"] == pytest.approx(2.8 / 1.2) and r["spread"]["high"]["value"] == pytest.approx(3.3 / 0.9)
    assert [i["column"] for i in r["spread"]["low"]["inputs"]] == ["device_ms_min", "device_ms_max"]


def test_fastest_lists_the_variants_it_cannot_rank_against():
    # flash fastest by median; cudnn's range touches flash's (1.2 = 1.2), efficient's does not (1.21 > 1.2)
    d = _rows({"sdpa_flash": (1.0, 0.9, 1.2, 1.0), "sdpa_cudnn": (1.1, 1.2, 1.3, 1.1),
               "sdpa_efficient": (1.3, 1.21, 1.4, 1.3)}, "cuda")
    r = metric_fastest_fused(d, ["sdpa_efficient", "sdpa_cudnn", "sdpa_flash"])
    assert r["value"] == "sdpa_flash" and r["tied"] == ["sdpa_cudnn", "sdpa_flash"]
    assert [(i["variant"], i["column"]) for i in r["spread_inputs"]][:2] == [("sdpa_efficient", "device_ms_min"),
                                                                            ("sdpa_efficient", "device_ms_max")]
    # a range below the fastest's (a slower median, a lower min) overlaps it too
    d = _rows({"sdpa_flash": (1.0, 0.9, 1.2, 1.0), "sdpa_cudnn": (1.5, 0.5, 2.0, 1.5)}, "cuda")
    assert metric_fastest_fused(d, ["sdpa_flash", "sdpa_cudnn"])["tied"] == ["sdpa_flash", "sdpa_cudnn"]


def test_spreads_carry_units_and_need_every_end():
    d = _rows({"m": (3.0, 2.8, 3.3, 3.0), "n": (1.0, 0.9, 1.2, 1.0), "x": (2.0, float("nan"), 2.2, 2.0)}, "cuda")
    r = metric_device_ratio(d, ["m", "n"])
    assert {i["unit"] for end in ("low", "high") for i in r["spread"][end]["inputs"]} == {"ms"}
    assert metric_device_ratio(d, ["x", "n"])["spread"] is None  # x has no min: no spread, the value alone
    c = _rows({"naive": (5.0, 4.2, 5.5, 5.0), "a": (3.0, 2.0, 4.6, 3.0)})
    e = metric_cpu_excess(c, ["naive", "a"])
    assert {e["spread"][end]["unit"] for end in ("low", "high")} == {"ms"}
    assert {i["unit"] for end in ("low", "high") for i in e["spread"][end]["inputs"]} == {"ms"}
    f = metric_fastest_fused(d, ["m", "n"])
    assert {i["unit"] for i in f["spread_inputs"]} == {"ms"}


def test_cpu_excess_without_an_others_range_has_no_spread_and_no_confident_verdict():
    # b has no max: the low end is unknown (b's forwards may reach above naive's), so no spread, and a claim
    # that holds on the medians (5.0 - 4.0 > 0) is within noise, not the same
    d = _rows({"naive": (5.0, 4.2, 5.5, 5.0), "a": (3.0, 2.0, 4.6, 3.0), "b": (4.0, 3.97, float("nan"), 4.0)})
    r = metric_cpu_excess(d, ["naive", "a", "b"])
    assert r["value"] == pytest.approx(1.0) and r["spread"] is None
    assert verdict(r, 0, "gt", None)[0] == WITHIN_NOISE
    # the median column without a value in one of the others: the largest of the rest
    d = _rows({"naive": (5.0, 4.2, 5.5, 5.0), "a": (3.0, 2.0, 4.6, 3.0), "b": (float("nan"), 3.9, 4.1, 4.0)})
    assert metric_cpu_excess(d, ["naive", "a", "b"])["value"] == pytest.approx(2.0)


def test_fastest_cannot_be_ranked_against_a_variant_without_a_range_or_one_touching_from_below():
    d = _rows({"sdpa_flash": (1.0, 0.9, 1.2, 1.0), "sdpa_cudnn": (1.5, float("nan"), 2.0, 1.5),
               "sdpa_efficient": (2.0, 1.9, float("nan"), 2.0)}, "cuda")
    assert metric_fastest_fused(d, ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient"])["tied"] == [
        "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]
    # a slower median whose range ends exactly where the fastest's begins (0.9): tied
    d = _rows({"sdpa_flash": (1.0, 0.9, 1.2, 1.0), "sdpa_cudnn": (1.5, 0.5, 0.9, 1.5)}, "cuda")
    assert metric_fastest_fused(d, ["sdpa_flash", "sdpa_cudnn"])["tied"] == ["sdpa_flash", "sdpa_cudnn"]


def _obs(value, low=None, high=None, tied=None):
    o = {"value": value}
    if low is not None:
        o["spread"] = {"low": {"value": low}, "high": {"value": high}}
    if tied is not None:
        o["tied"] = tied
    return o


@pytest.mark.parametrize("obs, expected, how, tol, result", [
    # gt 0: the median difference is above 0 in all three; only the spread decides
    (_obs(0.006, -0.01, 0.02), 0, "gt", None, WITHIN_NOISE),
    (_obs(0.006, 0.001, 0.02), 0, "gt", None, "same"),
    (_obs(0.006, 0.0, 0.02), 0, "gt", None, WITHIN_NOISE),  # 0 is not above 0
    (_obs(-0.006, -0.02, -0.001), 0, "gt", None, "different"),
    (_obs(-0.01, -0.02, 0.0), 0, "gt", None, "different"),  # its high end reaches 0 but is not above it
    # approx 3.7 +- 15 % (3.145 .. 4.255): inside, one end out, both out on one side, both out around it
    (_obs(3.6, 3.5, 3.9), 3.7, "approx", 0.15, "same"),
    (_obs(3.4, 3.0, 3.5), 3.7, "approx", 0.15, WITHIN_NOISE),
    (_obs(2.3, 2.0, 2.5), 3.7, "approx", 0.15, "different"),
    (_obs(3.7, 2.0, 5.0), 3.7, "approx", 0.15, WITHIN_NOISE),
    # within 2 of 10: ends 7.9 and 12.1 both out, around 10
    (_obs(10.0, 7.9, 12.1), 10.0, "within", 2.0, WITHIN_NOISE),
    (_obs(13.0, 12.1, 14.0), 10.0, "within", 2.0, "different"),
    # no spread: the value alone (kernel counts)
    (_obs(5), 5, "eq", None, "same"),
    (_obs(6), 5, "eq", None, "different"),
    # rankings: expected fastest and alone; fastest but tied; not fastest but tied; not fastest, not tied
    (_obs("sdpa_flash", tied=["sdpa_flash"]), "sdpa_flash", "eq", None, "same"),
    (_obs("sdpa_flash", tied=["sdpa_cudnn", "sdpa_flash"]), "sdpa_flash", "eq", None, WITHIN_NOISE),
    (_obs("sdpa_cudnn", tied=["sdpa_cudnn", "sdpa_flash"]), "sdpa_flash", "eq", None, WITHIN_NOISE),
    (_obs("sdpa_cudnn", tied=["sdpa_cudnn", "sdpa_efficient"]), "sdpa_flash", "eq", None, "different"),
])
def test_verdict_needs_the_claim_to_hold_at_both_ends_of_the_spread(obs, expected, how, tol, result):
    got, why = verdict(obs, expected, how, tol)
    assert got == result
    assert bool(why) == (result == WITHIN_NOISE)


# --- rule_speed: the tie and the robustness rules at their boundaries ------------------------------

def _fastest(d):
    return rule_speed(d)[-1]


def test_fastest_ties_when_its_slowest_forward_equals_the_runner_ups_fastest():
    f = _fastest(_rows({"sdpa_flash": (1.0, 0.9, 1.2, 1.0), "sdpa_efficient": (1.3, 1.2, 1.4, 1.3)}))
    assert f["headline"] == "ties with sdpa_efficient for fastest" and f["kind"] == "warning"
    f = _fastest(_rows({"sdpa_flash": (1.0, 0.9, 1.19, 1.0), "sdpa_efficient": (1.3, 1.2, 1.4, 1.3)}))
    assert f["headline"] == "fastest variant" and f["kind"] == "observation"
    assert (f["numbers"]["fastest_max"]["value"], f["numbers"]["runner_up_min"]["value"]) == (1.19, 1.2)


def test_runner_up_is_the_second_fastest_by_median():
    # medians 1.0 < 1.2 < 3.0: the runner-up is b (min 1.25 <= a's max 1.3: a tie), not c (min 2.9)
    d = _rows({"c": (3.0, 2.9, 3.1, 3.0), "a": (1.0, 0.9, 1.3, 1.0), "b": (1.2, 1.25, 1.4, 1.2)})
    f = _fastest(d)
    assert f["variants"] == ["a"] and f["headline"] == "ties with b for fastest"
    assert (f["numbers"]["fastest"]["value"], f["numbers"]["runner_up"]["value"], f["numbers"]["runner_up_min"]["value"]) == (1.0, 1.2, 1.25)
    # one variant: fastest, with nothing to tie with
    f = _fastest(_rows({"a": (1.0, 0.9, 1.3, 1.0)}))
    assert f["variants"] == ["a"] and "runner_up" not in f["numbers"] and f["kind"] == "observation"


def test_a_variant_without_a_median_is_not_ranked():
    d = _rows({"a": (float("nan"), float("nan"), float("nan"), 1.0), "b": (2.0, 1.9, 2.1, 2.0), "c": (3.0, 2.9, 3.1, 3.0)})
    f = _fastest(d)
    assert f["variants"] == ["b"] and f["numbers"]["runner_up"]["variant"] == "c"


def test_fused_backends_are_listed_by_median_on_a_gpu():
    d = _rows({"sdpa_flash": (2.0, 1.9, 2.1, 2.0), "sdpa_cudnn": (1.0, 0.9, 1.1, 1.0), "naive": (5.0, 4.9, 5.1, 5.0)}, "cuda")
    f = _fastest(d)
    assert f["variants"] == ["sdpa_cudnn"] and f["numbers"]["fastest"]["column"] == "device_ms_per_forward"
    assert "fused backends by median: cudnn 1 ms, flash 2 ms" in f["statement"]
    assert "naive" not in f["numbers"] and f["numbers"]["sdpa_flash"]["value"] == 2.0


@pytest.mark.parametrize("math, inplace, doubt", [
    # trace ratio 2.5, independent 2.0: 1.25 apart, not more
    ((2.5, 2.4, 2.6, 2.0), (1.0, 0.9, 1.1, 1.0), False),
    # trace 2.0, independent 2.5: 1.25 the other way
    ((2.0, 1.9, 2.1, 2.5), (1.0, 0.9, 1.1, 1.0), False),
    ((2.6, 2.5, 2.7, 2.0), (1.0, 0.9, 1.1, 1.0), True),  # 1.3
    ((2.0, 1.9, 2.1, 2.6), (1.0, 0.9, 1.1, 1.0), True),  # 1.3 the other way
])
def test_timing_disagreement_boundary(math, inplace, doubt):
    f = rule_speed(_rows({"sdpa_math": math, "naive_inplace": inplace}))[0]
    assert ("disagree" in f["statement"]) is doubt and f["kind"] == ("warning" if doubt else "observation")
    assert "overlap" not in f["statement"]


def test_timing_disagreement_when_math_is_the_faster():
    # trace 1.0 / 2.0 = 0.5, independent 1.6 / 2.0 = 0.8: 1.6x apart, a warning with both ratios below 1
    f = rule_speed(_rows({"sdpa_math": (1.0, 0.9, 1.1, 1.6), "naive_inplace": (2.0, 1.9, 2.1, 2.0)}))[0]
    assert f["kind"] == "warning" and "disagree" in f["statement"] and "overlap" not in f["statement"]
    assert (f["numbers"]["ratio"]["value"], f["numbers"]["timed_ratio"]["value"]) == (0.5, 0.8)


@pytest.mark.parametrize("math, inplace, overlap", [
    ((2.0, 1.5, 2.5, 2.0), (1.2, 1.0, 1.5, 1.2), True),   # math's fastest == inplace's slowest
    ((2.0, 1.51, 2.5, 2.0), (1.2, 1.0, 1.5, 1.2), False),
    ((1.2, 1.0, 1.5, 1.2), (2.0, 1.5, 2.5, 2.0), True),   # inplace's fastest == math's slowest
    ((1.2, 1.0, 1.49, 1.2), (2.0, 1.5, 2.5, 2.0), False),
])
def test_range_overlap_boundary(math, inplace, overlap):
    f = rule_speed(_rows({"sdpa_math": math, "naive_inplace": inplace}))[0]
    assert ("their ranges over the forwards (one repeat) overlap" in f["statement"]) is overlap
    assert f["numbers"]["ratio"]["value"] == pytest.approx(math[0] / inplace[0])
    assert (f["numbers"]["math_min"]["value"], f["numbers"]["inplace_max"]["value"]) == (math[1], inplace[2])


#: rule_speed's two statements written out by hand for three runs: the ratio 2.5 / 1.1 = 2.2727 (3 significant
#: digits: 2.27; 4 would be 2.273), the independent timing's 1.5 / 1.1 = 1.3636 (1.36) or 2.5 / 1.1 again; the
#: two ratios 1.67x apart (> 1.25x) in the first two runs. CPU run: math 1-3 ms overlaps inplace 0.9-1.2 ms, and
#: inplace's slowest forward (1.2) reaches math's fastest (1): a tie. GPU runs: 2.4-2.6 ms against 1-1.2 ms, and
#: flash's slowest (0.55) under efficient's fastest (0.7), the fused backends listed by median. One repeat: the
#: time is the median of the profiled forwards, said once; each range with an en dash and its unit once.
_SPEED_CASES = {
    "cpu, both doubts": (
        "cpu", {"sdpa_math": (2.5, 1.0, 3.0, 1.5), "naive_inplace": (1.1, 0.9, 1.2, 1.1)},
        "sdpa_math takes 2.27x the time of naive_inplace (2.5 ms vs 1.1 ms, host time per forward (CPU run): median of "
        "the profiled forwards; ranges over the forwards (one repeat) 1\u20133 ms and 0.9\u20131.2 ms); independent "
        "timing gives 1.36x (1.5 ms vs 1.1 ms, median); not a finding: the trace and the independent timing disagree by "
        "more than 1.25x (on a CPU the profiler's own cost is part of the traced time) and their ranges over the forwards "
        "(one repeat) overlap",
        "2.27x the time of naive_inplace (not robust)", "warning",
        "no clear fastest variant: naive_inplace (1.1 ms) and sdpa_math (2.5 ms) tie within the spread (naive_inplace's "
        "slowest forward 1.2 ms >= sdpa_math's fastest 1 ms; host time per forward (CPU run): median of the profiled "
        "forwards)",
        "ties with sdpa_math for fastest"),
    "gpu, disagreement": (
        "cuda", {"sdpa_math": (2.5, 2.4, 2.6, 1.5), "naive_inplace": (1.1, 1.0, 1.2, 1.1),
                 "sdpa_flash": (0.5, 0.45, 0.55, 0.5), "sdpa_efficient": (0.8, 0.7, 0.9, 0.8)},
        "sdpa_math takes 2.27x the time of naive_inplace (2.5 ms vs 1.1 ms, trace device time per forward: median of the "
        "profiled forwards; ranges over the forwards (one repeat) 2.4\u20132.6 ms and 1\u20131.2 ms); independent timing "
        "gives 1.36x (1.5 ms vs 1.1 ms, median); not a finding: the trace and the independent timing disagree by more "
        "than 1.25x",
        "2.27x the time of naive_inplace (not robust)", "warning",
        "fastest variant: sdpa_flash (0.5 ms, trace device time per forward: median of the profiled forwards); its "
        "slowest forward (0.55 ms) beats "
        "the fastest of sdpa_efficient (0.7 ms); fused backends by median: flash 0.5 ms, efficient 0.8 ms",
        "fastest variant"),
    "gpu, robust": (
        "cuda", {"sdpa_math": (2.5, 2.4, 2.6, 2.5), "naive_inplace": (1.1, 1.0, 1.2, 1.1)},
        "sdpa_math takes 2.27x the time of naive_inplace (2.5 ms vs 1.1 ms, trace device time per forward: median of the "
        "profiled forwards; ranges over the forwards (one repeat) 2.4\u20132.6 ms and 1\u20131.2 ms); independent timing "
        "gives 2.27x (2.5 ms vs 1.1 ms, median)",
        "2.27x the time of naive_inplace", "observation",
        "fastest variant: naive_inplace (1.1 ms, trace device time per forward: median of the profiled forwards); its "
        "slowest forward (1.2 ms) "
        "beats the fastest of sdpa_math (2.4 ms)",
        "fastest variant"),
}


@pytest.mark.parametrize("case", list(_SPEED_CASES))
def test_speed_statements_state_every_number_with_its_unit_and_verdict(case):
    device, times, statement, headline, kind, fastest_statement, fastest_headline = _SPEED_CASES[case]
    ratio, fastest = rule_speed(_rows(times, device))  # no kernel rows: no breakdown
    assert (ratio["variants"], ratio["statement"], ratio["headline"], ratio["kind"]) == (
        ["sdpa_math", "naive_inplace"], statement, headline, kind)
    assert (fastest["statement"], fastest["headline"]) == (fastest_statement, fastest_headline)
    # every number of the ratio finding names its cell, in ms
    col = "device_ms" if device == "cuda" else "cpu_ms"
    cells = {k: (n["variant"], n["column"], n["unit"]) for k, n in ratio["numbers"].items() if "formula" not in n}
    assert cells == {"math": ("sdpa_math", f"{col}_per_forward", "ms"), "inplace": ("naive_inplace", f"{col}_per_forward", "ms"),
                     "math_min": ("sdpa_math", f"{col}_min", "ms"), "math_max": ("sdpa_math", f"{col}_max", "ms"),
                     "inplace_min": ("naive_inplace", f"{col}_min", "ms"), "inplace_max": ("naive_inplace", f"{col}_max", "ms")}
    assert [(i["variant"], i["column"], i["unit"]) for i in ratio["numbers"]["timed_ratio"]["inputs"]] == [
        ("sdpa_math", "timed_ms_median", "ms"), ("naive_inplace", "timed_ms_median", "ms")]
    assert {n["unit"] for k, n in fastest["numbers"].items()} == {"ms"}


def test_math_over_inplace_needs_both_to_have_run_and_its_breakdown_a_complete_math():
    """No ratio finding unless sdpa_math and naive_inplace both ran ok; on a GPU run no breakdown of an sdpa_math
    whose trace was incomplete, though its capture wrote kernel rows (extract.py tables every traced capture)."""
    for status in ({"sdpa_math": "ok", "naive_inplace": "failed"}, {"sdpa_math": "failed", "naive_inplace": "ok"}):
        d = _rows({v: (1.0, 0.9, 1.1, 1.0, s) for v, s in status.items()})
        assert [f["variants"] for f in rule_speed(d)] == [[v for v, s in status.items() if s == "ok"]]
    d = _rows({"sdpa_math": (2.0, 1.9, 2.1, 2.0, "incomplete_trace"), "naive_inplace": (1.0, 0.9, 1.1, 1.0)}, "cuda")
    d.kernels = pd.DataFrame({"variant": "sdpa_math", "kernel": ["sgemm_a", "softmax_k"], "category": "kernel",
                              "us_per_forward": [3.0, 1.0]})
    assert [f["variants"] for f in rule_speed(d)] == [["naive_inplace"]]


@pytest.mark.parametrize("math", [
    (2.5, 2.4, 2.6, 0.0),  # the independent timing reads 0: ratio 0 / 1.1 = 0
    (0.0, 0.0, 0.0, 2.5),  # the trace reads 0: ratio 0
])
def test_a_zero_time_makes_no_disagreement_claim(math):
    # a ratio of 0 cannot be set against the other ratio (it would divide by 0): no doubt, no failure
    ratio = rule_speed(_rows({"sdpa_math": math, "naive_inplace": (1.1, 1.0, 1.2, 1.1)}, "cuda"))[0]
    assert ratio["kind"] == "observation" and "not a finding" not in ratio["statement"]
    assert 0.0 in (ratio["numbers"]["ratio"]["value"], ratio["numbers"]["timed_ratio"]["value"])


def test_math_breakdown_by_kernel_group_from_the_json(h200_data):
    """sdpa_math's device time by kernel group: the FP32 GEMMs and the softmax summed on the JSON (all 10
    forwards timed, so per forward = total / 10), the groups ordered by time, and all groups adding up to the
    forward's device time."""
    hand = by_hand("sdpa_math")
    total = {}
    for f in hand["forwards"]:
        for name, us in f["names"].items():
            total[name] = total.get(name, 0.0) + us
    fp32 = sum(us for n, us in total.items() if "gemm_f32f32" in n) / 10
    softmax = sum(us for n, us in total.items() if "softmax_warp_forward" in n) / 10
    found = [f for f in rule_speed(h200_data) if f["variants"] == ["sdpa_math"] and "by kernel group" in f["statement"]]
    assert len(found) == 1
    nums = found[0]["numbers"]
    assert nums["FP32 GEMM_us_per_forward"]["value"] == pytest.approx(fp32, rel=1e-6)
    assert nums["softmax_us_per_forward"]["value"] == pytest.approx(softmax, rel=1e-6)
    values = [n["value"] for n in nums.values()]
    assert values == sorted(values, reverse=True) and values[0] == nums["FP32 GEMM_us_per_forward"]["value"]
    assert sum(values) == pytest.approx(sum(total.values()) / 10, rel=1e-6)
    assert "FP32 GEMM 963 µs (2 kernels)" in found[0]["statement"]


# --- the backward: attribution at the windows' edges, the summary's statistics ----------------------

def test_engine_launches_at_the_window_edges_belong_to_the_backward():
    """Backward 0's window is [120, 150] (attn_bwd at 100 + 20, 30 long): engine-thread launches at 120 and at
    150 are its own; at 119 and 151 they are nobody's."""
    events = step(100, 1, 50) + step(200, 11, 60)
    ts = pd.Series([119.0, 120.0, 150.0, 151.0])
    tid = pd.Series([ENGINE] * 4)
    from attnprof.analysis.trace import events_frame, forward_ranges

    ev = events_frame({"traceEvents": events})
    ranges = forward_ranges(ev, "attn_bwd")
    ranges.attrs["forward_ranges"] = forward_ranges(ev, "attn_fwd")
    assert list(assign_backward(ts, tid, ranges)) == [-1, 0, 0, -1]
    # on the ranges' own thread the same-thread rule decides; a forward range of the engine thread keeps its work
    assert list(assign_backward(pd.Series([130.0]), pd.Series([MAIN]), ranges)) == [0]
    assert list(assign_backward(pd.Series([105.0]), pd.Series([ENGINE]), ranges)) == [-1]


def test_a_forward_of_the_engine_thread_inside_a_backward_window_keeps_its_launch():
    """A forward range on the engine thread at [125, 135], inside backward 0's window [120, 150] on the main
    thread: its launch at 130 is the forward's, never the backward's; the engine's launch at 140 is the backward's."""
    from attnprof.analysis.trace import events_frame, forward_ranges

    ev = events_frame({"traceEvents": step(100, 1, 50) + [rng("attn_fwd", 125, 10, tid=ENGINE)]})
    ranges = forward_ranges(ev, "attn_bwd")
    ranges.attrs["forward_ranges"] = forward_ranges(ev, "attn_fwd")
    assert list(assign_backward(pd.Series([130.0, 140.0]), pd.Series([ENGINE, ENGINE]), ranges)) == [-1, 0]


def test_a_launch_in_two_windows_is_counted_once_per_range_as_ambiguous():
    # backward 1's window [220, 250] and a third thread's [240, 260]: the launch at 245 is in both, the one at
    # 255 only in the third's (so it is attributed, not ambiguous)
    extra = [rng("attn_bwd", 240, 20, tid=3), launch(245, 95, ENGINE), gpu("both", 247, 95),
             launch(255, 96, ENGINE), gpu("third_only", 257, 96)]
    events = step(100, 1, 50) + step(200, 11, 60) + extra
    _, bwd = analyse_passes({"traceEvents": events, "deviceProperties": [{"id": 0}]}, "attn_fwd", expect_gpu=True)
    b = backward_tables(bwd, "v", "s")["backwards"]
    assert list(b["ambiguous_launches"]) == [0, 1, 1] and list(b["kernels"]) == [2, 2, 1]


def _backwards(n: int = 5) -> pd.DataFrame:
    events = sum((step(100 * (i + 1), 10 * i + 1, 50 + 10 * i) for i in range(n)), [])
    _, bwd = analyse_passes({"traceEvents": events, "deviceProperties": [{"id": 0}]}, "attn_fwd", expect_gpu=True)
    return backward_tables(bwd, "v", "s")["backwards"]


def _status(device="cuda", minimum=3, active=5):
    return {"status": "ok", "device": device, "schedule": {"active": active}, "min_complete_forwards": minimum,
            "passes": {"backward": {"status": "ok", "reason": ""}}}


def test_backward_summary_statistics_by_hand():
    """Five backwards with host times 30, 50, 20, 90, 40 us and device times 6, 10, 2, 7, 3 us (cells set
    here), the fourth not timing-complete: medians, extremes and quartiles from the statistics module."""
    b = _backwards()
    b["cpu_us"] = [30.0, 50.0, 20.0, 90.0, 40.0]
    b["device_us"] = [6.0, 10.0, 2.0, 7.0, 3.0]
    b["timing_complete"] = [True, True, True, False, True]
    row = backward_summary(_status(), b)
    cpu = [0.03, 0.05, 0.02, 0.09, 0.04]
    dev = [0.006, 0.010, 0.002, 0.003]
    for prefix, ms in (("cpu_ms", cpu), ("device_ms", dev)):
        q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive")
        got = [row[f"{prefix}_per_backward"], row[f"{prefix}_backward_min"], row[f"{prefix}_backward_max"],
               row[f"{prefix}_backward_q1"], row[f"{prefix}_backward_q3"]]
        assert got == pytest.approx([statistics.median(ms), min(ms), max(ms), q1, q3]), prefix
    assert (row["backwards_profiled"], row["backwards_complete"], row["backwards_timed"]) == (5, 5, 4)
    assert (row["kernels_per_backward"], row["memcpy_per_backward"], row["memset_per_backward"]) == (2, 0, 1)
    assert (row["backward_status"], row["backward_reason"]) == ("ok", "")


def test_backward_summary_counts_against_the_schedule():
    """6 active steps in the schedule, 5 backward ranges in the trace: the verdict counts against 6."""
    row = backward_summary(_status(minimum=5, active=6), _backwards())
    assert row["backward_status"] == "ok" and row["backwards_profiled"] == 5
    assert "5 of 6" in row["backward_note"]  # 5 ranges in the trace, 6 in the schedule
    row = backward_summary(_status(minimum=6, active=6), _backwards())
    assert row["backward_reason"].startswith("5 complete backwards of 6 profiled, fewer than the minimum of 6")


def test_backward_device_times_need_the_minimum_of_timed_backwards():
    b = _backwards()
    b["timing_complete"] = [True, True, True, False, False]  # 3 timed: exactly the minimum
    assert backward_summary(_status(minimum=3), b)["device_ms_per_backward"] == pytest.approx(0.006)
    row = backward_summary(_status(minimum=4), b)  # 5 complete >= 4, but 3 timed < 4: no device time
    assert row["backward_status"] == "ok" and row["device_ms_per_backward"] is None and row["kernels_per_backward"] == 2
    # complete backwards: exactly the minimum is enough, one fewer is not
    b["complete"] = [True, True, True, False, False]
    b["timing_complete"] = b["complete"]
    assert backward_summary(_status(minimum=3), b)["backward_status"] == "ok"
    row = backward_summary(_status(minimum=4), b)
    assert row["backward_status"] == "incomplete_trace" and row["cpu_ms_per_backward"] is None
    assert row["backward_reason"].startswith("3 complete backwards of 5 profiled, fewer than the minimum of 4")
    # host times from the complete backwards only (30 us each)
    assert backward_summary(_status(minimum=3), b)["cpu_ms_backward_max"] == pytest.approx(0.03)


def test_backward_counts_only_on_a_gpu_and_only_when_the_backwards_agree():
    row = backward_summary(_status("cpu"), _backwards())
    assert row["cpu_ms_per_backward"] == pytest.approx(0.03) and row["kernels_per_backward"] is None
    assert row["device_ms_per_backward"] is None
    b = _backwards()
    b.loc[4, "kernels"] = 3  # one backward launched other work: two groups, no counts
    b.loc[4, "signature"] = "other"
    row = backward_summary(_status(), b)
    assert row["kernels_per_backward"] is None and row["cpu_ms_per_backward"] == pytest.approx(0.03)
    # the backward failed, or the forward did: only the status is published
    failed = dict(_status(), passes={"backward": {"status": "failed", "reason": "RuntimeError: x"}})
    row = backward_summary(failed, _backwards())
    assert (row["backward_status"], row["backward_reason"], row["cpu_ms_per_backward"]) == ("failed", "RuntimeError: x", None)
    row = backward_summary(dict(_status(), status="out_of_memory"), _backwards())
    assert row["backward_status"] == "ok" and row["backwards_profiled"] is None


def test_breakdown_groups_ordered_by_their_summed_time():
    """sdpa_math kernels set here: two FP32 GEMMs (3 + 4 us), two kernels of no group (5 + 4 us), a softmax (1 us),
    a mask kernel (0.5 us): 'other' 9 us first, then FP32 GEMM 7 us (not the alphabetical order), softmax, mask;
    the headline names the first three."""
    d = _rows({"sdpa_math": (1.0, 0.9, 1.1, 1.0)}, "cuda")
    d.kernels = pd.DataFrame({"variant": "sdpa_math", "kernel": ["sgemm_a", "foo_kernel", "sgemm_b", "bar_kernel", "softmax_k",
                                                                 "void at::native::triu_tril_kernel<bool>()"],
                              "category": "kernel", "us_per_forward": [3.0, 5.0, 4.0, 4.0, 1.0, 0.5]})
    (f,) = [f for f in rule_speed(d) if "by kernel group" in f["statement"]]
    assert [(k, n["value"], n["unit"]) for k, n in f["numbers"].items()] == [
        ("other_us_per_forward", 9.0, "us"), ("FP32 GEMM_us_per_forward", 7.0, "us"), ("softmax_us_per_forward", 1.0, "us"),
        ("mask_us_per_forward", 0.5, "us")]
    assert [(i["kernel"], i["unit"]) for i in f["numbers"]["other_us_per_forward"]["inputs"]] == [
        ("foo_kernel", "us"), ("bar_kernel", "us")]
    assert f["statement"] == ("sdpa_math: device time per forward by kernel group: other 9 µs (2 kernels), "
                              "FP32 GEMM 7 µs (2 kernels), softmax 1 µs (1 kernel), mask 0.5 µs (1 kernel)")
    assert f["headline"] == "time by kernel group: other 9 µs, FP32 GEMM 7 µs, softmax 1 µs"


# --- rule_backward: the main kernel, the named ones, the rest summed --------------------------------

def _backward_run(device: str) -> RunData:
    """naive failed (its backward_status says ok: the forward's status decides); sdpa_flash's backward 5.0 ms
    against its 2.0 ms forward (device on a GPU run; host on a CPU one, where _rows' host time is the median)."""
    d = _rows({"naive": (1.0, 0.9, 1.1, 1.0, "failed"), "sdpa_flash": (2.0, 1.9, 2.1, 2.0)}, device)
    d.summary["kernels_per_backward"] = 7
    d.summary["backward_status"] = "ok"
    d.summary["device_ms_per_backward" if device == "cuda" else "cpu_ms_per_backward"] = 5.0
    if device == "cuda":
        d.summary["cpu_ms_per_backward"] = 50.0
    else:
        d.summary["device_ms_per_backward"] = None
    return d


def test_backward_finding_sums_the_kernels_it_does_not_name():
    # seven kernels, shares set here: main 40 (not the first row), 4 named (20, 15, 10, 6), the rest 5 + 4 = 9
    shares = {"k_a": 15.0, "k_main": 40.0, "k_b": 5.0, "k_c": 20.0, "k_d": 4.0, "k_e": 10.0, "k_f": 6.0}
    d = _backward_run("cuda")
    d.kernels_backward = pd.DataFrame({"variant": "sdpa_flash", "shape_key": "s", "kernel": list(shares), "category": "kernel",
                                       "share_pct": list(shares.values())})
    (f,) = rule_backward(d)
    n = f["numbers"]
    assert f["variants"] == ["sdpa_flash"]
    assert MAX_NAMED == 4 and n["main_share"]["value"] == 40.0 and n["main_share"]["kernel"] == "k_main"
    assert (n["ms_per_backward"]["value"], n["ms_per_backward"]["column"], n["ms_per_backward"]["unit"]) == (
        5.0, "device_ms_per_backward", "ms")
    assert n["backward_over_forward"]["value"] == pytest.approx(2.5)  # 5.0 / 2.0
    assert [(i["column"], i["unit"]) for i in n["backward_over_forward"]["inputs"]] == [
        ("device_ms_per_backward", "ms"), ("device_ms_per_forward", "ms")]
    assert n["rest_share"]["value"] == pytest.approx(9.0) and "and 2 more (9 % together)" in f["statement"]
    assert "besides it k_c 20 %, k_a 15 %, k_e 10 %, k_f 6 %" in f["statement"]
    assert f["statement"].startswith("sdpa_flash backward: 5 ms device time per backward, 2.5x its forward; 7 kernels per backward")
    assert f["headline"] == "backward 2.5x forward, 7 kernels" and n["kernels_per_backward"]["value"] == 7
    # a variant whose backward did not run gets no finding
    d.summary["backward_status"] = "failed"
    assert rule_backward(d) == []


def test_backward_finding_on_a_cpu_run_uses_host_times_and_no_kernel_count():
    (f,) = rule_backward(_backward_run("cpu"))
    n = f["numbers"]
    assert [(i["column"], i["value"]) for i in n["backward_over_forward"]["inputs"]] == [
        ("cpu_ms_per_backward", 5.0), ("cpu_ms_per_forward", 2.0)]
    assert n["backward_over_forward"]["value"] == pytest.approx(2.5) and "kernels_per_backward" not in n
    assert f["statement"] == "sdpa_flash backward: 5 ms host time per backward, 2.5x its forward"
    assert f["headline"] == "backward 2.5x forward"


_FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 2, "
              "4, 2, false, false, cutlass::bfloat16_t>, true>(pytorch_flash::Flash_bwd_params)")
_FLASH_DOT = "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64>>(Params)"


@pytest.mark.parametrize("shares, main_words", [
    # a FlashAttention-2 main kernel: its library after its label; the preprocess kernel named with its role
    ({_FLASH_DOT: 20.0, _FLASH_BWD: 70.0, "k_x": 10.0},
     "main kernel pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel, FlashAttention-2 (PyTorch's pytorch_flash) "
     "(70 %); besides it pytorch_flash::flash_bwd_dot_do_o_kernel (preprocess) 20 %, k_x 10 %"),
    # a main kernel of no known library: no library words
    ({"k_x": 10.0, "k_main": 90.0}, "main kernel k_main (90 %); besides it k_x 10 %"),
])
def test_backward_statement_names_the_main_kernel_its_library_and_share(shares, main_words):
    d = _backward_run("cuda")
    d.kernels_backward = pd.DataFrame({"variant": "sdpa_flash", "shape_key": "s", "kernel": list(shares), "category": "kernel",
                                       "share_pct": list(shares.values())})
    (f,) = rule_backward(d)
    main = max(shares, key=shares.get)
    assert f["statement"] == ("sdpa_flash backward: 5 ms device time per backward, 2.5x its forward; 7 kernels per backward; "
                              + main_words)
    assert (f["numbers"]["main_share"]["value"], f["numbers"]["main_share"]["unit"]) == (shares[main], "%")
    assert f["evidence"] == [{"kind": "kernel", "name": main}]


def test_fastest_fused_names_between_run_intervals_when_the_run_has_repeats():
    """With repeats the ranking is judged on the between-run intervals (device_ms_run_lo/hi, set here: flash
    0.95-1.05, cudnn 1.0-1.2, overlapping), and a verdict within noise names them so."""
    d = _rows({"sdpa_flash": (1.0, 0.5, 1.5, 1.0), "sdpa_cudnn": (1.1, 0.6, 1.6, 1.1)}, "cuda")
    d.summary["device_ms_run_lo"] = [0.95, 1.0]
    d.summary["device_ms_run_hi"] = [1.05, 1.2]
    r = metric_fastest_fused(d, ["sdpa_flash", "sdpa_cudnn"])
    assert r["value"] == "sdpa_flash" and r["tied"] == ["sdpa_flash", "sdpa_cudnn"]
    assert [i["column"] for i in r["spread_inputs"]] == ["device_ms_run_lo", "device_ms_run_hi"] * 2
    got, why = verdict(r, "sdpa_flash", "eq", None)
    assert got == WITHIN_NOISE and why.startswith("sdpa_flash, sdpa_cudnn: their rerun intervals overlap")


def test_a_verdict_within_noise_names_what_was_compared():
    obs = {"value": -0.036, "formula": "difference", "inputs": [{"variant": "sdpa_cudnn"}, {"variant": "sdpa_flash"}],
           "spread": {"low": {"value": -0.104}, "high": {"value": 0.019}}}
    got, why = verdict(obs, 0, "gt", None)
    assert got == WITHIN_NOISE and "-0.036 (sdpa_cudnn minus sdpa_flash), but -0.104 to 0.019" in why


def test_a_ranking_needs_two_variants_that_ran_and_the_one_it_names():
    from attnprof.findings.expectations import check_expectations

    d = _rows({"sdpa_flash": (1.0, 0.9, 1.1, 1.0), "sdpa_cudnn": (0.5, 0.4, 0.6, 0.5, "unsupported")}, "cuda")
    assert metric_fastest_fused(d, ["sdpa_flash", "sdpa_cudnn"]) == {"value": None}  # flash alone: nothing to rank
    exp = {"expectations": [{"id": "f", "variants": ["sdpa_cudnn", "sdpa_flash"], "claim": "", "metric": "fastest_fused",
                             "expected": "sdpa_flash", "compare": "eq"}]}
    d = _rows({"sdpa_flash": (1.0, 0.9, 1.1, 1.0, "unsupported"), "sdpa_cudnn": (0.5, 0.4, 0.6, 0.5),
               "sdpa_efficient": (2.0, 1.9, 2.1, 2.0)}, "cuda")
    (check,) = check_expectations(d, exp, [])
    assert check["verdict"] == "not measured" and "sdpa_flash did not run" in check["explanation"]


def test_expectations_that_cannot_be_checked_are_refused_when_loaded():
    from attnprof.findings.expectations import expectation_problems

    base = {"id": "x", "variants": ["sdpa_flash", "sdpa_cudnn"], "claim": "", "explained_by": []}
    problems = expectation_problems({"expectations": [
        {**base, "metric": "device_time_ratio", "compare": "approx", "expected": 0, "tolerance": 0.1},
        {**base, "metric": "device_time_ratio", "compare": "within", "expected": 1, "tolerance": -0.1},
        {**base, "metric": "fastest_fused", "compare": "eq", "expected": "sdpa_flsh"},
        {**base, "metric": "fastest_fused", "compare": "eq", "expected": "sdpa_flash"},
    ]})
    assert len(problems) == 3
    assert "relative to expected, which is 0" in problems[0] and "-0.1 is not a number >= 0" in problems[1]
    assert "'sdpa_flsh' is not one of its variants" in problems[2]


# --- rule_cpu_cost: launch- or device-bound only outside the spread ---------------------------------

def _gpu_times(cpu: tuple, device: tuple) -> RunData:
    """A GPU run of one variant: host and device ms per forward as (median, min, max)."""
    row = {"variant": "naive", "shape_key": "s", "status": "ok", "device": "cuda", "dtype": "bf16",
           "cpu_ms_per_forward": cpu[0], "cpu_ms_min": cpu[1], "cpu_ms_max": cpu[2],
           "device_ms_per_forward": device[0], "device_ms_min": device[1], "device_ms_max": device[2]}
    return RunData("s", pd.DataFrame([row]), pd.DataFrame(columns=["variant", "kernel", "category", "calls_per_forward"]),
                   pd.DataFrame(columns=["variant", "api", "calls_per_forward"]), pd.DataFrame(columns=["variant", "op"]), {}, [])


@pytest.mark.parametrize("cpu, device, side", [
    ((2.0, 1.5, 2.5), (1.0, 0.9, 1.4), "launch"),    # the host's fastest forward (1.5) is slower than the device's slowest (1.4)
    ((2.0, 1.4, 2.5), (1.0, 0.9, 1.4), "neither"),   # they touch: no verdict
    ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0), "neither"),   # a ratio of exactly 1 is not launch-bound
    ((1.0, 0.9, 1.19), (2.0, 1.2, 2.5), "device"),   # the host's slowest (1.19) under the device's fastest (1.2)
    ((1.0, 0.9, 1.2), (2.0, 1.2, 2.5), "neither"),
    ((1.2, 1.0, 3.0), (1.0, 0.9, 1.1), "neither"),   # median ratio 1.2, but the host's fastest forward is the faster
])
def test_launch_or_device_bound_holds_at_every_forward(cpu, device, side):
    from attnprof.findings.rules.timing import bound, rule_cpu_cost

    assert bound(cpu[1], cpu[2], device[1], device[2]) == side
    (f,) = rule_cpu_cost(_gpu_times(cpu, device))
    assert f["headline"].startswith(f"{side}-bound") if side != "neither" else f["headline"].endswith("within the spread")
    assert f["numbers"]["cpu_over_device"]["value"] == pytest.approx(cpu[0] / device[0])
    assert (f["numbers"]["cpu_ms_min"]["value"], f["numbers"]["device_ms_max"]["value"]) == (cpu[1], device[2])
    assert bound(None, cpu[2], device[1], device[2]) is None


def test_the_bound_statement_states_both_ranges_once_each_with_its_unit():
    from attnprof.findings.rules.timing import rule_cpu_cost

    (f,) = rule_cpu_cost(_gpu_times((2.0, 1.5, 2.5), (1.0, 0.9, 1.4)))
    # one repeat: each range over the forwards, with an en dash and its unit once
    assert ("(per forward: the host's range over the forwards 1.5\u20132.5 ms, the device's range over the forwards "
            "0.9\u20131.4 ms)") in f["statement"] and "ms ms" not in f["statement"]
