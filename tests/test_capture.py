"""Capture on the CPU: statuses, isolation, the float64 reference."""
import json

import pytest
import torch

from attnprof.capture import DEFAULT_TOLERANCE, classify_exception, run_isolated
from attnprof.trace import load_trace
from attnprof.variants import VARIANTS, Shape, make_forward, reference_attention

SHAPE = Shape(1, 2, 64, 32, "fp32", True)


def spec(variant, **kw):
    base = {"variant": variant, "shape": SHAPE.as_dict(), "device": "cpu", "schedule": {"wait": 1, "warmup": 1, "active": 2},
            "warmup_calls": 1, "range_name": "attn_fwd", "timing": {"repeats": 3, "input_sets": 2}, "seed": 0,
            "tolerance": DEFAULT_TOLERANCE}
    return {**base, **kw}


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in ("sdpa_efficient", "sdpa_cudnn")])
def test_variants_match_float64_reference_on_cpu(variant):
    q, k, v = (torch.randn(1, 2, 64, 32) for _ in range(3))
    forward, ctx = make_forward(variant, SHAPE, "cpu")
    with torch.no_grad(), ctx:
        out = forward(q, k, v)
    ref = reference_attention(q, k, v, causal=True)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_run_isolated_ok_writes_trace_and_status(tmp_path):
    rec = run_isolated(spec("naive_inplace"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "ok" and rec["rel_error_ok"] and rec["timing"]["repeats"] == 3
    trace = load_trace(tmp_path / "t.json.gz")
    assert sum(e.get("name") == "attn_fwd" and e.get("cat") == "user_annotation" for e in trace["traceEvents"]) == 2
    assert json.loads((tmp_path / "s.json").read_text())["started_at"] <= rec["finished_at"]


def test_cuda_only_backend_is_unsupported_on_cpu_with_pytorchs_reason(tmp_path):
    rec = run_isolated(spec("sdpa_efficient"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "unsupported" and "RuntimeError" in rec["reason"]
    assert load_trace(tmp_path / "t.json.gz")["traceEvents"] == []  # placeholder, marked as such


def test_missing_gpu_is_recorded_not_raised(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    rec = run_isolated(spec("sdpa_flash", device="cuda"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "unsupported" and "cuda" in rec["reason"].lower()


def test_timeout_becomes_failed(tmp_path):
    rec = run_isolated(spec("naive"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=0.05)
    assert rec["status"] == "failed" and "timed out" in rec["reason"]


def test_classify_exception():
    assert classify_exception(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "out_of_memory"
    assert classify_exception(RuntimeError("No available kernel. Aborting execution.")) == "unsupported"
    assert classify_exception(ValueError("boom")) == "failed"


def test_shape_key_round_trip_and_flops():
    s = Shape(8, 16, 1024, 64, "bf16", True)
    assert Shape.from_key(s.key) == s
    # sdpa.py convention: B*H*(4*S*S*D + 2*S*S), halved when causal
    assert s.forward_flops() == 8 * 16 * (4 * 1024 * 1024 * 64 + 2 * 1024 * 1024) / 2
    with pytest.raises(ValueError):
        Shape.from_key("nonsense")
