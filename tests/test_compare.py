"""Comparing result sets: kernels added/removed, the change verdict from the repeats, environment diff.

Expected ratios and intervals are computed here by another code path: Python's statistics.geometric_mean, numpy's
variances pooled by hand (one-way ANOVA's within-group mean square) and scipy's t quantile, with the sitting term
of two result sets of different sittings (attnprof.analysis.stats.SITTING_SD) added to the variance."""
import math
import statistics
import pandas as pd
import pytest

from attnprof.analysis.compare import compare_runs, env_diff


def repeats_frame(variant, shape_key, col, medians, status="ok", at=None):
    """repeats.csv rows of one (variant, shape): one per repeat with its median ``col``; with ``at`` (Unix s) each
    capture's start, a minute apart, on one GPU (the records that tell a sitting)."""
    where = {} if at is None else {"gpu_uuid": "GPU-1"}
    return pd.DataFrame([{"variant": variant, "shape_key": shape_key, "repeat": k + 1, "status": status, col: m, **where,
                          **({} if at is None else {"started_at": at + 60.0 * k})} for k, m in enumerate(medians)])


def run(name, medians, kernels, torch="2.13.0", dispatch="dispatched to cudnn", at=None):
    """One sdpa_auto row whose device time per forward has the repeat medians ``medians`` (ms)."""
    summary = pd.DataFrame([{"variant": "sdpa_auto", "shape_key": "s", "status": "ok", "kernels_per_forward": len(kernels),
                             "device_ms_per_forward": statistics.median(medians), "cpu_ms_per_forward": 0.1}])
    kern = pd.DataFrame([{"variant": "sdpa_auto", "shape_key": "s", "kernel": k} for k in kernels])
    ops = pd.DataFrame([{"variant": "sdpa_auto", "shape_key": "s", "op": "aten::scaled_dot_product_attention"}])
    findings = {"shapes": [{"shape_key": "s", "findings": [{"rule": "dispatch", "headline": dispatch}]}]}
    return {"name": name, "summary": summary, "kernels": kern, "ops": ops, "env": {"torch": torch, "config": {"seed": 0}},
            "findings": findings, "repeats": repeats_frame("sdpa_auto", "s", "device_ms_per_forward", medians, at=at)}


def welch(a, b, confidence=0.95, sitting=True):
    """(ratio, lo, hi) of one row whose two sides are pooled into one variance (one variant, one shape: 4 df for
    3 + 3 repeats) plus, across sittings, the sitting term 2 * SITTING_SD**2 with its own SITTING_DF, df by
    Satterthwaite: the independent path."""
    import numpy as np
    from scipy import stats

    from attnprof.analysis.stats import SITTING_DF
    from attnprof.analysis.stats import SITTING_SD as sd

    SITTING_SD = sd if sitting else 0.0  # noqa: N806
    la, lb = np.log(a), np.log(b)
    dfp = len(la) + len(lb) - 2
    pooled = ((len(la) - 1) * la.var(ddof=1) + (len(lb) - 1) * lb.var(ddof=1)) / dfp
    within = pooled * (1 / len(la) + 1 / len(lb))
    se2 = within + 2 * SITTING_SD ** 2
    df = se2 ** 2 / (within ** 2 / dfp + (2 * SITTING_SD ** 2) ** 2 / SITTING_DF)
    half = stats.t.ppf((1 + confidence) / 2, df) * math.sqrt(se2)
    d = lb.mean() - la.mean()
    return statistics.geometric_mean(b) / statistics.geometric_mean(a), math.exp(d - half), math.exp(d + half)


A = [1.000, 1.010, 0.995]  # three repeat medians, about 0.8 % apart


def test_template_arguments_are_ignored_when_matching_kernels():
    a = run("a", A, ["void flash_fwd_kernel<Traits<64, 128>, true>(Params)"])
    b = run("b", A, ["void flash_fwd_kernel<Traits<128, 64>, false>(Params)"])
    row = compare_runs([a, b])["pairs"][0]["rows"][0]
    assert row["kernels_added"] == [] and row["kernels_removed"] == []


def test_kernel_swap_ratio_and_dispatch_change_are_reported():
    a = run("old", [0.100, 0.101, 0.0995], ["void pytorch_flash::flash_fwd_kernel<A>(P)"], dispatch="dispatched to flash")
    b = run("new", [0.060, 0.0604, 0.0598], ["cudnn_generated_fort_native_sdpa_sm90_knob_7"], torch="2.14.1")
    pair = compare_runs([a, b])["pairs"][0]
    row = pair["rows"][0]
    assert row["kernels_added"] == ["cudnn_generated_fort_native_sdpa_sm90_knob_7"]
    assert row["kernels_removed"] == ["pytorch_flash::flash_fwd_kernel"]
    ratio, lo, hi = welch([0.100, 0.101, 0.0995], [0.060, 0.0604, 0.0598])
    assert row["ratio"] == pytest.approx(ratio) and row["verdict"] == "faster"
    assert (row["ratio_lo"], row["ratio_hi"]) == (pytest.approx(lo), pytest.approx(hi)) and hi < 1
    assert [{k: d[k] for k in ("shape_key", "a", "b", "changed")} for d in pair["dispatch"]] == [
        {"shape_key": "s", "a": "dispatched to flash", "b": "dispatched to cudnn", "changed": True}]
    assert {"key": "torch", "a": "2.13.0", "b": "2.14.1"} in pair["env_diff"]
    assert pair["counts"]["faster"] == 1 and sum(pair["counts"].values()) == 1


def test_a_rerun_of_the_same_thing_is_never_a_change():
    """A/A: b's repeats are a's, shuffled and jittered by less than the spread: same or inconclusive."""
    for b in ([1.005, 0.998, 1.002], [0.995, 1.010, 1.000], A):
        row = compare_runs([run("a", A, ["k"]), run("b", b, ["k"])])["pairs"][0]["rows"][0]
        assert row["verdict"] in ("same", "inconclusive"), (b, row)
        assert row["ratio_lo"] <= 1 <= row["ratio_hi"]
    # identical repeats in two result sets (two sittings): ratio 1; "the same within 5 %" (the sitting term keeps
    # 2 % out of reach of 3 repeats 0.8 % apart: inconclusive there, never changed)
    row = compare_runs([run("a", A, ["k"]), run("b", A, ["k"])], noise_floor=0.05)["pairs"][0]["rows"][0]
    assert row["verdict"] == "same" and row["ratio"] == pytest.approx(1.0)
    row = compare_runs([run("a", A, ["k"]), run("b", A, ["k"])])["pairs"][0]["rows"][0]
    assert row["verdict"] == "inconclusive" and row["ratio_lo"] < 1 < row["ratio_hi"]


def test_an_injected_change_is_found_with_its_size_inside_the_interval():
    """Two result sets of one sitting (the same GPU, captures minutes apart): no sitting term."""
    for factor in (1.05, 1.10, 0.90):
        b = [m * factor for m in (1.004, 0.999, 1.008)]  # the same spread as A, other draws, stretched
        pair = compare_runs([run("a", A, ["k"], at=0.0), run("b", b, ["k"], at=600.0)], noise_floor=0.02)["pairs"][0]
        row = pair["rows"][0]
        assert pair["sitting_sd"] is None and pair["sitting"]["why"].startswith("one sitting")
        ratio, lo, hi = welch(A, b, sitting=False)
        assert row["verdict"] == ("slower" if factor > 1 else "faster"), (factor, row)
        assert row["ratio_lo"] == pytest.approx(lo) and row["ratio_hi"] == pytest.approx(hi)
        assert row["ratio_lo"] <= factor <= row["ratio_hi"]


def test_a_change_below_the_practical_threshold_is_not_called_a_change():
    # 1 % slower with tiny spreads, two sittings: the 90 % interval lies inside ±5 %: the same within 5 %
    a, b = [1.0, 1.0001, 0.9999], [1.01, 1.0101, 1.0099]
    row = compare_runs([run("a", a, ["k"]), run("b", b, ["k"])], noise_floor=0.05)["pairs"][0]["rows"][0]
    assert row["ratio"] == pytest.approx(1.01) and row["verdict"] == "same"
    # 10 % slower: beyond a 2 % threshold even with the sitting term (the whole 95 % interval lies beyond 1.02)
    b = [1.1, 1.1001, 1.0999]
    row = compare_runs([run("a", a, ["k"]), run("b", b, ["k"])], noise_floor=0.02)["pairs"][0]["rows"][0]
    assert row["verdict"] == "slower" and row["ratio_lo"] > 1.02


def test_one_repeat_has_no_between_run_spread_and_is_never_a_change():
    row = compare_runs([run("a", [1.0], ["k"]), run("b", [2.0], ["k"])])["pairs"][0]["rows"][0]
    assert row["ratio"] == pytest.approx(2.0) and row["verdict"] == "inconclusive" and row["ratio_lo"] is None
    assert "1 repeat" in row["why"]
    # a result set made before repeats (no repeats.csv): the summary's one value, the same verdict
    a, b = run("a", [1.0], ["k"]), run("b", [2.0], ["k"])
    a["repeats"] = b["repeats"] = None
    assert compare_runs([a, b])["pairs"][0]["rows"][0]["verdict"] == "inconclusive"


def test_failed_repeats_do_not_count():
    b = run("b", [1.3, 1.31, 1.29], ["k"])
    b["repeats"].loc[1, "status"] = "incomplete_trace"
    row = compare_runs([run("a", A, ["k"]), b])["pairs"][0]["rows"][0]
    assert (row["repeats_a"], row["repeats_b"]) == (3, 2)
    assert row["ratio"] == pytest.approx(welch(A, [1.3, 1.29])[0])


def test_an_extra_kernel_is_reported():
    a, b = run("a", A, ["gemm", "softmax"]), run("b", A, ["gemm", "softmax", "extra"])
    row = compare_runs([a, b])["pairs"][0]["rows"][0]
    assert row["kernels_added"] == ["extra"] and (row["kernels_a"], row["kernels_b"]) == (2, 3)


def test_backward_and_compile_changes_are_judged_on_their_own_repeats():
    a, b = run("a", A, ["k"]), run("b", A, ["k"])
    # backward: 2.0 ms against 2.3 ms, each with three repeats about 0.5 % apart: 15 % slower; kernels 5 -> 4
    for r, ms, kb in ((a, 2.0, 5), (b, 2.3, 4)):
        med = [ms * f for f in (1.0, 1.005, 0.995)]
        r["summary"]["device_ms_per_backward"] = statistics.median(med)
        r["summary"]["kernels_per_backward"] = kb
        r["repeats"]["device_ms_per_backward"] = med
    a["summary"]["compile_first_call_s"], a["summary"]["compile_cache"] = 8.0, "miss"
    b["summary"]["compile_first_call_s"], b["summary"]["compile_cache"] = 2.0, "hit"
    row = compare_runs([a, b])["pairs"][0]["rows"][0]
    assert (row["bwd_kernels_a"], row["bwd_kernels_b"]) == (5, 4)
    assert row["bwd_ratio"] == pytest.approx(1.15) and row["bwd_ratio_lo"] < 1.15 < row["bwd_ratio_hi"]
    assert row["bwd_verdict"] == "slower" and row["verdict"] in ("same", "inconclusive")  # the forward did not move
    assert row["compile_ratio"] == 0.25 and (row["compile_cache_a"], row["compile_cache_b"]) == ("miss", "hit")
    # without a backward in one of them: nothing to compare, no verdict
    del b["summary"]["device_ms_per_backward"]
    row = compare_runs([a, b])["pairs"][0]["rows"][0]
    assert row["bwd_ratio"] is None and row["bwd_verdict"] is None


def test_env_diff_flattens_config():
    diff = env_diff({"torch": "1", "config": {"profiler": {"schedule": {"active": 3}}}},
                    {"torch": "1", "config": {"profiler": {"schedule": {"active": 10}}}})
    assert diff == [{"key": "config.profiler.schedule.active", "a": 3, "b": 10}]


def test_a_backward_in_one_result_set_only_is_shown_not_dropped():
    a, b = run("a", A, ["k"]), run("b", A, ["k"])
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


# --- a two-shape comparison, every row worked by hand ---------------------------------------------


def _result(name, rows, kernels, ops, dispatch, repeats):
    """A result set from summary rows (variant, shape_key, status, device ms median/q1/q3, timed ms),
    kernel and op names per (variant, shape), sdpa_auto's dispatch headline per shape and the repeat
    medians per (variant, shape)."""
    cols = ["variant", "shape_key", "status", "device_ms_per_forward", "device_ms_q1", "device_ms_q3", "timed_ms_median"]
    summary = pd.DataFrame([dict(zip(cols, r)) for r in rows])
    rep = pd.concat([repeats_frame(v, s, "device_ms_per_forward", m) for (v, s), m in repeats.items()], ignore_index=True)
    summary["kernels_per_forward"] = [len(kernels.get((r[0], r[1]), [])) for r in rows]
    summary["device_ms_min"], summary["device_ms_max"] = 0.001, 1000.0  # never used: every row has its quartiles
    kern = pd.DataFrame([{"variant": v, "shape_key": s, "kernel": k} for (v, s), ks in kernels.items() for k in ks])
    op = pd.DataFrame([{"variant": v, "shape_key": s, "op": o} for (v, s), os_ in ops.items() for o in os_])
    findings = {"shapes": [{"shape_key": s, "findings": [{"rule": "fusion", "headline": "x"}, {"rule": "dispatch", "headline": h}]}
                           for s, h in dispatch.items()]}
    return {"name": name, "summary": summary, "kernels": kern, "ops": op, "env": {"torch": name}, "findings": findings,
            "repeats": rep}


NAN = float("nan")
#: two variants at two shapes, each row with its own numbers, so that a row read from another
#: (variant, shape) gives other values; sdpa_auto/s2 only in a, naive/s3 only in b
REP_A = {("naive", "s1"): [2.0, 2.02, 1.98], ("naive", "s2"): [4.0, 4.04, 3.96], ("sdpa_auto", "s1"): [0.5, 0.505, 0.495],
         ("sdpa_auto", "s2"): [1.0, 1.01, 0.99], ("sdpa_math", "s1"): [5.0, 5.05, 4.95]}
REP_B = {("naive", "s1"): [3.0, 3.03, 2.97], ("naive", "s2"): [4.2, 3.0, 5.6], ("sdpa_auto", "s1"): [0.25, 0.2525, 0.2475],
         ("naive", "s3"): [9.0, 9.1, 8.9]}
BASE = _result("a", [("naive", "s1", "ok", 2.0, 1.9, 2.1, 2.2), ("naive", "s2", "ok", 4.0, 3.8, 4.2, 4.4),
                     ("sdpa_auto", "s1", "ok", 0.5, 0.49, 0.51, 0.6), ("sdpa_auto", "s2", "ok", 1.0, 0.9, 1.1, 1.2),
                     ("sdpa_math", "s1", "ok", 5.0, 4.9, 5.1, 5.2)],
               kernels={("naive", "s1"): ["void gemm<64, true>(P)", "softmax"], ("naive", "s2"): ["k2"],
                        ("sdpa_auto", "s1"): ["fused"], ("sdpa_auto", "s2"): ["fused"], ("sdpa_math", "s1"): ["m"]},
               ops={("naive", "s1"): ["aten::bmm", "aten::copy_"], ("naive", "s2"): ["aten::bmm"]},
               dispatch={"s1": "dispatched to flash", "s2": "dispatched to cudnn"}, repeats=REP_A)
NEW = _result("b", [("naive", "s1", "ok", 3.0, 2.97, 3.03, 3.3), ("naive", "s2", "ok", 4.2, 3.15, 5.25, 8.8),
                    ("sdpa_auto", "s1", "ok", 0.25, 0.2475, 0.2525, NAN), ("sdpa_math", "s1", "out_of_memory", NAN, NAN, NAN, NAN),
                    ("naive", "s3", "ok", 9.0, 8.9, 9.1, 9.2)],
              kernels={("naive", "s1"): ["void gemm<128, false>(P)", "softmax", "void extra<1>()"], ("naive", "s2"): ["k2b"],
                       ("sdpa_auto", "s1"): ["fused"], ("naive", "s3"): ["k3"]},
              ops={("naive", "s1"): ["aten::bmm", "aten::softmax"], ("naive", "s2"): ["aten::bmm"]},
              dispatch={"s1": "dispatched to cudnn", "s3": "dispatched to math"}, repeats=REP_B)


def test_every_row_of_a_two_shape_comparison_worked_by_hand():
    doc = compare_runs([BASE, NEW], noise_floor=0.05)
    assert (doc["baseline"], doc["noise_floor"], len(doc["pairs"])) == ("a", 0.05, 1)
    pair = doc["pairs"][0]
    assert (pair["a"], pair["b"]) == ("a", "b") and pair["env_diff"] == [{"key": "torch", "a": "a", "b": "b"}]
    assert pair["only_in_a"] == ["sdpa_auto/s2"] and pair["only_in_b"] == ["naive/s3"]
    # sdpa_auto's dispatch at the shapes both runs have (s3 is b's alone)
    assert [{k: d[k] for k in ("shape_key", "a", "b")} for d in pair["dispatch"]] == [{"shape_key": "s1", "a": "dispatched to flash", "b": "dispatched to cudnn"},
                                {"shape_key": "s2", "a": "dispatched to cudnn", "b": None}]
    rows = {(r["variant"], r["shape_key"]): r for r in pair["rows"]}
    assert list(rows) == [("naive", "s1"), ("naive", "s2"), ("sdpa_auto", "s1"), ("sdpa_math", "s1")]
    r = rows[("naive", "s1")]  # 2.0 -> 3.0 with 1 % repeats: slower, 1.5 inside its interval; the timing's 3.3 / 2.2
    assert (r["kernels_added"], r["kernels_removed"], r["ops_added"], r["ops_removed"]) == (
        ["extra"], [], ["aten::softmax"], ["aten::copy_"])
    assert (r["time_a_ms"], r["time_b_ms"], r["verdict"]) == (2.0, 3.0, "slower") and r["timed_ratio"] == pytest.approx(1.5)
    assert r["ratio"] == pytest.approx(welch(REP_A[("naive", "s1")], REP_B[("naive", "s1")])[0]) and r["ratio_lo"] < 1.5 < r["ratio_hi"]
    r = rows[("naive", "s2")]  # 4.0 -> 4.2 (5 %) but b's repeats spread over 50 %: inconclusive, with the repeats it needs
    assert (r["kernels_added"], r["kernels_removed"]) == (["k2b"], ["k2"])
    assert r["verdict"] == "inconclusive" and r["repeats_needed"] > 3 and r["timed_ratio"] == 2.0
    r = rows[("sdpa_auto", "s1")]  # 0.5 -> 0.25: faster; b has no independent timing
    assert r["verdict"] == "faster" and r["ratio"] == pytest.approx(0.5, rel=0.02) and r["timed_ratio"] is None
    r = rows[("sdpa_math", "s1")]  # out of memory in b: no time, no ratio
    assert (r["status_b"], r["time_b_ms"], r["ratio"], r["verdict"], r["kernels_removed"]) == (
        "out_of_memory", None, None, "not comparable", ["m"])
    assert all(r["bwd_verdict"] is None and r["compile_ratio"] is None for r in rows.values())
    assert pair["counts"] == {"slower": 1, "faster": 1, "same": 0, "inconclusive": 1, "not judged": 0, "not comparable": 1}


def test_the_first_result_set_is_the_baseline_of_every_pair():
    third = dict(NEW, name="c")
    doc = compare_runs([BASE, NEW, third])
    assert doc["baseline"] == "a" and [(p["a"], p["b"]) for p in doc["pairs"]] == [("a", "b"), ("a", "c")]
    with pytest.raises(ValueError, match="^compare needs at least two result sets$"):
        compare_runs([BASE])


def test_cpu_runs_compare_cpu_time():
    def cpu_run(name, medians):
        summary = pd.DataFrame([{"variant": "naive", "shape_key": "s", "status": "ok", "kernels_per_forward": float("nan"),
                                 "device_ms_per_forward": float("nan"), "cpu_ms_per_forward": statistics.median(medians)}])
        return {"name": name, "summary": summary, "kernels": None, "ops": None, "env": {}, "findings": {"shapes": []},
                "repeats": repeats_frame("naive", "s", "cpu_ms_per_forward", medians)}

    row = compare_runs([cpu_run("a", [1.2, 1.25, 1.18]), cpu_run("b", [2.0, 2.1, 1.95])])["pairs"][0]["rows"][0]
    assert row["timing"] == "CPU time per forward (trace)" and (row["time_a_ms"], row["time_b_ms"]) == (1.2, 2.0)
    # host times of two result sets (two sittings): the ratio is shown, never judged
    assert row["verdict"] == "not judged" and row["ratio"] == pytest.approx(welch([1.2, 1.25, 1.18], [2.0, 2.1, 1.95])[0])
