"""Capture on the CPU: statuses, isolation, killed captures, phases, the float64 reference."""
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import attnprof.measure.capture as capture_mod
from attnprof.measure.capture import DEFAULT_TOLERANCE, PHASES, capture, classify_exception, unsupported_reasons
from attnprof.runtime.isolation import CaptureInterrupted, run_isolated
from attnprof.analysis.trace import load_trace
from attnprof.model.variants import COMPILED, VARIANTS, Shape, runs_on
from attnprof.measure.forwards import make_forward, reference_attention, relative_error

SHAPE = Shape(1, 2, 64, 32, "fp32", True)


def spec(variant, **kw):
    base = {"variant": variant, "shape": SHAPE.as_dict(), "device": "cpu", "schedule": {"wait": 1, "warmup": 1, "active": 2},
            "warmup_calls": 1, "range_name": "attn_fwd", "timing": {"repeats": 3, "input_sets": 2}, "seed": 0,
            "tolerance": DEFAULT_TOLERANCE, "min_complete_forwards": 2}
    return {**base, **kw}


# the CUDA-only backends are refused on the CPU (next tests); the torch.compile variants have their own
# tests (test_compiled.py: a compile costs seconds)
@pytest.mark.parametrize("variant", [v for v in VARIANTS if runs_on(v, "cpu") and v not in COMPILED])
def test_variants_match_float64_reference_on_cpu(variant):
    q, k, v = (torch.randn(1, 2, 64, 32) for _ in range(3))
    forward, ctx = make_forward(variant, SHAPE, "cpu")
    with torch.no_grad(), ctx:
        out = forward(q, k, v)
    ref = reference_attention(q, k, v, causal=True)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_run_isolated_ok_writes_trace_and_status(fresh_capture):
    rec, trace_path, status_path = fresh_capture("sdpa_math")  # run_isolated, once for the tests that read it
    assert rec["status"] == "ok" and rec["rel_error_ok"] and rec["timing"]["repeats"] == 3
    trace = load_trace(trace_path)
    assert sum(e.get("name") == "attn_fwd" and e.get("cat") == "user_annotation" for e in trace["traceEvents"]) == 2
    assert json.loads(status_path.read_text())["started_at"] <= rec["finished_at"]


@pytest.mark.slow
def test_cuda_only_backend_is_unsupported_on_cpu_with_pytorchs_reason(tmp_path):
    rec = run_isolated(spec("sdpa_efficient"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "unsupported" and "RuntimeError" in rec["reason"]
    assert rec["reason"].endswith("offers only the FLASH_ATTENTION and MATH backends]")  # its registration: devices cuda
    assert load_trace(tmp_path / "t.json.gz")["traceEvents"] == []  # placeholder, marked as such


@pytest.mark.slow
def test_missing_gpu_is_recorded_not_raised(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    rec = run_isolated(spec("sdpa_flash", device="cuda"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "unsupported" and "cuda" in rec["reason"].lower()
    assert rec["phases"]["profile"]["status"] == "unsupported"
    assert all(rec["phases"][n]["status"] == "skipped" for n in PHASES[1:])


@pytest.mark.slow
def test_timeout_becomes_failed(tmp_path):
    rec = run_isolated(spec("naive"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=0.05)
    assert rec["status"] == "failed" and "timed out" in rec["reason"]


def test_classify_exception():
    assert classify_exception(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "out_of_memory"
    assert classify_exception(RuntimeError("No available kernel. Aborting execution.")) == "unsupported"
    assert classify_exception(ValueError("boom")) == "failed"


def test_shape_key_round_trip_and_flops():
    s = Shape(8, 16, 1024, 64, "bf16", True)
    assert Shape.from_key(s.key) == s
    # sdpa.py convention: B*H*(4*S*S*D + 2*S*S), halved when causal
    assert s.forward_flops() == 8 * 16 * (4 * 1024 * 1024 * 64 + 2 * 1024 * 1024) / 2
    with pytest.raises(ValueError):
        Shape.from_key("nonsense")


# --- the blockwise float64 reference -------------------------------------------------------

def full_reference(q, k, v, causal):
    """Straightforward float64 attention on whole tensors: softmax(q k^T / sqrt(D) + mask) v."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[-2]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("causal", [True, False])
def test_blockwise_reference_equals_full_computation(causal):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 100, 16, generator=gen) for _ in range(3))  # block 24 does not divide S=100
    full = full_reference(q, k, v, causal)
    assert torch.allclose(reference_attention(q, k, v, causal, block=24), full, rtol=0, atol=1e-12)
    # PyTorch's own SDPA in float64, an implementation independent of both
    sdpa = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert torch.allclose(reference_attention(q, k, v, causal, block=24), sdpa, rtol=0, atol=1e-12)
    out = (full + 1e-3 * torch.randn(full.shape, generator=gen, dtype=torch.float64)).float()
    expected = (torch.linalg.vector_norm(out.double() - full) / torch.linalg.vector_norm(full)).item()
    assert relative_error(out, q, k, v, causal, block=24) == pytest.approx(expected, rel=1e-9)


def test_relative_error_of_deliberately_wrong_outputs():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 50, 8, generator=gen) for _ in range(3))
    ref = full_reference(q, k, v, True)
    # ||0 - ref|| / ||ref|| = 1 and ||1.5 ref - ref|| / ||ref|| = 0.5, by the norm's homogeneity
    assert relative_error(torch.zeros(1, 2, 50, 8), q, k, v, True, block=7) == pytest.approx(1.0, rel=1e-12)
    assert relative_error(1.5 * ref, q, k, v, True, block=7) == pytest.approx(0.5, rel=1e-12)
    # the full (non-causal) attention as a stand-in for the causal one: a mask bug
    wrong = full_reference(q, k, v, False)
    expected = (torch.linalg.vector_norm(wrong - ref) / torch.linalg.vector_norm(ref)).item()
    assert expected > 0.1 and relative_error(wrong, q, k, v, True, block=7) == pytest.approx(expected, rel=1e-9)
    with pytest.raises(ValueError):
        relative_error(torch.zeros(1, 2, 50, 9), q, k, v, True)


def test_a_kept_reference_is_computed_once_per_inputs_and_gives_the_blockwise_error(monkeypatch):
    """The check process computes the float64 reference once per shape and input set (forwards.kept_reference):
    the relative error against it is the blockwise one, a second variant's check of the same inputs computes no new
    reference, inputs changed in place get their own, and one above the bound is not kept."""
    import attnprof.measure.forwards as fw

    monkeypatch.setattr(fw, "_KEPT", {})
    made = []
    monkeypatch.setattr(fw, "reference_attention", lambda *a, **kw: made.append(1) or reference_attention(*a, **kw))
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 40, 8, generator=gen) for _ in range(3))
    full = full_reference(q, k, v, True)
    outs = [(full + s * torch.randn(full.shape, generator=gen, dtype=torch.float64)).float() for s in (1e-3, 3e-2)]
    for out in outs:  # two variants' outputs at one shape
        expected = (torch.linalg.vector_norm(out.double() - full) / torch.linalg.vector_norm(full)).item()
        kept = fw.kept_reference(q, k, v, True)
        assert relative_error(out, q, k, v, True, reference=kept) == pytest.approx(expected, rel=1e-9)
    assert len(made) == 1
    k[0, 0, 0, 0] += 1.0  # changed in place: not the same inputs (every causal row sees key 0)
    assert not torch.equal(fw.kept_reference(q, k, v, True), kept) and len(made) == 2
    monkeypatch.setattr(fw, "REFERENCE_KEEP_BYTES", full.numel() * 8 - 1)
    assert fw.kept_reference(q, k, v, False) is None


@pytest.mark.parametrize("first_ms,expected", [(30.0, 3), (24.0, 10)])
def test_a_long_call_is_timed_fewer_times_and_not_replayed_in_a_graph(first_ms, expected):
    """capture.LONG_CALL_MS: a forward of 25 ms or more stops at LONG_CALL_REPEATS event-timed calls once the
    budget is spent (here at once), one under it at min_repeats; its graph replays are skipped with the reason."""
    times = capture_mod._timed_loop(lambda i: first_ms, 50, 0.0, 10, capture_mod.LONG_CALL_MS)
    assert len(times) == expected
    assert len(capture_mod._timed_loop(lambda i: 30.0, 50, 0.0, 10)) == 10  # a CPU run: no long-call rule
    record = {"status": "ok", "repeat": 1, "timing": {"method": "cuda_events", "median_ms": first_ms}}
    why = capture_mod._skip_reason("graph_timing", spec("naive", device="cuda"), record, "cuda")
    assert why == (capture_mod.LONG_CALL_NOTE if first_ms >= 25 else None)


# --- phases ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_failed_later_phase_keeps_the_trace_and_the_other_phases(tmp_path):
    rec = run_isolated(spec("naive", _test_fail_phase="correctness"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "ok" and list(rec["phases"]) == list(PHASES)
    assert rec["phases"]["correctness"]["status"] == "out_of_memory"
    assert rec["phases"]["timing"]["status"] == "ok" and rec["timing"]["repeats"] == 3
    assert rec["phases"]["input_types"]["status"] == "ok" and rec["op_input_types"]
    assert rec["phases"]["graph_timing"] == {"status": "skipped", "reason": "CPU run", "seconds": 0.0}
    assert "rel_error" not in rec and "rel_error_ok" not in rec
    assert len(rec["checks_missing"]) == 1 and rec["checks_missing"][0].startswith("correctness: out_of_memory: OutOfMemoryError")
    trace = load_trace(tmp_path / "t.json.gz")  # the real trace, not a placeholder
    assert sum(e.get("name") == "attn_fwd" and e.get("cat") == "user_annotation" for e in trace["traceEvents"]) == 2


def test_every_phase_ok_on_a_plain_cpu_capture(fresh_capture):
    rec, _, _ = fresh_capture("sdpa_math")
    assert {n: p["status"] for n, p in rec["phases"].items()} == {
        "profile": "ok", "correctness": "ok", "grad_correctness": "skipped", "timing": "ok", "graph_timing": "skipped",
        "input_types": "ok"}
    assert rec["checks_missing"] == [] and all(p["seconds"] >= 0 for p in rec["phases"].values())


@pytest.mark.slow
def test_failed_profile_phase_skips_the_rest(tmp_path):
    rec = run_isolated(spec("naive", _test_fail_phase="profile"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "out_of_memory" and rec["oom_bytes"] == 2**30  # the hook's "Tried to allocate 1.00 GiB"
    assert all(rec["phases"][n] == {"status": "skipped", "reason": "profile phase did not succeed", "seconds": 0.0} for n in PHASES[1:])
    assert "checks_missing" not in rec and load_trace(tmp_path / "t.json.gz")["traceEvents"] == []


# --- why a backend is unsupported ------------------------------------------------------------

# Texts as PyTorch emits them: what torch 2.11.0+cu130 warned on an H200 for a pinned FLASH_ATTENTION
# backend at head_dim 512 (wording of aten/src/ATen/native/transformers/cuda/sdp_utils.cpp and
# sdp_utils_cpp.h; TORCH_WARN appends the "(Triggered internally at <file>:<line>.)" location).
SDP = "/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp"
SDP_H = "/pytorch/aten/src/ATen/native/transformers/sdp_utils_cpp.h"
FLASH_D512 = ("Flash attention requires q,k,v to have the same last dimension and to be less than or equal to 256. "
              "Got Query.size(-1): 512, Key.size(-1): 512, Value.size(-1): 512 instead.")
DTYPE_FP32 = ("Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float, "
              "Key dtype: float, and Value dtype: float instead.")
PROFILER = ("Warning: Profiler clears events at the end of each cycle. Only events from the current cycle will be "
            "reported. To keep events across cycles, set acc_events=True.")


def at(text, file, line):
    return f"{text} (Triggered internally at {file}:{line}.)"


H200_FLASH_D512 = [
    at("Memory efficient kernel not used because:", SDP, 986),
    at("Memory Efficient attention has been runtime disabled.", SDP_H, 552),
    at("Flash attention kernel not used because:", SDP, 988),
    at(FLASH_D512, SDP, 180),
    at("cuDNN attention kernel not used because:", SDP, 990),
    at("cuDNN attention has been runtime disabled.", SDP, 706),
]


def test_unsupported_reasons_keeps_the_pinned_backends_reasons_in_order():
    assert unsupported_reasons(H200_FLASH_D512) == ["Flash attention kernel not used because:", FLASH_D512]
    # profiler and other ops' warnings interleaved, a second failing call repeating the texts, two reasons
    messages = [PROFILER, *H200_FLASH_D512[:4], at(DTYPE_FP32, SDP_H, 91), *H200_FLASH_D512[4:], *H200_FLASH_D512,
                at("Some unrelated op warning.", "/pytorch/aten/src/ATen/native/Copy.cpp", 10)]
    assert unsupported_reasons(messages) == ["Flash attention kernel not used because:", FLASH_D512, DTYPE_FP32]
    assert unsupported_reasons([PROFILER]) == [] and unsupported_reasons([]) == []
    # without a source location (a build that drops it), the SDPA wording still counts; older torch says "CuDNN"
    assert unsupported_reasons(["CuDNN attention kernel not used because:", "head_dim should be no more than 128", PROFILER]) == [
        "CuDNN attention kernel not used because:", "head_dim should be no more than 128"]


def test_unsupported_capture_names_pytorchs_reasons(tmp_path, monkeypatch):
    """A forward PyTorch's CPU dispatcher refuses (3-D inputs with FLASH_ATTENTION pinned): the
    reasons are the warnings PyTorch really emits, not the profiler's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def make_3d_forward(variant, shape, device, custom=None):
        def forward(q, k, v):
            warnings.warn(PROFILER, stacklevel=1)  # unrelated, must be left out
            return F.scaled_dot_product_attention(q[0], k[0], v[0], is_causal=shape.causal)
        return forward, sdpa_kernel(SDPBackend.FLASH_ATTENTION)

    monkeypatch.setattr(capture_mod, "make_forward", make_3d_forward)
    rec = capture(spec("sdpa_flash"), tmp_path / "t.json.gz")
    # wording of check_tensor_shapes in sdp_utils_cpp.h; q[0] is [heads, S, D]: 3 dimensions
    four_d = "All fused kernels requires query, key and value to be 4 dimensional, but got Query dim: 3, Key dim: 3, Value dim: 3 instead."
    assert rec["status"] == "unsupported"
    assert rec["unsupported_reasons"] == ["Flash attention kernel not used because:", four_d]
    assert rec["reason"].startswith("RuntimeError: No available kernel.")
    assert rec["reason"].endswith(f" Because: Flash attention kernel not used because: {four_d}")
    assert PROFILER not in rec["reason"] and PROFILER in rec["warnings"]


def test_cpu_note_and_phases_for_a_cuda_only_backend(fresh_capture):
    rec, _, _ = fresh_capture("sdpa_cudnn")
    assert rec["status"] == "unsupported" and rec["reason"].endswith(capture_mod.CPU_BACKENDS_NOTE)
    assert rec["phases"]["profile"]["status"] == "unsupported" and isinstance(rec["unsupported_reasons"], list)


# --- killed captures -------------------------------------------------------------------------

def alive(pid: int) -> bool:
    """A process exists and is not a zombie (/proc/<pid>/stat state)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_for_pid(path: Path, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    # the file can exist before its writer has written the number: wait for the whole line
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, "the capture process never wrote its pid"
        time.sleep(0.05)
    return int(path.read_text())


def wait_gone(pid: int, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


RUN_ISOLATED = ("import json, sys; from attnprof.runtime.isolation import run_isolated; "
                "run_isolated(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], timeout_s=600)")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow
def test_capture_process_dies_with_its_parent(tmp_path, sig):
    pid_file = tmp_path / "child.pid"
    sp = spec("naive", _test_sleep_s=120, _test_pid_file=str(pid_file))
    parent = subprocess.Popen([sys.executable, "-c", RUN_ISOLATED, json.dumps(sp), str(tmp_path / "t.json.gz"), str(tmp_path / "s.json")])
    child = None
    try:
        child = wait_for_pid(pid_file)
        ppid = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert ppid == parent.pid  # the capture process is run_isolated's child
        parent.send_signal(sig)
        # SIGKILL: no cleanup possible, the kernel's parent-death signal kills the child; SIGTERM/SIGINT:
        # run_isolated kills the child itself and exits with 128 + signal (the shell's convention)
        assert parent.wait(timeout=10) == (-sig if sig == signal.SIGKILL else 128 + sig)
        assert wait_gone(child), f"capture process {child} outlived its parent killed by {sig.name}"
        assert not (tmp_path / "s.json").exists() and not (tmp_path / "t.json.gz").exists()
    finally:
        for pid in (parent.pid, child):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.wait()


DIE_WITH_PARENT = ("import os, sys, time; sys.platform = sys.argv[1]; from attnprof.runtime.isolation import die_with_parent; "
                   "die_with_parent(int(sys.argv[2])); open(sys.argv[3], 'w').write(str(os.getpid())); time.sleep(60)")
MIDDLE = ("import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2], str(os.getpid()), "
          "sys.argv[3]]); time.sleep(60)")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("platform", ["linux", "darwin"])  # prctl(PR_SET_PDEATHSIG), and the watcher thread used elsewhere
def test_die_with_parent_mechanisms(tmp_path, platform):
    pid_file = tmp_path / "child.pid"
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, DIE_WITH_PARENT, platform, str(pid_file)])
    child = None
    try:
        child = wait_for_pid(pid_file)
        middle.kill()
        middle.wait()
        assert wait_gone(child)
    finally:
        middle.kill()
        middle.wait()
        if child and alive(child):
            os.kill(child, signal.SIGKILL)
    # a parent that is already gone when the child arms itself (here: -1, which is no process's pid)
    lonely = subprocess.run([sys.executable, "-c", DIE_WITH_PARENT, "linux", "-1", str(tmp_path / "never.pid")], timeout=60)
    assert lonely.returncode == 1 and not (tmp_path / "never.pid").exists()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.slow
def test_capture_killed_from_outside_is_interrupted_not_a_result(tmp_path, sig):
    pid_file = tmp_path / "child.pid"

    def kill_child():
        os.kill(wait_for_pid(pid_file), sig)

    killer = threading.Thread(target=kill_child, daemon=True)
    killer.start()
    with pytest.raises(CaptureInterrupted) as info:
        run_isolated(spec("naive", _test_sleep_s=120, _test_pid_file=str(pid_file)), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    killer.join()
    assert "naive" in str(info.value) and SHAPE.key in str(info.value) and sig.name in str(info.value)
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "t.json.gz").exists()
    assert not list(tmp_path.glob("s.*.json"))  # no spec or child status left behind


@pytest.mark.parametrize("crash,signame", [("abort", "SIGABRT"), ("segv", "SIGSEGV")])
@pytest.mark.slow
def test_crash_of_the_capture_is_a_recorded_failure(tmp_path, crash, signame):
    rec = run_isolated(spec("naive", _test_crash=crash), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
    assert rec["status"] == "failed" and rec["reason"].startswith(f"capture process killed by {signame}")
    assert "stderr_tail" in rec and json.loads((tmp_path / "s.json").read_text())["status"] == "failed"
    assert load_trace(tmp_path / "t.json.gz")["traceEvents"] == []  # placeholder



@pytest.mark.slow
def test_a_capture_waits_for_the_device_lock_and_says_how_long(tmp_path):
    """Captures on one machine never overlap, whichever process runs them (two runs with capture
    workers of their own, capture_mode process): a capture starts only once the device's capture
    lock is free (held here by the test for 1 s), and its record says how long it waited."""
    import fcntl

    from attnprof.measure.lock import capture_lock_path

    released = {}
    with open(capture_lock_path("cpu"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)

        def release():
            time.sleep(1.0)
            released["at"] = time.time()
            fcntl.flock(fh, fcntl.LOCK_UN)

        releaser = threading.Thread(target=release)
        releaser.start()
        rec = run_isolated(spec("naive"), tmp_path / "t.json.gz", tmp_path / "s.json", timeout_s=300)
        releaser.join()
    assert rec["status"] == "ok"
    assert rec["capture_started_at"] >= released["at"] - 0.01 and rec["lock_wait_s"] > 0
    with open(capture_lock_path("cpu"), "a") as fh:  # and the capture let it go when it ended
        fcntl.flock(fh, fcntl.LOCK_EX)


def test_the_capture_lock_is_one_file_per_machine_whatever_tmpdir_says(monkeypatch, tmp_path):
    """A job's TMPDIR follows its Snakemake tmpdir resource: two runs must still lock one file."""
    from attnprof.measure.lock import LOCK_DIR, capture_lock_path, device_lock

    monkeypatch.delenv("ATTNPROF_CAPTURE_LOCK_DIR")
    before = capture_lock_path("cuda")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert capture_lock_path("cuda") == before and before.parent == Path(LOCK_DIR)
    monkeypatch.setenv("ATTNPROF_CAPTURE_LOCK_DIR", str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="cannot be opened .*ATTNPROF_CAPTURE_LOCK_DIR"):
        with device_lock("cpu"):
            pass
