"""Capture one variant at one shape: warm-up, torch.profiler trace, correctness, timing.

The work runs in a child process (``python -m attnprof.capture SPEC.json``) so that
one variant's CUDA context, caches, allocator state or a hard crash cannot touch
another. :func:`run_isolated` starts it and always leaves a status record behind,
whatever happens to the child.

Status values (``status.json``):

* ``ok`` -- trace captured;
* ``unsupported`` -- PyTorch refused the variant here (no kernel for this backend,
  device or dtype; or a CUDA run asked for on a machine without a GPU); ``reason``
  holds PyTorch's own message and the warnings it emitted about why;
* ``out_of_memory`` -- the allocator failed; ``reason`` holds its message with the
  bytes it asked for;
* ``failed`` -- anything else, including a crash of the child (exit code or signal).
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

from .variants import Shape, make_forward, reference_attention, torch_dtype

STATUSES = ("ok", "unsupported", "out_of_memory", "failed")

#: Relative error ||out - ref|| / ||ref|| above which a result is flagged, by input dtype.
#: bf16 keeps 8 mantissa bits (eps 2^-8 = 3.9e-3), fp16 11 (4.9e-4), fp32 24 (6e-8);
#: attention outputs land a few eps from a float64 reference.
DEFAULT_TOLERANCE = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}

#: Why a pinned CUDA-only backend cannot run on the CPU (PyTorch's aten/src/ATen/native/transformers/sdp_utils_cpp.cpp
#: selects among FLASH_ATTENTION and MATH only).
CPU_BACKENDS_NOTE = " [PyTorch's CPU SDPA dispatcher (sdp_utils_cpp) offers only the FLASH_ATTENTION and MATH backends]"

_UNSUPPORTED_MARKERS = (
    "No available kernel",
    "No viable backend",
    "not supported",
    "not implemented",
    "NotImplementedError",
)


def log(msg: str) -> None:
    """Progress line on stderr (Snakemake shows it, or sends it to the rule's log)."""
    print(f"[attnprof {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def classify_exception(exc: BaseException) -> str:
    """Map an exception raised by a forward to a status (see module docstring)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "out_of_memory"
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NotImplementedError) or any(m.lower() in text.lower() for m in _UNSUPPORTED_MARKERS):
        return "unsupported"
    return "failed"


def _inputs(shape: Shape, device: str, n_sets: int, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    dt = torch_dtype(shape.dtype)
    return [
        tuple(torch.randn(dims, generator=gen, device=device, dtype=dt) for _ in range(3)) for _ in range(n_sets)
    ]


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _time_calls(forward, input_sets, device: str, repeats: int) -> dict:
    """Time ``repeats`` single calls, rotating through ``input_sets`` so consecutive calls
    read different buffers (with enough sets, L2 cannot serve the inputs). On CUDA each call
    is bracketed by CUDA events on the current stream (device elapsed time, launch gaps
    between its kernels included); on CPU by ``time.perf_counter``. Returns ms statistics."""
    import torch

    times = []
    for i in range(repeats):
        q, k, v = input_sets[i % len(input_sets)]
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            forward(q, k, v)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            forward(q, k, v)
            times.append((time.perf_counter() - t0) * 1e3)
    return {
        "method": "cuda_events" if device == "cuda" else "perf_counter",
        "repeats": repeats,
        "input_sets": len(input_sets),
        "min_ms": min(times),
        "median_ms": statistics.median(times),
        "max_ms": max(times),
    }


def _time_graph(forward, q, k, v, repeats: int) -> dict:
    """Capture one forward in a CUDA graph and time ``repeats`` replays, each between CUDA
    events: the device time of the forward without launch gaps. Returns ms statistics, or
    {"error": reason} when the variant cannot be captured (a CPU sync, an unsupported op)."""
    import torch

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                forward(q, k, v)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward(q, k, v)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any capture failure is a result, not a crash
        torch.cuda.synchronize()
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return {"method": "cuda_graph_replay", "repeats": repeats, "min_ms": min(times),
            "median_ms": statistics.median(times), "max_ms": max(times)}


def oom_bytes(message: str) -> int | None:
    """Bytes the allocator asked for, from PyTorch's 'Tried to allocate 64.00 GiB' message; None if absent."""
    m = re.search(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)", message)
    if not m:
        return None
    return int(float(m.group(1)) * 1024 ** ("B", "KiB", "MiB", "GiB", "TiB").index(m.group(2)))


def _op_input_types(forward, q, k, v) -> list[dict]:
    """Profile one extra forward, CPU only, with record_shapes=True, and return each
    aten op's name and input dtypes, read from the exported trace's ``Input type`` args
    (kept apart from the timed trace, whose CPU times record_shapes would inflate)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        forward(q, k, v)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shapes.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    return [
        {"name": ev["name"], "input_types": [t for t in ev.get("args", {}).get("Input type", []) if t]}
        for ev in events
        if ev.get("cat") == "cpu_op"
    ]


def capture(spec: dict, trace_path: Path) -> dict:
    """Run the capture described by ``spec`` in this process; write the gzipped Chrome
    trace to ``trace_path`` and return the status record (never raises for a variant's
    own failure). ``spec`` keys: variant, shape (Shape fields), device ('cuda'|'cpu'),
    schedule {wait, warmup, active}, warmup_calls, timing {repeats, input_sets}, seed,
    tolerance {dtype: float}, range_name."""
    t_start = time.perf_counter()
    shape = Shape(**spec["shape"])
    device = spec["device"]
    record = {
        "variant": spec["variant"],
        "shape_key": shape.key,
        **shape.as_dict(),
        "device": device,
        "status": "failed",
        "reason": "",
        "warnings": [],
        "schedule": spec["schedule"],
        "range_name": spec["range_name"],
    }
    import torch

    record["torch_import_s"] = round(time.perf_counter() - t_start, 3)
    record["torch_version"] = torch.__version__
    record["forward_flops"] = shape.forward_flops()
    record["min_bytes"] = shape.min_bytes()
    record["device_name"] = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else platform.processor() or platform.machine()
    if device == "cuda" and not torch.cuda.is_available():
        record.update(status="unsupported", reason="cuda requested but torch.cuda.is_available() is False (no GPU or a CPU-only torch build)")
        return record

    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    sched = spec["schedule"]
    steps = sched["wait"] + sched["warmup"] + sched["active"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.manual_seed(spec["seed"])
            forward, backend_context = make_forward(spec["variant"], shape, device)
            sets = _inputs(shape, device, max(1, spec["timing"]["input_sets"]), spec["seed"])
            q, k, v = sets[0]
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            with torch.no_grad(), backend_context:
                log(f"{spec['variant']} {shape.key} on {device}: {spec['warmup_calls']} warm-up calls")
                for _ in range(spec["warmup_calls"]):
                    out = forward(q, k, v)
                _sync(device)

                t_profile = time.perf_counter()
                log(f"profiling {steps} steps (wait {sched['wait']}, warmup {sched['warmup']}, active {sched['active']})")
                activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
                with profile(
                    activities=activities,
                    schedule=schedule(wait=sched["wait"], warmup=sched["warmup"], active=sched["active"], repeat=1),
                    on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
                ) as prof:
                    for _ in range(steps):
                        with record_function(spec["range_name"]):
                            out = forward(q, k, v)
                        # outside the range: each step's device work ends before the next starts
                        _sync(device)
                        prof.step()
                record["profile_s"] = round(time.perf_counter() - t_profile, 3)
                if device == "cuda":
                    record["peak_memory_bytes"] = torch.cuda.max_memory_allocated()

                log("checking against a float64 reference")
                ref = reference_attention(q, k, v, shape.causal)
                err = (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()
                tol = spec["tolerance"][shape.dtype]
                record["rel_error"] = err
                record["rel_error_tolerance"] = tol
                record["rel_error_ok"] = bool(err <= tol)
                del ref

                log(f"timing {spec['timing']['repeats']} calls over {len(sets)} input sets")
                record["timing"] = _time_calls(forward, sets, device, spec["timing"]["repeats"])
                if device == "cuda":
                    log("timing CUDA-graph replays")
                    record["graph_timing"] = _time_graph(forward, q, k, v, spec["timing"]["repeats"])
                record["op_input_types"] = _op_input_types(forward, q, k, v)
            record["status"] = "ok"
        except Exception as exc:  # a variant's own failure is data, not a crash
            record["status"] = classify_exception(exc)
            record["reason"] = f"{type(exc).__name__}: {exc}".strip()
            if record["status"] == "out_of_memory":
                record["oom_bytes"] = oom_bytes(record["reason"])
            if device == "cpu" and spec["variant"] in ("sdpa_efficient", "sdpa_cudnn"):
                record["reason"] += CPU_BACKENDS_NOTE
            if record["status"] == "failed":
                record["traceback"] = traceback.format_exc(limit=8)
        record["warnings"] = sorted({str(w.message) for w in caught})
    record["capture_wall_s"] = round(time.perf_counter() - t_start, 3)
    return record


def write_placeholder_trace(trace_path: Path, status: str) -> None:
    """A capture that did not run still yields its declared output: an empty Chrome
    trace (no events) that names the status, so downstream stages see 'no data' rather
    than a missing file."""
    with gzip.open(trace_path, "wt") as fh:
        json.dump({"traceEvents": [], "attnprof": {"placeholder": True, "status": status}}, fh)


def run_isolated(spec: dict, trace_path: Path, status_path: Path, timeout_s: float, log_path: Path | None = None) -> dict:
    """Run :func:`capture` in a fresh Python process and write ``status_path`` (JSON)
    and ``trace_path`` (gzipped Chrome trace, a placeholder when the capture did not
    succeed). A crash, a timeout or a non-zero exit becomes status ``failed`` with the
    exit code and the end of the child's stderr. Returns the status record."""
    trace_path, status_path = Path(trace_path), Path(status_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    status_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path = status_path.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec))
    tmp_status = status_path.with_suffix(".child.json")
    tmp_status.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "attnprof.capture", str(spec_path), str(trace_path), str(tmp_status)]
    stderr_tail = ""
    started = time.time()
    try:
        proc = subprocess.run(cmd, timeout=timeout_s, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        stderr_tail = proc.stderr[-4000:]
        sys.stderr.write(proc.stderr)
        returncode = proc.returncode
    except subprocess.TimeoutExpired as exc:
        returncode = None
        stderr_tail = (exc.stderr or b"")[-4000:].decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
    if tmp_status.exists() and returncode == 0:
        record = json.loads(tmp_status.read_text())
    else:
        why = f"capture timed out after {timeout_s} s" if returncode is None else f"capture process exited with code {returncode}"
        record = {"variant": spec["variant"], "shape_key": Shape(**spec["shape"]).key, **spec["shape"], "device": spec["device"],
                  "status": "failed", "reason": why, "stderr_tail": stderr_tail}
    record["started_at"], record["finished_at"] = round(started, 3), round(time.time(), 3)
    tmp_status.unlink(missing_ok=True)
    spec_path.unlink(missing_ok=True)
    if record["status"] != "ok" or not trace_path.exists():
        if record["status"] == "ok":
            record.update(status="failed", reason="profiler wrote no trace")
        write_placeholder_trace(trace_path, record["status"])
    status_path.write_text(json.dumps(record, indent=2, sort_keys=True))
    log(f"{record['variant']} {record['shape_key']}: {record['status']}{(' - ' + record['reason'][:200]) if record['reason'] else ''}")
    return record


def main(argv: list[str]) -> int:
    spec_path, trace_path, status_path = (Path(a) for a in argv[1:4])
    record = capture(json.loads(spec_path.read_text()), trace_path)
    status_path.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
