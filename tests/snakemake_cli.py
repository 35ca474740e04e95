"""Snakemake's command line for the tests, without an interpreter start per call.

The tests run Snakemake's command line about twenty times. A fresh interpreter spends about 1.2 s
of each call importing Snakemake, pandas and the Snakefile's modules (1.9 s for a dry run of the tiny
workflow, 0.7 s here). Each call is still a process of its own, with its own working directory,
environment, signal handlers, exit status and output: a child of one ``multiprocessing`` fork server
per test process, which imported :data:`PRELOAD` once, and the child runs ``snakemake.cli.main``,
the function the ``snakemake`` console script runs.

A test that needs what only a new interpreter gives (``PYTHONPATH`` read at start) runs
``sys.executable -m snakemake`` itself."""
from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import tempfile
from pathlib import Path

#: Snakemake and the libraries the Snakefile imports; not attnprof: the Snakefile imports the package
#: from its own directory's src/, which a test may have edited in its copy of the workflow. pytest: a
#: child imports the parent's ``__main__`` (pytest's) before it runs.
PRELOAD = ["snakemake.cli", "snakemake.api", "snakemake.workflow", "snakemake.persistence", "snakemake.iocontainers",
           "pandas", "yaml", "pytest"]

_CONTEXT = None


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def _main(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        new = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(new, fd)
        os.close(new)
    from snakemake.cli import main

    main(argv)  # exits with Snakemake's status


def run(args: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess:
    """``snakemake *args`` in ``cwd`` (default: this process's) with ``env`` (default: this
    process's environment) -> ``CompletedProcess`` with its exit status, stdout and stderr as text,
    as ``subprocess.run([sys.executable, "-m", "snakemake", *args], capture_output=True, text=True)``
    gives. Raises ``subprocess.TimeoutExpired`` (the run killed) after ``timeout`` seconds."""
    args = [str(a) for a in args]
    with tempfile.TemporaryDirectory(prefix="snakemake-cli-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        for path in (out, err):
            Path(path).touch()  # a child that fails before it runs Snakemake has written nothing
        proc = _context().Process(target=_main, args=(args, str(cwd or os.getcwd()), dict(os.environ if env is None else env),
                                                      out, err))
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired(["snakemake", *args], timeout)
        read = lambda path: Path(path).read_text(errors="replace")  # noqa: E731
        return subprocess.CompletedProcess(["snakemake", *args], proc.exitcode, read(out), read(err))


def job_stats(out: str) -> dict[str, int]:
    """rule -> job count from the 'Job stats' table of Snakemake's output ``out``; {} when it has none
    (nothing to be done)."""
    if "Job stats:" not in out:
        return {}
    table = out.split("Job stats:")[1].split("total")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M)}
