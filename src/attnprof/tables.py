"""Kernel, forward and summary tables built from one capture's trace and status.

All times are microseconds in the per-variant tables and milliseconds in summary.csv
(columns documented in docs/results.md). Only forwards inside the profiler's *active*
steps appear in the trace, and each statistic is computed per forward first.
"""

from __future__ import annotations

import pandas as pd

from .trace import cpu_ops, events_frame, forward_ranges, gpu_events, kernel_label, launches

KERNEL_COLUMNS = [
    "variant", "shape_key", "kernel", "label", "category", "calls_per_forward", "calls_min", "calls_max",
    "total_us", "mean_us", "share_pct", "grid", "block", "registers_per_thread", "shared_memory_bytes",
    "est_occupancy_pct", "launch_api", "op",
]
FORWARD_COLUMNS = [
    "variant", "shape_key", "forward", "cpu_us", "device_us", "device_span_us", "kernels", "memcpy", "memset",
    "launch_calls", "unattributed_gpu_events",
]
SUMMARY_COLUMNS = [
    "variant", "shape_key", "status", "batch", "heads", "seq_len", "head_dim", "dtype", "causal", "device",
    "kernels_per_forward", "memcpy_per_forward", "memset_per_forward",
    "device_ms_per_forward", "device_ms_min", "device_ms_max", "cpu_ms_per_forward", "cpu_ms_min", "cpu_ms_max",
    "timed_ms_median", "timed_ms_min", "timed_ms_max", "timing_method",
    "graph_ms_median", "graph_ms_min", "graph_ms_max", "graph_error",
    "forwards_profiled", "rel_error", "rel_error_ok", "peak_memory_mb",
    "forward_gflop", "flop_per_byte", "tflops", "tflops_graph", "oom_bytes", "reason",
]
LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync")


def concat_tables(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-capture tables, skipping empty ones (a capture that did not run); an
    all-empty list gives the first (empty) frame, keeping its columns."""
    kept = [f for f in frames if not f.empty]
    return pd.concat(kept, ignore_index=True) if kept else (frames[0] if frames else pd.DataFrame())


def analyse_trace(trace: dict, range_name: str) -> dict[str, pd.DataFrame]:
    """Parse a trace once; return frames ``ranges``, ``gpu``, ``api``, ``ops`` (see
    :mod:`attnprof.trace`). Raises TraceError only through the caller's load."""
    events = events_frame(trace)
    ranges = forward_ranges(events, range_name)
    return {
        "ranges": ranges,
        "gpu": gpu_events(events, ranges),
        "api": launches(events, ranges),
        "ops": cpu_ops(events, ranges),
    }


def kernel_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """One row per distinct GPU event name (kernel, memcpy or memset) launched inside the
    forwards. calls_per_forward is the median over forwards of per-forward counts
    (calls_min/max show whether forwards differ); total_us sums device time over all
    profiled forwards, mean_us is per call; share_pct is of all device time in forwards.
    Launch metadata is the first call's (constant for a given kernel name and shape)."""
    gpu, n = frames["gpu"], len(frames["ranges"])
    gpu = gpu[gpu["forward"] >= 0]
    if gpu.empty or n == 0:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    per_fwd = gpu.groupby(["name", "forward"]).size().unstack(fill_value=0).reindex(columns=range(n), fill_value=0)
    first = gpu.drop_duplicates("name").set_index("name")
    agg = gpu.groupby("name")["dur"].agg(total_us="sum", mean_us="mean")
    table = pd.DataFrame({
        "variant": variant,
        "shape_key": shape_key,
        "kernel": agg.index,
        "label": [kernel_label(k) for k in agg.index],
        "category": first.loc[agg.index, "category"].values,
        "calls_per_forward": per_fwd.loc[agg.index].median(axis=1).values,
        "calls_min": per_fwd.loc[agg.index].min(axis=1).values,
        "calls_max": per_fwd.loc[agg.index].max(axis=1).values,
        "total_us": agg["total_us"].values,
        "mean_us": agg["mean_us"].values,
    })
    table["share_pct"] = 100.0 * table["total_us"] / table["total_us"].sum()
    for col in ("grid", "block", "registers_per_thread", "shared_memory_bytes", "est_occupancy_pct", "launch_api", "op"):
        table[col] = first.loc[agg.index, col].values
    return table.sort_values("total_us", ascending=False)[KERNEL_COLUMNS].reset_index(drop=True)


def forward_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """One row per profiled forward: cpu_us (host time of the forward's range), device_us
    (sum of its kernel+memcpy+memset durations), device_span_us (first start to last end
    of its GPU events), counts per category, launch_calls (API calls that enqueue work),
    and unattributed_gpu_events (trace-wide GPU events outside every forward, same value
    on every row, normally 0)."""
    ranges, gpu, api = frames["ranges"], frames["gpu"], frames["api"]
    if ranges.empty:
        return pd.DataFrame(columns=FORWARD_COLUMNS)
    inside = gpu[gpu["forward"] >= 0]
    by_fwd = inside.groupby("forward")
    counts = inside.groupby(["forward", "category"]).size().unstack(fill_value=0)
    table = pd.DataFrame({"variant": variant, "shape_key": shape_key, "forward": ranges["forward"], "cpu_us": ranges["cpu_us"]})
    table["device_us"] = table["forward"].map(by_fwd["dur"].sum()).fillna(0.0)
    span = by_fwd["end"].max() - by_fwd["ts"].min()
    table["device_span_us"] = table["forward"].map(span).fillna(0.0)
    for cat in ("kernel", "memcpy", "memset"):
        col = "kernels" if cat == "kernel" else cat
        table[col] = table["forward"].map(counts[cat] if cat in counts else {}).fillna(0).astype(int)
    launch = api[(api["forward"] >= 0) & api["name"].isin(LAUNCH_APIS)]
    table["launch_calls"] = table["forward"].map(launch.groupby("forward").size()).fillna(0).astype(int)
    table["unattributed_gpu_events"] = int((gpu["forward"] < 0).sum())
    return table[FORWARD_COLUMNS]


def launch_api_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """CUDA runtime/driver API calls per forward by name (median over forwards) and their
    mean host duration in us."""
    api, n = frames["api"], len(frames["ranges"])
    api = api[api["forward"] >= 0]
    if api.empty or n == 0:
        return pd.DataFrame(columns=["variant", "shape_key", "api", "calls_per_forward", "mean_us"])
    per_fwd = api.groupby(["name", "forward"]).size().unstack(fill_value=0).reindex(columns=range(n), fill_value=0)
    return pd.DataFrame({
        "variant": variant, "shape_key": shape_key, "api": per_fwd.index,
        "calls_per_forward": per_fwd.median(axis=1).values,
        "mean_us": api.groupby("name")["dur"].mean().loc[per_fwd.index].values,
    }).reset_index(drop=True)


def op_table(frames: dict, variant: str, shape_key: str) -> pd.DataFrame:
    """aten ops per forward (median count over forwards, every nesting level) and their
    mean inclusive host duration in us, in order of first appearance in a forward."""
    ops, n = frames["ops"], len(frames["ranges"])
    ops = ops[ops["forward"] >= 0]
    if ops.empty or n == 0:
        return pd.DataFrame(columns=["variant", "shape_key", "op", "calls_per_forward", "mean_us"])
    per_fwd = ops.groupby(["name", "forward"]).size().unstack(fill_value=0).reindex(columns=range(n), fill_value=0)
    order = ops[ops["forward"] == ops["forward"].min()].sort_values("ts")["name"].drop_duplicates()
    order = list(order) + [o for o in per_fwd.index if o not in set(order)]
    return pd.DataFrame({
        "variant": variant, "shape_key": shape_key, "op": order,
        "calls_per_forward": per_fwd.loc[order].median(axis=1).values,
        "mean_us": ops.groupby("name")["dur"].mean().loc[order].values,
    })


def summary_row(status: dict, forwards: pd.DataFrame) -> dict:
    """One summary.csv row from a capture's status record and its forward table. Counts are
    medians over profiled forwards; device_ms_per_forward is the median of per-forward device
    time (NaN on a CPU run, which has no device events), with min and max; cpu_ms_per_forward
    is the median host time of the forward range. timed_* come from the capture's independent
    timing loop (CUDA events or perf_counter, see timing_method)."""
    timing = status.get("timing") or {}
    row = {
        "variant": status["variant"], "shape_key": status["shape_key"], "status": status["status"],
        **{k: status.get(k) for k in ("batch", "heads", "seq_len", "head_dim", "dtype", "causal", "device")},
        "forwards_profiled": len(forwards),
        "timed_ms_median": timing.get("median_ms"), "timed_ms_min": timing.get("min_ms"),
        "timed_ms_max": timing.get("max_ms"), "timing_method": timing.get("method"),
        "rel_error": status.get("rel_error"), "rel_error_ok": status.get("rel_error_ok"),
        "peak_memory_mb": (status["peak_memory_bytes"] / 2**20) if status.get("peak_memory_bytes") else None,
        "reason": status.get("reason", ""),
        "oom_bytes": status.get("oom_bytes"),
    }
    graph = status.get("graph_timing") or {}
    row.update(graph_ms_median=graph.get("median_ms"), graph_ms_min=graph.get("min_ms"), graph_ms_max=graph.get("max_ms"),
               graph_error=graph.get("error"))
    if status.get("forward_flops"):
        row["forward_gflop"] = status["forward_flops"] / 1e9
        row["flop_per_byte"] = status["forward_flops"] / status["min_bytes"]
    if status["status"] == "ok" and len(forwards):
        cpu_ms = forwards["cpu_us"] / 1e3
        row.update(cpu_ms_per_forward=cpu_ms.median(), cpu_ms_min=cpu_ms.min(), cpu_ms_max=cpu_ms.max())
        if status.get("device") == "cuda":  # a CPU run has no device events: those columns stay empty
            device_ms = forwards["device_us"] / 1e3
            row.update(
                kernels_per_forward=forwards["kernels"].median(),
                memcpy_per_forward=forwards["memcpy"].median(),
                memset_per_forward=forwards["memset"].median(),
                device_ms_per_forward=device_ms.median(), device_ms_min=device_ms.min(), device_ms_max=device_ms.max(),
            )
            # achieved TFLOP/s, FLOP convention of Shape.forward_flops (PyTorch's sdpa benchmark)
            if row.get("forward_gflop") and row["device_ms_per_forward"]:
                row["tflops"] = row["forward_gflop"] / row["device_ms_per_forward"]  # GFLOP/ms = TFLOP/s
        if row.get("forward_gflop") and row.get("graph_ms_median"):
            row["tflops_graph"] = row["forward_gflop"] / row["graph_ms_median"]
    return {c: row.get(c) for c in SUMMARY_COLUMNS}
