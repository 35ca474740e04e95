"""Rules on the work a forward launches beyond the attention itself: hidden memcpys, FP32 GEMMs
and casts on low-precision inputs, the causal mask rebuilt on every call, extra aten ops of the
math path, and library workspace memsets.

Counts are per forward (kernels.csv ``calls_per_forward``, ops.csv), times in µs (kernels.csv
``mean_us``), shares in % of the variant's device time. The hypotheses come from the study
(Hugging Face, "Profiling in PyTorch (Part 3)"); kernel classes from :mod:`.kernel_names`.
"""

from __future__ import annotations

from attnprof.findings.data import LOW_PRECISION, NAIVE, NAIVE_INPLACE, SDPA_MATH, RunData
from attnprof.findings.kernel_names import FP32_GEMM, GEMM, MASK_KERNEL, UPCAST_KERNEL, matches
from attnprof.findings.refs import fmt_ref, finding, ref_kernel, ref_op, ref_summary
from attnprof.analysis.trace import kernel_label

#: aten op that issued a memset -> the library whose workspace it clears.
LIBRARY_OF_OP = {"aten::bmm": "cuBLAS", "aten::mm": "cuBLAS", "aten::matmul": "cuBLAS", "aten::addmm": "cuBLAS",
                 "aten::baddbmm": "cuBLAS", "aten::_cudnn_attention_forward": "cuDNN",
                 "aten::_scaled_dot_product_cudnn_attention": "cuDNN"}
#: ops worth naming in a headline when the math path adds them
INTERESTING_OPS = ("aten::_safe_softmax", "aten::isneginf", "aten::all", "aten::tril", "aten::where", "aten::_to_copy")


def rule_hidden_copy(d: RunData) -> list[dict]:
    """A memcpy inside a forward, the aten op that issued it, and whether the in-place
    variant removed it."""
    out = []
    for variant in d.summary["variant"]:
        k = d.kernels_of(variant)
        for _, m in k[k["category"] == "memcpy"].iterrows():
            nums = {"memcpy_per_forward": ref_summary(d, variant, "memcpy_per_forward", "per forward"),
                    "memcpy_us": ref_kernel(d, variant, m["kernel"], "mean_us", "us"),
                    "memcpy_share": ref_kernel(d, variant, m["kernel"], "share_pct", "%")}
            text = (f"{variant}: {fmt_ref(nums['memcpy_per_forward'])} x {m['kernel']} per forward, issued by {m['op']} "
                    f"({fmt_ref(nums['memcpy_us'])} each, {fmt_ref(nums['memcpy_share'], 2)} of device time)")
            headline = f"hidden {m['kernel'].split(' (')[0]} from {m['op']} ({fmt_ref(nums['memcpy_share'], 2)} of device time)"
            if variant == NAIVE and d.ok(NAIVE_INPLACE):
                nums["inplace_memcpy"] = ref_summary(d, NAIVE_INPLACE, "memcpy_per_forward", "per forward")
                gone = nums["inplace_memcpy"]["value"] == 0
                text += f"; masked_fill_ in {NAIVE_INPLACE} " + ("removes it (0 memcpy per forward)" if gone else "does not remove it")
            out.append(finding("hidden_copy", d, [variant], text, nums,
                               [{"kind": "kernel", "name": m["kernel"]}, {"kind": "op", "name": m["op"]}], headline=headline))
    if not out and d.on_gpu and d.ok(NAIVE):
        out.append(finding("hidden_copy", d, [NAIVE], f"{NAIVE}: no memcpy inside the forward",
                           {"memcpy_per_forward": ref_summary(d, NAIVE, "memcpy_per_forward", "per forward")}, []))
    return out


def _input_dtypes(d: RunData, variant: str, op_names: tuple[str, ...]) -> list[str]:
    """The input dtypes recorded (status.json ``op_input_types``) for ``variant``'s calls of ``op_names``, sorted."""
    ops = d.status.get(variant, {}).get("op_input_types", []) or []
    return sorted({t for op in ops if op["name"] in op_names for t in op["input_types"] if t})


def rule_precision(d: RunData) -> list[dict]:
    """FP32 GEMMs (CUDA-core SIMT or fp32 tensor-op kernels) and upcast copies when the
    inputs are bf16/fp16, from kernel names and the op input types of the record_shapes pass;
    and, for contrast, the variants whose GEMMs stay in the low precision on tensor cores."""
    low = [v for v in d.summary["variant"] if (d.row(v) is not None) and d.row(v)["dtype"] in LOW_PRECISION]
    fp32 = filter(None, (_fp32_gemms(d, v) for v in low if d.ok(v)))
    return [*fp32, *filter(None, (_low_precision_gemms(d, v) for v in low))]


def _fp32_gemms(d: RunData, variant: str) -> dict | None:
    """A low-precision variant's FP32 GEMM kernels and the casts around them; None where it has none."""
    k = d.kernels_of(variant)
    gemms = k[matches(k, GEMM)]
    fp32 = gemms[matches(gemms, FP32_GEMM)]
    if fp32.empty:
        return None
    ups = k[matches(k, UPCAST_KERNEL) & (k["category"] == "kernel")]
    nums = {f"fp32_gemm_{i}": ref_kernel(d, variant, g, "calls_per_forward") for i, g in enumerate(fp32["kernel"])}
    nums.update({f"fp32_gemm_{i}_us": ref_kernel(d, variant, g, "mean_us", "us") for i, g in enumerate(fp32["kernel"])})
    nums.update({f"copy_{i}": ref_kernel(d, variant, c, "calls_per_forward") for i, c in enumerate(ups["kernel"])})
    bmm_types = _input_dtypes(d, variant, ("aten::bmm", "aten::matmul", "aten::mm"))
    names = ", ".join(kernel_label(g) for g in fp32["kernel"])
    casts = int(sum(ups["calls_per_forward"]))
    text = (f"{variant}: inputs are {d.row(variant)['dtype']} but {len(fp32)} GEMM kernel(s) run in FP32 on CUDA cores ({names})"
            f"; {casts} cast/copy kernels per forward convert to and from FP32")
    text += f"; aten::bmm inputs recorded as {', '.join(bmm_types)}" if bmm_types else ""
    ev = [{"kind": "kernel", "name": g} for g in fp32["kernel"]] + [{"kind": "op", "name": "aten::bmm"}]
    return finding("precision", d, [variant], text, nums, ev, headline=f"FP32 GEMMs on CUDA cores ({len(fp32)}) + {casts} cast kernels")


def _low_precision_gemms(d: RunData, variant: str) -> dict | None:
    """A low-precision variant's GEMMs that stay in its dtype on tensor cores; None where it has none."""
    k = d.kernels_of(variant)
    g = k[matches(k, GEMM) & ~matches(k, FP32_GEMM)]
    if not len(g):
        return None
    dtype = d.row(variant)["dtype"]
    nums = {f"gemm_{i}": ref_kernel(d, variant, n, "calls_per_forward") for i, n in enumerate(g["kernel"])}
    return finding("precision", d, [variant], f"{variant}: GEMMs stay in {dtype} on tensor cores "
                   f"({', '.join(kernel_label(n) for n in g['kernel'])})", nums, [{"kind": "kernel", "name": n} for n in g["kernel"]],
                   headline=f"{dtype} tensor-core GEMMs")


def rule_mask(d: RunData) -> list[dict]:
    """Causal-mask construction inside the forward (triu/tril, bool fill, where kernels)."""
    out = []
    for variant in d.summary["variant"]:
        k = d.kernels_of(variant)
        m = k[matches(k, MASK_KERNEL)]
        if m.empty:
            continue
        nums = {f"mask_kernel_{i}": ref_kernel(d, variant, n, "calls_per_forward") for i, n in enumerate(m["kernel"])}
        total = int(m["calls_per_forward"].sum())
        ops = sorted(set(m["op"].dropna()))
        out.append(finding("mask", d, [variant], f"{variant}: the causal mask is built inside every forward: {total} mask kernel launches "
                           f"per forward ({', '.join(kernel_label(n) for n in m['kernel'])}) from {', '.join(ops)}",
                           nums, [{"kind": "kernel", "name": n} for n in m["kernel"]] + [{"kind": "op", "name": o} for o in ops],
                           headline=f"causal mask rebuilt every call ({total} kernels)"))
    return out


def rule_extra_ops(d: RunData) -> list[dict]:
    """aten ops the math path runs that the naive in-place path does not (e.g. _safe_softmax)."""
    extra = _extra_ops(d)
    if not extra:
        return []
    nums = {o: ref_op(d, SDPA_MATH, o) for o in extra}
    named = [o.removeprefix("aten::") for o in extra if o in INTERESTING_OPS]
    listing = ", ".join(f"{o} x{fmt_ref(nums[o])}" for o in extra)
    return [finding("extra_ops", d, [SDPA_MATH], f"{SDPA_MATH} runs ops that {NAIVE_INPLACE} does not: {listing} (per forward)",
                    nums, [{"kind": "op", "name": o} for o in extra],
                    headline=f"{len(extra)} extra ops" + (f", incl. {', '.join(named)}" if named else ""))]


def _extra_ops(d: RunData) -> list[str]:
    """The ops of sdpa_math's forward that naive_inplace's does not run; [] unless both ran."""
    if not (d.ok(SDPA_MATH) and d.ok(NAIVE_INPLACE)):
        return []
    base = set(d.ops_of(NAIVE_INPLACE)["op"])
    return [o for o in d.ops_of(SDPA_MATH)["op"] if o not in base]


def rule_memset(d: RunData) -> list[dict]:
    """Memsets inside the forward and the library whose workspace they clear."""
    out = []
    for variant in d.summary["variant"]:
        k = d.kernels_of(variant)
        for _, m in k[k["category"] == "memset"].iterrows():
            lib = LIBRARY_OF_OP.get(m["op"], m["op"])
            nums = {"memset_per_forward": ref_kernel(d, variant, m["kernel"], "calls_per_forward"),
                    "memset_us": ref_kernel(d, variant, m["kernel"], "mean_us", "us")}
            out.append(finding("memset", d, [variant], f"{variant}: {fmt_ref(nums['memset_per_forward'])} memset per forward "
                               f"({fmt_ref(nums['memset_us'])}) issued by {m['op']}, i.e. {lib} clearing its workspace; the study did not count memsets",
                               nums, [{"kind": "kernel", "name": m["kernel"]}, {"kind": "op", "name": m["op"]}],
                               headline=f"{fmt_ref(nums['memset_per_forward'])} {lib} workspace memset"))
    return out
