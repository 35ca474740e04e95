"""The light stages' runner (attnprof.runtime.jobs): a job runs its script in a process of its own, forked
from the preloaded fork server, and a failure or a kill fails that job alone with a message that
names the script, the cause and the log."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import snakemake_cli
from test_capture import alive

SRC = Path(__file__).resolve().parents[1] / "src"

SNAKEFILE = f"""
import os, sys
sys.path.insert(0, {str(SRC)!r})
from attnprof.runtime import jobs
from attnprof.runtime.jobs import run_script
# these jobs import nothing heavy: a light preload keeps each fork server start short (the workflow tests
# run the real PRELOAD)
jobs.PRELOAD[:] = ["snakemake.cli", "snakemake.iocontainers", "attnprof.runtime.logs"]
if workflow.is_main_process:
    Path("snakemake.pid").write_text(str(os.getpid()))

rule all:
    input: expand("out/{{name}}.txt", name=["ok_a", "ok_b", "fails", "killed", "interrupted"])

rule real255:
    input: "out/exits_255.txt"

rule lost:
    input: expand("out/{{name}}.txt", name=["server_dies_job_finishes", "server_dies_job_fails"])

rule job:
    input: script="{{name}}.py"
    output: "out/{{name}}.txt"
    log: "logs/{{name}}.log"
    threads: 2
    resources: tmpdir="@TMP@"
    params: greeting="hello <&>"
    run: run_script(locals(), workflow.is_main_process)
"""

OK = """
import os
from attnprof.runtime.logs import script_log
with script_log(snakemake.log[0]):
    print("running", snakemake.rule, snakemake.wildcards.name)
    env = " ".join(os.environ.get(k, "-") for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TMPDIR"))
    open(snakemake.output[0], "w").write(f"{os.getpid()} {snakemake.params.greeting} {snakemake.input.script} {env}")
"""
FAILS = """
from attnprof.runtime.logs import script_log
with script_log(snakemake.log[0]):
    raise ValueError("a corrupt table: row 3")
"""
KILLED = """
import os, signal
os.kill(os.getpid(), signal.SIGKILL)
"""
# the fork server dies under a running job (its exit status is then lost, as in CPython gh-140867), then the
# job finishes, or is killed before it finishes; a job run again in a new process has no fork server to kill
SERVER_DIES = """
import os, signal
parent = os.getppid()
under_server = b"forkserver" in open(f"/proc/{parent}/cmdline", "rb").read()
if under_server:
    os.kill(parent, signal.SIGKILL)
if under_server and FAIL:  # killed before it finished: no record of how it ended
    os.kill(os.getpid(), signal.SIGKILL)
open(snakemake.output[0], "w").write("in a new process" if not under_server else "under the fork server")
"""


# writes its pid, then its output 3 s later
SLOW = """
import os, time
open("slow.pid", "w").write(str(os.getpid()))
time.sleep(3)
open(snakemake.output[0], "w").write("written after the sleep")
"""


def write(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE.replace("@TMP@", str(tmp_path / "scratch")))
    for name, text in {"ok_a": OK, "ok_b": OK, "fails": FAILS, "killed": KILLED, "slow": SLOW,
                       "interrupted": "raise SystemExit(130)\n",
                       "server_dies_job_finishes": "FAIL = False\n" + SERVER_DIES,
                       "server_dies_job_fails": "FAIL = True\n" + SERVER_DIES,
                       "exits_255": "open('ran', 'a').write('x')\nraise SystemExit(255)\n"}.items():
        (tmp_path / f"{name}.py").write_text(text)


def command(tmp_path: Path, *extra: str, targets: tuple[str, ...] = (), cores: int = 2) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--cores", str(cores), "--keep-going", "--directory", str(tmp_path),
            "--snakefile", str(tmp_path / "Snakefile"), *extra, *targets]


def run(tmp_path: Path, *extra: str, targets: tuple[str, ...] = (), cores: int = 2,
        fresh: bool = False) -> subprocess.CompletedProcess:
    """Snakemake on the test Snakefile: through tests/snakemake_cli.py, or (``fresh``) in a new interpreter,
    for a test whose jobs look at their parents' command lines (a fork server's child has the fork
    server's)."""
    write(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    cmd = command(tmp_path, *extra, targets=targets, cores=cores)
    if not fresh:
        return snakemake_cli.run(cmd[3:], env=env, timeout=300)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_each_job_runs_in_its_own_process_and_a_failure_fails_that_job_alone(tmp_path):
    proc = run(tmp_path, "--force-use-threads")
    assert proc.returncode != 0  # two of the four jobs fail
    snakemake_pid = int((tmp_path / "snakemake.pid").read_text())
    pids = set()
    for name in ("ok_a", "ok_b"):
        pids.add(int((tmp_path / "out" / f"{name}.txt").read_text().split(" ")[0]))
        assert f"running job {name}" in (tmp_path / "logs" / f"{name}.log").read_text()
    # params, input and wildcards reach the script as with script:, and the environment a script: job gets
    # (snakemake/shell.py: the job's threads for OpenMP and BLAS, its tmpdir resource as TMPDIR)
    assert (tmp_path / "out" / "ok_a.txt").read_text().endswith(f"hello <&> ok_a.py 2 2 {tmp_path / 'scratch'}")
    assert len(pids) == 2 and snakemake_pid not in pids
    # the failed and the killed job: no output, a message naming script, cause and log
    assert not (tmp_path / "out" / "fails.txt").exists() and not (tmp_path / "out" / "killed.txt").exists()
    assert "fails.py exited with status 1; see logs/fails.log" in proc.stderr
    assert "killed.py was ended by SIGKILL; see logs/killed.log" in proc.stderr
    assert "interrupted.py was interrupted (exit status 130: SIGINT, Ctrl-C); see logs/interrupted.log" in proc.stderr
    assert "ValueError: a corrupt table: row 3" in (tmp_path / "logs" / "fails.log").read_text()


@pytest.mark.slow
def test_without_threads_the_spawned_job_process_runs_the_script_itself(tmp_path):
    # no --force-use-threads: Snakemake spawns a process per run: job, which runs the script in place
    proc = run(tmp_path, "--workflow-profile", "none", targets=("out/ok_a.txt", "out/fails.txt"))
    pid = int((tmp_path / "out" / "ok_a.txt").read_text().split(" ")[0])
    assert pid != int((tmp_path / "snakemake.pid").read_text())
    assert "ValueError: a corrupt table: row 3" in (tmp_path / "logs" / "fails.log").read_text()
    assert not (tmp_path / "out" / "fails.txt").exists() and proc.returncode != 0


@pytest.mark.slow
def test_a_lost_exit_status_is_read_from_the_jobs_own_record_or_the_job_run_again_but_a_real_255_is_a_failure(tmp_path):
    # one job at a time: a server killed by one job must not take another's status with it
    proc = run(tmp_path, "--force-use-threads", targets=("lost", "real255"), cores=1, fresh=True)
    # finished under the dying server: its own record counts, it is not run again
    assert (tmp_path / "out" / "server_dies_job_finishes.txt").read_text() == "under the fork server"
    assert "lost the exit status of server_dies_job_finishes.py; the job recorded that it finished" in proc.stderr
    # killed with the server before it finished: run again, once, in a new process
    assert (tmp_path / "out" / "server_dies_job_fails.txt").read_text() == "in a new process"
    assert "lost server_dies_job_fails.py before it finished; running it again in a new process" in proc.stderr
    # a script that itself exits with 255 fails once, and is not taken for a lost status
    assert proc.returncode != 0 and "exits_255.py exited with status 255" in proc.stderr
    assert (tmp_path / "ran").read_text() == "x"  # it ran once


def test_an_edit_to_the_package_is_seen_against_the_fork_servers_start():
    import time

    from attnprof.runtime.jobs import _package_edited_since

    assert _package_edited_since(0) and not _package_edited_since(time.time() + 60)


@pytest.mark.slow
def test_a_job_does_not_outlive_a_killed_snakemake(tmp_path):
    """Snakemake killed (SIGKILL: no handler runs) while a job runs: the job's process ends within a second
    or so, and never writes its output later (over what a newer run may have written there)."""
    write(tmp_path)
    proc = subprocess.Popen(command(tmp_path, "--force-use-threads", targets=("out/slow.txt",)), env={**os.environ, "PYTHONPATH": str(SRC)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ((tmp_path / "slow.pid").exists() and (tmp_path / "slow.pid").read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        job, started = int((tmp_path / "slow.pid").read_text()), time.monotonic()
        assert job != proc.pid  # the job runs in a process of its own (a fork server's child)
        proc.kill()
        proc.wait()
        while time.monotonic() - started < 2.5:
            if not alive(job):  # gone, or a zombie that its new parent has yet to reap
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"job {job} outlived Snakemake by {time.monotonic() - started:.1f} s")
        time.sleep(max(0.0, started + 3.5 - time.monotonic()))  # past the moment it would have written
        assert not (tmp_path / "out" / "slow.txt").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_zombie_snakemake_is_gone():
    """Killed but not reaped (its parent may never reap it): the job's watch takes it for gone."""
    from attnprof.runtime.jobs import _alive, _process_start

    child = subprocess.Popen(["sleep", "30"])
    start = _process_start(child.pid)
    assert _alive(child.pid, start) and not _alive(child.pid, "1")  # a start time that is not its own: a reused pid
    child.kill()
    deadline = time.monotonic() + 10
    while alive(child.pid) and time.monotonic() < deadline:  # until it is a zombie
        time.sleep(0.02)
    assert not _alive(child.pid, start)
    child.wait()


def test_a_job_of_no_threads_gives_its_libraries_its_threads_param():
    """A capture client on a GPU run holds no core (0 threads) while its environment is the capture worker's key: its
    thread variables are the captures' (its ``threads`` param), as the environment record's job of 1 thread has them;
    a job of its own threads gets those."""
    from types import SimpleNamespace

    from attnprof.runtime.jobs import THREAD_VARIABLES, script_environment

    scratch = {"tmpdir": "/scratch"}
    client = SimpleNamespace(threads=0, params=SimpleNamespace(threads=1), resources=scratch)
    record = SimpleNamespace(threads=1, params=SimpleNamespace(threads=1), resources=scratch)
    light = SimpleNamespace(threads=3, params=SimpleNamespace(threads=1), resources={})
    assert script_environment(client) == script_environment(record) == {
        **dict.fromkeys(THREAD_VARIABLES, "1"), "TMPDIR": "/scratch", "TMP": "/scratch"}
    assert script_environment(light) == dict.fromkeys(THREAD_VARIABLES, "3")


def test_a_gpu_runs_start_reads_each_environments_torch_build_once(tmp_path, monkeypatch):
    """attnprof.runtime.jobs._start_workers, for an A/B run of two environments (another Python each): it connects to
    the supervisors whose keys it asks release_idle to keep (each listens here already), and reads each environment's
    torch build (a subprocess of its interpreter) once, for both (the stand-in builds tell the two keys apart)."""
    from attnprof.runtime import jobs, worker

    monkeypatch.setattr(os, "environ", dict(os.environ))  # _start_workers sets the jobs' variables in its process
    read, kept, pairs = [], [], []

    def build_of(exe, env):
        read.append(exe)
        return {"torch": f"2.{len(read)}", "cuda": None, "cudnn": None}

    def connect(addr):
        pairs.append((addr, *socket.socketpair()))
        return pairs[-1][1]

    monkeypatch.setattr(worker, "torch_build_of", build_of)
    monkeypatch.setattr(worker, "release_idle", lambda device, keep: kept.append(keep) or [])
    monkeypatch.setattr(worker, "_connect", connect)
    envs = [{"python": str(tmp_path / name / "python"), "env": {"AB": name}, "log": str(tmp_path / name / "w.log"),
             "gpu_choice": None} for name in ("base", "next")]
    jobs._start_workers("cpu", 5, {}, envs, 1)
    for _, ours, theirs in pairs:
        assert ours.fileno() == -1  # closed: a connection that sent nothing
        theirs.close()
    assert read == [os.path.abspath(e["python"]) for e in envs]  # once each
    assert len(kept) == 1 and len(kept[0]) == 2 and {a for a, _, _ in pairs} == {worker.address(k) for k in kept[0]}
