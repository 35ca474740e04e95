"""The capture worker under abuse (found by an adversarial review): garbage and stalled peers,
a supervisor stopped mid-capture, a changed environment or calibration code, a foreign owner."""
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

import attnprof.runtime.worker as worker
from attnprof.runtime.isolation import CaptureInterrupted
from attnprof.runtime.worker import address, run_in_worker, worker_key
from test_capture import alive, spec, wait_for_pid, wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker uses Linux abstract sockets")


@pytest.fixture
def own_worker(monkeypatch, tmp_path):
    """A worker of this test's own (its own tag), and a capture runner for it."""
    monkeypatch.setenv("ATTNPROF_WORKER_TAG", f"abuse-{os.getpid()}-{tmp_path.name}")

    def run(sp, name="c", timeout_s=300):
        return run_in_worker(sp, tmp_path / f"{name}.json.gz", tmp_path / f"{name}.status.json", timeout_s, 20,
                             tmp_path / "worker.log")
    return run


def connect():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address(worker_key("cpu")))
    return sock


def test_garbage_malformed_and_stalled_peers_are_dropped_and_the_worker_serves_on(own_worker, monkeypatch):
    """One warm worker: garbage and malformed requests are answered with an error and dropped; a peer
    that never ends its request line is dropped after the request timeout (1 s here), and the capture
    queued behind it runs; the warm capture process survives all of them."""
    monkeypatch.setenv("ATTNPROF_WORKER_REQUEST_TIMEOUT_S", "1")
    first = own_worker(spec("naive"), "a")
    for junk in (b"hello\n", b"[1, 2]\n", b'{"spec": {"variant": "naive"}}\n', b'{"call": 5, "timeout_s": 1}\n'):
        with connect() as sock:
            sock.sendall(junk)
            assert "error" in json.loads(sock.makefile().readline())
    staller = connect()
    staller.sendall(b'{"spec"')  # and never a newline
    try:
        t0 = time.monotonic()
        after = own_worker(spec("naive"), "b")
        assert time.monotonic() - t0 < 1 + 30
    finally:
        staller.close()
    assert after["status"] == "ok" and after["worker"]["pid"] == first["worker"]["pid"]  # the warm process survived


def test_supervisor_stopped_mid_capture_kills_the_capture_first(own_worker, tmp_path):
    SLEEP_S = 1.5  # the capture's (its pid is written first; the supervisor is stopped as soon as it is)
    pid_file = tmp_path / "child.pid"
    own_worker(spec("naive"), "warm")
    seen = {}

    def stop_supervisor():
        capture_pid = wait_for_pid(pid_file)
        seen["capture"], seen["at"] = capture_pid, time.monotonic()
        supervisor = int(Path(f"/proc/{capture_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(supervisor, signal.SIGTERM)

    killer = threading.Thread(target=stop_supervisor, daemon=True)
    killer.start()
    with pytest.raises(CaptureInterrupted):  # the client learns that its capture was interrupted
        own_worker(spec("naive", _test_sleep_s=SLEEP_S, _test_pid_file=str(pid_file)), "c")
    killer.join()
    assert not alive(seen["capture"]) or wait_gone(seen["capture"], timeout=0.5)  # gone when the client hears of it
    time.sleep(max(0.0, seen["at"] + SLEEP_S + 0.5 - time.monotonic()))  # past the moment the capture would have written its trace
    assert not (tmp_path / "c.json.gz").exists() and not (tmp_path / "c.status.json").exists()


def test_key_covers_the_environment_and_every_module(monkeypatch, tmp_path):
    base = worker_key("cpu")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # changes the CPU kernels PyTorch runs
    assert worker_key("cpu") != base
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.setenv("PWD", "/elsewhere")  # shell bookkeeping does not count
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test")  # nor pytest's
    assert worker_key("cpu") == base
    # calibrate.py runs in the worker too (call_in_worker): its content is in the key
    pkg = tmp_path / "attnprof"
    shutil.copytree(Path(worker.__file__).resolve().parents[1], pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(worker, "__file__", str(pkg / "runtime" / "worker.py"))
    copied = worker_key("cpu")
    calibrate = pkg / "measure" / "calibrate.py"
    calibrate.write_text(calibrate.read_text() + "\n# edited\n")
    assert worker_key("cpu") != copied


def test_a_listener_of_another_user_is_never_trusted(monkeypatch, tmp_path):
    addr = f"\0attnprof-test-foreign-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(addr)
    listener.listen(1)
    try:
        monkeypatch.setattr(worker, "peer_uid", lambda sock: os.getuid() + 1)  # as if another user held it
        with pytest.raises(RuntimeError, match="held by another user"):
            worker._connect(addr)
    finally:
        listener.close()


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan", "", "1e10", "3600.5"])
def test_a_request_timeout_that_is_not_seconds_is_refused_naming_the_variable(monkeypatch, tmp_path, value):
    monkeypatch.setenv("ATTNPROF_WORKER_TAG", f"abuse-timeout-{os.getpid()}-{tmp_path.name}")
    monkeypatch.setenv(worker.REQUEST_TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=f"ATTNPROF_WORKER_REQUEST_TIMEOUT_S={value!r}: not a number of seconds above 0 and up to 3600"):
        run_in_worker(spec("naive"), tmp_path / "t.json.gz", tmp_path / "s.json", 60, 5, tmp_path / "worker.log")
    assert worker.serve("k", "cpu", 1) == 1  # a supervisor started by hand with it does not start either
    monkeypatch.setenv(worker.REQUEST_TIMEOUT_ENV, "0.25")
    assert worker.request_timeout_s() == 0.25
    monkeypatch.setenv(worker.REQUEST_TIMEOUT_ENV, "3600")
    assert worker.request_timeout_s() == 3600
    monkeypatch.delenv(worker.REQUEST_TIMEOUT_ENV)
    assert worker.request_timeout_s() == worker.REQUEST_TIMEOUT_S
