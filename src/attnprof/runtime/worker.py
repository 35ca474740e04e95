"""Capture worker: one warm capture process serves the capture jobs of a run.

Why. A capture's GPU work takes milliseconds; a fresh process per capture pays the torch
import (3-5 s on the H200 machine), CUDA context creation and the profiler's CUPTI start-up
(most of the 4-6 s its first profiling step took) every time. The worker pays them once.

Design (three processes; only the last one imports torch):

* the **client** -- the Snakemake capture job (:func:`run_in_worker`): connects to the
  supervisor's Unix socket, starting the supervisor if none listens, sends one capture
  request, copies the progress lines it gets back to its log, and writes the status and
  (placeholder) trace like :func:`attnprof.runtime.isolation.run_isolated`;
* the **supervisor** (``python -m attnprof.runtime.worker serve``, detached): serves one request at a
  time, so two captures never overlap, and owns the capture process as its child, so that it
  reads the child's exit exactly (signal or code) and classifies it as
  :func:`~attnprof.runtime.isolation.run_isolated` does. It exits after ``idle_s`` seconds without a
  request, killing the child;
* the **capture process** (``python -m attnprof.runtime.worker child``): imports torch, creates the
  CUDA context once, then runs :func:`attnprof.measure.capture.capture` for each request it reads.
  Each capture is a fresh ``torch.profiler`` session whose trace holds only its own forwards.

Repeats. Captures carry their repeat (round) number; the first capture of a new round gets a fresh
capture process, so that each round re-draws what a new process draws (CUDA context, allocations,
cuDNN/cuBLAS plan choices) while the captures of one round share it.

Started ahead. A fresh process pays the torch import, the CUDA context and the profiler's first session
(CUPTI's start-up; about 8 s on the H200) before its first capture. On a GPU run the supervisor keeps one
**spare** process (:class:`_Ahead`) that pays them while the current process captures: the next round, a
replacement after a failed capture and the check process take it ready, and a new spare starts; a supervisor starts
the first capture process and the spare at once. A GPU run starts its supervisors with the run, while Snakemake builds
its DAG (:func:`connect_or_start`, from attnprof.runtime.jobs.start_capture_workers), so the first capture finds both
ready. Every process starts the same way (import, context, one empty profiler session: :func:`child_main`) and serves
nothing until it is taken, so every round's process is alike. On a CPU run a spare would share the cores with a
capture's timings: none is started (:func:`prestarts`), and the first capture job starts the supervisor.

Checks. Repeat 1's later phases (the float64 checks, the timing loops, the op input types) run in a second
child, the **check process** (:data:`CHECKS_CALL`, :func:`attnprof.measure.capture.run_checks`): the client sends
them as a call after the profile, and the supervisor serves it in that process, so the capture process of every
round runs profiles only and repeat 1's profiles are drawn like the others'. The check process lives across
rounds and is replaced after a check that did not fully succeed.

Isolation. The capture process is never reused after a capture that did not fully succeed
(:func:`reusable`: out of memory, failed, incomplete trace, any later phase not ``ok``,
any check missing): the next request gets a fresh one, so a failure cannot leave state
behind for another variant. The one exception is a refusal: ``unsupported`` raised by
PyTorch's dispatcher before any kernel ran leaves nothing behind, so the process serves on.
A crash (signal other than :data:`~attnprof.runtime.isolation.INTERRUPT_SIGNALS`) or a timeout is a
``failed`` record; a capture process killed from outside, a supervisor killed from outside,
or a client that disappears (its Snakemake job killed) is an interruption: no status, the
trace is removed, the job fails and the next run captures again. Between captures the
capture process returns its cached GPU memory (``torch.cuda.empty_cache``).

Which worker. A supervisor is keyed (:func:`worker_key`) by the Python executable, the
installed torch build, the device, the working directory, the whole environment (but the
shell's bookkeeping, :data:`_ENV_IGNORED`) and the content of every module of this package:
after an upgrade, a code edit or a changed variable a new worker starts, never an old one.
Its address is a Linux abstract Unix socket (no file to clean up), so the worker mode is
Linux-only; elsewhere set ``capture_mode: process``. An abstract address has no file
permissions: the supervisor serves only connections from its own user id, and a client uses
only a supervisor of its own user id (both checked with SO_PEERCRED).

Robustness. A malformed request (not JSON, not a request object) is answered with an error
and dropped; a peer gets :func:`request_timeout_s` to send its request line; a client waits
at most the capture timeout plus :data:`ANSWER_GRACE_S` for an answer. SIGTERM or SIGINT to
the supervisor kills the capture process before the client's connection closes.
A supervisor started by one result set's job serves the others of the same key too; its
output goes to the log of the result set that started it. Besides captures it serves two calls that need torch and the
device as the captures do (:data:`CALLS`: the environment record and the calibration).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnprof.measure.capture import CHECKS_APART, merge_checks
from attnprof.measure.progress import log
from attnprof.measure.env import call_in_interpreter, interpreter_environ, torch_build, torch_build_of
from attnprof.model.variants import Shape, ends_capture_process
from attnprof.runtime.isolation import (
    INTERRUPT_SIGNALS,
    PARENT_PID_ENV,
    CaptureInterrupted,
    crash_reason,
    crash_record,
    die_with_parent,
    finish_capture,
    interrupted_message,
    signals_raise_exit,
)

#: Environment variables left out of a worker's key: the shell's (and pytest's) own bookkeeping, which says
#: nothing about what a capture measures. Every other variable is in the key (ATEN_CPU_CAPABILITY,
#: DNNL_MAX_CPU_ISA, LD_PRELOAD, MALLOC_*, KMP_*, CUDA_*, PYTHONPATH, ... all change the numbers).
#: (ATTNPROF_WORKER_TAG, unused otherwise, keeps workers apart, e.g. two test sessions in one checkout.)
_ENV_IGNORED = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLUMNS", "LINES", "PS1", "PS2", "PROMPT_COMMAND",
                          "PYTEST_CURRENT_TEST"})  # pytest renames it for every test
#: Seconds a client may take to send its request line before the supervisor drops it (a stalled peer
#: holds up the captures queued behind it this long); :data:`REQUEST_TIMEOUT_ENV` sets another.
REQUEST_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_ENV = "ATTNPROF_WORKER_REQUEST_TIMEOUT_S"
#: Seconds a client waits beyond the capture timeout for the supervisor's answer.
ANSWER_GRACE_S = 120.0
#: The call that runs a repeat-1 capture's later phases (attnprof.measure.capture.run_checks): the supervisor serves it
#: in a process of its own (the check process), never in the one that profiles, so that no profile follows a float64
#: check or a timing loop in its own process (every round's profiles are alike: docs/statistics.md, "Repeats").
CHECKS_CALL = "attnprof.measure.capture:run_checks"
#: What :func:`call_where_captures_run` may run in the worker besides captures.
CALLS = frozenset({"attnprof.measure.env:capture_environment", "attnprof.measure.calibrate:calibrate", CHECKS_CALL})
#: Seconds a client waits for a supervisor it started to listen.
START_TIMEOUT_S = 30.0
#: "1": start capture processes ahead on the CPU too (:func:`prestarts`; the tests use it).
PRESTART_ENV = "ATTNPROF_WORKER_PRESTART"
#: Seconds without a request after which a supervisor asked to release (:func:`release_idle`, by a new GPU run of this
#: user and working directory) exits: its capture process and spares hold GPU memory (CUDA contexts, cached blocks),
#: about 12 GiB after an A/B run and a history series on the H200, which cost a sweep right after them 12 captures
#: to out-of-memory (docs/costs.md). Only a run's start asks (attnprof.runtime.jobs), never of its own supervisors.
RELEASE_IDLE_S = 5.0
#: A grid of short rounds (:func:`spares_for`): at most this many captures a round ...
SHORT_ROUND_CAPTURES = 16
#: ... and no shape whose attention scores (batch x heads x q_len x kv_len) hold more elements than this (2^28: the
#: study shape's are 2^27; 1 GiB in fp32): a second spare's 0.6 GiB of GPU memory is never beside a large capture.
SMALL_SCORES = 2**28


def spares_for(shape_keys, captures_per_round: int) -> int:
    """How many spares a supervisor started with a run keeps (:class:`_Ahead`): 2 for a grid of short rounds (at most
    :data:`SHORT_ROUND_CAPTURES` captures a round, every shape's scores at most :data:`SMALL_SCORES` elements), whose
    rounds end before a process has started (about 8 s on the H200), else 1."""
    def scores(key: str) -> int:
        s = Shape.from_key(key)
        return s.batch * s.heads * (s.q_len or s.seq_len) * s.seq_len

    return 2 if captures_per_round <= SHORT_ROUND_CAPTURES and all(scores(k) <= SMALL_SCORES for k in shape_keys) else 1


def prestarts(device: str) -> bool:
    """Whether the supervisor for ``device`` keeps a spare process started ahead (:class:`_Ahead`): on a GPU run
    (the spare's start-up runs on other cores than the capture's host side), not on a CPU run, whose host times a
    process starting beside them would share the cores with; :data:`PRESTART_ENV` "1" forces it."""
    return device == "cuda" or os.environ.get(PRESTART_ENV) == "1"


def request_timeout_s() -> float:
    """:data:`REQUEST_TIMEOUT_S`, or the seconds in the environment variable :data:`REQUEST_TIMEOUT_ENV`.
    Raises ValueError (naming the variable) when that is not a number of seconds above 0 and up to
    an hour (a socket timeout beyond what the platform's time_t holds would crash the supervisor)."""
    raw = os.environ.get(REQUEST_TIMEOUT_ENV)
    if raw is None:
        return REQUEST_TIMEOUT_S
    with contextlib.suppress(ValueError):  # not a number
        if 0 < (seconds := float(raw)) <= 3600:  # NaN and infinity are not
            return seconds
    raise ValueError(f"{REQUEST_TIMEOUT_ENV}={raw!r}: not a number of seconds above 0 and up to 3600")


def worker_key(device: str, python: str | None = None, env: dict | None = None) -> str:
    """Hex digest that names the worker able to serve this process's captures on ``device``
    ('cuda' | 'cpu'): see the module docstring for what it covers. ``python``: another Python executable
    (config ``environments``; its torch build is read from it, :func:`~attnprof.measure.env.torch_build_of`),
    ``env``: variables set over this process's environment for it; both None: this process's own."""
    h = hashlib.sha256()
    exe = os.path.abspath(python or sys.executable)  # not resolved: a venv's python is a symlink to another interpreter's
    environ = os.environ if python is None and not env else interpreter_environ(env)
    build = torch_build() if python is None else torch_build_of(exe, env)
    env_items = sorted((k, v) for k, v in environ.items() if k not in _ENV_IGNORED)
    h.update(json.dumps([exe, device, os.getcwd(), sorted(build.items()), env_items]).encode())
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):  # every module of the package (calibrate, env, findings/...)
        h.update(path.relative_to(package).as_posix().encode() + path.read_bytes())
    return h.hexdigest()[:20]


def address(key: str) -> str:
    """Abstract-namespace Unix socket address of the worker ``key`` (Linux)."""
    return f"\0attnprof-worker-{os.getuid()}-{key}"


def reusable(record: dict) -> bool:
    """True when the capture process that produced ``record`` may serve another capture:
    status ``ok`` with every phase ``ok`` or ``skipped`` and no check missing; or status
    ``unsupported`` from the profile phase with every later phase skipped -- PyTorch's
    dispatcher refused the variant before any kernel ran (a refusal, not a failure: nothing
    ran that could leave state behind). Anything else (out of memory, failed, incomplete
    trace, a failed later phase) ends the process, and so does a user variant's capture (its
    module, imported once, would not see an edit before the next capture of it) and a
    torch.compile variant's (:data:`~attnprof.model.variants.COMPILED`: dynamo's in-process caches
    would make the next shape's compile a recompile, dynamic after the first, eager after the
    recompile limit; each compiled capture starts in a fresh process, like a user's program)."""
    phases = record.get("phases") or {}
    if ends_capture_process(record.get("variant"), record.get("custom")):
        return False
    if record.get("status") == "unsupported":
        return (phases.get("profile", {}).get("status") == "unsupported"
                and all(p.get("status") == "skipped" for n, p in phases.items() if n != "profile"))
    return (record.get("status") == "ok" and not record.get("checks_missing")
            and all(p.get("status") in ("ok", "skipped") for p in phases.values()))


def _reusable_reply(reply: dict) -> bool:
    """Whether the process that sent ``reply`` may serve on: a capture's record by :func:`reusable`; a call's result
    unless it raised, or (the check process's :data:`CHECKS_CALL`) a phase of it did not fully succeed."""
    if "record" in reply:
        return reusable(reply["record"])
    result = reply.get("result")
    phases = result.get("phases", {}) if isinstance(result, dict) else {}
    return "result" in reply and all(p.get("status") in ("ok", "skipped") for p in phases.values())


# --- wire format: one JSON object per line ---------------------------------------------------

def _send(sock: socket.socket, obj: dict) -> None:
    sock.sendall((json.dumps(obj) + "\n").encode())


def _tell(conn: socket.socket, obj: dict) -> None:
    """:func:`_send` to a client that may have gone: the supervisor serves on (:func:`_await_reply` notices it left)."""
    with contextlib.suppress(OSError):
        _send(conn, obj)


def _next(lines) -> dict | None:
    """The next newline-terminated JSON object on ``lines`` (a socket's ``makefile("rb")``); None at end of stream."""
    try:
        line = lines.readline()
    except ConnectionError:
        return None
    return json.loads(line) if line.endswith(b"\n") else None


# --- client ----------------------------------------------------------------------------------

def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def _connect(addr: str) -> socket.socket | None:
    """A connection to ``addr``, None when nothing listens there. Raises RuntimeError when the
    listener belongs to another user (an abstract address can be taken by anyone: its answers
    must never be trusted)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(addr)
    except OSError:
        sock.close()
        return None
    uid = peer_uid(sock)
    if uid != os.getuid():
        sock.close()
        raise RuntimeError(f"the capture worker address {addr[1:]!r} is held by another user (uid {uid}); refusing to "
                           "use it. Set capture_mode: process, or ATTNPROF_WORKER_TAG to use another address.")
    return sock


def _start_supervisor(key: str, device: str, idle_s: float, log_path: Path | None, python: str | None = None,
                      env: dict | None = None, spares: int = 1) -> None:
    """Start the supervisor ``key`` detached, in ``python`` (default this interpreter) with ``env`` set over
    this process's environment (and this checkout's src/ on PYTHONPATH: attnprof.measure.env.interpreter_environ);
    its capture processes inherit both. ``spares``: how many it keeps (:class:`_Ahead`)."""
    environ = os.environ if python is None and not env else interpreter_environ(env)
    with open(log_path, "a") if log_path else contextlib.nullcontext(subprocess.DEVNULL) as out:  # the child's copy stays
        subprocess.Popen(
            [os.path.abspath(python) if python else sys.executable, "-m", "attnprof.runtime.worker", "serve", key, device,
             str(idle_s), str(spares)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True,
            env={**environ, "PYTHONUNBUFFERED": "1"},
        )


def connect_or_start(device: str, idle_s: float, log_path: Path | None = None, python: str | None = None,
                     env: dict | None = None, spares: int = 1, key: str | None = None) -> socket.socket:
    """A connection to the supervisor for this process's :func:`worker_key`, started (detached,
    its output appended to ``log_path``) when none listens. ``python``, ``env``: another Python environment
    (config ``environments``): the supervisor and its capture processes run in that interpreter with those
    variables (:func:`worker_key`); ``spares``: how many spares a supervisor started here keeps (:func:`prestarts`:
    it then starts its first capture process and the spares at once); ``key``: :func:`worker_key` of these
    arguments where the caller has it already (for another Python, reading its torch build is a subprocess of about
    0.1 s). Raises RuntimeError naming the log when a started supervisor does not listen within
    :data:`START_TIMEOUT_S` seconds, ValueError when :data:`REQUEST_TIMEOUT_ENV` is set to something else than
    seconds."""
    request_timeout_s()  # a wrong setting fails here, naming the variable, not as a worker that never starts
    key = key or worker_key(device, python, env)
    addr = address(key)
    if sock := _connect(addr):
        return sock
    lock_path = Path(tempfile.gettempdir()) / f"attnprof-worker-{os.getuid()}-{key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time
        if sock := _connect(addr):
            return sock
        log(f"starting capture worker {key} (idle exit after {idle_s:g} s)")
        _start_supervisor(key, device, idle_s, log_path, python, env, spares)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if sock := _connect(addr):
                return sock
    raise RuntimeError(f"capture worker {key} did not start within {START_TIMEOUT_S:g} s; see {log_path or 'its output'}")


def run_in_worker(spec: dict, trace_path: Path, status_path: Path, timeout_s: float, idle_s: float = 60.0,
                  worker_log: Path | None = None, python: str | None = None, env: dict | None = None) -> dict:
    """Run one capture in the warm capture process and write ``status_path`` and
    ``trace_path`` as :func:`attnprof.runtime.isolation.run_isolated` does (same records, same
    statuses, plus ``record["worker"]``: the capture process's pid, how many captures it had
    served before this one, its start-up seconds and when it started, epoch s). ``timeout_s``: seconds before the
    capture process is killed (a ``failed`` record); ``idle_s``: how long a supervisor this
    call starts waits for the next request; ``worker_log``: where that supervisor writes; ``python``, ``env``:
    the Python environment to capture in (:func:`connect_or_start`; default this one).

    Raises :class:`~attnprof.runtime.isolation.CaptureInterrupted` when the capture process or the
    supervisor was killed from outside, and SystemExit(128 + signal) when this process gets
    SIGTERM or SIGINT meanwhile (the supervisor then kills the capture); in these cases no
    status and no trace are left behind."""
    trace_path, status_path = Path(trace_path), Path(status_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    status_path.parent.mkdir(parents=True, exist_ok=True)
    trace_path.unlink(missing_ok=True)
    started = time.time()
    # repeat 1's later phases run in the check process unless this capture ends its process anyway (a user's or a
    # compiled variant: attnprof.model.variants.ends_capture_process)
    spec = {**spec, "checks_apart": not ends_capture_process(spec["variant"], spec.get("custom"))}
    request = {"spec": spec, "trace": str(trace_path.resolve()), "timeout_s": timeout_s}
    what = f"capture of {spec['variant']} at {Shape(**spec['shape']).key}"
    try:
        msg = _request(spec["device"], request, idle_s, worker_log, what, python, env)
        record = msg["record"]
        # the capture's own span starts when the supervisor took it; the wait behind other jobs'
        # captures (capture_mode worker: they queue there, not in Snakemake) is recorded apart
        record.setdefault("worker", {})["queued_s"] = round(msg["accepted_at"] - started, 3)
        if record.get("checks") == CHECKS_APART:
            _checks_apart(spec, record, timeout_s, idle_s, worker_log, python, env)
    except BaseException:
        trace_path.unlink(missing_ok=True)
        raise
    return finish_capture(record, trace_path, status_path, msg["accepted_at"])


def _checks_apart(spec: dict, record: dict, timeout_s: float, idle_s: float, worker_log: Path | None,
                  python: str | None, env: dict | None) -> None:
    """Run a repeat-1 capture's later phases in the check process (:data:`CHECKS_CALL`) and merge them into
    ``record`` (:func:`attnprof.measure.capture.merge_checks`); a check process that fails or crashes makes those
    phases ``failed`` with its reason (``checks_missing``), as a failed phase does in one process."""
    what = f"checks of {spec['variant']} at {Shape(**spec['shape']).key}"
    msg = _request(spec["device"], {"call": CHECKS_CALL, "args": [spec, record.get("passes")], "timeout_s": timeout_s},
                   idle_s, worker_log, what, python, env)
    merge_checks(record, msg.get("result"), str(msg.get("error", ""))[-2000:])


def call_where_captures_run(function, args: list, mode: str, device: str, idle_s: float, worker_log: Path,
                            python: str | None = None, env: dict | None = None):
    """Call ``function`` (one of :data:`CALLS`: the environment record, the calibration) with ``args`` (JSON values)
    where the run's captures run, and return its JSON result: in the warm capture process for ``device`` (``mode``
    'worker': they need torch and the device as the captures do, and run where they already are; ``python``, ``env``:
    in that Python environment's worker, :func:`connect_or_start`; at most 600 s); else in a fresh process of an A/B
    environment's Python (``python``, :func:`attnprof.measure.env.call_in_interpreter`); else in this job process,
    with ``env`` set first (before torch is imported here: ``cuda:0`` is then the GPU ``env`` pins). ``env``: the
    variables over the process's environment (an A/B environment's, the pinned GPU). Raises as those calls do; in the
    worker, RuntimeError with the traceback when the call raised (the capture process is then replaced), and
    :class:`~attnprof.runtime.isolation.CaptureInterrupted` when it was killed from outside."""
    target = f"{function.__module__}:{function.__name__}"
    if mode == "worker":
        msg = _request(device, {"call": target, "args": args, "timeout_s": 600.0}, idle_s, worker_log, target, python, env)
        if "error" in msg:
            raise RuntimeError(f"{target} failed in the capture worker: {msg['error']}")
        return msg["result"]
    if python:
        return call_in_interpreter(python, env, target, args)
    os.environ.update(env or {})
    return function(*args)


def _request(device: str, request: dict, idle_s: float, worker_log: Path | None, what: str, python: str | None,
             env: dict | None) -> dict:
    """Send one request to the supervisor (starting it when needed), copy its progress lines
    to stderr, and return its final message. Raises CaptureInterrupted when the work was
    killed from outside or the supervisor ended without an answer, and TimeoutError when no
    message came for the request's ``timeout_s`` plus :data:`ANSWER_GRACE_S` seconds (the job fails; nothing is
    recorded)."""
    with signals_raise_exit():
        for _attempt in range(3):  # a supervisor exiting for idleness as we connect: start another
            with connect_or_start(device, idle_s, worker_log, python, env) as sock, sock.makefile("rb") as lines:
                _send(sock, request)
                # Waiting to be accepted is waiting in the supervisor's queue behind other jobs'
                # captures (each bounded by its own timeout), not for this one: no limit. A
                # supervisor that dies closes the connection, which ends the wait.
                sock.settimeout(None)
                first = _next(lines)
                accepted_at = time.time()
                sock.settimeout(request["timeout_s"] + ANSWER_GRACE_S)
                if first is None:  # not accepted
                    continue
                if "error" in first:
                    raise RuntimeError(f"the capture worker refused the request: {first['error']}")
                while (msg := _next(lines)) is not None and "log" in msg:
                    sys.stderr.write(msg["log"])
                    sys.stderr.flush()
                break
        else:
            raise RuntimeError("capture worker closed the connection before accepting the request, three times")
    if msg is None:
        raise CaptureInterrupted(f"{what} interrupted: the capture worker ended without a result (killed from outside); "
                                 "the next run does it again")
    if "interrupted" in msg:
        raise CaptureInterrupted(msg["interrupted"])
    return {**msg, "accepted_at": accepted_at}


# --- supervisor ------------------------------------------------------------------------------

class _Child:
    """The capture process: protocol on its stdin/stdout, progress on its stderr."""

    def __init__(self, device: str):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_PID_ENV: str(os.getpid())}
        self.proc = subprocess.Popen([sys.executable, "-m", "attnprof.runtime.worker", "child", device],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.out, self.err = b"", b""
        self.repeat: int | None = None  # the repeat (round) of the captures it served

    def kill(self) -> int:
        self.proc.kill()  # nothing where it has ended already (Popen.send_signal polls first)
        return self.proc.wait()

    def close(self, wait_s: float = 10.0) -> None:
        """Ask the capture process to exit (end of its input), kill it if it does not."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.kill()


class _Ahead:
    """Where the supervisor gets a fresh process: the oldest spare started ahead that is alive, else a new one. With
    :func:`prestarts` it keeps ``keep`` spares (each one taken starts the next), and starts ``keep`` + 1 at once:
    the first capture and the check process (repeat 1's checks) find theirs ready, whether the supervisor was
    started with the run (attnprof.runtime.jobs.start_capture_workers) or by the first capture job."""

    def __init__(self, device: str, keep: int = 1):
        self.device, self.keep = device, keep if prestarts(device) else 0
        self.spares = [_Child(device) for _ in range(self.keep + 1 if self.keep else 0)]

    def take(self) -> _Child:
        while self.spares and self.spares[0].proc.poll() is not None:
            self.spares.pop(0)  # a spare that died
        child = self.spares.pop(0) if self.spares else _Child(self.device)
        while len(self.spares) < self.keep:
            self.spares.append(_Child(self.device))
        return child

    def close(self) -> None:
        for spare in self.spares:
            spare.kill()


def _read_request(conn: socket.socket) -> dict | None:
    """The request line on ``conn`` if it is a well-formed request (a JSON object with a
    positive ``timeout_s`` and either a ``spec`` with ``variant``/``shape``/``device`` and a
    ``trace`` path, or a ``call``), else None -- after telling the peer why. A peer gets
    :func:`request_timeout_s` seconds to send it."""
    conn.settimeout(request_timeout_s())
    try:
        request = _next(conn.makefile("rb"))
    except (TimeoutError, OSError, ValueError, UnicodeDecodeError) as exc:
        request, why = None, f"unreadable request ({type(exc).__name__})"
    else:
        why = "empty request"
    conn.settimeout(None)
    if isinstance(request, dict):
        spec = request.get("spec")
        timeout = request.get("timeout_s")
        ok_timeout = isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0
        ok_spec = isinstance(spec, dict) and {"variant", "shape", "device"} <= set(spec) and isinstance(request.get("trace"), str)
        if (ok_timeout and (ok_spec or isinstance(request.get("call"), str))) or isinstance(request.get("release"), dict):
            return request
        why = "malformed request"
    _tell(conn, {"error": why})
    if why != "empty request":  # a client that only made sure the supervisor listens (attnprof.runtime.jobs._start_workers)
        log(f"dropped a connection: {why}")
    return None


def _serve_one(conn: socket.socket, child: _Child | None, ahead: _Ahead, request: dict) -> _Child | None:
    """Serve ``request`` (read from ``conn`` by :func:`_admit`) on ``conn``, in ``child`` or a fresh process from
    ``ahead`` where needed (:func:`_child_for`); returns the capture process to keep (None: ended). On any exception
    (SIGTERM/SIGINT included) the capture process that serves it is killed before ``conn`` closes, so a capture never
    outlives the request it serves."""
    child = _child_for(request, child, ahead)
    try:
        return _serve_request(conn, request, child)
    except BaseException:
        child.kill()
        raise


def _order_of(request: dict) -> tuple[int, bool]:
    """Where a request goes in the queue, before arrival order: its round (the spec's ``repeat``; 0 for calls and
    older clients), then whether its capture ends the capture process (:func:`~attnprof.model.variants.ends_capture_process`:
    those go last in their round, so that the round's other captures share one process)."""
    spec = request.get("spec") or {}
    repeat = spec.get("repeat", 0)
    repeat = repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else 0
    return repeat, bool(spec) and ends_capture_process(spec.get("variant"), spec.get("custom"))


def _admit(conn: socket.socket, pending: list) -> None:
    """Read the request on an accepted ``conn`` and append ``(order, conn, request)`` to ``pending`` (order:
    :func:`_order_of`); a peer of another user id, or a malformed request, is dropped."""
    uid = peer_uid(conn)
    if uid != os.getuid():  # an abstract socket has no file permissions: check the peer
        log(f"refused a connection from uid {uid}")
        conn.close()
    elif (request := _read_request(conn)) is None:
        conn.close()
    else:
        pending.append((_order_of(request), conn, request))


def _admit_waiting(listener: socket.socket, pending: list) -> None:
    """Accept every connection waiting on ``listener`` now (:func:`_admit`)."""
    listener.settimeout(0.05)  # clients of one Snakemake round start together: let the stragglers connect
    while True:
        try:
            conn, _ = listener.accept()
        except (TimeoutError, BlockingIOError):
            return
        _admit(conn, pending)


def _serve_request(conn: socket.socket, request: dict, child: _Child) -> _Child | None:
    """Serve ``request`` in ``child`` and answer on ``conn``; returns the process to keep (None: it ended or must not
    serve on)."""
    _tell(conn, {"accepted": child.proc.pid})
    if "call" in request and request["call"] not in CALLS:
        _tell(conn, {"error": f"{request['call']} is not one of the calls the capture worker serves: {sorted(CALLS)}"})
        return child
    with contextlib.suppress(OSError):  # it died already: its exit status is read below
        child.proc.stdin.write((json.dumps({k: v for k, v in request.items() if k != "timeout_s"}) + "\n").encode())
        child.proc.stdin.flush()
    how, reply = _await_reply(conn, child, time.monotonic() + float(request["timeout_s"]))
    if how == "left":
        log(f"{(request.get('spec') or {}).get('variant') or request.get('call')}: client left, capture process killed")
        return None
    if how != "reply":  # timed out (ours: a result, not an interruption), or ended without a reply
        _tell(conn, _ended_message(request, reply["returncode"], reply["tail"]))
        return None
    _tell(conn, reply)
    if _reusable_reply(reply):
        return child
    child.close()  # work that did not fully succeed: the next request gets a fresh process
    return None


def _child_for(request: dict, child: _Child | None, ahead: _Ahead) -> _Child:
    """The process to serve ``request`` in: ``child``, unless it ended or the request starts a new round of repeats
    (every round gets a fresh capture process: a repeat re-draws the process, the CUDA context, the allocator's
    state and the libraries' plan choices; docs/statistics.md); a fresh one comes from ``ahead``."""
    repeat = (request.get("spec") or {}).get("repeat")
    if child is not None and repeat is not None and child.repeat is not None and child.repeat != repeat:
        log(f"repeat {repeat}: a fresh capture process for the new round")
        child.close()
        child = None
    if child is None or child.proc.poll() is not None:
        child = ahead.take()
    if repeat is not None:
        child.repeat = repeat
    return child


def _await_reply(conn: socket.socket, child: _Child, deadline: float) -> tuple[str, dict]:
    """Relay ``child``'s progress lines to the client on ``conn`` until its reply. Returns ("reply", the reply);
    ("timeout", {returncode: None, tail}) at ``deadline`` (the child killed); ("ended", {returncode, tail}) when the
    child ended without a reply; ("left", {}) when the client went away (the child killed: captures never overlap)."""
    out_fd, err_fd = child.proc.stdout.fileno(), child.proc.stderr.fileno()
    open_fds, tail = {out_fd, err_fd}, b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            child.kill()
            return "timeout", {"returncode": None, "tail": tail.decode(errors="replace")}
        readable, _, _ = select.select(list(open_fds) + [conn.fileno()], [], [], min(left, 1.0))
        if conn.fileno() in readable and not conn.recv(1, socket.MSG_PEEK):
            child.kill()
            return "left", {}
        if err_fd in readable:
            tail = _relay_progress(child, err_fd, open_fds, tail, conn)
        if out_fd in readable and (reply := _read_reply(child, out_fd, open_fds)) is not None:
            return "reply", reply
        if out_fd not in open_fds:
            return "ended", {"returncode": child.proc.wait(), "tail": (tail + child.err).decode(errors="replace")}


def _relay_progress(child: _Child, fd: int, open_fds: set, tail: bytes, conn: socket.socket) -> bytes:
    """Read the child's progress stream, send each whole line to the client on ``conn``; returns the stream's last
    4000 bytes."""
    data = os.read(fd, 65536)
    if not data:
        open_fds.discard(fd)
    child.err += data
    *done, child.err = child.err.split(b"\n")
    for line in done:
        _tell(conn, {"log": line.decode(errors="replace") + "\n"})
    return (tail + data)[-4000:]


def _read_reply(child: _Child, fd: int, open_fds: set) -> dict | None:
    """Read the child's protocol stream; its first whole line (the reply), or None while there is none."""
    data = os.read(fd, 1 << 20)
    if not data:
        open_fds.discard(fd)
    child.out += data
    if b"\n" not in child.out:
        return None
    line, child.out = child.out.split(b"\n", 1)
    return json.loads(line)


def _ended_message(request: dict, returncode: int | None, tail: str) -> dict:
    """The answer for a request whose process ended (or was killed at the deadline) without a reply: an
    interruption (killed from outside), else a failed record (a capture) or an error (a call)."""
    spec = request.get("spec")
    if returncode is not None and -returncode in INTERRUPT_SIGNALS:
        return {"interrupted": interrupted_message(spec, -returncode) if spec else
                f"{request['call']} interrupted: the capture process was killed by signal {-returncode} from outside"}
    if spec:
        return {"record": crash_record(spec, returncode, request["timeout_s"], tail)}
    return {"error": f"{request['call']}: {crash_reason(returncode, request['timeout_s'], tail)}"}


def _released(pending: list, device: str, served_at: float) -> bool:
    """Answer the release requests of ``pending`` (:func:`release_idle`; taken out of it) and say whether to exit:
    one asks for this supervisor's device and working directory, nothing else waits, and it has served nothing since
    the seconds the request names."""
    asks = [p for p in pending if "release" in p[2]]
    go = len(asks) == len(pending) and any(_asks_this(p[2]["release"], device, served_at) for p in asks)
    for p in asks:
        pending.remove(p)
        _tell(p[1], {"released": go})
        p[1].close()
    return go


def _asks_this(ask: dict, device: str, served_at: float) -> bool:
    """Whether a release request ``ask`` ({device, cwd, idle_s}) is for this supervisor, idle that long."""
    idle_s = ask.get("idle_s")
    return (ask.get("device") == device and ask.get("cwd") == os.getcwd() and isinstance(idle_s, (int, float))
            and time.monotonic() - served_at >= idle_s)


def listening_keys() -> set[str]:
    """The keys of this user's supervisors listening now: their abstract addresses (:func:`address`) in Linux's
    /proc/net/unix, where such a name begins with '@' and is a line's eighth field."""
    prefix = "@" + address("")[1:]
    with open("/proc/net/unix") as table:
        names = [parts[7] for parts in map(str.split, table) if len(parts) == 8]
    return {name[len(prefix):] for name in names if name.startswith(prefix)}


def release_idle(device: str, keep: set[str], idle_s: float = RELEASE_IDLE_S) -> list[str]:
    """Ask this user's supervisors (:func:`listening_keys`) other than ``keep`` to exit where they are of ``device``
    and this working directory and have served nothing for ``idle_s`` s: an earlier run's idle capture processes
    hold GPU memory that this run's captures need (:data:`RELEASE_IDLE_S`). Returns the keys that exit; one that is
    serving, or of another device or directory, answers no and serves on."""
    out = []
    for key in sorted(listening_keys() - set(keep)):
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            sock = _connect(address(key))
            if sock is None:
                continue
            with contextlib.closing(sock):
                sock.settimeout(2)  # an idle supervisor answers at once; a busy one would only hold up the run's start
                _send(sock, {"release": {"device": device, "cwd": os.getcwd(), "idle_s": idle_s}})
                if (_next(sock.makefile("rb")) or {}).get("released"):
                    out.append(key)
    return out


@contextlib.contextmanager
def _device_lock(device: str):
    """Hold the device lock of this user, working directory and ``device`` while serving one request: the
    supervisors of an A/B run (config ``environments``: one per Python environment, each keyed apart) never
    run two captures at once. Their order comes from Snakemake (rule capture's priority, one capture at a
    time in an A/B run); the lock is the guarantee that they never overlap whatever --cores and resources
    say. A flock is released by the kernel when its holder dies, so a killed supervisor leaves no stale lock.
    The supervisors of a run on several GPUs (one per GPU, its UUID in CUDA_VISIBLE_DEVICES: attnprof.measure.gpus)
    lock apart, so they serve at once."""
    where = hashlib.sha256(json.dumps([device, os.getcwd(), os.environ.get("CUDA_VISIBLE_DEVICES")]).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"attnprof-device-{os.getuid()}-{where}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def serve(key: str, device: str, idle_s: float, spares: int = 1) -> int:
    """Supervisor main loop (module docstring). Exits 0 after ``idle_s`` s without a request,
    or on SIGTERM/SIGINT, killing its capture process. ``spares``: how many it keeps (:class:`_Ahead`)."""
    try:
        request_timeout_s()
    except ValueError as exc:
        log(f"capture worker {key}: {exc}; not starting")
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(key))
    except OSError:  # another supervisor for this key won the race -- or another user holds the address
        with contextlib.suppress(RuntimeError):
            if (sock := _connect(address(key))) is not None:
                sock.close()
                return 0
        log(f"capture worker {key}: its address is held by a process of another user; not starting")
        return 1
    listener.listen(256)  # a Snakemake run's capture jobs queue here (the GPU serialisation point)
    procs: dict[str, _Child | None] = {"capture": None, "checks": None}  # the capture process; the check process
    ahead = _Ahead(device, spares)  # the spares started ahead (a GPU run)
    pending: list = []  # (order, conn, request): accepted, not yet served, in arrival order within an order
    served_at = time.monotonic()  # a supervisor just started is not idle: release_idle leaves it
    log(f"capture worker {key} listening (pid {os.getpid()}, device {device})")
    try:
        with signals_raise_exit():
            while True:
                if not pending:
                    listener.settimeout(idle_s)
                    try:
                        conn, _ = listener.accept()
                    except TimeoutError:
                        break
                    _admit(conn, pending)
                _admit_waiting(listener, pending)
                if _released(pending, device, served_at):
                    break
                if not pending:
                    continue
                # the earliest round first, the captures that end their process last in it, then arrival order:
                # the repeats stay in rounds whatever number of capture jobs Snakemake starts at once (each round
                # gets a fresh capture process); the sort is stable, so arrival order stays within an order
                pending.sort(key=lambda p: p[0])
                _, conn, request = pending.pop(0)
                kind = "checks" if request.get("call") == CHECKS_CALL else "capture"
                with conn, _device_lock(device):  # the supervisors of an A/B run (one per environment) take turns
                    procs[kind] = _serve_one(conn, procs[kind], ahead, request)
                served_at = time.monotonic()
    finally:
        listener.close()
        for _, conn, _ in pending:  # accepted, never served: their jobs fail (an interruption) and rerun
            conn.close()
        for child in procs.values():  # idle (ours), or a signal mid-capture: either way it must not run on
            if child is not None:
                child.kill()
        ahead.close()
        log(f"capture worker {key} exits")
    return 0


# --- capture process -------------------------------------------------------------------------

def child_main(device: str) -> int:
    """Capture process main loop: start torch (and CUDA) once, then one capture per request
    line on stdin, one ``{"record": ...}`` line on the protocol stream per capture. Anything
    printed to stdout by a library goes to stderr (the progress stream) instead."""
    started_at = time.time()
    die_with_parent(int(os.environ.get(PARENT_PID_ENV) or os.getppid()))
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    t0 = time.perf_counter()
    import torch

    from attnprof.measure.capture import capture

    cuda = device == "cuda" and torch.cuda.is_available()
    if cuda:
        torch.zeros(1, device="cuda")  # create the CUDA context now, not inside the first capture
        torch.cuda.synchronize()
    _first_profiler_session(cuda)
    startup_s = round(time.perf_counter() - t0, 3)
    log(f"capture process {os.getpid()} ready in {startup_s} s")
    captures = 0
    for line in sys.stdin:
        request = json.loads(line)
        if "call" in request:
            reply = _call(request["call"], request["args"])
        else:
            record = capture(request["spec"], Path(request["trace"]))
            record["worker"] = {"pid": os.getpid(), "captures_before": captures, "startup_s": startup_s,
                                "started_at": round(started_at, 3)}
            captures += 1
            reply = {"record": record}
        if cuda:
            torch.cuda.empty_cache()
        proto.write(json.dumps(reply, default=str) + "\n")
        proto.flush()
    return 0


def _first_profiler_session(cuda: bool) -> None:
    """One empty ``torch.profiler`` session (CPU, and CUDA on a GPU), nothing exported: what a process's first
    session costs beyond the others (CUPTI's start-up, about 4 s on the H200; the lazy ``torch._inductor`` import
    that ``prepare_trace`` triggers, 1.3 s on the CPU: docs/costs.md) is paid at start-up, by a spare while another
    process captures, and every capture follows an earlier session in its process."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])):
        torch.zeros(1, device="cuda" if cuda else "cpu").add_(1)
        if cuda:
            torch.cuda.synchronize()


def _call(target: str, args: list) -> dict:
    """``{"result": module.function(*args)}``, or ``{"error": traceback}`` if it raised. ``target``: one of
    :data:`CALLS` (the supervisor refuses any other before it reaches this process)."""
    import pkgutil
    import traceback

    try:
        return {"result": pkgutil.resolve_name(target)(*args)}
    except Exception:
        return {"error": traceback.format_exc(limit=8)}


def main(argv: list[str]) -> int:
    if argv[1] == "serve":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        return serve(argv[2], argv[3], float(argv[4]), int(argv[5]) if len(argv) > 5 else 1)
    if argv[1] == "child":
        return child_main(argv[2])
    raise SystemExit(f"usage: python -m attnprof.runtime.worker serve KEY DEVICE IDLE_S [SPARES] | child DEVICE (got {argv[1:]})")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
