"""Run one capture in a fresh child process and supervise it: process isolation, signals, parent death.

The capture itself (phases, statuses, the trace check) is :mod:`attnprof.measure.capture`; this module
only starts it and reads how it ended. The work runs in a child process
(``python -m attnprof.runtime.isolation SPEC.json TRACE STATUS``, which calls
:func:`attnprof.measure.capture.capture`) so that one variant's CUDA context, caches, allocator state or a
hard crash cannot touch another. :func:`run_isolated` starts it and leaves a status record behind for
every capture that ran to an end of its own (see "Killed captures" for the exception). The capture
worker (:mod:`attnprof.runtime.worker`) re-uses this module's pieces: the parent-death arming
(:func:`die_with_parent`), the signal handling (:func:`signals_raise_exit`), the classification of a
dead child (:data:`INTERRUPT_SIGNALS`, :func:`interrupted_message`, :func:`crash_record`) and the
writing of the outputs (:func:`finish_capture`).

Killed captures. The child dies with its parent (Linux ``prctl(PR_SET_PDEATHSIG,
SIGKILL)``; elsewhere a thread that exits when the parent pid changes), and a parent
that gets SIGTERM or SIGINT kills the child before it exits: two captures never
overlap on the GPU. How :func:`run_isolated` reads the end of the child:

* exit code 0 with a status record: that record;
* killed by SIGKILL, SIGTERM, SIGINT, SIGHUP or SIGQUIT -- signals sent from outside
  (a user, Snakemake, a batch scheduler): an *interrupted* capture, not a result.
  :class:`CaptureInterrupted` is raised, no status is written and the trace is removed,
  so the Snakemake job fails and the next run captures again. Caveat: the host's OOM
  killer also sends SIGKILL, so a capture killed for host memory counts as interrupted
  (GPU out-of-memory is an exception inside the child, recorded as ``out_of_memory``);
* killed by any other signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL: the variant's own
  reproducible crash) or a non-zero exit code: ``failed``, with a reason naming the
  signal or code and the end of the child's stderr (``stderr_tail``);
* killed by :func:`run_isolated` itself at ``timeout_s``: ``failed`` ("timed out").
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from attnprof.measure.capture import capture
from attnprof.measure.env import interpreter_environ
from attnprof.measure.progress import log
from attnprof.model.names import FORMAT_KEY, FORMATS
from attnprof.model.variants import Shape

#: Signals that end a capture from outside (a user, Snakemake, a scheduler, the host OOM
#: killer): the child's death is an interruption, not a result of the variant.
INTERRUPT_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})

#: Environment variable through which run_isolated tells the child its parent's pid.
PARENT_PID_ENV = "ATTNPROF_PARENT_PID"

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class CaptureInterrupted(RuntimeError):
    """The capture process was killed from outside (a signal in :data:`INTERRUPT_SIGNALS`):
    no result exists, no status was written, and the capture must run again."""


def write_placeholder_trace(trace_path: Path, status: str) -> None:
    """A capture that did not run still yields its declared output: an empty Chrome
    trace (no events) that names the status, so downstream stages see 'no data' rather
    than a missing file."""
    with gzip.open(trace_path, "wt") as fh:
        json.dump({"traceEvents": [], "attnprof": {"placeholder": True, "status": status}}, fh)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@contextlib.contextmanager
def signals_raise_exit(signums=(signal.SIGTERM, signal.SIGINT)):
    """While inside, SIGTERM and SIGINT raise SystemExit(128 + signal number) in this thread,
    so that the caller can kill its child before exiting. Off the main thread (where Python
    cannot set handlers) it does nothing: there the child still dies with the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _pump(stream, tail: collections.deque) -> None:
    """Copy the child's stderr to ours line by line (progress reaches the log as it happens)
    and keep its last lines in ``tail``."""
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        tail.append(line)


def run_isolated(spec: dict, trace_path: Path, status_path: Path, timeout_s: float, python: str | None = None,
                 env: dict | None = None) -> dict:
    """Run :func:`attnprof.measure.capture.capture` in a fresh Python process and write ``status_path`` (JSON)
    and ``trace_path`` (gzipped Chrome trace, a placeholder when the capture did not
    succeed). ``timeout_s``: seconds before the child is killed. A crash (a signal other
    than the interrupting ones), a timeout or a non-zero exit becomes status ``failed``
    with the signal or exit code and the end of the child's stderr. Returns the status
    record. Call it from a thread that lives until it returns (the child's death signal is
    tied to the thread that started it). ``python``, ``env``: another Python environment to capture in
    (config ``environments``: that executable, those variables over this process's, this checkout's src/ on
    its PYTHONPATH; attnprof.measure.env.interpreter_environ); default this interpreter and environment.

    Raises :class:`CaptureInterrupted` when the child was killed from outside (SIGKILL,
    SIGTERM, SIGINT, SIGHUP, SIGQUIT; module docstring), and SystemExit(128 + signal) when
    this process gets SIGTERM or SIGINT meanwhile (main thread only); in both cases the
    child is dead, and no status and no trace are left behind."""
    trace_path, status_path = Path(trace_path), Path(status_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    status_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path = status_path.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec))
    tmp_status = status_path.with_suffix(".child.json")
    tmp_status.unlink(missing_ok=True)
    cmd = [os.path.abspath(python) if python else sys.executable, "-m", "attnprof.runtime.isolation", str(spec_path),
           str(trace_path), str(tmp_status)]
    base = os.environ if python is None and not env else interpreter_environ(env)
    env = {**base, "PYTHONUNBUFFERED": "1", PARENT_PID_ENV: str(os.getpid())}
    tail: collections.deque = collections.deque(maxlen=200)
    started = time.time()

    def discard() -> None:
        for path in (trace_path, tmp_status, spec_path):
            path.unlink(missing_ok=True)

    try:
        with signals_raise_exit():
            proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace", env=env)
            try:
                pump = threading.Thread(target=_pump, args=(proc.stderr, tail), daemon=True)
                pump.start()
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None  # ours: a result ("timed out"), not an interruption
            finally:  # at the timeout, or on SIGTERM/SIGINT or an error; nothing where it has ended (send_signal polls)
                proc.kill()
                proc.wait()
            pump.join()
    except BaseException as exc:  # SIGTERM/SIGINT here (SystemExit, KeyboardInterrupt) or an error: no result
        discard()
        log(f"{spec['variant']} {Shape(**spec['shape']).key}: aborted ({type(exc).__name__}), capture process ended, no status written")
        raise
    stderr_tail = "".join(tail)[-4000:]
    if returncode is not None and -returncode in INTERRUPT_SIGNALS:
        discard()
        raise CaptureInterrupted(interrupted_message(spec, -returncode))
    record = json.loads(tmp_status.read_text()) if tmp_status.exists() and returncode == 0 else None
    tmp_status.unlink(missing_ok=True)
    spec_path.unlink(missing_ok=True)
    if record is None:
        record = crash_record(spec, returncode, timeout_s, stderr_tail)
    return finish_capture(record, trace_path, status_path, started)


def interrupted_message(spec: dict, signum: int) -> str:
    """The CaptureInterrupted text for a capture process killed by ``signum`` from outside."""
    return (f"capture of {spec['variant']} at {Shape(**spec['shape']).key} interrupted: its process was killed by "
            f"{_signal_name(signum)} from outside (a user, Snakemake, a scheduler or the host OOM killer); "
            "no status written, the next run captures it again")


def crash_record(spec: dict, returncode: int | None, timeout_s: float, stderr_tail: str) -> dict:
    """The ``failed`` status record of a capture process that ended without a record of its
    own: ``returncode`` None (killed at ``timeout_s``), negative (killed by that signal, one
    not in :data:`INTERRUPT_SIGNALS`) or a non-zero exit code; ``stderr_tail``: its last output."""
    # the repeat it was to capture, as every record names it (attnprof.model.formats: status.json's format 2)
    return {"variant": spec["variant"], "shape_key": Shape(**spec["shape"]).key, "repeat": int(spec.get("repeat", 1)),
            **spec["shape"], "device": spec["device"], "status": "failed",
            "reason": crash_reason(returncode, timeout_s, stderr_tail), "stderr_tail": stderr_tail}


def crash_reason(returncode: int | None, timeout_s: float, stderr_tail: str) -> str:
    """Why a capture process ended without an answer (:func:`crash_record`'s ``reason``), with its output's end."""
    if returncode is None:
        why = f"capture timed out after {timeout_s} s"
    elif returncode < 0:
        why = f"capture process killed by {_signal_name(-returncode)}"
    elif returncode:
        why = f"capture process exited with code {returncode}"
    else:
        why = "capture process exited with code 0 but wrote no status"
    return f"{why}; stderr ends: {stderr_tail[-300:].strip()}" if stderr_tail.strip() else why


def finish_capture(record: dict, trace_path: Path, status_path: Path, started: float) -> dict:
    """Write a finished capture's outputs: ``status_path`` (the record, with ``started_at`` and
    ``finished_at``, epoch seconds, and its format version, attnprof.model.names ``FORMATS``; a record of a process
    that died, which could not say when it began the capture, has ``started_at`` as its ``capture_started_at``) and,
    when the capture left no usable trace, a placeholder trace naming the status (:func:`write_placeholder_trace`).
    Returns the record."""
    record["started_at"], record["finished_at"] = round(started, 3), round(time.time(), 3)
    record.setdefault("capture_started_at", record["started_at"])
    record[FORMAT_KEY] = FORMATS["status"]
    if record["status"] not in ("ok", "incomplete_trace") or not trace_path.exists():
        if record["status"] in ("ok", "incomplete_trace"):
            record.update(status="failed", reason="profiler wrote no trace")
        write_placeholder_trace(trace_path, record["status"])
    status_path.write_text(json.dumps(record, indent=2, sort_keys=True))
    log(f"{record['variant']} {record['shape_key']}: {record['status']}{(' - ' + record['reason'][:200]) if record['reason'] else ''}")
    return record


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.2)
    os._exit(1)


def die_with_parent(parent_pid: int) -> None:
    """Make this process die when its parent ``parent_pid`` does: on Linux,
    prctl(PR_SET_PDEATHSIG, SIGKILL) (the kernel sends SIGKILL when the parent's thread
    exits), then a check of os.getppid() for a parent that died before that call; elsewhere,
    or if prctl fails, a daemon thread that exits the process once the parent pid changes."""
    armed = False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    if os.getppid() != parent_pid:  # reparented already: the parent is gone
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="attnprof-parent-watch").start()


def main(argv: list[str]) -> int:
    """The capture process's entry point (``python -m attnprof.runtime.isolation SPEC.json TRACE STATUS``):
    die with the parent, run :func:`attnprof.measure.capture.capture`, write its record to STATUS. Returns 0."""
    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or os.getppid()))
    spec_path, trace_path, status_path = (Path(a) for a in argv[1:4])
    record = capture(json.loads(spec_path.read_text()), trace_path)
    status_path.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
