"""Real H200 captures of issue 11 (tests/fixtures/h200_beyond: backward pass, torch.compile, Flex,
grouped-query and decode shapes): the pipeline's counts against counts made directly on the trace
JSON by a different path (no attnprof parsing)."""
import collections
import gzip
import json
from pathlib import Path

import pytest

from attnprof.analysis.backward import analyse_passes, backward_tables
from attnprof.analysis.tables import forward_table

FIXTURES = Path(__file__).parent / "fixtures" / "h200_beyond"
CAPTURES = sorted(str(p.parent.relative_to(FIXTURES)) for p in FIXTURES.rglob("trace.json.gz"))


def load(capture: str) -> tuple[dict, dict]:
    trace = json.load(gzip.open(FIXTURES / capture / "trace.json.gz"))
    return trace, json.load(gzip.open(FIXTURES / capture / "status.json.gz"))


def json_counts(trace: dict) -> dict:
    """Per pass, GPU events (kernel / memcpy / memset) per range, by the thread of their launch:
    a launch on the thread that holds the attn_fwd/attn_bwd ranges inside an attn_fwd range is a
    forward's; a launch on any other thread (the autograd engine's) is a backward's. Events outside
    the profiled steps (none in these traces) would show up as a mismatch."""
    ev = trace["traceEvents"]
    ranges = [e for e in ev if e.get("cat") == "user_annotation" and e["name"] in ("attn_fwd", "attn_bwd")]
    main = {e["tid"] for e in ranges}
    fwd = [(e["ts"], e["ts"] + e["dur"]) for e in ranges if e["name"] == "attn_fwd"]
    n = {"attn_fwd": len(fwd), "attn_bwd": sum(e["name"] == "attn_bwd" for e in ranges)}
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    counts = collections.Counter()
    for e in ev:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        api = launch[e["args"]["correlation"]]
        in_fwd = api["tid"] in main and any(a <= api["ts"] <= b for a, b in fwd)
        kind = {"kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[e["cat"]]
        counts[("fwd" if in_fwd else "bwd", kind)] += 1
    return {(p, k): c / n["attn_fwd" if p == "fwd" else "attn_bwd"] for (p, k), c in counts.items()}, n


@pytest.mark.parametrize("capture", CAPTURES)
def test_per_pass_counts_match_a_count_on_the_json(capture):
    trace, status = load(capture)
    expected, n = json_counts(trace)
    assert n == {"attn_fwd": 10, "attn_bwd": 10}  # every profiled step ran both passes
    fwd, bwd = analyse_passes(trace, status["range_name"], expect_gpu=True)
    forwards = forward_table(fwd, "v", "s")
    backwards = backward_tables(bwd, "v", "s")["backwards"]
    assert forwards["complete"].all() and backwards["complete"].all()
    for pass_, table in (("fwd", forwards), ("bwd", backwards)):
        for kind in ("kernels", "memcpy", "memset"):
            got = set(table[kind])
            assert got == {expected.get((pass_, kind), 0)}, (capture, pass_, kind, got)


def test_backward_kernels_run_on_another_thread_than_the_ranges():
    """Why the attribution matters: in every fixture the backward's kernels are launched from the
    autograd engine's thread, never from the thread that opened attn_bwd."""
    for capture in CAPTURES:
        trace, _ = load(capture)
        ev = trace["traceEvents"]
        bwd_tid = {e["tid"] for e in ev if e.get("cat") == "user_annotation" and e["name"] == "attn_bwd"}
        launch = {e["args"]["correlation"]: e["tid"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                  and "correlation" in e.get("args", {})}
        kernel_tids = {launch[e["args"]["correlation"]] for e in ev if e.get("cat") == "kernel"}
        assert kernel_tids - bwd_tid, capture


@pytest.fixture(scope="module")
def study_beyond():
    """The study-shape fixtures (sdpa_flash, sdpa_cudnn, flex_attention, naive_compiled) through the
    pipeline's own table code and the findings rules."""
    import pandas as pd

    from attnprof.analysis.backward import backward_summary
    from attnprof.findings import compute, load_run_data
    from attnprof.analysis.tables import kernel_table, summary_row

    shape = "b8_h16_s1024_d64_bf16_causal"
    rows, kernels, kb, statuses = [], [], [], []
    for capture in [c for c in CAPTURES if c.startswith(shape)]:
        trace, status = load(capture)
        fwd, bwd = analyse_passes(trace, status["range_name"], expect_gpu=True)
        tabs = backward_tables(bwd, status["variant"], shape)
        row = summary_row(status, forward_table(fwd, status["variant"], shape), str(FIXTURES / capture / "trace.json.gz"))
        row.update(backward_summary(status, tabs["backwards"]))
        rows.append(row)
        kernels.append(kernel_table(fwd, status["variant"], shape))
        kb.append(tabs["kernels_backward"])
        statuses.append(status)
    data = load_run_data(shape, pd.DataFrame(rows), pd.concat(kernels), [], [], statuses, [], kb)
    return compute(data), {s["variant"]: s for s in statuses}


def test_compile_finding_states_the_first_call_and_what_fused(study_beyond):
    result, statuses = study_beyond
    found = {f["variants"][0]: f for f in result["findings"] if f["rule"] == "compile"}
    assert set(found) == {"naive_compiled", "flex_attention"}
    for variant, f in found.items():
        comp = statuses[variant]["compile"]  # the capture's own record
        assert f["numbers"]["first_call_s"]["value"] == comp["first_call_s"]
        assert f"cache: {comp['cache']}" in f["statement"]
    # naive_compiled's trace holds 3 kernels per forward (count on the JSON above); the Triton one fused softmax and mask
    nc = found["naive_compiled"]
    assert nc["numbers"]["kernels_per_forward"]["value"] == 3
    assert "triton_per_fused__softmax" in nc["statement"] and "masked, fill" in nc["statement"]


def test_backward_finding_names_main_and_helper_kernels(study_beyond):
    result, _ = study_beyond
    found = {f["variants"][0]: f for f in result["findings"] if f["rule"] == "backward"}
    assert set(found) == {"sdpa_flash", "sdpa_cudnn", "flex_attention", "naive_compiled"}
    flash = found["sdpa_flash"]["statement"]
    # FlashAttention-2's backward: the dQ/dK/dV loop, then its pre- and post-processing kernels
    assert "main kernel pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel" in flash
    assert "flash_bwd_dot_do_o_kernel (preprocess)" in flash and "flash_bwd_convert_dq_kernel (postprocess)" in flash
    cudnn = found["sdpa_cudnn"]["statement"]
    assert "cuDNN" in cudnn and "compute_dot_do_o_specialized (preprocess)" in cudnn
    # the shares of one backward add up to 100 % (kernels, memcpys and memsets)
    for f in found.values():
        shares = [n["value"] for k, n in f["numbers"].items() if k.startswith("share:") or k == "main_share"]
        assert sum(shares) == pytest.approx(100, abs=0.01)


@pytest.mark.parametrize("record,expected", [({"first_call_s": 4.33, "cache": "miss"}, (4.33, "miss")),
                                             ({"first_call_s": -1, "cache": "miss"}, (None, "miss")),
                                             ({"first_call_s": float("inf")}, (None, None)),
                                             ({"first_call_s": "4 s", "cache": 3}, (None, None)), ("compiled", (None, None))])
def test_a_malformed_compile_record_publishes_nothing(record, expected):
    from attnprof.analysis.tables import summary_row

    _, status = load("b8_h16_s1024_d64_bf16_causal/naive_compiled")
    trace, _ = load("b8_h16_s1024_d64_bf16_causal/naive_compiled")
    fwd, _ = analyse_passes(trace, status["range_name"], expect_gpu=True)
    row = summary_row({**status, "compile": record}, forward_table(fwd, "naive_compiled", "s"), "t")
    assert (row["compile_first_call_s"], row["compile_cache"]) == expected
