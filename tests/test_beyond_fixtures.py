"""Real H200 captures of issue 11 (tests/fixtures/h200_beyond: backward pass, torch.compile, Flex,
grouped-query and decode shapes): the pipeline's counts against counts made directly on the trace
JSON by a different path (no attnprof parsing)."""
import collections
import gzip
import json
from pathlib import Path

import pytest

from attnprof.backward import analyse_passes, backward_tables
from attnprof.tables import forward_table

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
