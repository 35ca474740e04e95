"""What a GPU kernel's name says: its class (GEMM, FP32 GEMM, mask, cast/copy, softmax,
elementwise, fused attention) and, for the fused attention kernels, the library, tile, dtype,
target architecture and MMA instructions.

Kernel names in a ``torch.profiler`` trace are demangled C++ template instantiations, e.g.
``void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, ...>, ...>(Params)``
or ``void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_...>(Params)``. A class or a
library is decided by the kernel's *own* function name only (:func:`attnprof.analysis.trace.kernel_label`,
:func:`attnprof.analysis.trace.short_kernel_name`: the name before its template and parameter lists; for
PyTorch's generic elementwise kernels the functor they run, for CUTLASS entry points the kernel
they instantiate), never by words inside template arguments: a CUTLASS kernel whose arguments
mention ``flash`` is not FlashAttention (test fixture ``r3_flash_in_cutlass_args``). Details
(tile sizes, dtype) are then read from the argument list of the family the name was placed in.

No units here: names in, names out.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from attnprof.analysis.trace import kernel_label, short_kernel_name

if TYPE_CHECKING:
    import pandas as pd

# Kernel classes are matched against kernel_label(name): the kernel's own function name (for
# PyTorch's generic elementwise kernels, the functor they run; for CUTLASS entry points, the
# kernel they instantiate), never against words inside template or parameter lists.
#: FP32 GEMMs: cuBLAS SIMT names (sgemm, f32f32 ... ffma) and Hopper nvjet 'sss' kernels.
FP32_GEMM = re.compile(r"sgemm|gemm_f32f32.*ffma|nvjet_\w*_sss_|_s1688gemm_fp32|cutlass_\w*simt_sgemm", re.I)
#: GEMMs of any precision: cuBLAS/CUTLASS names containing 'gemm' and Hopper's cuBLAS 'nvjet' kernels.
GEMM = re.compile(r"gemm|nvjet", re.I)
#: Casts and copies (the math backend's up- and down-casts around FP32 work).
UPCAST_KERNEL = re.compile(r"direct_copy_kernel|bfloat16_copy_kernel|float16_copy_kernel|copy_kernel", re.I)
#: Causal-mask construction: triu/tril, a bool fill, where.
MASK_KERNEL = re.compile(r"triu_tril_kernel|FillFunctor<bool>|where_kernel", re.I)


#: Kernels that torch.compile's inductor generated in Triton: ``triton_<kind>_fused_<ops>_<n>`` with kind
#: poi (pointwise), red (reduction), per (persistent reduction) or tem (a template, e.g. FlexAttention);
#: ``<ops>`` lists the ATen ops fused into it (torch/_inductor/codegen/triton.py names kernels so).
TRITON_KERNEL = re.compile(r"^triton_(poi|red|per|tem)_")


def fused_ops(name: str) -> list[str]:
    """The ATen ops an inductor Triton kernel fused, from its own name (``triton_per_fused__softmax_exp_
    masked_fill_mul_0`` -> ['_softmax', 'exp', 'masked', 'fill', 'mul']); [] for any other kernel.
    Inductor joins the op names with '_', so an op with an underscore inside its name reads as two
    words: a label for people, not a count."""
    m = re.match(r"^triton_(?:poi|red|per|tem)_fused_(.*?)_\d+$", name)
    if not m:
        return []
    text = m.group(1)
    lead = "_" if text.startswith("_") else ""
    words = [w for w in text.lstrip("_").split("_") if w]
    return ([lead + words[0]] + words[1:]) if words else []


KERNEL_GROUPS = (("Triton (inductor)", TRITON_KERNEL), ("FP32 GEMM", FP32_GEMM), ("GEMM", GEMM), ("mask", MASK_KERNEL),
                 ("cast/copy", UPCAST_KERNEL),
                 ("softmax", re.compile(r"softmax", re.I)),
                 # PyTorch's generic elementwise kernels (kernel_label names the functor: scale, masked_fill...)
                 ("elementwise", re.compile(r"elementwise_kernel")))


#: Kernel classes for plots and breakdowns, in the order they are drawn (kernel_class).
KERNEL_CLASSES = ("fused attention", "attention pre/post", "Triton (inductor)", "GEMM", "FP32 GEMM", "softmax", "mask", "cast/copy",
                  "elementwise", "other kernel", "memcpy", "memset")


def matches(k: pd.DataFrame, pattern: re.Pattern) -> pd.Series:
    """Rows of kernel table ``k`` whose kernel_label matches ``pattern`` (see above)."""
    return k["kernel"].map(kernel_label).str.contains(pattern)


def kernel_group(name: str) -> str | None:
    """The first of :data:`KERNEL_GROUPS` whose pattern matches the kernel_label of ``name``
    (full kernel name), or None."""
    label = kernel_label(name)
    return next((g for g, pat in KERNEL_GROUPS if pat.search(label)), None)


def kernel_class(name: str, category: str = "kernel") -> str:
    """The kind of work a GPU event does, one of :data:`KERNEL_CLASSES`: memcpy and memset by
    category; a fused attention kernel by its own function name (:func:`decode_kernel_name`);
    else the first of :data:`KERNEL_GROUPS` whose pattern matches its kernel_label; else
    'other kernel'. Never decided by words inside template arguments."""
    if category in ("memcpy", "memset"):
        return category
    info = decode_kernel_name(name)
    if info["library"] != "unknown":
        return "fused attention" if info.get("role", "main") == "main" else "attention pre/post"
    return kernel_group(name) or "other kernel"


def decode_kernel_name(name: str) -> dict:
    """What a fused attention kernel's name tells: library, dtype, tile sizes, target
    architecture (smXX) and MMA kind. The library is decided by the kernel's own function
    name (:func:`attnprof.analysis.trace.short_kernel_name`, before its template and parameter
    lists), never by words inside those lists; a name of no known family gives library
    'unknown'. Known families: FlashAttention-2 in PyTorch (``pytorch_flash::flash_fwd_kernel<
    Flash_fwd_kernel_traits<headdim, kBlockM, kBlockN, warps,...>>``), xFormers/CUTLASS
    memory-efficient (``fmha_cutlassF_<dtype>_aligned_<M>x<N>_rf_smXX``) and cuDNN generated
    (``cudnn_generated_fort_native_sdpa_smXX_flash_fprop_<mma>_<dtype>_knob_N_<tile>``).
    Tile, dtype and architecture are then read from the family's documented name layout."""
    fn = short_kernel_name(name)
    base = fn.split("::")[-1].lower()
    decode = next((decode for fits, decode in _FAMILIES if fits(fn, base)), None)
    return decode(name, fn, base) if decode else {"library": "unknown"}


def _flex(name: str, fn: str, base: str) -> dict:
    return {"library": "FlexAttention (Triton template, torch.compile)", **({"pass": "backward"} if "backward" in fn else {})}


def _cudnn_helper(name: str, fn: str, base: str) -> dict:
    # cuDNN's backward helpers: D = rowsum(dO * O) before the main kernel, dQ from fp32 to 16 bits after it
    return {"library": "cuDNN", "pass": "backward", "role": "preprocess" if "dot_do_o" in base else "postprocess"}


def _flash_backward(name: str, fn: str, base: str) -> dict:
    # FlashAttention-2's backward (Dao 2023, Algorithm 2): D = rowsum(dO * O) first, the dQ/dK/dV loop, then dQ
    # converted from its fp32 accumulator
    role = "preprocess" if "dot_do_o" in base else "postprocess" if "convert_dq" in base else "main"
    return {"library": "FlashAttention-2 (PyTorch's pytorch_flash)", "pass": "backward", "role": role,
            "mma": "mma.sync (SM80 instructions)"}


def _flash_forward(name: str, fn: str, base: str) -> dict:
    info: dict = {"library": "FlashAttention-2 (PyTorch's pytorch_flash)"}
    m = re.search(r"Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+)", name)
    if m:
        info.update(head_dim=int(m.group(1)), tile=f"{m.group(2)}x{m.group(3)}", warps=int(m.group(4)))
    info.update(mma="mma.sync (SM80 instructions)", arch="sm80 code path (runs on sm90 without wgmma/TMA)")
    return _dtype_and_arch(info, re.search(r"cutlass::(bfloat16_t|half_t)", name), base)


def _cutlass(name: str, fn: str, base: str) -> dict:
    info: dict = {"library": "memory-efficient attention (xFormers kernels on CUTLASS)"}
    if base.startswith("fmha_cutlassb"):  # cutlassF: forward, cutlassB: backward
        info["pass"] = "backward"
    info.update(_found(r"aligned_(\d+x\d+)", base, "tile"), mma="mma.sync (SM80 instructions)")
    return _dtype_and_arch(info, re.search(r"_(bf16|f16|f32)_", base), base)


def _cudnn_generated(name: str, fn: str, base: str) -> dict:
    info: dict = {"library": "cuDNN (runtime-generated kernel)"}
    if "_bprop_" in base:  # fprop: forward, bprop: backward
        info["pass"] = "backward"
    info.update(_found(r"knob_\d+_(\d+x\d+x\d+)", base, "tile"), **_found(r"_(wgmma|wmma|hmma|mma)_", base, "mma"))
    return _dtype_and_arch(info, re.search(r"_(bf16|f16|f32)_", base), base)


def _found(pattern: str, text: str, key: str) -> dict:
    """{key: the pattern's first group} where it matches ``text``, else {}."""
    m = re.search(pattern, text)
    return {key: m.group(1)} if m else {}


def _dtype_and_arch(info: dict, dtype, base: str) -> dict:
    """``info`` with the dtype of a name's match ``dtype`` and the architecture its function name states (smXX)."""
    if dtype:
        info["dtype"] = {"bfloat16_t": "bf16", "half_t": "fp16", "f16": "fp16/bf16 (f16 family)"}.get(dtype.group(1), dtype.group(1))
    m = re.search(r"sm_?(\d{2,3})", base)
    if m:
        info["arch"] = f"sm{m.group(1)}"
    return info


#: The fused-attention kernel families by their function name (``fn``, and ``base``: its last part, lower case), in
#: the order they are tried, each with the decoder of its name layout.
_FAMILIES = (
    (lambda fn, base: fn.startswith("triton_tem_fused_flex_attention"), _flex),
    (lambda fn, base: fn.startswith("cudnn::fusion::") and ("dot_do_o" in base or "convert_dq" in base), _cudnn_helper),
    (lambda fn, base: base.startswith("flash_bwd") and fn.startswith("pytorch_flash::"), _flash_backward),
    (lambda fn, base: base.startswith("flash_fwd") and fn.startswith("pytorch_flash::"), _flash_forward),
    (lambda fn, base: base.startswith("fmha_cutlass"), _cutlass),
    (lambda fn, base: base.startswith("cudnn_generated"), _cudnn_generated),
)
