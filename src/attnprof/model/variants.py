"""The attention variants under study and the problem shapes they run on.

Every variant computes causal (or full) scaled dot-product attention

    out = softmax(q @ k^T / sqrt(head_dim) + mask) @ v

on q, k, v of shape [batch, heads, seq_len, head_dim] (the layout of
``torch.nn.functional.scaled_dot_product_attention``). The variants follow
Hugging Face, "Profiling in PyTorch (Part 3): Attention is all you profile"
(scripts 04_a, 04_b, 04_c of the dataset repo ``ariG23498/profiling-pytorch``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass

#: Devices a capture runs on (config ``device``).
DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class Variant:
    """One built-in variant, registered once in :data:`REGISTRY`:

    * ``backend``: the SDPA backend it pins (an ``SDPBackend`` member name), or None (naive variants,
      sdpa_auto, the compiled ones). SDPA = torch.nn.functional.scaled_dot_product_attention.
    * ``description``: what it changes, in words (the report's "change" column).
    * ``compiled``: built by ``torch.compile`` (inductor; Triton kernels on a GPU, C++ on the CPU): its first
      call compiles, and the capture measures it apart from the steady state (attnprof.measure.capture), in
      a process that serves no other capture.
    * ``devices``: the devices (:data:`DEVICES`) PyTorch has a kernel for it on; on another one its capture
      is still attempted (PyTorch's refusal is the record's reason) and the reason says why.
    * ``builder``: the kind of forward, a key of :data:`BUILDERS` (the function of that name in
      attnprof.measure.forwards builds it: torch lives in the measure layer), and ``options``: that builder's
      keyword arguments, as (name, value) pairs. attnprof.measure.forwards.make_forward calls
      ``builder(shape, device, **options)`` and holds ``sdpa_kernel(backend)`` around the calls when a
      backend is pinned; it names no variant.
    * ``dispatcher``: it picks a backend rather than run a kernel of its own (SDPA with no backend pinned): a finding
      says what it dispatched to, and no ranking sets it beside (or ahead of) the kernel it dispatched to
      (:data:`DISPATCHERS`; attnprof.findings.ranking).
    * ``uncompiled``: for a compiled variant, the built-in variant it compiles (naive_compiled: naive), which its
      kernels and time are set against; None where there is none (flex_attention has no uncompiled twin).

    A variant of an existing kind is this one registration; a new kind is a builder in
    attnprof.measure.forwards plus its name in :data:`BUILDERS` (docs/contributing.md)."""

    backend: str | None
    description: str
    compiled: bool = False
    devices: tuple[str, ...] = DEVICES
    builder: str = "sdpa"
    options: tuple[tuple[str, object], ...] = ()
    dispatcher: bool = False
    uncompiled: str | None = None

    def __post_init__(self):
        unknown = [d for d in self.devices if d not in DEVICES]
        if unknown or not self.devices:
            raise ValueError(f"devices {self.devices!r}: expected some of {DEVICES}")
        if self.builder not in BUILDERS:
            raise ValueError(f"builder {self.builder!r}: expected one of {', '.join(BUILDERS)}")


#: The kinds of forward (:attr:`Variant.builder`) -> what each builds; the builder of the same name in
#: attnprof.measure.forwards (``BUILDERS`` there) makes it.
BUILDERS = {
    "sdpa": "one scaled_dot_product_attention call (the study's 04_c)",
    "naive": "matmul, scale, masked_fill, softmax, matmul (the study's 04_a/04_b; option inplace)",
    "naive_compiled": "the naive forward under torch.compile",
    "flex": "flex_attention under torch.compile with a causal block mask",
}


#: The built-in variants, in the report's order: the one place each is declared.
REGISTRY: dict[str, Variant] = {
    "naive": Variant(None, "matmul, scale, masked_fill (out of place), softmax, matmul", builder="naive"),
    "naive_inplace": Variant(None, "as naive, with masked_fill_ (in place)", builder="naive", options=(("inplace", True),)),
    "sdpa_math": Variant("MATH", "SDPA, backend pinned to MATH"),
    # PyTorch's CPU SDPA dispatcher (sdp_utils_cpp) offers only the FLASH_ATTENTION and MATH backends
    "sdpa_efficient": Variant("EFFICIENT_ATTENTION", "SDPA, backend pinned to EFFICIENT_ATTENTION", devices=("cuda",)),
    "sdpa_flash": Variant("FLASH_ATTENTION", "SDPA, backend pinned to FLASH_ATTENTION"),
    "sdpa_cudnn": Variant("CUDNN_ATTENTION", "SDPA, backend pinned to CUDNN_ATTENTION", devices=("cuda",)),
    "sdpa_auto": Variant(None, "SDPA, no backend pinned (PyTorch chooses)", dispatcher=True),
    "naive_compiled": Variant(None, "naive under torch.compile (inductor fuses the elementwise work)", compiled=True,
                              builder="naive_compiled", uncompiled="naive"),
    "flex_attention": Variant(None, "flex_attention under torch.compile, causal block mask built once", compiled=True,
                              builder="flex"),
}

#: variant -> SDPA backend it pins (SDPBackend member name), or None: :data:`REGISTRY`'s backends.
VARIANTS: dict[str, str | None] = {name: v.backend for name, v in REGISTRY.items()}

#: Variants built by ``torch.compile`` (:attr:`Variant.compiled`), in :data:`REGISTRY`'s order.
COMPILED = tuple(name for name, v in REGISTRY.items() if v.compiled)

#: Variants that dispatch to another backend (:attr:`Variant.dispatcher`), in :data:`REGISTRY`'s order: never ranked.
DISPATCHERS = tuple(name for name, v in REGISTRY.items() if v.dispatcher)


def uncompiled_of(variant: str) -> str | None:
    """The built-in variant a compiled ``variant`` compiles (:attr:`Variant.uncompiled`); None for any other."""
    return REGISTRY[variant].uncompiled if variant in REGISTRY else None


def ends_capture_process(variant: str, custom: bool) -> bool:
    """Whether a capture of ``variant`` ends the capture process that ran it, whatever its outcome: a user
    variant's (``custom``: its module stays imported, and an edit of it must reach the next capture) and a
    torch.compile variant's (:data:`COMPILED`: dynamo's in-process caches and recompile limits would carry over to
    the next shape). The capture worker then starts a fresh process for the next capture
    (:func:`attnprof.runtime.worker.reusable`), so the workflow runs these captures last in their round
    (rule capture's priority, the worker's queue): one fresh process per such capture instead of two."""
    return bool(custom) or variant in COMPILED


def runs_on(variant: str, device: str) -> bool:
    """Whether PyTorch has a kernel for a built-in ``variant`` on ``device`` (:attr:`Variant.devices`); True for a
    name :data:`REGISTRY` does not hold (a custom variant, the control: nothing is known against them)."""
    return variant not in REGISTRY or device in REGISTRY[variant].devices

DTYPES = ("bf16", "fp16", "fp32")

#: The profiler's control (issue 20): a pseudo-variant with a fixed workload whose counts are known by
#: construction (attnprof.measure.forwards._control_forward): per forward one torch.mm of fp32 matrices
#: [CONTROL_SIZE, CONTROL_K] @ [CONTROL_K, CONTROL_SIZE], one out-of-place torch.add and one device-to-device
#: ``dst.copy_(src)``. The GEMM's inner dimension is short and its output large, so that cuBLAS has no reason to
#: split K: a square 512 x 512 x 512 fp32 GEMM ran as two kernels on an H200 (the GEMM and a split-K reduction,
#: torch 2.11 + CUDA 13; benchmarks/control_counts_h200.sh), which is the library's choice, not the profiler's.
#: No memset: no public torch call issues cudaMemsetAsync (``zero_()`` on a CUDA tensor is ``fill_(0)``,
#: a FillFunctor kernel; aten/src/ATen/native/Fill.cpp). Captured at the first shape of a result set's grid,
#: every repeat, and left out of every ranking, finding, plot and summary of the attention variants.
CONTROL = "control"
CONTROL_SIZE = 2048
CONTROL_K = 64
#: Known counts per forward (attnprof.analysis.control checks a capture against them): on a GPU the forward's
#: kernels (cuBLAS's one GEMM kernel + the add's elementwise kernel), memcpys and memsets; on the CPU the calls
#: of each aten op per forward, every nesting level (counted by hand in a torch 2.13.0 CPU trace: one
#: aten::mm, one aten::add, one aten::copy_; tests/test_control.py).
CONTROL_COUNTS = {"cuda": {"kernels": 2, "memcpy": 1, "memset": 0},
                  "cpu": {"aten::mm": 1, "aten::add": 1, "aten::copy_": 1}}


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
        self._check_values()
        self._normalise()
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads} (grouped-query attention "
                             "shares each key/value head among heads / kv_heads query heads)")
        if self.causal_alignment == "lower_right" and self.q_len > self.seq_len:
            raise ValueError(f"q_len {self.q_len} > kv_len {self.seq_len} with a lower-right causal mask: the first "
                             f"{self.q_len - self.seq_len} query rows would see no key")

    def _check_values(self) -> None:
        """Each size an integer >= 1 (kv_heads and q_len: or None), a known dtype and causal alignment."""
        for name in ("batch", "heads", "seq_len", "head_dim", "kv_heads", "q_len"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} {value!r}: must be an integer >= 1")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.causal_alignment not in (None, *CAUSAL_ALIGNMENTS):
            raise ValueError(f"causal_alignment {self.causal_alignment!r}: expected one of {', '.join(CAUSAL_ALIGNMENTS)}")

    def _normalise(self) -> None:
        """kv_heads equal to heads and q_len equal to seq_len become None; the alignment is kept only where it
        matters (causal, q_len != kv_len), the first of CAUSAL_ALIGNMENTS by default."""
        if self.kv_heads == self.heads:
            object.__setattr__(self, "kv_heads", None)
        if self.q_len == self.seq_len:
            object.__setattr__(self, "q_len", None)
        if not self.causal or self.q_len is None:
            object.__setattr__(self, "causal_alignment", None)
        elif self.causal_alignment is None:
            object.__setattr__(self, "causal_alignment", CAUSAL_ALIGNMENTS[0])

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
