"""Rules on which kernel ran and how it fills the GPU: single fused kernels with their names
decoded (:func:`..kernel_names.decode_kernel_name`), the occupancy of each variant's longest
kernel (the profiler's estimated achieved occupancy in %, beside the theoretical limit of
:func:`..occupancy.theoretical_occupancy`), and the backend each dispatcher (sdpa_auto) dispatched to.
"""

from __future__ import annotations

import math
import re

from attnprof.findings.data import FUSED, PINNED, RunData
from attnprof.findings.kernel_names import decode_kernel_name
from attnprof.findings.occupancy import block_threads, theoretical_occupancy
from attnprof.findings.refs import fmt_ref, finding, ref_kernel, ref_summary
from attnprof.analysis.trace import kernel_label
from attnprof.model.variants import DISPATCHERS

#: The driver-API launch for which the profiler computes no occupancy estimate (it shows 0 %).
DRIVER_LAUNCH = "cuLaunchKernelEx"


def rule_fusion(d: RunData) -> list[dict]:
    """Variants whose forward is a single fused kernel, with the kernel's name decoded."""
    return [_fusion_of(d, v) for v in d.summary["variant"] if d.ok(v) and d.row(v)["kernels_per_forward"] == 1]


def _fusion_of(d: RunData, variant: str) -> dict:
    main = d.main_kernel(variant)
    info = decode_kernel_name(main["kernel"])
    nums = {"kernels_per_forward": ref_summary(d, variant, "kernels_per_forward"),
            "kernel_us": ref_kernel(d, variant, main["kernel"], "mean_us", "us")}
    text = (f"{variant}: one fused kernel per forward, {kernel_label(main['kernel'])} ({fmt_ref(nums['kernel_us'])}); "
            + "; ".join(f"{k}: {v}" for k, v in info.items()) + _ampere_on(d.props_of(main), info))
    headline = f"one fused kernel: {info['library'].split(' (')[0]}" + "".join(
        f", {info[key].split(' ')[0]}" for key in ("arch", "mma") if key in info)
    return finding("fusion", d, [variant], text, nums, [{"kind": "kernel", "name": main["kernel"]}], headline=headline)


def _ampere_on(props: dict, info: dict) -> str:
    """'; built for Ampere, running on this smXY GPU ...' for a kernel built for sm8x where the GPU is known."""
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    if not major or not info.get("arch", "").startswith("sm8"):
        return ""
    return f"; built for Ampere, running on this sm{major}{minor} GPU without Hopper's wgmma/TMA"


def occupancy_not_estimated(est_occupancy_pct, launch_api) -> bool:
    """Whether a kernel's estimated achieved occupancy of 0 % is the profiler's artefact: a launch through the driver
    API (:data:`DRIVER_LAUNCH`, as cuBLAS's nvjet and cuDNN's generated kernels are launched), for which Kineto
    computes no estimate. One rule by launch API, never by the kernel's name."""
    return est_occupancy_pct == 0 and launch_api == DRIVER_LAUNCH


def rule_occupancy(d: RunData) -> list[dict]:
    """Estimated achieved occupancy of each variant's longest kernel, the register-limited
    theoretical value, and 0 % on driver-API launches flagged as a profiler artefact."""
    mains = {v: d.main_kernel(v) for v in d.summary["variant"] if d.ok(v)}
    return [_occupancy_of(d, v, main) for v, main in mains.items() if main is not None]


def _occupancy_of(d: RunData, variant: str, main) -> dict:
    nums = {"est_occupancy": ref_kernel(d, variant, main["kernel"], "est_occupancy_pct", "%"),
            "registers": ref_kernel(d, variant, main["kernel"], "registers_per_thread")}
    evidence = [{"kind": "kernel", "name": main["kernel"]}]
    est = nums["est_occupancy"]["value"]
    if est is None:
        return finding("occupancy", d, [variant], f"{variant}: the trace carries no occupancy estimate for "
                       f"{kernel_label(main['kernel'])} (no launch metadata)", nums, evidence)
    theo = theoretical_occupancy(main["registers_per_thread"], block_threads(main["block"]), main["shared_memory_bytes"],
                                 d.props_of(main))
    text = (f"{variant}: {kernel_label(main['kernel'])} has {fmt_ref(nums['est_occupancy'])} estimated achieved occupancy "
            f"({fmt_ref(nums['registers'])} registers/thread, block {main['block']})")
    text += f"; registers and shared memory allow {theo * 100:.1f} % at most" if theo is not None else ""
    if occupancy_not_estimated(est, main["launch_api"]):
        text += (f"; 0 % is an artefact: the kernel was launched through the driver API ({DRIVER_LAUNCH}), for which "
                 "the profiler's estimate is not computed; it ran for real")
        return finding("occupancy", d, [variant], text, nums, evidence, kind="artefact",
                       headline=f"0 % occupancy shown: {DRIVER_LAUNCH} artefact")
    if variant in FUSED and est <= 25:
        text += "; low by design: fused attention kernels keep a whole tile of Q, K, V and the accumulators in registers and shared memory"
    # both rounded half up, as the profiler rounds
    headline = f"occupancy: estimated {math.floor(est + 0.5)} %" + (f", limit {math.floor(theo * 100 + 0.5)} %" if theo is not None else "")
    return finding("occupancy", d, [variant], text, nums, evidence, headline=headline)


def rule_dispatch(d: RunData) -> list[dict]:
    """Which backend each dispatcher (attnprof.model.variants.DISPATCHERS: sdpa_auto) ran: the pinned variant whose
    kernel set it matches, and the backend-specific aten op it called."""
    return [_dispatch_of(d, v) for v in DISPATCHERS if d.ok(v)]


def _dispatch_of(d: RunData, disp: str) -> dict:
    kernels, ops = set(d.kernels_of(disp)["kernel"]), set(d.ops_of(disp)["op"])
    same = [v for v in PINNED if _runs_the_same(d, v, kernels, ops)]
    backend_ops = sorted(o for o in ops if BACKEND_OP.search(o))
    nums = {"kernels_per_forward": ref_summary(d, disp, "kernels_per_forward")}
    text, headline = _dispatch_words(disp, same, bool(kernels))
    text += f"; backend op {', '.join(backend_ops)}" if backend_ops else ""
    return finding("dispatch", d, [disp] + same[:1], text, nums,
                   [{"kind": "op", "name": o} for o in backend_ops] + [{"kind": "kernel", "name": n} for n in sorted(kernels)],
                   headline=headline)


def _dispatch_words(disp: str, same: list[str], kernels: bool) -> tuple[str, str]:
    """(statement, headline) of where a dispatcher went: the first pinned variant that ran the same, or none."""
    if not same:
        return f"{disp} matches no pinned variant's kernel set", "matches no pinned backend"
    what = "kernels" if kernels else "aten ops (CPU run: no kernels)"
    backend = same[0].removeprefix("sdpa_")
    return f"{disp} dispatched to {backend}: same {what} as {same[0]}", f"dispatched to {backend}"


def _runs_the_same(d: RunData, variant: str, kernels: set, ops: set) -> bool:
    """Whether a pinned ``variant`` ran and launched the same kernels (on a CPU run, with no kernels: the same aten
    ops) as a dispatcher."""
    if not d.ok(variant) or set(d.kernels_of(variant)["kernel"]) != kernels:
        return False
    return bool(kernels) or set(d.ops_of(variant)["op"]) == ops


#: The backend-specific aten ops an SDPA call goes through (the backend a dispatcher chose).
BACKEND_OP = re.compile(r"_scaled_dot_product_\w+|_attention_forward|_flash_attention|_efficient_attention")
