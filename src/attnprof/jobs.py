"""The light stages (tables, findings, plots, report, compare) in forked children of one
preloaded process, instead of a fresh Python per job.

A ``script:`` rule starts a new Python interpreter for every job, which then imports pandas,
matplotlib, jinja2 and this package: measured at 0.8 s a job on a 2-core CPU machine and 1-3 s
on the H200 node, for jobs whose own work takes a fraction of that (``benchmarks/h200_runs.json``).
These rules use ``run:`` and hand the job to :func:`run_script`, which runs the same script file
with the same ``snakemake`` object a ``script:`` rule would give it, in one of two ways:

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

import multiprocessing
import os
import runpy
import signal
from pathlib import Path

# What every light job imports: loaded once by the fork server, shared by its children.
# snakemake.cli: a child re-imports the parent's __main__ (the `snakemake` console script, which
# imports snakemake.cli) before it runs; preloaded, that import costs nothing.
PRELOAD = [
    "snakemake.cli",
    "snakemake.iocontainers",
    "pandas",
    "matplotlib.backends.backend_agg",
    "jinja2",
    "jsonschema",
    "attnprof.trace",
    "attnprof.tables",
    "attnprof.backward",
    "attnprof.findings",
    "attnprof.plots",
    "attnprof.report",
    "attnprof.compare",
]

_CONTEXT = None


def _forkserver():
    """The fork-server context, its preload set (the server itself starts at the first job)."""
    global _CONTEXT
    if _CONTEXT is None:
        os.environ.setdefault("MPLBACKEND", "Agg")  # no display: matplotlib's non-interactive backend
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def start_forkserver() -> None:
    """Start the fork server now (it imports :data:`PRELOAD` in its own process, while the first
    captures run), so that the first light job does not wait for those imports."""
    _forkserver()
    from multiprocessing import forkserver

    forkserver.ensure_running()


def job_object(job: dict):
    """The ``snakemake`` object a ``script:`` rule hands its script, built from a ``run:``
    block's ``locals()`` (input, output, params, wildcards, threads, resources, log, rule) and
    Snakemake's own class (snakemake.iocontainers.Snakemake, as its script preamble does)."""
    from snakemake.iocontainers import Snakemake

    return Snakemake(job["input"], job["output"], job["params"], job["wildcards"], job["threads"],
                     job["resources"], job["log"], {}, job["rule"], None,
                     str(Path(job["input"].script).parent))


def _child(script: str, snakemake) -> None:
    # as Snakemake's script preamble: the script sees `snakemake` and its own __file__
    runpy.run_path(script, init_globals={"snakemake": snakemake}, run_name="__main__")


def run_script(job: dict, in_main_process: bool) -> None:
    """Run the script named by the job's ``script`` input (a rule's ``input.script``, declared
    as an input so that editing it reruns the rule, as ``script:`` would) for the job whose
    ``run:`` block's ``locals()`` is ``job``.

    in_main_process: Snakemake's ``workflow.is_main_process``; there the job runs in a child of
    the fork server, elsewhere in this process.

    Raises RuntimeError when the child fails: its exit code, or the signal that ended it (a
    kill by the out-of-memory killer reads SIGKILL), and where its log is. The script itself
    writes its traceback into that log (attnprof.logs.script_log)."""
    script = str(Path(job["input"].script).resolve())
    snakemake = job_object(job)
    if not in_main_process:
        _child(script, snakemake)
        return
    proc = _forkserver().Process(target=_child, args=(script, snakemake), name=f"attnprof {job['rule']}",
                                 daemon=True)
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        how = (f"was ended by {signal.Signals(-proc.exitcode).name}" if proc.exitcode < 0
               else f"exited with status {proc.exitcode}")
        log = ", ".join(job["log"]) or "no log"
        raise RuntimeError(f"rule {job['rule']}: {Path(script).name} {how}; see {log}")
