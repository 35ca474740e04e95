"""Grouped-query attention and decode shapes (issue 11 part 3): keys, counts, masks, every variant
against the float64 reference. Expected values are counted by hand or by explicit loops, not by
the code under test."""
import math

import pytest
import torch
import torch.nn.functional as F

from attnprof.model.variants import COMPILED, VARIANTS, Shape, expand_shapes, runs_on
from attnprof.measure.forwards import make_forward, reference_attention, relative_error

# CUDA-only backends left out; the torch.compile variants have their own GQA/decode test (test_compiled.py),
# as each compile costs seconds
CPU_VARIANTS = [v for v in VARIANTS if runs_on(v, "cpu") and v not in COMPILED]


def loop_mask(sq, sk, align):
    """visible[i][j] by the definition in words: upper-left, query i sees keys 0..i; lower-right,
    the diagonal ends at the last key, query i sees keys 0..i + sk - sq."""
    off = sk - sq if align == "lower_right" else 0
    return torch.tensor([[j <= i + off for j in range(sk)] for i in range(sq)])


def loop_reference(q, k, v, visible):
    """Attention written out head by head, key/value head h // (H/KVH) per query head: a code path
    apart from the blockwise reference."""
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = q[b, h].double() @ k[b, h // group].double().T / math.sqrt(q.shape[-1])
            s[~visible] = float("-inf")
            out[b, h] = torch.softmax(s, dim=-1) @ v[b, h // group].double()
    return out


def test_keys_round_trip_and_old_keys_still_parse():
    study = Shape.from_key("b8_h16_s1024_d64_bf16_causal")
    assert study == Shape(8, 16, 1024, 64, "bf16", True) and study.kv_heads is None and study.q_len is None
    decode = Shape(1, 32, 4096, 128, "bf16", True, kv_heads=8, q_len=1)
    assert decode.key == "b1_h32_kv8_q1_s4096_d128_bf16_causal-lr"  # lower-right is the default alignment
    upper = Shape(1, 32, 4096, 128, "bf16", True, kv_heads=8, q_len=1, causal_alignment="upper_left")
    assert upper.key == "b1_h32_kv8_q1_s4096_d128_bf16_causal"
    for s in (study, decode, upper, Shape(2, 4, 64, 8, "fp32", False, q_len=16)):
        assert Shape.from_key(s.key) == s
    # redundant settings normalise away: equal problems, equal keys
    assert Shape(8, 16, 1024, 64, "bf16", True, kv_heads=16, q_len=1024, causal_alignment="upper_left") == study
    assert Shape(2, 4, 64, 8, "fp32", False, q_len=16, causal_alignment="lower_right").causal_alignment is None
    for bad in ("b8_h16_s1024_d64_bf16", "b8_h16_kvx_s1024_d64_bf16_causal", "b8_h16_s1024_d64_bf16_causal-ul"):
        with pytest.raises(ValueError):
            Shape.from_key(bad)


def test_invalid_shapes_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        Shape(1, 6, 64, 8, "fp32", True, kv_heads=4)
    with pytest.raises(ValueError, match="would see no key"):
        Shape(1, 4, 64, 8, "fp32", True, q_len=128)
    Shape(1, 4, 64, 8, "fp32", True, q_len=128, causal_alignment="upper_left")  # every row sees key 0
    with pytest.raises(ValueError, match="causal_alignment"):
        Shape(1, 4, 64, 8, "fp32", True, q_len=16, causal_alignment="bottom")


def test_grid_seq_len_is_shorthand_for_both_lengths():
    a = expand_shapes({"batch": [1], "heads": [4], "seq_len": [64], "head_dim": [8], "dtype": ["fp32"], "causal": [True]})
    b = expand_shapes({"batch": [1], "heads": [4], "q_len": [64], "kv_len": [64], "head_dim": [8], "dtype": ["fp32"],
                       "causal": [True], "causal_alignment": ["upper_left", "lower_right"]})
    assert a == b == [Shape(1, 4, 64, 8, "fp32", True)]  # both alignments are one mask when square
    c = expand_shapes({"batch": [1], "heads": [4], "kv_heads": [1, 2], "q_len": [1, 16], "kv_len": [64], "head_dim": [8],
                       "dtype": ["fp32"], "causal": [True]})
    assert [s.key for s in c] == ["b1_h4_kv1_q1_s64_d8_fp32_causal-lr", "b1_h4_kv1_q16_s64_d8_fp32_causal-lr",
                                  "b1_h4_kv2_q1_s64_d8_fp32_causal-lr", "b1_h4_kv2_q16_s64_d8_fp32_causal-lr"]
    with pytest.raises(ValueError, match="seq_len"):
        expand_shapes({"batch": [1], "heads": [4], "seq_len": [64], "kv_len": [64], "head_dim": [8], "dtype": ["fp32"],
                       "causal": [True]})


@pytest.mark.parametrize("sq,sk,align", [(1, 10, "lower_right"), (1, 10, "upper_left"), (4, 10, "lower_right"),
                                         (4, 10, "upper_left"), (10, 10, "lower_right"), (12, 5, "upper_left")])
def test_visible_pairs_counted_by_loops(sq, sk, align):
    shape = Shape(1, 1, sk, 8, "fp32", True, q_len=sq, causal_alignment=align)
    assert shape.visible_pairs() == int(loop_mask(sq, sk, align).sum())
    assert Shape(1, 1, sk, 8, "fp32", False, q_len=sq).visible_pairs() == sq * sk


def test_flops_and_bytes_by_hand():
    # study shape: 8*16*(4*1024*1024*64 + 2*1024*1024)/2 = 8*16*(268435456 + 2097152)/2
    assert Shape(8, 16, 1024, 64, "bf16").forward_flops() == 8 * 16 * 270532608 / 2
    # decode, q 1 against 4096 keys, lower-right: the query sees all 4096 keys, 32 heads, D 128:
    # 32 * (4*4096*128 + 2*4096) = 32 * 2105344 = 67371008 (halving would give half of it)
    assert Shape(1, 32, 4096, 128, "bf16", True, kv_heads=8, q_len=1).forward_flops() == 67371008
    # upper-left decode sees key 0 only: 32 * (4*1*128 + 2*1) = 16448
    assert Shape(1, 32, 4096, 128, "bf16", True, kv_heads=8, q_len=1, causal_alignment="upper_left").forward_flops() == 16448
    # bytes: q and out 32*1*128 each, k and v 8*4096*128 each, 2 bytes: 2*(8192 + 8388608) = 16793600
    assert Shape(1, 32, 4096, 128, "bf16", True, kv_heads=8, q_len=1).min_bytes() == 16793600
    assert Shape(8, 16, 1024, 64, "fp32").min_bytes() == 4 * 8 * 16 * 1024 * 64 * 4


@pytest.mark.parametrize("kv_heads,sq,sk,align", [(2, 1, 37, "lower_right"), (1, 9, 37, "lower_right"),
                                                  (2, 9, 37, "upper_left"), (4, 37, 37, None), (2, 40, 23, "upper_left")])
def test_reference_matches_loops_and_pytorch(kv_heads, sq, sk, align):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, sq, 8, generator=gen)
    k, v = (torch.randn(2, kv_heads, sk, 8, generator=gen) for _ in range(2))
    shape = Shape(2, 4, sk, 8, "fp32", True, kv_heads=kv_heads, q_len=sq, causal_alignment=align)
    expected = loop_reference(q, k, v, loop_mask(sq, sk, shape.causal_alignment or "upper_left"))
    got = reference_attention(q, k, v, True, block=4, offset=shape.causal_offset)
    assert torch.allclose(got, expected, rtol=0, atol=1e-12)
    if shape.causal_alignment != "lower_right":  # PyTorch's own float64 SDPA (upper-left is_causal, enable_gqa)
        sdpa = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True)
        assert torch.allclose(got, sdpa, rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant", CPU_VARIANTS)
@pytest.mark.parametrize("kv_heads,sq,align", [(2, 1, "lower_right"), (1, 16, "lower_right"), (4, 16, "upper_left"), (2, 64, None)])
def test_every_variant_matches_the_reference_on_gqa_and_decode_shapes(variant, kv_heads, sq, align):
    shape = Shape(1, 4, 64, 16, "fp32", True, kv_heads=kv_heads, q_len=sq, causal_alignment=align)
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, sq, 16, generator=gen)
    k, v = (torch.randn(1, kv_heads, 64, 16, generator=gen) for _ in range(2))
    forward, ctx = make_forward(variant, shape, "cpu")
    with torch.no_grad(), ctx:
        out = forward(q, k, v)
    assert relative_error(out, q, k, v, True, offset=shape.causal_offset) < 1e-5
    # and it is not the other alignment's answer (the two masks differ when sq < 64)
    if sq < 64:
        other = reference_attention(q, k, v, True, offset=64 - sq - shape.causal_offset)
        assert (out.double() - other).norm() / other.norm() > 1e-3


def test_one_shape_one_key():
    # a hand-typed key that is not the one attnprof writes would capture into a second directory
    for typed, canonical in (("b01_h4_s64_d16_fp32_causal", "b1_h4_s64_d16_fp32_causal"),
                             ("b1_h4_kv4_s64_d16_fp32_causal", "b1_h4_s64_d16_fp32_causal"),
                             ("b1_h4_q64_s64_d16_fp32_causal", "b1_h4_s64_d16_fp32_causal"),
                             ("b1_h4_s64_d16_fp32_causal-lr", "b1_h4_s64_d16_fp32_causal")):
        with pytest.raises(ValueError, match=canonical):
            Shape.from_key(typed)
    for bad in ("b0_h4_s64_d16_fp32_causal", "b1_h4_s0_d16_fp32_causal", "b1_h4_s64_d0_fp32_causal"):
        with pytest.raises(ValueError, match="must be an integer >= 1"):
            Shape.from_key(bad)
