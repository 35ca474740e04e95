"""Rules on what the study did not profile: torch.compile variants (compile time kept apart,
which kernels inductor fused) and the backward pass (config ``passes``: which kernels each
backend's backward runs, the extra pre- and post-processing kernels, their share of time).

Units: seconds for the first call (status.json ``compile.first_call_s`` via summary.csv), ms per
forward or backward (summary.csv), µs per backward and % of backward device time
(kernels_backward.csv). Sources: inductor names its Triton kernels ``triton_<kind>_fused_<ops>_<n>``
(torch/_inductor/codegen/triton.py); FlashAttention-2's backward computes D = rowsum(dO * O) in a
preprocessing kernel before the dQ/dK/dV loop and converts dQ from its fp32 accumulator after it
(Dao 2023, "FlashAttention-2", Algorithm 2); cuDNN's backward has the same helpers
(``cudnn::fusion::compute_dot_do_o_specialized``, ``convert_dq_to_16bits``).
"""

from __future__ import annotations

from attnprof.analysis.trace import kernel_label
from attnprof.model.variants import COMPILED, uncompiled_of
from attnprof.findings.data import RunData
from attnprof.findings.kernel_names import TRITON_KERNEL, decode_kernel_name, fused_ops
from attnprof.findings.refs import KERNELS_BACKWARD, clean, derived, finding, fmt_ref, ref_kernel, ref_summary


#: Backward kernels named one by one in a finding, besides the main one (the rest are summed).
MAX_NAMED = 4


def rule_compile(d: RunData) -> list[dict]:
    """Each torch.compile variant: its first call's time and inductor's cache verdict (never part
    of the steady-state numbers), its kernels per forward against the uncompiled naive path's,
    and the ops each of its Triton kernels fused."""
    compiled = [v for v in d.summary["variant"] if v in COMPILED and d.ok(v)]
    return [_compile_of(d, v) for v in compiled if clean(d.row(v).get("compile_first_call_s")) is not None]


def _compile_of(d: RunData, variant: str) -> dict:
    row = d.row(variant)
    first = ref_summary(d, variant, "compile_first_call_s", "s")
    cache = clean(row.get("compile_cache")) or "not recorded"
    nums = {"first_call_s": first}
    text = (f"{variant}: the first call compiled in {fmt_ref(first)} (inductor's FX-graph cache: {cache}); "
            "that call is kept out of every steady-state number") + _compiled_kernels(d, variant, nums)
    k = d.kernels_of(variant)
    triton = k[(k["category"] == "kernel") & k["kernel"].map(lambda n: bool(TRITON_KERNEL.search(kernel_label(n))))]["kernel"]
    for name in triton:
        # a template kernel (tem: FlexAttention) is named after its template, not after fused ops
        ops = [] if kernel_label(name).startswith("triton_tem_") else fused_ops(kernel_label(name))
        nums[f"share:{name}"] = ref_kernel(d, variant, name, "share_pct", "%")
        text += f"; {kernel_label(name)} ({fmt_ref(nums[f'share:{name}'])} of device time)" + (f" fuses {', '.join(ops)}" if ops else "")
    return finding("compile", d, [variant], text, nums, [{"kind": "kernel", "name": n} for n in triton],
                   headline=f"compiled in {fmt_ref(first)} (cache {cache})")


def _compiled_kernels(d: RunData, variant: str, nums: dict) -> str:
    """'; n kernels per forward against m for the uncompiled variant' of a compiled variant on a GPU (the registry's
    Variant.uncompiled: FlexAttention has none); its references added to ``nums``."""
    if not d.on_gpu or clean(d.row(variant).get("kernels_per_forward")) is None:
        return ""
    nums["kernels_per_forward"] = ref_summary(d, variant, "kernels_per_forward")
    text = f"; {fmt_ref(nums['kernels_per_forward'])} kernels per forward"
    base = uncompiled_of(variant)
    if base and d.ok(base):
        nums[f"{base}_kernels_per_forward"] = ref_summary(d, base, "kernels_per_forward")
        text += f" against {fmt_ref(nums[f'{base}_kernels_per_forward'])} for the uncompiled {base}"
    return text


def rule_backward(d: RunData) -> list[dict]:
    """Each variant whose backward was profiled: kernels per backward, backward over forward device
    time, the main backward kernel decoded and the kernels besides it (pre- and post-processing,
    copies) with their share of backward device time."""
    if "kernels_per_backward" not in d.summary:
        return []
    return [_backward_of(d, v) for v in d.summary["variant"] if d.ok(v) and d.row(v).get("backward_status") == "ok"]


def _backward_of(d: RunData, variant: str) -> dict:
    prefix, what = ("device_ms", "device") if d.on_gpu else ("cpu_ms", "host")
    bwd, fwd = ref_summary(d, variant, f"{prefix}_per_backward", "ms"), ref_summary(d, variant, f"{prefix}_per_forward", "ms")
    nums = {"ms_per_backward": bwd, "backward_over_forward": derived("ratio", [bwd, fwd])}
    text = f"{variant} backward: {fmt_ref(bwd)} {what} time per backward, {fmt_ref(nums['backward_over_forward'])}x its forward"
    headline = f"backward {fmt_ref(nums['backward_over_forward'])}x forward"
    if d.on_gpu and clean(d.row(variant).get("kernels_per_backward")) is not None:
        nums["kernels_per_backward"] = ref_summary(d, variant, "kernels_per_backward")
        text += f"; {fmt_ref(nums['kernels_per_backward'])} kernels per backward"
        headline += f", {fmt_ref(nums['kernels_per_backward'])} kernels"
    words, evidence = _backward_kernels(d, variant, nums)
    return finding("backward", d, [variant], text + words, nums, evidence, headline=headline)


def _backward_kernels(d: RunData, variant: str, nums: dict) -> tuple[str, list[dict]]:
    """The main backward kernel decoded, and the kernels besides it with their share of backward device time (the
    first :data:`MAX_NAMED` named, the rest summed), as words and evidence; their references added to ``nums``."""
    k = d.kernels_backward_of(variant)
    kernels = k[k["category"] == "kernel"].sort_values("share_pct", ascending=False)
    if not len(kernels):
        return "", []
    main = kernels.iloc[0]
    info = decode_kernel_name(main["kernel"])
    nums["main_share"] = ref_kernel(d, variant, main["kernel"], "share_pct", "%", KERNELS_BACKWARD)
    lib = f", {info['library']}" if info["library"] != "unknown" else ""
    text = f"; main kernel {kernel_label(main['kernel'])}{lib} ({fmt_ref(nums['main_share'])})"
    others = k[k["kernel"] != main["kernel"]].sort_values("share_pct", ascending=False)["kernel"]
    shares = [ref_kernel(d, variant, name, "share_pct", "%", KERNELS_BACKWARD) for name in others]
    nums.update({f"share:{name}": share for name, share in zip(others, shares)})
    named = [f"{kernel_label(name)}{_role(name)} {fmt_ref(share)}" for name, share in zip(others[:MAX_NAMED], shares)]
    text += "; besides it " + ", ".join(named) if named else ""
    rest = shares[MAX_NAMED:]
    if rest:
        nums["rest_share"] = derived("sum", rest, "%")
        text += f" and {len(rest)} more ({fmt_ref(nums['rest_share'])} together)"
    return text, [{"kind": "kernel", "name": main["kernel"]}]


def _role(kernel: str) -> str:
    """' (role)' of a backward helper kernel (decode_kernel_name's role: preprocessing, dQ conversion...); ''."""
    role = decode_kernel_name(kernel).get("role")
    return f" ({role})" if role else ""
