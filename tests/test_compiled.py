"""torch.compile variants on the CPU (inductor's C++ backend; gcc is on the CI machine): the whole
capture, compile time kept apart, and a missing compiler recorded as unsupported with the reason."""
import pytest
import torch

from attnprof.measure.capture import DEFAULT_TOLERANCE, cache_verdict
from attnprof.model.variants import COMPILED, Shape
from attnprof.measure.forwards import make_forward, relative_error
from attnprof.runtime.isolation import run_isolated
from attnprof.runtime.worker import reusable

SHAPE = Shape(1, 4, 64, 16, "fp32", True, kv_heads=2, q_len=16)  # grouped-query, lower-right causal


def spec(variant, **kw):
    return {"variant": variant, "shape": SHAPE.as_dict(), "device": "cpu", "schedule": {"wait": 1, "warmup": 1, "active": 3},
            "warmup_calls": 1, "range_name": "attn_fwd", "timing": {"repeats": 3, "input_sets": 2}, "seed": 0,
            "tolerance": DEFAULT_TOLERANCE, "min_complete_forwards": 2, **kw}


# flex_attention's match is checked by the capture below (its float64 check, same shape): one compile, not two
@pytest.mark.parametrize("variant", [v for v in COMPILED if v != "flex_attention"])
@pytest.mark.slow
def test_compiled_variants_match_the_reference(variant):
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 16, 16, generator=gen)
    k, v = (torch.randn(1, 2, 64, 16, generator=gen) for _ in range(2))
    forward, _ = make_forward(variant, SHAPE, "cpu")
    with torch.no_grad():
        out = forward(q, k, v)
    assert relative_error(out, q, k, v, True, offset=SHAPE.causal_offset) < 1e-5


@pytest.mark.slow
def test_capture_keeps_the_compile_apart_and_the_process_is_not_reused(tmp_path):
    rec = run_isolated(spec("flex_attention"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=600)
    assert rec["status"] == "ok" and rec["rel_error_ok"], rec.get("reason")
    assert rec["rel_error"] < 1e-5  # against the float64 reference, as test_compiled_variants_match_the_reference
    comp = rec["compile"]
    # the first call compiled (it took longer than a steady call) and looked up inductor's cache
    assert comp["first_call_s"] > comp["second_call_s"] and comp["cache"] in ("hit", "miss", "partial")
    assert comp["counters"].get("inductor.fxgraph_cache_hit", 0) + comp["counters"].get("inductor.fxgraph_cache_miss", 0) >= 1
    assert not reusable(rec)  # a compiled variant's process serves no other capture


@pytest.mark.slow
def test_missing_compiler_is_unsupported_with_inductors_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-g++"))  # inductor's C++ compiler (torch._inductor.config.cpp.cxx)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # no cached kernel can hide the missing compiler
    rec = run_isolated(spec("naive_compiled"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=600)
    assert rec["status"] == "unsupported", rec.get("reason")
    assert "compiler" in rec["reason"].lower() and "no-such-g++" in rec["reason"]


def test_cache_verdicts():
    assert cache_verdict({"inductor.fxgraph_cache_hit": 2}) == "hit"
    assert cache_verdict({"inductor.fxgraph_cache_miss": 1, "aot_autograd.autograd_cache_miss": 1}) == "miss"
    assert cache_verdict({"inductor.fxgraph_cache_hit": 1, "inductor.fxgraph_cache_miss": 1}) == "partial"
    assert cache_verdict({"inductor.fxgraph_cache_bypass": 1}) == "bypass"
    assert cache_verdict({}) == "none"
