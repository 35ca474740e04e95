"""The capture worker (attnprof.runtime.worker) on the CPU: reuse, restart after any failure,
crashes, timeouts, killed captures and killed jobs, and the same numbers as a fresh process."""
import json
import os
import signal
import subprocess
import sys
import threading
import time


import pytest

from attnprof.analysis.tables import analyse_trace, kernel_table, op_table
from attnprof.analysis.trace import load_trace
from attnprof.runtime.isolation import CaptureInterrupted
from attnprof.runtime.worker import PRESTART_ENV, _Ahead, _order_of, connect_or_start, reusable, run_in_worker, spares_for
from test_capture import SHAPE, alive, spec, wait_for_pid, wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker uses Linux abstract sockets")

IDLE_S = 20
# this session's own worker: another test session in the same checkout must not share it
os.environ["ATTNPROF_WORKER_TAG"] = f"tests-{os.getpid()}"


def in_worker(tmp_path, sp, name="c", timeout_s=300):
    return run_in_worker(sp, tmp_path / f"{name}.json.gz", tmp_path / f"{name}.status.json", timeout_s, IDLE_S,
                         tmp_path / "worker.log")


def test_reusable_needs_every_phase_ok():
    ok = {"status": "ok", "phases": {"profile": {"status": "ok"}, "graph_timing": {"status": "skipped"}}}
    assert reusable(ok)
    assert not reusable({**ok, "status": "out_of_memory"})
    assert not reusable({**ok, "status": "failed"})
    assert not reusable({**ok, "checks_missing": ["timing: failed: x"]})
    assert not reusable({**ok, "phases": {**ok["phases"], "timing": {"status": "out_of_memory"}}})
    assert not reusable({**ok, "custom": {"function": "my_attention:forward"}})  # its module is imported for good
    refused = {"status": "unsupported", "phases": {"profile": {"status": "unsupported"}, "timing": {"status": "skipped"}}}
    assert reusable(refused)  # the dispatcher refused before any kernel ran
    assert not reusable({**refused, "phases": {**refused["phases"], "timing": {"status": "unsupported"}}})


def test_the_queue_serves_a_round_before_the_next_and_the_process_ending_captures_last_in_it():
    """Requests that arrived in an order where each key could decide: a compiled and a user variant of round 1
    came before the round's built-ins, and round 2 before round 1. Served: round 1's built-ins (one process), then
    its process-ending captures in arrival order, then round 2."""
    arrived = [("r2 naive", {"spec": {"variant": "naive", "repeat": 2}}),
               ("r1 flex", {"spec": {"variant": "flex_attention", "repeat": 1}}),
               ("r1 mine", {"spec": {"variant": "my_attn", "repeat": 1, "custom": {"function": "m:f"}}}),
               ("r1 math", {"spec": {"variant": "sdpa_math", "repeat": 1}}),
               ("env", {"call": "environment"}),
               ("r1 naive", {"spec": {"variant": "naive", "repeat": 1}})]
    pending = [(_order_of(request), seq, name) for seq, (name, request) in enumerate(arrived)]
    served = [name for _, _, name in sorted(pending)]
    assert served == ["env", "r1 math", "r1 naive", "r1 flex", "r1 mine", "r2 naive"]


@pytest.mark.slow
def test_a_request_that_fails_in_a_fresh_process_kills_that_process_before_its_connection_closes():
    """attnprof.runtime.worker._serve_one for a request whose process is taken fresh (none served before it): whatever
    ends the serving (here a timeout that is not a number; SIGTERM alike) kills the process it took before the
    connection closes, not only the one it was given."""
    import socket

    from attnprof.runtime import worker

    ahead, taken = _Ahead("cpu", 0), []
    take = ahead.take
    ahead.take = lambda: taken.append(take()) or taken[-1]
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(ValueError):
        worker._serve_one(ours, None, ahead, {"spec": {"variant": "naive"}, "trace": "t.json.gz", "timeout_s": "soon"})
    assert len(taken) == 1 and taken[0].proc.poll() is not None  # killed (and reaped) before the connection closed


@pytest.mark.slow
def test_worker_serves_captures_in_one_process_with_the_fresh_process_numbers(tmp_path, fresh_capture):
    a = in_worker(tmp_path, spec("naive"), "a")
    b = in_worker(tmp_path, spec("sdpa_math"), "b")
    assert a["status"] == b["status"] == "ok"
    assert b["worker"]["pid"] == a["worker"]["pid"] and b["worker"]["captures_before"] == a["worker"]["captures_before"] + 1
    assert json.loads((tmp_path / "b.status.json").read_text())["worker"] == b["worker"]
    # the same capture in a fresh process (the other design: run_isolated) profiles the same aten ops, as often per forward
    fresh, fresh_trace, _ = fresh_capture("sdpa_math")
    ops = [op_table(analyse_trace(load_trace(path), "attn_fwd"), "sdpa_math", SHAPE.key)
           for path in (tmp_path / "b.json.gz", fresh_trace)]
    assert len(ops[0]) > 3
    assert ops[0][["op", "calls_per_forward"]].equals(ops[1][["op", "calls_per_forward"]])
    assert b["trace_check"]["forwards_complete"] == fresh["trace_check"]["forwards_complete"] == 2
    # each capture is its own profiler session: its trace holds its own forwards only
    for n in ("a", "b"):
        frames = analyse_trace(load_trace(tmp_path / f"{n}.json.gz"), "attn_fwd")
        assert len(frames["ranges"]) == 2
    assert kernel_table(frames, "sdpa_math", SHAPE.key).empty  # CPU run: no GPU events


@pytest.mark.slow
def test_queued_captures_are_served_round_by_round_each_round_in_a_fresh_process(tmp_path):
    """Capture jobs of two rounds waiting at once (Snakemake started more jobs than one round holds): the
    supervisor serves the earlier round first, whatever order they came in, and a new round gets a new capture
    process, shared by its captures."""
    records = {}

    def submit(name, sp):
        records[name] = in_worker(tmp_path, sp, name)

    first = threading.Thread(target=submit, args=("busy", spec("naive", repeat=1, _test_sleep_s=3)))
    first.start()
    time.sleep(1.5)  # the worker is busy with round 1: the next three queue, round 2 first
    queued = [("r2a", spec("naive", repeat=2)), ("r1", spec("sdpa_math", repeat=1)), ("r2b", spec("naive_inplace", repeat=2))]
    threads = []
    for name, sp in queued:
        threads.append(threading.Thread(target=submit, args=(name, sp)))
        threads[-1].start()
        time.sleep(0.3)
    for t in [first, *threads]:
        t.join(120)
    assert all(records[n]["status"] == "ok" for n in ("busy", "r2a", "r1", "r2b")), records
    order = sorted(records, key=lambda n: records[n]["capture_started_at"])
    assert order == ["busy", "r1", "r2a", "r2b"]
    pid = {n: records[n]["worker"]["pid"] for n in records}
    assert pid["busy"] == pid["r1"] != pid["r2a"] == pid["r2b"]
    assert [records[n]["repeat"] for n in order] == [1, 1, 2, 2]


@pytest.mark.slow
def test_a_rounds_process_was_started_ahead_of_its_request(tmp_path, monkeypatch):
    """With processes started ahead (a GPU run; ATTNPROF_WORKER_PRESTART here), round 2's capture process is a spare:
    a fresh process started before the supervisor took round 2's request (without spares a new round's process starts
    after it), where round 1's process started with the supervisor, after the test asked for round 1. Each round
    has a process of its own, and the check process is a third. Told by the order of the records' own timestamps, not
    by how long anything took: the time saved is measured in benchmarks/ (docs/costs.md); this test once compared
    round 1's wait with its start-up, 2.974 against 2.998 s on a loaded CI machine."""
    monkeypatch.setenv(PRESTART_ENV, "1")  # also a worker of its own (the environment is in its key)
    asked = round(time.time(), 3) - 0.001  # the records' times are rounded to the millisecond
    one = in_worker(tmp_path, spec("naive", repeat=1), "a")
    two = in_worker(tmp_path, spec("naive", repeat=2), "b")
    assert one["status"] == two["status"] == "ok"
    assert len({one["worker"]["pid"], two["worker"]["pid"], one["checks"]["pid"]}) == 3
    assert asked <= one["worker"]["started_at"], (asked, one["worker"])
    assert two["worker"]["started_at"] < two["started_at"] and two["worker"]["captures_before"] == 0, two


def test_two_spares_only_for_a_grid_of_few_small_captures():
    """The study (one shape, 8 captures a round; its scores 8 x 16 x 1024 x 1024 = 2^27 elements) keeps two spares;
    a grid with a shape of 2^29 score elements, or of 17 captures a round, keeps one."""
    study = "b8_h16_s1024_d64_bf16_causal"
    assert spares_for([study], 8) == 2
    assert spares_for([study, "b8_h16_s2048_d64_bf16_causal"], 16) == 1
    assert spares_for([study], 17) == 1


def test_a_cpu_supervisor_starts_no_process_ahead(monkeypatch):
    """On a CPU run a spare's start-up would share the cores with a capture's host timings: whatever it is asked to
    keep, a CPU supervisor starts no process until a request takes one."""
    monkeypatch.delenv(PRESTART_ENV, raising=False)
    ahead = _Ahead("cpu", 2)
    assert ahead.keep == 0 and ahead.spares == []


@pytest.mark.slow
def test_with_two_spares_each_rounds_process_was_started_before_the_last_round_began(tmp_path, monkeypatch):
    """A supervisor started with the run for a grid of short rounds (connect_or_start, 2 spares) starts the first
    capture process and two spares at once, and keeps two: round 2's process had started before round 1's process
    was up (with one spare it would start only when round 1's checks took the first spare), and round 3's had
    started before round 2 was asked for (with one spare it would start when round 2 took its process)."""
    monkeypatch.setenv(PRESTART_ENV, "1")
    monkeypatch.setenv("ATTNPROF_WORKER_TAG", f"tests-{os.getpid()}-two-spares")  # a worker of its own
    connect_or_start("cpu", IDLE_S, tmp_path / "worker.log", spares=2).close()
    one = in_worker(tmp_path, spec("naive", repeat=1), "r1")
    time.sleep(8)  # round 2 comes later than a spare started at round 1's checks takes to reach its first line
    two = in_worker(tmp_path, spec("naive", repeat=2), "r2")
    three = in_worker(tmp_path, spec("naive", repeat=3), "r3")
    assert one["status"] == two["status"] == three["status"] == "ok"
    assert len({r["worker"]["pid"] for r in (one, two, three)}) == 3
    assert two["worker"]["started_at"] < one["capture_started_at"], (two["worker"], one["capture_started_at"])
    assert three["worker"]["started_at"] < two["started_at"], (three["worker"], two["started_at"])


@pytest.mark.slow
def test_timing_quartiles_and_budget(tmp_path):
    rec = in_worker(tmp_path, spec("naive", timing={"repeats": 40, "input_sets": 2, "budget_s": 1e-9, "min_repeats": 4}))
    t = rec["timing"]
    assert t["repeats"] == 4 and t["repeats_asked"] == 40  # stopped at min_repeats: the budget was spent
    assert t["min_ms"] <= t["q1_ms"] <= t["median_ms"] <= t["q3_ms"] <= t["max_ms"]
    assert rec["host"]["cpu_count"] == os.cpu_count()


@pytest.mark.slow
def test_any_failure_ends_the_process_it_happened_in(tmp_path):
    """A later phase of repeat 1 runs in the check process (attnprof.measure.capture.run_checks): its failure ends
    that process, never the capture process, whose own work all succeeded; a failed profile ends the capture
    process (test_crash_in_the_worker_is_a_recorded_failure)."""
    first = in_worker(tmp_path, spec("naive"), "a")
    failed = in_worker(tmp_path, spec("naive", _test_fail_phase="timing"), "b")
    assert failed["status"] == "ok" and failed["checks_missing"] == [
        "timing: out_of_memory: OutOfMemoryError: test hook _test_fail_phase: timing. Tried to allocate 1.00 GiB"]
    assert failed["worker"]["pid"] == first["worker"]["pid"]  # the profile: the capture process, reused
    assert failed["checks"]["pid"] == first["checks"]["pid"] != first["worker"]["pid"]  # the checks: the check process
    after = in_worker(tmp_path, spec("naive"), "c")
    assert after["status"] == "ok" and not after["checks_missing"]
    assert after["worker"]["pid"] == failed["worker"]["pid"]
    assert after["worker"]["captures_before"] == failed["worker"]["captures_before"] + 1
    assert after["checks"]["pid"] != failed["checks"]["pid"]
    assert not alive(failed["checks"]["pid"])


@pytest.mark.slow
def test_repeat_1_profiles_in_a_process_that_never_ran_a_check(tmp_path):
    """Item 7 of issue 32: repeat 1's float64 check, timing loops and op input types run in the check process, so
    the capture process runs only profiles, in every round; a later repeat runs no check at all. The phases'
    numbers are those one process gives (the timing's calls, the relative error within tolerance)."""
    one = in_worker(tmp_path, spec("sdpa_math"), "a")
    two = in_worker(tmp_path, spec("sdpa_math", repeat=2), "b")
    assert one["checks"]["pid"] != one["worker"]["pid"] and alive(one["checks"]["pid"])
    assert {n: p["status"] for n, p in one["phases"].items()} == {
        "profile": "ok", "correctness": "ok", "grad_correctness": "skipped", "timing": "ok", "graph_timing": "skipped",
        "input_types": "ok"}
    assert one["phases"]["graph_timing"]["reason"] == "CPU run" and one["rel_error_ok"] is True
    assert one["timing"]["repeats"] == 3 and one["timing"]["method"] == "perf_counter"  # spec timing: 3 calls
    assert "checks" not in two and all(p["status"] == "skipped" for n, p in two["phases"].items() if n != "profile")


@pytest.mark.slow
def test_unsupported_backends_are_recorded_alike_in_a_reused_process(tmp_path, fresh_capture):
    fresh, _, _ = fresh_capture("sdpa_cudnn")  # run_isolated: a fresh process
    a = in_worker(tmp_path, spec("sdpa_efficient"), "a")
    b = in_worker(tmp_path, spec("sdpa_cudnn"), "b")
    assert a["status"] == b["status"] == "unsupported" and "FLASH_ATTENTION and MATH" in a["reason"]
    assert b["reason"] == fresh["reason"] and b.get("unsupported_reasons") == fresh.get("unsupported_reasons")
    c = in_worker(tmp_path, spec("naive"), "c")
    assert c["status"] == "ok" and c["worker"]["pid"] == b["worker"]["pid"] == a["worker"]["pid"]


@pytest.mark.parametrize("crash,signame", [("abort", "SIGABRT")])
@pytest.mark.slow
def test_crash_in_the_worker_is_a_recorded_failure(tmp_path, crash, signame):
    rec = in_worker(tmp_path, spec("naive", _test_crash=crash))
    assert rec["status"] == "failed" and rec["reason"].startswith(f"capture process killed by {signame}")
    assert load_trace(tmp_path / "c.json.gz")["traceEvents"] == []  # placeholder
    assert in_worker(tmp_path, spec("naive"), "d")["status"] == "ok"  # a fresh process serves the next one


@pytest.mark.slow
def test_timeout_in_the_worker_is_a_recorded_failure(tmp_path):
    rec = in_worker(tmp_path, spec("naive", _test_sleep_s=60), timeout_s=2)
    assert rec["status"] == "failed" and rec["reason"].startswith("capture timed out after 2 s")


@pytest.mark.slow
def test_capture_process_killed_from_outside_is_interrupted(tmp_path):
    pid_file = tmp_path / "child.pid"
    killer = threading.Thread(target=lambda: os.kill(wait_for_pid(pid_file), signal.SIGKILL), daemon=True)
    killer.start()
    with pytest.raises(CaptureInterrupted) as info:
        in_worker(tmp_path, spec("naive", _test_sleep_s=120, _test_pid_file=str(pid_file)))
    killer.join()
    assert "SIGKILL" in str(info.value) and SHAPE.key in str(info.value)
    assert not (tmp_path / "c.status.json").exists() and not (tmp_path / "c.json.gz").exists()


CLIENT = ("import json, sys; from pathlib import Path; from attnprof.runtime.worker import run_in_worker; "
          "run_in_worker(json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), 600, 20)")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.slow
def test_killed_job_stops_its_capture(tmp_path, sig):
    """A Snakemake job killed mid-capture: the capture stops with it, so the next job's capture
    never overlaps it, and no status is left behind."""
    pid_file = tmp_path / "child.pid"
    sp = spec("naive", _test_sleep_s=120, _test_pid_file=str(pid_file))
    client = subprocess.Popen([sys.executable, "-c", CLIENT, json.dumps(sp), str(tmp_path / "t.json.gz"), str(tmp_path / "s.json")])
    capture_pid = None
    try:
        capture_pid = wait_for_pid(pid_file)
        client.send_signal(sig)
        client.wait(timeout=10)
        assert wait_gone(capture_pid, timeout=5), f"capture {capture_pid} outlived its job killed by {sig.name}"
        assert not (tmp_path / "s.json").exists() and not (tmp_path / "t.json.gz").exists()
        t0 = time.monotonic()
        assert in_worker(tmp_path, spec("naive"))["status"] == "ok"  # the worker serves the next job
        assert time.monotonic() - t0 < 120
    finally:
        for pid in (client.pid, capture_pid):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        client.wait()


def test_a_call_whose_process_crashed_answers_an_error_not_a_dead_supervisor():
    from attnprof.runtime.worker import CHECKS_CALL, _ended_message

    # a check process killed by SIGSEGV, and one cut at its deadline: an error naming the call and why (the supervisor
    # used to raise TypeError here, building a capture record of an empty shape, and exit)
    crashed = _ended_message({"call": CHECKS_CALL, "timeout_s": 5}, -11, "Fatal Python error: Segmentation fault\n")
    assert crashed == {"error": f"{CHECKS_CALL}: capture process killed by SIGSEGV; stderr ends: Fatal Python error: "
                                "Segmentation fault"}
    late = _ended_message({"call": CHECKS_CALL, "timeout_s": 5}, None, "")
    assert late == {"error": f"{CHECKS_CALL}: capture timed out after 5 s"}


@pytest.mark.slow
def test_a_new_run_releases_the_idle_workers_of_its_directory_and_device_only(tmp_path, monkeypatch):
    """attnprof.runtime.worker.release_idle, as a GPU run's start calls it (attnprof.runtime.jobs): an earlier run's
    idle supervisor of this directory and device exits; the run's own, another device's and one busy more recently
    than asked stay."""
    from attnprof.runtime.worker import listening_keys, release_idle, worker_key

    monkeypatch.chdir(tmp_path)  # a directory of its own: the supervisors of other test sessions are never released
    keys = {}
    for tag in ("earlier", "own"):
        monkeypatch.setenv("ATTNPROF_WORKER_TAG", f"tests-{os.getpid()}-release-{tag}")
        connect_or_start("cpu", IDLE_S, tmp_path / f"{tag}.log").close()
        keys[tag] = worker_key("cpu")
    assert set(keys.values()) <= listening_keys()
    assert release_idle("cuda", {keys["own"]}, 0) == []  # another device's: none of them
    assert release_idle("cpu", {keys["own"]}, 3600) == []  # idle for less than asked
    assert release_idle("cpu", {keys["own"]}, 0) == [keys["earlier"]]
    for _ in range(100):
        if keys["earlier"] not in listening_keys():
            break
        time.sleep(0.1)
    assert keys["earlier"] not in listening_keys() and keys["own"] in listening_keys()
    assert release_idle("cpu", set(), 0) == [keys["own"]]  # tidy: the test's own supervisor goes too
