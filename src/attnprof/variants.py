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
import re
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
    "naive_compiled": None,
    "flex_attention": None,
}

#: Variants built by ``torch.compile`` (inductor; Triton kernels on a GPU, C++ on the CPU):
#: their first call compiles, and the capture measures it apart from the steady state
#: (attnprof.capture), in a process that serves no other capture.
COMPILED = ("naive_compiled", "flex_attention")

DTYPES = ("bf16", "fp16", "fp32")


#: Causal masks when q_len != kv_len (torch.nn.attention.bias.CausalVariant): upper_left
#: (SDPA's ``is_causal=True``: query i sees keys 0..i) or lower_right (query i sees keys
#: 0..i + kv_len - q_len, the diagonal ending at the last key: decoding and prefill with a
#: cache, ``causal_lower_right``). Both are the same mask when q_len == kv_len.
CAUSAL_ALIGNMENTS = ("lower_right", "upper_left")


@dataclass(frozen=True)
class Shape:
    """One problem point: q is [batch, heads, q_len, head_dim], k and v are
    [batch, kv_heads, seq_len, head_dim], all of ``dtype``.

    ``seq_len`` is the key/value length (kv_len); ``q_len`` None means q_len == seq_len (the
    study's square attention) and ``kv_heads`` None means kv_heads == heads (no grouped-query
    attention). ``causal_alignment`` (:data:`CAUSAL_ALIGNMENTS`) is kept only where it changes
    the mask (causal and q_len != kv_len), else None. The constructor normalises these three, so
    equal problems are equal Shapes with equal keys. Raises ValueError for heads not a multiple
    of kv_heads, an unknown alignment, or a lower-right causal mask with q_len > kv_len (its
    first rows would see no key)."""

    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str
    causal: bool = True
    kv_heads: int | None = None
    q_len: int | None = None
    causal_alignment: str | None = None

    def __post_init__(self):
        for name in ("batch", "heads", "seq_len", "head_dim", "kv_heads", "q_len"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} {value!r}: must be an integer >= 1")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.kv_heads == self.heads:
            object.__setattr__(self, "kv_heads", None)
        if self.q_len == self.seq_len:
            object.__setattr__(self, "q_len", None)
        if self.causal_alignment is not None and self.causal_alignment not in CAUSAL_ALIGNMENTS:
            raise ValueError(f"causal_alignment {self.causal_alignment!r}: expected one of {', '.join(CAUSAL_ALIGNMENTS)}")
        if not self.causal or self.q_len is None:
            object.__setattr__(self, "causal_alignment", None)
        elif self.causal_alignment is None:
            object.__setattr__(self, "causal_alignment", CAUSAL_ALIGNMENTS[0])
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads} (grouped-query attention "
                             "shares each key/value head among heads / kv_heads query heads)")
        if self.causal_alignment == "lower_right" and self.q_len > self.seq_len:
            raise ValueError(f"q_len {self.q_len} > kv_len {self.seq_len} with a lower-right causal mask: the first "
                             f"{self.q_len - self.seq_len} query rows would see no key")

    @property
    def kv_len(self) -> int:
        """Key/value length (= seq_len)."""
        return self.seq_len

    @property
    def queries(self) -> int:
        """Query length: q_len, or seq_len when q_len is None."""
        return self.seq_len if self.q_len is None else self.q_len

    @property
    def key_value_heads(self) -> int:
        """Key/value heads: kv_heads, or heads when kv_heads is None."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def causal_offset(self) -> int:
        """Key j is visible to query i iff j <= i + causal_offset: 0 for an upper-left (or square)
        causal mask, kv_len - q_len for a lower-right one."""
        return self.seq_len - self.queries if self.causal_alignment == "lower_right" else 0

    @property
    def key(self) -> str:
        """Stable file-name key, e.g. ``b8_h16_s1024_d64_bf16_causal``; grouped-query and
        decode shapes add ``kv<kv_heads>`` and ``q<q_len>`` after the heads, and a lower-right
        causal mask reads ``causal-lr`` (``b1_h32_kv8_q1_s4096_d128_bf16_causal-lr``)."""
        mode = ("causal-lr" if self.causal_alignment == "lower_right" else "causal") if self.causal else "full"
        extra = (f"_kv{self.kv_heads}" if self.kv_heads is not None else "") + (f"_q{self.q_len}" if self.q_len is not None else "")
        return f"b{self.batch}_h{self.heads}{extra}_s{self.seq_len}_d{self.head_dim}_{self.dtype}_{mode}"

    @classmethod
    def from_key(cls, key: str) -> Shape:
        """Inverse of :attr:`key`. Raises ValueError on a malformed key, an impossible shape, or a
        key that is not the one :attr:`key` writes for its shape (leading zeros, a redundant kv or
        q part, a lower-right mark on a square shape): one shape, one key, one set of files."""
        m = KEY_PATTERN.fullmatch(key)
        if not m:
            raise ValueError(f"not a shape key: {key!r}")
        g = m.groupdict()
        opt = {k: int(g[k]) for k in ("kv_heads", "q_len") if g[k]}
        mode = g["mode"]
        shape = cls(int(g["batch"]), int(g["heads"]), int(g["seq_len"]), int(g["head_dim"]), g["dtype"], mode != "full",
                    causal_alignment="lower_right" if mode == "causal-lr" else "upper_left" if mode == "causal" else None, **opt)
        if shape.key != key:  # one key per shape: b01, kv4 with heads 4, q64 with seq_len 64, a square causal-lr
            raise ValueError(f"{key!r} is not a shape key as attnprof writes them; that shape's key is {shape.key!r}")
        return shape

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """The shape in words for the report, e.g. ``q [1, 32, 1, 128], k and v [1, 8, 4096, 128],
        bf16, causal lower-right (query i sees keys 0..i + 4095)``."""
        q = [self.batch, self.heads, self.queries, self.head_dim]
        kv = [self.batch, self.key_value_heads, self.kv_len, self.head_dim]
        dims = f"q, k and v {q}" if q == kv else f"q {q}, k and v {kv}"
        if not self.causal:
            mask = "no mask"
        elif self.causal_alignment == "lower_right":
            mask = f"causal lower-right (query i sees keys 0..i + {self.causal_offset}; SDPA attn_mask=causal_lower_right)"
        elif self.causal_alignment == "upper_left":
            mask = "causal upper-left (query i sees keys 0..i; SDPA is_causal=True)"
        else:
            mask = "causal (SDPA is_causal=True)"
        group = f", grouped-query ({self.heads // self.key_value_heads} query heads per key/value head)" if self.kv_heads else ""
        return f"{dims}, {self.dtype}, {mask}{group}"

    def visible_pairs(self) -> int:
        """Number of (query, key) pairs the mask lets through per batch entry and head:
        q_len*kv_len without a mask; with a causal one, sum over queries i of the keys
        0..min(i + causal_offset, kv_len - 1) (at least 0)."""
        sq, sk = self.queries, self.seq_len
        if not self.causal:
            return sq * sk
        off = self.causal_offset
        return sum(max(0, min(i + off + 1, sk)) for i in range(sq))

    def forward_flops(self) -> float:
        """FLOPs of one forward, PyTorch ``benchmarks/transformer/sdpa.py`` convention:
        B*H*(4*Sq*Skv*D + 2*Sq*Skv) (two GEMMs of 2*Sq*Skv*D each plus the softmax counted as
        2*Sq*Skv), halved when causal and square (Sq == Skv). A causal non-square shape (decode,
        prefill with a cache) counts its visible pairs (:meth:`visible_pairs`) instead of Sq*Skv/2,
        which halving would get wrong (a decode query sees every key). Grouped-query attention
        does the same FLOPs as its heads. Returns a float (FLOP)."""
        b, h, d = self.batch, self.heads, self.head_dim
        sq, sk = self.queries, self.seq_len
        if self.causal and sq == sk:
            return b * h * (4 * sq * sk * d + 2 * sq * sk) / 2
        pairs = self.visible_pairs()
        return float(b * h * (4 * pairs * d + 2 * pairs))

    def min_bytes(self) -> int:
        """Fewest bytes one forward must move through device memory: q and the output
        (B*H*Sq*D elements each) and k, v (B*KVH*Skv*D each) once, in the dtype's size
        (2 bytes bf16/fp16, 4 fp32). Square, no GQA: 4*B*H*S*D elements."""
        size = 4 if self.dtype == "fp32" else 2
        return (2 * self.heads * self.queries + 2 * self.key_value_heads * self.seq_len) * self.batch * self.head_dim * size


#: A shape key (:attr:`Shape.key`), for the workflow's wildcard constraint and :meth:`Shape.from_key`.
KEY_PATTERN = re.compile(r"b(?P<batch>\d+)_h(?P<heads>\d+)(?:_kv(?P<kv_heads>\d+))?(?:_q(?P<q_len>\d+))?"
                         r"_s(?P<seq_len>\d+)_d(?P<head_dim>\d+)_(?P<dtype>bf16|fp16|fp32)_(?P<mode>causal|causal-lr|full)")
#: The same pattern without named groups (a Snakemake wildcard constraint nests inside its own group).
KEY_CONSTRAINT = re.sub(r"\(\?P<\w+>", "(?:", KEY_PATTERN.pattern)


def expand_shapes(grid: dict | list[dict]) -> list[Shape]:
    """Cartesian product of a config shape grid (each key a list) into Shapes, in a stable
    order; a list of grids gives the union of their products, first occurrence first.
    Keys: batch, heads, head_dim, dtype, causal; seq_len (both lengths) or q_len and kv_len;
    optional kv_heads (default: heads) and causal_alignment (default lower_right,
    :data:`CAUSAL_ALIGNMENTS`). Raises ValueError for a grid with both or neither of seq_len
    and kv_len, or a point :class:`Shape` rejects."""
    if isinstance(grid, list):
        return list(dict.fromkeys(s for g in grid for s in expand_shapes(g)))
    if ("seq_len" in grid) == ("kv_len" in grid):
        raise ValueError("a shape grid needs seq_len (queries and keys) or kv_len (with q_len, default kv_len), not both")
    g = dict(grid)
    if "kv_len" in g:
        g["seq_len"] = g.pop("kv_len")
    keys = ("batch", "heads", "seq_len", "head_dim", "dtype", "causal", "kv_heads", "q_len", "causal_alignment")
    values = [g.get(k) if isinstance(g.get(k), list) else [g.get(k)] for k in keys]
    return list(dict.fromkeys(Shape(*combo) for combo in itertools.product(*values)))  # equal points once


def torch_dtype(name: str):
    """Map 'bf16' | 'fp16' | 'fp32' to the torch dtype. Raises KeyError otherwise."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _naive_forward(shape: Shape, device: str, inplace: bool) -> Callable:
    """The study's 04_a/04_b: matmul, scale, masked_fill(_), softmax, matmul; the causal mask
    (upper-left or lower-right: :attr:`Shape.causal_offset`) is built once, here, outside the
    profiled forwards. Grouped-query attention repeats each key/value head heads/kv_heads
    times inside the forward (``repeat_interleave``, the explicit copy a naive port makes;
    SDPA's ``enable_gqa`` maps heads the same way)."""
    import torch

    scale = 1.0 / math.sqrt(shape.head_dim)
    group = shape.heads // shape.key_value_heads
    mask = None
    if shape.causal:
        ones = torch.ones(shape.queries, shape.kv_len, dtype=torch.bool, device=device)
        mask = torch.triu(ones, diagonal=1 + shape.causal_offset)

    def forward(q, k, v):
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-2, -1)) * scale
        if mask is not None:
            scores = scores.masked_fill_(mask, float("-inf")) if inplace else scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    return forward


def _sdpa_forward(shape: Shape) -> Callable:
    """The study's 04_c: one scaled_dot_product_attention call, no mask tensor
    (``is_causal``); ``enable_gqa=True`` for grouped-query shapes; a lower-right causal mask
    on a non-square shape passes ``attn_mask=causal_lower_right(q_len, kv_len)`` instead,
    PyTorch's documented way. Its CausalBias dispatch runs the flash or efficient kernel with
    their own lower-right masking where the pinned backend allows; otherwise it materialises a
    dense boolean mask in every forward (seen on the H200 with cuDNN pinned: triu, fill and
    where kernels before the attention kernel): the kernel tables show it."""
    import torch.nn.functional as F

    kwargs = {"enable_gqa": True} if shape.kv_heads is not None else {}
    if shape.causal_alignment == "lower_right":
        from torch.nn.attention.bias import causal_lower_right

        bias = causal_lower_right(shape.queries, shape.kv_len)

        def forward(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, **kwargs)

        return forward

    def forward(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal, **kwargs)

    return forward


def _compiled_naive_forward(shape: Shape, device: str) -> Callable:
    """``torch.compile(naive, dynamic=False, fullgraph=True)``: the naive path (out of place) as
    inductor compiles it, the causal mask still built once outside."""
    import torch

    return torch.compile(_naive_forward(shape, device, inplace=False), dynamic=False, fullgraph=True)


def _flex_forward(shape: Shape, device: str) -> Callable:
    """``flex_attention`` (torch.nn.attention.flex_attention) under ``torch.compile`` with a
    causal block mask (upper-left or lower-right, :attr:`Shape.causal_offset`) built once here
    by ``create_block_mask``, outside the profiled forwards; ``enable_gqa`` for grouped-query
    shapes. No mask for full attention."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    block_mask = None
    if shape.causal:
        offset = shape.causal_offset

        def causal(b, h, q_idx, kv_idx):
            return q_idx + offset >= kv_idx

        block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=shape.queries, KV_LEN=shape.kv_len, device=device)
    flex = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    gqa = shape.kv_heads is not None

    def forward(q, k, v):
        return flex(q, k, v, block_mask=block_mask, enable_gqa=gqa)

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


#: The forward builders of the variants that are not plain SDPA calls (for make_forward and
#: variant_fingerprint).
_BUILDERS = {"naive": _naive_forward, "naive_inplace": _naive_forward,
             "naive_compiled": _compiled_naive_forward, "flex_attention": _flex_forward}


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
    if variant in COMPILED:
        return _BUILDERS[variant](shape, device), contextlib.nullcontext()
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
        builder = _BUILDERS.get(variant, _sdpa_forward)
        own = [str(VARIANTS[variant])] + ([inspect.getsource(_naive_forward)] if variant == "naive_compiled" else [])
    parts = [variant, *own] + [inspect.getsource(obj) for obj in (builder, make_forward, Shape, _reference_blocks, relative_error)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


#: Query rows per block of the float64 reference (see :func:`_reference_blocks`).
REFERENCE_BLOCK = 1024


def _reference_blocks(q, k, v, causal: bool, block: int = REFERENCE_BLOCK, offset: int = 0):
    """Yield ``(b, h, rows, ref)`` over the float64 reference softmax(q k^T / sqrt(D) + mask) v
    of q [B, H, Sq, D] and k, v [B, KVH, Skv, D] (any float dtype; H a multiple of KVH, query
    head h reading key/value head h // (H / KVH), as SDPA's ``enable_gqa``): ``ref`` is float64
    [len(rows), D] for batch entry ``b``, head ``h`` and the query rows ``rows`` (a slice of at
    most ``block`` rows), on q's device. ``causal``: key j is visible to query i iff
    j <= i + ``offset`` (0: SDPA's ``is_causal``, upper-left; Skv - Sq: lower-right).

    Memory bound: one block holds its [block, S] float64 scores (softmax taken in place), a
    [block, S] bool mask when causal, and that head's K and V in float64: about
    10*block*S + 16*S*D bytes on top of the inputs, whatever B and H are (block 1024,
    S 32768, D 64, B 1, H 16: 0.37 GB peak measured on an H200, where the whole float64
    reference's scores would take 128 GiB)."""
    import torch

    s_q, s_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            kd, vd = k[b, h // group].double(), v[b, h // group].double()
            for r0 in range(0, s_q, block):
                rows = slice(r0, min(r0 + block, s_q))
                # causal: the block's last query sees keys 0..rows.stop-1+offset only; later keys would
                # get weight exp(-inf) = 0, so they are left out of the product instead (half the work)
                n_k = max(0, min(rows.stop + offset, s_k)) if causal else s_k
                scores = (q[b, h, rows].double() * scale) @ kd[:n_k].T  # the only [block, S] float64 buffer
                if causal:
                    row_ids = torch.arange(rows.start + offset, rows.stop + offset, device=q.device)[:, None]
                    scores.masked_fill_(torch.arange(n_k, device=q.device)[None, :] > row_ids, float("-inf"))
                scores -= scores.amax(dim=-1, keepdim=True)
                scores.exp_()
                scores /= scores.sum(dim=-1, keepdim=True)
                yield b, h, rows, scores @ vd[:n_k]
                del scores  # before the next block's scores exist


def reference_attention(q, k, v, causal: bool, block: int = REFERENCE_BLOCK, offset: int = 0):
    """float64 reference of the same attention for q, k, v [B, H, S, D], computed block by
    block (:func:`_reference_blocks`: per batch entry, head and ``block`` query rows) on q's
    device. Returns the whole float64 [B, H, S, D] output, B*H*S*D*8 bytes on top of the block
    bound; :func:`relative_error` compares against it without materialising it."""
    import torch

    ref = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=torch.float64, device=q.device)
    for b, h, rows, blk in _reference_blocks(q, k, v, causal, block, offset):
        ref[b, h, rows] = blk
    return ref


def relative_error(out, q, k, v, causal: bool, block: int = REFERENCE_BLOCK, offset: int = 0) -> float:
    """||out - ref|| / ||ref|| (Frobenius norms over the whole [B, H, S, D] tensor, computed in
    float64) of a forward's output ``out`` against the float64 reference of q, k, v (causal
    mask ``offset``: :func:`_reference_blocks`), summed
    block by block (:func:`_reference_blocks`): the full reference is never held, so extra
    memory stays within the block bound plus one [block, D] float64 difference. Returns a
    dimensionless float: nan if out and ref are both zero, inf if only ref is. Raises
    ValueError if ``out`` is not [B, H, S, D_v] like q and v."""
    import torch

    if tuple(out.shape) != (*q.shape[:-1], v.shape[-1]):
        raise ValueError(f"output shape {tuple(out.shape)} does not match q {tuple(q.shape)} and v {tuple(v.shape)}")
    num = torch.zeros((), dtype=torch.float64, device=q.device)
    den = torch.zeros((), dtype=torch.float64, device=q.device)
    for b, h, rows, ref in _reference_blocks(q, k, v, causal, block, offset):
        num += (out[b, h, rows].double() - ref).square().sum()
        den += ref.square().sum()
    return (num.sqrt() / den.sqrt()).item()
