"""The attention variants under study and the problem shapes they run on.

Every variant computes causal (or full) scaled dot-product attention

    out = softmax(q @ k^T / sqrt(head_dim) + mask) @ v

on q, k, v of shape [batch, heads, seq_len, head_dim] (the layout of
``torch.nn.functional.scaled_dot_product_attention``). The variants follow
Hugging Face, "Profiling in PyTorch (Part 3): Attention is all you profile"
(scripts 04_a, 04_b, 04_c of the dataset repo ``ariG23498/profiling-pytorch``).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import asdict, dataclass
from typing import Callable

#: variant -> SDPA backend it pins (SDPBackend member name), or None (naive variants and
#: sdpa_auto). SDPA = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=...).
#: What each variant changes, in words, is presentation: attnprof.report.CHANGES.
VARIANTS: dict[str, str | None] = {
    "naive": None,
    "naive_inplace": None,
    "sdpa_math": "MATH",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_auto": None,
}

DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Shape:
    """One problem point: q, k, v are [batch, heads, seq_len, head_dim] of ``dtype``."""

    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str
    causal: bool = True

    @property
    def key(self) -> str:
        """Stable file-name key, e.g. ``b8_h16_s1024_d64_bf16_causal``."""
        mode = "causal" if self.causal else "full"
        return f"b{self.batch}_h{self.heads}_s{self.seq_len}_d{self.head_dim}_{self.dtype}_{mode}"

    @classmethod
    def from_key(cls, key: str) -> "Shape":
        """Inverse of :attr:`key`. Raises ValueError on a malformed key."""
        try:
            b, h, s, d, dtype, mode = key.split("_")
            return cls(int(b[1:]), int(h[1:]), int(s[1:]), int(d[1:]), dtype, mode == "causal")
        except (ValueError, IndexError) as exc:
            raise ValueError(f"not a shape key: {key!r}") from exc

    def as_dict(self) -> dict:
        return asdict(self)

    def forward_flops(self) -> float:
        """FLOPs of one forward, PyTorch ``benchmarks/transformer/sdpa.py`` convention:
        B*H*(4*S*S*D + 2*S*S) (two GEMMs of 2*S*S*D each plus the softmax counted as
        2*S*S), halved when causal. Returns a float (FLOP)."""
        b, h, s, d = self.batch, self.heads, self.seq_len, self.head_dim
        flops = b * h * (4 * s * s * d + 2 * s * s)
        return flops / 2 if self.causal else float(flops)


    def min_bytes(self) -> int:
        """Fewest bytes one forward must move through device memory: q, k, v read once and
        the output written once, 4*B*H*S*D elements of the dtype (2 bytes bf16/fp16, 4 fp32)."""
        size = 4 if self.dtype == "fp32" else 2
        return 4 * self.batch * self.heads * self.seq_len * self.head_dim * size


def expand_shapes(grid: dict | list[dict]) -> list[Shape]:
    """Cartesian product of a config shape grid (each key a list) into Shapes, in a stable
    order; a list of grids gives the union of their products, first occurrence first.
    Keys: batch, heads, seq_len, head_dim, dtype, causal."""
    if isinstance(grid, list):
        return list(dict.fromkeys(s for g in grid for s in expand_shapes(g)))
    keys = ("batch", "heads", "seq_len", "head_dim", "dtype", "causal")
    values = [grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys]
    return [Shape(*combo) for combo in itertools.product(*values)]


def torch_dtype(name: str):
    """Map 'bf16' | 'fp16' | 'fp32' to the torch dtype. Raises KeyError otherwise."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _naive_forward(shape: Shape, device: str, inplace: bool) -> Callable:
    """The study's 04_a/04_b: matmul, scale, masked_fill(_), softmax, matmul; the causal mask
    is built once, here, outside the profiled forwards."""
    import torch

    scale = 1.0 / math.sqrt(shape.head_dim)
    s = shape.seq_len
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=1) if shape.causal else None

    def forward(q, k, v):
        scores = (q @ k.transpose(-2, -1)) * scale
        if mask is not None:
            scores = scores.masked_fill_(mask, float("-inf")) if inplace else scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    return forward


def _sdpa_forward(shape: Shape) -> Callable:
    """The study's 04_c: one scaled_dot_product_attention call, no mask tensor."""
    import torch.nn.functional as F

    def forward(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal)

    return forward


def make_forward(variant: str, shape: Shape, device: str) -> tuple[Callable, contextlib.AbstractContextManager]:
    """Return ``(forward, context)``: ``forward(q, k, v) -> out`` for ``variant``, and the
    context to hold around every call -- ``sdpa_kernel(<backend>)`` for the pinned SDPA
    variants, a null context otherwise. The context is entered once, outside the profiled
    forwards, so that a forward's CPU time is the attention call alone (as in sdpa_auto).
    Raises KeyError for an unknown variant."""
    backend = VARIANTS[variant]
    if variant in ("naive", "naive_inplace"):
        return _naive_forward(shape, device, inplace=variant == "naive_inplace"), contextlib.nullcontext()
    if backend is None:  # sdpa_auto: whatever PyTorch dispatches to
        return _sdpa_forward(shape), contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return _sdpa_forward(shape), sdpa_kernel(getattr(SDPBackend, backend))


def variant_fingerprint(variant: str) -> str:
    """sha256 (16 hex digits) of the source code a variant's capture runs: its forward builder,
    make_forward, Shape and reference_attention. A Snakemake param of the capture rule, so that
    editing one variant's code reruns that variant's captures only."""
    import hashlib
    import inspect

    builder = _naive_forward if variant in ("naive", "naive_inplace") else _sdpa_forward
    parts = [variant, str(VARIANTS[variant])] + [inspect.getsource(obj) for obj in (builder, make_forward, Shape, reference_attention)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def reference_attention(q, k, v, causal: bool):
    """float64 reference of the same attention, computed one batch entry at a time
    to bound memory (scores are [heads, S, S] float64). Returns float64 [B, H, S, D]."""
    import torch

    outs = []
    s = q.shape[-2]
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=q.device), diagonal=1) if causal else None
    scale = 1.0 / math.sqrt(q.shape[-1])
    for i in range(q.shape[0]):
        qi, ki, vi = (t[i].double() for t in (q, k, v))
        scores = (qi @ ki.transpose(-2, -1)) * scale
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ vi)
    return torch.stack(outs)
