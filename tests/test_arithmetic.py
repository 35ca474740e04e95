"""The trace and table arithmetic against counts made by hand (docs/mutations.md: the tests that a
mutation run of trace.py and tables.py asked for).

Expected values come from :func:`plain`, a plain-Python reading of the trace JSON that shares no
code with attnprof (events as dicts, loops, ``statistics``), or are written out by hand. The data
are the real H200 traces of tests/fixtures (several kernels per forward, so that sums, means and
maxima differ) with defects spliced in where a rule needs one: a lost GPU record makes a forward
incomplete, an impossible duration makes one untimed, so that "complete" and "timed" forwards are
different sets.
"""
import copy
import gzip
import hashlib
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest

from attnprof.analysis.tables import (
    FORWARD_COLUMNS,
    KERNEL_COLUMNS,
    analyse_trace,
    concat_tables,
    forward_groups,
    forward_table,
    kernel_table,
    launch_api_table,
    op_table,
    per_forward_counts,
    summary_row,
)
from attnprof.analysis.trace import assign_forward, events_frame, forward_ranges, gpu_events, integer_ids

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56"
STUDY = "b8_h16_s1024_d64_bf16_causal"
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH = {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchKernelExC"}


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


_CACHE: dict = {}


def h200(variant: str) -> dict:
    """A fresh copy of a committed H200 trace as json.load gives it (the tests change them)."""
    if variant not in _CACHE:
        _CACHE[variant] = _load(FIXTURES / "h200" / variant / "trace.json.gz")
    return copy.deepcopy(_CACHE[variant])


def plain(trace: dict, range_name: str = "attn_fwd") -> dict:
    """The trace read by hand: forward ranges in time order; every GPU event with the forward of the
    API call that launched it (same thread, range start <= call start <= range end; -1 if none);
    every aten op and API call with its forward; per forward its launches that found no GPU event."""
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ranges = sorted((e for e in ev if e.get("cat") == "user_annotation" and e.get("name") == range_name), key=lambda e: e["ts"])

    def forward_of(e):
        for i, r in enumerate(ranges):
            if e.get("tid") == r["tid"] and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]:
                return i
        return -1

    calls = [(e, forward_of(e)) for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    by_corr = {e["args"]["correlation"]: (e, f) for e, f in calls if "correlation" in e.get("args", {})}
    gpu = []
    for e in ev:
        if e.get("cat") in GPU_CATS:
            call, f = by_corr.get(e["args"].get("correlation"), (None, -1))
            gpu.append({"name": e["name"], "category": GPU_CATS[e["cat"]], "ts": e.get("ts"), "dur": e.get("dur"),
                        "forward": f, "launch_ts": call["ts"] if call else None})
    gpu_corr = {e["args"].get("correlation") for e in ev if e.get("cat") in GPU_CATS}
    lost = Counter(f for e, f in calls if e["name"] in LAUNCH and f >= 0 and e["args"]["correlation"] not in gpu_corr)
    ops = [(e, forward_of(e)) for e in ev if e.get("cat") == "cpu_op"]
    return {"ranges": ranges, "gpu": gpu, "calls": calls, "ops": ops, "lost": lost}


def valid(g: dict) -> bool:
    """A GPU event's time is possible (the traces here end well within the trace's CPU span)."""
    return g["ts"] is not None and g["dur"] is not None and g["ts"] > 0 and g["dur"] > 0 and g["ts"] >= g["launch_ts"]


def overlapping_forwards(hand: dict) -> set:
    """Forwards (by hand) with two GPU events that overlap in time (by more than 2 ns); every GPU
    event of these traces runs on one stream (7), where work runs in order: impossible times."""
    out = set()
    for f in {g["forward"] for g in hand["gpu"]}:
        mine = sorted((g for g in hand["gpu"] if g["forward"] == f and valid(g)), key=lambda g: g["ts"])
        reach = float("-inf")
        for g in mine:
            if g["ts"] < reach - 0.002:
                out.add(f)
            reach = max(reach, g["ts"] + g["dur"])
    return out


def spliced_naive() -> tuple[dict, dict]:
    """naive (5 kernels, 1 memcpy, 1 memset per forward, 10 forwards) with two defects: forward 0 lost
    the GPU record of its first kernel (incomplete: left out of everything) and forward 3's memcpy has a
    negative duration (complete, so counted, but left out of every time). Returns (trace, plain)."""
    trace = h200("naive")
    hand = plain(trace)
    first = min((g for g in hand["gpu"] if g["forward"] == 0 and g["category"] == "kernel"), key=lambda g: g["ts"])
    memcpy3 = next(g for g in hand["gpu"] if g["forward"] == 3 and g["category"] == "memcpy")
    kept = []
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel" and e["ts"] == first["ts"] and e["name"] == first["name"]:
            continue
        if e.get("cat") == "gpu_memcpy" and e["ts"] == memcpy3["ts"]:
            e["dur"] = -2.5
        kept.append(e)
    trace["traceEvents"] = kept
    return trace, plain(trace)


COUNTED = list(range(1, 10))  # complete forwards of spliced_naive
TIMED = [f for f in COUNTED if f != 3]  # complete forwards with valid times


# --- kernel table -------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["naive", "sdpa_math"])
def test_kernel_table_counted_by_hand(variant):
    """Every forward complete and timed: per name, calls in each forward, the sum of its durations,
    that over 10 forwards, over its calls, and its share of all device time; rows by total time."""
    trace = h200(variant)
    hand = plain(trace)
    per_name = defaultdict(lambda: {"calls": Counter(), "durs": []})
    for g in hand["gpu"]:
        per_name[g["name"]]["calls"][g["forward"]] += 1
        per_name[g["name"]]["durs"].append(g["dur"])
    everything = sum(g["dur"] for g in hand["gpu"])
    kt = kernel_table(analyse_trace(trace, "attn_fwd"), variant, STUDY)
    assert list(kt.columns) == KERNEL_COLUMNS and list(kt.index) == list(range(len(per_name)))
    assert set(kt["variant"]) == {variant} and set(kt["shape_key"]) == {STUDY}
    assert list(kt["total_us"]) == sorted(kt["total_us"], reverse=True)  # largest first
    assert list(kt["kernel"]) == sorted(per_name, key=lambda n: -sum(per_name[n]["durs"]))
    for row in kt.itertuples():
        h = per_name[row.kernel]
        calls = [h["calls"][f] for f in range(10)]
        assert (row.calls_per_forward, row.calls_min, row.calls_max) == (calls[0], min(calls), max(calls)), row.kernel
        assert row.total_us == pytest.approx(sum(h["durs"]))
        assert row.us_per_forward == pytest.approx(sum(h["durs"]) / 10)
        assert row.mean_us == pytest.approx(statistics.mean(h["durs"]))
        assert row.share_pct == pytest.approx(100 * sum(h["durs"]) / everything)
    if variant == "sdpa_math":  # several calls of one kernel per forward: a per-forward count, not a total
        assert kt["calls_per_forward"].max() > 1 and kt["calls_per_forward"].sum() == 20


def test_kernel_table_counts_complete_forwards_and_times_timed_ones():
    """Counts over the 9 complete forwards; times over the 8 of them with valid times: forward 3's
    valid kernels are left out of the sums too, not only its memcpy."""
    trace, hand = spliced_naive()
    kt = kernel_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY).set_index("kernel")
    names = {g["name"] for g in hand["gpu"]}
    assert set(kt.index) == names
    for name in names:
        calls = [sum(1 for g in hand["gpu"] if g["name"] == name and g["forward"] == f) for f in COUNTED]
        durs = [g["dur"] for g in hand["gpu"] if g["name"] == name and g["forward"] in TIMED]
        row = kt.loc[name]
        assert (row["calls_per_forward"], row["calls_min"], row["calls_max"]) == (calls[0], min(calls), max(calls))
        assert row["total_us"] == pytest.approx(sum(durs)) and row["us_per_forward"] == pytest.approx(sum(durs) / 8)
        assert row["mean_us"] == pytest.approx(sum(durs) / len(durs))
    total = sum(g["dur"] for g in hand["gpu"] if g["forward"] in TIMED)
    assert kt["share_pct"].sum() == pytest.approx(100)
    memcpy = kt[kt["category"] == "memcpy"].iloc[0]
    assert memcpy["share_pct"] == pytest.approx(100 * memcpy["total_us"] / total)


def test_kernel_table_where_forwards_differ_in_one_kernel():
    """x3_counts_5_vs_6: 5 forwards with 5 kernels, 5 with a sixth: one name runs once or twice. The
    sixth kernel overlaps the next one on the stream, so times come from the other forwards only."""
    trace = _load(FIXTURES / "cases" / "x3_counts_5_vs_6.json.gz")
    hand = plain(trace)
    timed = set(range(10)) - overlapping_forwards(hand)
    assert len(timed) == 5
    kt = kernel_table(analyse_trace(trace, "attn_fwd"), "naive", STUDY).set_index("kernel")
    for name in {g["name"] for g in hand["gpu"]}:
        calls = [sum(1 for g in hand["gpu"] if g["name"] == name and g["forward"] == f) for f in range(10)]
        durs = [g["dur"] for g in hand["gpu"] if g["name"] == name and g["forward"] in timed]
        assert (kt.loc[name, "calls_min"], kt.loc[name, "calls_max"]) == (min(calls), max(calls))
        if min(calls) != max(calls):  # the sixth kernel is a second call of one of the five
            assert (min(calls), max(calls)) == (1, 2) and pd.isna(kt.loc[name, "calls_per_forward"])
        else:
            assert kt.loc[name, "calls_per_forward"] == calls[0]
        assert kt.loc[name, "us_per_forward"] == pytest.approx(sum(durs) / len(timed))
        assert kt.loc[name, "mean_us"] == pytest.approx(sum(durs) / sum(calls[f] for f in timed))


def test_kernel_table_with_no_timed_forward_has_counts_and_no_times():
    """r1_ts0_dur0: every forward has a kernel with ts 0 / dur 0: counted, never timed."""
    trace = _load(FIXTURES / "cases" / "r1_ts0_dur0.json.gz")
    hand = plain(trace)
    kt = kernel_table(analyse_trace(trace, "attn_fwd"), "naive", STUDY)
    assert list(kt.columns) == KERNEL_COLUMNS and len(kt) == len({g["name"] for g in hand["gpu"]})
    assert kt["total_us"].isna().all() and kt["us_per_forward"].isna().all() and kt["mean_us"].isna().all()
    assert kt.groupby("category")["calls_per_forward"].sum().to_dict() == {"kernel": 5, "memcpy": 1, "memset": 1}


def test_empty_tables_keep_their_columns():
    cpu = {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "attn_fwd", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]}
    frames = analyse_trace(cpu, "attn_fwd")
    assert list(kernel_table(frames, "v", "s").columns) == KERNEL_COLUMNS
    assert list(op_table(frames, "v", "s").columns) == ["variant", "shape_key", "op", "calls_per_forward", "calls_min",
                                                        "calls_max", "mean_us"]
    assert list(launch_api_table(frames, "v", "s").columns)[2] == "api"
    assert list(forward_table(analyse_trace({"traceEvents": []}, "attn_fwd"), "v", "s").columns) == FORWARD_COLUMNS


def test_per_forward_counts_include_forwards_without_any_row():
    # a: 2 calls in forwards 0 and 1; b: 1 in each; d: forward 1 only; c: forward 5, not asked for
    rows = pd.DataFrame({"name": ["a", "a", "b", "a", "b", "a", "d", "c"], "forward": [0, 0, 0, 1, 1, 1, 1, 5]})
    cols = ["calls_per_forward", "calls_min", "calls_max"]
    two = per_forward_counts(rows, "name", [0, 1])
    assert two.loc["a", cols].tolist() == [2, 2, 2] and two.loc["b", cols].tolist() == [1, 1, 1]
    assert pd.isna(two.loc["d", "calls_per_forward"]) and two.loc["d", ["calls_min", "calls_max"]].tolist() == [0, 1]
    assert sorted(two.index) == ["a", "b", "d"]
    # forward 2 has no row at all: 0 calls of everything there
    three = per_forward_counts(rows, "name", [0, 1, 2])
    assert three["calls_per_forward"].isna().all()
    assert three["calls_min"].tolist() == [0, 0, 0] and three["calls_max"].tolist() == [2, 1, 1]


def test_concat_tables():
    a = pd.DataFrame({"x": [1, 2]}, index=[5, 6])
    b = pd.DataFrame({"x": [3]}, index=[5])
    empty = pd.DataFrame(columns=["x", "y"])
    out = concat_tables([empty, a, b])
    assert out["x"].tolist() == [1, 2, 3] and list(out.index) == [0, 1, 2]
    assert list(concat_tables([empty, pd.DataFrame(columns=["z"])]).columns) == ["x", "y"]
    assert concat_tables([]).empty and list(concat_tables([]).columns) == []


# --- forward table and summary row ---------------------------------------------------------------

def test_forward_table_counted_by_hand():
    trace, hand = spliced_naive()
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY).set_index("forward")
    assert list(fw.index) == list(range(10))
    for f, r in enumerate(hand["ranges"]):
        mine = [g for g in hand["gpu"] if g["forward"] == f]
        ok = [g for g in mine if valid(g)]
        row = fw.loc[f]
        assert row["cpu_us"] == r["dur"]
        assert row["device_us"] == pytest.approx(sum(g["dur"] for g in ok))
        assert row["device_span_us"] == pytest.approx(max(g["ts"] + g["dur"] for g in ok) - min(g["ts"] for g in ok))
        assert (row["kernels"], row["memcpy"], row["memset"]) == tuple(
            sum(1 for g in mine if g["category"] == c) for c in ("kernel", "memcpy", "memset"))
        launches = [e for e, ff in hand["calls"] if ff == f and e["name"] in LAUNCH]
        assert row["launch_calls"] == len(launches) and row["launches_without_gpu_event"] == hand["lost"][f]
        assert row["bad_time_events"] == len(mine) - len(ok)
        assert bool(row["complete"]) == (f in COUNTED) and bool(row["timing_complete"]) == (f in TIMED)
    assert (fw.loc[0, "kernels"], fw.loc[0, "launches_without_gpu_event"]) == (4, 1)
    assert (fw.loc[3, "bad_time_events"], fw.loc[3, "memcpy"]) == (1, 1)
    # same work, same signature; forward 0 ran one kernel less as far as the trace knows
    assert fw.loc[COUNTED, "signature"].nunique() == 1 and fw.loc[0, "signature"] != fw.loc[1, "signature"]
    # the signature: the first 12 hex digits of the SHA-1 of the forward's sorted GPU event names, one a line
    names = "\n".join(sorted(g["name"] for g in hand["gpu"] if g["forward"] == 1))
    assert fw.loc[1, "signature"] == hashlib.sha1(names.encode()).hexdigest()[:12]
    counts = ["kernels", "memcpy", "memset", "launch_calls", "launches_without_gpu_event", "gpu_events_without_launch",
              "duplicate_gpu_events", "bad_time_events", "unattributed_gpu_events"]
    assert all(str(fw[c].dtype) == "int64" for c in counts), fw[counts].dtypes  # counts, never 5.0
    assert (fw["unattributed_gpu_events"] == 0).all()


def test_a_forward_without_a_memset_counts_zero_memsets():
    """naive's forward 2 without its memset (launch and GPU record): 0 there, 1 in the others."""
    trace = h200("naive")
    hand = plain(trace)
    corr = next(e["args"]["correlation"] for e, f in hand["calls"] if f == 2 and e["name"] == "cudaMemsetAsync")
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("args", {}).get("correlation") != corr]
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    assert fw["memset"].tolist() == [1, 1, 0, 1, 1, 1, 1, 1, 1, 1] and (fw["memcpy"] == 1).all() and fw["complete"].all()
    assert fw["launch_calls"].tolist() == [7, 7, 6, 7, 7, 7, 7, 7, 7, 7]


def _example_status(variant: str) -> dict:
    return json.loads((EXAMPLE / "captures" / STUDY / variant / "r1" / "status.json").read_text())


def test_summary_row_counted_by_hand():
    """Counts from the 9 complete forwards, device times from the 8 timed ones, CPU times from the 9,
    quartiles as pandas' linear ones (statistics' inclusive method), TFLOP/s over the median."""
    trace, hand = spliced_naive()
    status = _example_status("naive")
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    row = summary_row(status, fw)
    device = [sum(g["dur"] for g in hand["gpu"] if g["forward"] == f and valid(g)) / 1e3 for f in TIMED]
    cpu = [hand["ranges"][f]["dur"] / 1e3 for f in COUNTED]
    q1, _, q3 = statistics.quantiles(device, n=4, method="inclusive")
    assert (row["device_ms_per_forward"], row["device_ms_min"], row["device_ms_max"], row["device_ms_q1"], row["device_ms_q3"]) == (
        pytest.approx(statistics.median(device)), pytest.approx(min(device)), pytest.approx(max(device)), pytest.approx(q1),
        pytest.approx(q3))
    c1, _, c3 = statistics.quantiles(cpu, n=4, method="inclusive")
    assert (row["cpu_ms_per_forward"], row["cpu_ms_min"], row["cpu_ms_max"], row["cpu_ms_q1"], row["cpu_ms_q3"]) == (
        pytest.approx(statistics.median(cpu)), pytest.approx(min(cpu)), pytest.approx(max(cpu)), pytest.approx(c1),
        pytest.approx(c3))
    assert (row["kernels_per_forward"], row["memcpy_per_forward"], row["memset_per_forward"]) == (5, 1, 1)
    assert (row["forwards_expected"], row["forwards_profiled"], row["forwards_complete"], row["forwards_timed"]) == (10, 10, 9, 8)
    assert row["incomplete_forwards"] == "0" and row["bad_time_events"] == 1 and row["status"] == "ok"
    # 8 * 16 * (4 * 1024^2 * 64 + 2 * 1024^2) / 2 FLOP = 17.314 GFLOP (causal); 64 MiB of q, k, v, out
    assert row["forward_gflop"] == pytest.approx(17.314086912) and row["flop_per_byte"] == pytest.approx(17314086912 / 67108864)
    assert row["tflops"] == pytest.approx(17.314086912 / statistics.median(device))
    assert row["tflops_graph"] == pytest.approx(17.314086912 / status["graph_timing"]["median_ms"])
    assert row["peak_memory_mb"] == pytest.approx(status["peak_memory_bytes"] / 2**20)
    if "held_memory_bytes" in status:
        assert row["forward_memory_mb"] == pytest.approx((status["peak_memory_bytes"] - status["held_memory_bytes"]) / 2**20)
    timing, graph = status["timing"], status["graph_timing"]
    assert (row["timed_ms_median"], row["timed_ms_q1"], row["timed_ms_q3"], row["timed_ms_min"], row["timed_ms_max"]) == (
        timing["median_ms"], timing["q1_ms"], timing["q3_ms"], timing["min_ms"], timing["max_ms"])
    assert (row["timed_repeats"], row["timing_method"], row["host_load_1m"]) == (50, "cuda_events", status["host"]["load_avg_1m"])
    assert (row["graph_ms_median"], row["graph_ms_q1"], row["graph_ms_q3"], row["graph_ms_min"], row["graph_ms_max"]) == (
        graph["median_ms"], graph["q1_ms"], graph["q3_ms"], graph["min_ms"], graph["max_ms"])
    assert (row["batch"], row["heads"], row["seq_len"], row["head_dim"], row["dtype"], row["causal"], row["device"]) == (
        8, 16, 1024, 64, "bf16", True, "cuda")
    assert row["rel_error"] == status["rel_error"] and row["rel_error_ok"] is True and row["checks_missing"] == ""
    assert "1 of 10 forwards incomplete (forward 0: 1 launches without a GPU event)" in row["trace_note"]
    assert "1 GPU event with impossible times" in row["trace_note"] and "in forward 3:" in row["trace_note"]


# --- op and API tables ---------------------------------------------------------------------------

def test_op_table_in_order_of_first_appearance_in_the_first_complete_forward():
    trace, hand = spliced_naive()
    frames = analyse_trace(trace, "attn_fwd", expect_gpu=True)
    ot = op_table(frames, "naive", STUDY)
    first = [e["name"] for e, f in sorted(hand["ops"], key=lambda p: p[0]["ts"]) if f == COUNTED[0]]
    assert list(ot["op"]) == list(dict.fromkeys(first))
    assert list(ot.columns) == ["variant", "shape_key", "op", "calls_per_forward", "calls_min", "calls_max", "mean_us"]
    assert set(ot["variant"]) == {"naive"} and set(ot["shape_key"]) == {STUDY} and list(ot.index) == list(range(len(ot)))
    for row in ot.itertuples():
        durs = [e["dur"] for e, f in hand["ops"] if e["name"] == row.op and f in COUNTED]
        calls = [sum(1 for e, f in hand["ops"] if e["name"] == row.op and f == ff) for ff in COUNTED]
        assert (row.calls_per_forward, row.calls_min, row.calls_max) == (calls[0], min(calls), max(calls)), row.op
        assert row.mean_us == pytest.approx(statistics.mean(durs)), row.op
    assert ot.set_index("op").loc["aten::as_strided", "calls_per_forward"] == 8  # counted in the trace, not in one call


def test_op_table_keeps_ops_that_the_first_forward_did_not_run():
    trace = h200("naive")
    hand = plain(trace)
    # forward 0 loses its aten::clone (and what clone called): a later op, in name order after the first forward's
    clone = next(e for e, f in hand["ops"] if f == 0 and e["name"] == "aten::clone")
    inside = [e for e, f in hand["ops"] if f == 0 and clone["ts"] <= e["ts"] <= clone["ts"] + clone["dur"]]
    drop = {id(e) for e in inside}
    trace["traceEvents"] = [e for e in trace["traceEvents"] if id(e) not in drop]
    ot = op_table(analyse_trace(trace, "attn_fwd", expect_gpu=False), "naive", STUDY)
    ops = [(e, f) for e, f in hand["ops"] if id(e) not in drop]
    first = list(dict.fromkeys(e["name"] for e, f in sorted(ops, key=lambda p: p[0]["ts"]) if f == 0))
    assert list(ot["op"]) == first + sorted({e["name"] for e, f in ops if f >= 0} - set(first))
    assert "aten::clone" not in first and "aten::clone" in set(ot["op"])
    clone_row = ot.set_index("op").loc["aten::clone"]
    assert (clone_row["calls_min"], clone_row["calls_max"]) == (0, 1) and pd.isna(clone_row["calls_per_forward"])


def test_launch_api_table_by_name():
    trace, hand = spliced_naive()
    at = launch_api_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    names = sorted({e["name"] for e, f in hand["calls"] if f in COUNTED})
    assert list(at["api"]) == names and set(at["variant"]) == {"naive"} and set(at["shape_key"]) == {STUDY}
    assert list(at.columns) == ["variant", "shape_key", "api", "calls_per_forward", "calls_min", "calls_max", "mean_us"]
    for row in at.itertuples():
        durs = [e["dur"] for e, f in hand["calls"] if e["name"] == row.api and f in COUNTED]
        calls = [sum(1 for e, f in hand["calls"] if e["name"] == row.api and f == ff) for ff in COUNTED]
        assert row.mean_us == pytest.approx(statistics.mean(durs))
        assert (row.calls_min, row.calls_max) == (min(calls), max(calls)), row.api
    # each forward: 3 cudaLaunchKernel and 2 cuLaunchKernelEx (the 5 kernels), one memcpy and one memset call
    assert at.set_index("api")["calls_per_forward"].to_dict() == {"cuLaunchKernelEx": 2, "cudaLaunchKernel": 3,
                                                                  "cudaMemcpyAsync": 1, "cudaMemsetAsync": 1}


# --- attribution of GPU events to forwards (trace.py) -------------------------------------------

def test_gpu_events_joined_to_launch_and_op_by_hand():
    """naive: every GPU event's launch call, launch start, issuing aten op (the cpu_op whose External
    id the launch carries), device and launch metadata, read from the JSON; rows in time order."""
    trace = h200("naive")
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    op_name = {}
    for e in ev:
        if e.get("cat") == "cpu_op":
            op_name.setdefault(e["args"]["External id"], e["name"])
    hand = sorted((e for e in ev if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    events = events_frame(trace)
    gpu = gpu_events(events, forward_ranges(events, "attn_fwd"))
    assert len(gpu) == len(hand) == 70 and list(gpu.index) == list(range(70))
    assert list(gpu.columns) == ["name", "category", "ts", "dur", "end", "forward", "launch_api", "launch_ts", "op", "correlation",
                                 "device", "stream", "graph_replay", "stream_overlap", "time_ok", "duplicate", "orphan_forward",
                                 "grid", "block", "registers_per_thread",
                                 "shared_memory_bytes", "est_occupancy_pct", "blocks_per_sm", "warps_per_sm"]
    assert str(gpu["forward"].dtype) == "int64"
    fwd = plain(trace)
    forward_by_ts = {g["ts"]: g["forward"] for g in fwd["gpu"]}
    for row, e in zip(gpu.itertuples(), hand):
        call = calls[e["args"]["correlation"]]
        assert (row.name, row.category, row.ts, row.dur) == (e["name"], GPU_CATS[e["cat"]], e["ts"], e["dur"])
        assert row.end == pytest.approx(e["ts"] + e["dur"])
        assert (row.launch_api, row.launch_ts, row.correlation) == (call["name"], call["ts"], e["args"]["correlation"])
        assert row.op == op_name[call["args"]["External id"]] and row.forward == forward_by_ts[e["ts"]]
        assert row.device == e["args"]["device"] and row.time_ok and not row.duplicate and row.orphan_forward == -1
        if e["cat"] == "kernel":
            assert row.grid == "x".join(map(str, e["args"]["grid"])) and row.block == "x".join(map(str, e["args"]["block"]))
            assert row.registers_per_thread == e["args"]["registers per thread"]
            assert row.shared_memory_bytes == e["args"]["shared memory"]
            assert row.est_occupancy_pct == e["args"]["est. achieved occupancy %"]
            assert row.blocks_per_sm == e["args"]["blocks per SM"] and row.warps_per_sm == e["args"]["warps per SM"]
        else:
            assert pd.isna(row.grid) and pd.isna(row.registers_per_thread)
    assert sorted(Counter(gpu["forward"]).items()) == [(f, 7) for f in range(10)]
    assert gpu.loc[gpu["category"] == "memcpy", "op"].unique().tolist() == ["aten::copy_"]


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat not in GPU_CATS else 0, "tid": tid if cat not in GPU_CATS else 7,
            "ts": ts, "dur": dur, "args": args}


def _launch(ts, corr, ext=None, tid=1):
    return _x("cuda_runtime", "cudaLaunchKernel", ts, 2, tid=tid, correlation=corr, **({"External id": ext} if ext else {}))


def test_ranges_and_attribution_at_the_boundaries():
    """Forward ranges [100, 200] and [200, 300] touch: touching is not overlapping, both are fine (a
    call at 200 belongs to the later one); [400, 500] is fine; [600, 600] has no length: not a range.
    Launch calls exactly at a range's start and end belong to it."""
    events = events_frame({"traceEvents": [
        _x("user_annotation", "attn_fwd", 400, 100), _x("user_annotation", "attn_fwd", 100, 100),
        _x("user_annotation", "attn_fwd", 200, 100), _x("user_annotation", "attn_fwd", 600, 0),
        _x("user_annotation", "attn_fwd", 700, 50, tid=2), _x("user_annotation", "other", 0, 1000),
        _x("user_annotation", "attn_fwd", None, 50, tid=4), _x("user_annotation", "attn_fwd", 900, None, tid=5)]})
    ranges = forward_ranges(events, "attn_fwd")
    assert ranges["ts"].tolist()[:6] == [100, 200, 400, 600, 700, 900] and ranges["forward"].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert ranges["cpu_us"].tolist()[:5] == [100, 100, 100, 0, 50] and ranges["end"].tolist()[:5] == [200, 300, 500, 600, 750]
    # touching ranges are fine, a zero-length range is not a range, nor is a range without a start
    # (sorted last) or without a duration
    assert ranges["range_ok"].tolist() == [True, True, True, False, True, False, False]
    assert ranges["tid"].tolist()[5:] == [5, 4]
    ts = pd.Series([400.0, 500.0, 399.0, 501.0, 600.0, 450.0, 725.0, 725.0, 150.0, float("nan"), 420.0, 910.0])
    tid = pd.Series([1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 3, 5])
    # start, end, just before, just after, zero-length range, other thread, thread 2's range, its time
    # on thread 1, inside a touching range, no time, a thread without ranges, after a range with no end
    assert assign_forward(ts, tid, ranges).tolist() == [2, 2, -1, -1, -1, -1, 4, -1, 0, -1, -1, -1]
    assert assign_forward(pd.Series([200.0]), pd.Series([1]), ranges).tolist() == [1]


def test_a_range_inside_a_long_one_flags_both_and_not_the_next():
    # [0, 1000] holds [10, 20]; [1500, 1600] starts after the long one ended
    events = events_frame({"traceEvents": [_x("user_annotation", "attn_fwd", 0, 1000), _x("user_annotation", "attn_fwd", 10, 10),
                                           _x("user_annotation", "attn_fwd", 30, 10), _x("user_annotation", "attn_fwd", 1500, 100)]})
    assert forward_ranges(events, "attn_fwd")["range_ok"].tolist() == [False, False, False, True]


def test_gpu_time_checks_at_their_boundaries():
    """The CPU side spans [100, 300] (200 us), so GPU work may end at 300 + 200 = 500 at the latest.
    A kernel may start at its launch's start, not before; ts and dur must be > 0."""
    trace = {"traceEvents": [
        _x("user_annotation", "attn_fwd", 100, 200),
        _x("cpu_op", "aten::mm", 110, 150, **{"External id": 1}),
        _launch(120, 1, ext=1), _x("kernel", "at_launch", 120, 30, correlation=1),
        _launch(130, 2, ext=1), _x("kernel", "before_launch", 129.5, 30, correlation=2),
        _launch(140, 3, ext=1), _x("kernel", "ends_at_latest", 450, 50, correlation=3),
        _launch(150, 4, ext=1), _x("kernel", "ends_after_latest", 450, 50.5, correlation=4),
        _launch(160, 5, ext=1), _x("kernel", "zero_dur", 170, 0, correlation=5),
        _launch(170, 6, ext=1), _x("kernel", "tiny", 171, 0.001, correlation=6),
    ]}
    events = events_frame(trace)
    gpu = gpu_events(events, forward_ranges(events, "attn_fwd")).set_index("name")
    assert gpu["time_ok"].to_dict() == {"at_launch": True, "before_launch": False, "ends_at_latest": True,
                                        "ends_after_latest": False, "zero_dur": False, "tiny": True}
    assert (gpu["forward"] == 0).all() and (gpu["op"] == "aten::mm").all()
    fw = forward_table(analyse_trace(trace, "attn_fwd"), "v", "s")
    assert fw.loc[0, "bad_time_events"] == 3 and fw.loc[0, "device_us"] == pytest.approx(30 + 50 + 0.001)
    assert fw.loc[0, "device_span_us"] == pytest.approx(500 - 120)


def test_orphan_gpu_event_is_credited_to_the_forward_of_its_own_op():
    """Two forwards; in each a kernel lost its launch record: its own External id (3, 7) names an aten
    op of forward 0, 1, so both are incomplete; a kernel with an unknown id belongs nowhere."""
    trace = {"traceEvents": [
        _x("user_annotation", "attn_fwd", 0, 100), _x("user_annotation", "attn_fwd", 200, 100),
        _x("cpu_op", "aten::bmm", 10, 50, **{"External id": 3}), _x("cpu_op", "aten::softmax", 210, 50, **{"External id": 7}),
        _launch(20, 1, ext=3), _x("kernel", "k1", 25, 5, correlation=1),
        _x("kernel", "k0", 30, 5, correlation=4, **{"External id": 3}),
        _x("kernel", "k2", 230, 5, correlation=2, **{"External id": 7}),
        _x("kernel", "k3", 240, 5, correlation=3, **{"External id": 99}),
    ]}
    events = events_frame(trace)
    gpu = gpu_events(events, forward_ranges(events, "attn_fwd")).set_index("name")
    assert gpu["orphan_forward"].to_dict() == {"k1": -1, "k0": 0, "k2": 1, "k3": -1}
    assert gpu["forward"].to_dict() == {"k1": 0, "k0": -1, "k2": -1, "k3": -1}
    fw = forward_table(analyse_trace(trace, "attn_fwd"), "v", "s")
    assert fw["gpu_events_without_launch"].tolist() == [1, 1] and fw["complete"].tolist() == [False, False]
    assert (fw["unattributed_gpu_events"] == 1).all()  # k3: outside every forward, no op to name one


def test_integer_ids():
    ids = integer_ids(pd.Series([3, 3.0, "4", 2.5, "x", None, float("inf"), -2, 2**40]))
    assert ids.tolist() == [3, 3, 4, pd.NA, pd.NA, pd.NA, pd.NA, -2, 2**40]
    assert str(ids.dtype) == "Int64"


# --- forward groups and the incomplete forwards' text ----------------------------------------------

def test_incomplete_forwards_named_as_runs():
    """Forwards 0, 1, 2, 5 and 9 of naive lose one kernel's GPU record: '0-2, 5, 9' (forward numbers
    from 0), counted by hand from the JSON."""
    trace = h200("naive")
    hand = plain(trace)
    lose = {min(g["ts"] for g in hand["gpu"] if g["forward"] == f and g["category"] == "kernel") for f in (0, 1, 2, 5, 9)}
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not (e.get("cat") == "kernel" and e["ts"] in lose)]
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    row = summary_row(_example_status("naive"), fw)
    assert row["incomplete_forwards"] == "0-2, 5, 9" and row["forwards_complete"] == 5
    assert "5 of 10 forwards incomplete (forwards 0-2, 5, 9: 5 launches without a GPU event)" in row["trace_note"]


def test_forward_groups_by_hand():
    """x3_counts_5_vs_6: two groups of 5 forwards, each with the median device time of its own
    timed forwards (the 6-kernel ones have two GPU events overlapping on one stream: none timed, no
    device time); r1_ts0_dur0: one group, no forward timed, so no device time."""
    trace = _load(FIXTURES / "cases" / "x3_counts_5_vs_6.json.gz")
    hand = plain(trace)
    fw = forward_table(analyse_trace(trace, "attn_fwd"), "naive", STUDY)
    groups = forward_groups(fw)
    by_kernels = defaultdict(list)
    for f in range(10):
        mine = [g for g in hand["gpu"] if g["forward"] == f]
        by_kernels[sum(1 for g in mine if g["category"] == "kernel")].append((f, sum(g["dur"] for g in mine)))
    assert [(g["kernels"], g["memcpy"], g["memset"], g["forwards"]) for g in groups] == [(5, 1, 1, 5), (6, 1, 1, 5)]
    untimed_here = overlapping_forwards(hand)
    assert untimed_here == {f for f, _ in by_kernels[6]}
    for g in groups:
        assert g["forward_ids"] == [f for f, _ in by_kernels[g["kernels"]]]
        timed_us = [us for f, us in by_kernels[g["kernels"]] if f not in untimed_here]
        assert g["device_ms"] == (pytest.approx(statistics.median(timed_us) / 1e3) if timed_us else None)
        assert g["signature"] == fw.loc[g["forward_ids"][0], "signature"] and len(g["signature"]) == 12
    untimed = forward_groups(forward_table(analyse_trace(_load(FIXTURES / "cases" / "r1_ts0_dur0.json.gz"), "attn_fwd"),
                                           "naive", STUDY))
    assert [(g["kernels"], g["forwards"], g["device_ms"]) for g in untimed] == [(5, 10, None)]


@pytest.mark.parametrize("signature", ["missing", "empty"])
def test_forward_groups_without_signatures(signature):
    """Forward tables written without signatures (a CPU run's are all empty, read back as NaN)."""
    fw = pd.DataFrame({"forward": [0, 1, 2, 3], "kernels": [2, 2, 3, 2], "memcpy": 0, "memset": 0,
                       "device_us": [10.0, 30.0, 50.0, 20.0], "complete": [True, True, True, False],
                       "timing_complete": [True, True, False, False]})
    if signature == "empty":
        fw["signature"] = float("nan")
    groups = forward_groups(fw)
    assert groups == [{"kernels": 2, "memcpy": 0, "memset": 0, "forwards": 2, "forward_ids": [0, 1], "signature": "",
                       "device_ms": 0.02},
                      {"kernels": 3, "memcpy": 0, "memset": 0, "forwards": 1, "forward_ids": [2], "signature": "",
                       "device_ms": None}]


# --- the trace note: every defect, counted by hand ------------------------------------------------

def test_trace_note_names_every_defect_with_its_counts():
    """naive with one defect of each kind: forward 0 lost a kernel's GPU record, forward 1 has a GPU
    event twice, forward 4 a kernel without its launch record, forward 6 a range with a negative
    duration (its 7 GPU events then belong to no forward), forwards 7 and 8 three events with
    impossible times, forward 9 an extra memset; 12 forwards asked for. The note, sentence by sentence."""
    trace = h200("naive")
    hand = plain(trace)
    ranges = hand["ranges"]
    calls = {e["args"]["correlation"]: e for e, f in hand["calls"] if "correlation" in e["args"]}

    def gpu_of(f, cat, i=0):
        mine = sorted((e for e in trace["traceEvents"] if e.get("cat") == cat and calls.get(e["args"].get("correlation"))
                       and ranges[f]["ts"] <= calls[e["args"]["correlation"]]["ts"] <= ranges[f]["ts"] + ranges[f]["dur"]),
                      key=lambda e: e["ts"])
        return mine[i]

    lost, twice, orphan = gpu_of(0, "kernel"), gpu_of(1, "kernel", 2), gpu_of(4, "kernel", 1)
    bad7, bad8a, bad8b = gpu_of(7, "kernel", 3), gpu_of(8, "kernel"), gpu_of(8, "gpu_memset")
    bad7["dur"], bad8a["ts"], bad8b["dur"] = 0.0, 0, -1.0
    ranges[6]["dur"] = -ranges[6]["dur"]
    memset9 = gpu_of(9, "gpu_memset")
    launch9 = calls[memset9["args"]["correlation"]]
    extra_launch = dict(launch9, ts=launch9["ts"] + 0.5, args=dict(launch9["args"], correlation=777777))
    extra_memset = dict(memset9, ts=memset9["ts"] + 3.0, dur=1.25, args=dict(memset9["args"], correlation=777777))
    orphan_launch = calls[orphan["args"]["correlation"]]
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e is not lost and e is not orphan_launch]
    trace["traceEvents"] += [dict(twice), extra_launch, extra_memset]

    status = dict(_example_status("naive"), schedule={"active": 12})
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    row = summary_row(status, fw)
    # device time of the complete, timed forwards of each group, from the untouched trace
    untouched = plain(h200("naive"))
    dev = {f: sum(g["dur"] for g in untouched["gpu"] if g["forward"] == f) for f in range(10)}
    five = statistics.median([dev[2], dev[3], dev[5]]) / 1e3  # 7 and 8 have bad times
    nine = (dev[9] + 1.25) / 1e3
    assert row["trace_note"] == (
        "10 of 12 profiled forwards are in the trace; "
        "4 of 10 forwards incomplete (forwards 0-1, 4, 6: 1 launches without a GPU event, 1 GPU events without their launch "
        "record, 2 GPU events sharing one launch's correlation id, 1 forward ranges with invalid times or overlapping "
        "another), left out of every statistic; "
        "3 GPU events with impossible times (ts or duration missing, <= 0 or not finite, starting before its launch, or "
        "ending long after the trace) in forwards 7-8: counted, but those forwards are left out of device times; "
        f"forwards differ: 5 kernels + 1 memcpy + 1 memset ({five:.4f} ms) in 5 forwards; "
        f"5 kernels + 1 memcpy + 2 memset ({nine:.4f} ms) in 1 forward; "
        "7 GPU events of the trace launched outside every forward range (or with no launch record): not counted, the "
        "forwards may miss work")
    assert (row["forwards_complete"], row["forwards_timed"], row["bad_time_events"]) == (6, 4, 3)
    assert row["incomplete_forwards"] == "0-1, 4, 6" and row["kernels_per_forward"] is None
    assert [(g["memset"], g["forward_ids"]) for g in json.loads(row["forward_groups"])] == [(1, [2, 3, 5, 7, 8]), (2, [9])]


def test_a_gpu_forward_without_any_gpu_activity_says_so():
    trace = h200("naive")
    hand = plain(trace)
    r = hand["ranges"][5]
    gone = {e["args"]["correlation"] for e, f in hand["calls"] if f == 5 and "correlation" in e["args"]}
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("args", {}).get("correlation") not in gone]
    # expect_gpu left to the trace: it has deviceProperties, so it is a GPU trace
    fw = forward_table(analyse_trace(trace, "attn_fwd"), "naive", STUDY).set_index("forward", drop=False)
    assert (fw.loc[5, "kernels"], fw.loc[5, "device_us"], fw.loc[5, "device_span_us"], fw.loc[5, "signature"]) == (0, 0.0, 0.0, "")
    assert not fw.loc[5, "complete"] and fw.drop(index=5)["complete"].all()
    row = summary_row(_example_status("naive"), fw)
    assert row["trace_note"] == ("1 of 10 forwards incomplete (forward 5: no GPU activity recorded), left out of every "
                                 "statistic") and r["dur"] > 0
    assert row["incomplete_forwards"] == "5" and row["forwards_complete"] == row["forwards_timed"] == 9


# --- summary rows of captures that did not run, or not all the way --------------------------------

def _empty_forwards():
    return forward_table(analyse_trace({"traceEvents": []}, "attn_fwd"), "sdpa_math", "s")


def test_out_of_memory_capture_publishes_its_reason_and_bytes_and_no_trace_note():
    status = json.loads((EXAMPLE / "captures" / "b8_h16_s16384_d64_bf16_causal" / "sdpa_math" / "r1" / "status.json").read_text())
    row = summary_row(status, _empty_forwards())
    assert row["status"] == "out_of_memory" and row["oom_bytes"] == 128 * 2**30 and row["reason"] == status["reason"]
    assert row["trace_note"] == "" and row["forward_groups"] is None  # no trace: "0 of 10 forwards" would say nothing
    assert row["forward_gflop"] == 4432.406249472 and row["flop_per_byte"] == 4432406249472 / 1073741824
    assert row["peak_memory_mb"] is None and row["device_ms_per_forward"] is None and row["cpu_ms_per_forward"] is None
    assert row["host_load_1m"] == status["host"]["load_avg_1m"] and (row["seq_len"], row["head_dim"]) == (16384, 64)
    no_reason = {k: v for k, v in status.items() if k != "reason"}
    assert summary_row(no_reason, _empty_forwards())["reason"] == ""


def test_incomplete_trace_found_by_the_capture_itself_keeps_the_note():
    # (not named test_capture...: pyproject's mutmut selection leaves those out as slow captures)
    """status incomplete_trace from the capture's own check: the trace note still says why."""
    trace = h200("naive")
    hand = plain(trace)
    first = {min(g["ts"] for g in hand["gpu"] if g["forward"] == f) for f in range(8)}  # 8 of 10 lose a record
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not (e.get("cat") in GPU_CATS and e["ts"] in first)]
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    status = dict(_example_status("naive"), status="incomplete_trace", reason="from the capture")
    row = summary_row(status, fw)
    assert row["status"] == "incomplete_trace" and row["reason"] == "from the capture"
    assert row["trace_note"].startswith("8 of 10 forwards incomplete (forwards 0-7: 8 launches without a GPU event)")
    # the same trace from a capture that said ok: made incomplete_trace here, the file named in the reason
    row = summary_row(_example_status("naive"), fw)
    assert row["status"] == "incomplete_trace" and row["reason"].startswith(
        "trace.json.gz: 2 complete forwards of 10 profiled, fewer than the minimum of 3 (profiler.min_complete_forwards); 8 of 10")
    assert row["kernels_per_forward"] is None and row["cpu_ms_per_forward"] is None


def test_one_group_writes_no_forward_groups_and_a_graph_error_is_kept():
    trace = h200("naive")
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    status = dict(_example_status("naive"), graph_timing={"error": "RuntimeError: capture failed"}, checks_missing=["a", "b"])
    row = summary_row(status, fw)
    assert row["forward_groups"] is None and row["trace_note"] == "" and row["kernels_per_forward"] == 5
    assert row["graph_error"] == "RuntimeError: capture failed" and row["graph_ms_median"] is None
    assert row["tflops_graph"] is None and row["checks_missing"] == "a; b"


def test_device_time_not_published_note_follows_the_other_notes():
    """6 of 10 forwards with one impossible time each: 4 timed forwards, fewer than the minimum of 5."""
    trace = h200("naive")
    hand = plain(trace)
    first = {min(g["ts"] for g in hand["gpu"] if g["forward"] == f) for f in range(6)}
    for e in trace["traceEvents"]:
        if e.get("cat") in GPU_CATS and e["ts"] in first:
            e["dur"] = 0
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    row = summary_row(dict(_example_status("naive"), min_complete_forwards=5), fw)
    assert row["trace_note"] == (
        "6 GPU events with impossible times (ts or duration missing, <= 0 or not finite, starting before its launch, or "
        "ending long after the trace) in forwards 0-5: counted, but those forwards are left out of device times; "
        "device time not published: 4 forwards with valid GPU times, fewer than the minimum of 5")
    assert row["device_ms_per_forward"] is None and row["tflops"] is None and row["kernels_per_forward"] == 5
    cpu = [r["dur"] / 1e3 for r in hand["ranges"]]
    assert row["cpu_ms_per_forward"] == pytest.approx(statistics.median(cpu))


def test_events_frame_of_events_as_written():
    """Names that are not strings, categories that are not strings, times as numeric strings or words."""
    events = events_frame({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": None, "ts": "100.5", "dur": 4, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": 12345, "ts": 200, "dur": "2.25", "args": {"correlation": "2"}},
        {"ph": "X", "cat": 5, "name": "k", "ts": "soon", "dur": None, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "op", "ts": 7, "dur": "n/a", "args": {}},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1},
    ]})
    assert events["name"].tolist() == ["(no name)", "12345", "k", "op"] and events["cat"].tolist()[:2] == ["kernel", "kernel"]
    assert pd.isna(events["cat"][2])  # not a category: matches none
    assert events["ts"].tolist()[:2] == [100.5, 200.0] and pd.isna(events["ts"][2])
    assert events["dur"].tolist()[:2] == [4.0, 2.25] and events["end"].tolist()[:2] == [104.5, 202.25]
    assert events["dur"].isna().tolist()[2:] == [True, True] and events["ts"][3] == 7.0
    assert events["correlation"].tolist() == [1, 2, pd.NA, pd.NA]


def test_one_launch_recorded_twice_or_one_op_twice_still_gives_one_gpu_event():
    """The same correlation on two API records (runtime and driver) and the same External id on two op
    records: one GPU event, with the first record's launch and op; ts must be > 0, not > 1."""
    trace = {"traceEvents": [
        _x("user_annotation", "attn_fwd", 0.1, 100),
        _x("cpu_op", "aten::mm", 0.15, 50, **{"External id": 3}), _x("cpu_op", "aten::other", 0.16, 40, **{"External id": 3}),
        _launch(0.2, 1, ext=3), _x("cuda_driver", "cuLaunchKernel", 0.3, 1, correlation=1),
        _x("kernel", "k", 0.5, 1, correlation=1),
        _x("kernel", "orphan_at_0", 0, 1, correlation=9, **{"External id": 3}),
    ]}
    events = events_frame(trace)
    gpu = gpu_events(events, forward_ranges(events, "attn_fwd")).set_index("name")
    assert len(gpu) == 2 and (gpu.loc["k", "launch_api"], gpu.loc["k", "launch_ts"], gpu.loc["k", "op"]) == (
        "cudaLaunchKernel", 0.2, "aten::mm")
    assert gpu["time_ok"].to_dict() == {"orphan_at_0": False, "k": True} and not gpu["duplicate"].any()


def test_a_trace_without_forward_ranges_says_only_that():
    """A capture that said ok but whose trace has no range of that name (another range_name): no
    forward, no defect to invent; the minimum is not met."""
    trace = h200("naive")
    fw = forward_table(analyse_trace(trace, "not_attn_fwd", expect_gpu=True), "naive", STUDY)
    row = summary_row(_example_status("naive"), fw)
    assert len(fw) == 0 and row["status"] == "incomplete_trace" and row["forwards_profiled"] == 0
    assert row["trace_note"] == "0 of 10 profiled forwards are in the trace"
    assert row["bad_time_events"] == 0 and row["incomplete_forwards"] == ""


def test_two_of_each_defect_is_plural():
    """naive: forwards 3 and 4 lose a kernel's GPU record, forward 6 has two kernels with dur 0, and
    two launches of forward 8 come from another thread (their 2 GPU events belong to no forward)."""
    trace = h200("naive")
    hand = plain(trace)
    lose = {min(g["ts"] for g in hand["gpu"] if g["forward"] == f and g["category"] == "kernel") for f in (3, 4)}
    zero = sorted(g["ts"] for g in hand["gpu"] if g["forward"] == 6 and g["category"] == "kernel")[:2]
    moved = sorted(e["ts"] for e, f in hand["calls"] if f == 8 and e["name"] == "cudaLaunchKernel")[:2]
    kept = []
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel" and e["ts"] in lose:
            continue
        if e.get("cat") == "kernel" and e["ts"] in zero:
            e["dur"] = 0
        if e.get("cat") == "cuda_runtime" and e["ts"] in moved:
            e["tid"] = 999
        kept.append(e)
    trace["traceEvents"] = kept
    fw = forward_table(analyse_trace(trace, "attn_fwd", expect_gpu=True), "naive", STUDY)
    note = summary_row(_example_status("naive"), fw)["trace_note"]
    assert note.startswith(
        "2 of 10 forwards incomplete (forwards 3-4: 2 launches without a GPU event), left out of every statistic; "
        "2 GPU events with impossible times (ts or duration missing, <= 0 or not finite, starting before its launch, or "
        "ending long after the trace) in forward 6: counted, but those forwards are left out of device times; ")
    assert note.endswith("; 2 GPU events of the trace launched outside every forward range (or with no launch record): not "
                         "counted, the forwards may miss work")


def test_memory_columns_are_the_peak_the_held_and_their_difference():
    """MiB from the status record's bytes: 3 GiB peak over 1 GiB held = 2048 MiB a forward allocated; nothing held;
    a record without held memory (captured before it was recorded) and one without a peak (out of memory)."""
    from attnprof.analysis.tables import _memory_columns

    assert _memory_columns({"peak_memory_bytes": 3 * 2**30, "held_memory_bytes": 2**30}) == {
        "peak_memory_mb": 3072.0, "held_memory_mb": 1024.0, "forward_memory_mb": 2048.0}
    assert _memory_columns({"peak_memory_bytes": 5 * 2**20, "held_memory_bytes": 0})["forward_memory_mb"] == 5.0
    assert _memory_columns({"peak_memory_bytes": 5 * 2**20}) == {"peak_memory_mb": 5.0, "held_memory_mb": None,
                                                                 "forward_memory_mb": None}
    assert _memory_columns({"held_memory_bytes": 2**20}) == {"peak_memory_mb": None, "held_memory_mb": None,
                                                             "forward_memory_mb": None}
