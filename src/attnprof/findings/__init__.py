"""Findings: what each trace shows, computed from the run's tables, and the study's
expectations checked against them.

Every number a finding states is a *reference*: a dict with ``value`` and either the
cell it was read from (``table``/``variant``/``column``, plus ``kernel`` or ``api`` or
``op`` for the per-variant tables) or a ``formula`` over other references (ratio,
difference). ``lookup`` re-reads every reference (``iter_numbers``) from the tables, so a test can
prove that the report states nothing the tables do not hold. The schema of
findings.json is ``workflow/schemas/findings.schema.json``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from collections.abc import Callable

import pandas as pd

from ..fmt import format_number
from ..tables import concat_tables
from ..trace import kernel_label, properties_of, short_kernel_name

FUSED = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn")
PINNED = ("sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn")
LOW_PRECISION = ("bf16", "fp16")
# Kernel classes are matched against kernel_label(name): the kernel's own function name (for
# PyTorch's generic elementwise kernels, the functor they run; for CUTLASS entry points, the
# kernel they instantiate), never against words inside template or parameter lists.
#: FP32 GEMMs: cuBLAS SIMT names (sgemm, f32f32 ... ffma) and Hopper nvjet 'sss' kernels.
FP32_GEMM = re.compile(r"sgemm|gemm_f32f32.*ffma|nvjet_\w*_sss_|_s1688gemm_fp32|cutlass_\w*simt_sgemm", re.I)
GEMM = re.compile(r"gemm|nvjet", re.I)
UPCAST_KERNEL = re.compile(r"direct_copy_kernel|bfloat16_copy_kernel|float16_copy_kernel|copy_kernel", re.I)
MASK_KERNEL = re.compile(r"triu_tril_kernel|FillFunctor<bool>|where_kernel", re.I)
LIBRARY_OF_OP = {"aten::bmm": "cuBLAS", "aten::mm": "cuBLAS", "aten::matmul": "cuBLAS", "aten::addmm": "cuBLAS",
                 "aten::baddbmm": "cuBLAS", "aten::_cudnn_attention_forward": "cuDNN",
                 "aten::_scaled_dot_product_cudnn_attention": "cuDNN"}
DRIVER_LAUNCH = "cuLaunchKernelEx"
#: ops worth naming in a headline when the math path adds them
INTERESTING_OPS = ("aten::_safe_softmax", "aten::isneginf", "aten::all", "aten::tril", "aten::where", "aten::_to_copy")


@dataclass
class RunData:
    """One shape's tables: summary rows and per-variant kernel/launch/op tables plus the
    capture status records (with op input types) and the GPU's properties."""

    shape_key: str
    summary: pd.DataFrame
    kernels: pd.DataFrame
    launches: pd.DataFrame
    ops: pd.DataFrame
    status: dict[str, dict]
    devices: list[dict] = field(default_factory=list)

    def row(self, variant: str) -> pd.Series | None:
        rows = self.summary[self.summary["variant"] == variant]
        return rows.iloc[0] if len(rows) else None

    def ok(self, variant: str) -> bool:
        row = self.row(variant)
        return row is not None and row["status"] == "ok"

    def kernels_of(self, variant: str) -> pd.DataFrame:
        return self.kernels[self.kernels["variant"] == variant]

    def ops_of(self, variant: str) -> pd.DataFrame:
        return self.ops[self.ops["variant"] == variant]

    def launches_of(self, variant: str) -> pd.DataFrame:
        return self.launches[self.launches["variant"] == variant]

    def props_of(self, kernel_row: pd.Series) -> dict:
        """deviceProperties of the GPU this kernel ran on (its ``device`` column); {} if unknown."""
        return properties_of(self.devices, kernel_row.get("device"))

    @property
    def on_gpu(self) -> bool:
        return bool((self.summary["device"] == "cuda").any())


# --- references ---------------------------------------------------------------------------

def _clean(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "item"):
        v = v.item()
    return v


def ref_summary(d: RunData, variant: str, column: str, unit: str = "") -> dict:
    """Reference to summary.csv[variant, column]."""
    row = d.row(variant)
    return {"value": _clean(row[column]) if row is not None else None, "unit": unit, "table": "summary.csv",
            "shape_key": d.shape_key, "variant": variant, "column": column}


def ref_kernel(d: RunData, variant: str, kernel: str, column: str, unit: str = "") -> dict:
    """Reference to the kernel table row of ``kernel`` (full name) in ``variant``."""
    k = d.kernels_of(variant)
    k = k[k["kernel"] == kernel]
    return {"value": _clean(k.iloc[0][column]) if len(k) else None, "unit": unit, "table": "kernels.csv",
            "shape_key": d.shape_key, "variant": variant, "kernel": kernel, "column": column}


def ref_launch(d: RunData, variant: str, api: str) -> dict:
    """Reference to launches.csv calls_per_forward of ``api`` in ``variant`` (0 if absent)."""
    la = d.launches_of(variant)
    la = la[la["api"] == api]
    return {"value": _clean(la.iloc[0]["calls_per_forward"]) if len(la) else 0, "unit": "calls/forward",
            "table": "launches.csv", "shape_key": d.shape_key, "variant": variant, "api": api,
            "column": "calls_per_forward"}


def ref_op(d: RunData, variant: str, op: str) -> dict:
    """Reference to ops.csv calls_per_forward of ``op`` in ``variant`` (0 if absent)."""
    o = d.ops_of(variant)
    o = o[o["op"] == op]
    return {"value": _clean(o.iloc[0]["calls_per_forward"]) if len(o) else 0, "unit": "calls/forward",
            "table": "ops.csv", "shape_key": d.shape_key, "variant": variant, "op": op, "column": "calls_per_forward"}


def derived(formula: str, inputs: list[dict], unit: str = "") -> dict:
    """A number computed from references: formula 'ratio' (a/b), 'sum' or 'difference' (a-b)."""
    vals = [i["value"] for i in inputs]
    if any(v is None for v in vals):
        value = None
    elif formula == "ratio":
        value = vals[0] / vals[1] if vals[1] else None
    elif formula == "sum":
        value = sum(vals)
    elif formula == "difference":
        value = vals[0] - vals[1]
    else:
        raise ValueError(f"unknown formula {formula!r}")
    return {"value": value, "unit": unit, "formula": formula, "inputs": inputs}


def _fmt(ref: dict, digits: int = 3) -> str:
    v = ref["value"]
    if v is None:
        return "n/a"
    if isinstance(v, float):
        text = format_number(v, digits)
    else:
        text = str(v)
    unit = ref.get("unit", "")
    return f"{text} {unit}".strip() if unit not in ("calls/forward",) else text


def finding(rule: str, d: RunData, variants: list[str], statement: str, numbers: dict, evidence: list[dict],
            kind: str = "observation", headline: str = "") -> dict:
    """One finding: ``statement`` is the full sentence, ``headline`` a few words for the
    summary table's findings column (defaults to the statement)."""
    return {"id": f"{rule}/{'+'.join(variants)}/{d.shape_key}", "rule": rule, "shape_key": d.shape_key,
            "variants": variants, "kind": kind, "headline": headline or statement, "statement": statement,
            "numbers": numbers, "evidence": evidence}


# --- rules --------------------------------------------------------------------------------

def rule_status(d: RunData) -> list[dict]:
    """Variants that did not run (or whose trace was incomplete), with the reason; and
    variants that ran but lost a later check (correctness, timing...), naming the check."""
    out = []
    for _, row in d.summary.iterrows():
        if row["status"] != "ok":
            reason = str(row["reason"]) if isinstance(row["reason"], str) else ""
            out.append(finding("status", d, [row["variant"]], f"{row['variant']} did not run here: {row['status']} ({reason[:300]})",
                               {}, [{"kind": "status", "name": row["status"]}],
                               kind="failure" if row["status"] in ("failed", "incomplete_trace") else "observation",
                               headline=f"{row['status']}: {reason[:160]}"))
        elif isinstance(row.get("checks_missing"), str) and row["checks_missing"]:
            out.append(finding("status", d, [row["variant"]], f"{row['variant']} was profiled, but a later check did not run to the end: "
                               f"{row['checks_missing'][:400]}; the trace and its tables stand", {},
                               [{"kind": "status", "name": "checks_missing"}], kind="warning",
                               headline=f"check missing: {row['checks_missing'][:120]}"))
    return out


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
            text = (f"{variant}: {_fmt(nums['memcpy_per_forward'])} x {m['kernel']} per forward, issued by {m['op']} "
                    f"({_fmt(nums['memcpy_us'])} each, {_fmt(nums['memcpy_share'], 2)} of device time)")
            headline = f"hidden {m['kernel'].split(' (')[0]} from {m['op']} ({_fmt(nums['memcpy_share'], 2)} of device time)"
            if variant == "naive" and d.ok("naive_inplace"):
                nums["inplace_memcpy"] = ref_summary(d, "naive_inplace", "memcpy_per_forward", "per forward")
                gone = nums["inplace_memcpy"]["value"] == 0
                text += "; masked_fill_ in naive_inplace " + ("removes it (0 memcpy per forward)" if gone else "does not remove it")
            out.append(finding("hidden_copy", d, [variant], text, nums,
                               [{"kind": "kernel", "name": m["kernel"]}, {"kind": "op", "name": m["op"]}], headline=headline))
    if not out and d.on_gpu and d.ok("naive"):
        out.append(finding("hidden_copy", d, ["naive"], "naive: no memcpy inside the forward",
                           {"memcpy_per_forward": ref_summary(d, "naive", "memcpy_per_forward", "per forward")}, []))
    return out


def matches(k: pd.DataFrame, pattern: re.Pattern) -> pd.Series:
    """Rows of kernel table ``k`` whose kernel_label matches ``pattern`` (see above)."""
    return k["kernel"].map(kernel_label).str.contains(pattern)


def rule_trace_quality(d: RunData) -> list[dict]:
    """Defects of a trace the completeness rule found (attnprof.tables.assess_forwards):
    forwards that lost GPU events or have impossible GPU times, forwards missing from the
    trace, and complete forwards that launched different work (with each group's counts)."""
    out = []
    for _, row in d.summary.iterrows():
        note = row.get("trace_note")
        if row["status"] != "ok" or not isinstance(note, str) or not note:
            continue
        v = row["variant"]
        nums = {c: ref_summary(d, v, c) for c in ("forwards_expected", "forwards_profiled", "forwards_complete", "forwards_timed",
                                                  "bad_time_events")}
        groups = json.loads(row["forward_groups"]) if isinstance(row.get("forward_groups"), str) and row["forward_groups"] else []
        differ = len(groups) > 1
        headline = (f"forwards differ: {' / '.join(str(g['kernels']) for g in groups)} kernels" if differ
                    else f"{_fmt(nums['forwards_complete'])} of {_fmt(nums['forwards_expected'])} forwards complete"
                    if nums["forwards_complete"]["value"] != nums["forwards_expected"]["value"]
                    else f"{_fmt(nums['bad_time_events'])} GPU events with impossible times")
        out.append(finding("trace_quality", d, [v], f"{v}: {note}", nums, [{"kind": "metric", "name": "forwards_complete"}],
                           kind="warning", headline=headline))
    return out


def _input_dtypes(d: RunData, variant: str, op_names: tuple[str, ...]) -> list[str]:
    types = set()
    for op in d.status.get(variant, {}).get("op_input_types", []) or []:
        if op["name"] in op_names:
            types.update(t for t in op["input_types"] if t)
    return sorted(types)


def rule_precision(d: RunData) -> list[dict]:
    """FP32 GEMMs (CUDA-core SIMT or fp32 tensor-op kernels) and upcast copies when the
    inputs are bf16/fp16, from kernel names and the op input types of the record_shapes pass."""
    out = []
    for variant in d.summary["variant"]:
        row = d.row(variant)
        if row is None or row["status"] != "ok" or row["dtype"] not in LOW_PRECISION:
            continue
        k = d.kernels_of(variant)
        gemms = k[matches(k, GEMM)]
        fp32 = gemms[matches(gemms, FP32_GEMM)]
        ups = k[matches(k, UPCAST_KERNEL) & (k["category"] == "kernel")]
        if fp32.empty:
            continue
        nums = {f"fp32_gemm_{i}": ref_kernel(d, variant, g, "calls_per_forward") for i, g in enumerate(fp32["kernel"])}
        nums.update({f"fp32_gemm_{i}_us": ref_kernel(d, variant, g, "mean_us", "us") for i, g in enumerate(fp32["kernel"])})
        nums.update({f"copy_{i}": ref_kernel(d, variant, c, "calls_per_forward") for i, c in enumerate(ups["kernel"])})
        bmm_types = _input_dtypes(d, variant, ("aten::bmm", "aten::matmul", "aten::mm"))
        names = ", ".join(kernel_label(g) for g in fp32["kernel"])
        text = (f"{variant}: inputs are {row['dtype']} but {len(fp32)} GEMM kernel(s) run in FP32 on CUDA cores ({names})"
                f"; {int(sum(ups['calls_per_forward']))} cast/copy kernels per forward convert to and from FP32")
        if bmm_types:
            text += f"; aten::bmm inputs recorded as {', '.join(bmm_types)}"
        ev = [{"kind": "kernel", "name": g} for g in fp32["kernel"]] + [{"kind": "op", "name": "aten::bmm"}]
        out.append(finding("precision", d, [variant], text, nums, ev,
                           headline=f"FP32 GEMMs on CUDA cores ({len(fp32)}) + {int(sum(ups['calls_per_forward']))} cast kernels"))
    for variant in d.summary["variant"]:  # bf16 tensor-core GEMMs elsewhere, for contrast
        k = d.kernels_of(variant)
        g = k[matches(k, GEMM) & ~matches(k, FP32_GEMM)]
        if len(g) and d.row(variant) is not None and d.row(variant)["dtype"] in LOW_PRECISION:
            nums = {f"gemm_{i}": ref_kernel(d, variant, n, "calls_per_forward") for i, n in enumerate(g["kernel"])}
            out.append(finding("precision", d, [variant], f"{variant}: GEMMs stay in {d.row(variant)['dtype']} on tensor cores "
                               f"({', '.join(kernel_label(n) for n in g['kernel'])})", nums, [{"kind": "kernel", "name": n} for n in g["kernel"]],
                               headline=f"{d.row(variant)['dtype']} tensor-core GEMMs"))
    return out


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
    if not (d.ok("sdpa_math") and d.ok("naive_inplace")):
        return []
    base = set(d.ops_of("naive_inplace")["op"])
    extra = [o for o in d.ops_of("sdpa_math")["op"] if o not in base]
    if not extra:
        return []
    nums = {o: ref_op(d, "sdpa_math", o) for o in extra}
    named = [o.removeprefix("aten::") for o in extra if o in INTERESTING_OPS]
    listing = ", ".join(f"{o} x{_fmt(nums[o])}" for o in extra)
    return [finding("extra_ops", d, ["sdpa_math"], f"sdpa_math runs ops that naive_inplace does not: {listing} (per forward)",
                    nums, [{"kind": "op", "name": o} for o in extra],
                    headline=f"{len(extra)} extra ops" + (f", incl. {', '.join(named)}" if named else ""))]


def decode_kernel_name(name: str) -> dict:
    """What a fused attention kernel's name tells: library, dtype, tile sizes, target
    architecture (smXX) and MMA kind. The library is decided by the kernel's own function
    name (:func:`attnprof.trace.short_kernel_name`, before its template and parameter
    lists), never by words inside those lists; a name of no known family gives library
    'unknown'. Known families: FlashAttention-2 in PyTorch (``pytorch_flash::flash_fwd_kernel<
    Flash_fwd_kernel_traits<headdim, kBlockM, kBlockN, warps,...>>``), xFormers/CUTLASS
    memory-efficient (``fmha_cutlassF_<dtype>_aligned_<M>x<N>_rf_smXX``) and cuDNN generated
    (``cudnn_generated_fort_native_sdpa_smXX_flash_fprop_<mma>_<dtype>_knob_N_<tile>``).
    Tile, dtype and architecture are then read from the family's documented name layout."""
    fn = short_kernel_name(name)
    base = fn.split("::")[-1].lower()
    info: dict = {}
    if base.startswith("flash_fwd") and fn.startswith("pytorch_flash::"):
        info["library"] = "FlashAttention-2 (PyTorch's pytorch_flash)"
        m = re.search(r"Flash_fwd_kernel_traits<(\d+), (\d+), (\d+), (\d+)", name)
        if m:
            info.update(head_dim=int(m.group(1)), tile=f"{m.group(2)}x{m.group(3)}", warps=int(m.group(4)))
        info["mma"] = "mma.sync (SM80 instructions)"
        info["arch"] = "sm80 code path (runs on sm90 without wgmma/TMA)"
        m = re.search(r"cutlass::(bfloat16_t|half_t)", name)
    elif base.startswith("fmha_cutlass"):
        info["library"] = "memory-efficient attention (xFormers kernels on CUTLASS)"
        m = re.search(r"aligned_(\d+x\d+)", base)
        if m:
            info["tile"] = m.group(1)
        info["mma"] = "mma.sync (SM80 instructions)"
        m = re.search(r"_(bf16|f16|f32)_", base)
    elif base.startswith("cudnn_generated"):
        info["library"] = "cuDNN (runtime-generated kernel)"
        m = re.search(r"knob_\d+_(\d+x\d+x\d+)", base)
        if m:
            info["tile"] = m.group(1)
        m = re.search(r"_(wgmma|wmma|hmma|mma)_", base)
        if m:
            info["mma"] = m.group(1)
        m = re.search(r"_(bf16|f16|f32)_", base)
    else:
        return {"library": "unknown"}
    if m:
        info["dtype"] = {"bfloat16_t": "bf16", "half_t": "fp16", "f16": "fp16/bf16 (f16 family)"}.get(m.group(1), m.group(1))
    m = re.search(r"sm_?(\d{2,3})", base)
    if m:
        info["arch"] = f"sm{m.group(1)}"
    return info


def rule_fusion(d: RunData) -> list[dict]:
    """Variants whose forward is a single fused kernel, with the kernel's name decoded."""
    out = []
    for variant in d.summary["variant"]:
        row = d.row(variant)
        if row is None or row["status"] != "ok" or row["kernels_per_forward"] != 1:
            continue
        k = d.kernels_of(variant)
        main = k[k["category"] == "kernel"].iloc[0]
        props = d.props_of(main)
        sm = props.get("computeMajor"), props.get("computeMinor")
        info = decode_kernel_name(main["kernel"])
        nums = {"kernels_per_forward": ref_summary(d, variant, "kernels_per_forward"),
                "kernel_us": ref_kernel(d, variant, main["kernel"], "mean_us", "us")}
        parts = [f"{k_}: {v}" for k_, v in info.items()]
        text = f"{variant}: one fused kernel per forward, {kernel_label(main['kernel'])} ({_fmt(nums['kernel_us'])}); " + "; ".join(parts)
        if sm[0] and "arch" in info and info["arch"].startswith("sm8"):
            text += f"; built for Ampere, running on this sm{sm[0]}{sm[1]} GPU without Hopper's wgmma/TMA"
        headline = f"one fused kernel: {info['library'].split(' (')[0]}"
        headline += f", {info['arch'].split(' ')[0]}" if "arch" in info else ""
        headline += f", {info['mma'].split(' ')[0]}" if "mma" in info else ""
        out.append(finding("fusion", d, [variant], text, nums, [{"kind": "kernel", "name": main["kernel"]}], headline=headline))
    return out


def rule_memset(d: RunData) -> list[dict]:
    """Memsets inside the forward and the library whose workspace they clear."""
    out = []
    for variant in d.summary["variant"]:
        k = d.kernels_of(variant)
        for _, m in k[k["category"] == "memset"].iterrows():
            lib = LIBRARY_OF_OP.get(m["op"], m["op"])
            nums = {"memset_per_forward": ref_kernel(d, variant, m["kernel"], "calls_per_forward"),
                    "memset_us": ref_kernel(d, variant, m["kernel"], "mean_us", "us")}
            out.append(finding("memset", d, [variant], f"{variant}: {_fmt(nums['memset_per_forward'])} memset per forward "
                               f"({_fmt(nums['memset_us'])}) issued by {m['op']}, i.e. {lib} clearing its workspace; the study did not count memsets",
                               nums, [{"kind": "kernel", "name": m["kernel"]}, {"kind": "op", "name": m["op"]}],
                               headline=f"{_fmt(nums['memset_per_forward'])} {lib} workspace memset"))
    return out


def theoretical_occupancy(registers_per_thread: float, threads_per_block: int, shared_memory_bytes: float, props: dict) -> float | None:
    """Occupancy limit (fraction of max resident warps) from registers, shared memory and
    warps, as in NVIDIA's CUDA Occupancy Calculator: registers are allocated per warp in
    units of 256; limits from ``props`` (the trace's deviceProperties: regsPerMultiprocessor,
    maxThreadsPerMultiprocessor, sharedMemPerMultiprocessor, warpSize). None if unknown."""
    regs_sm = props.get("regsPerMultiprocessor")
    threads_sm = props.get("maxThreadsPerMultiprocessor")
    warp = props.get("warpSize", 32)
    if not (regs_sm and threads_sm and registers_per_thread and threads_per_block):
        return None
    warps_block = math.ceil(threads_per_block / warp)
    regs_warp = math.ceil(registers_per_thread * warp / 256) * 256
    limits = [regs_sm // (regs_warp * warps_block), (threads_sm // warp) // warps_block, 32]
    smem_sm = props.get("sharedMemPerMultiprocessor")
    if smem_sm and shared_memory_bytes:
        limits.append(int(smem_sm // shared_memory_bytes))
    return min(limits) * warps_block / (threads_sm // warp)


def rule_occupancy(d: RunData) -> list[dict]:
    """Estimated achieved occupancy of each variant's longest kernel, the register-limited
    theoretical value, and 0 % on driver-API launches flagged as a profiler artefact."""
    out = []
    for variant in d.summary["variant"]:
        k = d.kernels_of(variant)
        k = k[k["category"] == "kernel"]
        if k.empty or not d.ok(variant):
            continue
        main = k.iloc[0]  # kernel tables are sorted by device time
        nums = {"est_occupancy": ref_kernel(d, variant, main["kernel"], "est_occupancy_pct", "%"),
                "registers": ref_kernel(d, variant, main["kernel"], "registers_per_thread")}
        if nums["est_occupancy"]["value"] is None:
            out.append(finding("occupancy", d, [variant], f"{variant}: the trace carries no occupancy estimate for {kernel_label(main['kernel'])} "
                               "(no launch metadata)", nums, [{"kind": "kernel", "name": main["kernel"]}]))
            continue
        threads = math.prod(int(x) for x in str(main["block"]).split("x")) if isinstance(main["block"], str) else 0
        theo = theoretical_occupancy(main["registers_per_thread"], threads, main["shared_memory_bytes"], d.props_of(main))
        text = (f"{variant}: {kernel_label(main['kernel'])} has {_fmt(nums['est_occupancy'])} estimated achieved occupancy "
                f"({_fmt(nums['registers'])} registers/thread, block {main['block']})")
        if theo is not None:
            text += f"; registers and shared memory allow {theo * 100:.1f} % at most"
        kind = "observation"
        if nums["est_occupancy"]["value"] == 0 and main["launch_api"] == DRIVER_LAUNCH:
            text += (f"; 0 % is an artefact: the kernel was launched through the driver API ({DRIVER_LAUNCH}), for which "
                     "the profiler's estimate is not computed; it ran for real")
            kind = "artefact"
        elif variant in FUSED and nums["est_occupancy"]["value"] <= 25:
            text += "; low by design: fused attention kernels keep a whole tile of Q, K, V and the accumulators in registers and shared memory"
        headline = (f"0 % occupancy shown: {DRIVER_LAUNCH} artefact" if kind == "artefact"
                    else f"occupancy: estimated {math.floor(nums['est_occupancy']['value'] + 0.5)} %"  # both rounded half up,
                    + (f", limit {math.floor(theo * 100 + 0.5)} %" if theo is not None else ""))  # as the profiler rounds
        out.append(finding("occupancy", d, [variant], text, nums, [{"kind": "kernel", "name": main["kernel"]}], kind=kind, headline=headline))
    return out


def rule_cpu_cost(d: RunData) -> list[dict]:
    """CPU time vs device time per forward, launch APIs per forward, launch-bound variants."""
    out = []
    for variant in d.summary["variant"]:
        if not d.ok(variant) or not d.on_gpu:
            continue
        cpu, dev = ref_summary(d, variant, "cpu_ms_per_forward", "ms"), ref_summary(d, variant, "device_ms_per_forward", "ms")
        nums = {"cpu_ms": cpu, "device_ms": dev, "cpu_over_device": derived("ratio", [cpu, dev])}
        apis = d.launches_of(variant)
        launch_apis = [a for a in apis["api"] if "Launch" in a or "Memcpy" in a or "Memset" in a]
        for a in launch_apis:
            nums[a] = ref_launch(d, variant, a)
        bound = nums["cpu_over_device"]["value"] is not None and nums["cpu_over_device"]["value"] >= 1
        listing = ", ".join(f"{_fmt(nums[a])} {a}" for a in launch_apis)
        text = (f"{variant}: {_fmt(cpu)} CPU vs {_fmt(dev)} device per forward (ratio {_fmt(nums['cpu_over_device'], 2)}); "
                f"{listing} per forward; " + ("launch-bound at this shape: the host takes longer to issue the work than the GPU to run it"
                                              if bound else "device-bound at this shape"))
        headline = f"{'launch' if bound else 'device'}-bound: CPU {_fmt(cpu)} vs device {_fmt(dev)}"
        out.append(finding("cpu_cost", d, [variant], text, nums, [{"kind": "api", "name": a} for a in launch_apis], headline=headline))
    return out


def rule_dispatch(d: RunData) -> list[dict]:
    """Which backend sdpa_auto ran: the pinned variant whose kernel set it matches, and the
    backend-specific aten op it called."""
    if not d.ok("sdpa_auto"):
        return []
    auto = set(d.kernels_of("sdpa_auto")["kernel"])
    auto_ops = set(d.ops_of("sdpa_auto")["op"])
    matches = [v for v in PINNED if d.ok(v) and set(d.kernels_of(v)["kernel"]) == auto and (auto or set(d.ops_of(v)["op"]) == auto_ops)]
    backend_ops = sorted(o for o in auto_ops if re.search(r"_scaled_dot_product_\w+|_attention_forward|_flash_attention|_efficient_attention", o))
    nums = {"kernels_per_forward": ref_summary(d, "sdpa_auto", "kernels_per_forward")}
    if matches:
        what = "kernels" if auto else "aten ops (CPU run: no kernels)"
        text = f"sdpa_auto dispatched to {matches[0].removeprefix('sdpa_')}: same {what} as {matches[0]}"
    else:
        text = "sdpa_auto matches no pinned variant's kernel set"
    if backend_ops:
        text += f"; backend op {', '.join(backend_ops)}"
    headline = f"dispatched to {matches[0].removeprefix('sdpa_')}" if matches else "matches no pinned backend"
    return [finding("dispatch", d, ["sdpa_auto"] + matches[:1], text, nums,
                    [{"kind": "op", "name": o} for o in backend_ops] + [{"kind": "kernel", "name": n} for n in sorted(auto)], headline=headline)]


#: Two timings of one comparison disagree when their ratios differ by more than this factor.
TIMING_DISAGREEMENT = 1.25


def _spread_cols(d: RunData) -> tuple[str, str, str, str]:
    """(median, min, max columns, words) of the per-forward time a run ranks by: trace device
    time on a GPU, the forward range's host time on a CPU."""
    if d.on_gpu:
        return "device_ms_per_forward", "device_ms_min", "device_ms_max", "trace device time per forward"
    return "cpu_ms_per_forward", "cpu_ms_min", "cpu_ms_max", "host time per forward (CPU run)"


def rule_speed(d: RunData) -> list[dict]:
    """Ratios and rankings between variants, stated as findings only where they hold outside
    the spread: per variant the median and the min-max over its profiled forwards (trace
    device time; host time on a CPU run). The math / naive_inplace ratio is set beside the
    same ratio from the independent timing, and flagged (kind 'warning') when the two differ
    by more than :data:`TIMING_DISAGREEMENT` or the per-forward ranges overlap. The fastest
    variant is named only when its slowest forward beats the runner-up's fastest; else the
    finding says the two tie within the spread."""
    out = []
    col, lo, hi, timing = _spread_cols(d)
    if d.ok("sdpa_math") and d.ok("naive_inplace"):
        a, b = ref_summary(d, "sdpa_math", col, "ms"), ref_summary(d, "naive_inplace", col, "ms")
        r = derived("ratio", [a, b])
        ta, tb = ref_summary(d, "sdpa_math", "timed_ms_median", "ms"), ref_summary(d, "naive_inplace", "timed_ms_median", "ms")
        rt = derived("ratio", [ta, tb])
        nums = {"ratio": r, "math": a, "inplace": b, "timed_ratio": rt,
                "math_min": ref_summary(d, "sdpa_math", lo, "ms"), "math_max": ref_summary(d, "sdpa_math", hi, "ms"),
                "inplace_min": ref_summary(d, "naive_inplace", lo, "ms"), "inplace_max": ref_summary(d, "naive_inplace", hi, "ms")}
        text = (f"sdpa_math takes {_fmt(r, 3)}x the time of naive_inplace ({_fmt(a)} vs {_fmt(b)}, {timing}, median; "
                f"ranges {_fmt(nums['math_min'])}-{_fmt(nums['math_max'])} and {_fmt(nums['inplace_min'])}-{_fmt(nums['inplace_max'])}); "
                f"independent timing gives {_fmt(rt, 3)}x ({_fmt(ta)} vs {_fmt(tb)}, median)")
        doubts = []
        if None not in (r["value"], rt["value"]) and rt["value"] > 0 and r["value"] > 0 and \
                max(r["value"] / rt["value"], rt["value"] / r["value"]) > TIMING_DISAGREEMENT:
            doubts.append(f"the trace and the independent timing disagree by more than {TIMING_DISAGREEMENT}x"
                          + ("" if d.on_gpu else " (on a CPU the profiler's own cost is part of the traced time)"))
        if None not in (nums["math_min"]["value"], nums["inplace_max"]["value"], nums["math_max"]["value"], nums["inplace_min"]["value"]) \
                and nums["math_min"]["value"] <= nums["inplace_max"]["value"] and nums["inplace_min"]["value"] <= nums["math_max"]["value"]:
            doubts.append("their per-forward ranges overlap")
        if doubts:
            text += "; not a finding: " + " and ".join(doubts)
        out.append(finding("speed", d, ["sdpa_math", "naive_inplace"], text, nums, [{"kind": "metric", "name": col}],
                           kind="warning" if doubts else "observation",
                           headline=f"{_fmt(r, 3)}x the time of naive_inplace" + (" (not robust)" if doubts else "")))
    if d.on_gpu and d.ok("sdpa_math"):
        out.extend(_breakdown(d, "sdpa_math"))
    ok = sorted((v for v in d.summary["variant"] if d.ok(v) and d.row(v)[col] == d.row(v)[col]), key=lambda v: d.row(v)[col])
    if ok:
        fastest = ok[0]
        nums = {"fastest": ref_summary(d, fastest, col, "ms"), "fastest_max": ref_summary(d, fastest, hi, "ms")}
        text = f"fastest variant: {fastest} ({_fmt(nums['fastest'])}, {timing}, median)"
        headline, kind = "fastest variant", "observation"
        if len(ok) > 1:
            second = ok[1]
            nums.update(runner_up=ref_summary(d, second, col, "ms"), runner_up_min=ref_summary(d, second, lo, "ms"))
            if None not in (nums["fastest_max"]["value"], nums["runner_up_min"]["value"]) and \
                    nums["fastest_max"]["value"] >= nums["runner_up_min"]["value"]:
                text = (f"no clear fastest variant: {fastest} ({_fmt(nums['fastest'])}) and {second} ({_fmt(nums['runner_up'])}) "
                        f"tie within the spread ({fastest}'s slowest forward {_fmt(nums['fastest_max'])} >= {second}'s fastest "
                        f"{_fmt(nums['runner_up_min'])}; {timing})")
                headline, kind = f"ties with {second} for fastest", "warning"
            else:
                text += f"; its slowest forward ({_fmt(nums['fastest_max'])}) beats the fastest of {second} ({_fmt(nums['runner_up_min'])})"
        fused_ok = [v for v in ok if v in FUSED]
        if fused_ok:
            for v in fused_ok:
                nums[v] = ref_summary(d, v, col, "ms")
            text += "; fused backends by median: " + ", ".join(f"{v.removeprefix('sdpa_')} {_fmt(nums[v])}" for v in fused_ok)
        out.append(finding("speed", d, [fastest], text, nums, [{"kind": "metric", "name": col}], kind=kind, headline=headline))
    return out


KERNEL_GROUPS = (("FP32 GEMM", FP32_GEMM), ("GEMM", GEMM), ("mask", MASK_KERNEL), ("cast/copy", UPCAST_KERNEL),
                 ("softmax", re.compile(r"softmax", re.I)),
                 # PyTorch's generic elementwise kernels (kernel_label names the functor: scale, masked_fill...)
                 ("elementwise", re.compile(r"elementwise_kernel")))


#: Kernel classes for plots and breakdowns, in the order they are drawn (kernel_class).
KERNEL_CLASSES = ("fused attention", "GEMM", "FP32 GEMM", "softmax", "mask", "cast/copy", "elementwise", "other kernel", "memcpy",
                  "memset")


def kernel_class(name: str, category: str = "kernel") -> str:
    """The kind of work a GPU event does, one of :data:`KERNEL_CLASSES`: memcpy and memset by
    category; a fused attention kernel by its own function name (:func:`decode_kernel_name`);
    else the first of :data:`KERNEL_GROUPS` whose pattern matches its kernel_label; else
    'other kernel'. Never decided by words inside template arguments."""
    if category in ("memcpy", "memset"):
        return category
    if decode_kernel_name(name)["library"] != "unknown":
        return "fused attention"
    label = kernel_label(name)
    return next((g for g, pat in KERNEL_GROUPS if pat.search(label)), "other kernel")


def _breakdown(d: RunData, variant: str) -> list[dict]:
    """Where a variant's device time goes, by kernel group (FP32 GEMM, GEMM, mask, cast/copy,
    softmax, other); each group's time per forward is the sum of its kernels' us_per_forward
    (device time over the timing-complete forwards divided by their number)."""
    k = d.kernels_of(variant)
    if k.empty:
        return []
    groups: dict[str, list[str]] = {}
    for name in k["kernel"]:
        group = next((g for g, pat in KERNEL_GROUPS if pat.search(kernel_label(name))), "other")
        groups.setdefault(group, []).append(name)
    nums, parts = {}, []
    for group, names in sorted(groups.items(), key=lambda kv: -k[k["kernel"].isin(kv[1])]["us_per_forward"].sum()):
        per_fwd = derived("sum", [ref_kernel(d, variant, nm, "us_per_forward", "us") for nm in names], "us")
        nums[f"{group}_us_per_forward"] = per_fwd
        parts.append(f"{group} {_fmt(per_fwd)} ({len(names)} kernel{'s' if len(names) > 1 else ''})")
    text = f"{variant}: device time per forward by kernel group: " + ", ".join(parts)
    return [finding("speed", d, [variant], text, nums, [{"kind": "kernel", "name": nm} for names in groups.values() for nm in names],
                    headline="time by kernel group: " + ", ".join(p.split(" (")[0] for p in parts[:3]))]


def rule_correctness(d: RunData) -> list[dict]:
    """Relative error against the float64 reference, flagged above the dtype's tolerance."""
    out = []
    for variant in d.summary["variant"]:
        row = d.row(variant)
        if row is None or row["status"] != "ok" or row["rel_error"] != row["rel_error"]:
            continue
        nums = {"rel_error": ref_summary(d, variant, "rel_error")}
        if not bool(row["rel_error_ok"]):
            out.append(finding("correctness", d, [variant], f"{variant}: relative error {_fmt(nums['rel_error'])} against float64 is above the "
                               f"{row['dtype']} tolerance", nums, [{"kind": "metric", "name": "rel_error"}], kind="failure",
                               headline=f"relative error {_fmt(nums['rel_error'])} above tolerance"))
    return out


def rule_fidelity(d: RunData) -> list[dict]:
    """Timing fidelity: trace device time vs the independent timings (CUDA events per call,
    CUDA-graph replay) and their spread. Flags adjacent variants (by trace device time) whose
    order does not hold: the event or graph medians order them the other way, or their
    per-forward trace device times (min-max over profiled forwards) overlap."""
    out, rows = [], []
    col, lo, hi, timing = _spread_cols(d)
    method = "CUDA events" if d.on_gpu else "perf_counter"
    for variant in d.summary["variant"]:
        row = d.row(variant)
        if row is None or row["status"] != "ok" or row[col] != row[col]:
            continue
        trace, timed = ref_summary(d, variant, col, "ms"), ref_summary(d, variant, "timed_ms_median", "ms")
        lo_, hi_ = ref_summary(d, variant, "timed_ms_min", "ms"), ref_summary(d, variant, "timed_ms_max", "ms")
        nums = {"trace_ms": trace, "timed_ms": timed, "timed_over_trace": derived("ratio", [timed, trace]),
                "timed_min_ms": lo_, "timed_max_ms": hi_}
        graph = ref_summary(d, variant, "graph_ms_median", "ms")
        text = f"{variant}: trace {_fmt(trace)}, {method} {_fmt(timed)} (min {_fmt(lo_)}, max {_fmt(hi_)})"
        if graph["value"] is not None:
            nums["graph_ms"], nums["graph_over_trace"] = graph, derived("ratio", [graph, trace])
            text += f", CUDA graph {_fmt(graph)}"
        elif isinstance(row.get("graph_error"), str):
            text += f"; not capturable in a CUDA graph ({row['graph_error'][:120]})"
        text += f"; events / trace = {_fmt(nums['timed_over_trace'], 3)}"
        rows.append((variant, trace["value"], _clean(row[lo]), _clean(row[hi]), timed["value"], graph["value"]))
        out.append(finding("fidelity", d, [variant], text, nums, [{"kind": "metric", "name": "timed_ms_median"}],
                           headline=f"events/trace {_fmt(nums['timed_over_trace'], 3)}"))
    rows.sort(key=lambda r: r[1])
    for a, b in zip(rows, rows[1:]):
        flips = []
        if a[4] is not None and b[4] is not None and a[4] > b[4]:
            flips.append(f"{method} medians order them the other way")
        if a[5] is not None and b[5] is not None and a[5] > b[5]:
            flips.append("CUDA-graph replays order them the other way")
        if a[3] is not None and b[2] is not None and a[3] >= b[2]:
            flips.append("their per-forward trace times overlap (slowest forward of the first >= fastest of the second)")
        if flips:
            nums = {f"{a[0]}_trace_ms": ref_summary(d, a[0], col, "ms"), f"{b[0]}_trace_ms": ref_summary(d, b[0], col, "ms")}
            out.append(finding("fidelity", d, [a[0], b[0]], f"ranking {a[0]} ahead of {b[0]} (trace {_fmt(nums[f'{a[0]}_trace_ms'])} vs "
                               f"{_fmt(nums[f'{b[0]}_trace_ms'])}) does not hold: " + "; ".join(flips), nums,
                               [{"kind": "metric", "name": col}], kind="artefact",
                               headline=f"ranking vs {b[0]} not robust"))
    return out


RULES: tuple[Callable[[RunData], list[dict]], ...] = (
    rule_status, rule_trace_quality, rule_hidden_copy, rule_precision, rule_mask, rule_extra_ops, rule_fusion, rule_memset,
    rule_occupancy, rule_cpu_cost, rule_dispatch, rule_speed, rule_fidelity, rule_correctness,
)


# --- expectations -------------------------------------------------------------------------

def _main_kernel(d: RunData, v: str) -> pd.Series | None:
    k = d.kernels_of(v)
    k = k[k["category"] == "kernel"]
    return k.iloc[0] if len(k) else None


def metric_kernels_plus_memcpy(d, vs):
    a, b = ref_summary(d, vs[0], "kernels_per_forward"), ref_summary(d, vs[0], "memcpy_per_forward")
    return derived("sum", [a, b])


def metric_memcpy(d, vs):
    return ref_summary(d, vs[0], "memcpy_per_forward")


def metric_fp32_gemms(d, vs):
    k = d.kernels_of(vs[0])
    g = k[matches(k, FP32_GEMM)]
    refs = [ref_kernel(d, vs[0], n, "calls_per_forward") for n in g["kernel"]]
    return derived("sum", refs) if refs else {"value": 0, "unit": "", "formula": "sum", "inputs": []}


def metric_mask_kernels(d, vs):
    k = d.kernels_of(vs[0])
    m = k[matches(k, MASK_KERNEL)]
    refs = [ref_kernel(d, vs[0], n, "calls_per_forward") for n in m["kernel"]]
    return derived("sum", refs) if refs else {"value": 0, "unit": "", "formula": "sum", "inputs": []}


def metric_safe_softmax(d, vs):
    return ref_op(d, vs[0], "aten::_safe_softmax")


def metric_device_ratio(d, vs):
    col = "device_ms_per_forward" if d.on_gpu else "cpu_ms_per_forward"
    return derived("ratio", [ref_summary(d, vs[0], col, "ms"), ref_summary(d, vs[1], col, "ms")])


def metric_fastest_fused(d, vs):
    col = "device_ms_per_forward" if d.on_gpu else "cpu_ms_per_forward"
    ok = [v for v in vs if d.ok(v)]
    if not ok:
        return {"value": None}
    best = min(ok, key=lambda v: d.row(v)[col])
    return {"value": best, "unit": "", "formula": "argmin", "inputs": [ref_summary(d, v, col, "ms") for v in ok]}


def metric_main_occupancy(d, vs):
    main = _main_kernel(d, vs[0])
    return ref_kernel(d, vs[0], main["kernel"], "est_occupancy_pct", "%") if main is not None else {"value": None}


def metric_cpu_excess(d, vs):
    others = [ref_summary(d, v, "cpu_ms_per_forward", "ms") for v in vs[1:] if d.ok(v)]
    if not others:
        return {"value": None}
    worst = max(others, key=lambda r: r["value"])
    return derived("difference", [ref_summary(d, vs[0], "cpu_ms_per_forward", "ms"), worst], "ms")


METRICS = {
    "kernels_plus_memcpy": metric_kernels_plus_memcpy,
    "memcpy_per_forward": metric_memcpy,
    "fp32_gemms_per_forward": metric_fp32_gemms,
    "mask_kernels_per_forward": metric_mask_kernels,
    "safe_softmax_per_forward": metric_safe_softmax,
    "device_time_ratio": metric_device_ratio,
    "fastest_fused": metric_fastest_fused,
    "main_kernel_occupancy_pct": metric_main_occupancy,
    "cpu_ms_excess_over_others": metric_cpu_excess,
}


def _compare(obs, exp, how: str, tol: float | None) -> bool:
    if how == "eq":
        return obs == exp
    if how == "approx":
        return abs(obs / exp - 1) <= tol
    if how == "within":
        return abs(obs - exp) <= tol
    if how == "gt":
        return obs > exp
    raise ValueError(f"unknown compare {how!r}")


def check_expectations(d: RunData, expectations: dict, findings: list[dict]) -> list[dict]:
    """Compare each expectation with this shape's data. verdict: 'same', 'different', or
    'not measured' (a variant did not run, or a CPU run for GPU-only claims). Each check
    carries the observed reference and the statements of the findings that explain it."""
    checks = []
    for e in expectations["expectations"]:
        vs = e["variants"]
        check = {k: e.get(k) for k in ("id", "variants", "claim", "metric", "expected", "compare", "tolerance", "explained_by")}
        check.update(shape_key=d.shape_key, source=expectations.get("source"), hardware=expectations.get("hardware"))
        missing = [v for v in vs[:1] if not d.ok(v)]
        if missing or not d.on_gpu:
            why = f"{missing[0]} did not run" if missing else "CPU run: no GPU kernels to compare"
            check.update(observed=None, verdict="not measured", explanation=why)
            checks.append(check)
            continue
        obs = METRICS[e["metric"]](d, vs)
        check["observed"] = obs
        if obs.get("value") is None:
            check.update(verdict="not measured", explanation="no value in this run's tables")
        else:
            same = _compare(obs["value"], e["expected"], e["compare"], e.get("tolerance"))
            check["verdict"] = "same" if same else "different"
            related = [f for f in findings if f["rule"] in e.get("explained_by", []) and set(f["variants"]) & set(vs)]
            check["explanation"] = "; ".join(f"{f['variants'][0]}: {f['headline']}" for f in related[:4])
            check["explained_by_findings"] = [f["id"] for f in related]
        checks.append(check)
    return checks


# --- driver -------------------------------------------------------------------------------

def compute(d: RunData, expectations: dict | None = None) -> dict:
    """All findings for one shape, and the expectation checks when ``expectations`` (the
    parsed config/expectations.yaml) is given and its shape matches this one."""
    found = [f for rule in RULES for f in rule(d)]
    checks = []
    if expectations:
        from ..variants import Shape

        shp = Shape(**expectations["shape"]).key
        if shp == d.shape_key:
            checks = check_expectations(d, expectations, found)
    return {"shape_key": d.shape_key, "findings": found, "expectations": checks}


def lookup(ref: dict, tables: dict[str, pd.DataFrame]):
    """Re-read a reference's value from ``tables`` (file name -> frame), recursing through
    derived numbers. Raises KeyError when the cell does not exist."""
    if "formula" in ref:
        if ref["formula"] == "argmin":
            return ref["value"]
        return derived(ref["formula"], [{"value": lookup(i, tables)} for i in ref["inputs"]])["value"]
    t = tables[ref["table"]]
    sel = (t["variant"] == ref["variant"]) & (t["shape_key"] == ref["shape_key"])
    for key, col in (("kernel", "kernel"), ("api", "api"), ("op", "op")):
        if key in ref:
            sel &= t[col] == ref[key]
    rows = t[sel]
    if rows.empty:
        if ref["table"] in ("launches.csv", "ops.csv"):
            return 0
        raise KeyError(f"no row for {ref}")
    return _clean(rows.iloc[0][ref["column"]])


def iter_numbers(doc: dict):
    """Every number reference in a findings.json document (findings and expectation checks)."""
    for shape in doc["shapes"]:
        for f in shape["findings"]:
            yield from f["numbers"].values()
        for c in shape["expectations"]:
            if c.get("observed"):
                yield c["observed"]


def load_run_data(shape_key: str, summary: pd.DataFrame, kernels: pd.DataFrame, launch_tables: list[pd.DataFrame],
                  op_tables: list[pd.DataFrame], statuses: list[dict], devices: list[dict]) -> RunData:
    """Assemble one shape's RunData from the run's tables (all shapes) and status records;
    ``devices``: the traces' deviceProperties entries (each with its ``id``)."""
    def pick(frames: list[pd.DataFrame]) -> pd.DataFrame:
        df = concat_tables(frames)
        if df.empty:
            df = pd.DataFrame(columns=["variant", "shape_key", "api", "op", "calls_per_forward"])
        return df[df["shape_key"] == shape_key]

    return RunData(
        shape_key=shape_key,
        summary=summary[summary["shape_key"] == shape_key].reset_index(drop=True),
        kernels=kernels[kernels["shape_key"] == shape_key] if len(kernels) else kernels,
        launches=pick(launch_tables),
        ops=pick(op_tables),
        status={s["variant"]: s for s in statuses if s["shape_key"] == shape_key},
        devices=devices,
    )
