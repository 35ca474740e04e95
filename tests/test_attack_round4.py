"""Faults found by a re-attack of the trace and record kinds (issue 23), written without sight of the fixes;
each expected value is a plain count over the raw JSON (the attacker's), not the program's output."""
import copy
import gzip
import json
from pathlib import Path

import pytest

from attnprof.analysis.backward import analyse_passes, backward_summary, backward_tables
from attnprof.analysis.records import RecordError, check_capture_record, devices_used
from attnprof.analysis.tables import analyse_trace, forward_table, summary_row
from attnprof.analysis.trace import device_properties, load_trace

FIX = Path(__file__).parent / "fixtures"
BASE = json.load(gzip.open(FIX / "h200" / "naive" / "trace.json.gz"))
STATUS = json.load(gzip.open(FIX / "h200" / "naive" / "status.json.gz"))


def publish(trace, tmp_path):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(trace, fh)
    fw = forward_table(analyse_trace(load_trace(path), "attn_fwd", expect_gpu=True), "naive", STATUS["shape_key"])
    return summary_row(STATUS, fw)


def forwards(t):
    return sorted((e for e in t["traceEvents"] if e.get("cat") == "user_annotation" and e.get("name") == "attn_fwd"),
                  key=lambda e: e["ts"])


def calls_in(t, i):
    f = forwards(t)[i]
    return sorted((e for e in t["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")
                   and f["ts"] <= e["ts"] < f["ts"] + f["dur"]), key=lambda e: e["ts"])


def gpu_of(t, corr):
    return [e for e in t["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and e["args"].get("correlation") == corr]


def device_ms(t, forward_ids):
    """Median over ``forward_ids`` of the sum of each forward's GPU event durations, by hand."""
    sums = []
    for i in forward_ids:
        sums.append(sum(g["dur"] for c in calls_in(t, i) for g in gpu_of(t, c["args"].get("correlation"))) / 1e3)
    sums.sort()
    n = len(sums)
    return sums[n // 2] if n % 2 else (sums[n // 2 - 1] + sums[n // 2]) / 2


def test_a_boolean_duration_is_an_impossible_time_not_one_microsecond(tmp_path):
    t = copy.deepcopy(BASE)
    for i in range(6):  # the masked_fill kernel of forwards 0-5: dur true
        gpu_of(t, calls_in(t, i)[4]["args"]["correlation"])[0]["dur"] = True
    row = publish(t, tmp_path)
    assert (row["forwards_timed"], row["bad_time_events"]) == (4, 6)
    assert row["device_ms_per_forward"] == pytest.approx(device_ms(t, range(6, 10)), rel=1e-9)


def test_a_flow_onto_a_stream_sync_record_is_no_gpu_work(tmp_path):
    """Kineto's cuda_sync records (a cudaStreamSynchronize with its record and an ac2g flow onto it in one
    forward, a plain one in the others): synchronizations enqueue no work; every forward stays complete."""
    t = copy.deepcopy(BASE)
    for i in range(10):
        f = forwards(t)[i]
        corr = 900000 + i
        call = {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": f["pid"], "tid": f["tid"],
                "ts": f["ts"] + 1.0, "dur": 0.05, "args": {"cbid": 131, "correlation": corr}}
        t["traceEvents"].append(call)
        if i == 3:
            k = gpu_of(t, calls_in(t, i)[1]["args"]["correlation"])[0]
            sync = {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": k["ts"] + 1.0,
                    "dur": 5.0, "args": {"stream": 7, "correlation": corr, "device": 0, "context": 1}}
            t["traceEvents"] += [sync, {"ph": "s", "id": corr, "pid": call["pid"], "tid": call["tid"], "ts": call["ts"],
                                        "cat": "ac2g", "name": "ac2g"},
                                 {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": sync["ts"], "cat": "ac2g",
                                  "name": "ac2g", "bp": "e"}]
    row = publish(t, tmp_path)
    assert (row["status"], row["forwards_complete"], row["kernels_per_forward"]) == ("ok", 10, 5)
    assert row["device_ms_per_forward"] == pytest.approx(device_ms(t, range(10)), rel=1e-9)


def test_without_engine_ops_a_helper_threads_kernel_is_not_the_backwards_work():
    p = FIX / "h200_beyond" / "b8_h16_s1024_d64_bf16_causal" / "sdpa_flash"
    t = json.load(gzip.open(p / "trace.json.gz"))
    st = json.load(gzip.open(p / "status.json.gz"))
    clean = backward_summary(st, backward_tables(analyse_passes(load_trace(p / "trace.json.gz"), "attn_fwd", "attn_bwd",
                                                                expect_gpu=True)[1], "sdpa_flash", st["shape_key"])["backwards"])
    t["traceEvents"] = [e for e in t["traceEvents"] if not str(e.get("name", "")).startswith("autograd::engine::evaluate_function")]
    bwd = sorted((e for e in t["traceEvents"] if e.get("cat") == "user_annotation" and e.get("name") == "attn_bwd"),
                 key=lambda e: e["ts"])
    for i, r in enumerate(bwd):  # a helper thread runs an aten op and launches a 50 us kernel in every backward
        ts, corr = r["ts"] + r["dur"] / 2, 990100 + i
        t["traceEvents"] += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 5418, "tid": 7777, "ts": ts - 1, "dur": 5,
             "args": {"External id": corr}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5418, "tid": 7777, "ts": ts, "dur": 3.0,
             "args": {"cbid": 211, "correlation": corr, "External id": corr}},
            {"ph": "X", "cat": "kernel", "name": "helper_kernel", "pid": 0, "tid": 99, "ts": ts + 4, "dur": 50.0,
             "args": {"device": 0, "context": 1, "stream": 99, "correlation": corr, "External id": corr,
                      "grid": [1, 1, 1], "block": [32, 1, 1]}}]
    path = Path("/tmp") / f"attnprof-test-f3-{id(t)}.json.gz"
    try:
        with gzip.open(path, "wt") as fh:
            json.dump(t, fh)
        _, frames = analyse_passes(load_trace(path), "attn_fwd", "attn_bwd", expect_gpu=True)
    finally:
        path.unlink(missing_ok=True)
    tables = backward_tables(frames, "sdpa_flash", st["shape_key"])
    row = backward_summary(st, tables["backwards"])
    assert row["kernels_per_backward"] == clean["kernels_per_backward"]  # 5: the engine's, not the helper's
    assert row["device_ms_per_backward"] == pytest.approx(clean["device_ms_per_backward"], rel=1e-9)
    assert (tables["backwards"]["other_thread_launches"] == 1).all()


def test_the_record_names_the_gpu_its_kernels_ran_on_not_any_listed(tmp_path):
    t = copy.deepcopy(BASE)
    d0 = t["deviceProperties"][0]
    t["deviceProperties"] = [{**d0, "id": 0, "name": "NVIDIA H100 80GB HBM3"}, {**d0, "id": 1, "name": "NVIDIA H200"}]
    assert {g["args"]["device"] for g in t["traceEvents"] if g.get("cat") == "kernel"} == {0}
    folder = tmp_path / "results" / "x" / "captures" / STATUS["shape_key"] / "naive" / "r1"
    folder.mkdir(parents=True)
    used = devices_used(t["deviceProperties"], [0])
    assert [p["name"] for p in used] == ["NVIDIA H100 80GB HBM3"]
    with pytest.raises(RecordError, match="H200|H100"):
        check_capture_record({**STATUS, "repeat": 1}, folder / "status.json", used)  # r1's, in the current format
    # without device ids on the GPU events, every listed GPU may be it
    assert len(devices_used(device_properties(t), [None])) == 2
