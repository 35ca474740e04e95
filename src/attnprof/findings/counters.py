"""Findings that set the trace's occupancy estimate beside what Nsight Compute measured.

Inputs per (shape, variant): the counters table of :func:`attnprof.measure.counters.measure`
(``results/<run>/counters/<shape>/<variant>.csv`` and its ``.json`` status), the capture's kernel
table (``results/<run>/tables/<shape>/<variant>/kernels.csv``) and the trace's device properties
(``.../device.json``). ncu prints kernel names shortened (``flash_fwd_kernel<...>`` for the
trace's ``pytorch_flash::flash_fwd_kernel<...>``, ``at::`` for ``at::native::``, ``<unnamed>`` for
``(anonymous namespace)``), so a counters row is matched to a trace kernel by the last component of
its function name (:func:`base_name`), grid and block; failing that by that name alone. Kept apart from the findings package (which the lead wires); each finding is a plain dict.

Per kernel it states: the profiler's ``est. achieved occupancy %`` (``est_occupancy_pct`` in the
kernel table; 0 for kernels launched with ``cuLaunchKernelEx``, where Kineto does not compute it),
the limit the launch configuration allows (registers, shared memory, warps;
:func:`attnprof.findings.theoretical_occupancy` over the trace's device properties), and ncu's
theoretical occupancy, achieved occupancy, tensor-pipe, SM and DRAM throughput (all %).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnprof.findings.occupancy import block_threads, theoretical_occupancy
from attnprof.findings.rules.kernels import DRIVER_LAUNCH
from attnprof.analysis.records import RecordError, load_record
from attnprof.analysis.trace import kernel_label, properties_of, short_kernel_name

#: counters columns carried into each finding (all %, ncu; :data:`attnprof.measure.counters.METRICS`)
MEASURED = ("theoretical_occupancy_pct", "achieved_occupancy_pct", "tensor_pipe_pct", "sm_throughput_pct",
            "dram_throughput_pct", "memory_throughput_pct", "duration_ns", "tensor_gmma_inst", "tensor_hmma_inst")


def _num(v):
    return None if pd.isna(v) else float(v)


def _launch_limit(row: pd.Series, devices: list[dict]) -> float | None:
    """Occupancy (%) the trace's launch configuration allows: theoretical_occupancy of the
    findings (registers, shared memory, warps) with the device's properties; None if unknown."""
    theo = theoretical_occupancy(row.get("registers_per_thread"), block_threads(row.get("block")),
                                 row.get("shared_memory_bytes"), properties_of(devices, row.get("device")))
    return None if theo is None else round(theo * 100, 2)


def base_name(name: str) -> str:
    """The kernel's function name without namespaces, templates and parameters, as both the
    trace and ncu spell it: ``flash_fwd_kernel`` for ``void pytorch_flash::flash_fwd_kernel<...>(...)``
    (trace) and ``void flash_fwd_kernel<...>(...)`` (ncu)."""
    name = str(name).replace("<unnamed>", "(anonymous namespace)")
    return short_kernel_name(name).split("::")[-1].strip()


def match_kernels(counters: pd.DataFrame, kernels: pd.DataFrame) -> list[tuple[pd.Series, pd.Series | None]]:
    """Pair each counters row with its trace kernel row (category kernel): same :func:`base_name`,
    grid and block; else the same base name; else None. Each trace row is used once, first come
    first served."""
    trace = kernels[kernels["category"] == "kernel"] if "category" in kernels else kernels
    labels = trace["kernel"].map(base_name) if len(trace) else pd.Series(dtype=str)
    used: set = set()
    pairs = []
    for _, c in counters.iterrows():
        label = base_name(c["kernel"])
        same = trace[(labels == label) & ~trace.index.isin(used)]
        exact = same[(same["grid"].astype(str) == str(c.get("grid"))) & (same["block"].astype(str) == str(c.get("block")))]
        pick = exact if len(exact) else same
        used.update(pick.index[:1])
        pairs.append((c, pick.iloc[0] if len(pick) else None))
    return pairs


def counter_findings(variant: str, counters: pd.DataFrame, kernels: pd.DataFrame, devices: list[dict] | None = None,
                     status: dict | None = None) -> list[dict]:
    """One finding dict per measured kernel of ``variant`` (module docstring), or one saying why
    nothing was measured when ``status`` is not ``ok``. Keys: rule ('counters'), variant, kernel,
    label, launch_api, trace_est_occupancy_pct, launch_limit_pct, the :data:`MEASURED` columns,
    artefact (the trace shows 0 % for a driver-API launch that ncu saw run with warps active),
    text."""
    if status is not None and status.get("status") != "ok":
        return [{"rule": "counters", "variant": variant, "status": status.get("status"),
                 "text": f"{variant}: no hardware counters ({status.get('status')}: {status.get('reason')})"}]
    return [_counter_finding(variant, c, t, devices or []) for c, t in match_kernels(counters, kernels)]


def _counter_finding(variant: str, c, t, devices: list[dict]) -> dict:
    """One measured kernel ``c`` (ncu's row) beside its trace row ``t`` (None: not in the trace's kernel table)."""
    trace = {"launch_api": None, "trace_est_occupancy_pct": None, "launch_limit_pct": None} if t is None else {
        "launch_api": t.get("launch_api"), "trace_est_occupancy_pct": _num(t.get("est_occupancy_pct")),
        "launch_limit_pct": _launch_limit(t, devices)}
    f = {"rule": "counters", "variant": variant, "kernel": str(c["kernel"]),
         "label": kernel_label(str(c["kernel"] if t is None else t["kernel"])).lstrip(":"),
         "grid": c.get("grid"), "block": c.get("block"), **trace, **{m: _num(c.get(m)) for m in MEASURED}}
    # the trace says 0 % but ncu saw warps active: the trace's estimate is wrong here. Seen for
    # cuLaunchKernelEx launches (cuDNN, cuBLAS nvjet; Kineto computes no estimate for them) and
    # for FlexAttention's Triton kernel launched with cuLaunchKernel (H200, torch 2.11)
    f["artefact"] = bool(f["trace_est_occupancy_pct"] == 0 and (f["achieved_occupancy_pct"] or 0) > 0)
    f["text"] = _text(f, t is None)
    return f


def _pct(v) -> str:
    return "–" if v is None else f"{v:.1f} %"


def _tensor_path(f: dict) -> str:
    """' (wgmma)' or ' (HMMA class: ...)' for a kernel whose tensor pipe is busy (5 % or more),
    from ncu's instruction counts; '' otherwise (elementwise kernels issue a few HFMA2.MMA)."""
    if (f.get("tensor_pipe_pct") or 0) < 5:
        return ""
    if (f.get("tensor_gmma_inst") or 0) > 0:
        return " (wgmma)"
    return " (HMMA class: mma.sync or HFMA2.MMA)" if (f.get("tensor_hmma_inst") or 0) > 0 else ""


def _text(f: dict, unmatched: bool) -> str:
    head = f"{f['variant']}: {f['label']}"
    if unmatched:
        trace = "not in the trace's kernel table"
    else:
        trace = f"trace estimate {_pct(f['trace_est_occupancy_pct'])} ({f['launch_api']}), launch-config limit {_pct(f['launch_limit_pct'])}"
    text = (f"{head}: {trace}; ncu theoretical {_pct(f['theoretical_occupancy_pct'])}, achieved "
            f"{_pct(f['achieved_occupancy_pct'])}; tensor pipe {_pct(f['tensor_pipe_pct'])}"
            + _tensor_path(f)
            + f", SM {_pct(f['sm_throughput_pct'])}, DRAM {_pct(f['dram_throughput_pct'])}")
    if f["artefact"]:
        why = (f" of the {DRIVER_LAUNCH} launch (Kineto computes no estimate there)" if f["launch_api"] == DRIVER_LAUNCH
               else f" (launched with {f['launch_api']})")
        text += f"; the trace's 0 % is an artefact{why}: the kernel ran at {_pct(f['achieved_occupancy_pct'])} achieved occupancy"
    return text


def load_counter_findings(status_paths: list, kernels: pd.DataFrame, devices: list[dict],
                          variants: list[str]) -> dict[str, list[dict]]:
    """Shape key -> :func:`counter_findings` of each variant measured there, in the order of
    ``variants``. ``status_paths`` are the counters status files of a result set
    (``counters/<shape>/<variant>.json``, each beside its ``.csv``); ``kernels`` is the result set's
    kernel table (kernels.csv: columns variant, shape_key, kernel, category, grid, block, ...; a
    variant without rows there gets the measured values alone); ``devices`` the traces'
    deviceProperties (the tables' device.json files). Raises attnprof.analysis.records.RecordError (a
    ValueError) naming the file for a status file that cannot be read as a record."""
    rank = {v: i for i, v in enumerate(variants)}
    paths = sorted((Path(p) for p in status_paths), key=lambda p: (p.parent.name, rank.get(p.stem, len(rank)), p.stem))
    out: dict[str, list[dict]] = {}
    for path in paths:
        shape, variant = path.parent.name, path.stem
        try:
            status = load_record(path)  # the project's reader: empty, truncated, not JSON, not an object
        except RecordError as err:
            raise RecordError(f"{err}; rerun the counters: snakemake --forcerun measure_counters") from None
        table = path.with_suffix(".csv")
        counters = (pd.read_csv(table, dtype={"grid": str, "block": str}) if table.exists() and table.stat().st_size
                    else pd.DataFrame(columns=["kernel", "grid", "block"]))
        mine = (kernels[(kernels["variant"] == variant) & (kernels["shape_key"] == shape)]
                if {"variant", "shape_key"} <= set(kernels.columns) else kernels.iloc[:0])
        mine = mine.astype({c: str for c in ("grid", "block") if c in mine})
        out.setdefault(shape, []).extend(counter_findings(variant, counters, mine.reset_index(drop=True), devices, status))
    return out
