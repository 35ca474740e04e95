"""The stages' scripts (tables, findings, plots, report, compare, and the capture clients: capture,
environment, calibrate) in forked children of one preloaded process, instead of a fresh Python per job.

A ``script:`` rule starts a new Python interpreter for every job, which then imports pandas,
matplotlib, jinja2 and this package: measured at 0.8 s a job on a 2-core CPU machine and 1-3 s
on the H200 node, for jobs whose own work takes a fraction of that (``benchmarks/h200_runs.json``).
These rules use ``run:`` and hand the job to :func:`run_script`, which runs the same script file
with the same ``snakemake`` object and the same thread variables a ``script:`` rule would give it,
in one of two ways:

- in Snakemake's main process (local execution, ``force-use-threads`` from the workflow profile
  ``profiles/default``): in a child process forked from a ``multiprocessing`` fork server that
  imported :data:`PRELOAD` once (``multiprocessing.set_forkserver_preload``). Each job still has
  a process of its own: its own memory, no shared interpreter state, a crash or an out-of-memory
  kill that fails that job alone (read from the child's exit code), and jobs run in parallel up
  to ``--cores``;
- anywhere else (a job Snakemake spawned into a process of its own, a cluster job): in that
  process, which serves this one job.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# What the jobs import: loaded once by the fork server, shared by its children.
# snakemake.cli: a child re-imports the parent's __main__ (the `snakemake` console script, which
# imports snakemake.cli) before it runs; preloaded, that import costs nothing.
PRELOAD = [
    "snakemake.cli",
    "snakemake.iocontainers",
    "pandas",
    "matplotlib.backends.backend_agg",
    "jinja2",
    "jsonschema",
    "attnprof.analysis.trace",
    "attnprof.analysis.tables",
    "attnprof.analysis.backward",
    "attnprof.findings",
    "attnprof.render.plots",
    "attnprof.render.report",
    "attnprof.render.compare",
    "attnprof.analysis.compare",
    "attnprof.runtime.isolation",  # the capture clients (without torch: the capture itself runs in the worker or a fresh process)
    "attnprof.runtime.worker",
]

_CONTEXT = None
_STARTED_AT = 0.0  # when the fork server was set up: package files newer than this are not what it imported


def _package_edited_since(t: float) -> bool:
    """Whether a module of this package changed on disk after ``t`` (the preloaded copy is then stale)."""
    return any(p.stat().st_mtime > t for p in Path(__file__).resolve().parents[1].rglob("*.py"))


def _forkserver():
    """The fork-server context, its preload set (the server itself starts at the first job)."""
    global _CONTEXT, _STARTED_AT
    if _CONTEXT is None:
        # (matplotlib's backend is set by attnprof.render.plots itself: Snakemake's environment stays as it is, since
        # the capture worker is keyed by it)
        _STARTED_AT = time.time()
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def start_forkserver() -> None:
    """Start the fork server now (it imports :data:`PRELOAD` in its own process, while the first
    captures run), so that the first light job does not wait for those imports."""
    _forkserver()
    from multiprocessing import forkserver

    forkserver.ensure_running()


def start_capture_workers(workflow, device: str, idle_s: float, threads: int, workers: list[dict],
                          spares: int = 1) -> None:
    """Start the run's capture workers (attnprof.runtime.worker) while Snakemake builds its DAG, not with the first
    capture job, so their first processes have started (about 8 s on the H200) when the first capture asks. A daemon
    thread waits for ``workflow`` (at parse time) to begin executing; on a dry run, a touch, a cluster executor, a job
    process or without ``force-use-threads`` it does nothing. Else one new interpreter with this process's environment
    (the fork server's and its jobs') starts, for each of ``workers`` (dicts: ``python`` and ``env`` of an A/B
    environment, else None; ``log``; ``gpu_choice``: the capture rule's resource) and each GPU the run may take, the
    supervisor a capture job would connect to, by a job's own code path (:func:`_start_workers`) with a job's
    variables (:func:`job_environment` of ``threads``, Snakemake's default ``tmpdir``): the same key. Each keeps
    ``spares`` spares; one nobody asks goes after ``idle_s`` s. First the idle supervisors of earlier runs in this
    directory are asked to exit (attnprof.runtime.worker.release_idle): they hold GPU memory. The fork server starts then too. The caller does this
    on a GPU run only: on a CPU run a start-up would share the cores with the first captures' host timings."""
    def begin() -> None:
        while workflow.executor_plugin is None:  # parse time: what kind of run this is, Snakemake says at execute()
            time.sleep(0.02)
        if (workflow.dryrun or workflow.touch or not workflow.local_exec or not workflow.is_main_process
                or not workflow.use_threads):
            return
        environ = job_environment(threads, tempfile.gettempdir())
        src = str(Path(__file__).resolve().parents[2])  # this attnprof (not through PYTHONPATH: the environment is the key)
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from attnprof.runtime.jobs import _start_workers; "
                "_start_workers(*json.loads(sys.argv[2]))")
        subprocess.Popen([sys.executable, "-c", code, src, json.dumps([device, idle_s, environ, workers, spares])],
                         stdin=subprocess.DEVNULL)
        start_forkserver()

    threading.Thread(target=begin, daemon=True, name="attnprof-start-workers").start()


def _start_workers(device: str, idle_s: float, environ: dict, workers: list[dict], spares: int) -> None:
    """:func:`start_capture_workers`'s interpreter: each supervisor as a capture job's client would start it."""
    from types import SimpleNamespace

    from attnprof.measure.gpus import gpu_choice, pinned_environ, run_gpus
    from attnprof.measure.progress import log
    from attnprof.runtime.worker import connect_or_start, release_idle, worker_key

    os.environ.update(environ)
    starts = []
    for w in workers:
        choice = gpu_choice(SimpleNamespace(gpu_choice=w["gpu_choice"]))
        gpus = run_gpus(choice) if device == "cuda" and choice != "any" else []
        starts += [(w, w["env"] if gpu is None else pinned_environ(gpu, w["env"])) for gpu in gpus or [None]]
    keys = [worker_key(device, w["python"], env) for w, env in starts]
    if released := release_idle(device, set(keys)):
        log(f"asked {len(released)} idle capture worker(s) of earlier runs to exit: their processes held GPU memory")
    for (w, env), key in zip(starts, keys):
        Path(w["log"]).parent.mkdir(parents=True, exist_ok=True)
        # returns once it listens; the connection sends nothing: not a request
        connect_or_start(device, idle_s, Path(w["log"]), w["python"], env, spares, key).close()


def job_object(job: dict):
    """The ``snakemake`` object a ``script:`` rule hands its script, built from a ``run:``
    block's ``locals()`` (input, output, params, wildcards, threads, resources, log, rule) and
    Snakemake's own class (snakemake.iocontainers.Snakemake, as its script preamble does)."""
    from snakemake.iocontainers import Snakemake

    return Snakemake(job["input"], job["output"], job["params"], job["wildcards"], job["threads"],
                     job["resources"], job["log"], {}, job["rule"], None,
                     str(Path(job["input"].script).parent))


#: The variables in which Snakemake hands a ``script:`` job its thread count (snakemake/shell.py), for the
#: BLAS and OpenMP libraries its script may load.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def script_environment(snakemake) -> dict[str, str]:
    """What Snakemake adds to the environment of a ``script:`` job (snakemake/shell.py): the job's
    threads in :data:`THREAD_VARIABLES`, and its ``tmpdir`` resource as TMPDIR and TMP. A job of 0 threads (a
    capture client in worker mode on a GPU run: it holds no core, it waits on the worker's socket) gets its
    ``threads`` param instead, the threads of the captures it hands on: the capture worker is keyed by the
    environment, which must be the one the environment record and the calibration see."""
    threads = snakemake.threads or getattr(snakemake.params, "threads", snakemake.threads)
    return job_environment(threads, snakemake.resources.get("tmpdir"))


def job_environment(threads: int, tmpdir: str | None) -> dict[str, str]:
    """:func:`script_environment` of a job of ``threads`` threads and ``tmpdir`` (None: none)."""
    env = dict.fromkeys(THREAD_VARIABLES, str(threads))
    if tmpdir:
        env["TMPDIR"] = env["TMP"] = str(tmpdir)
    return env


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, first); None
    where /proc cannot say (the process is gone, or not Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 19 else None


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (field 22 of /proc/<pid>/stat, in clock ticks since boot), which
    tells it from a later process that reuses its pid; None where /proc cannot say (not Linux)."""
    fields = _stat(pid)
    return fields[19] if fields else None


def _alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` still runs: it exists, is not a zombie (killed, and not yet reaped
    by a parent that may never reap it) and started at ``start`` (None: not checked)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or its pid reused by another user's process
        return False
    fields = _stat(pid)
    if fields is None:  # no /proc (not Linux, where no start is recorded either), or it has just gone
        return start is None
    return fields[0] not in ("Z", "X") and (start is None or fields[19] == start)


def _die_with_snakemake(owner: tuple[int, str | None]) -> None:
    """End this job's process with SIGKILL once Snakemake's main process (``owner``: its pid and
    :func:`_process_start`) is gone: a job outliving a killed Snakemake would write its outputs
    later, over those of a newer run (a capture client: its status beside another run's trace).
    Its own children go with it: a capture in the capture worker is killed when its client's
    connection closes, a fresh capture process dies with its parent. Polled every 0.2 s by a
    daemon thread (the job's parent is the fork server, which outlives Snakemake briefly, so the
    kernel's parent-death signal would not do)."""
    def watch() -> None:
        while _alive(*owner):
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)

    if not _alive(*owner):
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, daemon=True, name="attnprof-snakemake-watch").start()


def _child(script: str, snakemake, done: str | None = None, owner: tuple[int, str | None] | None = None) -> None:
    """Run ``script`` as Snakemake's script preamble would (it sees ``snakemake`` and its own
    ``__file__``, in the environment of a ``script:`` job: :func:`script_environment`). When
    ``done`` is given, write there how the script ended ("ok", or "exit <status>"): the job's own
    record, read when the fork server loses the exit status. ``owner``: Snakemake's main process,
    which this job does not outlive (:func:`_die_with_snakemake`)."""
    if owner is not None:
        _die_with_snakemake(owner)
    os.environ.update(script_environment(snakemake))
    code = 1  # an exception ends the script as exit status 1
    try:
        runpy.run_path(script, init_globals={"snakemake": snakemake}, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    finally:
        if done:
            Path(done).write_text("ok" if code == 0 else f"exit {code}")


#: What Process.exitcode reads when the fork server could not report a child's exit status (the
#: server died, or CPython gh-140867: "forkserver fails silently under load causing Popen.poll()
#: to return 255"); the child may then still be running, or have finished either way.
STATUS_LOST = 255


def _owner() -> tuple[int, str | None]:
    """This process (Snakemake's main process, where a job is handed out) as :func:`_die_with_snakemake` watches it."""
    return os.getpid(), _process_start(os.getpid())


def _fresh_process(script: str, snakemake) -> int:
    """Run the job once more in a new Python interpreter (no fork server); returns its exit status."""
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as fh:
        pickle.dump((script, snakemake, None, _owner()), fh)
    package_dir = str(Path(__file__).resolve().parents[2])  # this attnprof, as the Snakefile imports it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_dir, os.environ.get("PYTHONPATH")]))}
    try:
        code = "import pickle, sys; from attnprof.runtime.jobs import _child; _child(*pickle.load(open(sys.argv[1], 'rb')))"
        return subprocess.run([sys.executable, "-c", code, fh.name], env=env).returncode
    finally:
        os.unlink(fh.name)


def _forked(script: str, snakemake, rule: str) -> int:
    """Run the job in a child of the fork server; its exit status (negative: the signal that
    ended it). Where the server lost that status (:data:`STATUS_LOST`), the child's own record
    of how it ended decides, and without one the job runs once more in a new interpreter."""
    name = Path(script).name
    with tempfile.TemporaryDirectory(prefix="attnprof-job-") as tmp:
        done = Path(tmp) / "done"
        proc = _forkserver().Process(target=_child, args=(script, snakemake, str(done), _owner()), name=f"attnprof {rule}",
                                     daemon=True)
        proc.start()
        proc.join()
        if proc.exitcode != STATUS_LOST:
            return proc.exitcode
        while _alive(proc.pid, None):  # perhaps the status never came: wait for the child itself (the fork server's)
            time.sleep(0.05)
        ended = done.read_text() if done.exists() else None
    if ended is None:
        print(f"attnprof: rule {rule}: the fork server lost {name} before it finished; running it again in a new process",
              file=sys.stderr)
        return _fresh_process(script, snakemake)
    if ended == "ok":
        print(f"attnprof: rule {rule}: the fork server lost the exit status of {name}; the job recorded that it finished",
              file=sys.stderr)
        return 0
    return int(ended.split()[1])  # the script's own exit, as it recorded it: a failure like any other


def run_script(job: dict, in_main_process: bool) -> None:
    """Run the script named by the job's ``script`` input (a rule's ``input.script``, declared
    as an input so that editing it reruns the rule, as ``script:`` would) for the job whose
    ``run:`` block's ``locals()`` is ``job``.

    in_main_process: Snakemake's ``workflow.is_main_process``; there the job runs in a child of
    the fork server (in a new interpreter once the package changed on disk during the run),
    elsewhere in this process.

    Where the fork server loses the child's exit status (:data:`STATUS_LOST`), the job waits for
    the child to be gone and reads the child's own record that it finished; without one it runs
    the script once more in a new interpreter.

    Raises RuntimeError when the child fails: its exit code, or the signal that ended it (a
    kill by the out-of-memory killer reads SIGKILL), and where its log is. The script itself
    writes its traceback into that log (attnprof.runtime.logs.script_log)."""
    script = str(Path(job["input"].script).resolve())
    snakemake = job_object(job)
    if not in_main_process:
        _child(script, snakemake)
        return
    name = Path(script).name
    if _CONTEXT is not None and _package_edited_since(_STARTED_AT):
        # the package was edited during this run: the fork server holds the old modules
        print(f"attnprof: rule {job['rule']}: the package changed since this run began; running {name} in a new process",
              file=sys.stderr)
        code = _fresh_process(script, snakemake)
    else:
        code = _forked(script, snakemake, job["rule"])
    if code != 0:
        how = (f"was ended by {signal.Signals(-code).name}" if code < 0 else
               "was interrupted (exit status 130: SIGINT, Ctrl-C)" if code == 130 else f"exited with status {code}")
        raise RuntimeError(f"rule {job['rule']}: {name} {how}; see {', '.join(job['log']) or 'no log'}")
