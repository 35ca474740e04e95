"""Extraction on real H200 traces (tests/fixtures/h200) and synthetic edge cases."""
import pandas as pd
import pytest

from attnprof.tables import analyse_trace, forward_table, kernel_table
from attnprof.trace import TraceError, kernel_label, load_trace, short_kernel_name


def by_variant(h200, v):
    return h200["summary"].set_index("variant").loc[v]


def test_every_forward_of_naive_has_five_kernels_a_memcpy_and_a_memset(h200):
    fw = h200["forwards"]["naive"]
    assert len(fw) == 10  # schedule active=10
    assert set(fw["kernels"]) == {5} and set(fw["memcpy"]) == {1} and set(fw["memset"]) == {1}
    assert (fw["unattributed_gpu_events"] == 0).all()


def test_inplace_removes_the_memcpy(h200):
    assert by_variant(h200, "naive")["memcpy_per_forward"] == 1
    assert by_variant(h200, "naive_inplace")["memcpy_per_forward"] == 0
    k = h200["kernels"]
    memcpy = k[(k["variant"] == "naive") & (k["category"] == "memcpy")].iloc[0]
    assert memcpy["kernel"].startswith("Memcpy DtoD") and memcpy["op"] == "aten::copy_"


@pytest.mark.parametrize("variant,kernels", [("sdpa_math", 20), ("sdpa_efficient", 1), ("sdpa_flash", 1), ("sdpa_cudnn", 1), ("sdpa_auto", 1)])
def test_kernel_counts_per_forward(h200, variant, kernels):
    assert by_variant(h200, variant)["kernels_per_forward"] == kernels


def test_device_time_is_sum_of_event_durations_per_forward(h200):
    trace = h200["traces"]["sdpa_flash"]
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    fw = h200["forwards"]["sdpa_flash"]
    assert sorted(fw["device_us"]) == pytest.approx(sorted(e["dur"] for e in kernels))


def test_launch_metadata_and_api_come_from_the_trace(h200):
    k = h200["kernels"].set_index("variant")
    flash = k.loc["sdpa_flash"]
    assert flash["registers_per_thread"] == 255 and flash["est_occupancy_pct"] == 13
    assert flash["block"] == "128x1x1" and flash["launch_api"] == "cudaLaunchKernel"
    cudnn = k.loc[["sdpa_cudnn"]]
    main = cudnn[cudnn["category"] == "kernel"].iloc[0]
    assert main["launch_api"] == "cuLaunchKernelEx" and main["est_occupancy_pct"] == 0


def test_calls_are_counted_per_forward_not_divided(h200):
    k = h200["kernels"]
    math = k[k["variant"] == "sdpa_math"]
    assert (math["calls_min"] == math["calls_max"]).all()
    assert math["calls_per_forward"].sum() == 20


def test_short_names_and_labels():
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false>, true>(pytorch_flash::Flash_fwd_params)"
    assert short_kernel_name(flash) == "pytorch_flash::flash_fwd_kernel"
    softmax = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, 10>(c10::BFloat16*, int)"
    assert short_kernel_name(softmax) == "softmax_warp_forward"
    mul = ("void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
           "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, ...)")
    assert kernel_label(mul) == "vectorized_elementwise_kernel [MulFunctor<float>]"
    assert kernel_label("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"


def _synthetic(events):
    return {"traceEvents": events}


def _range(ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": "attn_fwd", "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def test_cpu_only_trace_has_forwards_but_no_device_events():
    frames = analyse_trace(_synthetic([_range(0, 10), _range(20, 12),
                                       {"ph": "X", "cat": "cpu_op", "name": "aten::bmm", "pid": 1, "tid": 1, "ts": 1, "dur": 3, "args": {"External id": 5}}]),
                           "attn_fwd")
    fw = forward_table(frames, "naive", "s")
    assert list(fw["cpu_us"]) == [10, 12] and (fw["kernels"] == 0).all() and (fw["device_us"] == 0).all()
    assert kernel_table(frames, "naive", "s").empty


def test_kernel_missing_launch_metadata_and_launch_outside_forwards():
    events = [
        _range(0, 10),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k<a&b>", "pid": 0, "tid": 7, "ts": 5, "dur": 4, "args": {"correlation": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 50, "dur": 1, "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "stray", "pid": 0, "tid": 7, "ts": 52, "dur": 4, "args": {"correlation": 9}},
    ]
    frames = analyse_trace(_synthetic(events), "attn_fwd")
    kt = kernel_table(frames, "v", "s")
    assert list(kt["kernel"]) == ["k<a&b>"]
    assert pd.isna(kt.loc[0, "registers_per_thread"]) and kt.loc[0, "grid"] is None
    fw = forward_table(frames, "v", "s")
    assert fw.loc[0, "kernels"] == 1 and fw.loc[0, "unattributed_gpu_events"] == 1


def test_unreadable_trace_raises(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError):
        load_trace(bad)
    (tmp_path / "u.json").write_text("[]")
    with pytest.raises(TraceError):
        load_trace(tmp_path / "u.json")
