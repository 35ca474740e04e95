"""Read a torch.profiler Chrome trace and attribute every GPU event to the forward that launched it.

Trace format (Kineto's Chrome trace export, as written by
``torch.profiler.profile.export_chrome_trace``): ``traceEvents`` is a list of events;
complete events have ``ph == "X"``, ``ts`` and ``dur`` in microseconds, and a ``cat``:

* ``user_annotation`` -- ``record_function`` ranges on the CPU (our forwards, ``ProfilerStep#N``);
* ``cpu_op`` -- aten ops, with ``args["External id"]``;
* ``cuda_runtime`` / ``cuda_driver`` -- API calls (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
  ``cudaMemcpyAsync``...), with ``args["correlation"]`` and the ``External id`` of the op
  that made them;
* ``kernel``, ``gpu_memcpy``, ``gpu_memset`` -- device activity, with the same
  ``args["correlation"]`` as the API call that launched it, and for kernels the launch
  metadata (``grid``, ``block``, ``registers per thread``, ``shared memory``,
  ``est. achieved occupancy %``).

A GPU event belongs to forward *i* when the API call with its correlation id started
inside the *i*-th CPU range named ``range_name``. This attribution does not assume that
every forward launches the same work, unlike dividing totals by the step count.

Completeness (see :func:`attnprof.tables.forward_table`): Kineto can lose GPU records (a
launch whose correlation id has no kernel/memcpy/memset event) and can write GPU events
with impossible times (``ts`` 0, ``dur`` <= 0, a start before the launch call, an end long after the trace).
Every launch is therefore matched to its GPU event, and every GPU event's times are
checked (:data:`GPU_CATEGORIES`, :func:`gpu_events` column ``time_ok``).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: Runtime/driver API calls that enqueue exactly one GPU event (kernel, memcpy or memset)
#: carrying the call's correlation id (CUPTI activity records): kernel launches (runtime and
#: driver, cooperative, Ex/ExC, versioned ``_v11060`` names), every memcpy and memset call.
LAUNCH_API = re.compile(r"^cu(da)?(Launch(Cooperative)?Kernel(Ex(C)?)?|Memcpy\w*|Memset\w*)(_v\d+)?$")
LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
               "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemsetAsync")  # the common ones, for docs
CPU_CATEGORIES = ("user_annotation", "cpu_op", "cuda_runtime", "cuda_driver")


def is_launch_api(names: pd.Series) -> pd.Series:
    """True where an API call's name enqueues one GPU event (:data:`LAUNCH_API`)."""
    return names.astype(str).str.match(LAUNCH_API)


METADATA_ARGS = {
    "grid": "grid",
    "block": "block",
    "registers per thread": "registers_per_thread",
    "shared memory": "shared_memory_bytes",
    "est. achieved occupancy %": "est_occupancy_pct",
    "blocks per SM": "blocks_per_sm",
    "warps per SM": "warps_per_sm",
}


class TraceError(ValueError):
    """The file is not a readable torch.profiler Chrome trace."""


def load_trace(path: str | Path) -> dict:
    """Load a Chrome trace, gzipped (``.gz``) or plain JSON, and return it as a dict.

    Raises :class:`TraceError`, whose message names the file and the cause, for every way
    the file can be unreadable: missing or unreadable file, a gzip stream cut short (an
    interrupted write), a corrupt gzip stream, JSON that ends early or is not JSON, text that
    is not UTF-8, and JSON without a ``traceEvents`` list."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            text = fh.read()
    except EOFError as exc:
        raise TraceError(f"{path}: truncated trace: the gzip stream ends before its end-of-stream marker "
                         f"(an interrupted write?) ({exc})") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{path}: corrupt gzip stream ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc})") from exc
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc})") from exc
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as exc:
        cause = "truncated trace: the JSON ends early" if exc.pos >= len(text.rstrip()) else "not valid JSON"
        raise TraceError(f"{path}: {cause} ({exc})") from exc
    except RecursionError as exc:
        raise TraceError(f"{path}: not a Chrome trace (JSON nested too deeply)") from exc
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents list)")
    bad = sum(not isinstance(e, dict) for e in trace["traceEvents"])
    if bad:
        raise TraceError(f"{path}: corrupt trace: {bad} of {len(trace['traceEvents'])} events are not JSON objects")
    return trace


def events_frame(trace: dict) -> pd.DataFrame:
    """Complete (``ph == "X"``) events as a DataFrame with columns name, cat, ts, dur
    (microseconds; NaN where missing or not a number), end, pid, tid, correlation,
    external_id, args. Empty frame (same columns) when the trace holds none."""
    rows = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    cols = ["name", "cat", "ts", "dur", "pid", "tid", "args"]
    df = pd.DataFrame([{c: e.get(c) for c in cols} for e in rows], columns=cols)
    df["name"] = df["name"].map(lambda n: n if isinstance(n, str) else "(no name)" if n is None else str(n))
    df["cat"] = df["cat"].map(lambda c: c if isinstance(c, str) else None)
    df["args"] = df["args"].apply(lambda a: a if isinstance(a, dict) else {})
    df["ts"] = pd.to_numeric(df["ts"], errors="coerce").astype(float)
    df["dur"] = pd.to_numeric(df["dur"], errors="coerce").astype(float)
    df["end"] = df["ts"] + df["dur"]
    df["correlation"] = integer_ids(df["args"].apply(lambda a: a.get("correlation")))
    df["external_id"] = integer_ids(df["args"].apply(lambda a: a.get("External id")))
    return df


def integer_ids(values: pd.Series) -> pd.Series:
    """Ids as nullable integers: numbers (or numeric strings) with an integral value; anything
    else (fractions, words, missing) becomes <NA>, which matches nothing."""
    num = pd.to_numeric(values, errors="coerce")
    num = num.where(num.notna() & np.isfinite(num) & (num == np.floor(num)))
    return num.astype("Int64")


def forward_ranges(events: pd.DataFrame, range_name: str) -> pd.DataFrame:
    """The CPU ``record_function`` ranges named ``range_name``, in time order (ranges without
    a valid start last), as columns forward (0-based), ts, end, cpu_us (the range's duration:
    host time of one forward), tid, and range_ok: False when the range has no finite start or
    a missing or negative duration, or overlaps another such range of its thread (forwards are
    sequential: an overlap means a corrupt trace or a different program). Work is attributed
    only to ranges that are ok."""
    r = events[(events["cat"] == "user_annotation") & (events["name"] == range_name)]
    r = r.sort_values("ts", na_position="last").reset_index(drop=True)
    out = pd.DataFrame({"forward": r.index, "ts": r["ts"], "end": r["end"], "cpu_us": r["dur"], "tid": r["tid"]})
    ok = np.isfinite(out["ts"]) & np.isfinite(out["end"]) & (out["cpu_us"] >= 0)
    overlap = pd.Series(False, index=out.index)
    for _, rr in out[ok].groupby("tid"):
        rr = rr.sort_values("ts")
        prev_end = rr["end"].cummax().shift()
        hit = rr["ts"] <= prev_end  # starts before an earlier range of the thread has ended
        overlap[rr.index[hit]] = True
        overlap[rr.index[hit.shift(-1, fill_value=False)]] = True
    out["range_ok"] = ok & ~overlap
    return out


def assign_forward(ts: pd.Series, tid: pd.Series, ranges: pd.DataFrame) -> pd.Series:
    """Index of the forward range (``range_ok`` ones only) that contains each (ts, tid) --
    same thread, range start <= ts <= range end -- or -1 when none does. Vectorised with
    numpy.searchsorted per thread; ranges of one thread do not overlap (forward_ranges)."""
    out = pd.Series(-1, index=ts.index, dtype="int64")
    good = ranges[ranges["range_ok"]] if "range_ok" in ranges else ranges
    if good.empty or ts.empty:
        return out
    for thread, rr in good.groupby("tid"):
        rr = rr.sort_values("ts")
        sel = (tid == thread).to_numpy() & np.isfinite(ts.to_numpy(float))
        t = ts.to_numpy(float)[sel]
        i = np.searchsorted(rr["ts"].to_numpy(float), t, side="right") - 1
        inside = (i >= 0) & (t <= rr["end"].to_numpy(float)[np.clip(i, 0, None)])
        out.iloc[np.flatnonzero(sel)] = np.where(inside, rr["forward"].to_numpy()[np.clip(i, 0, None)], -1)
    return out


def launches(events: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """CUDA runtime and driver API calls with the forward they ran in (-1: outside any)."""
    api = events[events["cat"].isin(LAUNCH_CATEGORIES)].copy()
    api["forward"] = assign_forward(api["ts"], api["tid"], ranges)
    return api


def cpu_ops(events: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """aten ops (``cpu_op``) with the forward they ran in (-1: outside any)."""
    ops = events[events["cat"] == "cpu_op"].copy()
    ops["forward"] = assign_forward(ops["ts"], ops["tid"], ranges)
    return ops


def gpu_events(events: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Kernels, memcpys and memsets joined to the API call that launched them (by
    correlation id) and to that call's forward and issuing aten op (by External id).

    Columns: name, category ('kernel'|'memcpy'|'memset'), ts, dur, end (us), forward
    (-1 when the launch was outside every forward or missing), launch_api, launch_ts (us,
    start of the launching API call), op, device (``args.device``: the GPU it ran on, the
    ``id`` of a ``deviceProperties`` entry; NaN when absent), time_ok (False for impossible
    times: ts or dur missing or not finite, ts <= 0, dur <= 0, a start before the launch call
    started, or an end later than the trace's CPU span again after its last CPU event),
    duplicate (another GPU event carries
    the same correlation id: one launch, one GPU record), orphan_forward (for an event whose
    launch record is missing: the forward of the aten op its own ``External id`` names, else
    -1), and the launch metadata columns of METADATA_ARGS (NaN where the trace
    carries none)."""
    gpu = events[events["cat"].isin(GPU_CATEGORIES)].copy()
    gpu["category"] = gpu["cat"].map(GPU_CATEGORIES)
    gpu["device"] = integer_ids(gpu["args"].apply(lambda a: a.get("device")))
    for key, col in METADATA_ARGS.items():
        gpu[col] = gpu["args"].apply(lambda a, k=key: a.get(k))
    for col in ("grid", "block"):
        gpu[col] = gpu[col].apply(lambda g: "x".join(str(int(x)) for x in g) if isinstance(g, list) else None)
    api = launches(events, ranges)[["correlation", "name", "forward", "external_id", "ts"]]
    api = api.dropna(subset=["correlation"]).drop_duplicates("correlation")
    api = api.rename(columns={"name": "launch_api", "external_id": "launch_external_id", "ts": "launch_ts"})
    gpu = gpu.merge(api, on="correlation", how="left")
    # the CPU side of the trace spans [cpu_start, cpu_end]: GPU work launched in it cannot end
    # later than one more such span after it (real traces end within tens of us)
    cpu = events[events["cat"].isin(CPU_CATEGORIES)]
    cpu_ts, cpu_end = cpu["ts"][np.isfinite(cpu["ts"])], cpu["end"][np.isfinite(cpu["end"])]
    latest = cpu_end.max() + (cpu_end.max() - cpu_ts.min()) if len(cpu_ts) and len(cpu_end) else np.inf
    gpu["time_ok"] = (np.isfinite(gpu["ts"]) & np.isfinite(gpu["dur"]) & (gpu["ts"] > 0) & (gpu["dur"] > 0)
                      & ~(gpu["ts"] < gpu["launch_ts"]) & ~(gpu["end"] > latest))
    gpu["duplicate"] = gpu["correlation"].notna() & gpu.duplicated("correlation", keep=False)
    # a GPU event whose launch record is missing: its own External id names the aten op that issued it
    ops = events[events["cat"] == "cpu_op"].dropna(subset=["external_id"]).drop_duplicates("external_id").set_index("external_id")
    gpu["orphan_forward"] = -1
    orphan = gpu["launch_api"].isna()
    if orphan.any() and len(ops):
        own_ext = integer_ids(gpu.loc[orphan, "args"].apply(lambda a: a.get("External id")))
        fwd = assign_forward(own_ext.map(ops["ts"]).astype(float), own_ext.map(ops["tid"]), ranges)
        gpu.loc[orphan, "orphan_forward"] = fwd.values
    op_by_id = ops["name"]
    gpu["op"] = gpu["launch_external_id"].map(op_by_id)
    gpu["forward"] = gpu["forward"].fillna(-1).astype("int64")
    cols = ["name", "category", "ts", "dur", "end", "forward", "launch_api", "launch_ts", "op", "correlation", "device",
            "time_ok", "duplicate", "orphan_forward", *METADATA_ARGS.values()]
    return gpu[cols].sort_values("ts").reset_index(drop=True)


def device_properties(trace: dict) -> list[dict]:
    """The ``deviceProperties`` block Kineto writes, one entry per visible GPU with its
    ``id`` (GPU name, SM count, registers per SM...); empty list for CPU-only traces (a
    single object is taken as a list of one; entries that are not objects are dropped). Pick
    the entry of the device a kernel ran on with :func:`properties_of`."""
    props = trace.get("deviceProperties") or []
    props = [props] if isinstance(props, dict) else props if isinstance(props, list) else []
    return [p for p in props if isinstance(p, dict)]


def properties_of(props: list[dict], device) -> dict:
    """The ``deviceProperties`` entry whose ``id`` is ``device`` (a GPU event's
    ``args.device``); {} when ``device`` is missing or no entry has that id -- never
    another device's entry, whose limits would give wrong occupancy and architecture."""
    if device is None or pd.isna(device):
        return {}
    return next((p for p in props if isinstance(p, dict) and p.get("id") == int(device)), {})


def short_kernel_name(name: str) -> str:
    """Kernel name without return type, template arguments and parameter list, e.g.
    ``void pytorch_flash::flash_fwd_kernel<Traits<...>, true>(Params)`` ->
    ``pytorch_flash::flash_fwd_kernel``. Names without templates come back unchanged
    except for a trailing parameter list."""
    name = name.replace("(anonymous namespace)", "{anonymous}").replace("->", "\u2192")
    out, depth_angle, depth_paren = [], 0, 0
    for ch in name:
        if ch == "<":
            depth_angle += 1
        elif ch == ">":
            depth_angle = max(0, depth_angle - 1)
        elif ch == "(" and depth_angle == 0:
            depth_paren += 1
        elif ch == ")" and depth_angle == 0:
            depth_paren = max(0, depth_paren - 1)
        elif depth_angle == 0 and depth_paren == 0:
            out.append(ch)
    short = "".join(out).strip()
    if short.startswith("void "):
        short = short[5:]
    return short.replace("{anonymous}::", "").strip() or name.replace("\u2192", "->")


_GENERIC = ("elementwise_kernel", "reduce_kernel")
_WRAPPERS = {"AUnaryFunctor", "BUnaryFunctor", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "gpu_kernel"}
_FUNCTOR = re.compile(r"(\w*(?:Functor\w*|_kernel_cuda|_kernel_impl|_kernel)\b)(<\w+>)?")
#: CUTLASS entry points whose first template argument is the real kernel (cutlass::Kernel2<cutlass_80_simt_sgemm_...>)
_CUTLASS_ENTRY = {"cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel"}


def kernel_label(name: str) -> str:
    """Readable label for plots, tables and classification: the short name
    (:func:`short_kernel_name`); for PyTorch's generic elementwise/reduce kernels also the
    functor or op they run (``MulFunctor``, ``FillFunctor<bool>``, ``masked_fill_kernel``,
    ``direct_copy_kernel_cuda``...), which the short name hides; for CUTLASS entry points
    (``cutlass::Kernel2<K>``) the kernel K they instantiate. Memcpy/memset names lose only
    their parenthesised direction (``Memcpy DtoD (Device -> Device)`` -> ``Memcpy DtoD``)."""
    short = short_kernel_name(name)
    inner = name[name.find("<") + 1 :] if "<" in name else ""
    if short in _CUTLASS_ENTRY and inner:
        return f"{short} [{re.split(r'[<,>]', inner, maxsplit=1)[0].strip()}]"
    if not short.endswith(_GENERIC):
        return short
    for match in _FUNCTOR.finditer(inner):
        word = match.group(1)
        if word and not word.endswith(_GENERIC) and word not in _WRAPPERS:
            return f"{short.split('::')[-1]} [{word}{match.group(2) or ''}]"
    return short
