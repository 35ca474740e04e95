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
from collections.abc import Callable

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
    def from_key(cls, key: str) -> Shape:
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


def import_target(target: str):
    """The object named by ``"module:attribute"`` (the module imported as ``import`` would:
    from the working directory or an installed package). Raises ValueError for a target
    without ':' and ImportError/AttributeError when it cannot be found."""
    import importlib

    module, sep, attr = target.partition(":")
    if not (sep and module and attr):
        raise ValueError(f"not a 'module:function' target: {target!r}")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _custom_forward(custom: dict, shape: Shape, device: str) -> Callable:
    """A user variant (config ``custom_variants``): ``custom["function"]`` names
    ``fn(q, k, v, *, causal, scale) -> out`` (q, k, v and out [batch, heads, seq_len,
    head_dim]; ``scale`` = 1/sqrt(head_dim)); the optional ``custom["setup"]`` names
    ``setup(shape: dict, device: str) -> dict`` of extra keyword arguments for ``fn``, called
    once here, outside the profiled forwards (a mask or a compiled kernel built once)."""
    fn = import_target(custom["function"])
    extra = import_target(custom["setup"])(shape.as_dict(), device) if custom.get("setup") else {}
    scale = 1.0 / math.sqrt(shape.head_dim)

    def forward(q, k, v):
        return fn(q, k, v, causal=shape.causal, scale=scale, **(extra or {}))

    return forward


def make_forward(variant: str, shape: Shape, device: str,
                 custom: dict | None = None) -> tuple[Callable, contextlib.AbstractContextManager]:
    """Return ``(forward, context)``: ``forward(q, k, v) -> out`` for ``variant``, and the
    context to hold around every call -- ``sdpa_kernel(<backend>)`` for the pinned SDPA
    variants, a null context otherwise. The context is entered once, outside the profiled
    forwards, so that a forward's CPU time is the attention call alone (as in sdpa_auto).
    ``custom``: a user variant's {"function", "setup"} (:func:`_custom_forward`). Raises
    KeyError for an unknown variant."""
    if custom:
        return _custom_forward(custom, shape, device), contextlib.nullcontext()
    backend = VARIANTS[variant]
    if variant in ("naive", "naive_inplace"):
        return _naive_forward(shape, device, inplace=variant == "naive_inplace"), contextlib.nullcontext()
    if backend is None:  # sdpa_auto: whatever PyTorch dispatches to
        return _sdpa_forward(shape), contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return _sdpa_forward(shape), sdpa_kernel(getattr(SDPBackend, backend))


def _module_source(target: str) -> str:
    """The source text of the module of a ``"module:function"`` target, found without running
    it (importlib.util.find_spec; a dotted module's parent packages are imported). Raises
    ValueError naming the target when the module cannot be found."""
    import importlib.util
    from pathlib import Path

    module = target.partition(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise ValueError(f"custom variant {target!r}: module {module!r} not found (it must be importable from the "
                         "working directory or installed)")
    return Path(spec.origin).read_text()


def variant_fingerprint(variant: str, custom: dict | None = None) -> str:
    """sha256 (16 hex digits) of the source code a variant's capture runs: its forward builder,
    make_forward, Shape and the float64 reference (_reference_blocks, relative_error); for a
    user variant (``custom``: {"function", "setup"}) also the whole source of the modules
    those name, read without importing them. A Snakemake param of the capture rule, so that
    editing one variant's code reruns that variant's captures only."""
    import hashlib
    import inspect

    if custom:
        builder = _custom_forward
        own = [repr(sorted(custom.items()))] + [_module_source(custom[k]) for k in ("function", "setup") if custom.get(k)]
    else:
        builder = _naive_forward if variant in ("naive", "naive_inplace") else _sdpa_forward
        own = [str(VARIANTS[variant])]
    parts = [variant, *own] + [inspect.getsource(obj) for obj in (builder, make_forward, Shape, _reference_blocks, relative_error)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


#: Query rows per block of the float64 reference (see :func:`_reference_blocks`).
REFERENCE_BLOCK = 1024


def _reference_blocks(q, k, v, causal: bool, block: int = REFERENCE_BLOCK):
    """Yield ``(b, h, rows, ref)`` over the float64 reference softmax(q k^T / sqrt(D) + mask) v
    of q, k, v [B, H, S, D] (any float dtype): ``ref`` is float64 [len(rows), D] for batch
    entry ``b``, head ``h`` and the query rows ``rows`` (a slice of at most ``block`` rows), on
    q's device. ``causal``: key j is visible to query i iff j <= i (SDPA's ``is_causal``).

    Memory bound: one block holds its [block, S] float64 scores (softmax taken in place), a
    [block, S] bool mask when causal, and that head's K and V in float64: about
    10*block*S + 16*S*D bytes on top of the inputs, whatever B and H are (block 1024,
    S 32768, D 64, B 1, H 16: 0.37 GB peak measured on an H200, where the whole float64
    reference's scores would take 128 GiB)."""
    import torch

    s_q, s_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            kd, vd = k[b, h].double(), v[b, h].double()
            for r0 in range(0, s_q, block):
                rows = slice(r0, min(r0 + block, s_q))
                # causal: the block's last query sees keys 0..rows.stop-1 only; later keys would get
                # weight exp(-inf) = 0, so they are left out of the product instead (half the work)
                n_k = min(rows.stop, s_k) if causal else s_k
                scores = (q[b, h, rows].double() * scale) @ kd[:n_k].T  # the only [block, S] float64 buffer
                if causal:
                    row_ids = torch.arange(rows.start, rows.stop, device=q.device)[:, None]
                    scores.masked_fill_(torch.arange(n_k, device=q.device)[None, :] > row_ids, float("-inf"))
                scores -= scores.amax(dim=-1, keepdim=True)
                scores.exp_()
                scores /= scores.sum(dim=-1, keepdim=True)
                yield b, h, rows, scores @ vd[:n_k]
                del scores  # before the next block's scores exist


def reference_attention(q, k, v, causal: bool, block: int = REFERENCE_BLOCK):
    """float64 reference of the same attention for q, k, v [B, H, S, D], computed block by
    block (:func:`_reference_blocks`: per batch entry, head and ``block`` query rows) on q's
    device. Returns the whole float64 [B, H, S, D] output, B*H*S*D*8 bytes on top of the block
    bound; :func:`relative_error` compares against it without materialising it."""
    import torch

    ref = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=torch.float64, device=q.device)
    for b, h, rows, blk in _reference_blocks(q, k, v, causal, block):
        ref[b, h, rows] = blk
    return ref


def relative_error(out, q, k, v, causal: bool, block: int = REFERENCE_BLOCK) -> float:
    """||out - ref|| / ||ref|| (Frobenius norms over the whole [B, H, S, D] tensor, computed in
    float64) of a forward's output ``out`` against the float64 reference of q, k, v, summed
    block by block (:func:`_reference_blocks`): the full reference is never held, so extra
    memory stays within the block bound plus one [block, D] float64 difference. Returns a
    dimensionless float: nan if out and ref are both zero, inf if only ref is. Raises
    ValueError if ``out`` is not [B, H, S, D_v] like q and v."""
    import torch

    if tuple(out.shape) != (*q.shape[:-1], v.shape[-1]):
        raise ValueError(f"output shape {tuple(out.shape)} does not match q {tuple(q.shape)} and v {tuple(v.shape)}")
    num = torch.zeros((), dtype=torch.float64, device=q.device)
    den = torch.zeros((), dtype=torch.float64, device=q.device)
    for b, h, rows, ref in _reference_blocks(q, k, v, causal, block):
        num += (out[b, h, rows].double() - ref).square().sum()
        den += ref.square().sum()
    return (num.sqrt() / den.sqrt()).item()
