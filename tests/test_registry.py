"""One home for a built-in variant (issue 22): its registration in attnprof.model.variants.REGISTRY says how it is
built (builder, options, pinned backend); attnprof.measure.forwards names no variant."""
import inspect

import pytest

from attnprof.measure import forwards
from attnprof.measure.forwards import BUILDERS, make_forward, reference_attention, relative_error, variant_fingerprint
from attnprof.model import variants
from attnprof.model.variants import REGISTRY, Shape, Variant

SHAPE = Shape(1, 2, 16, 8, "fp32", True)


def test_every_registered_builder_is_built_and_make_forward_names_no_variant():
    assert set(BUILDERS) == set(variants.BUILDERS)
    assert {v.builder for v in REGISTRY.values()} <= set(BUILDERS)
    source = inspect.getsource(make_forward)
    assert not [name for name in REGISTRY if f'"{name}"' in source]


def test_an_unknown_builder_is_refused_at_registration():
    with pytest.raises(ValueError, match="builder 'nope'"):
        Variant(None, "x", builder="nope")


def test_a_new_variant_is_one_registration(monkeypatch):
    """A variant of an existing kind: one REGISTRY entry, nothing else; it runs, is checked against the float64
    reference, and has a fingerprint of its own that differs from its sibling's only by its options."""
    import torch

    monkeypatch.setitem(REGISTRY, "naive_inplace_math", Variant("MATH", "naive, in place, MATH pinned (no effect)",
                                                                builder="naive", options=(("inplace", True),)))
    forward, context = make_forward("naive_inplace_math", SHAPE, "cpu")
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=gen) for _ in range(3))
    with context:
        out = forward(q, k, v)
    assert relative_error(out, q, k, v, True) < 1e-5
    assert torch.allclose(out, reference_attention(q, k, v, True).float(), atol=1e-5)
    assert variant_fingerprint("naive_inplace_math") != variant_fingerprint("naive_inplace")


def test_the_fingerprint_covers_the_functions_a_builder_calls():
    """naive_compiled's builder wraps _naive_forward: editing the naive forward must recapture it too."""
    called = forwards._called_here(forwards._compiled_naive_forward)
    assert forwards._naive_forward in called and forwards._flex_forward not in called
    assert forwards._called_here(forwards._sdpa_forward) == [forwards._sdpa_forward]


def test_the_fingerprint_follows_how_a_variant_runs_not_its_words(monkeypatch):
    before = variant_fingerprint("sdpa_math")
    monkeypatch.setitem(REGISTRY, "sdpa_math", Variant("MATH", "reworded description"))
    assert variant_fingerprint("sdpa_math") == before
    monkeypatch.setitem(REGISTRY, "sdpa_math", Variant("FLASH_ATTENTION", "SDPA, backend pinned to MATH"))
    assert variant_fingerprint("sdpa_math") != before
