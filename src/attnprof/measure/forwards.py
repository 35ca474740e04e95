"""How each variant's forward is built and checked: the builders behind attnprof.model.variants.REGISTRY,
user variants (``custom_variants``), the source fingerprint that reruns a variant's captures, and the float64
reference every output is checked against. Imports torch inside functions only."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable

from attnprof.model import variants as registry
from attnprof.model.variants import CONTROL, CONTROL_K, CONTROL_SIZE, REGISTRY, Shape


def torch_dtype(name: str):
    """Map 'bf16' | 'fp16' | 'fp32' to the torch dtype. Raises KeyError otherwise."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _naive_forward(shape: Shape, device: str, inplace: bool = False) -> Callable:
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


def _sdpa_forward(shape: Shape, device: str) -> Callable:
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

        kwargs["attn_mask"] = causal_lower_right(shape.queries, shape.kv_len)
    else:
        kwargs["is_causal"] = shape.causal

    def forward(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

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


def _custom_forward(custom: dict, shape: Shape, device: str) -> Callable:
    """A user variant (config ``custom_variants``): ``custom["function"]`` names
    ``fn(q, k, v, *, causal, scale) -> out`` (q, k, v and out [batch, heads, seq_len,
    head_dim]; ``scale`` = 1/sqrt(head_dim)); the optional ``custom["setup"]`` names
    ``setup(shape: dict, device: str) -> dict`` of extra keyword arguments for ``fn``, called
    once here, outside the profiled forwards (a mask or a compiled kernel built once). Each ``"module:function"`` is
    imported as ``import`` would (pkgutil.resolve_name: from the working directory or an installed package); the
    config schema admits no other form. Raises ImportError or AttributeError when one cannot be found."""
    from pkgutil import resolve_name

    fn = resolve_name(custom["function"])
    extra = resolve_name(custom["setup"])(shape.as_dict(), device) if custom.get("setup") else {}
    scale = 1.0 / math.sqrt(shape.head_dim)

    def forward(q, k, v):
        return fn(q, k, v, causal=shape.causal, scale=scale, **(extra or {}))

    return forward


def _control_forward(shape: Shape, device: str) -> Callable:
    """The profiler's control (:data:`attnprof.model.variants.CONTROL`): a forward of known work, whatever
    q, k and v are (they are ignored): ``torch.mm`` of fp32 [CONTROL_SIZE, CONTROL_K] @ [CONTROL_K, CONTROL_SIZE]
    (one cuBLAS kernel on a GPU: K short, no split-K), ``torch.add`` of its result and a third matrix (one elementwise kernel) and
    ``dst.copy_(src)`` between two preallocated tensors of the same device and dtype (one memcpy DtoD on
    a GPU). Every tensor is made here, outside the profiled forwards. Returns the add's result."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(CONTROL_SIZE, CONTROL_K, generator=gen).to(device)
    b = torch.randn(CONTROL_K, CONTROL_SIZE, generator=gen).to(device)
    c = torch.randn(CONTROL_SIZE, CONTROL_SIZE, generator=gen).to(device)
    src, dst = torch.randn(CONTROL_SIZE, CONTROL_SIZE, generator=gen).to(device), torch.empty(CONTROL_SIZE, CONTROL_SIZE, device=device)

    def forward(q, k, v):
        out = torch.add(torch.mm(a, b), c)
        dst.copy_(src)
        return out

    return forward


#: The forward builders, one per kind of forward (attnprof.model.variants.BUILDERS, :attr:`Variant.builder`):
#: ``builder(shape, device, **options) -> forward(q, k, v)``.
BUILDERS = {"sdpa": _sdpa_forward, "naive": _naive_forward, "naive_compiled": _compiled_naive_forward, "flex": _flex_forward}
if set(BUILDERS) != set(registry.BUILDERS):  # the two halves of one registration (model names, measure builds)
    raise ImportError(f"attnprof.measure.forwards.BUILDERS {sorted(BUILDERS)} != attnprof.model.variants.BUILDERS "
                      f"{sorted(registry.BUILDERS)}")


def make_forward(variant: str, shape: Shape, device: str,
                 custom: dict | None = None) -> tuple[Callable, contextlib.AbstractContextManager]:
    """Return ``(forward, context)``: ``forward(q, k, v) -> out`` for ``variant``, and the
    context to hold around every call -- ``sdpa_kernel(<backend>)`` for the pinned SDPA
    variants, a null context otherwise. The context is entered once, outside the profiled
    forwards, so that a forward's CPU time is the attention call alone (as in sdpa_auto).
    The registration (:data:`attnprof.model.variants.REGISTRY`) says everything: the builder
    (:data:`BUILDERS`), its options and the pinned backend; no variant is named here.
    ``custom``: a user variant's {"function", "setup"} (:func:`_custom_forward`). Raises
    KeyError for an unknown variant."""
    if custom:
        return _custom_forward(custom, shape, device), contextlib.nullcontext()
    if variant == CONTROL:
        return _control_forward(shape, device), contextlib.nullcontext()
    v = REGISTRY[variant]
    forward = BUILDERS[v.builder](shape, device, **dict(v.options))
    if v.backend is None:  # not pinned (naive, compiled, sdpa_auto: whatever PyTorch dispatches to)
        return forward, contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return forward, sdpa_kernel(getattr(SDPBackend, v.backend))


def _called_here(fn: Callable) -> list[Callable]:
    """``fn`` and the functions of this module it calls, directly or not (by name: inspect.getclosurevars),
    so that a builder's fingerprint covers the code it runs (naive_compiled runs _naive_forward)."""
    import inspect

    seen: list[Callable] = []
    todo = [fn]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        todo += [g for g in inspect.getclosurevars(f).globals.values()
                 if inspect.isfunction(g) and g.__module__ == __name__ and g not in seen]
    return seen


def _module_source(target: str, key: str) -> str:
    """The source text of the module of a ``"module:function"`` target (config ``key``), found without running it
    (importlib.util.find_spec; a dotted module's parent packages are imported). Raises ValueError naming the key and
    the fix when the module cannot be found, or when its source defines no such name at top level (:func:`_defines`):
    a misspelt function is then refused at parse time, not by the capture that imports it."""
    import importlib.util
    from pathlib import Path

    module, _, name = target.partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise ValueError(f"{key} {target!r}: module {module!r} not found (it must be importable from the "
                         "working directory or installed)")
    text = Path(spec.origin).read_text()
    if name and not _defines(text, name):
        raise ValueError(f"{key} {target!r}: {spec.origin} defines no {name!r} at top level (a def, a class, an "
                         f"assignment or an import of that name); fix the name after the ':' in {key}")
    return text


def _defines(text: str, name: str) -> bool:
    """Whether module source ``text`` may bind ``name`` at top level (also inside a top-level if, try, with or for):
    a def, class, assignment or import of it (the module's symbol table, symtable); also for a ``from x import *``
    or a module ``__getattr__``, which may bind any name, and for source that does not compile (left to the
    import, which names the syntax error)."""
    import ast
    import symtable

    try:
        table = symtable.symtable(text, "<module>", "exec")
    except SyntaxError:
        return True
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    star = any(isinstance(n, ast.ImportFrom) and n.names[0].name == "*" for n in ast.walk(ast.parse(text)))
    return star or bool(bound & {name, "__getattr__"})


@functools.cache
def _source(obj) -> str:
    """inspect.getsource, once per object and process: the workflow asks for every capture's fingerprint at parse
    time, and reading the same sources again cost about 0.4 s of every Snakemake invocation (34 captures)."""
    import inspect

    return inspect.getsource(obj)


def variant_fingerprint(variant: str, custom: dict | None = None) -> str:
    """sha256 (16 hex digits) of the source code a variant's capture runs: its forward builder (and the
    functions of this module the builder calls), its registration's backend, builder, options and compiled flag,
    make_forward, Shape and the float64 references (_reference_blocks, relative_error, gradient_relative_errors,
    _ErrorNorms); for a user variant (``custom``: {"function", "setup"}) also the whole source of the modules those
    name, read without importing them. A Snakemake param of the capture rule, so that editing one variant's code
    reruns that variant's captures only."""
    import hashlib

    if custom:
        builder = _custom_forward
        own = [repr(sorted(custom.items()))] + [_module_source(custom[k], f"custom_variants.{variant}.{k}")
                                                for k in ("function", "setup") if custom.get(k)]
    elif variant == CONTROL:  # the profiler's control: its matrices' size is in variants.py, not in its builder
        builder = _control_forward
        own = [f"CONTROL_SIZE={CONTROL_SIZE} CONTROL_K={CONTROL_K}"]
    else:  # what the registration says about how it runs (not its description), and every function its builder calls
        v = REGISTRY[variant]
        builder = BUILDERS[v.builder]
        own = [repr((v.backend, v.builder, v.options, v.compiled))]
        own += [_source(f) for f in _called_here(builder) if f is not builder]
    parts = [variant, *own] + [_source(obj) for obj in (builder, make_forward, Shape, _reference_blocks, relative_error,
                                                        kept_reference, gradient_relative_errors, _ErrorNorms)]
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


def relative_error(out, q, k, v, causal: bool, block: int = REFERENCE_BLOCK, offset: int = 0,
                   reference=None) -> float:
    """||out - ref|| / ||ref|| (Frobenius norms over the whole [B, H, S, D] tensor, computed in
    float64) of a forward's output ``out`` against the float64 reference of q, k, v (causal
    mask ``offset``: :func:`_reference_blocks`), summed
    block by block (:func:`_reference_blocks`): the full reference is never held, so extra
    memory stays within the block bound plus one [block, D] float64 difference. ``reference``: that
    reference already computed (:func:`kept_reference`; float64 [B, H, S, D_v], on any device), compared one batch
    entry at a time on out's device instead. Returns a
    dimensionless float: nan if out and ref are both zero, inf if only ref is. Raises
    ValueError if ``out`` is not [B, H, S, D_v] like q and v."""
    if tuple(out.shape) != (*q.shape[:-1], v.shape[-1]):
        raise ValueError(f"output shape {tuple(out.shape)} does not match q {tuple(q.shape)} and v {tuple(v.shape)}")
    errors = _ErrorNorms(("out",), q.device)
    pieces = (((b,), reference[b].to(q.device)) for b in range(q.shape[0])) if reference is not None else (
        ((b, h, rows), ref) for b, h, rows, ref in _reference_blocks(q, k, v, causal, block, offset))
    for where, ref in pieces:
        errors.add("out", out[where], ref)
    return errors.ratios()["out"]


#: Bytes of float64 references a process keeps (:func:`kept_reference`), in host memory: every shape of the default
#: H200 sweep takes 4.9 GiB (b8_h16_s16384_d128 alone 2 GiB).
REFERENCE_KEEP_BYTES = 8 << 30
_KEPT: dict = {}  # (shape, dtype, device, causal, offset, the inputs' float64 sums) -> float64 reference, on the host


def kept_reference(q, k, v, causal: bool, offset: int = 0):
    """The float64 reference (:func:`reference_attention`) of q, k, v, computed once per process for these inputs and
    kept in host memory, so that every variant checked at one shape and input set (in the check process: every
    variant of the run) reuses it; None when it is larger than :data:`REFERENCE_KEEP_BYTES` (the caller then compares
    block by block). The key holds the shapes, dtype, device, mask and each input's float64 sum (an input changed
    in place is a new key). The oldest references are dropped to keep the total within the bound."""
    import torch

    size = q.shape[0] * q.shape[1] * q.shape[2] * v.shape[-1] * 8
    if size > REFERENCE_KEEP_BYTES:
        return None
    key = (tuple(q.shape), tuple(k.shape), tuple(v.shape), str(q.dtype), str(q.device), causal, offset,
           tuple(torch.sum(t, dtype=torch.float64).item() for t in (q, k, v)))
    if key not in _KEPT:
        while _KEPT and sum(r.numel() * 8 for r in _KEPT.values()) + size > REFERENCE_KEEP_BYTES:
            del _KEPT[next(iter(_KEPT))]
        _KEPT[key] = reference_attention(q, k, v, causal, offset=offset).cpu()
    return _KEPT[key]


def gradient_relative_errors(grads, q, k, v, grad_out, causal: bool, block: int = REFERENCE_BLOCK,
                             offset: int = 0) -> dict[str, float]:
    """Relative errors ||g - ref|| / ||ref|| (Frobenius norms over the whole tensor, in float64) of a
    backward's gradients ``grads`` = (dq [B, H, Sq, D], dk [B, KVH, Skv, D], dv [B, KVH, Skv, D_v]) of
    the attention of q, k, v (causal mask ``offset``: :func:`_reference_blocks`) for the output
    gradient ``grad_out`` [B, H, Sq, D_v], against the float64 reference: autograd
    (``torch.autograd.grad``) through softmax(q k^T / sqrt(D) + mask) v computed in float64, block by
    block. Softmax is taken row by row, so a block of query rows has exact dq rows of its own, and
    dk, dv are the sums of every block's contributions (of every query head of a key/value head's
    group, for grouped-query shapes); they are accumulated per (batch entry, key/value head) in
    float64 [Skv, D] buffers and compared head by head, so the full reference is never held.

    Memory bound: one block's graph holds about 4 [block, S] float64 buffers (scores, the mask,
    softmax and its gradient) plus 4 [S, D] float64 buffers (k, v and their accumulated gradients).
    Returns {"dq", "dk", "dv"}: dimensionless floats (nan if a gradient and its reference are both
    zero, inf if only the reference is). Raises ValueError when a gradient's shape is not its
    input's."""
    import torch

    _check_gradient_shapes(grads, q, k, v)
    errors = _ErrorNorms(("dq", "dk", "dv"), q.device)
    with torch.enable_grad():
        for b in range(q.shape[0]):
            for g in range(k.shape[1]):
                _kv_head_errors(errors, grads, q, k, v, grad_out, b, g, causal, block, offset)
    return errors.ratios()


def _check_gradient_shapes(grads, q, k, v) -> None:
    """Raise ValueError unless ``grads`` is three gradients (dq, dk, dv) of the shapes of q, k and v."""
    if len(grads) != 3 or any(g is None or tuple(g.shape) != tuple(t.shape) for g, t in zip(grads, (q, k, v))):
        got = [None if g is None else tuple(g.shape) for g in grads]
        raise ValueError(f"gradients {got} do not match q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}")


class _ErrorNorms:
    """Running squared Frobenius norms, in float64 on ``device``, of got - ref and of ref per named tensor."""

    def __init__(self, names, device):
        import torch

        self.num = {n: torch.zeros((), dtype=torch.float64, device=device) for n in names}
        self.den = {n: torch.zeros((), dtype=torch.float64, device=device) for n in names}

    def add(self, name: str, got, ref) -> None:
        """Add one piece of tensor ``name``: ``got`` (any float dtype) against its float64 reference ``ref``."""
        self.num[name] += (got.double() - ref).square().sum()
        self.den[name] += ref.square().sum()

    def ratios(self) -> dict[str, float]:
        """||got - ref|| / ||ref|| per name (nan when both are zero, inf when only ref is)."""
        return {n: (self.num[n].sqrt() / self.den[n].sqrt()).item() for n in self.num}


def _kv_head_errors(errors: _ErrorNorms, grads, q, k, v, grad_out, b: int, g: int, causal: bool, block: int,
                    offset: int) -> None:
    """Add to ``errors`` the reference gradients of batch entry ``b``'s key/value head ``g``: dq of every query head
    of its group, block by block, and dk, dv summed over those heads' blocks ([Skv, D] float64 buffers)."""
    import torch

    dq, dk, dv = grads
    group = q.shape[1] // k.shape[1]
    kd = k[b, g].detach().double().requires_grad_(True)
    vd = v[b, g].detach().double().requires_grad_(True)
    dk_ref, dv_ref = torch.zeros_like(kd), torch.zeros_like(vd)
    for h in range(g * group, (g + 1) * group):
        for r0 in range(0, q.shape[-2], block):
            rows = slice(r0, min(r0 + block, q.shape[-2]))
            gq, gk, gv = _block_gradients(q[b, h, rows], kd, vd, grad_out[b, h, rows], rows, causal, offset)
            errors.add("dq", dq[b, h, rows], gq)
            dk_ref += gk
            dv_ref += gv
            del gq, gk, gv
    errors.add("dk", dk[b, g], dk_ref)
    errors.add("dv", dv[b, g], dv_ref)


def _block_gradients(q_rows, kd, vd, grad_rows, rows: slice, causal: bool, offset: int):
    """The float64 reference gradients (dq of the block's rows, dk, dv of this block's contribution) of one block of
    query rows ``q_rows`` against one key/value head's float64 ``kd``, ``vd`` (leaves requiring grad), through
    softmax(q k^T / sqrt(D) + mask) v, for the output gradient ``grad_rows``. A query row that sees no key (possible
    with a negative offset) has no gradient: nan -> 0."""
    import torch

    scale = 1.0 / math.sqrt(q_rows.shape[-1])
    s_k = kd.shape[-2]
    qd = q_rows.detach().double().requires_grad_(True)
    # causal: keys after the block's last visible one get weight 0 and gradient 0: left out
    n_k = max(0, min(rows.stop + offset, s_k)) if causal else s_k
    scores = (qd * scale) @ kd[:n_k].T
    if causal:
        row_ids = torch.arange(rows.start + offset, rows.stop + offset, device=qd.device)[:, None]
        scores = scores.masked_fill(torch.arange(n_k, device=qd.device)[None, :] > row_ids, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ vd[:n_k]
    return tuple(t.nan_to_num(0.0) for t in torch.autograd.grad(out, (qd, kd, vd), grad_rows.double()))
