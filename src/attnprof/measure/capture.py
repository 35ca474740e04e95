"""Capture one variant at one shape: warm-up, torch.profiler trace, correctness, timing.

This module is the measurement that runs inside a capture process: :func:`capture` (under the
device's capture lock, :mod:`attnprof.measure.lock`) runs :func:`run_capture` in this process and
returns the status record. Starting that process and reading how it ended is the runtime layer's
work: a fresh child per capture (:func:`attnprof.runtime.isolation.run_isolated`) or the warm capture
worker (:mod:`attnprof.runtime.worker`); a crash or a kill of the process is classified there
(:mod:`attnprof.runtime.isolation`, "Killed captures").

Phases. :func:`capture` runs five phases, each in its own ``try``, and records each
outcome in ``record["phases"][name] = {"status", "reason", "seconds"}`` (plus
``traceback`` when ``failed``, ``unsupported_reasons`` when ``unsupported``):

* ``profile`` -- set-up, warm-up calls and the torch.profiler trace; its outcome is the
  record's ``status``;
* ``correctness`` -- relative error against a blockwise float64 reference;
* ``grad_correctness`` -- with ``"backward"`` in ``passes`` and a backward that ran: the relative
  errors of dq, dk and dv for the profiled steps' fixed output gradient against autograd through
  the float64 reference (:func:`_grad_correctness_phase`); ``skipped`` in a forward-only run or
  when the backward pass did not succeed (the reason says which);
* ``timing`` -- single calls timed with CUDA events (``perf_counter`` on CPU);
* ``graph_timing`` -- CUDA-graph replays (``skipped`` on CPU);
* ``input_types`` -- one extra forward profiled with ``record_shapes=True``.

Passes (spec ``passes``, config ``passes``; default ``["forward"]``). With ``"backward"`` the
profile phase also profiles the backward of every step in a range of its own
(:func:`_profile_phase`, :mod:`attnprof.analysis.backward`), and ``record["passes"]`` holds each pass's
outcome ({status, reason, seconds[, unsupported_reasons][, traceback]}, like a phase's). A
backward that cannot run (no backward kernel for this backend, dtype or head_dim: PyTorch's
reason; out of memory; too few complete backwards in the trace: ``incomplete_trace``) is
recorded there and the forward is profiled and published as in a forward-only run: a failure
of one pass is not a failure of the measurement. The later phases stay forward-only, except
``grad_correctness``, the backward's float64 check. A gradient above tolerance
(``grad_rel_error_ok`` false) keeps the trace and every number, as a wrong forward result does
(``rel_error_ok`` false): the findings and the report mark them. A compiled variant's first
backward (which compiles the backward graph) is timed on its own before the warm-up
(``compile_backward``, :func:`_first_backward`) and never enters a profiled step.

A later phase that fails (the float64 reference out of memory, say) frees what it
allocated and the next phase runs: the trace is kept, ``status`` stays ``ok``, and
``checks_missing`` lists ``"phase: status: reason"`` for each later phase that did not
succeed.
When ``profile`` did not succeed, the later phases are ``skipped``.

Status values (``status.json``, and each phase's ``status``):

* ``ok`` -- trace captured (phase: it ran);
* ``unsupported`` -- PyTorch refused the variant here (no kernel for this backend,
  device or dtype; or a CUDA run asked for on a machine without a GPU); ``reason``
  holds PyTorch's own message and, after "Because:", the warnings its SDPA dispatcher
  emitted about why each backend could not run (``unsupported_reasons``);
* ``out_of_memory`` -- the allocator failed; ``reason`` holds its message with the
  bytes it asked for;
* ``failed`` -- anything else, including a crash of the capture process (exit code or signal;
  recorded by :mod:`attnprof.runtime.isolation`), or
  a trace the profiler wrote that cannot be read back (``TraceError``);
* ``incomplete_trace`` -- the profile ran, but its own trace, read back before ``ok`` is
  written, has fewer complete forwards than ``min_complete_forwards`` (the completeness
  rule of :func:`attnprof.analysis.completeness.assess_forwards`: every launch must find its GPU event;
  on a GPU every forward must record GPU activity); ``reason`` names the trace file and
  both counts; the trace is kept for diagnosis, the later phases are skipped;
* ``skipped`` -- phases only: not run, ``reason`` says why.

Test-only spec keys (never set by the pipeline; they let tests kill, crash or break a
capture): ``_test_pid_file`` (the capture process writes its pid there),
``_test_sleep_s`` (seconds it sleeps before the profile phase), ``_test_crash``
(``"abort"``: ``os.abort()``; ``"segv"``: a read of address 0), ``_test_fail_phase``
(that phase raises ``torch.OutOfMemoryError`` at its start).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import platform
import re
import statistics
import time
import traceback
import types
import warnings
from pathlib import Path

from attnprof.measure.env import host_load
from attnprof.measure.lock import device_lock
from attnprof.measure.progress import log
from attnprof.model.gpus import bare_uuid
from attnprof.model.names import backward_range_name
from attnprof.model.variants import COMPILED, CONTROL, Shape, runs_on
from attnprof.measure.forwards import (
    gradient_relative_errors,
    kept_reference,
    make_forward,
    relative_error,
    torch_dtype,
)

#: The phases of :func:`capture`, in order; the first one's outcome is the record's status.
PHASES = ("profile", "correctness", "grad_correctness", "timing", "graph_timing", "input_types")

#: Relative error ||out - ref|| / ||ref|| above which a result is flagged, by input dtype.
#: bf16 keeps 8 mantissa bits (eps 2^-8 = 3.9e-3), fp16 11 (4.9e-4), fp32 24 (6e-8);
#: attention outputs land a few eps from a float64 reference.
DEFAULT_TOLERANCE = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}

#: Why a pinned CUDA-only backend cannot run on the CPU (PyTorch's aten/src/ATen/native/transformers/sdp_utils_cpp.cpp
#: selects among FLASH_ATTENTION and MATH only).
CPU_BACKENDS_NOTE = " [PyTorch's CPU SDPA dispatcher (sdp_utils_cpp) offers only the FLASH_ATTENTION and MATH backends]"

#: Why the profiler's control (attnprof.model.variants.CONTROL) skips the correctness phase: its forward is a GEMM,
#: an add and a copy, not attention (relative_error would compare it with an attention reference). Its timing,
#: graph_timing and input_types phases run as any variant's (its forward ignores q, k and v); it has no backward.
CONTROL_NOT_CHECKED = "control workload: no attention output to check"

_UNSUPPORTED_MARKERS = (
    "No available kernel",
    "No viable backend",
    "not supported",
    "not implemented",
    "NotImplementedError",
    # torch.compile with no toolchain: inductor finds no C++ compiler (CPU) or no Triton (GPU)
    "InvalidCxxCompiler",
    "No working C++ compiler",
    "Cannot find a working triton installation",
)

def classify_exception(exc: BaseException) -> str:
    """Map an exception raised by a forward to a status (see module docstring)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "out_of_memory"
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NotImplementedError) or any(m.lower() in text.lower() for m in _UNSUPPORTED_MARKERS):
        return "unsupported"
    return "failed"


#: " (Triggered internally at <file>:<line>.)", which PyTorch appends to C++ TORCH_WARN texts.
_TRIGGERED = re.compile(r"\s*\(Triggered internally at (?P<file>[^()]*):\d+\.\)\s*$")
#: A warning's source file in aten/src/ATen/native/transformers/ (SDPA dispatch: sdp_utils*).
_SDPA_SOURCE = re.compile(r"[/\\]transformers[/\\]")
#: SDPA wording, for a warning that carries no source location.
_SDPA_WORDING = re.compile(r"kernel not used because|attention|\bSDPA\b|fused kernel|head_dim|Expected query, key and value", re.I)
#: The header PyTorch emits before each backend's reasons, e.g. "Flash attention kernel not used because:".
_BACKEND_HEADER = re.compile(r"kernel not used because:?$", re.I)


def unsupported_reasons(warning_messages: list[str]) -> list[str]:
    """Why PyTorch's SDPA dispatcher found no kernel, from the warning texts emitted before
    its "No available kernel" error (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    warns "<backend> kernel not used because:" and then each failed check). Keeps the
    messages from the SDPA dispatch sources (by their "Triggered internally at" location,
    or by SDPA wording when they carry none), drops that location suffix, drops "... has
    been runtime disabled." (the consequence of pinning one backend with sdpa_kernel) and
    headers left with no reason after them; unrelated warnings (the profiler's, say) are
    left out. Returns the texts in emission order, deduplicated; [] when none apply."""
    kept: list[str] = []
    for message in warning_messages:
        loc = _TRIGGERED.search(message)
        text = (message[: loc.start()] if loc else message).strip()
        from_sdpa = bool(_SDPA_SOURCE.search(loc["file"])) if loc else bool(_SDPA_WORDING.search(text))
        if from_sdpa and text and "runtime disabled" not in text.lower() and text not in kept:
            kept.append(text)
    return [t for i, t in enumerate(kept)
            if not (_BACKEND_HEADER.search(t) and (i + 1 == len(kept) or _BACKEND_HEADER.search(kept[i + 1])))]


def _because(reasons: list[str]) -> str:
    """" Because: A kernel not used because: r1; r2; B kernel not used because: r3" ('' if none)."""
    text = ""
    for r in reasons:
        text += (" " if text.endswith(":") else "; " if text else "") + r
    return f" Because: {text}" if text else ""


def make_inputs(shape: Shape, device: str, n_sets: int, seed: int) -> list[tuple]:
    """``n_sets`` input sets ``(q, k, v)`` of ``shape`` on ``device``, normal random in the shape's dtype, from a
    generator seeded with ``seed``: q [batch, heads, q_len, head_dim], k and v [batch, kv_heads, kv_len, head_dim]."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    q_dims = (shape.batch, shape.heads, shape.queries, shape.head_dim)
    kv_dims = (shape.batch, shape.key_value_heads, shape.kv_len, shape.head_dim)
    dt = torch_dtype(shape.dtype)
    return [
        tuple(torch.randn(dims, generator=gen, device=device, dtype=dt) for dims in (q_dims, kv_dims, kv_dims))
        for _ in range(n_sets)
    ]


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _ms_stats(times: list[float]) -> dict:
    """min, first quartile, median, third quartile and max of ``times`` (ms); quartiles by
    linear interpolation between order statistics (``statistics.quantiles(method="inclusive")``,
    numpy's and pandas' default), equal to the median for fewer than two times."""
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else (times[0],) * 3
    return {"min_ms": min(times), "q1_ms": q1, "median_ms": statistics.median(times), "q3_ms": q3, "max_ms": max(times)}


#: A forward whose single call takes at least this long (CUDA events, ms) is far above the launch overhead: the
#: CUDA-graph replays of the default H200 sweep (2026-12-02) came in at most 0.26 ms a forward under the event-timed
#: calls (sdpa_math at seq_len 2048: 10.19 against 9.94 ms; 0.14 ms or less below 5 ms), under 1 % of such a call. Its
#: graph replays are not timed (graph_timing ``skipped``, :data:`LONG_CALL_NOTE`) and its single calls stop at
#: :data:`LONG_CALL_REPEATS` once ``budget_s`` is spent (a GPU run only: a CPU's host times move more).
LONG_CALL_MS = 25.0
#: The fewest event-timed calls of such a forward (their interquartile range: 0.02-0.5 % of the median there).
LONG_CALL_REPEATS = 3


def cuda_event_ms(call) -> float:
    """Device time of ``call()`` in ms: between two CUDA events recorded on the current stream around it (launch gaps
    between its kernels included), read once the end event has completed. Needs CUDA."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _timed_loop(call, repeats: int, budget_s: float | None, min_repeats: int, long_ms: float | None = None) -> list[float]:
    """Run ``call(i)`` (returns one time in ms) ``repeats`` times, or stop earlier once
    ``budget_s`` seconds of wall time have passed and at least ``min_repeats`` calls ran
    (a 250 ms forward needs 10 calls, not 50, for a median and quartiles); at least
    :data:`LONG_CALL_REPEATS` instead when the first call took ``long_ms`` or more."""
    times, t0 = [], time.perf_counter()
    for i in range(repeats):
        times.append(call(i))
        if long_ms is not None and len(times) == 1 and times[0] >= long_ms:
            min_repeats = min(min_repeats, LONG_CALL_REPEATS)
        if budget_s is not None and len(times) >= min_repeats and time.perf_counter() - t0 > budget_s:
            break
    return times


def _time_calls(forward, input_sets, device: str, repeats: int, budget_s: float | None = None,
                min_repeats: int = 10) -> dict:
    """Time up to ``repeats`` single calls (fewer once ``budget_s`` is spent, never fewer than
    ``min_repeats``, or :data:`LONG_CALL_REPEATS` for a call of :data:`LONG_CALL_MS` or more on CUDA), rotating through ``input_sets`` so consecutive calls read different
    buffers (with enough sets, L2 cannot serve the inputs). On CUDA each call is bracketed by
    CUDA events on the current stream (device elapsed time, launch gaps between its kernels
    included); on CPU by ``time.perf_counter``. Returns ms statistics (:func:`_ms_stats`), the
    method, ``repeats`` (calls made) and ``repeats_asked``."""

    def one(i: int) -> float:
        q, k, v = input_sets[i % len(input_sets)]
        if device == "cuda":
            return cuda_event_ms(lambda: forward(q, k, v))
        t0 = time.perf_counter()
        forward(q, k, v)
        return (time.perf_counter() - t0) * 1e3

    times = _timed_loop(one, repeats, budget_s, min_repeats, LONG_CALL_MS if device == "cuda" else None)
    return {"method": "cuda_events" if device == "cuda" else "perf_counter", "repeats": len(times),
            "repeats_asked": repeats, "input_sets": len(input_sets), **_ms_stats(times)}


def _time_graph(forward, q, k, v, repeats: int, budget_s: float | None = None, min_repeats: int = 10) -> dict:
    """Capture one forward in a CUDA graph and time up to ``repeats`` replays (budget as in
    :func:`_time_calls`), each between CUDA events: the device time of the forward without
    launch gaps. Returns ms statistics (:func:`_ms_stats`). Raises whatever the capture raises
    when the variant cannot be captured (a CPU sync, an unsupported op); the graph_timing
    phase records it."""
    import torch

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
    times = _timed_loop(lambda _i: cuda_event_ms(graph.replay), repeats, budget_s, min_repeats)  # the graph is freed when this returns
    return {"method": "cuda_graph_replay", "repeats": len(times), "repeats_asked": repeats, **_ms_stats(times)}


def oom_bytes(message: str) -> int | None:
    """Bytes the allocator asked for, from PyTorch's 'Tried to allocate 64.00 GiB' message; None if absent."""
    m = re.search(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)", message)
    return int(float(m.group(1)) * 1024 ** ("B", "KiB", "MiB", "GiB", "TiB").index(m.group(2))) if m else None


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


def _test_hooks(spec: dict) -> None:
    """The test-only spec keys _test_pid_file, _test_crash and _test_sleep_s (module docstring)."""
    if spec.get("_test_pid_file"):
        tmp = Path(f"{spec['_test_pid_file']}.tmp")
        tmp.write_text(str(os.getpid()))
        tmp.replace(spec["_test_pid_file"])  # atomic: a reader never sees an empty file
    if spec.get("_test_crash"):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
        if spec["_test_crash"] == "abort":
            os.abort()
        ctypes.string_at(0)  # SIGSEGV
    time.sleep(spec.get("_test_sleep_s", 0))


def _free_memory(device: str) -> None:
    """After a failed phase: collect its garbage and, on CUDA, return cached blocks."""
    gc.collect()
    if device == "cuda":
        import torch

        with contextlib.suppress(Exception):  # a broken CUDA context has nothing left to free
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def _skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason, "seconds": 0.0}


def _run_phase(name: str, fn, spec: dict, device: str, caught: list) -> tuple[dict, dict]:
    """Run one phase: ``fn()`` returns the record keys it produced. Returns ``(outcome,
    produced)``: outcome {status, reason, seconds[, traceback][, unsupported_reasons]},
    produced {} unless it succeeded. ``caught``: the warnings list being recorded, whose
    entries since the phase began explain an ``unsupported`` outcome."""
    import torch

    t0, first_warning = time.perf_counter(), len(caught)
    produced = {}
    try:
        if spec.get("_test_fail_phase") == name:
            raise torch.OutOfMemoryError(f"test hook _test_fail_phase: {name}. Tried to allocate 1.00 GiB")
        produced = fn() or {}
        outcome = {"status": "ok", "reason": ""}
    except Exception as exc:  # a variant's own failure is data, not a crash
        status = classify_exception(exc)
        outcome = {"status": status, "reason": f"{type(exc).__name__}: {exc}".strip()}
        if status == "failed":
            outcome["traceback"] = traceback.format_exc(limit=8)
        if status == "unsupported":
            outcome["unsupported_reasons"] = unsupported_reasons([str(w.message) for w in caught[first_warning:]])
            outcome["reason"] += _because(outcome["unsupported_reasons"])
    if outcome["status"] != "ok":  # the exception and its frames are gone now
        _free_memory(device)
    outcome["seconds"] = round(time.perf_counter() - t0, 3)
    return outcome, produced


def _profile_phase(spec: dict, shape: Shape, device: str, trace_path: Path, st, stack: contextlib.ExitStack,
                   caught: list) -> dict:
    """Set up, warm up and trace; leaves forward, input sets and the last output in ``st``
    and the variant's backend context entered on ``stack`` for the later phases.

    Backward (``"backward"`` in spec ``passes``; module docstring): after the forward warm-ups, a
    ``backward`` probe runs ``warmup_calls`` (at least one) forward+backward steps outside the
    profiler, in :func:`_run_phase` (its outcome is ``passes.backward``; ``caught``: the warnings
    list that explains an ``unsupported`` one). If it succeeds, each profiled step is
    :func:`_backward_setup`'s step; else the steps are the forward-only ones under ``no_grad``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    sched = spec["schedule"]
    steps = sched["wait"] + sched["warmup"] + sched["active"]
    q, k, v = _set_up(spec, shape, device, st, stack)
    produced = {}
    if spec["variant"] in COMPILED and not spec.get("custom"):
        log(f"{spec['variant']} {shape.key} on {device}: compiling (first call)")
        produced["compile"] = _first_calls(st, q, k, v, device)
        log(f"compiled in {produced['compile']['first_call_s']:.1f} s (inductor cache: {produced['compile']['cache']})")
    log(f"{spec['variant']} {shape.key} on {device}: {spec['warmup_calls']} warm-up calls")
    for _ in range(spec["warmup_calls"]):
        st.out = st.forward(q, k, v)
    _sync(device)
    step = None
    if "backward" in (spec.get("passes") or ["forward"]):
        log(f"backward: {max(1, spec['warmup_calls'])} warm-up steps (forward with grad + backward)")
        outcome, made = _run_phase("backward", lambda: _backward_setup(spec, shape, device, st, q, k, v),
                                   spec, device, caught)
        produced["passes"] = {"forward": {"status": "ok", "reason": ""}, "backward": outcome}
        if outcome["status"] == "ok":
            step = made.pop("step")
            produced.update(made)  # compile_backward, for a compiled variant
        else:
            log(f"backward: {outcome['status']}: {outcome['reason'][:300]}; profiling the forward only")

    if device == "cuda":  # memory from here: what the profiled steps allocate beyond what the process holds now
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        produced["held_memory_bytes"] = torch.cuda.memory_allocated()
    t_profile = time.perf_counter()
    log(f"profiling {steps} steps (wait {sched['wait']}, warmup {sched['warmup']}, active {sched['active']})")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=sched["wait"], warmup=sched["warmup"], active=sched["active"], repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
    ) as prof:
        for _ in range(steps):
            if step is not None:
                step(record_function)
            else:
                with record_function(spec["range_name"]):
                    st.out = st.forward(q, k, v)
            # outside the range: each step's device work ends before the next starts
            _sync(device)
            prof.step()
    if step is not None:
        st.out = st.out.detach()  # the graph is freed; the float64 check reads the values only
    produced["profile_s"] = round(time.perf_counter() - t_profile, 3)
    if device == "cuda":
        produced["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
    return produced


def _set_up(spec: dict, shape: Shape, device: str, st, stack: contextlib.ExitStack) -> tuple:
    """What the profile and the check process both start from: the seed, the variant's forward in ``st.forward``
    (its backend context entered on ``stack``) and the input sets (``spec`` timing ``input_sets``, from the seed) in
    ``st.sets``; returns the first set's (q, k, v), the one the profiled steps and the float64 check use."""
    import torch

    torch.manual_seed(spec["seed"])
    st.forward, backend_context = make_forward(spec["variant"], shape, device, spec.get("custom"))
    stack.enter_context(backend_context)
    st.sets = make_inputs(shape, device, max(1, spec["timing"]["input_sets"]), spec["seed"])
    return st.sets[0]


def _backward_setup(spec: dict, shape: Shape, device: str, st, q, k, v) -> dict:
    """The backward probe and warm-up (``passes: [forward, backward]``): leaf copies of the first
    input set that require grad (sharing its storage; the input sets themselves stay as they are
    for the forward-only phases), one fixed random output gradient (seed + 1), then
    ``warmup_calls`` (at least one) unprofiled steps. A compiled variant (:data:`COMPILED`) first
    runs one step timed part by part (:func:`_first_backward`: the forward with grad compiles the
    training graph, the first backward the backward graph), before the warm-up steps: neither
    compile reaches a profiled step. Leaves the leaf inputs and the output gradient in
    ``st.grad_inputs`` and ``st.grad_out`` for the ``grad_correctness`` phase. Returns
    {"step": fn(record_function)}, the profiled step, and for a compiled variant
    {"compile_backward": ...}.

    The step: ``with enable_grad()``: the forward in the forward range; a synchronize; the
    backward, ``torch.autograd.grad(out, (q, k, v), grad_out)``, in the backward range
    (:func:`attnprof.model.names.backward_range_name`); the caller synchronizes after it. Why
    ``autograd.grad`` and not ``out.backward()``: it returns the gradients instead of
    accumulating them into ``.grad`` (the AccumulateGrad nodes only hand them over: no add, no
    copy, no memset), so no state carries from one step to the next and nothing has to be reset
    between steps; the kernels are those
    a training step's backward runs for these inputs. The synchronize between the ranges keeps
    the forward's device work out of the backward's (and makes each range's device time its own)."""
    import torch

    inputs = tuple(t.detach().requires_grad_(True) for t in (q, k, v))
    gen = torch.Generator(device=device).manual_seed(spec["seed"] + 1)
    dims = (shape.batch, shape.heads, shape.queries, shape.head_dim)
    grad_out = torch.randn(dims, generator=gen, device=device, dtype=torch_dtype(shape.dtype))
    fwd_name, bwd_name = spec["range_name"], backward_range_name(spec["range_name"])
    st.grad_inputs, st.grad_out = inputs, grad_out
    made = {}
    if spec["variant"] in COMPILED and not spec.get("custom"):
        log(f"{spec['variant']} {shape.key}: compiling the training graph (first forward with grad and first backward)")
        made["compile_backward"] = _first_backward(st.forward, inputs, grad_out, device)
        log(f"first backward in {made['compile_backward']['first_backward_s']:.1f} s "
            f"(inductor cache: {made['compile_backward']['cache']})")

    def step(record_function=lambda name: contextlib.nullcontext()) -> None:
        with torch.enable_grad():
            with record_function(fwd_name):
                out = st.forward(*inputs)
            _sync(device)
            with record_function(bwd_name):
                grads = torch.autograd.grad(out, inputs, grad_out)
        st.out = out
        del grads

    for _ in range(max(1, spec["warmup_calls"])):
        step()
        _sync(device)
    return {"step": step, **made}


def _first_backward(forward, inputs, grad_out, device: str) -> dict:
    """Compile time of a torch.compile variant's backward, kept out of the steady-state numbers (as
    :func:`_first_calls` keeps the forward's): the first training step timed in two parts, the
    forward with grad (``first_grad_forward_s``: AOTAutograd traces the joint graph and compiles
    its forward part) and the backward (``first_backward_s``: the backward graph, compiled lazily on
    its first call), each wall clock in seconds up to a synchronize; then a second step timed the
    same way (``second_grad_forward_s``, ``second_backward_s``: steady calls, for scale); the
    compile caches' counters over the first step and :func:`cache_verdict`. ``inputs``: leaf
    (q, k, v) that require grad; ``grad_out``: the output gradient."""
    import torch

    def timed_step() -> tuple[float, float]:
        with torch.enable_grad():
            t0 = time.perf_counter()
            out = forward(*inputs)
            _sync(device)
            t1 = time.perf_counter()
            torch.autograd.grad(out, inputs, grad_out)
            _sync(device)
        return t1 - t0, time.perf_counter() - t1

    before = _compile_counters()
    first_fwd, first_bwd = timed_step()
    after = _compile_counters()
    second_fwd, second_bwd = timed_step()
    delta = {name: n - before.get(name, 0) for name, n in after.items() if n != before.get(name, 0)}
    return {"first_grad_forward_s": round(first_fwd, 3), "first_backward_s": round(first_bwd, 3),
            "second_grad_forward_s": round(second_fwd, 6), "second_backward_s": round(second_bwd, 6),
            "cache": cache_verdict(delta), "counters": delta}


def _compile_counters() -> dict:
    """The compile caches' counters of this process (torch._dynamo.utils.counters): the inductor
    FX-graph cache (``fxgraph_cache_hit``/``_miss``/``_bypass``) and AOTAutograd's
    (``autograd_cache_hit``/``_miss``/...), as {"group.name": count}."""
    from torch._dynamo.utils import counters

    return {f"{group}.{name}": n for group in ("inductor", "aot_autograd") for name, n in counters[group].items()
            if "cache" in name}


def cache_verdict(delta: dict) -> str:
    """'hit' when the compile of a first call found every FX graph in inductor's on-disk cache,
    'miss' when it found none, 'partial' for some, 'bypass' when the cache was bypassed, and
    'none' when no graph was looked up; ``delta`` is :func:`_compile_counters` after minus before."""
    hit, miss = delta.get("inductor.fxgraph_cache_hit", 0), delta.get("inductor.fxgraph_cache_miss", 0)
    if delta.get("inductor.fxgraph_cache_bypass", 0) and not (hit or miss):
        return "bypass"
    return "hit" if hit and not miss else "miss" if miss and not hit else "partial" if hit else "none"


def _first_calls(st, q, k, v, device: str) -> dict:
    """Compile time of a torch.compile variant, kept out of the steady-state numbers: the first
    call (trace, compile, first run; seconds, wall clock up to a synchronize) and the second (a
    steady call, for scale), with the compile caches' counters over the first call and
    :func:`cache_verdict`. Leaves the output in ``st.out``."""
    import torch

    before = _compile_counters()
    t0 = time.perf_counter()
    st.out = st.forward(q, k, v)
    _sync(device)
    first = time.perf_counter() - t0
    after = _compile_counters()
    t0 = time.perf_counter()
    st.out = st.forward(q, k, v)
    _sync(device)
    delta = {name: n - before.get(name, 0) for name, n in after.items() if n != before.get(name, 0)}
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return {"first_call_s": round(first, 3), "second_call_s": round(time.perf_counter() - t0, 6),
            "cache": cache_verdict(delta), "counters": delta, "cache_dir": cache_dir(), "torch": torch.__version__}


def _correctness_phase(spec: dict, shape: Shape, st) -> dict:
    q, k, v = st.sets[0]
    err = relative_error(st.out, q, k, v, shape.causal, offset=shape.causal_offset,
                         reference=kept_reference(q, k, v, shape.causal, shape.causal_offset))
    tol = spec["tolerance"][shape.dtype]
    return {"rel_error": err, "rel_error_tolerance": tol, "rel_error_ok": bool(err <= tol)}


def _grad_correctness_phase(spec: dict, shape: Shape, st) -> dict:
    """The backward's float64 check: one more forward with grad and backward of the profiled steps'
    inputs and fixed output gradient (``st.grad_inputs``, ``st.grad_out``: :func:`_backward_setup`),
    its dq, dk and dv compared with autograd through the float64 reference
    (:func:`attnprof.measure.forwards.gradient_relative_errors`, blockwise). The tolerance is the
    forward's, by dtype (spec ``tolerance``): correct gradients land a few eps from float64 as the
    output does (measured on the CPU at seq_len 512, head_dim 64, causal: bf16 1.7e-3 to 4.7e-3,
    fp16 2.1e-4 to 5.8e-4, fp32 3.5e-7 at most, for naive, sdpa_math and sdpa_flash). Returns
    ``grad_rel_error`` {dq, dk, dv} (dimensionless), ``grad_rel_error_tolerance`` and
    ``grad_rel_error_ok`` (every one of the three within tolerance; a nan is not)."""
    import torch

    with torch.enable_grad():
        out = st.forward(*st.grad_inputs)
        grads = torch.autograd.grad(out, st.grad_inputs, st.grad_out)
    del out
    errors = gradient_relative_errors(tuple(g.detach() for g in grads), *st.grad_inputs, st.grad_out, shape.causal,
                                      offset=shape.causal_offset)
    tol = spec["tolerance"][shape.dtype]
    return {"grad_rel_error": errors, "grad_rel_error_tolerance": tol,
            "grad_rel_error_ok": all(e <= tol for e in errors.values())}


def gpu_record(assigned: dict | None) -> tuple[dict, str | None]:
    """The GPU this process captures on, for status.json's ``gpu``: the one its job assigned (``assigned``: index,
    uuid, name, power limit, clock and memory as nvidia-smi lists them, :class:`attnprof.model.gpus.Gpu`; where none
    was, the UUID and name torch reports) and what torch reports for ``cuda:0`` (``torch_uuid``, ``torch_name``). Returns (record, reason):
    reason names both UUIDs when ``cuda:0`` is not the assigned GPU (the process does not see the GPU its job holds
    and locks), else None. Needs CUDA."""
    import torch

    props = torch.cuda.get_device_properties(0)
    seen = str(getattr(props, "uuid", "") or "")  # torch prints it without nvidia-smi's 'GPU-'
    # no assignment (a cluster job, CUDA without nvidia-smi): the GPU as torch names it
    rec = {**(assigned or {"uuid": f"GPU-{seen}" if seen else None, "name": props.name}),
           "torch_uuid": seen or None, "torch_name": props.name}
    uuid = (assigned or {}).get("uuid") or ""
    if uuid and seen and not uuid.upper().startswith("MIG-") and bare_uuid(uuid) != bare_uuid(seen):
        return rec, (f"the capture's job holds GPU {uuid} ({assigned.get('name')}), but cuda:0 in its process is "
                     f"GPU-{seen} ({props.name}): CUDA_VISIBLE_DEVICES did not reach the capture process")
    return rec, None


def capture(spec: dict, trace_path: Path) -> dict:
    """:func:`run_capture` under the device's capture lock (:func:`attnprof.measure.lock.device_lock`); the record
    says how long the capture waited for it (``lock_wait_s``)."""
    with device_lock(spec["device"], (spec.get("gpu") or {}).get("uuid")) as waited_s:
        record = run_capture(spec, trace_path)
    record["lock_wait_s"] = waited_s
    return record


def run_capture(spec: dict, trace_path: Path) -> dict:
    """Run the capture described by ``spec`` in this process; write the gzipped Chrome
    trace to ``trace_path`` and return the status record (never raises for a variant's
    own failure; phases and statuses: module docstring). ``spec`` keys: variant, custom (a
    user variant's {function, setup}; absent for the built-in ones), shape (Shape fields), device ('cuda'|'cpu'), schedule {wait, warmup, active}, warmup_calls,
    timing {repeats, input_sets[, budget_s, min_repeats]}, seed, tolerance {dtype: float}, range_name, passes (optional, default ["forward"]),
    repeat (optional, 1-based, default 1: a later repeat runs the profile phase only); and the
    test-only ``_test_*`` keys. Times in the record are seconds (``*_s``) or ms (timing)."""
    t_start = time.perf_counter()
    if spec["variant"] == CONTROL:  # the profiler's control (attnprof.analysis.control): a fixed forward, no backward
        spec = {**spec, "passes": ["forward"]}
    shape = Shape(**spec["shape"])
    device = spec["device"]
    record = _new_record(spec, shape, time.time())
    import torch

    record.update(torch_import_s=round(time.perf_counter() - t_start, 3), torch_version=torch.__version__,
                  torch_threads=torch.get_num_threads(), forward_flops=shape.forward_flops(),
                  min_bytes=shape.min_bytes(),
                  device_name=torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available()
                  else platform.processor() or platform.machine())
    _test_hooks(spec)
    if not _device_refusal(spec, record, device):
        _run_phases(spec, shape, device, trace_path, record)
    record["capture_wall_s"] = round(time.perf_counter() - t_start, 3)
    return record


def _new_record(spec: dict, shape: Shape, started_at: float) -> dict:
    """The status record of a capture about to start (status ``failed`` until a phase says otherwise)."""
    return {
        "variant": spec["variant"],
        **({"custom": spec["custom"]} if spec.get("custom") else {}),
        "shape_key": shape.key,
        # which of the config's repeats this capture is (1-based); repeats after the first run the profile phase only
        "repeat": int(spec.get("repeat", 1)),
        **shape.as_dict(),
        "device": spec["device"],
        "status": "failed",
        "reason": "",
        "warnings": [],
        "schedule": spec["schedule"],
        "range_name": spec["range_name"],
        # the backward's range, when the config asked for it (attnprof.analysis.backward)
        **({"backward_range_name": backward_range_name(spec["range_name"])}
           if "backward" in (spec.get("passes") or ["forward"]) else {}),
        "min_complete_forwards": _min_complete(spec),
        "phases": {},
        # when this process began the capture (epoch s): with capture_wall_s, the span of its GPU
        # work (started_at/finished_at in status.json also hold the wait for the capture worker)
        "capture_started_at": round(started_at, 3),
        # what else the host was doing when this capture started (1-minute load average)
        "host": host_load(),
        # what this process was given to see (the job pins its GPU by UUID: attnprof.measure.gpus.pinned_environ)
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def _device_refusal(spec: dict, record: dict, device: str) -> bool:
    """Record the GPU this capture runs on; True (``record`` then says why, every phase unrun) when it must not
    run: another GPU than its job holds (and its lock names), or CUDA asked for where torch has none."""
    import torch

    cuda = device == "cuda" and torch.cuda.is_available()
    why, status = None, "failed"
    if cuda:
        record["gpu"], why = gpu_record(spec.get("gpu"))
        if why:  # the capture would run on another GPU than its job holds: no measurement
            record["gpu_mismatch"] = True
    elif spec.get("gpu"):
        record["gpu"] = dict(spec["gpu"])
    if device == "cuda" and not cuda:
        why, status = ("cuda requested but torch.cuda.is_available() is False (no GPU or a CPU-only torch build)",
                       "unsupported")
        record["unsupported_reasons"] = []
    if why is None:
        return False
    record.update(status=status, reason=why)
    record["phases"] = {"profile": {"status": status, "reason": why, "seconds": 0.0,
                                    **({"unsupported_reasons": []} if status == "unsupported" else {})},
                        **{name: _skipped("profile phase did not succeed") for name in PHASES[1:]}}
    return True


def _run_phases(spec: dict, shape: Shape, device: str, trace_path: Path, record: dict) -> None:
    """The profile phase, its trace's self-check, then the later phases (here, or apart in the check process:
    spec ``checks_apart``), into ``record``; warnings raised meanwhile into ``record["warnings"]``."""
    import torch

    st = types.SimpleNamespace(forward=None, sets=None, out=None, grad_inputs=None, grad_out=None)  # what the phases share
    with warnings.catch_warnings(record=True) as caught, contextlib.ExitStack() as stack:
        warnings.simplefilter("always")
        stack.enter_context(torch.no_grad())
        outcome, produced = _run_phase("profile", lambda: _profile_phase(spec, shape, device, trace_path, st, stack,
                                                                         caught),
                                       spec, device, caught)
        _after_profile(spec, device, trace_path, record, outcome, produced)
        apart = bool(spec.get("checks_apart")) and record["repeat"] == 1 and record["status"] == "ok"
        _later_phases(spec, record, st, device, caught, None if apart else _later_calls(spec, shape, st, device))
        if apart:
            record["checks"] = CHECKS_APART
        _note_missing_checks(record)
        record["warnings"] = sorted({str(w.message) for w in caught})


def _after_profile(spec: dict, device: str, trace_path: Path, record: dict, outcome: dict, produced: dict) -> None:
    """The profile phase's outcome into ``record``: its status, the passes, the trace's self-check
    (:func:`check_own_trace`) when it succeeded, and what explains a failure."""
    record["phases"]["profile"] = outcome
    record.update(produced, status=outcome["status"], reason=outcome["reason"])
    if "backward" in (spec.get("passes") or ["forward"]) and "passes" not in record:
        record["passes"] = {"forward": {"status": outcome["status"], "reason": outcome["reason"]},
                            "backward": _skipped("profile phase did not succeed")}
    if record["status"] == "ok":
        record.update(check_own_trace(trace_path, spec, record.get("passes")))
    if outcome["status"] == "ok":
        return
    record.update({key: outcome[key] for key in ("traceback", "unsupported_reasons") if key in outcome})
    if outcome["status"] == "out_of_memory":
        record["oom_bytes"] = oom_bytes(record["reason"])
    if device == "cpu" and not spec.get("custom") and not runs_on(spec["variant"], device):
        record["reason"] += CPU_BACKENDS_NOTE


#: ``record["checks"]`` of a repeat-1 capture whose later phases run in the worker's check process
#: (:func:`run_checks`, spec ``checks_apart``), not in the process that profiled: until
#: :func:`merge_checks` fills them in, those phases read ``skipped`` with this reason.
CHECKS_APART = "run apart, in the check process"


def _later_calls(spec: dict, shape: Shape, st, device: str) -> dict:
    """The later phases' work by name (:data:`PHASES` after ``profile``), each a function returning the record keys
    it produces; ``st`` holds the forward, the input sets and the last output."""
    budget = (spec["timing"]["repeats"], spec["timing"].get("budget_s"), spec["timing"].get("min_repeats", 10))
    return {
        "correctness": lambda: _correctness_phase(spec, shape, st),
        "grad_correctness": lambda: _grad_correctness_phase(spec, shape, st),
        "timing": lambda: {"timing": _time_calls(st.forward, st.sets, device, *budget)},
        "graph_timing": lambda: {"graph_timing": _time_graph(st.forward, *st.sets[0], *budget)},
        "input_types": lambda: {"op_input_types": _op_input_types(st.forward, *st.sets[0])},
    }


def _skip_reason(name: str, spec: dict, record: dict, device: str) -> str | None:
    """Why the later phase ``name`` does not run for this capture (None: it runs)."""
    passes = record.get("passes") or {}
    reasons = (
        (record["status"] != "ok", "profile phase did not succeed"),
        (name == "graph_timing" and device != "cuda", "CPU run"),
        (name == "correctness" and spec["variant"] == CONTROL, CONTROL_NOT_CHECKED),
        (name == "graph_timing" and _long_call(record), LONG_CALL_NOTE),
        (name == "grad_correctness" and "backward" not in passes, "forward-only run (passes has no backward)"),
        (name == "grad_correctness" and passes.get("backward", {}).get("status", "ok") != "ok",
         f"backward pass {passes.get('backward', {}).get('status')}"),
        # the trace is what a repeat re-draws (the between-run interval); the correctness check, the independent
        # timing and the op input types are measured once, in repeat 1
        (record["repeat"] > 1, f"repeat {record['repeat']}: this phase runs in repeat 1 only"),
    )
    return next((why for hit, why in reasons if hit), None)


#: graph_timing's reason for a forward of :data:`LONG_CALL_MS` or more (:func:`_long_call`).
LONG_CALL_NOTE = (f"single call of {LONG_CALL_MS:g} ms or more (CUDA events): launch gaps are under 1 % of it "
                  "(capture.LONG_CALL_MS); the event-timed calls measure it")


def _long_call(record: dict) -> bool:
    """Whether the capture's event-timed calls (CUDA) took :data:`LONG_CALL_MS` or more (median)."""
    timing = record.get("timing") or {}
    return timing.get("method") == "cuda_events" and (timing.get("median_ms") or 0.0) >= LONG_CALL_MS


def _later_phases(spec: dict, record: dict, st, device: str, caught: list, later: dict | None) -> None:
    """Run (or record as skipped, :func:`_skip_reason`) every later phase into ``record["phases"]`` and the keys they
    produce into ``record``. ``later``: :func:`_later_calls`; None when they run apart (:data:`CHECKS_APART`)."""
    for name in PHASES[1:]:
        why = _skip_reason(name, spec, record, device) or (CHECKS_APART if later is None else None)
        if why is not None:
            record["phases"][name] = _skipped(why)
        else:
            log(f"phase {name}")
            record["phases"][name], produced = _run_phase(name, later[name], spec, device, caught)
            record.update(produced)
        if name == "correctness":
            st.out = None  # the output is not needed after the check: free it for the later phases
        if name == "grad_correctness":
            st.grad_inputs = st.grad_out = None  # nor the backward's inputs after theirs


def _note_missing_checks(record: dict) -> None:
    """``checks_missing``: "phase: status: reason" of each later phase of an ``ok`` capture that did not succeed
    (and ``graph_timing.error``, which summary.csv's graph_error column reads)."""
    if record["status"] != "ok":
        return
    missing = {n: p for n, p in record["phases"].items() if p["status"] not in ("ok", "skipped")}
    record["checks_missing"] = [f"{n}: {p['status']}: {p['reason']}" for n, p in missing.items()]
    if "graph_timing" in missing:
        record["graph_timing"] = {"error": missing["graph_timing"]["reason"][:500]}


def _checks_setup(spec: dict, shape: Shape, device: str, st, stack: contextlib.ExitStack, backward: bool) -> None:
    """The check process's set-up for :func:`run_checks`: what :func:`_profile_phase` leaves in ``st`` before its
    profile (the forward, the input sets, the warm-up calls, the backward's leaf inputs and output gradient), then
    one forward of the first input set, whose output the float64 check reads (the profiled steps ran the same
    forward on the same inputs)."""
    q, k, v = _set_up(spec, shape, device, st, stack)
    for _ in range(spec["warmup_calls"]):
        st.out = st.forward(q, k, v)
    if backward:
        _backward_setup(spec, shape, device, st, q, k, v)
    st.out = st.forward(q, k, v)
    _sync(device)


def run_checks(spec: dict, passes: dict | None = None) -> dict:
    """The later phases of a repeat-1 capture (:data:`PHASES` after ``profile``: the float64 checks, the
    independent timing, the CUDA-graph replays, the op input types), run in a process that profiles nothing:
    the worker's check process (:mod:`attnprof.runtime.worker`). So every profiled process runs the same work
    before its profile, whatever the round, and repeat 1 is a repeat like the others (docs/statistics.md).
    ``spec``: the capture's; ``passes``: its record's pass outcomes (the backward's check runs when the backward
    succeeded). Holds the device's capture lock (:func:`attnprof.measure.lock.device_lock`). Returns
    {phases: {name: outcome}, the keys the phases produce, warnings: [str], pid, seconds}; a set-up that fails
    is every phase's outcome (status and reason)."""
    with device_lock(spec["device"], (spec.get("gpu") or {}).get("uuid")):
        return _run_checks(spec, passes)


def _run_checks(spec: dict, passes: dict | None) -> dict:
    import torch

    t0 = time.perf_counter()
    shape, device = Shape(**spec["shape"]), spec["device"]
    record = {"repeat": 1, "status": "ok", "phases": {}, **({"passes": passes} if passes else {})}
    backward = "backward" in (passes or {}) and passes["backward"].get("status") == "ok"
    st = types.SimpleNamespace(forward=None, sets=None, out=None, grad_inputs=None, grad_out=None)
    with warnings.catch_warnings(record=True) as caught, contextlib.ExitStack() as stack:
        warnings.simplefilter("always")
        stack.enter_context(torch.no_grad())
        setup, _ = _run_phase("setup", lambda: _checks_setup(spec, shape, device, st, stack, backward), spec, device,
                              caught)
        if setup["status"] == "ok":
            _later_phases(spec, record, st, device, caught, _later_calls(spec, shape, st, device))
        else:
            record["phases"] = {name: {**setup, "reason": f"set-up in the check process: {setup['reason']}"}
                                for name in PHASES[1:]}
        record["warnings"] = sorted({str(w.message) for w in caught})
    kept = {k: v for k, v in record.items() if k not in ("repeat", "status", "passes")}  # _skip_reason's inputs
    return {**kept, "pid": os.getpid(), "seconds": round(time.perf_counter() - t0, 3)}


def merge_checks(record: dict, result: dict | None, error: str = "") -> dict:
    """Fill a repeat-1 capture's later phases (``record["checks"]`` :data:`CHECKS_APART`) from :func:`run_checks`'
    ``result``; with no result, each such phase is ``failed`` with ``error`` (the check process's crash or traceback),
    so ``checks_missing`` names it. A phase skipped for its own reason (a CPU run's CUDA graph, say) stays skipped.
    Returns ``record``, changed in place."""
    if record.get("checks") != CHECKS_APART:
        return record
    apart = [n for n, p in record["phases"].items() if p.get("reason") == CHECKS_APART]
    if result is None:
        record["phases"].update({name: {"status": "failed", "reason": f"check process: {error}"[:2000], "seconds": 0.0}
                                 for name in apart})
        record["checks"] = {"error": error[:2000]}
    else:
        record.update({k: v for k, v in result.items() if k not in ("phases", "warnings", "pid", "seconds")})
        record["phases"].update({n: result["phases"][n] for n in apart if n in result["phases"]})
        record["warnings"] = sorted(set(record.get("warnings", [])) | set(result.get("warnings", [])))
        record["checks"] = {"pid": result["pid"], "seconds": result["seconds"]}
    _note_missing_checks(record)
    return record


def _min_complete(spec: dict) -> int:
    from attnprof.analysis.completeness import DEFAULT_MIN_COMPLETE_FORWARDS  # pandas is imported only where a trace is read

    return int(spec.get("min_complete_forwards", DEFAULT_MIN_COMPLETE_FORWARDS))


def check_own_trace(trace_path: Path, spec: dict, passes: dict | None = None) -> dict:
    """Read back the trace the profiler just wrote and apply the completeness rule
    (:func:`attnprof.analysis.completeness.assess_forwards`) with the spec's schedule ``active`` and
    ``min_complete_forwards``. Returns the record fields to set: always ``trace_check``
    (forwards expected/profiled/complete/timed and the note); and, when the trace cannot
    be read, ``status`` failed with the TraceError; when it has too few complete forwards,
    ``status`` incomplete_trace with a reason that names the file and both counts.

    ``passes``: the record's pass outcomes; when the backward was profiled (``ok``), the same rule
    is applied to the backward ranges (:func:`attnprof.analysis.completeness.analyse_passes`): ``trace_check``
    gets ``backward`` (the same counts), and too few complete backwards make the returned
    ``passes`` say ``incomplete_trace`` for the backward -- never for the capture."""
    from attnprof.analysis.completeness import (analyse_passes, analyse_trace, as_backward, assess_forwards,
                                                backward_table, forward_table, incomplete_reason)
    from attnprof.analysis.trace import TraceError, load_trace

    try:
        trace = load_trace(trace_path)
    except TraceError as exc:
        return {"status": "failed", "reason": f"TraceError: {exc}"}
    backward = bool(passes) and passes.get("backward", {}).get("status") == "ok"
    if backward:
        frames, bwd_frames = analyse_passes(trace, spec["range_name"], expect_gpu=spec["device"] == "cuda")
    else:
        frames = analyse_trace(trace, spec["range_name"], expect_gpu=spec["device"] == "cuda")
    forwards = forward_table(frames, spec["variant"], "")
    verdict = assess_forwards(forwards, spec["schedule"]["active"], _min_complete(spec))
    out = {"trace_check": {k: verdict[k] for k in ("forwards_expected", "forwards_profiled", "forwards_complete",
                                                   "forwards_timed", "bad_time_events", "note")}}
    if not verdict["sufficient"]:
        out.update(status="incomplete_trace", reason=incomplete_reason(trace_path, verdict))
    log(f"trace check: {verdict['forwards_complete']} of {verdict['forwards_expected']} forwards complete"
        + (f" ({verdict['note']})" if verdict["note"] else ""))
    if backward:
        bwd = backward_table(bwd_frames, spec["variant"], "").rename(columns={"backward": "forward"})
        bv = assess_forwards(bwd, spec["schedule"]["active"], _min_complete(spec))
        out["trace_check"]["backward"] = {k: as_backward(bv[k]) if k == "note" else bv[k]
                                          for k in ("forwards_expected", "forwards_profiled", "forwards_complete",
                                                    "forwards_timed", "bad_time_events", "note")}
        if not bv["sufficient"]:
            reason = (f"{trace_path}: {bv['forwards_complete']} complete backwards of {bv['forwards_expected']} profiled, "
                      f"fewer than the minimum of {bv['minimum']}; {as_backward(bv['note'])}")
            out["passes"] = {**passes, "backward": {**passes["backward"], "status": "incomplete_trace", "reason": reason}}
        log(f"trace check: {bv['forwards_complete']} of {bv['forwards_expected']} backwards complete"
            + (f" ({as_backward(bv['note'])})" if bv["note"] else ""))
    return out
